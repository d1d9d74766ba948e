//! Building v2 batches from records (broker internal topics, compaction, the client).

use bytes::Bytes;

use crate::codec::{compress, Compression};
use crate::error::RecordError;
use crate::header::{
    attributes, recompute_crc, TimestampKind, HEADER_LEN, LOG_OVERHEAD, MAGIC_V2, NO_PRODUCER_ID,
    NO_SEQUENCE,
};
use crate::records::RecordHeader;
use crate::varint::{write_varint, write_varlong};

/// A record to be written: key, value, headers and its (CreateTime) timestamp.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NewRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<RecordHeader>,
    pub timestamp: i64,
}

impl NewRecord {
    pub fn new(key: Option<Bytes>, value: Option<Bytes>, timestamp: i64) -> NewRecord {
        NewRecord {
            key,
            value,
            headers: Vec::new(),
            timestamp,
        }
    }

    /// A keyless record with this value and timestamp 0.
    pub fn value(v: impl Into<Bytes>) -> NewRecord {
        NewRecord {
            value: Some(v.into()),
            ..NewRecord::default()
        }
    }

    pub fn key(mut self, k: impl Into<Bytes>) -> NewRecord {
        self.key = Some(k.into());
        self
    }

    pub fn timestamp(mut self, ts: i64) -> NewRecord {
        self.timestamp = ts;
        self
    }

    pub fn header(mut self, key: impl Into<Bytes>, value: Option<Bytes>) -> NewRecord {
        self.headers.push(RecordHeader {
            key: key.into(),
            value,
        });
        self
    }
}

/// Accumulates records and produces one v2 batch. Records are encoded as they are pushed,
/// into one growing buffer; `build` compresses it once and writes the header.
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    compression: Compression,
    base_offset: i64,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    control: bool,
    timestamp_type: TimestampKind,
    body: Vec<u8>,
    scratch: Vec<u8>,
    count: i32,
    base_timestamp: Option<i64>,
    max_timestamp: i64,
    last_offset_delta: i32,
}

fn write_opt(out: &mut Vec<u8>, b: Option<&Bytes>) {
    match b {
        None => write_varint(out, -1),
        Some(b) => {
            write_varint(out, b.len() as i32);
            out.extend_from_slice(b);
        }
    }
}

impl BatchBuilder {
    pub fn new(compression: Compression) -> BatchBuilder {
        BatchBuilder {
            compression,
            base_offset: 0,
            partition_leader_epoch: -1,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: -1,
            base_sequence: NO_SEQUENCE,
            transactional: false,
            control: false,
            timestamp_type: TimestampKind::CreateTime,
            body: Vec::new(),
            scratch: Vec::new(),
            count: 0,
            base_timestamp: None,
            max_timestamp: -1,
            last_offset_delta: -1,
        }
    }

    pub fn base_offset(mut self, base_offset: i64) -> Self {
        self.base_offset = base_offset;
        self
    }

    pub fn partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }

    /// Marks the batch as from an idempotent producer.
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }

    pub fn transactional(mut self, yes: bool) -> Self {
        self.transactional = yes;
        self
    }

    pub fn control(mut self, yes: bool) -> Self {
        self.control = yes;
        self
    }

    pub fn timestamp_type(mut self, t: TimestampKind) -> Self {
        self.timestamp_type = t;
        self
    }

    /// Forces the batch's base timestamp (compaction keeps the original one so record
    /// timestamp deltas stay meaningful). Must be called before the first push.
    pub fn base_timestamp(mut self, ts: i64) -> Self {
        self.base_timestamp = Some(ts);
        self
    }

    /// Forces the offset span of the batch (compaction keeps the original last offset
    /// delta even when the records at its end were removed). Never lowers it.
    pub fn last_offset_delta(mut self, delta: i32) -> Self {
        self.last_offset_delta = self.last_offset_delta.max(delta);
        self
    }

    /// Appends a record at the next offset.
    pub fn push(&mut self, r: NewRecord) {
        let delta = self.last_offset_delta.saturating_add(1);
        self.push_at(delta, &r);
    }

    /// Appends a record at an explicit offset delta (must be increasing).
    pub fn push_at(&mut self, offset_delta: i32, r: &NewRecord) {
        debug_assert!(self.count == 0 || offset_delta > self.last_offset_delta);
        let base_ts = *self.base_timestamp.get_or_insert(r.timestamp);
        self.max_timestamp = self.max_timestamp.max(r.timestamp);
        let s = &mut self.scratch;
        s.clear();
        s.push(0); // record attributes: unused in v2
        write_varlong(s, r.timestamp.wrapping_sub(base_ts));
        write_varint(s, offset_delta);
        write_opt(s, r.key.as_ref());
        write_opt(s, r.value.as_ref());
        write_varint(s, r.headers.len() as i32);
        for h in &r.headers {
            write_opt(s, Some(&h.key));
            write_opt(s, h.value.as_ref());
        }
        write_varint(&mut self.body, s.len() as i32);
        self.body.extend_from_slice(s);
        self.count += 1;
        self.last_offset_delta = self.last_offset_delta.max(offset_delta);
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Uncompressed size of the batch so far; an upper bound for callers that cap batches.
    pub fn estimated_size(&self) -> usize {
        HEADER_LEN + self.body.len()
    }

    /// Encodes the batch. An empty builder yields a valid batch with zero records (as
    /// compaction may need to keep a producer's last batch).
    pub fn build(&self) -> Result<Bytes, RecordError> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.body.len());
        out.resize(HEADER_LEN, 0);
        compress(self.compression, &self.body, &mut out)?;
        let batch_length =
            i32::try_from(out.len() - LOG_OVERHEAD).map_err(|_| RecordError::TooLarge {
                size: out.len(),
                max: i32::MAX as usize,
            })?;
        let attrs = attributes(
            self.compression,
            self.timestamp_type,
            self.transactional,
            self.control,
        );
        let base_ts = self.base_timestamp.unwrap_or(-1);
        out[0..8].copy_from_slice(&self.base_offset.to_be_bytes());
        out[8..12].copy_from_slice(&batch_length.to_be_bytes());
        out[12..16].copy_from_slice(&self.partition_leader_epoch.to_be_bytes());
        out[16] = MAGIC_V2 as u8;
        out[21..23].copy_from_slice(&attrs.to_be_bytes());
        out[23..27].copy_from_slice(&self.last_offset_delta.max(0).to_be_bytes());
        out[27..35].copy_from_slice(&base_ts.to_be_bytes());
        let max_ts = if self.count == 0 {
            base_ts
        } else {
            self.max_timestamp
        };
        out[35..43].copy_from_slice(&max_ts.to_be_bytes());
        out[43..51].copy_from_slice(&self.producer_id.to_be_bytes());
        out[51..53].copy_from_slice(&self.producer_epoch.to_be_bytes());
        out[53..57].copy_from_slice(&self.base_sequence.to_be_bytes());
        out[57..61].copy_from_slice(&self.count.to_be_bytes());
        recompute_crc(&mut out)?;
        Ok(Bytes::from(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_records, validate_batch};
    use proptest::prelude::*;

    fn arb_record() -> impl Strategy<Value = NewRecord> {
        let bytes = || {
            proptest::option::of(
                proptest::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from),
            )
        };
        (
            bytes(),
            bytes(),
            proptest::collection::vec(
                (
                    proptest::collection::vec(any::<u8>(), 0..8).prop_map(Bytes::from),
                    bytes(),
                ),
                0..3,
            ),
            0i64..2_000_000_000_000,
        )
            .prop_map(|(key, value, headers, timestamp)| NewRecord {
                key,
                value,
                headers: headers
                    .into_iter()
                    .map(|(key, value)| RecordHeader { key, value })
                    .collect(),
                timestamp,
            })
    }

    proptest! {
        #[test]
        fn build_validate_iterate_round_trip(
            records in proptest::collection::vec(arb_record(), 1..40),
            id in 0u8..5,
            base in 0i64..1_000_000,
            pid in -1i64..5,
        ) {
            let codec = Compression::from_id(id).unwrap();
            let mut b = BatchBuilder::new(codec).base_offset(base);
            if pid >= 0 {
                b = b.producer(pid, 3, 17);
            }
            for r in &records {
                b.push(r.clone());
            }
            let batch = b.build().unwrap();
            let h = validate_batch(&batch, 1 << 24).unwrap();
            prop_assert_eq!(h.records_count as usize, records.len());
            prop_assert_eq!(h.compression().unwrap(), codec);
            prop_assert_eq!(h.max_timestamp, records.iter().map(|r| r.timestamp).max().unwrap());
            let (_, it) = decode_records(&batch, 1 << 24).unwrap();
            let got: Vec<_> = it.collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(got.len(), records.len());
            for (i, (g, r)) in got.iter().zip(&records).enumerate() {
                prop_assert_eq!(g.offset, base + i as i64);
                prop_assert_eq!(g.timestamp, r.timestamp);
                prop_assert_eq!(&g.key, &r.key);
                prop_assert_eq!(&g.value, &r.value);
                prop_assert_eq!(&g.headers, &r.headers);
            }
        }
    }

    #[test]
    fn empty_batch_is_structurally_valid() {
        let b = BatchBuilder::new(Compression::None)
            .producer(5, 1, 10)
            .last_offset_delta(3);
        let batch = b.build().unwrap();
        let h = crate::validate_batch_structure(&batch).unwrap();
        assert_eq!(h.records_count, 0);
        assert_eq!(h.last_offset_delta, 3);
        assert!(validate_batch(&batch, 1 << 20).is_err());
    }
}
