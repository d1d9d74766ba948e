//! Control records: the transaction markers (Kafka's `EndTransactionMarker`) that a partition
//! leader appends when a transaction commits or aborts.
//!
//! A marker is a batch of its own with the control and transactional attribute bits set, the
//! transaction's producer id and epoch, no sequence (-1), and exactly one record whose key is
//! the control record key (`version i16 = 0`, `type i16`: 0 = ABORT, 1 = COMMIT) and whose
//! value is the marker (`version i16 = 0`, `coordinator_epoch i32`). Consumers skip control
//! batches; read_committed consumers use ABORT markers to end the aborted ranges they were
//! told about in the Fetch response.

use bytes::{BufMut, Bytes, BytesMut};

use crate::builder::{BatchBuilder, NewRecord};
use crate::codec::Compression;
use crate::error::RecordError;
use crate::header::{validate_batch_structure, HEADER_LEN};
use crate::records::decode_records;

/// Control record type ABORT (Kafka's `ControlRecordType.ABORT`).
pub const CONTROL_TYPE_ABORT: i16 = 0;
/// Control record type COMMIT.
pub const CONTROL_TYPE_COMMIT: i16 = 1;

/// A decoded transaction marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndTxnMarker {
    /// True for COMMIT, false for ABORT.
    pub commit: bool,
    /// The epoch of the transaction coordinator that wrote it (its `__transaction_state`
    /// partition's leader epoch); a marker from an older coordinator is fenced.
    pub coordinator_epoch: i32,
}

/// The 4-byte control record key of a marker.
pub fn control_key(commit: bool) -> Bytes {
    let mut b = BytesMut::with_capacity(4);
    b.put_i16(0);
    b.put_i16(if commit {
        CONTROL_TYPE_COMMIT
    } else {
        CONTROL_TYPE_ABORT
    });
    b.freeze()
}

/// Builds the marker batch for a producer (offset 0; the log assigns the real one).
pub fn build_end_txn_marker(
    producer_id: i64,
    producer_epoch: i16,
    marker: EndTxnMarker,
    timestamp_ms: i64,
) -> Result<Bytes, RecordError> {
    let mut value = BytesMut::with_capacity(6);
    value.put_i16(0);
    value.put_i32(marker.coordinator_epoch);
    let mut b = BatchBuilder::new(Compression::None)
        .producer(producer_id, producer_epoch, -1)
        .transactional(true)
        .control(true);
    b.push(NewRecord::new(
        Some(control_key(marker.commit)),
        Some(value.freeze()),
        timestamp_ms,
    ));
    b.build()
}

/// Decodes the marker of a control batch: None when the batch is not a control batch, its
/// first record is not a COMMIT/ABORT control record, or the bytes are malformed. A marker
/// value too short for the coordinator epoch reads as epoch -1 rather than failing, so a
/// truncated but CRC-valid marker still ends its transaction.
pub fn parse_end_txn_marker(batch: &[u8]) -> Option<EndTxnMarker> {
    let h = validate_batch_structure(batch).ok()?;
    if !h.is_control() || batch.len() < HEADER_LEN {
        return None;
    }
    let bytes = Bytes::copy_from_slice(batch);
    let (_, mut records) = decode_records(&bytes, 1 << 16).ok()?;
    let r = records.next()?.ok()?;
    let key = r.key?;
    let commit = match key.get(..4)? {
        [_, _, 0, 0] => false,
        [_, _, 0, 1] => true,
        _ => return None,
    };
    let coordinator_epoch = r
        .value
        .as_deref()
        .and_then(|v| v.get(2..6))
        .map(|e| i32::from_be_bytes([e[0], e[1], e[2], e[3]]))
        .unwrap_or(-1);
    Some(EndTxnMarker {
        commit,
        coordinator_epoch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::BatchHeader;

    #[test]
    fn marker_round_trips_with_kafka_layout() {
        for commit in [true, false] {
            let m = EndTxnMarker {
                commit,
                coordinator_epoch: 7,
            };
            let b = build_end_txn_marker(42, 3, m, 1000).unwrap();
            let h = BatchHeader::parse(&b).unwrap();
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.base_sequence),
                (42, 3, -1)
            );
            assert_eq!(h.records_count, 1);
            assert_eq!(parse_end_txn_marker(&b), Some(m));
            let (_, mut it) = decode_records(&b, 1 << 16).unwrap();
            let r = it.next().unwrap().unwrap();
            assert_eq!(&r.key.unwrap()[..], &[0, 0, 0, u8::from(commit)]);
            assert_eq!(&r.value.unwrap()[..], &[0, 0, 0, 0, 0, 7]);
        }
    }

    #[test]
    fn non_markers_and_garbage_are_none() {
        let mut b = BatchBuilder::new(Compression::None);
        b.push(NewRecord::value("x"));
        assert_eq!(parse_end_txn_marker(&b.build().unwrap()), None);
        assert_eq!(parse_end_txn_marker(&[1, 2, 3]), None);
        let m = build_end_txn_marker(
            1,
            0,
            EndTxnMarker {
                commit: true,
                coordinator_epoch: 0,
            },
            0,
        )
        .unwrap();
        for cut in 0..m.len() {
            assert_eq!(parse_end_txn_marker(&m[..cut]), None);
        }
    }
}
