//! The native client against a real `moldau server` process: producer (all codecs, acks
//! 0/1/all, Java partitioner), consumer (assign/seek, timestamps, stream, pause), admin, and
//! consumer groups (range and cooperative-sticky), plus a hostile broker.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "cli_support.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::{
    partition_for_key, Acks, Admin, Assignor, Compression, ConfigOp, Consumer, ConsumerConfig,
    ConsumerRecord, ErrorCode, GroupProtocol, NewTopic, OffsetReset, Producer, ProducerConfig,
    ProducerRecord, ResourceType, SeekTo, TopicPartition,
};
use support::Server;

async fn read_n(consumer: &mut Consumer, n: usize) -> Vec<ConsumerRecord> {
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while out.len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "got {} of {n} records",
            out.len()
        );
        out.extend(consumer.poll(Duration::from_millis(200)).await.unwrap());
    }
    out
}

fn consumer_config(server: &Server) -> ConsumerConfig {
    ConsumerConfig {
        client: server.client_config(),
        auto_offset_reset: OffsetReset::Earliest,
        ..ConsumerConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produces_with_every_codec_and_acks_and_reads_back() {
    let server = Server::start(&[]);
    let admin = Admin::connect(server.client_config()).await.unwrap();
    for (ci, codec) in Compression::ALL.iter().enumerate() {
        for acks in [Acks::None, Acks::Leader, Acks::All] {
            let topic = format!("codec-{ci}-{}", acks.as_i16() + 1);
            admin.create_topic(NewTopic::new(&topic, 3)).await.unwrap();
            let producer = Producer::new(ProducerConfig {
                client: server.client_config(),
                acks,
                compression: *codec,
                linger_ms: 2,
                ..ProducerConfig::default()
            })
            .await
            .unwrap();
            let mut futures = Vec::new();
            for i in 0..200 {
                let r = ProducerRecord::new(&topic, format!("value-{i}"))
                    .key(format!("key-{}", i % 17))
                    .header("i", i.to_string())
                    .timestamp(1_700_000_000_000 + i);
                futures.push(producer.enqueue(r).await.unwrap());
            }
            let mut placed = BTreeMap::new();
            for (i, f) in futures.into_iter().enumerate() {
                let md = f.await.unwrap();
                let key = format!("key-{}", i % 17);
                assert_eq!(md.partition, partition_for_key(key.as_bytes(), 3), "{key}");
                if acks == Acks::None {
                    assert_eq!(md.offset, -1);
                } else {
                    placed.insert(i, (md.partition, md.offset));
                }
            }
            producer.close().await.unwrap();
            let mut consumer = Consumer::new(consumer_config(&server)).await.unwrap();
            let tps: Vec<_> = (0..3).map(|p| TopicPartition::new(&topic, p)).collect();
            consumer.assign(tps.clone());
            for tp in &tps {
                consumer.seek(tp, SeekTo::Beginning);
            }
            let records = read_n(&mut consumer, 200).await;
            assert_eq!(records.len(), 200, "{codec:?} {acks:?}");
            let mut per_partition: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
            for r in &records {
                let v = String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap();
                let i: usize = v.strip_prefix("value-").unwrap().parse().unwrap();
                assert_eq!(r.key.as_deref(), Some(format!("key-{}", i % 17).as_bytes()));
                assert_eq!(
                    r.headers,
                    vec![("i".to_string(), Some(i.to_string().into()))]
                );
                assert_eq!(r.timestamp, 1_700_000_000_000 + i as i64);
                if let Some(&(p, o)) = placed.get(&i) {
                    assert_eq!((r.partition, r.offset), (p, o));
                }
                per_partition.entry(r.partition).or_default().push(r.offset);
            }
            for offsets in per_partition.values() {
                let want: Vec<i64> = (0..offsets.len() as i64).collect();
                assert_eq!(offsets, &want, "offsets are dense and in order");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeks_by_offset_timestamp_and_end_and_streams() {
    let server = Server::start(&[]);
    let producer = Producer::new(ProducerConfig {
        client: server.client_config(),
        ..ProducerConfig::default()
    })
    .await
    .unwrap();
    for i in 0..10i64 {
        producer
            .send(
                ProducerRecord::new("seek", format!("v{i}"))
                    .partition(0)
                    .timestamp(1_000 * (i + 1)),
            )
            .await
            .unwrap();
    }
    let tp = TopicPartition::new("seek", 0);
    let mut consumer = Consumer::new(consumer_config(&server)).await.unwrap();
    consumer.assign(vec![tp.clone()]);
    consumer.seek(&tp, SeekTo::Offset(7));
    let rs = read_n(&mut consumer, 3).await;
    assert_eq!(
        rs.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![7, 8, 9]
    );
    consumer.seek(&tp, SeekTo::Timestamp(4_500));
    let rs = read_n(&mut consumer, 5).await;
    assert_eq!(rs[0].offset, 4);
    consumer.seek(&tp, SeekTo::End);
    assert!(consumer
        .poll(Duration::from_millis(300))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(consumer.position(&tp), Some(10));
    // Pause holds records back; resume releases them.
    consumer.pause(std::slice::from_ref(&tp));
    producer
        .send(ProducerRecord::new("seek", "late").partition(0))
        .await
        .unwrap();
    assert!(consumer
        .poll(Duration::from_millis(300))
        .await
        .unwrap()
        .is_empty());
    consumer.resume(std::slice::from_ref(&tp));
    let rs = read_n(&mut consumer, 1).await;
    assert_eq!(rs[0].offset, 10);
    // The stream form.
    consumer.seek(&tp, SeekTo::Beginning);
    let mut stream = consumer.into_stream();
    for want in 0..11 {
        let r = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("record within 30 s")
            .expect("stream open")
            .unwrap();
        assert_eq!(r.offset, want);
    }
    producer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_manages_topics_configs_records_and_offsets() {
    let server = Server::start(&[]);
    let admin = Admin::connect(server.client_config()).await.unwrap();
    admin
        .create_topic(NewTopic::new("adm", 2).config("retention.ms", "123456"))
        .await
        .unwrap();
    let err = admin
        .create_topic(NewTopic::new("adm", 2))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::TopicAlreadyExists));
    assert!(!err.is_retriable());
    let t = &admin.describe_topics(&["adm".into()]).await.unwrap()[0];
    assert_eq!(t.partitions.len(), 2);
    assert!(admin
        .list_topics()
        .await
        .unwrap()
        .iter()
        .any(|t| t.name == "adm"));
    let cfg = admin
        .describe_configs(ResourceType::Topic, "adm", None)
        .await
        .unwrap();
    let r = cfg.iter().find(|c| c.name == "retention.ms").unwrap();
    assert_eq!(
        (r.value.as_deref(), r.source.as_str()),
        (Some("123456"), "DYNAMIC_TOPIC_CONFIG")
    );
    admin
        .incremental_alter_configs(
            ResourceType::Topic,
            "adm",
            &[
                ("retention.ms".into(), ConfigOp::Delete),
                // Compacted and deleted by time: Kafka refuses DeleteRecords (below) on a
                // compact-only topic with POLICY_VIOLATION.
                (
                    "cleanup.policy".into(),
                    ConfigOp::Set("compact,delete".into()),
                ),
            ],
        )
        .await
        .unwrap();
    let cfg = admin
        .describe_configs(ResourceType::Topic, "adm", None)
        .await
        .unwrap();
    assert_eq!(
        cfg.iter()
            .find(|c| c.name == "retention.ms")
            .unwrap()
            .source,
        "DEFAULT_CONFIG"
    );
    assert_eq!(
        cfg.iter()
            .find(|c| c.name == "cleanup.policy")
            .unwrap()
            .value
            .as_deref(),
        Some("compact,delete")
    );
    admin.create_partitions("adm", 4).await.unwrap();
    assert_eq!(
        admin.describe_topics(&["adm".into()]).await.unwrap()[0]
            .partitions
            .len(),
        4
    );

    let producer = Producer::new(ProducerConfig {
        client: server.client_config(),
        ..ProducerConfig::default()
    })
    .await
    .unwrap();
    for i in 0..5 {
        producer
            // "adm" is compacted by now: its records need keys (Kafka's LogValidator).
            .send(
                ProducerRecord::new("adm", format!("{i}"))
                    .key(format!("k{i}"))
                    .partition(1),
            )
            .await
            .unwrap();
    }
    let tp = TopicPartition::new("adm", 1);
    let low = admin
        .delete_records(&BTreeMap::from([(tp.clone(), 3)]))
        .await
        .unwrap();
    assert_eq!(low[&tp], 3);
    let earliest = admin.list_offsets(&[(tp.clone(), -2)]).await.unwrap();
    assert_eq!(earliest[&tp], 3);

    admin
        .alter_group_offsets("g-admin", &BTreeMap::from([(tp.clone(), 4)]))
        .await
        .unwrap();
    assert_eq!(
        admin.list_group_offsets("g-admin", None).await.unwrap()[&tp],
        4
    );
    assert!(admin
        .list_groups()
        .await
        .unwrap()
        .iter()
        .any(|g| g.group_id == "g-admin"));
    admin
        .delete_group_offsets("g-admin", std::slice::from_ref(&tp))
        .await
        .unwrap();
    assert!(admin
        .list_group_offsets("g-admin", None)
        .await
        .unwrap()
        .is_empty());
    let deleted = admin.delete_groups(&["g-admin".into()]).await.unwrap();
    assert!(deleted[0].1.is_ok(), "{deleted:?}");

    let cluster = admin.describe_cluster().await.unwrap();
    assert_eq!(cluster.brokers.len(), 1);
    assert!(cluster.cluster_id.is_some());
    let res = admin.delete_topics(&["adm".into()]).await.unwrap();
    assert!(res[0].1.is_ok());
    let err = admin.describe_topics(&["adm".into()]).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::UnknownTopicOrPartition));
    producer.close().await.unwrap();
}

/// Tracks what the rebalance callbacks say the member owns.
struct Owned(Arc<Mutex<BTreeSet<TopicPartition>>>);

impl client::RebalanceListener for Owned {
    fn on_partitions_revoked(&mut self, partitions: &[TopicPartition]) {
        let mut o = self.0.lock().unwrap();
        for tp in partitions {
            assert!(o.remove(tp), "revoked {tp} that was never assigned");
        }
    }

    fn on_partitions_assigned(&mut self, partitions: &[TopicPartition]) {
        let mut o = self.0.lock().unwrap();
        for tp in partitions {
            assert!(o.insert(tp.clone()), "assigned {tp} twice");
        }
    }
}

async fn group_consumer(
    server: &Server,
    group: &str,
    assignor: Assignor,
    protocol: GroupProtocol,
) -> (Consumer, Arc<Mutex<BTreeSet<TopicPartition>>>) {
    let owned = Arc::new(Mutex::new(BTreeSet::new()));
    let mut c = Consumer::new(ConsumerConfig {
        group_id: Some(group.into()),
        assignors: vec![assignor],
        group_protocol: protocol,
        heartbeat_interval_ms: 100,
        session_timeout_ms: 10_000,
        auto_commit_interval_ms: 200,
        ..consumer_config(server)
    })
    .await
    .unwrap();
    c.subscribe_with(&["grp"], Some(Box::new(Owned(owned.clone()))))
        .unwrap();
    (c, owned)
}

/// A group member polling on its own task (as applications do: a member blocked in a
/// rebalance must not stop the others from rejoining).
struct Member {
    seen: Arc<Mutex<BTreeSet<(i32, i64)>>>,
    assignment: Arc<Mutex<Vec<TopicPartition>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Consumer>,
}

fn spawn_member(mut c: Consumer, seen: Arc<Mutex<BTreeSet<(i32, i64)>>>) -> Member {
    let assignment = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let (a, st, sn) = (assignment.clone(), stop.clone(), seen.clone());
    let task = tokio::spawn(async move {
        while !st.load(Ordering::Acquire) {
            for r in c.poll(Duration::from_millis(100)).await.unwrap() {
                sn.lock().unwrap().insert((r.partition, r.offset));
            }
            *a.lock().unwrap() = c.assignment();
        }
        c
    });
    Member {
        seen,
        assignment,
        stop,
        task,
    }
}

impl Member {
    fn assigned(&self) -> BTreeSet<TopicPartition> {
        self.assignment.lock().unwrap().iter().cloned().collect()
    }

    async fn stop(self) -> Consumer {
        self.stop.store(true, Ordering::Release);
        self.task.await.unwrap()
    }
}

async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Two members share a topic, commit, and one leaves; with the consumer protocol (KIP-848)
/// the broker's `uniform` assignor decides and member epochs are reported.
async fn groups_share_partitions(assignor: Assignor, protocol: GroupProtocol) {
    let server = Server::start(&[
        "group.consumer.min.heartbeat.interval.ms=50",
        "group.consumer.heartbeat.interval.ms=100",
    ]);
    let admin = Admin::connect(server.client_config()).await.unwrap();
    admin.create_topic(NewTopic::new("grp", 4)).await.unwrap();
    let producer = Producer::new(ProducerConfig {
        client: server.client_config(),
        ..ProducerConfig::default()
    })
    .await
    .unwrap();
    for i in 0..40 {
        producer
            .send(ProducerRecord::new("grp", format!("{i}")).partition(i % 4))
            .await
            .unwrap();
    }
    let group = format!("g-{}-{protocol:?}", assignor.name());
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let (ca, owned_a) = group_consumer(&server, &group, assignor, protocol).await;
    let (cb, owned_b) = group_consumer(&server, &group, assignor, protocol).await;
    let a = spawn_member(ca, seen.clone());
    let b = spawn_member(cb, seen.clone());
    wait_until("a balanced group that read everything", || {
        let (sa, sb) = (a.assigned(), b.assigned());
        seen.lock().unwrap().len() == 40
            && sa.len() + sb.len() == 4
            && sa.is_disjoint(&sb)
            && !sa.is_empty()
            && !sb.is_empty()
    })
    .await;
    assert_eq!(a.seen.lock().unwrap().len(), 40);
    let desc = admin
        .describe_groups(std::slice::from_ref(&group))
        .await
        .unwrap();
    assert_eq!(desc[0].members.len(), 2);
    if protocol == GroupProtocol::Consumer {
        assert_eq!(desc[0].group_type, "consumer");
        assert_eq!(desc[0].protocol, "uniform");
        assert!(desc[0].members.iter().all(|m| m.member_epoch >= Some(1)));
    } else {
        assert_eq!(desc[0].group_type, "classic");
        assert_eq!(desc[0].protocol, assignor.name());
    }
    let assigned: usize = desc[0].members.iter().map(|m| m.assignment.len()).sum();
    assert_eq!(assigned, 4);
    let mut ca = a.stop().await;
    let mut cb = b.stop().await;
    // The callbacks tell the same story as the assignment.
    let set = |c: &Consumer| c.assignment().into_iter().collect::<BTreeSet<_>>();
    assert_eq!(*owned_a.lock().unwrap(), set(&ca));
    assert_eq!(*owned_b.lock().unwrap(), set(&cb));
    ca.commit_sync().await.unwrap();
    cb.commit_sync().await.unwrap();
    let committed = admin.list_group_offsets(&group, None).await.unwrap();
    assert_eq!(committed.values().sum::<i64>(), 40, "{committed:?}");
    // When one member leaves, the other takes every partition.
    cb.close().await.unwrap();
    let a = spawn_member(ca, seen.clone());
    wait_until("the survivor to own every partition", || {
        a.assigned().len() == 4
    })
    .await;
    a.stop().await.close().await.unwrap();
    producer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn range_group_shares_and_rebalances() {
    groups_share_partitions(Assignor::Range, GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cooperative_sticky_group_shares_and_rebalances() {
    groups_share_partitions(Assignor::CooperativeSticky, GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_protocol_group_shares_and_rebalances() {
    groups_share_partitions(Assignor::Range, GroupProtocol::Consumer).await;
}

/// A "broker" that answers the first request with a frame claiming 2 GiB, then one that
/// claims a huge array: the client must fail with an error, not abort or hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_broker_gets_errors_not_panics() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mode = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let m = mode.clone();
    let server = tokio::spawn(async move {
        loop {
            let reply = match m.load(Ordering::Acquire) {
                0 => vec![0x7f, 0xff, 0xff, 0xff],
                // size 10: correlation id 1, error 0, then a truncated api_keys array.
                1 => vec![0, 0, 0, 10, 0, 0, 0, 1, 0, 0, 0x00, 0x00, 0x00, 0x05],
                // An api_keys array claiming i32::MAX entries: kafka-protocol would try to
                // allocate for all of them; the response guard must reject it first.
                _ => vec![0, 0, 0, 10, 0, 0, 0, 1, 0, 0, 0x7f, 0xff, 0xff, 0xff],
            };
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(&reply).await;
            let _ = s.shutdown().await;
        }
    });
    for m in 0..3 {
        mode.store(m, Ordering::Release);
        let mut cfg = client::ClientConfig::new(&addr);
        cfg.request_timeout_ms = 5_000;
        let err = client::Client::connect(cfg).await.unwrap_err();
        assert!(
            matches!(
                err,
                client::Error::Disconnected { .. } | client::Error::Protocol(_)
            ),
            "{err:?}"
        );
    }
    server.abort();
}

/// With the broker gone, a record fails with a retriable error once its delivery timeout
/// expires (after retries), instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_times_out_when_the_broker_is_gone() {
    let server = Server::start(&[]);
    let mut client = server.client_config();
    client.request_timeout_ms = 1_000;
    client.connect_timeout_ms = 500;
    let producer = Producer::new(ProducerConfig {
        client,
        delivery_timeout_ms: 3_000,
        retries: 1_000,
        ..ProducerConfig::default()
    })
    .await
    .unwrap();
    producer
        .send(ProducerRecord::new("gone", "first"))
        .await
        .unwrap();
    drop(server);
    let started = std::time::Instant::now();
    let err = tokio::time::timeout(
        Duration::from_secs(30),
        producer.send(ProducerRecord::new("gone", "second")),
    )
    .await
    .expect("delivery resolved within 30 s")
    .unwrap_err();
    assert!(err.is_retriable(), "{err:?}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "gave up after {:?}",
        started.elapsed()
    );
}

/// A topic deleted under a producer's feet: the produce fails with UNKNOWN_TOPIC_OR_PARTITION,
/// the producer refreshes metadata (re-creating the topic, as auto-create allows) and retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_refreshes_metadata_after_unknown_topic() {
    let server = Server::start(&[]);
    let admin = Admin::connect(server.client_config()).await.unwrap();
    let producer = Producer::new(ProducerConfig {
        client: server.client_config(),
        ..ProducerConfig::default()
    })
    .await
    .unwrap();
    let first = producer
        .send(ProducerRecord::new("moving", "a"))
        .await
        .unwrap();
    assert_eq!(first.offset, 0);
    let deleted = admin.delete_topics(&["moving".into()]).await.unwrap();
    assert!(deleted[0].1.is_ok());
    let second = producer
        .send(ProducerRecord::new("moving", "b"))
        .await
        .unwrap();
    assert_eq!((second.partition, second.offset), (0, 0), "a fresh topic");
    producer.close().await.unwrap();
}

/// Partitions added to a subscribed topic get assigned: the member notices the new count in
/// refreshed metadata and rebalances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_picks_up_added_partitions() {
    let server = Server::start(&[]);
    let admin = Admin::connect(server.client_config()).await.unwrap();
    admin.create_topic(NewTopic::new("grp", 2)).await.unwrap();
    let mut config = consumer_config(&server);
    config.client.metadata_max_age_ms = 200;
    config.group_id = Some("grow".into());
    config.heartbeat_interval_ms = 100;
    let mut c = Consumer::new(config).await.unwrap();
    c.subscribe(&["grp"]).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while c.assignment().len() < 2 {
        assert!(std::time::Instant::now() < deadline, "never joined");
        c.poll(Duration::from_millis(100)).await.unwrap();
    }
    admin.create_partitions("grp", 4).await.unwrap();
    while c.assignment().len() < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "assignment stayed {:?}",
            c.assignment()
        );
        c.poll(Duration::from_millis(100)).await.unwrap();
    }
    c.close().await.unwrap();
}

/// A member that stops polling for longer than max_poll_interval_ms leaves the group, so the
/// others take over its partitions without waiting for the session timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_that_stops_polling_leaves_the_group() {
    let server = Server::start(&[]);
    let admin = Admin::connect(server.client_config()).await.unwrap();
    admin.create_topic(NewTopic::new("grp", 2)).await.unwrap();
    let config = |interval_ms: i32| ConsumerConfig {
        group_id: Some("slow".into()),
        heartbeat_interval_ms: 100,
        session_timeout_ms: 30_000,
        max_poll_interval_ms: interval_ms,
        ..consumer_config(&server)
    };
    let mut slow = Consumer::new(config(1_500)).await.unwrap();
    slow.subscribe(&["grp"]).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while slow.assignment().len() < 2 {
        assert!(std::time::Instant::now() < deadline, "never joined");
        slow.poll(Duration::from_millis(100)).await.unwrap();
    }
    // `slow` stops polling now; `fast` must end up with both partitions long before the
    // 30 s session timeout.
    let (fast, _owned) = {
        let mut c = Consumer::new(config(300_000)).await.unwrap();
        c.subscribe(&["grp"]).unwrap();
        (c, ())
    };
    let stopped_polling = std::time::Instant::now();
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let fast = spawn_member(fast, seen);
    wait_until("the fast member to own both partitions", || {
        fast.assigned().len() == 2
    })
    .await;
    let took = stopped_polling.elapsed();
    assert!(
        took < Duration::from_secs(20),
        "took {took:?}: waited for the session timeout"
    );
    let fast = fast.stop().await;
    fast.close().await.unwrap();
    drop(slow);
}

/// A broker that negotiates versions and then never answers: each request times out, the
/// timed-out connection is closed, and the retry opens a fresh one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_request_closes_its_connection() {
    use std::sync::atomic::AtomicUsize;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = connections.clone();
    let server = tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            counter.fetch_add(1, Ordering::AcqRel);
            tokio::spawn(async move {
                loop {
                    let mut len = [0u8; 4];
                    if s.read_exact(&mut len).await.is_err() {
                        return;
                    }
                    let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
                    if s.read_exact(&mut frame).await.is_err() {
                        return;
                    }
                    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
                    let version = i16::from_be_bytes([frame[2], frame[3]]);
                    if api_key != 18 {
                        continue; // never answer anything but ApiVersions
                    }
                    // ApiVersions response: header v0 (correlation id), then the body at the
                    // request's version: error 0, api_keys [Metadata 1..=12], throttle 0.
                    let mut body = frame[4..8].to_vec();
                    body.extend_from_slice(&[0, 0]);
                    if version >= 3 {
                        body.push(2); // compact array of one
                        body.extend_from_slice(&[0, 3, 0, 1, 0, 12, 0]);
                        body.extend_from_slice(&[0, 0, 0, 0, 0]);
                    } else {
                        body.extend_from_slice(&[0, 0, 0, 1, 0, 3, 0, 1, 0, 12]);
                        if version >= 1 {
                            body.extend_from_slice(&[0, 0, 0, 0]);
                        }
                    }
                    let mut out = (body.len() as u32).to_be_bytes().to_vec();
                    out.extend_from_slice(&body);
                    if s.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let mut cfg = client::ClientConfig::new(&addr);
    cfg.request_timeout_ms = 300;
    cfg.retry_backoff_ms = 10;
    let err = client::Client::connect(cfg).await.unwrap_err();
    assert!(matches!(err, client::Error::Timeout(_)), "{err:?}");
    assert!(
        connections.load(Ordering::Acquire) >= 2,
        "the retry reused the stuck connection"
    );
    server.abort();
}

/// An idempotent producer whose batch is refused for good (MESSAGE_TOO_LARGE) keeps working:
/// the sequence gap would make every later batch of the partition fail, so it starts over
/// with a new producer id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_recovers_from_a_refused_batch() {
    let server = Server::start(&[]);
    let admin = Admin::connect(server.client_config()).await.unwrap();
    admin
        .create_topic(NewTopic::new("small", 1).config("max.message.bytes", "2000"))
        .await
        .unwrap();
    let producer = Producer::new(ProducerConfig {
        client: server.client_config(),
        acks: Acks::All,
        ..ProducerConfig::default()
    })
    .await
    .unwrap();
    producer
        .send(ProducerRecord::new("small", "first"))
        .await
        .unwrap();
    let err = producer
        .send(ProducerRecord::new("small", vec![b'x'; 5000]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::MessageTooLarge), "{err}");
    assert_eq!(
        err.to_string().matches("MESSAGE_TOO_LARGE").count(),
        1,
        "{err}"
    );
    let started = std::time::Instant::now();
    let md = tokio::time::timeout(
        Duration::from_secs(30),
        producer.send(ProducerRecord::new("small", "after")),
    )
    .await
    .expect("the next record is delivered, not stuck behind the gap")
    .unwrap();
    assert_eq!(md.offset, 1);
    assert!(started.elapsed() < Duration::from_secs(10));
    producer.close().await.unwrap();
}
