//! Fetch responses as a list of byte chunks, so record data read from the log is written to
//! the socket as it is (vectored writes) instead of being copied into one frame.
//!
//! The response is encoded by `kafka-protocol` without its record bytes, twice: once with every
//! present records field null and once empty. The two encodings differ exactly at those fields'
//! length prefixes (null and empty have different lengths of the same width: `-1` vs `0` as an
//! i32 before v12, `0` vs `1` as a compact varint from v12 on), which gives their positions;
//! the chunks are then: the bytes up to a length prefix, the real length, the record bytes,
//! and so on. Everything but the record bytes thus comes from `kafka-protocol`'s own encoder,
//! and a test checks the chunks against its encoding of the full response, byte for byte.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, FetchResponse, ResponseKind};

use crate::{encode_response, EncodeError};

/// First Fetch version with flexible (compact) encodings.
const FIRST_FLEXIBLE: i16 = 12;

/// Encodes a Fetch response frame (size prefix included) as chunks whose concatenation is
/// exactly what [`encode_response`] produces; each partition's record bytes are their own
/// chunk, shared with the caller's `Bytes`, not copied.
pub fn encode_fetch_response(
    version: i16,
    correlation_id: i32,
    mut resp: FetchResponse,
) -> Result<Vec<Bytes>, EncodeError> {
    let err = |reason: String| EncodeError {
        api: ApiKey::Fetch,
        version,
        reason,
    };
    let mut records: Vec<Bytes> = Vec::new();
    for t in &mut resp.responses {
        for p in &mut t.partitions {
            if let Some(r) = p.records.take() {
                records.push(r);
                p.records = Some(Bytes::new());
            }
        }
    }
    let empty = encode_response(
        ApiKey::Fetch,
        version,
        correlation_id,
        &ResponseKind::Fetch(resp.clone()),
    )?;
    for t in &mut resp.responses {
        for p in &mut t.partitions {
            if p.records.is_some() {
                p.records = None;
            }
        }
    }
    let null = encode_response(
        ApiKey::Fetch,
        version,
        correlation_id,
        &ResponseKind::Fetch(resp),
    )?;
    if empty.len() != null.len() {
        return Err(err(
            "null and empty records encode to different sizes".into()
        ));
    }
    let width = if version >= FIRST_FLEXIBLE { 1 } else { 4 };
    let mut chunks = Vec::with_capacity(2 * records.len() + 1);
    let mut small = BytesMut::with_capacity(empty.len() + 5 * records.len());
    let mut total = empty.len() - 4;
    // The size prefix is rewritten at the end; the rest is copied around the length fields.
    small.put_slice(&[0; 4]);
    let mut from = 4;
    let mut next = records.into_iter();
    let mut i = 4;
    while i < empty.len() {
        if empty[i] == null[i] {
            i += 1;
            continue;
        }
        let rec = next
            .next()
            .ok_or_else(|| err("more records fields than records".into()))?;
        small.put_slice(&empty[from..i]);
        total -= width;
        let before = small.len();
        if version >= FIRST_FLEXIBLE {
            put_uvarint(&mut small, rec.len() as u64 + 1);
        } else {
            let len = i32::try_from(rec.len()).map_err(|_| err("records over 2 GiB".into()))?;
            small.put_i32(len);
        }
        total += small.len() - before + rec.len();
        if !rec.is_empty() {
            chunks.push(small.split().freeze());
            chunks.push(rec);
        }
        i += width;
        from = i;
    }
    if next.next().is_some() {
        return Err(err("fewer records fields than records".into()));
    }
    small.put_slice(&empty[from..]);
    chunks.push(small.freeze());
    let total = i32::try_from(total).map_err(|_| err("response over 2 GiB".into()))?;
    let mut first = BytesMut::from(&chunks[0][..]);
    first[..4].copy_from_slice(&total.to_be_bytes());
    chunks[0] = first.freeze();
    Ok(chunks)
}

fn put_uvarint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, FetchableTopicResponse, PartitionData,
    };
    use kafka_protocol::messages::{ProducerId, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use proptest::prelude::*;

    fn response(version: i16, parts: &[(Option<Vec<u8>>, i16)]) -> FetchResponse {
        let partitions = parts
            .iter()
            .enumerate()
            .map(|(i, (records, error))| {
                let mut p = PartitionData::default()
                    .with_partition_index(i as i32)
                    .with_error_code(*error)
                    .with_high_watermark(1000 + i as i64)
                    .with_records(records.clone().map(Bytes::from));
                if version >= 4 {
                    p = p
                        .with_last_stable_offset(900)
                        .with_aborted_transactions(Some(vec![AbortedTransaction::default()
                            .with_producer_id(ProducerId(7))
                            .with_first_offset(3)]));
                }
                if version >= 5 {
                    p = p.with_log_start_offset(2);
                }
                p
            })
            .collect();
        let mut t = FetchableTopicResponse::default().with_partitions(partitions);
        if version >= 13 {
            t = t.with_topic_id(uuid_of(9));
        } else {
            t = t.with_topic(TopicName(StrBytes::from_static_str("orders")));
        }
        let mut r = FetchResponse::default().with_responses(vec![t.clone(), t]);
        if version >= 7 {
            r = r.with_session_id(12);
        }
        r
    }

    fn uuid_of(n: u8) -> uuid::Uuid {
        uuid::Uuid::from_bytes([n; 16])
    }

    fn check(version: i16, parts: &[(Option<Vec<u8>>, i16)]) {
        let r = response(version, parts);
        let whole =
            encode_response(ApiKey::Fetch, version, 77, &ResponseKind::Fetch(r.clone())).unwrap();
        let chunks = encode_fetch_response(version, 77, r).unwrap();
        let joined: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        assert_eq!(joined, whole.to_vec(), "v{version} {parts:?}");
    }

    #[test]
    fn chunks_equal_the_whole_encoding_in_every_version() {
        for version in 4..=17 {
            check(version, &[]);
            check(version, &[(None, 1)]);
            check(version, &[(Some(vec![]), 0)]);
            check(
                version,
                &[
                    (Some(vec![0xff; 300]), 0),
                    (None, 3),
                    (Some(vec![1; 70_000]), 0),
                ],
            );
        }
    }

    #[test]
    fn record_bytes_are_shared_not_copied() {
        let data = Bytes::from(vec![5u8; 1 << 20]);
        let p = PartitionData::default().with_records(Some(data.clone()));
        let r = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![p])]);
        let chunks = encode_fetch_response(11, 1, r).unwrap();
        assert!(chunks
            .iter()
            .any(|c| c.as_ptr() == data.as_ptr() && c.len() == data.len()));
        assert!(chunks.iter().map(|c| c.len()).sum::<usize>() < (1 << 20) + 200);
    }

    proptest! {
        #[test]
        fn random_responses_match(version in 4i16..=17, parts in proptest::collection::vec(
            (proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200)), 0i16..4), 0..6)) {
            check(version, &parts);
        }
    }
}
