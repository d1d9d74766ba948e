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
//!
//! Transaction version 2 (KIP-890 part 2) changes which markers matter: the coordinator adds
//! the partition itself (the leader's AddPartitionsToTxn v5 is not verify-only) and waits
//! for the previous transaction to complete before it answers, and that transaction's
//! markers carry the bumped epoch, the epoch of the produce being added. So a guard taken
//! for an add survives markers at its own epoch (the previous transaction's, which the add
//! waited for) and is dropped only by a later one (the end of the transaction it joins,
//! or a fencing abort, which bumps again).

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
    /// Guards of verifications in progress, by producer id: each with the lowest marker
    /// epoch that drops it.
    by_producer: HashMap<i64, HashMap<u64, i16>>,
}

/// How the coordinator is asked about a producer's first batch on a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verification {
    /// Verify only (KIP-890 part 1): any marker for the producer ends what was verified.
    Verify,
    /// Add the partition (transaction version 2): markers at the produce's epoch belong to
    /// the previous transaction, which the coordinator waits for before it adds.
    Add,
}

impl Verification {
    /// The lowest marker epoch that drops a guard taken at `producer_epoch`.
    fn dropped_from(self, producer_epoch: i16) -> i16 {
        match self {
            Verification::Verify => i16::MIN,
            Verification::Add => producer_epoch.saturating_add(1),
        }
    }
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
    fn take(&mut self, producer_id: i64, dropped_from: i16) -> u64 {
        self.next += 1;
        self.by_producer
            .entry(producer_id)
            .or_default()
            .insert(self.next, dropped_from);
        self.next
    }

    /// Removes `guard`; whether it was still there (no marker that drops it since).
    fn release(&mut self, producer_id: i64, guard: u64) -> bool {
        let Some(set) = self.by_producer.get_mut(&producer_id) else {
            return false;
        };
        let alive = set.remove(&guard).is_some();
        if set.is_empty() {
            self.by_producer.remove(&producer_id);
        }
        alive
    }

    /// A marker for the producer at `epoch` was written: drops the guards it ends.
    fn marker(&mut self, producer_id: i64, epoch: i16) {
        if let Some(set) = self.by_producer.get_mut(&producer_id) {
            set.retain(|_, dropped_from| epoch < *dropped_from);
            if set.is_empty() {
                self.by_producer.remove(&producer_id);
            }
        }
    }
}

impl Partition {
    /// Appends a transactional producer's batches. If the producer has no open transaction
    /// here, `verify` asks the coordinator first (it runs without the partition's lock).
    pub fn append_transactional(
        self: &std::sync::Arc<Self>,
        batches: Bytes,
        producer_id: i64,
        producer_epoch: i16,
        how: Verification,
        verify: impl FnOnce() -> Result<(), ErrorCode>,
    ) -> Result<AppendInfo, TxnAppendError> {
        let guard = {
            let mut g = self.txn.lock();
            if self
                .log
                .has_ongoing_transaction_at(producer_id, producer_epoch)
            {
                return self.append_locked(batches);
            }
            g.take(producer_id, how.dropped_from(producer_epoch))
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
    pub fn begin_verification(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        how: Verification,
    ) -> Option<u64> {
        let mut g = self.txn.lock();
        if self
            .log
            .has_ongoing_transaction_at(producer_id, producer_epoch)
        {
            return None;
        }
        Some(g.take(producer_id, how.dropped_from(producer_epoch)))
    }

    /// Whether no marker that drops `guard` was written since it was taken.
    pub fn verification_alive(&self, producer_id: i64, guard: u64) -> bool {
        self.txn
            .lock()
            .by_producer
            .get(&producer_id)
            .is_some_and(|s| s.contains_key(&guard))
    }

    /// Releases a guard of `begin_verification`.
    pub fn end_verification(&self, producer_id: i64, guard: u64) {
        self.txn.lock().release(producer_id, guard);
    }

    /// A group coordinator's append of a TxnOffsetCommit's transactional batch to this
    /// `__consumer_offsets` partition, at `leader_epoch`: only if the verification still holds
    /// (KAFKA-17754, as Kafka passes the verification guard to the coordinator's append). With
    /// `guard` (the producer had no open transaction here when verified) no marker for the
    /// producer may have been written since it was taken; without one the producer's open
    /// transaction must still be open. Checked and appended under the lock markers take, so
    /// offsets are never left pending behind the marker that ended their transaction (no later
    /// marker would complete them, or a later transaction's would commit them).
    /// INVALID_TXN_STATE otherwise.
    pub fn append_txn_offsets(
        self: &std::sync::Arc<Self>,
        batch: Bytes,
        leader_epoch: i32,
        producer_id: i64,
        producer_epoch: i16,
        guard: Option<u64>,
    ) -> Result<AppendInfo, ErrorCode> {
        let mut g = self.txn.lock();
        let verified = match guard {
            Some(guard) => g.release(producer_id, guard),
            None => self
                .log
                .has_ongoing_transaction_at(producer_id, producer_epoch),
        };
        if !verified {
            return Err(ErrorCode::InvalidTxnState);
        }
        self.append_as_coordinator(batch, leader_epoch)
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

    /// Writes a COMMIT or ABORT marker for a producer (WriteTxnMarkers), dropping the
    /// verifications in progress for it that the marker ends.
    pub fn append_txn_marker(
        self: &std::sync::Arc<Self>,
        producer_id: i64,
        producer_epoch: i16,
        marker: EndTxnMarker,
    ) -> Result<AppendInfo, AppendError> {
        let mut g = self.txn.lock();
        g.marker(producer_id, producer_epoch);
        let info =
            self.log
                .append_txn_marker(producer_id, producer_epoch, marker, self.leader_epoch())?;
        drop(g);
        self.advance_high_watermark();
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use record::{BatchBuilder, Compression, NewRecord};
    use std::sync::Arc;

    /// A leader replica (single replica, node 1) of a `__consumer_offsets` partition in `dir`.
    fn leader(dir: &std::path::Path) -> Arc<Partition> {
        let clock: Arc<dyn storage::Clock> = Arc::new(storage::SystemClock);
        let log = storage::Log::open(dir, model::TopicConfig::default(), clock.clone())
            .expect("open log");
        let config = model::BrokerConfig {
            node_id: 1,
            ..Default::default()
        };
        let (ctx, _events) = crate::replicator::ReplicationContext::new(
            &config,
            clock,
            Arc::new(tokio::sync::watch::channel(0).0),
        );
        let p = Arc::new(Partition::new(
            model::TopicPartition::new("__consumer_offsets", 0),
            model::TopicId::default(),
            log,
            ctx,
            None,
        ));
        p.apply_metadata(replication::PartitionState {
            leader: Some(1),
            leader_epoch: 3,
            partition_epoch: 1,
            replicas: vec![1],
            isr: vec![1],
        });
        assert!(p.is_leader());
        p
    }

    fn txn_offsets(producer_id: i64) -> Bytes {
        txn_offsets_at(producer_id, 0)
    }

    fn txn_offsets_at(producer_id: i64, producer_epoch: i16) -> Bytes {
        let mut b = BatchBuilder::new(Compression::None)
            .producer(producer_id, producer_epoch, record::NO_SEQUENCE)
            .transactional(true);
        b.push(NewRecord::new(
            Some(Bytes::from_static(b"k")),
            Some(Bytes::from_static(b"v")),
            0,
        ));
        b.build().expect("batch")
    }

    /// KAFKA-17754 for TxnOffsetCommit: a marker for the producer written between the
    /// verification and the append voids it (INVALID_TXN_STATE, nothing appended); without a
    /// marker in between the batch is appended; with no guard (the producer had a transaction
    /// open when verified) the append needs that transaction still open.
    #[test]
    fn a_marker_between_verification_and_append_refuses_the_offsets() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = leader(dir.path());
        let guard = p
            .begin_verification(7, 0, Verification::Verify)
            .expect("no transaction open");
        p.append_txn_marker(
            7,
            0,
            EndTxnMarker {
                commit: false,
                coordinator_epoch: 0,
            },
        )
        .expect("marker");
        let end = p.log.log_end_offset();
        assert_eq!(
            p.append_txn_offsets(txn_offsets(7), 3, 7, 0, Some(guard))
                .err(),
            Some(ErrorCode::InvalidTxnState)
        );
        assert_eq!(p.log.log_end_offset(), end, "nothing appended");
        // Verified and nothing in between: appended, and the transaction is open here.
        let guard = p
            .begin_verification(8, 0, Verification::Verify)
            .expect("no transaction open");
        p.append_txn_offsets(txn_offsets(8), 3, 8, 0, Some(guard))
            .expect("appended");
        assert!(p.log.has_ongoing_transaction(8));
        // Open when verified (no guard), closed by a marker before the append: refused.
        assert!(p.begin_verification(8, 0, Verification::Verify).is_none());
        p.append_txn_marker(
            8,
            0,
            EndTxnMarker {
                commit: true,
                coordinator_epoch: 0,
            },
        )
        .expect("marker");
        assert_eq!(
            p.append_txn_offsets(txn_offsets(8), 3, 8, 0, None).err(),
            Some(ErrorCode::InvalidTxnState)
        );
        // Transaction version 2 bumps the epoch per transaction: the next transaction (epoch 1)
        // is verified again even while the previous one (epoch 0) is still open here.
        let guard = p
            .begin_verification(10, 0, Verification::Verify)
            .expect("no transaction open");
        p.append_txn_offsets(txn_offsets(10), 3, 10, 0, Some(guard))
            .expect("appended");
        assert!(p.begin_verification(10, 0, Verification::Verify).is_none());
        assert!(p.begin_verification(10, 1, Verification::Verify).is_some());
        assert_eq!(
            p.append_txn_offsets(txn_offsets(10), 3, 10, 1, None).err(),
            Some(ErrorCode::InvalidTxnState)
        );
        // A stale leader epoch is refused even when verified.
        let guard = p
            .begin_verification(9, 0, Verification::Verify)
            .expect("no transaction open");
        assert_eq!(
            p.append_txn_offsets(txn_offsets(9), 2, 9, 0, Some(guard))
                .err(),
            Some(ErrorCode::NotLeaderOrFollower)
        );
    }

    /// Transaction version 2: the previous transaction's markers carry the bumped epoch, the
    /// epoch of the next transaction's first produce, whose add the coordinator answers only
    /// once those markers are written. They must not void that add's guard (franz-go's
    /// transactional ETL got TRANSACTION_ABORTABLE on every first produce of a transaction);
    /// a marker at a later epoch (the end of the joined transaction, a fencing abort) does.
    /// A verify-only guard is voided by any marker, as before.
    #[test]
    fn an_add_survives_the_previous_transactions_markers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = leader(dir.path());
        let abort = EndTxnMarker {
            commit: false,
            coordinator_epoch: 0,
        };
        let add = p
            .begin_verification(11, 1, Verification::Add)
            .expect("no transaction open");
        let verify = p
            .begin_verification(11, 1, Verification::Verify)
            .expect("no transaction open");
        p.append_txn_marker(11, 1, abort).expect("marker");
        assert!(
            p.verification_alive(11, add),
            "the previous transaction's marker"
        );
        assert!(!p.verification_alive(11, verify));
        p.append_txn_offsets(txn_offsets_at(11, 1), 3, 11, 1, Some(add))
            .expect("appended");
        // The joined transaction ends (epoch 2): a guard of epoch 1 taken meanwhile is void.
        let late = p
            .begin_verification(12, 1, Verification::Add)
            .expect("no transaction open");
        p.append_txn_marker(12, 2, abort).expect("marker");
        assert!(!p.verification_alive(12, late));
        assert_eq!(
            p.append_txn_offsets(txn_offsets_at(12, 1), 3, 12, 1, Some(late))
                .err(),
            Some(ErrorCode::InvalidTxnState)
        );
    }
}
