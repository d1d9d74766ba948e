//! The transactional producer (KIP-98, KIP-447): `init_transactions`, `begin_transaction`,
//! `send_offsets_to_transaction`, `commit_transaction`, `abort_transaction`, speaking the
//! standard transaction APIs (FindCoordinator TRANSACTION, InitProducerId, AddPartitionsToTxn,
//! AddOffsetsToTxn, TxnOffsetCommit, EndTxn) so it works against Moldau and Kafka alike.
//!
//! Ownership: a `TxnManager` lives in the producer's shared state. It holds the producer id
//! and epoch the sender builds batches with, the partitions added to the current transaction,
//! and the phase. A record sent to a partition not yet in the transaction first adds it
//! (AddPartitionsToTxn), so no batch reaches a partition the coordinator does not know
//! (KIP-890 refuses such writes anyway). Commit flushes, fails if any record of the
//! transaction failed (the transaction must then be aborted), and ends the transaction.
//! Fenced or otherwise fatal errors leave the producer unusable, as in the Java client.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use model::ErrorCode;
use protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, GroupId,
    InitProducerIdRequest, ProducerId, TransactionalId, TxnOffsetCommitRequest,
};
use protocol::StrBytes;

use crate::cluster::{topic_name, Client};
use crate::error::{Error, Result};
use crate::group::find_coordinator_of;

/// The group a consumer belongs to, as `send_offsets_to_transaction` needs it (KIP-447: the
/// group coordinator fences offsets from a member of an older generation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerGroupMetadata {
    pub group_id: String,
    /// -1 for a consumer outside group management.
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

impl ConsumerGroupMetadata {
    /// Metadata for a group id alone (no membership checks).
    pub fn for_group(group_id: impl Into<String>) -> ConsumerGroupMetadata {
        ConsumerGroupMetadata {
            group_id: group_id.into(),
            generation_id: -1,
            ..ConsumerGroupMetadata::default()
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    Uninitialized,
    Ready,
    InTransaction,
    /// Fenced or otherwise unusable.
    Fatal(String),
}

struct Inner {
    pid_epoch: Option<(i64, i16)>,
    phase: Phase,
    /// Partitions added to the current transaction.
    added: HashSet<(Arc<str>, i32)>,
    /// Whether the coordinator knows of the current transaction (a partition or the offsets
    /// were added); if not, ending it needs no EndTxn (as the Java client does).
    started: bool,
    coordinator: Option<i32>,
}

/// Transaction state of a transactional producer.
pub(crate) struct TxnManager {
    pub(crate) id: String,
    timeout_ms: i32,
    inner: Mutex<Inner>,
    /// Records of the current transaction that failed to be written.
    failed: AtomicUsize,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// Errors after which the producer can't go on (Kafka's fatal transaction errors).
fn is_fatal(code: Option<ErrorCode>) -> bool {
    matches!(
        code,
        Some(
            ErrorCode::ProducerFenced
                | ErrorCode::InvalidProducerEpoch
                | ErrorCode::TransactionalIdAuthorizationFailed
                | ErrorCode::InvalidProducerIdMapping
                | ErrorCode::UnsupportedVersion
                | ErrorCode::InvalidTransactionTimeout
        )
    )
}

/// First wait before retrying a request answered CONCURRENT_TRANSACTIONS.
const CONCURRENT_TXN_BACKOFF_MS: u64 = 5;

/// Errors worth another attempt at a transaction request, and whether the coordinator must
/// be looked up again first.
fn retry_kind(e: &Error) -> Option<bool> {
    match e.code() {
        Some(ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable) => Some(true),
        Some(ErrorCode::ConcurrentTransactions | ErrorCode::CoordinatorLoadInProgress) => {
            Some(false)
        }
        _ if e.is_retriable() => Some(true),
        _ => None,
    }
}

impl TxnManager {
    pub(crate) fn new(id: String, timeout_ms: u64) -> TxnManager {
        TxnManager {
            id,
            timeout_ms: i32::try_from(timeout_ms).unwrap_or(i32::MAX),
            inner: Mutex::new(Inner {
                pid_epoch: None,
                phase: Phase::Uninitialized,
                added: HashSet::new(),
                started: false,
                coordinator: None,
            }),
            failed: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The producer id and epoch batches are built with.
    pub(crate) fn producer_id(&self) -> Option<(i64, i16)> {
        self.lock().pid_epoch
    }

    /// A record of the current transaction failed.
    pub(crate) fn record_failed(&self, n: usize) {
        self.failed.fetch_add(n, Ordering::AcqRel);
    }

    fn fail(&self, e: Error) -> Error {
        if is_fatal(e.code()) {
            self.lock().phase = Phase::Fatal(e.to_string());
        }
        e
    }

    fn check_phase(&self, want: &Phase, what: &str) -> Result<()> {
        let inner = self.lock();
        match &inner.phase {
            Phase::Fatal(m) => Err(Error::Config(format!(
                "the producer hit a fatal error ({m}); create a new one"
            ))),
            p if p == want => Ok(()),
            p => Err(Error::Config(format!("{what} in state {p:?}"))),
        }
    }

    async fn coordinator(&self, client: &Client, refresh: bool) -> Result<i32> {
        if !refresh {
            if let Some(c) = self.lock().coordinator {
                return Ok(c);
            }
        }
        let node = find_coordinator_of(client, &self.id, 1).await?;
        self.lock().coordinator = Some(node);
        Ok(node)
    }

    /// Runs a request against the transaction coordinator, retrying retriable errors (and
    /// finding the coordinator again when it moved) until `deadline`.
    async fn with_coordinator<T, F, Fut>(
        &self,
        client: &Client,
        deadline: Instant,
        mut call: F,
    ) -> Result<T>
    where
        F: FnMut(i32) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let retry_backoff = client.config().retry_backoff_ms.max(1);
        let mut backoff = retry_backoff;
        // CONCURRENT_TRANSACTIONS mostly means the previous transaction's markers are still
        // being written (a few fsyncs): retry soon, as the Java client does for
        // AddPartitionsToTxn (20 ms), backing off up to retry.backoff.ms.
        let mut concurrent_backoff = CONCURRENT_TXN_BACKOFF_MS.min(retry_backoff);
        let mut refresh = false;
        loop {
            let r = match self.coordinator(client, refresh).await {
                Ok(node) => call(node).await,
                Err(e) => Err(e),
            };
            match r {
                Ok(v) => return Ok(v),
                Err(e) => match retry_kind(&e) {
                    Some(again) if Instant::now() < deadline => {
                        tracing::debug!(error = %e, "transaction request failed; retrying");
                        refresh = again;
                        let wait = if e.code() == Some(ErrorCode::ConcurrentTransactions) {
                            let w = concurrent_backoff;
                            concurrent_backoff = (concurrent_backoff * 2).min(retry_backoff);
                            w
                        } else {
                            let w = backoff;
                            backoff = (backoff * 2).min(1_000);
                            w
                        };
                        tokio::time::sleep(Duration::from_millis(wait)).await;
                    }
                    _ => return Err(self.fail(e)),
                },
            }
        }
    }

    /// InitProducerId with the transactional id: gets (or bumps) the epoch, fencing earlier
    /// producers with the same id and completing their open transaction.
    pub(crate) async fn init(&self, client: &Client, timeout: Duration) -> Result<()> {
        self.check_phase(&Phase::Uninitialized, "init_transactions")?;
        let (pid, epoch) = self.init_producer_id(client, timeout, None).await?;
        let mut inner = self.lock();
        inner.pid_epoch = Some((pid, epoch));
        inner.phase = Phase::Ready;
        Ok(())
    }

    async fn init_producer_id(
        &self,
        client: &Client,
        timeout: Duration,
        current: Option<(i64, i16)>,
    ) -> Result<(i64, i16)> {
        let deadline = Instant::now() + timeout;
        let (pid, epoch) = current.unwrap_or((-1, -1));
        let req = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(s(&self.id))))
            .with_transaction_timeout_ms(self.timeout_ms)
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch);
        self.with_coordinator(client, deadline, |node| {
            let req = req.clone();
            async move {
                let r = client.send_coordinator(node, &req).await?;
                Error::check(r.error_code)?;
                Ok((r.producer_id.0, r.producer_epoch))
            }
        })
        .await
    }

    /// Records may only be sent inside a transaction.
    pub(crate) fn check_in_transaction(&self) -> Result<()> {
        self.check_phase(&Phase::InTransaction, "send outside a transaction")
    }

    pub(crate) fn begin(&self) -> Result<()> {
        self.check_phase(&Phase::Ready, "begin_transaction")?;
        let mut inner = self.lock();
        inner.phase = Phase::InTransaction;
        inner.added.clear();
        inner.started = false;
        self.failed.store(0, Ordering::Release);
        Ok(())
    }

    /// Adds a partition to the current transaction (once per transaction).
    pub(crate) async fn add_partition(
        &self,
        client: &Client,
        topic: &Arc<str>,
        partition: i32,
        timeout: Duration,
    ) -> Result<()> {
        self.check_phase(&Phase::InTransaction, "send outside a transaction")?;
        let (pid, epoch) = {
            let inner = self.lock();
            if inner.added.contains(&(topic.clone(), partition)) {
                return Ok(());
            }
            inner.pid_epoch.ok_or(Error::Closed)?
        };
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(s(&self.id)))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(vec![partition])]);
        let deadline = Instant::now() + timeout;
        self.with_coordinator(client, deadline, |node| {
            let req = req.clone();
            async move {
                let r = client.send_coordinator(node, &req).await?;
                for t in &r.results_by_topic_v3_and_below {
                    for p in &t.results_by_partition {
                        Error::check(p.partition_error_code)?;
                    }
                }
                Ok(())
            }
        })
        .await?;
        let mut inner = self.lock();
        inner.added.insert((topic.clone(), partition));
        inner.started = true;
        Ok(())
    }

    /// AddOffsetsToTxn, then TxnOffsetCommit at the group coordinator: the offsets become
    /// committed if and only if the transaction commits.
    pub(crate) async fn send_offsets(
        &self,
        client: &Client,
        offsets: &BTreeMap<(String, i32), i64>,
        group: &ConsumerGroupMetadata,
        timeout: Duration,
    ) -> Result<()> {
        self.check_phase(&Phase::InTransaction, "send_offsets_to_transaction")?;
        let (pid, epoch) = self.lock().pid_epoch.ok_or(Error::Closed)?;
        let deadline = Instant::now() + timeout;
        let add = AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(s(&self.id)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_group_id(GroupId(s(&group.group_id)));
        self.with_coordinator(client, deadline, |node| {
            let add = add.clone();
            async move {
                let r = client.send_coordinator(node, &add).await?;
                Error::check(r.error_code)
            }
        })
        .await?;
        self.lock().started = true;
        let mut topics: Vec<TxnOffsetCommitRequestTopic> = Vec::new();
        for ((t, p), o) in offsets {
            let part = TxnOffsetCommitRequestPartition::default()
                .with_partition_index(*p)
                .with_committed_offset(*o)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(s("")));
            match topics.iter_mut().find(|x| x.name.0.as_str() == t) {
                Some(x) => x.partitions.push(part),
                None => topics.push(
                    TxnOffsetCommitRequestTopic::default()
                        .with_name(topic_name(t))
                        .with_partitions(vec![part]),
                ),
            }
        }
        let commit = TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(s(&self.id)))
            .with_group_id(GroupId(s(&group.group_id)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_generation_id(group.generation_id)
            .with_member_id(s(&group.member_id))
            .with_group_instance_id(group.group_instance_id.as_deref().map(s))
            .with_topics(topics);
        let mut backoff = client.config().retry_backoff_ms.max(1);
        loop {
            let r = async {
                let node = find_coordinator_of(client, &group.group_id, 0).await?;
                let r = client.send_coordinator(node, &commit).await?;
                for t in &r.topics {
                    for p in &t.partitions {
                        Error::check(p.error_code)?;
                    }
                }
                Ok(())
            }
            .await;
            match r {
                Ok(()) => return Ok(()),
                Err(e) if retry_kind(&e).is_some() && Instant::now() < deadline => {
                    tracing::debug!(error = %e, "TxnOffsetCommit failed; retrying");
                    tokio::time::sleep(Duration::from_millis(backoff)).await;
                    backoff = (backoff * 2).min(1_000);
                }
                Err(e) => return Err(self.fail(e)),
            }
        }
    }

    /// EndTxn. A commit requires every record of the transaction to have been written
    /// (`failed` is the count the producer's flush left): otherwise the caller must abort.
    pub(crate) async fn end(&self, client: &Client, commit: bool, timeout: Duration) -> Result<()> {
        self.check_phase(
            &Phase::InTransaction,
            if commit {
                "commit_transaction"
            } else {
                "abort_transaction"
            },
        )?;
        let failed = self.failed.load(Ordering::Acquire);
        if commit && failed > 0 {
            return Err(Error::broker(
                ErrorCode::TransactionAbortable,
                Some(format!(
                    "{failed} records of the transaction failed: abort it"
                )),
            ));
        }
        let (pid, epoch, started) = {
            let inner = self.lock();
            let (pid, epoch) = inner.pid_epoch.ok_or(Error::Closed)?;
            (pid, epoch, inner.started)
        };
        let deadline = Instant::now() + timeout;
        if started {
            let req = EndTxnRequest::default()
                .with_transactional_id(TransactionalId(s(&self.id)))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_committed(commit);
            self.with_coordinator(client, deadline, |node| {
                let req = req.clone();
                async move {
                    let r = client.send_coordinator(node, &req).await?;
                    Error::check(r.error_code)
                }
            })
            .await?;
        }
        if !commit && failed > 0 {
            // Failed batches left a gap in the sequence numbers: bump the epoch (KIP-360) so
            // the next transaction starts its sequences afresh.
            let bumped = self
                .init_producer_id(client, timeout, Some((pid, epoch)))
                .await?;
            self.lock().pid_epoch = Some(bumped);
        }
        let mut inner = self.lock();
        inner.phase = Phase::Ready;
        inner.added.clear();
        inner.started = false;
        self.failed.store(0, Ordering::Release);
        Ok(())
    }
}
