//! Test harness for the transaction coordinator: a fake runtime with a durable log of
//! `__transaction_state` writes (that it can make fail), a producer id counter, a set of
//! existing partitions, and marker delivery on demand. Every response is checked to encode at
//! its request's version and to answer its token once.
#![allow(dead_code, clippy::unwrap_used, clippy::type_complexity)]

use std::collections::{BTreeSet, HashMap};

use bytes::BytesMut;
use coordinator::txn::log::TxnValue;
use coordinator::{
    MarkerAck, MarkerRequest, RequestContext, TransactionCoordinator, TxnConfig, TxnEnv, TxnOutput,
    TxnState, TxnWrite,
};
use model::ErrorCode;
use protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use protocol::messages::*;
use protocol::{ResponseKind, StrBytes};

pub const TXN_PARTITIONS: i32 = 3;
pub const TIMEOUT_MS: i32 = 60_000;

pub fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub struct FakeEnv {
    pub next_pid: i64,
    pub partitions: BTreeSet<(String, i32)>,
}

impl TxnEnv for FakeEnv {
    fn next_producer_id(&mut self) -> Result<i64, ErrorCode> {
        self.next_pid += 1;
        Ok(self.next_pid)
    }
    fn partition_exists(&self, topic: &str, partition: i32) -> bool {
        topic == "__consumer_offsets" || self.partitions.contains(&(topic.to_string(), partition))
    }
}

pub fn test_config() -> TxnConfig {
    TxnConfig {
        state_log_partitions: TXN_PARTITIONS,
        offsets_topic_partitions: 4,
        abort_timed_out_interval_ms: 1_000,
        remove_expired_interval_ms: 10_000,
        id_expiration_ms: 100_000,
        ..TxnConfig::default()
    }
}

pub struct T {
    pub c: TransactionCoordinator,
    pub cfg: TxnConfig,
    pub env: FakeEnv,
    pub now: i64,
    next: u64,
    /// Durable records, in write order.
    pub log: Vec<TxnWrite>,
    /// Writes handed out and not yet completed.
    pub inflight: Vec<TxnWrite>,
    /// Markers asked for and not yet delivered.
    pub markers: Vec<MarkerRequest>,
    pub answers: HashMap<u64, ResponseKind>,
    pub versions: HashMap<u64, i16>,
    /// When false, writes stay in flight until `flush`.
    pub auto_flush: bool,
    /// When true, markers are delivered as soon as they are asked for.
    pub auto_markers: bool,
}

impl T {
    pub fn new() -> T {
        T::with_config(test_config())
    }

    pub fn with_config(cfg: TxnConfig) -> T {
        let mut t = T {
            c: TransactionCoordinator::new(cfg.clone()),
            cfg,
            env: FakeEnv {
                next_pid: 999,
                partitions: [("t", 0), ("t", 1), ("u", 0)]
                    .into_iter()
                    .map(|(t, p)| (t.to_string(), p))
                    .collect(),
            },
            now: 1_000_000,
            next: 1,
            log: Vec::new(),
            inflight: Vec::new(),
            markers: Vec::new(),
            answers: HashMap::new(),
            versions: HashMap::new(),
            auto_flush: true,
            auto_markers: true,
        };
        for p in 0..TXN_PARTITIONS {
            let now = t.now;
            let out = t.c.load_partition(p, 0, now);
            assert!(out.writes.is_empty() && out.markers.is_empty());
        }
        t
    }

    pub fn token(&mut self, version: i16) -> u64 {
        let t = self.next;
        self.next += 1;
        self.versions.insert(t, version);
        t
    }

    pub fn ctx(token: u64, version: i16) -> RequestContext<'static> {
        RequestContext {
            token,
            api_version: version,
            client_id: "client",
            client_host: "/127.0.0.1",
            visible_topics: coordinator::TopicVisibility::ALL,
        }
    }

    /// Takes in an output: records responses, queues writes and markers, then (if automatic)
    /// completes writes and delivers markers until nothing is left.
    pub fn absorb(&mut self, out: TxnOutput) {
        for (t, r) in out.responses {
            let v = self.versions[&t];
            let mut buf = BytesMut::new();
            assert!(
                r.encode(&mut buf, v).is_ok(),
                "response for token {t} does not encode at v{v}: {r:?}"
            );
            assert!(
                self.answers.insert(t, r).is_none(),
                "token {t} answered twice"
            );
        }
        self.inflight.extend(out.writes);
        self.markers.extend(out.markers);
        if self.auto_flush && !self.inflight.is_empty() {
            self.flush();
        }
        if self.auto_markers && !self.markers.is_empty() {
            self.deliver_markers();
        }
    }

    /// Completes every in-flight write successfully, in order.
    pub fn flush(&mut self) {
        while !self.inflight.is_empty() {
            let w = self.inflight.remove(0);
            self.log.push(w.clone());
            let out = self.c.write_complete(w.id, Ok(()), self.now);
            self.absorb(out);
        }
    }

    /// Fails every in-flight write with `e`.
    pub fn fail_writes(&mut self, e: ErrorCode) {
        let ws = std::mem::take(&mut self.inflight);
        for w in ws {
            let out = self.c.write_complete(w.id, Err(e), self.now);
            self.absorb(out);
        }
    }

    /// Acknowledges every requested marker.
    pub fn deliver_markers(&mut self) {
        while !self.markers.is_empty() {
            let m = self.markers.remove(0);
            for (topic, partition) in &m.partitions {
                let ack = MarkerAck {
                    transactional_id: m.transactional_id.clone(),
                    producer_id: m.producer_id,
                    producer_epoch: m.producer_epoch,
                    topic: topic.clone(),
                    partition: *partition,
                };
                let out = self.c.marker_written(&ack, self.now);
                self.absorb(out);
            }
        }
    }

    pub fn advance(&mut self, ms: i64) {
        self.now += ms;
        let out = self.c.tick(self.now);
        self.absorb(out);
    }

    // ---- requests ---------------------------------------------------------------------------

    pub fn init_with(
        &mut self,
        txn: &str,
        timeout: i32,
        version: i16,
        expected: Option<(i64, i16)>,
    ) -> u64 {
        let t = self.token(version);
        let mut r = InitProducerIdRequest::default();
        r.transactional_id = Some(TransactionalId(sb(txn)));
        r.transaction_timeout_ms = timeout;
        let (pid, epoch) = expected.unwrap_or((-1, -1));
        if version >= 3 {
            r.producer_id = ProducerId(pid);
            r.producer_epoch = epoch;
        }
        let ctx = T::ctx(t, version);
        let now = self.now;
        let out = self.c.init_producer_id(&ctx, r, now, &mut self.env);
        self.absorb(out);
        t
    }

    pub fn init(&mut self, txn: &str) -> u64 {
        self.init_with(txn, TIMEOUT_MS, 4, None)
    }

    /// InitProducerId answered without error: (producer id, epoch).
    pub fn init_ok(&mut self, txn: &str) -> (i64, i16) {
        let t = self.init(txn);
        let r = self.init_resp(t).expect("answered");
        assert_eq!(r.error_code, 0, "{r:?}");
        (r.producer_id.0, r.producer_epoch)
    }

    pub fn init_resp(&self, t: u64) -> Option<&InitProducerIdResponse> {
        match self.answers.get(&t) {
            Some(ResponseKind::InitProducerId(r)) => Some(r),
            None => None,
            Some(o) => panic!("not InitProducerId: {o:?}"),
        }
    }

    pub fn add_with(
        &mut self,
        txn: &str,
        pid: i64,
        epoch: i16,
        parts: &[(&str, i32)],
        version: i16,
    ) -> u64 {
        let t = self.token(version);
        let mut r = AddPartitionsToTxnRequest::default();
        r.v3_and_below_transactional_id = TransactionalId(sb(txn));
        r.v3_and_below_producer_id = ProducerId(pid);
        r.v3_and_below_producer_epoch = epoch;
        r.v3_and_below_topics = topics(parts);
        let ctx = T::ctx(t, version);
        let now = self.now;
        let out = self.c.add_partitions(&ctx, r, now, &mut self.env);
        self.absorb(out);
        t
    }

    pub fn add(&mut self, txn: &str, pid: i64, epoch: i16, parts: &[(&str, i32)]) -> u64 {
        self.add_with(txn, pid, epoch, parts, 0)
    }

    /// The errors of an AddPartitionsToTxn v0-3 response, by partition.
    pub fn add_errors(&self, t: u64) -> Option<Vec<((String, i32), i16)>> {
        match self.answers.get(&t) {
            Some(ResponseKind::AddPartitionsToTxn(r)) => Some(
                r.results_by_topic_v3_and_below
                    .iter()
                    .flat_map(|tr| {
                        tr.results_by_partition.iter().map(|p| {
                            (
                                (tr.name.0.to_string(), p.partition_index),
                                p.partition_error_code,
                            )
                        })
                    })
                    .collect(),
            ),
            None => None,
            Some(o) => panic!("not AddPartitionsToTxn: {o:?}"),
        }
    }

    /// The single error of an AddPartitionsToTxn v0-3 response (all partitions agree).
    pub fn add_error(&self, t: u64) -> Option<i16> {
        let errs = self.add_errors(t)?;
        let first = errs[0].1;
        assert!(errs.iter().all(|(_, e)| *e == first), "{errs:?}");
        Some(first)
    }

    pub fn batch(
        &mut self,
        txns: Vec<(&str, i64, i16, bool, Vec<(&str, i32)>)>,
        version: i16,
    ) -> u64 {
        let t = self.token(version);
        let mut r = AddPartitionsToTxnRequest::default();
        r.transactions = txns
            .into_iter()
            .map(|(id, pid, epoch, verify, parts)| {
                let mut x = AddPartitionsToTxnTransaction::default();
                x.transactional_id = TransactionalId(sb(id));
                x.producer_id = ProducerId(pid);
                x.producer_epoch = epoch;
                x.verify_only = verify;
                x.topics = topics(&parts);
                x
            })
            .collect();
        let ctx = T::ctx(t, version);
        let now = self.now;
        let out = self.c.add_partitions(&ctx, r, now, &mut self.env);
        self.absorb(out);
        t
    }

    /// A partition leader's implicit add for a transaction-version-2 producer
    /// (AddPartitionsToTxn v5, not verify-only).
    pub fn implicit_add(&mut self, txn: &str, pid: i64, epoch: i16, parts: &[(&str, i32)]) -> u64 {
        self.batch(vec![(txn, pid, epoch, false, parts.to_vec())], 5)
    }

    /// The single error of a one-transaction batched AddPartitionsToTxn response.
    pub fn batch_error(&self, t: u64) -> Option<i16> {
        match self.answers.get(&t)? {
            ResponseKind::AddPartitionsToTxn(r) => {
                let errs: Vec<i16> = r
                    .results_by_transaction
                    .iter()
                    .flat_map(|x| x.topic_results.iter())
                    .flat_map(|tr| tr.results_by_partition.iter())
                    .map(|p| p.partition_error_code)
                    .collect();
                assert!(errs.iter().all(|e| *e == errs[0]), "{errs:?}");
                errs.first().copied()
            }
            o => panic!("not AddPartitionsToTxn: {o:?}"),
        }
    }

    /// EndTxn v5 (transaction version 2).
    pub fn end_v2(&mut self, txn: &str, pid: i64, epoch: i16, commit: bool) -> u64 {
        self.end_with(txn, pid, epoch, commit, 5)
    }

    /// The producer id and epoch an EndTxn v5 answer gives.
    pub fn end_resp(&self, t: u64) -> Option<&EndTxnResponse> {
        match self.answers.get(&t)? {
            ResponseKind::EndTxn(r) => Some(r),
            o => panic!("not EndTxn: {o:?}"),
        }
    }

    pub fn add_offsets(&mut self, txn: &str, pid: i64, epoch: i16, group: &str) -> u64 {
        let t = self.token(0);
        let mut r = AddOffsetsToTxnRequest::default();
        r.transactional_id = TransactionalId(sb(txn));
        r.producer_id = ProducerId(pid);
        r.producer_epoch = epoch;
        r.group_id = GroupId(sb(group));
        let ctx = T::ctx(t, 0);
        let now = self.now;
        let out = self.c.add_offsets(&ctx, r, now);
        self.absorb(out);
        t
    }

    pub fn end_with(&mut self, txn: &str, pid: i64, epoch: i16, commit: bool, version: i16) -> u64 {
        let t = self.token(version);
        let mut r = EndTxnRequest::default();
        r.transactional_id = TransactionalId(sb(txn));
        r.producer_id = ProducerId(pid);
        r.producer_epoch = epoch;
        r.committed = commit;
        let ctx = T::ctx(t, version);
        let now = self.now;
        let out = self.c.end_txn(&ctx, r, now, &mut self.env);
        self.absorb(out);
        t
    }

    pub fn end(&mut self, txn: &str, pid: i64, epoch: i16, commit: bool) -> u64 {
        self.end_with(txn, pid, epoch, commit, 1)
    }

    /// The error code of a single-error response (InitProducerId, AddOffsetsToTxn, EndTxn,
    /// AddPartitionsToTxn v0-3).
    pub fn error(&self, t: u64) -> Option<i16> {
        match self.answers.get(&t)? {
            ResponseKind::InitProducerId(r) => Some(r.error_code),
            ResponseKind::AddOffsetsToTxn(r) => Some(r.error_code),
            ResponseKind::EndTxn(r) => Some(r.error_code),
            ResponseKind::AddPartitionsToTxn(_) => self.add_error(t),
            o => panic!("no single error: {o:?}"),
        }
    }

    pub fn state(&self, txn: &str) -> Option<TxnState> {
        self.c.transaction(txn).map(|s| s.value.state)
    }

    pub fn value(&self, txn: &str) -> TxnValue {
        self.c.transaction(txn).expect("known id").value
    }

    /// A fresh coordinator loaded from this one's durable log.
    pub fn replayed(&self) -> (TransactionCoordinator, TxnOutput) {
        let mut c = TransactionCoordinator::new(self.cfg.clone());
        for p in 0..TXN_PARTITIONS {
            c.begin_loading(p);
        }
        for w in &self.log {
            c.replay(&w.key, w.value.as_deref()).unwrap();
        }
        let mut out = TxnOutput::default();
        for p in 0..TXN_PARTITIONS {
            out.extend(c.load_partition(p, 1, self.now));
        }
        (c, out)
    }
}

pub fn topics(parts: &[(&str, i32)]) -> Vec<AddPartitionsToTxnTopic> {
    let mut out: Vec<AddPartitionsToTxnTopic> = Vec::new();
    for (t, p) in parts {
        match out.iter_mut().find(|x| x.name.0.as_str() == *t) {
            Some(x) => x.partitions.push(*p),
            None => {
                let mut x = AddPartitionsToTxnTopic::default();
                x.name = TopicName(sb(t));
                x.partitions.push(*p);
                out.push(x);
            }
        }
    }
    out
}

pub const NONE: i16 = 0;
pub fn code(e: ErrorCode) -> i16 {
    e.code()
}
