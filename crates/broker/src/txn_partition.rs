//! Transactions on a partition leader: transactional appends verified with the transaction
//! coordinator (KIP-890 part 1), and transaction markers.
//!
//! A producer's first transactional batch on a partition (no transaction of it open here)
//! is appended only if the coordinator confirms that the partition is part of the
//! producer's ongoing transaction. Between that check and the append, a marker could close
//! the transaction (an abort racing the produce): the batch would then open a transaction
//! that no marker will ever close, and the last stable offset would hang behind it forever
//! (KAFKA-17754). So a verification takes a guard first; writing a marker for the producer
//! drops its guards; the append goes ahead only if its guard survived. Appends with an open
//! transaction and markers are serialised by the same lock, so "is a transaction open" and
//! the append are one step. A verification with a coordinator on another broker takes its
//! guard before the request goes out (`begin_verification`) and checks it when the append
//! runs (`verification_alive`), so a marker written while the answer travels is seen too.

use std::collections::{HashMap, HashSet};
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
    /// Guards of verifications in progress, by producer id.
    by_producer: HashMap<i64, HashSet<u64>>,
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

impl Guards {
    fn take(&mut self, producer_id: i64) -> u64 {
        self.next += 1;
        self.by_producer
            .entry(producer_id)
            .or_default()
            .insert(self.next);
        self.next
    }

    /// Removes `guard`; whether it was still there (no marker for the producer since).
    fn release(&mut self, producer_id: i64, guard: u64) -> bool {
        let Some(set) = self.by_producer.get_mut(&producer_id) else {
            return false;
        };
        let alive = set.remove(&guard);
        if set.is_empty() {
            self.by_producer.remove(&producer_id);
        }
        alive
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
            g.take(producer_id)
        };
        if let Err(e) = verify() {
            self.txn.lock().release(producer_id, guard);
            return Err(TxnAppendError::NotVerified(Some(e)));
        }
        let mut g = self.txn.lock();
        if !g.release(producer_id, guard) {
            return Err(TxnAppendError::NotVerified(None));
        }
        self.append_locked(batches)
    }

    /// Takes a verification guard for a producer that has no open transaction here (`None`
    /// when it has one: its appends need no verification), before asking a remote
    /// coordinator. Release it with `end_verification`.
    pub fn begin_verification(&self, producer_id: i64) -> Option<u64> {
        let mut g = self.txn.lock();
        if self.log.has_ongoing_transaction(producer_id) {
            return None;
        }
        Some(g.take(producer_id))
    }

    /// Whether no marker for the producer was written since `guard` was taken.
    pub fn verification_alive(&self, producer_id: i64, guard: u64) -> bool {
        self.txn
            .lock()
            .by_producer
            .get(&producer_id)
            .is_some_and(|s| s.contains(&guard))
    }

    /// Releases a guard of `begin_verification`.
    pub fn end_verification(&self, producer_id: i64, guard: u64) {
        self.txn.lock().release(producer_id, guard);
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
