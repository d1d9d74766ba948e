//! An in-process broker driven over real sockets with hand-built frames: the happy path
//! (produce, fetch, list offsets) and hostile input (garbage, bad sizes, huge claimed
//! arrays, bad CRCs, unknown APIs), after each of which the broker must keep serving.
#![allow(clippy::unwrap_used)]

mod common;

use broker::Broker;
use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use protocol::messages::{ApiVersionsRequest, FetchRequest, ProduceRequest, TopicName};
use protocol::{ApiKey, Decode, ResponseHeader, StrBytes};
use record::{BatchBuilder, Compression, NewRecord};
use std::collections::BTreeMap;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

async fn start() -> (broker::BrokerHandle, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &[("socket.request.max.bytes", "1048576")]);
    (Broker::start(config).await.unwrap(), dir)
}

async fn closed(s: &mut TcpStream) -> bool {
    read_response(s).await.is_none()
}

fn produce_request(topic: &str, records: Bytes) -> ProduceRequest {
    use protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])])
}

fn batch(n: usize) -> Bytes {
    let mut b = BatchBuilder::new(Compression::Lz4);
    for i in 0..n {
        b.push(NewRecord::new(
            Some(Bytes::from(format!("k{i}"))),
            Some(Bytes::from(format!("v{i}"))),
            1_700_000_000_000 + i as i64,
        ));
    }
    b.build().unwrap()
}

#[tokio::test]
async fn produce_fetch_round_trip_and_restart() {
    let (b, dir) = start().await;
    let addr = b.local_addr();
    let mut s = TcpStream::connect(addr).await.unwrap();
    let md: protocol::messages::MetadataResponse =
        call(&mut s, ApiKey::Metadata, 12, &metadata_request("wire")).await;
    assert_eq!(md.topics[0].error_code, 0);
    assert_eq!(md.topics[0].partitions.len(), 1);
    let sent = batch(10);
    for expected_base in [0, 10] {
        let r: protocol::messages::ProduceResponse = call(
            &mut s,
            ApiKey::Produce,
            9,
            &produce_request("wire", sent.clone()),
        )
        .await;
        let p = &r.responses[0].partition_responses[0];
        assert_eq!((p.error_code, p.base_offset), (0, expected_base));
    }
    let fetch = |offset: i64| {
        use protocol::messages::fetch_request::{FetchPartition, FetchTopic};
        FetchRequest::default()
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("wire")))
                .with_partitions(vec![FetchPartition::default()
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1 << 20)])])
    };
    let r: protocol::messages::FetchResponse = call(&mut s, ApiKey::Fetch, 11, &fetch(5)).await;
    let pd = &r.responses[0].partitions[0];
    assert_eq!((pd.error_code, pd.high_watermark), (0, 20));
    let data = pd.records.clone().unwrap();
    let batches = record::split_batches(&data).unwrap();
    // Offset 5 is inside the first batch: the whole batch comes back, then the second.
    assert_eq!(batches.len(), 2);
    let (h, recs) = record::decode_records(&batches[1], 1 << 20).unwrap();
    assert_eq!(h.base_offset, 10);
    let values: Vec<_> = recs.map(|r| r.unwrap().value.unwrap()).collect();
    assert_eq!(values[3], Bytes::from("v3"));
    // Past the end: OFFSET_OUT_OF_RANGE.
    let r: protocol::messages::FetchResponse = call(&mut s, ApiKey::Fetch, 11, &fetch(21)).await;
    assert_eq!(r.responses[0].partitions[0].error_code, 1);
    drop(s);
    b.shutdown().await;

    let b = Broker::start(config(dir.path(), &[])).await.unwrap();
    let mut s = TcpStream::connect(b.local_addr()).await.unwrap();
    let r: protocol::messages::FetchResponse = call(&mut s, ApiKey::Fetch, 11, &fetch(0)).await;
    assert_eq!(r.responses[0].partitions[0].high_watermark, 20);
    b.shutdown().await;
}

#[tokio::test]
async fn hostile_input_closes_only_the_offender() {
    let (b, _dir) = start().await;
    let addr = b.local_addr();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("negative size", (-5i32).to_be_bytes().to_vec()),
        ("oversized", (2 * 1024 * 1024i32).to_be_bytes().to_vec()),
        ("unknown api", {
            let mut f = vec![0, 0, 0, 10];
            f.extend_from_slice(&[0x7f, 0x00, 0, 0, 0, 0, 0, 1, 0xff, 0xff]);
            f
        }),
        ("produce claiming i32::MAX topics", {
            let mut body = BytesMut::new();
            body.put_i16(0); // Produce
            body.put_i16(3);
            body.put_i32(1);
            body.put_i16(-1); // client id
            body.put_i16(-1); // transactional id
            body.put_i16(1);
            body.put_i32(1000);
            body.put_i32(i32::MAX);
            let mut f = (body.len() as i32).to_be_bytes().to_vec();
            f.extend_from_slice(&body);
            f
        }),
    ];
    for (name, bytes) in cases {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&bytes).await.unwrap();
        assert!(closed(&mut s).await, "{name}: connection should be closed");
        still_serving(addr).await;
    }
    // Truncated frame, then the client hangs up.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0, 0, 0, 100, 1, 2, 3]).await.unwrap();
    drop(s);
    still_serving(addr).await;

    // ApiVersions at a version from the future: a v0 answer with UNSUPPORTED_VERSION.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0, 0, 0, 10, 0, 18, 0, 99, 0, 0, 0, 7, 0xff, 0xff])
        .await
        .unwrap();
    let mut resp = read_response(&mut s).await.unwrap();
    let h = ResponseHeader::decode(&mut resp, 0).unwrap();
    assert_eq!(h.correlation_id, 7);
    let r = protocol::messages::ApiVersionsResponse::decode(&mut resp, 0).unwrap();
    assert_eq!(r.error_code, 35);

    // A batch with a bad CRC gets CORRUPT_MESSAGE; the connection stays usable.
    let mut bad = batch(3).to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    let r: protocol::messages::ProduceResponse = call(
        &mut s,
        ApiKey::Produce,
        9,
        &produce_request("hostile", Bytes::from(bad)),
    )
    .await;
    assert_eq!(
        r.responses[0].partition_responses[0].error_code, 3,
        "unknown topic first"
    );
    let _: protocol::messages::MetadataResponse =
        call(&mut s, ApiKey::Metadata, 12, &metadata_request("hostile")).await;
    let mut bad = batch(3).to_vec();
    bad[last] ^= 0xff;
    let r: protocol::messages::ProduceResponse = call(
        &mut s,
        ApiKey::Produce,
        9,
        &produce_request("hostile", Bytes::from(bad)),
    )
    .await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 2);
    let r: protocol::messages::ProduceResponse = call(
        &mut s,
        ApiKey::Produce,
        9,
        &produce_request("hostile", batch(3)),
    )
    .await;
    assert_eq!(r.responses[0].partition_responses[0].base_offset, 0);
    b.shutdown().await;
}

#[tokio::test]
async fn idle_connections_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &[("connections.max.idle.ms", "200")]);
    let b = Broker::start(config).await.unwrap();
    let mut s = TcpStream::connect(b.local_addr()).await.unwrap();
    let _: protocol::messages::ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    )
    .await;
    // No further request: the broker hangs up (read returns EOF well within the deadline).
    assert!(closed(&mut s).await);
    still_serving(b.local_addr()).await;
    b.shutdown().await;
}

/// Issue 8, item 6: an `__consumer_offsets` that an older Moldau let a client create (one
/// partition, `cleanup.policy=delete`, `retention.ms=2000`) is checked at startup: the
/// broker's config overrides are put back and its partition count is used, so every group
/// finds its coordinator and committed offsets survive restarts.
#[tokio::test]
async fn existing_offsets_topic_with_wrong_settings_is_checked_at_startup() {
    use protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use protocol::messages::{GroupId, OffsetCommitRequest, OffsetFetchRequest};
    let dir = tempfile::tempdir().unwrap();
    {
        // A wave-1 data dir (its single-node metadata log, imported at start).
        use metadata::legacy::{FileMetadataLog, MetadataLog, MetadataRecord};
        let mut log = FileMetadataLog::open(&dir.path().join("__cluster_metadata-0")).unwrap();
        log.replay().unwrap();
        let configs = [("cleanup.policy", "delete"), ("retention.ms", "2000")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        log.append(&[
            MetadataRecord::ClusterId {
                cluster_id: "wire-test-cluster".into(),
            },
            MetadataRecord::RegisterBroker {
                node_id: 1,
                host: "127.0.0.1".into(),
                port: 1,
                rack: None,
            },
            MetadataRecord::CreateTopic {
                name: "__consumer_offsets".into(),
                topic_id: format!("{:032x}", 0xc0ffee_u128),
                partitions: 1,
                replicas: vec![1],
                configs,
            },
            // The topic the groups commit to (commits to unknown topics fail, as in Kafka).
            MetadataRecord::CreateTopic {
                name: "t".into(),
                topic_id: format!("{:032x}", 0xbeef_u128),
                partitions: 1,
                replicas: vec![1],
                configs: BTreeMap::new(),
            },
        ])
        .unwrap();
    }
    let groups: Vec<String> = (0..8).map(|i| format!("group-{i}")).collect();
    assert!(groups
        .iter()
        .any(|g| coordinator::partition_for(g, 50) != 0));
    let topic = || TopicName(StrBytes::from_static_str("t"));
    let b = Broker::start(config(dir.path(), &[])).await.unwrap();
    // The broker restores the settings through the controller once it leads the topic.
    let deadline = std::time::Instant::now() + DEADLINE;
    let offsets = loop {
        let t = b
            .state()
            .image()
            .topic("__consumer_offsets")
            .unwrap()
            .clone();
        if t.configs.get("cleanup.policy").map(String::as_str) == Some("compact")
            || std::time::Instant::now() > deadline
        {
            break t;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    assert_eq!(offsets.partitions.len(), 1);
    assert_eq!(
        offsets.configs.get("cleanup.policy").map(String::as_str),
        Some("compact")
    );
    assert!(!offsets.configs.contains_key("retention.ms"));
    let mut s = TcpStream::connect(b.local_addr()).await.unwrap();
    for (i, g) in groups.iter().enumerate() {
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(g.clone())))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(topic())
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(i as i64 + 1)])]);
        let r: protocol::messages::OffsetCommitResponse =
            call(&mut s, ApiKey::OffsetCommit, 2, &req).await;
        assert_eq!(r.topics[0].partitions[0].error_code, 0, "{g}");
    }
    drop(s);
    b.shutdown().await;
    let b = Broker::start(config(dir.path(), &[])).await.unwrap();
    let mut s = TcpStream::connect(b.local_addr()).await.unwrap();
    for (i, g) in groups.iter().enumerate() {
        let req = OffsetFetchRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(g.clone())))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(topic())
                .with_partition_indexes(vec![0])]));
        let r: protocol::messages::OffsetFetchResponse =
            call(&mut s, ApiKey::OffsetFetch, 1, &req).await;
        let p = &r.topics[0].partitions[0];
        assert_eq!((p.error_code, p.committed_offset), (0, i as i64 + 1), "{g}");
    }
    b.shutdown().await;
}
