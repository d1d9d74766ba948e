//! KIP-951: a NOT_LEADER_OR_FOLLOWER answer names the partition's current leader (id and
//! epoch) and that leader's endpoint on the request's listener, so clients go to the new
//! leader without a Metadata round trip. As Kafka's `KafkaApis` does it: Produce v10+ for
//! NOT_LEADER_OR_FOLLOWER, Fetch v16+ for NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH; an
//! unknown partition or leader answers -1/-1, a leader without a live endpoint on the listener
//! is named without an endpoint.

use crate::state::BrokerState;
use metadata::MetadataImage;
use model::{ErrorCode, TopicId};
use protocol::messages::{
    fetch_response, produce_response, BrokerId, FetchResponse, ProduceResponse,
};
use std::collections::BTreeMap;

/// A partition's current leader as this broker's image knows it: (id, epoch), -1 when unknown.
fn current_leader(image: &MetadataImage, topic: Option<TopicId>, partition: i32) -> (i32, i32) {
    topic
        .and_then(|id| image.partition(id, partition))
        .map_or((-1, -1), |p| (p.leader, p.leader_epoch))
}

/// A live broker's endpoint on `listener`: (host, port, rack).
fn endpoint(
    image: &MetadataImage,
    id: i32,
    listener: &str,
) -> Option<(String, i32, Option<String>)> {
    let b = image.live_brokers().find(|b| b.node_id == id)?;
    let e = b.endpoint(listener)?;
    Some((e.host.clone(), e.port, b.rack.clone()))
}

fn topic_id(image: &MetadataImage, name: &str, id: uuid::Uuid) -> Option<TopicId> {
    if id.is_nil() {
        image.topic(name).map(|t| t.id)
    } else {
        Some(super::from_uuid(id))
    }
}

/// Fills `current_leader` and `node_endpoints` of a Produce response (v10+).
pub fn produce(state: &BrokerState, listener: &str, version: i16, resp: &mut ProduceResponse) {
    if version < 10 {
        return;
    }
    let image = state.image();
    let not_leader = ErrorCode::NotLeaderOrFollower.code();
    let mut nodes = BTreeMap::new();
    for t in &mut resp.responses {
        let id = topic_id(&image, t.name.0.as_str(), t.topic_id);
        for p in t
            .partition_responses
            .iter_mut()
            .filter(|p| p.error_code == not_leader)
        {
            let (leader, epoch) = current_leader(&image, id, p.index);
            p.current_leader = produce_response::LeaderIdAndEpoch::default()
                .with_leader_id(BrokerId(leader))
                .with_leader_epoch(epoch);
            if let Some(e) = endpoint(&image, leader, listener) {
                nodes.insert(leader, e);
            }
        }
    }
    resp.node_endpoints = nodes
        .into_iter()
        .map(|(id, (host, port, rack))| {
            produce_response::NodeEndpoint::default()
                .with_node_id(BrokerId(id))
                .with_host(super::str_bytes(host))
                .with_port(port)
                .with_rack(rack.map(super::str_bytes))
        })
        .collect();
}

/// Fills `current_leader` and `node_endpoints` of a Fetch response (v16+).
pub fn fetch(state: &BrokerState, listener: &str, version: i16, resp: &mut FetchResponse) {
    if version < 16 {
        return;
    }
    let codes = [
        ErrorCode::NotLeaderOrFollower.code(),
        ErrorCode::FencedLeaderEpoch.code(),
    ];
    if !resp
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .any(|p| codes.contains(&p.error_code))
    {
        return;
    }
    let image = state.image();
    let mut nodes = BTreeMap::new();
    for t in &mut resp.responses {
        let id = topic_id(&image, t.topic.0.as_str(), t.topic_id);
        for p in t
            .partitions
            .iter_mut()
            .filter(|p| codes.contains(&p.error_code))
        {
            let (leader, epoch) = current_leader(&image, id, p.partition_index);
            p.current_leader = fetch_response::LeaderIdAndEpoch::default()
                .with_leader_id(BrokerId(leader))
                .with_leader_epoch(epoch);
            if let Some(e) = endpoint(&image, leader, listener) {
                nodes.insert(leader, e);
            }
        }
    }
    resp.node_endpoints = nodes
        .into_iter()
        .map(|(id, (host, port, rack))| {
            fetch_response::NodeEndpoint::default()
                .with_node_id(BrokerId(id))
                .with_host(super::str_bytes(host))
                .with_port(port)
                .with_rack(rack.map(super::str_bytes))
        })
        .collect();
}
