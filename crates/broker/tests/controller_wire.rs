//! A real node's CONTROLLER listener over a socket, spoken to as a Kafka broker speaks to its
//! controller: a second broker registers (BrokerRegistration) and is unfenced (BrokerHeartbeat),
//! then partition leaders change a partition's ISR with AlterPartition (v2 ids, v3 ids with
//! broker epochs), through each of Kafka's refusals; every accepted change is the committed
//! registration the node then serves in Metadata.
#![allow(clippy::unwrap_used)]

mod common;

use broker::Broker;
use common::*;
use protocol::messages::alter_partition_request::{BrokerState, PartitionData, TopicData};
use protocol::messages::broker_registration_request::Listener;
use protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use protocol::messages::*;
use protocol::{ApiKey, StrBytes};
use std::sync::atomic::Ordering;
use tokio::net::TcpStream;

const TOPIC: &str = "isr-topic";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One combined node whose controller listener is at a port known to the test.
async fn start() -> (broker::BrokerHandle, tempfile::TempDir, u16) {
    let dir = tempfile::tempdir().unwrap();
    let cport = free_port();
    let listeners = format!("PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{cport}");
    let voters = format!("1@127.0.0.1:{cport}");
    let config = config(
        dir.path(),
        &[
            ("node.id", "1"),
            ("process.roles", "broker,controller"),
            ("listeners", &listeners),
            ("controller.listener.names", "CONTROLLER"),
            ("controller.quorum.voters", &voters),
        ],
    );
    (Broker::start(config).await.unwrap(), dir, cport)
}

fn isr_request(
    version: i16,
    broker: (i32, i64),
    topic_id: uuid::Uuid,
    leader_epoch: i32,
    partition_epoch: i32,
    isr: &[(i32, i64)],
) -> AlterPartitionRequest {
    let mut p = PartitionData::default()
        .with_partition_index(0)
        .with_leader_epoch(leader_epoch)
        .with_partition_epoch(partition_epoch);
    if version >= 3 {
        p = p.with_new_isr_with_epochs(
            isr.iter()
                .map(|(id, epoch)| {
                    BrokerState::default()
                        .with_broker_id(BrokerId(*id))
                        .with_broker_epoch(*epoch)
                })
                .collect(),
        );
    } else {
        p = p.with_new_isr(isr.iter().map(|(id, _)| BrokerId(*id)).collect());
    }
    AlterPartitionRequest::default()
        .with_broker_id(BrokerId(broker.0))
        .with_broker_epoch(broker.1)
        .with_topics(vec![TopicData::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![p])])
}

/// The partition as this node serves it once its image reached `partition_epoch` (the
/// answer comes at commit; the node's own image applies it right after).
async fn served(
    state: &broker::BrokerState,
    topic_id: uuid::Uuid,
    partition_epoch: i32,
) -> metadata::PartitionRegistration {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let p = state
            .image()
            .partition(model::TopicId(*topic_id.as_bytes()), 0)
            .unwrap()
            .clone();
        if p.partition_epoch >= partition_epoch {
            return p;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "partition epoch {partition_epoch} never applied: {p:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The one partition's answer: (error, isr, leader epoch, partition epoch).
fn answer(r: &AlterPartitionResponse) -> (i16, Vec<i32>, i32, i32) {
    assert_eq!(r.error_code, 0, "{r:?}");
    let p = &r.topics[0].partitions[0];
    (
        p.error_code,
        p.isr.iter().map(|b| b.0).collect(),
        p.leader_epoch,
        p.partition_epoch,
    )
}

#[tokio::test]
async fn alter_partition_on_a_real_controller_listener() {
    let (handle, _dir, cport) = start().await;
    let state = handle.state().clone();
    let mut c = TcpStream::connect(("127.0.0.1", cport)).await.unwrap();

    // Broker 2 registers and is unfenced once its heartbeat says it caught up.
    let cluster_id = state.image().cluster_id.clone();
    let reg: BrokerRegistrationResponse = call(
        &mut c,
        ApiKey::BrokerRegistration,
        4,
        &BrokerRegistrationRequest::default()
            .with_broker_id(BrokerId(2))
            .with_cluster_id(StrBytes::from_string(cluster_id))
            .with_incarnation_id(uuid::Uuid::new_v4())
            .with_listeners(vec![Listener::default()
                .with_name(StrBytes::from_static_str("PLAINTEXT"))
                .with_host(StrBytes::from_static_str("127.0.0.1"))
                .with_port(1)
                .with_security_protocol(0)])
            .with_previous_broker_epoch(-1),
    )
    .await;
    assert_eq!(reg.error_code, 0, "{reg:?}");
    let epoch2 = reg.broker_epoch;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let hb: BrokerHeartbeatResponse = call(
            &mut c,
            ApiKey::BrokerHeartbeat,
            1,
            &BrokerHeartbeatRequest::default()
                .with_broker_id(BrokerId(2))
                .with_broker_epoch(epoch2)
                .with_current_metadata_offset(i64::MAX / 2),
        )
        .await;
        assert_eq!(hb.error_code, 0, "{hb:?}");
        if !hb.is_fenced {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "broker 2 never unfenced"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // A partition on brokers 1 (leader) and 2, created on the client listener.
    let mut b = TcpStream::connect(handle.local_addr()).await.unwrap();
    let created: CreateTopicsResponse = call(
        &mut b,
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_num_partitions(-1)
                .with_replication_factor(-1)
                .with_assignments(vec![CreatableReplicaAssignment::default()
                    .with_partition_index(0)
                    .with_broker_ids(vec![BrokerId(1), BrokerId(2)])])]),
    )
    .await;
    assert_eq!(created.topics[0].error_code, 0, "{created:?}");
    let topic_id = created.topics[0].topic_id;
    let image = state.image();
    let p = image
        .partition(model::TopicId(*topic_id.as_bytes()), 0)
        .unwrap()
        .clone();
    assert_eq!((p.leader, p.isr.clone()), (1, vec![1, 2]));
    let (le, pe) = (p.leader_epoch, p.partition_epoch);
    let me = (1, state.broker_epoch.load(Ordering::Acquire));
    let alter = |req: AlterPartitionRequest, version: i16| {
        let frame_req = req;
        async move {
            let mut s = TcpStream::connect(("127.0.0.1", cport)).await.unwrap();
            call::<AlterPartitionResponse>(&mut s, ApiKey::AlterPartition, version, &frame_req)
                .await
        }
    };

    // The leader shrinks the ISR: committed with the partition epoch bumped, then served.
    let r = alter(isr_request(3, me, topic_id, le, pe, &[(1, me.1)]), 3).await;
    assert_eq!(answer(&r), (0, vec![1], le, pe + 1));
    let now = served(&state, topic_id, pe + 1).await;
    assert_eq!((now.isr.clone(), now.partition_epoch), (vec![1], pe + 1));
    let meta: MetadataResponse = call(&mut b, ApiKey::Metadata, 12, &metadata_request(TOPIC)).await;
    let isr: Vec<i32> = meta.topics[0].partitions[0]
        .isr_nodes
        .iter()
        .map(|b| b.0)
        .collect();
    assert_eq!(isr, vec![1]);

    // The same request again is based on an old partition epoch.
    let r = alter(isr_request(3, me, topic_id, le, pe, &[(1, me.1)]), 3).await;
    assert_eq!(answer(&r).0, model::ErrorCode::InvalidUpdateVersion.code());
    // Growing it back with broker 2 at another epoch than its registration's.
    let r = alter(
        isr_request(3, me, topic_id, le, pe + 1, &[(1, me.1), (2, epoch2 + 7)]),
        3,
    )
    .await;
    assert_eq!(answer(&r).0, model::ErrorCode::IneligibleReplica.code());
    served(&state, topic_id, pe + 2).await;
    // A replica that is not one of the partition's.
    let r = alter(
        isr_request(3, me, topic_id, le, pe + 2, &[(1, me.1), (3, 1)]),
        3,
    )
    .await;
    assert_eq!(answer(&r).0, model::ErrorCode::InvalidRequest.code());
    // Broker 2 is not the leader.
    let r = alter(
        isr_request(
            3,
            (2, epoch2),
            topic_id,
            le,
            pe + 2,
            &[(1, me.1), (2, epoch2)],
        ),
        3,
    )
    .await;
    assert_eq!(answer(&r).0, model::ErrorCode::InvalidRequest.code());
    // A leader epoch older than the partition's is fenced; a newer one is unknown here.
    let r = alter(
        isr_request(3, me, topic_id, le - 1, pe + 2, &[(1, me.1), (2, epoch2)]),
        3,
    )
    .await;
    assert_eq!(answer(&r).0, model::ErrorCode::FencedLeaderEpoch.code());
    let r = alter(
        isr_request(3, me, topic_id, le + 1, pe + 2, &[(1, me.1), (2, epoch2)]),
        3,
    )
    .await;
    assert_eq!(answer(&r).0, model::ErrorCode::NotController.code());
    // A stale broker epoch refuses the whole request; an unknown topic id its topic.
    let r = alter(
        isr_request(3, (1, me.1 + 100), topic_id, le, pe + 2, &[(1, me.1)]),
        3,
    )
    .await;
    assert_eq!(
        r.error_code,
        model::ErrorCode::StaleBrokerEpoch.code(),
        "{r:?}"
    );
    let r = alter(
        isr_request(3, me, uuid::Uuid::new_v4(), le, pe + 2, &[(1, me.1)]),
        3,
    )
    .await;
    assert_eq!(answer(&r).0, model::ErrorCode::UnknownTopicId.code());
    // Nothing above changed the partition but the refusal of INELIGIBLE_REPLICA, which
    // bumped the partition epoch (so no other copy of that request can be committed).
    let still = state
        .image()
        .partition(model::TopicId(*topic_id.as_bytes()), 0)
        .unwrap()
        .clone();
    assert_eq!(
        (still.isr.clone(), still.partition_epoch),
        (vec![1], pe + 2)
    );

    // Grown back with broker 2 at its registered epoch (v3), then shrunk with v2 (ids only).
    let r = alter(
        isr_request(3, me, topic_id, le, pe + 2, &[(1, me.1), (2, epoch2)]),
        3,
    )
    .await;
    assert_eq!(answer(&r), (0, vec![1, 2], le, pe + 3));
    let r = alter(isr_request(2, me, topic_id, le, pe + 3, &[(1, -1)]), 2).await;
    assert_eq!(answer(&r), (0, vec![1], le, pe + 4));
    let last = served(&state, topic_id, pe + 4).await;
    assert_eq!(
        (last.isr.clone(), last.partition_epoch, last.leader),
        (vec![1], pe + 4, 1)
    );
    still_serving(handle.local_addr()).await;
}
