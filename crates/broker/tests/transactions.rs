//! Transactions over the wire against an in-process broker: commit and abort with the last
//! stable offset and the aborted ranges of read_committed fetches, KIP-890 refusal of a
//! partition the transaction does not contain, Kafka's error codes for out-of-order and
//! stale requests (which change nothing), zombie fencing, coordinator timeouts, and
//! transaction state across a restart.
#![allow(clippy::unwrap_used)]

mod common;

use broker::{Broker, BrokerHandle};
use bytes::Bytes;
use common::*;
use protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use protocol::messages::fetch_response::PartitionData;
use protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use protocol::messages::*;
use protocol::{ApiKey, StrBytes};
use record::{BatchBuilder, Compression, NewRecord};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

const TOPIC: &str = "txn-wire";

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

async fn start_with(dir: &std::path::Path, extra: &[(&str, &str)]) -> BrokerHandle {
    Broker::start(config(dir, extra)).await.unwrap()
}

/// A connection to the broker with helpers for the transaction APIs.
struct C {
    s: TcpStream,
}

impl C {
    async fn new(b: &BrokerHandle) -> C {
        let mut s = TcpStream::connect(b.local_addr()).await.unwrap();
        let md: MetadataResponse =
            call(&mut s, ApiKey::Metadata, 12, &metadata_request(TOPIC)).await;
        assert_eq!(md.topics[0].error_code, 0);
        C { s }
    }

    async fn find_txn_coordinator(&mut self, id: &str) -> FindCoordinatorResponse {
        self.find_coordinator(id, 1).await
    }

    /// FindCoordinator (0 = group, 1 = transactional id); creates the internal topic.
    async fn find_coordinator(&mut self, key: &str, key_type: i8) -> FindCoordinatorResponse {
        let req = FindCoordinatorRequest::default()
            .with_key(sb(key))
            .with_key_type(key_type);
        call(&mut self.s, ApiKey::FindCoordinator, 3, &req).await
    }

    async fn init(&mut self, id: &str, timeout_ms: i32) -> (i16, i64, i16) {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(sb(id))))
            .with_transaction_timeout_ms(timeout_ms)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let r: InitProducerIdResponse = call(&mut self.s, ApiKey::InitProducerId, 4, &req).await;
        (r.error_code, r.producer_id.0, r.producer_epoch)
    }

    /// InitProducerId until it is not CONCURRENT_TRANSACTIONS (a fence in progress).
    async fn init_ok(&mut self, id: &str, timeout_ms: i32) -> (i64, i16) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let (e, pid, epoch) = self.init(id, timeout_ms).await;
            if e == 0 {
                return (pid, epoch);
            }
            assert_eq!(
                e, 51,
                "CONCURRENT_TRANSACTIONS is the only retriable answer"
            );
            assert!(Instant::now() < deadline, "InitProducerId kept failing");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn add(&mut self, id: &str, pid: i64, epoch: i16, partition: i32) -> i16 {
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(sb(id)))
            .with_v3_and_below_producer_id(ProducerId(pid))
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(TopicName(sb(TOPIC)))
                .with_partitions(vec![partition])]);
        let r: AddPartitionsToTxnResponse =
            call(&mut self.s, ApiKey::AddPartitionsToTxn, 3, &req).await;
        r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
    }

    /// AddPartitionsToTxn, retried while the previous transaction is still completing
    /// (CONCURRENT_TRANSACTIONS), as clients do.
    async fn add_ok(&mut self, id: &str, pid: i64, epoch: i16, partition: i32) -> i16 {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let e = self.add(id, pid, epoch, partition).await;
            if e != 51 || Instant::now() > deadline {
                return e;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn add_offsets(&mut self, id: &str, pid: i64, epoch: i16, group: &str) -> i16 {
        let req = AddOffsetsToTxnRequest::default()
            .with_transactional_id(TransactionalId(sb(id)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_group_id(GroupId(sb(group)));
        let r: AddOffsetsToTxnResponse = call(&mut self.s, ApiKey::AddOffsetsToTxn, 3, &req).await;
        r.error_code
    }

    async fn txn_commit_offset(
        &mut self,
        id: &str,
        pid: i64,
        epoch: i16,
        group: &str,
        offset: i64,
    ) -> i16 {
        let req = TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(sb(id)))
            .with_group_id(GroupId(sb(group)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_generation_id(-1)
            .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(sb(TOPIC)))
                .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(offset)])]);
        let r: TxnOffsetCommitResponse = call(&mut self.s, ApiKey::TxnOffsetCommit, 3, &req).await;
        r.topics[0].partitions[0].error_code
    }

    async fn end(&mut self, id: &str, pid: i64, epoch: i16, commit: bool, version: i16) -> i16 {
        let req = EndTxnRequest::default()
            .with_transactional_id(TransactionalId(sb(id)))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_committed(commit);
        let r: EndTxnResponse = call(&mut self.s, ApiKey::EndTxn, version, &req).await;
        r.error_code
    }

    /// Produces `n` records to partition 0: transactional (with `txn`) or plain.
    async fn produce(
        &mut self,
        txn: Option<&str>,
        pid: i64,
        epoch: i16,
        seq: i32,
        n: usize,
        version: i16,
    ) -> (i16, i64) {
        let batch = records(pid, epoch, seq, n, txn.is_some());
        self.produce_raw(txn, batch, version).await
    }

    async fn produce_raw(&mut self, txn: Option<&str>, batch: Bytes, version: i16) -> (i16, i64) {
        let req = ProduceRequest::default()
            .with_transactional_id(txn.map(|t| TransactionalId(sb(t))))
            .with_acks(-1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(sb(TOPIC)))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch))])]);
        let r: ProduceResponse = call(&mut self.s, ApiKey::Produce, version, &req).await;
        let p = &r.responses[0].partition_responses[0];
        (p.error_code, p.base_offset)
    }

    async fn fetch(&mut self, offset: i64, read_committed: bool) -> PartitionData {
        let req = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(1 << 20)
            .with_isolation_level(i8::from(read_committed))
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(sb(TOPIC)))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1 << 20)])]);
        let r: FetchResponse = call(&mut self.s, ApiKey::Fetch, 11, &req).await;
        r.responses[0].partitions[0].clone()
    }

    /// Waits until the last stable offset reaches the high watermark (markers written).
    /// Waits until the HW reached `min_hw` (it moves once the log is durable) and the LSO
    /// caught up with it.
    async fn stable(&mut self, min_hw: i64) -> PartitionData {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let p = self.fetch(0, true).await;
            if p.last_stable_offset == p.high_watermark && p.high_watermark >= min_hw {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "LSO {} never reached HW {} (at least {min_hw})",
                p.last_stable_offset,
                p.high_watermark
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn describe(&mut self, id: &str) -> describe_transactions_response::TransactionState {
        let req = DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(sb(id))]);
        let r: DescribeTransactionsResponse =
            call(&mut self.s, ApiKey::DescribeTransactions, 0, &req).await;
        r.transaction_states[0].clone()
    }
}

/// A batch of `n` records, from producer `pid` (idempotent or transactional) if `pid >= 0`.
fn records(pid: i64, epoch: i16, seq: i32, n: usize, transactional: bool) -> Bytes {
    let mut b = BatchBuilder::new(Compression::None);
    if pid >= 0 {
        b = b.producer(pid, epoch, seq).transactional(transactional);
    }
    for i in 0..n {
        b.push(NewRecord::value(format!("v{seq}-{i}")));
    }
    b.build().unwrap()
}

/// DescribeTransactions until the id reaches `state` (completion is written after the
/// markers, so it trails the LSO).
async fn describe_until(
    c: &mut C,
    id: &str,
    state: &str,
) -> describe_transactions_response::TransactionState {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let d = c.describe(id).await;
        if d.transaction_state.as_str() == state {
            return d;
        }
        assert!(
            Instant::now() < deadline,
            "{id} stuck in {}",
            d.transaction_state.as_str()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every (offset, value) of the record batches in a fetch, control batches skipped.
fn values(p: &PartitionData) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let Some(data) = &p.records else { return out };
    for b in record::split_batches(data).unwrap() {
        let (h, it) = record::decode_records(&b, 1 << 20).unwrap();
        if h.is_control() {
            continue;
        }
        for r in it {
            let r = r.unwrap();
            out.push((
                r.offset,
                String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
            ));
        }
    }
    out
}

fn aborted(p: &PartitionData) -> Vec<(i64, i64)> {
    p.aborted_transactions
        .iter()
        .flatten()
        .map(|a| (a.producer_id.0, a.first_offset))
        .collect()
}

#[tokio::test]
async fn commit_abort_and_the_last_stable_offset() {
    let dir = tempfile::tempdir().unwrap();
    let b = start_with(dir.path(), &[]).await;
    let mut c = C::new(&b).await;
    let fc = c.find_txn_coordinator("t1").await;
    assert_eq!(fc.error_code, 0);
    assert_eq!(fc.port, i32::from(b.local_addr().port()));
    // Kafka 4.4 locates the empty transactional id like any other (crates/conformance).
    let fc = c.find_txn_coordinator("").await;
    assert_eq!(fc.error_code, 0);

    assert_eq!(c.produce(None, -1, -1, 0, 2, 9).await, (0, 0));
    let (pid, epoch) = c.init_ok("t1", 60_000).await;
    assert_eq!(c.add("t1", pid, epoch, 0).await, 0);
    assert_eq!(c.produce(Some("t1"), pid, epoch, 0, 3, 9).await, (0, 2));
    // Plain writes after the open transaction are held back too.
    assert_eq!(c.produce(None, -1, -1, 0, 1, 9).await.0, 0);
    let p = c.fetch(0, true).await;
    assert_eq!((p.high_watermark, p.last_stable_offset), (6, 2));
    assert_eq!(values(&p).len(), 2);
    assert_eq!(values(&c.fetch(0, false).await).len(), 6);

    assert_eq!(c.end("t1", pid, epoch, false, 1).await, 0);
    let p = c.stable(7).await;
    assert_eq!(p.high_watermark, 7, "the abort marker");
    assert_eq!(values(&p).len(), 6, "read_committed returns the batches...");
    assert_eq!(
        aborted(&p),
        vec![(pid, 2)],
        "...with the aborted range to drop"
    );
    assert!(c.fetch(0, false).await.aborted_transactions.is_none());

    // A second transaction commits; its records become stable.
    assert_eq!(c.add_ok("t1", pid, epoch, 0).await, 0);
    assert_eq!(c.produce(Some("t1"), pid, epoch, 3, 2, 9).await, (0, 7));
    assert_eq!(c.end("t1", pid, epoch, true, 1).await, 0);
    let p = c.stable(10).await;
    assert_eq!(p.high_watermark, 10);
    describe_until(&mut c, "t1", "CompleteCommit").await;
    let from7 = c.fetch(7, true).await;
    assert_eq!(values(&from7).len(), 2);
    assert!(
        aborted(&from7).is_empty(),
        "the abort ended before offset 7"
    );
    b.shutdown().await;
}

#[tokio::test]
async fn a_partition_outside_the_transaction_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let b = start_with(dir.path(), &[]).await;
    let mut c = C::new(&b).await;
    c.find_txn_coordinator("t2").await;
    let (pid, epoch) = c.init_ok("t2", 60_000).await;
    // No AddPartitionsToTxn: KIP-890 refuses the write, so nothing can hang the LSO.
    assert_eq!(
        c.produce(Some("t2"), pid, epoch, 0, 1, 9).await.0,
        48,
        "INVALID_TXN_STATE"
    );
    assert_eq!(
        c.produce(Some("t2"), pid, epoch, 0, 1, 11).await.0,
        120,
        "TRANSACTION_ABORTABLE"
    );
    // A transactional batch without a transactional id, or a control batch: INVALID_RECORD.
    let plain_txn = records(pid, epoch, 0, 1, true);
    assert_eq!(
        c.produce_raw(None, plain_txn, 9).await.0,
        87,
        "INVALID_RECORD"
    );
    let mut ctl = BatchBuilder::new(Compression::None)
        .producer(pid, epoch, -1)
        .transactional(true)
        .control(true);
    ctl.push(NewRecord::new(
        Some(Bytes::from_static(&[0, 0, 0, 1])),
        None,
        0,
    ));
    let ctl = ctl.build().unwrap();
    assert_eq!(c.produce_raw(Some("t2"), ctl.clone(), 9).await.0, 87);
    assert_eq!(c.produce_raw(None, ctl, 9).await.0, 87);
    let p = c.fetch(0, true).await;
    assert_eq!(p.high_watermark, 0, "nothing was written");
    assert_eq!(p.last_stable_offset, 0);
    // Wrong epoch: INVALID_PRODUCER_EPOCH from the verification.
    assert_eq!(c.add("t2", pid, epoch, 0).await, 0);
    assert_eq!(c.produce(Some("t2"), pid, epoch + 1, 0, 1, 9).await.0, 47);
    assert_eq!(c.produce(Some("t2"), pid, epoch, 0, 1, 9).await.0, 0);
    b.shutdown().await;
}

#[tokio::test]
async fn out_of_order_and_stale_requests_get_kafka_errors_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let b = start_with(dir.path(), &[]).await;
    let mut c = C::new(&b).await;
    c.find_txn_coordinator("t3").await;
    // EndTxn and AddOffsetsToTxn before InitProducerId.
    assert_eq!(
        c.end("t3", 1, 0, true, 1).await,
        49,
        "INVALID_PRODUCER_ID_MAPPING"
    );
    assert_eq!(c.add_offsets("t3", 1, 0, "g").await, 49);
    let (pid, epoch) = c.init_ok("t3", 60_000).await;
    assert_eq!(c.find_coordinator("g", 0).await.error_code, 0);
    assert_eq!(
        c.end("t3", pid, epoch, true, 1).await,
        48,
        "INVALID_TXN_STATE: nothing to commit"
    );
    // TxnOffsetCommit for a group the transaction does not contain, then with a stale epoch.
    assert_eq!(c.txn_commit_offset("t3", pid, epoch, "g", 5).await, 48);
    assert_eq!(c.add_offsets("t3", pid, epoch, "g").await, 0);
    assert_eq!(
        c.txn_commit_offset("t3", pid, epoch + 1, "g", 5).await,
        47,
        "INVALID_PRODUCER_EPOCH"
    );
    assert_eq!(c.txn_commit_offset("t3", pid, epoch, "g", 5).await, 0);

    // A second producer with the same id: the open transaction is aborted (fencing the
    // first producer), then the second gets a newer epoch.
    let mut c2 = C::new(&b).await;
    let (e, ..) = c2.init("t3", 60_000).await;
    assert_eq!(
        e, 51,
        "CONCURRENT_TRANSACTIONS while the old transaction is aborted"
    );
    let (pid2, epoch2) = c2.init_ok("t3", 60_000).await;
    assert_eq!(pid2, pid);
    assert!(epoch2 >= epoch + 2);
    // The zombie is fenced everywhere.
    assert_eq!(
        c.end("t3", pid, epoch, true, 2).await,
        90,
        "PRODUCER_FENCED"
    );
    assert_eq!(
        c.end("t3", pid, epoch, true, 1).await,
        47,
        "INVALID_PRODUCER_EPOCH before v2"
    );
    assert_eq!(c.add("t3", pid, epoch, 0).await, 90);
    assert_eq!(c.produce(Some("t3"), pid, epoch, 0, 1, 9).await.0, 47);
    assert_eq!(c.describe("t3").await.producer_epoch, epoch2);

    // Markers over the wire: an older producer epoch or coordinator epoch is fenced and
    // writes nothing; an unknown partition is UNKNOWN_TOPIC_OR_PARTITION.
    assert_eq!(c2.add_ok("t3", pid2, epoch2, 0).await, 0);
    assert_eq!(c2.produce(Some("t3"), pid2, epoch2, 0, 1, 9).await.0, 0);
    let hw = c.fetch(0, false).await.high_watermark;
    let markers = |producer_epoch: i16, coordinator_epoch: i32, topic: &str| {
        WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
            .with_producer_id(ProducerId(pid2))
            .with_producer_epoch(producer_epoch)
            .with_transaction_result(true)
            .with_coordinator_epoch(coordinator_epoch)
            .with_topics(vec![WritableTxnMarkerTopic::default()
                .with_name(TopicName(sb(topic)))
                .with_partition_indexes(vec![0])])])
    };
    let code = |r: WriteTxnMarkersResponse| r.markers[0].topics[0].partitions[0].error_code;
    let r: WriteTxnMarkersResponse = call(
        &mut c.s,
        ApiKey::WriteTxnMarkers,
        1,
        &markers(epoch, 0, TOPIC),
    )
    .await;
    assert_eq!(code(r), 47, "INVALID_PRODUCER_EPOCH");
    let r: WriteTxnMarkersResponse = call(
        &mut c.s,
        ApiKey::WriteTxnMarkers,
        1,
        &markers(epoch2, 0, "nope"),
    )
    .await;
    assert_eq!(code(r), 3, "UNKNOWN_TOPIC_OR_PARTITION");
    assert_eq!(c.fetch(0, false).await.high_watermark, hw);
    // The coordinator's own markers for t3 carried epoch 0 of __transaction_state; a marker
    // from epoch -1 is from an older coordinator.
    assert_eq!(c2.end("t3", pid2, epoch2, true, 3).await, 0);
    c.stable(hw + 1).await;
    let r: WriteTxnMarkersResponse = call(
        &mut c.s,
        ApiKey::WriteTxnMarkers,
        1,
        &markers(epoch2, -1, TOPIC),
    )
    .await;
    assert_eq!(code(r), 52, "TRANSACTION_COORDINATOR_FENCED");

    // DescribeProducers shows the producer, its epoch and no open transaction.
    let req = DescribeProducersRequest::default().with_topics(vec![
        describe_producers_request::TopicRequest::default()
            .with_name(TopicName(sb(TOPIC)))
            .with_partition_indexes(vec![0]),
    ]);
    let r: DescribeProducersResponse = call(&mut c.s, ApiKey::DescribeProducers, 0, &req).await;
    let ps = &r.topics[0].partitions[0].active_producers;
    let p = ps.iter().find(|p| p.producer_id.0 == pid2).unwrap();
    assert_eq!(
        (p.producer_epoch, p.current_txn_start_offset),
        (i32::from(epoch2), -1)
    );
    // ListTransactions shows t3.
    let r: ListTransactionsResponse = call(
        &mut c.s,
        ApiKey::ListTransactions,
        1,
        &ListTransactionsRequest::default().with_duration_filter(-1),
    )
    .await;
    assert!(r
        .transaction_states
        .iter()
        .any(|t| t.transactional_id.0.as_str() == "t3"));
    b.shutdown().await;
}

#[tokio::test]
async fn a_timed_out_transaction_is_aborted_by_the_coordinator() {
    let dir = tempfile::tempdir().unwrap();
    let b = start_with(
        dir.path(),
        &[(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            "100",
        )],
    )
    .await;
    let mut c = C::new(&b).await;
    c.find_txn_coordinator("t4").await;
    let (pid, epoch) = c.init_ok("t4", 500).await;
    assert_eq!(c.add("t4", pid, epoch, 0).await, 0);
    assert_eq!(c.produce(Some("t4"), pid, epoch, 0, 2, 9).await.0, 0);
    let p = c.stable(3).await;
    assert_eq!(aborted(&p), vec![(pid, 0)]);
    assert!(p.high_watermark >= 3);
    let d = describe_until(&mut c, "t4", "CompleteAbort").await;
    assert_eq!(d.producer_epoch, epoch + 1, "aborted with an epoch bump");
    assert_eq!(
        c.end("t4", pid, epoch, true, 3).await,
        90,
        "the producer learns it was fenced"
    );
    b.shutdown().await;
}

#[tokio::test]
async fn transaction_state_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (pid, epoch) = {
        let b = start_with(dir.path(), &[]).await;
        let mut c = C::new(&b).await;
        c.find_txn_coordinator("t5").await;
        c.find_coordinator("g5", 0).await;
        let (pid, epoch) = c.init_ok("t5", 60_000).await;
        assert_eq!(c.add("t5", pid, epoch, 0).await, 0);
        assert_eq!(c.produce(Some("t5"), pid, epoch, 0, 2, 9).await.0, 0);
        assert_eq!(c.add_offsets("t5", pid, epoch, "g5").await, 0);
        assert_eq!(c.txn_commit_offset("t5", pid, epoch, "g5", 2).await, 0);
        // Stop without a clean shutdown: nothing is flushed or closed.
        drop(b);
        (pid, epoch)
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let b = start_with(dir.path(), &[]).await;
    let mut c = C::new(&b).await;
    c.find_txn_coordinator("t5").await;
    let p = c.fetch(0, true).await;
    assert_eq!(
        (p.last_stable_offset, p.high_watermark),
        (0, 2),
        "still open after restart"
    );
    let d = c.describe("t5").await;
    assert_eq!(
        (
            d.transaction_state.as_str(),
            d.producer_id.0,
            d.producer_epoch
        ),
        ("Ongoing", pid, epoch)
    );
    assert_eq!(c.end("t5", pid, epoch, true, 3).await, 0);
    let p = c.stable(3).await;
    assert_eq!(values(&p).len(), 2);
    // The transactional offset is committed once the marker reached __consumer_offsets.
    let deadline = Instant::now() + DEADLINE;
    loop {
        let req = OffsetFetchRequest::default()
            .with_group_id(GroupId(sb("g5")))
            .with_require_stable(true)
            .with_topics(Some(vec![
                offset_fetch_request::OffsetFetchRequestTopic::default()
                    .with_name(TopicName(sb(TOPIC)))
                    .with_partition_indexes(vec![0]),
            ]));
        let r: OffsetFetchResponse = call(&mut c.s, ApiKey::OffsetFetch, 7, &req).await;
        let part = &r.topics[0].partitions[0];
        if part.error_code == 0 {
            assert_eq!(part.committed_offset, 2);
            break;
        }
        assert_eq!(
            part.error_code, 88,
            "UNSTABLE_OFFSET_COMMIT until the marker"
        );
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    b.shutdown().await;
}
