//! Transactions on a partition leader: transactional appends verified with the transaction
//! coordinator (KIP-890 part 1), and transaction markers.
//!
//! A producer's first transactional batch on a partition (no transaction of it open here)
//! is appended only if the coordinator confirms that the partition is part of the
//! producer's ongoing transaction. Between that check and the append, a marker could close
//! the transaction (an abort racing the produce): the batch would then open a transaction
//! that no marker will ever close, and the last stable offset would hang behind it forever
//! (KAFKA-17754). So a verification takes a guard first; writing a marker for the producer
//! drops its guard; the append goes ahead only if its guard survived. Appends with an open
//! transaction and markers are serialised by the same lock, so "is a transaction open" and
//! the append are one step.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use model::ErrorCode;
use record::EndTxnMarker;
use storage::{AppendError, AppendInfo};

use crate::replica::Partition;

/// Verification guards of one partition, by producer id.
#[derive(Debug, Default)]
pub struct TxnGuards {
    inner: Mutex<Guards>,
}

#[derive(Debug, Default)]
struct Guards {
    next: u64,
    by_producer: HashMap<i64, u64>,
}

/// Why a transactional append was refused.
#[derive(Debug)]
pub enum TxnAppendError {
    /// The log refused it.
    Append(AppendError),
    /// The coordinator did not confirm the partition (its error), or a marker for the
    /// producer was written while it was being confirmed (`None`).
    NotVerified(Option<ErrorCode>),
}

impl TxnGuards {
    fn lock(&self) -> std::sync::MutexGuard<'_, Guards> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Partition {
    /// Appends a transactional producer's batches. If the producer has no open transaction
    /// here, `verify` asks the coordinator first (it runs without the partition's lock).
    pub fn append_transactional(
        self: &std::sync::Arc<Self>,
        batches: Bytes,
        producer_id: i64,
        verify: impl FnOnce() -> Result<(), ErrorCode>,
    ) -> Result<AppendInfo, TxnAppendError> {
        let guard = {
            let mut g = self.txn.lock();
            if self.log.has_ongoing_transaction(producer_id) {
                return self.append_locked(batches);
            }
            g.next += 1;
            let guard = g.next;
            g.by_producer.insert(producer_id, guard);
            guard
        };
        if let Err(e) = verify() {
            let mut g = self.txn.lock();
            if g.by_producer.get(&producer_id) == Some(&guard) {
                g.by_producer.remove(&producer_id);
            }
            return Err(TxnAppendError::NotVerified(Some(e)));
        }
        let mut g = self.txn.lock();
        if g.by_producer.get(&producer_id) != Some(&guard) {
            return Err(TxnAppendError::NotVerified(None));
        }
        g.by_producer.remove(&producer_id);
        self.append_locked(batches)
    }

    fn append_locked(
        self: &std::sync::Arc<Self>,
        batches: Bytes,
    ) -> Result<AppendInfo, TxnAppendError> {
        let info = self
            .log
            .append(batches, self.leader_epoch())
            .map_err(TxnAppendError::Append)?;
        self.advance_high_watermark();
        Ok(info)
    }

    /// Writes a COMMIT or ABORT marker for a producer (WriteTxnMarkers), dropping any
    /// verification in progress for it.
    pub fn append_txn_marker(
        self: &std::sync::Arc<Self>,
        producer_id: i64,
        producer_epoch: i16,
        marker: EndTxnMarker,
    ) -> Result<AppendInfo, AppendError> {
        let mut g = self.txn.lock();
        g.by_producer.remove(&producer_id);
        let info =
            self.log
                .append_txn_marker(producer_id, producer_epoch, marker, self.leader_epoch())?;
        drop(g);
        self.advance_high_watermark();
        Ok(info)
    }
}
