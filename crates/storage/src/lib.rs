//! Partition logs on disk in Kafka's layout: segments of v2 batches with sparse offset and
//! time indexes, recovery, retention, compaction, idempotent-producer state and group commit.
//!
//! *Invariant:* this crate knows nothing of the wire protocol, the network or replication;
//! it depends on `model` and `record` only.

// Tests may unwrap: a panic there is a test failure, which is the point.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod cleaner;
mod clock;
mod error;
mod index;
mod log;
mod producer;
mod segment;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{AppendError, ReadError, StorageError};
pub use log::{AppendInfo, CompactionStats, Log, ReadResult, RetentionStats};
pub use producer::RETAINED_BATCHES;

#[cfg(test)]
mod tests {
    /// The broker shares a `Log` across tasks as `Arc<Log>`.
    #[test]
    fn log_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<crate::Log>();
    }
}
