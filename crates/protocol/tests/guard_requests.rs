//! The request guard against bodies `kafka-protocol` encodes (defaults and populated structs at
//! every version), against hostile bodies, and as the gate that makes decoding safe.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::fetch_request::{
    FetchPartition, FetchTopic, ForgottenTopic, ReplicaState,
};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupHeartbeatRequest, CreateTopicsRequest, FetchRequest, MetadataRequest,
    ProduceRequest, RequestKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use proptest::prelude::*;
use protocol::guard::{self, check_request, walk_request, GuardError};

/// A default request of `api`, as `RequestKind`.
fn default_request(api: ApiKey) -> RequestKind {
    macro_rules! defaults {
        ($($kind:ident),* $(,)?) => {
            match api {
                $(ApiKey::$kind => RequestKind::$kind(Default::default()),)*
                other => panic!("no default for {other:?}"),
            }
        };
    }
    defaults!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        OffsetCommit,
        OffsetFetch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        SaslHandshake,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        OffsetForLeaderEpoch,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        WriteTxnMarkers,
        TxnOffsetCommit,
        DescribeAcls,
        CreateAcls,
        DeleteAcls,
        DescribeConfigs,
        AlterConfigs,
        DescribeLogDirs,
        CreatePartitions,
        DeleteGroups,
        ElectLeaders,
        IncrementalAlterConfigs,
        AlterPartitionReassignments,
        ListPartitionReassignments,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        DescribeClientQuotas,
        AlterClientQuotas,
        SaslAuthenticate,
        DescribeQuorum,
        AlterPartition,
        Envelope,
        BrokerRegistration,
        BrokerHeartbeat,
        AllocateProducerIds,
        OffsetDelete,
        DescribeCluster,
        DescribeProducers,
        DescribeTransactions,
        ListTransactions,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
        DescribeTopicPartitions,
    )
}

fn encode(request: &RequestKind, version: i16) -> Bytes {
    let mut out = BytesMut::new();
    request
        .encode(&mut out, version)
        .unwrap_or_else(|e| panic!("encode {request:?} v{version}: {e:#}"));
    out.freeze()
}

/// The guard accepts `body`, walks exactly all of it, and `kafka-protocol` then decodes it.
fn assert_accepted(api: ApiKey, version: i16, body: &Bytes) {
    let key = api as i16;
    assert_eq!(
        walk_request(key, version, body),
        Ok(body.len()),
        "{api:?} v{version}"
    );
    assert_eq!(
        check_request(key, version, body),
        Ok(()),
        "{api:?} v{version}"
    );
    let mut buf = body.clone();
    RequestKind::decode(api, &mut buf, version)
        .unwrap_or_else(|e| panic!("decode {api:?} v{version}: {e:#}"));
    assert!(buf.is_empty(), "{api:?} v{version}: decode left bytes");
    for cut in 0..body.len() {
        assert!(
            check_request(key, version, &body[..cut]).is_err(),
            "{api:?} v{version}: accepted a {cut}-byte prefix"
        );
    }
}

fn all_versions() -> Vec<(ApiKey, i16)> {
    guard::guarded_apis()
        .flat_map(|(key, _, min, max)| {
            let api = ApiKey::try_from(key).expect("guarded api keys are Kafka api keys");
            (min..=max).map(move |v| (api, v))
        })
        .collect()
}

fn name(s: &'static str) -> TopicName {
    TopicName(StrBytes::from_static_str(s))
}

fn s(s: &'static str) -> StrBytes {
    StrBytes::from_static_str(s)
}

fn unknown_tags() -> std::collections::BTreeMap<i32, Bytes> {
    [(9, Bytes::from_static(b"xyz")), (30, Bytes::new())].into()
}

#[test]
fn covers_the_apis_in_the_brief() {
    let keys: Vec<i16> = guard::guarded_apis().map(|(k, ..)| k).collect();
    let want = [
        0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27,
        28, 29, 30, 31, 32, 33, 35, 36, 37, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 55, 56, 58, 60,
        61, 62, 63, 65, 66, 67, 68, 69, 75,
    ];
    assert_eq!(keys, want);
}

#[test]
fn every_advertised_version_is_guarded() {
    for &(api, min, max) in protocol::versions::SUPPORTED
        .iter()
        .chain(protocol::versions::CONTROLLER_SUPPORTED)
    {
        let (gmin, gmax) = guard::guarded_versions(api as i16)
            .unwrap_or_else(|| panic!("{api:?} is advertised but has no guard schema"));
        assert!(
            gmin <= min && max <= gmax,
            "{api:?} {min}-{max} vs guard {gmin}-{gmax}"
        );
    }
}

#[test]
fn default_requests_at_every_version() {
    let pairs = all_versions();
    assert!(pairs.len() > 150);
    for (api, version) in pairs {
        let body = encode(&default_request(api), version);
        assert_accepted(api, version, &body);
    }
}

fn produce(version: i16, with_nulls: bool) -> ProduceRequest {
    let partition = |index: i32, records: Option<&'static [u8]>| {
        let mut p = PartitionProduceData::default()
            .with_index(index)
            .with_records(records.map(Bytes::from_static));
        if version >= 9 {
            p = p.with_unknown_tagged_fields(unknown_tags());
        }
        p
    };
    let mut topic = TopicProduceData::default().with_partition_data(vec![
        partition(0, Some(b"opaque record batch bytes")),
        partition(1, if with_nulls { None } else { Some(b"") }),
    ]);
    if version <= 12 {
        topic = topic.with_name(name("orders"));
    }
    let mut req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_transactional_id((!with_nulls).then(|| s("tx-1").into()))
        .with_topic_data(vec![topic.clone(), topic]);
    if version >= 9 {
        req = req.with_unknown_tagged_fields(unknown_tags());
    }
    req
}

fn fetch(version: i16) -> FetchRequest {
    let mut partition = FetchPartition::default()
        .with_partition(3)
        .with_fetch_offset(1_000)
        .with_partition_max_bytes(1 << 20);
    if version >= 5 {
        partition = partition.with_log_start_offset(10);
    }
    if version >= 9 {
        partition = partition.with_current_leader_epoch(4);
    }
    if version >= 12 {
        partition = partition
            .with_last_fetched_epoch(3)
            .with_unknown_tagged_fields(unknown_tags());
    }
    if version >= 18 {
        partition = partition.with_high_watermark(900);
    }
    let mut topic = FetchTopic::default().with_partitions(vec![partition.clone(), partition]);
    if version <= 12 {
        topic = topic.with_topic(name("orders"));
    }
    let mut req = FetchRequest::default()
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_isolation_level(1)
        .with_topics(vec![topic.clone(), topic]);
    if version <= 14 {
        req = req.with_replica_id((-1).into());
    }
    if version >= 7 {
        let mut forgotten = ForgottenTopic::default().with_partitions(vec![1, 2, 3]);
        if version <= 12 {
            forgotten = forgotten.with_topic(name("old"));
        }
        req = req
            .with_session_id(77)
            .with_session_epoch(2)
            .with_forgotten_topics_data(vec![forgotten]);
    }
    if version >= 11 {
        req = req.with_rack_id(s("rack-a"));
    }
    if version >= 12 {
        req = req
            .with_cluster_id(Some(s("cluster-x")))
            .with_unknown_tagged_fields(unknown_tags());
    }
    if version >= 15 {
        req = req.with_replica_state(
            ReplicaState::default()
                .with_replica_id(2.into())
                .with_replica_epoch(9),
        );
    }
    req
}

fn metadata(version: i16, null_topics: bool) -> MetadataRequest {
    let topic = MetadataRequestTopic::default().with_name(Some(name("orders")));
    let mut req = MetadataRequest::default().with_topics(if null_topics {
        None
    } else {
        Some(vec![topic.clone(), topic])
    });
    if version >= 4 {
        req = req.with_allow_auto_topic_creation(false);
    }
    if (8..=10).contains(&version) {
        req = req.with_include_cluster_authorized_operations(true);
    }
    if version >= 8 {
        req = req.with_include_topic_authorized_operations(true);
    }
    if version >= 9 {
        req = req.with_unknown_tagged_fields(unknown_tags());
    }
    req
}

fn create_topics(version: i16) -> CreateTopicsRequest {
    let topic = CreatableTopic::default()
        .with_name(name("orders"))
        .with_num_partitions(-1)
        .with_replication_factor(-1)
        .with_assignments(vec![CreatableReplicaAssignment::default()
            .with_partition_index(0)
            .with_broker_ids(vec![1.into(), 2.into()])])
        .with_configs(vec![
            CreatableTopicConfig::default()
                .with_name(s("cleanup.policy"))
                .with_value(Some(s("compact"))),
            CreatableTopicConfig::default().with_name(s("retention.ms")),
        ]);
    let mut req = CreateTopicsRequest::default()
        .with_topics(vec![topic])
        .with_timeout_ms(5_000);
    if version >= 1 {
        req = req.with_validate_only(true);
    }
    if version >= 5 {
        req = req.with_unknown_tagged_fields(unknown_tags());
    }
    req
}

fn consumer_group_heartbeat(version: i16, with_nulls: bool) -> ConsumerGroupHeartbeatRequest {
    let owned = TopicPartitions::default()
        .with_topic_id(Default::default())
        .with_partitions(vec![0, 3, 5])
        .with_unknown_tagged_fields(unknown_tags());
    let mut req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(s("g").into())
        .with_member_id(s("m-1"))
        .with_member_epoch(3)
        .with_rebalance_timeout_ms(if with_nulls { -1 } else { 300_000 })
        .with_unknown_tagged_fields(unknown_tags());
    if !with_nulls {
        req = req
            .with_instance_id(Some(s("i-1")))
            .with_rack_id(Some(s("rack-a")))
            .with_subscribed_topic_names(Some(vec![name("a"), name("b")]))
            .with_server_assignor(Some(s("uniform")))
            .with_topic_partitions(Some(vec![owned.clone(), owned]));
        if version >= 1 {
            req = req.with_subscribed_topic_regex(Some(s("orders-.*")));
        }
    }
    req
}

#[test]
fn populated_requests_at_every_version() {
    let mut samples = 0;
    for (api, version) in all_versions() {
        let requests = match api {
            ApiKey::Produce => vec![
                RequestKind::Produce(produce(version, false)),
                RequestKind::Produce(produce(version, true)),
            ],
            ApiKey::Fetch => vec![RequestKind::Fetch(fetch(version))],
            ApiKey::Metadata if version >= 1 => vec![
                RequestKind::Metadata(metadata(version, false)),
                RequestKind::Metadata(metadata(version, true)),
            ],
            ApiKey::Metadata => vec![RequestKind::Metadata(metadata(version, false))],
            ApiKey::CreateTopics => vec![RequestKind::CreateTopics(create_topics(version))],
            ApiKey::ConsumerGroupHeartbeat => vec![
                RequestKind::ConsumerGroupHeartbeat(consumer_group_heartbeat(version, false)),
                RequestKind::ConsumerGroupHeartbeat(consumer_group_heartbeat(version, true)),
            ],
            _ => continue,
        };
        for request in requests {
            let body = encode(&request, version);
            assert_accepted(api, version, &body);
            samples += 1;
        }
    }
    assert_eq!(samples, 2 * 11 + 15 + (2 * 13 + 1) + 6 + 2 * 2);
}

#[test]
fn produce_claiming_i32_max_topics_in_12_bytes_is_rejected() {
    let mut body = BytesMut::new();
    body.put_i16(-1); // transactional_id: null
    body.put_i16(1); // acks
    body.put_i32(30_000); // timeout_ms
    body.put_i32(i32::MAX); // topic_data count
    assert_eq!(body.len(), 12);
    assert_eq!(
        check_request(0, 3, &body),
        Err(GuardError::LengthTooLarge {
            offset: 8,
            claimed: i32::MAX as u64,
            remaining: 0,
            what: guard::What::Array,
        })
    );
}

#[test]
fn compact_array_with_huge_varint_count_is_rejected() {
    // Produce v9: compact transactional_id (null), acks, timeout, then a compact array whose
    // varint count is u32::MAX (count + 1 encoded).
    let mut body = BytesMut::new();
    body.put_u8(0);
    body.put_i16(1);
    body.put_i32(30_000);
    body.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    body.put_u8(0); // tagged fields
    assert!(matches!(
        check_request(0, 9, &body),
        Err(GuardError::LengthTooLarge {
            what: guard::What::Array,
            ..
        })
    ));
}

#[test]
fn lengths_one_past_the_remaining_bytes_are_rejected() {
    // Metadata v0: topics array of 2 names; the second name claims one byte too many.
    let mut body = BytesMut::new();
    body.put_i32(2);
    body.put_i16(1);
    body.put_u8(b'a');
    body.put_i16(2);
    body.put_u8(b'b');
    assert!(matches!(
        check_request(3, 0, &body),
        Err(GuardError::LengthTooLarge {
            what: guard::What::String,
            ..
        })
    ));
    // An array of i32 is bounded by 4 bytes per element, not 1. Fetch v7 with one forgotten
    // topic whose partitions claim 2 entries (8 bytes) where 7 remain.
    let mut body = BytesMut::new();
    body.put_slice(&[0; 4 * 4 + 1 + 4 + 4]); // replica_id .. session_epoch
    body.put_i32(0); // topics
    body.put_i32(1); // forgotten_topics_data
    body.put_i16(1);
    body.put_u8(b't');
    body.put_i32(2);
    body.put_slice(&[0; 7]);
    assert!(matches!(
        check_request(1, 7, &body),
        Err(GuardError::LengthTooLarge {
            claimed: 2,
            remaining: 7,
            what: guard::What::Array,
            ..
        })
    ));
    // Produce v3 records bytes claiming more than remains.
    let mut body = BytesMut::new();
    body.put_i16(-1);
    body.put_i16(1);
    body.put_i32(0);
    body.put_i32(1); // one topic
    body.put_i16(1);
    body.put_u8(b't');
    body.put_i32(1); // one partition
    body.put_i32(0);
    body.put_i32(i32::MAX); // records length
    assert!(matches!(
        check_request(0, 3, &body),
        Err(GuardError::LengthTooLarge {
            what: guard::What::Bytes,
            ..
        })
    ));
}

#[test]
fn negative_and_null_lengths_where_not_allowed_are_rejected() {
    // DeleteRecords v0 topics is not nullable.
    let mut body = BytesMut::new();
    body.put_i32(-1);
    body.put_i32(1_000);
    assert!(matches!(
        check_request(21, 0, &body),
        Err(GuardError::InvalidLength { len: -1, .. })
    ));
    // Nor is a ListOffsets topic name: v1, replica_id, one topic, name null.
    let mut body = BytesMut::new();
    body.put_i32(-1);
    body.put_i32(1);
    body.put_i16(-1);
    body.put_i32(0);
    assert!(matches!(
        check_request(2, 1, &body),
        Err(GuardError::InvalidLength { len: -1, .. })
    ));
    // Metadata topics is nullable (kafka-protocol decodes null at every version), but -2 is
    // never a length.
    assert_eq!(check_request(3, 1, &(-1i32).to_be_bytes()), Ok(()));
    assert!(matches!(
        check_request(3, 1, &(-2i32).to_be_bytes()),
        Err(GuardError::InvalidLength { len: -2, .. })
    ));
}

#[test]
fn unknown_versions_and_apis_are_unsupported() {
    assert_eq!(check_request(0, 2, &[]), Err(GuardError::Unsupported(0, 2)));
    assert_eq!(
        check_request(0, 14, &[]),
        Err(GuardError::Unsupported(0, 14))
    );
    assert_eq!(
        check_request(17, 2, &[]),
        Err(GuardError::Unsupported(17, 2))
    );
    assert_eq!(
        check_request(-1, 0, &[]),
        Err(GuardError::Unsupported(-1, 0))
    );
}

proptest! {
    /// Random bytes at every api and version: the guard never panics, and whatever it
    /// accepts `kafka-protocol` decodes without aborting, reading exactly the walked bytes.
    #[test]
    fn random_bodies_never_panic(
        pick in any::<prop::sample::Index>(),
        body in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let pairs = all_versions();
        let (api, version) = pairs[pick.index(pairs.len())];
        if check_request(api as i16, version, &body).is_ok() {
            let mut buf = Bytes::from(body);
            if RequestKind::decode(api, &mut buf, version).is_ok() {
                prop_assert!(buf.is_empty());
            }
        }
    }

    /// Small bodies are mostly zeros and small counts, which reach deeper into the schemas
    /// than uniform bytes do.
    #[test]
    fn small_valued_bodies_never_panic(
        pick in any::<prop::sample::Index>(),
        body in prop::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(2u8), any::<u8>()], 0..96),
    ) {
        let pairs = all_versions();
        let (api, version) = pairs[pick.index(pairs.len())];
        if check_request(api as i16, version, &body).is_ok() {
            let mut buf = Bytes::from(body);
            if RequestKind::decode(api, &mut buf, version).is_ok() {
                prop_assert!(buf.is_empty());
            }
        }
    }
}
