//! Partition logs on disk in Kafka's layout: segments of v2 batches with sparse offset and
//! time indexes, recovery, retention, compaction, idempotent-producer state and group commit.
//!
//! *Invariant:* this crate knows nothing of the wire protocol, the network or replication;
//! it depends on `model` and `record` only.
//!
//! Layout of a partition directory `<topic>-<partition>/` (Kafka's): `<base:020>.log`
//! (v2 batches exactly as produced, with broker-assigned base offsets), `<base:020>.index`
//! (relative batch base offset -> position, every `index.interval.bytes`),
//! `<base:020>.timeindex` (max timestamp so far -> relative offset), `<base:020>.txnindex`
//! (aborted transactions whose ABORT marker is in the segment), `<offset:020>.snapshot`
//! (producer state: idempotence and open transactions), `log-start-offset` (DeleteRecords), `cleaner-offset`
//! (compaction checkpoint), `leader-epoch-checkpoint` (leader epoch -> start offset, Kafka's
//! text format) and `.clean-shutdown` (present only between `close` and the next
//! open).
//!
//! Guarantees:
//! - *Invariant:* every segment except the last is fsynced, with index files, before the
//!   next one is created; so recovery after a crash scans only the last segment (every
//!   batch CRC-checked), and a clean shutdown scans only the bytes after the last index
//!   entry. Only bytes at or after the log's recovery point (Kafka's
//!   `recovery-point-offset-checkpoint`, at least the last segment's base) are ever cut as a
//!   torn tail; damage below it, in a sealed segment or after a clean shutdown fails the open
//!   and changes nothing on disk (`recovery`).
//! - *Invariant:* a refused append writes nothing; a failed write is cut back; a failed
//!   fsync takes the log offline for good.
//! - *Invariant:* readers only see whole, indexed batches below the published end.
//!
//! `Log::append`, `read`, `flush` and the maintenance calls do blocking file I/O (page-cache
//! speed except for fsyncs); async callers with strict latency needs should run them on a
//! blocking pool. `wait_durable` is async and cheap.

// Tests may unwrap: a panic there is a test failure, which is the point.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod cleaner;
mod clock;
mod epoch;
mod error;
mod flusher;
mod index;
mod log;
pub mod metrics;
mod producer;
mod recovery;
mod segment;
mod txn_index;

pub use clock::{Clock, ManualClock, SystemClock};
pub use epoch::{
    EpochEndOffset, EpochEntry, LeaderEpochCache, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET,
};
pub use error::{AppendError, ReadError, StorageError};
pub use flusher::Flusher;
pub use log::{
    AppendInfo, CompactionStats, Log, LogOptions, OfflineCause, ReadResult, RetentionStats,
    PRODUCER_ID_EXPIRATION_MS,
};
pub use producer::{ProducerSnapshot, RETAINED_BATCHES};
pub use recovery::{
    read_offset_checkpoint, read_recovery_points, write_offset_checkpoint, write_recovery_points,
    HIGH_WATERMARK_FILE, RECOVERY_POINT_FILE,
};
pub use txn_index::{AbortedTxn, TXN_INDEX_ENTRY_BYTES};

#[cfg(test)]
mod tests {
    /// The broker shares a `Log` across tasks as `Arc<Log>`.
    #[test]
    fn log_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<crate::Log>();
    }
}
