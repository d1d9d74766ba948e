//! Kafka's own binary formats for `__transaction_state` records (TransactionLogKey /
//! TransactionLogValue), so Kafka's tools could read a Moldau transaction log. Decoding is
//! bounded and panic-free, like `records`.
//!
//! Layout (big-endian):
//! - key: `type i16 = 0` (the TRANSACTION_LOG coordinator record type), `transactional_id
//!   string`.
//! - value v0: `producer_id i64, producer_epoch i16, transaction_timeout_ms i32,
//!   transaction_status i8, transaction_partitions [topic string, partition_ids [i32]]?
//!   (null unless the state has partitions), last_update_timestamp_ms i64,
//!   start_timestamp_ms i64`.
//! - value v1: the same fields in the flexible encoding (compact lengths, tagged fields), with
//!   tagged fields 0 `previous_producer_id i64`, 1 `next_producer_id i64`,
//!   2 `client_transaction_version i16` (and later ones, skipped).
//!
//! Kafka writes v0 for clients below transaction version 2, and v1 (with the tags) for
//! transaction version 2; Moldau does the same.

use std::collections::BTreeSet;

use bytes::{BufMut, Bytes, BytesMut};

use crate::records::{put_string, Reader};
use crate::txn::TxnState;
use crate::Error;

/// The key type of transaction log records.
const TRANSACTION_LOG_KEY_TYPE: i16 = 0;

/// The persisted part of one transactional id's state: one TransactionLogValue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnValue {
    pub producer_id: i64,
    /// The producer id of the last committed transaction (TV2), -1 when none.
    pub prev_producer_id: i64,
    /// The producer id the client will get next (TV2 epoch overflow), -1 when none.
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// Kafka does not persist it in v0; kept in memory to recognise retried epoch bumps.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// The partitions of the transaction (empty unless Ongoing or Prepare*).
    pub partitions: BTreeSet<(String, i32)>,
    /// When the first partition was added, -1 when no transaction ran yet.
    pub start_ms: i64,
    pub last_update_ms: i64,
    /// The transaction version the client used (0-2).
    pub client_txn_version: i16,
}

/// Encodes a transaction log key.
pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(4 + transactional_id.len());
    b.put_i16(TRANSACTION_LOG_KEY_TYPE);
    put_string(&mut b, transactional_id);
    b.freeze()
}

/// Decodes a transaction log key: Some(transactional id), or None for a key type this
/// coordinator does not know (replay skips it).
pub fn decode_key(bytes: &[u8]) -> Result<Option<String>, Error> {
    let mut r = Reader::new(bytes);
    match r.i16()? {
        TRANSACTION_LOG_KEY_TYPE => Ok(Some(r.string()?)),
        _ => Ok(None),
    }
}

/// Encodes a value: v1 for transaction version 2 clients, v0 otherwise (as Kafka).
pub fn encode_value(v: &TxnValue) -> Bytes {
    let flexible = v.client_txn_version >= 2;
    let mut b = BytesMut::with_capacity(64);
    b.put_i16(i16::from(flexible));
    b.put_i64(v.producer_id);
    b.put_i16(v.producer_epoch);
    b.put_i32(v.timeout_ms);
    b.put_i8(v.state.id());
    // Partitions grouped by topic, null when the state has none (Kafka writes null for
    // Empty; an empty list otherwise).
    let mut topics: Vec<(&str, Vec<i32>)> = Vec::new();
    for (t, p) in &v.partitions {
        match topics.last_mut() {
            Some((last, ps)) if *last == t.as_str() => ps.push(*p),
            _ => topics.push((t.as_str(), vec![*p])),
        }
    }
    let null = v.state == TxnState::Empty;
    if flexible {
        put_uvarint(&mut b, if null { 0 } else { topics.len() as u32 + 1 });
        if !null {
            for (t, ps) in &topics {
                put_compact_string(&mut b, t);
                put_uvarint(&mut b, ps.len() as u32 + 1);
                for p in ps {
                    b.put_i32(*p);
                }
                put_uvarint(&mut b, 0);
            }
        }
    } else if null {
        b.put_i32(-1);
    } else {
        b.put_i32(topics.len() as i32);
        for (t, ps) in &topics {
            put_string(&mut b, t);
            b.put_i32(ps.len() as i32);
            for p in ps {
                b.put_i32(*p);
            }
        }
    }
    b.put_i64(v.last_update_ms);
    b.put_i64(v.start_ms);
    if flexible {
        let mut tags: Vec<(u32, Vec<u8>)> = Vec::new();
        if v.prev_producer_id != -1 {
            tags.push((0, v.prev_producer_id.to_be_bytes().to_vec()));
        }
        if v.next_producer_id != -1 {
            tags.push((1, v.next_producer_id.to_be_bytes().to_vec()));
        }
        if v.client_txn_version != 0 {
            tags.push((2, v.client_txn_version.to_be_bytes().to_vec()));
        }
        put_uvarint(&mut b, tags.len() as u32);
        for (tag, data) in tags {
            put_uvarint(&mut b, tag);
            put_uvarint(&mut b, data.len() as u32);
            b.put_slice(&data);
        }
    }
    b.freeze()
}

/// Decodes a value (v0 or v1).
pub fn decode_value(bytes: &[u8]) -> Result<TxnValue, Error> {
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    if !(0..=1).contains(&version) {
        return Err(Error::UnsupportedVersion {
            what: "transaction log value",
            version,
        });
    }
    r.flexible = version >= 1;
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let timeout_ms = r.i32()?;
    let status = r.take(1)?[0] as i8;
    let state = TxnState::from_id(status).ok_or(Error::Corrupt("unknown transaction status"))?;
    let mut partitions = BTreeSet::new();
    // A topic takes at least a length and an array length.
    let topics = r.array_len(if r.flexible { 2 } else { 6 })?;
    for _ in 0..topics {
        let topic = r.string()?;
        let n = r.array_len(4)?;
        for _ in 0..n {
            partitions.insert((topic.clone(), r.i32()?));
        }
        r.tagged_fields_with(|_, _| Ok(()))?;
    }
    let last_update_ms = r.i64()?;
    let start_ms = r.i64()?;
    let mut prev_producer_id = -1;
    let mut next_producer_id = -1;
    let mut client_txn_version = 0;
    r.tagged_fields_with(|tag, data| {
        let mut t = Reader::new(data);
        match tag {
            0 => prev_producer_id = t.i64()?,
            1 => next_producer_id = t.i64()?,
            2 => client_txn_version = t.i16()?,
            _ => {}
        }
        Ok(())
    })?;
    if state == TxnState::Empty {
        // Kafka ignores partitions of an Empty state.
        partitions.clear();
    }
    Ok(TxnValue {
        producer_id,
        prev_producer_id,
        next_producer_id,
        producer_epoch,
        last_producer_epoch: -1,
        timeout_ms,
        state,
        partitions,
        start_ms,
        last_update_ms,
        client_txn_version,
    })
}

fn put_uvarint(b: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

fn put_compact_string(b: &mut BytesMut, s: &str) {
    put_uvarint(b, s.len() as u32 + 1);
    b.put_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value(state: TxnState, parts: &[(&str, i32)], tv: i16) -> TxnValue {
        TxnValue {
            producer_id: 1000,
            prev_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: 3,
            last_producer_epoch: -1,
            timeout_ms: 60_000,
            state,
            partitions: parts.iter().map(|(t, p)| (t.to_string(), *p)).collect(),
            start_ms: if parts.is_empty() { -1 } else { 5 },
            last_update_ms: 9,
            client_txn_version: tv,
        }
    }

    #[test]
    fn key_golden_bytes() {
        let k = encode_key("tx");
        assert_eq!(&k[..], &[0, 0, 0, 2, b't', b'x']);
        assert_eq!(decode_key(&k).ok(), Some(Some("tx".to_string())));
        assert_eq!(decode_key(&[0, 1, 0, 0]).ok(), Some(None));
    }

    #[test]
    fn value_v0_golden_bytes() {
        let v = value(TxnState::Ongoing, &[("a", 1), ("a", 0), ("b", 2)], 0);
        let b = encode_value(&v);
        let mut want = vec![0u8, 0];
        want.extend_from_slice(&1000i64.to_be_bytes());
        want.extend_from_slice(&3i16.to_be_bytes());
        want.extend_from_slice(&60_000i32.to_be_bytes());
        want.push(1); // Ongoing
        want.extend_from_slice(&2i32.to_be_bytes());
        want.extend_from_slice(&[0, 1, b'a', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1]);
        want.extend_from_slice(&[0, 1, b'b', 0, 0, 0, 1, 0, 0, 0, 2]);
        want.extend_from_slice(&9i64.to_be_bytes());
        want.extend_from_slice(&5i64.to_be_bytes());
        assert_eq!(&b[..], &want[..]);
        assert_eq!(decode_value(&b).ok(), Some(v));
        // Empty writes a null partition list.
        let e = encode_value(&value(TxnState::Empty, &[], 0));
        assert_eq!(&e[17..21], &[0xff, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn value_v1_round_trips_with_tags() {
        let mut v = value(TxnState::PrepareCommit, &[("t", 0)], 2);
        v.prev_producer_id = 7;
        v.next_producer_id = 8;
        let b = encode_value(&v);
        assert_eq!(&b[..2], &[0, 1]);
        assert_eq!(decode_value(&b).ok(), Some(v));
    }

    fn arb_state() -> impl Strategy<Value = TxnState> {
        (0i8..8).prop_map(|i| TxnState::from_id(i).unwrap_or(TxnState::Empty))
    }

    proptest! {
        #[test]
        fn values_round_trip(pid in any::<i64>(), epoch in any::<i16>(), timeout in any::<i32>(),
                             state in arb_state(), tv in prop_oneof![Just(0i16), Just(2i16)],
                             parts in proptest::collection::btree_set(("[a-z]{1,5}", 0i32..100), 0..6),
                             start in any::<i64>(), upd in any::<i64>()) {
            let v = TxnValue {
                producer_id: pid, prev_producer_id: -1, next_producer_id: -1,
                producer_epoch: epoch, last_producer_epoch: -1, timeout_ms: timeout, state,
                partitions: if state == TxnState::Empty { BTreeSet::new() } else { parts },
                start_ms: start, last_update_ms: upd, client_txn_version: tv,
            };
            prop_assert_eq!(decode_value(&encode_value(&v)).ok(), Some(v));
        }

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = decode_key(&bytes);
            let _ = decode_value(&bytes);
        }
    }
}
