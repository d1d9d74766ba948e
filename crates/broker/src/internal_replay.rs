//! Replay of an internal topic's partition (`__consumer_offsets`, `__transaction_state`) from
//! its log start up to its log end: how a coordinator rebuilds its state when this broker
//! comes to lead one of those partitions.
//!
//! The log end, not the high watermark, as Kafka's `CoordinatorLoaderImpl` reads
//! (`FetchIsolation.LOG_END`): a new leader's HW lags the old leader's by a fetch round, so
//! records the old coordinator wrote and answered (committed there) may still sit above this
//! replica's HW; everything a leader holds becomes committed in its epoch (a leader never
//! truncates), and the coordinators answer nothing that depends on those records before the
//! HW passes them.

use crate::replica::Partition;
use bytes::Bytes;
use model::ErrorCode;

/// Largest decompressed batch accepted when replaying an internal topic.
const REPLAY_BATCH_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Bytes read from the log per step of the replay.
const REPLAY_READ_BYTES: usize = 1 << 20;

/// One entry of a replayed internal partition, in log order.
pub enum Replayed {
    /// A keyed record; `producer_id` is set when it was written inside a transaction (it
    /// counts only once that producer's COMMIT marker follows).
    Record {
        offset: i64,
        producer_id: Option<i64>,
        key: Bytes,
        value: Option<Bytes>,
    },
    /// A transaction's COMMIT (`commit`) or ABORT marker.
    Marker { producer_id: i64, commit: bool },
}

/// Reads partition `p` of `topic` from its log start to its log end and hands every
/// keyed record and every transaction marker to `apply`, in log order. Returns how many keyed
/// records were replayed. A failed read or a batch that does not decode is
/// COORDINATOR_LOAD_IN_PROGRESS (the load is retried; nothing past it is applied). Records
/// without a key carry no coordinator state and are skipped; so is the rest of a batch whose
/// records stop decoding part way (logged).
pub fn replay_partition(
    partition: &Partition,
    topic: &str,
    p: i32,
    mut apply: impl FnMut(Replayed),
) -> Result<u64, ErrorCode> {
    let mut offset = partition.log.log_start_offset();
    let end = partition.log.log_end_offset();
    let mut records = 0u64;
    while offset < end {
        let data = match partition.log.read(offset, REPLAY_READ_BYTES, end, true) {
            Ok(r) => r.data,
            Err(e) => {
                tracing::error!(topic, partition = p, offset, error = %e, "replay read failed");
                return Err(ErrorCode::CoordinatorLoadInProgress);
            }
        };
        if data.is_empty() {
            break;
        }
        let batches = record::split_batches(&data).map_err(|e| {
            tracing::error!(topic, partition = p, offset, error = %e, "corrupt batch in replay");
            ErrorCode::CoordinatorLoadInProgress
        })?;
        for batch in batches {
            let (header, iter) = record::decode_records(&batch, REPLAY_BATCH_BYTES_MAX)
                .map_err(|e| {
                    tracing::error!(topic, partition = p, offset, error = %e, "undecodable batch in replay");
                    ErrorCode::CoordinatorLoadInProgress
                })?;
            offset = header.next_offset();
            if header.is_control() {
                if let Some(m) = record::parse_end_txn_marker(&batch) {
                    apply(Replayed::Marker {
                        producer_id: header.producer_id,
                        commit: m.commit,
                    });
                }
                continue;
            }
            let producer_id = header.is_transactional().then_some(header.producer_id);
            for r in iter {
                let r = match r {
                    Ok(r) => r,
                    Err(e) => {
                        // The batch's CRC held, so its records were written this way: the
                        // rest of this batch is skipped (loudly) rather than the partition
                        // never loading, as for records the coordinator cannot read.
                        tracing::error!(topic, partition = p, base_offset = header.base_offset, error = %e, "skipping the rest of an undecodable batch in replay");
                        break;
                    }
                };
                let Some(key) = r.key else { continue };
                records += 1;
                apply(Replayed::Record {
                    offset: r.offset,
                    producer_id,
                    key,
                    value: r.value,
                });
            }
        }
    }
    if records > 0 {
        tracing::info!(topic, partition = p, records, "replayed internal partition");
    }
    Ok(records)
}
