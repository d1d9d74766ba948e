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
use protocol::StrBytes;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The leader hints of one response: each failed partition's current leader as this
/// broker's image knows it, and the endpoints (on the request's listener) of the leaders named.
struct Hints {
    image: Arc<MetadataImage>,
    listener: String,
    nodes: BTreeMap<i32, (String, i32, Option<String>)>,
}

impl Hints {
    fn new(state: &BrokerState, listener: &str) -> Hints {
        Hints {
            image: state.image(),
            listener: listener.to_string(),
            nodes: BTreeMap::new(),
        }
    }

    /// The topic's id: the request's, or (v12 and older name topics) by name.
    fn topic_id(&self, name: &str, id: uuid::Uuid) -> Option<TopicId> {
        if id.is_nil() {
            self.image.topic(name).map(|t| t.id)
        } else {
            Some(super::from_uuid(id))
        }
    }

    /// The partition's current leader (id, epoch), -1/-1 when unknown; a live leader's
    /// endpoint on the listener is remembered for [`Hints::endpoints`].
    fn leader(&mut self, topic: Option<TopicId>, partition: i32) -> (BrokerId, i32) {
        let (leader, epoch) = topic
            .and_then(|id| self.image.partition(id, partition))
            .map_or((-1, -1), |p| (p.leader, p.leader_epoch));
        let endpoint = self
            .image
            .live_brokers()
            .find(|b| b.node_id == leader)
            .and_then(|b| Some((b.endpoint(&self.listener)?, b.rack.clone())));
        if let Some((e, rack)) = endpoint {
            self.nodes.insert(leader, (e.host.clone(), e.port, rack));
        }
        (BrokerId(leader), epoch)
    }

    /// The remembered endpoints, built by `make(id, host, port, rack)`, by node id.
    fn endpoints<T>(self, make: impl Fn(BrokerId, StrBytes, i32, Option<StrBytes>) -> T) -> Vec<T> {
        self.nodes
            .into_iter()
            .map(|(id, (host, port, rack))| {
                make(
                    BrokerId(id),
                    super::str_bytes(host),
                    port,
                    rack.map(super::str_bytes),
                )
            })
            .collect()
    }
}

/// Fills `current_leader` and `node_endpoints` of a Produce response (v10+).
pub fn produce(state: &BrokerState, listener: &str, version: i16, resp: &mut ProduceResponse) {
    if version < 10 {
        return;
    }
    let not_leader = ErrorCode::NotLeaderOrFollower.code();
    let mut hints = Hints::new(state, listener);
    for t in &mut resp.responses {
        let id = hints.topic_id(t.name.0.as_str(), t.topic_id);
        for p in t
            .partition_responses
            .iter_mut()
            .filter(|p| p.error_code == not_leader)
        {
            let (leader, epoch) = hints.leader(id, p.index);
            p.current_leader = produce_response::LeaderIdAndEpoch::default()
                .with_leader_id(leader)
                .with_leader_epoch(epoch);
        }
    }
    resp.node_endpoints = hints.endpoints(|id, host, port, rack| {
        produce_response::NodeEndpoint::default()
            .with_node_id(id)
            .with_host(host)
            .with_port(port)
            .with_rack(rack)
    });
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
    let mut hints = Hints::new(state, listener);
    for t in &mut resp.responses {
        let id = hints.topic_id(t.topic.0.as_str(), t.topic_id);
        for p in t
            .partitions
            .iter_mut()
            .filter(|p| codes.contains(&p.error_code))
        {
            let (leader, epoch) = hints.leader(id, p.partition_index);
            p.current_leader = fetch_response::LeaderIdAndEpoch::default()
                .with_leader_id(leader)
                .with_leader_epoch(epoch);
        }
    }
    resp.node_endpoints = hints.endpoints(|id, host, port, rack| {
        fetch_response::NodeEndpoint::default()
            .with_node_id(id)
            .with_host(host)
            .with_port(port)
            .with_rack(rack)
    });
}
