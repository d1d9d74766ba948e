//! `Admin`: topics, partitions, configs, consumer groups and their offsets, records, cluster.

use std::collections::BTreeMap;

use protocol::messages::consumer_group_describe_response;
use protocol::messages::create_partitions_request::CreatePartitionsTopic;
use protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use protocol::messages::delete_records_request::{DeleteRecordsPartition, DeleteRecordsTopic};
use protocol::messages::describe_configs_request::DescribeConfigsResource;
use protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use protocol::messages::{
    ConsumerGroupDescribeRequest, CreatePartitionsRequest, CreateTopicsRequest,
    DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest, DescribeConfigsRequest,
    DescribeGroupsRequest, DescribeQuorumRequest, GroupId, IncrementalAlterConfigsRequest,
    ListGroupsRequest, OffsetDeleteRequest,
};

use crate::cluster::{sb, topic_name, Client, ClientConfig, ClusterInfo, TopicInfo};
use crate::consumer::{list_offsets, TopicPartition};
use crate::error::{Error, Result};
use crate::group::{commit_offsets, decode_assignment, fetch_offsets, find_coordinator};

/// A topic to create.
#[derive(Clone, Debug)]
pub struct NewTopic {
    pub name: String,
    /// -1: the broker's `num.partitions`.
    pub partitions: i32,
    /// -1: the broker's `default.replication.factor`.
    pub replication_factor: i16,
    pub configs: Vec<(String, String)>,
}

impl NewTopic {
    pub fn new(name: impl Into<String>, partitions: i32) -> NewTopic {
        NewTopic {
            name: name.into(),
            partitions,
            replication_factor: -1,
            configs: Vec::new(),
        }
    }

    pub fn config(mut self, k: impl Into<String>, v: impl Into<String>) -> NewTopic {
        self.configs.push((k.into(), v.into()));
        self
    }
}

/// What a config resource is (Kafka's resource type ids).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceType {
    Topic,
    Broker,
}

impl ResourceType {
    fn id(self) -> i8 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Broker => 4,
        }
    }
}

/// One config as DescribeConfigs reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    /// Kafka's source name: DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG...
    pub source: String,
    pub read_only: bool,
    pub sensitive: bool,
}

fn source_name(s: i8) -> &'static str {
    match s {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        7 => "CLIENT_METRICS_CONFIG",
        8 => "GROUP_CONFIG",
        _ => "UNKNOWN",
    }
}

/// An incremental config change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigOp {
    Set(String),
    Delete,
    Append(String),
    Subtract(String),
}

/// A group as ListGroups reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    /// Empty when the broker's ListGroups version does not report it.
    pub state: String,
    /// "classic" or "consumer" (KIP-848); empty when the broker's ListGroups is older than v5.
    pub group_type: String,
}

/// A member as DescribeGroups reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Decoded when the group uses the consumer protocol.
    pub assignment: Vec<TopicPartition>,
    /// Consumer-protocol groups (ConsumerGroupDescribe): the member's epoch.
    pub member_epoch: Option<i32>,
    /// Consumer-protocol groups: what the member is moving to (the target assignment).
    pub target_assignment: Vec<TopicPartition>,
    /// Consumer-protocol groups: the subscribed topics and regex.
    pub subscribed_topics: Vec<String>,
    pub subscribed_regex: Option<String>,
    /// Consumer-protocol groups: whether the member joined with the classic protocol.
    pub classic: bool,
}

/// A group as DescribeGroups reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: String,
    pub protocol_type: String,
    /// The classic group's protocol (assignor), or the consumer group's server assignor.
    pub protocol: String,
    pub members: Vec<GroupMemberDescription>,
    /// "classic" or "consumer" (KIP-848).
    pub group_type: String,
    /// Consumer-protocol groups: the group epoch and the epoch of the target assignment.
    pub group_epoch: Option<i32>,
    pub assignment_epoch: Option<i32>,
}

/// Administrative operations.
///
/// ```no_run
/// # async fn f() -> Result<(), client::Error> {
/// let admin = client::Admin::connect(client::ClientConfig::new("127.0.0.1:9092")).await?;
/// admin.create_topic(client::NewTopic::new("logs", 6).config("retention.ms", "3600000")).await?;
/// for t in admin.list_topics().await? { println!("{} ({} partitions)", t.name, t.partitions.len()); }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Admin {
    client: Client,
}

fn s(x: &protocol::StrBytes) -> String {
    x.as_str().to_owned()
}

impl Admin {
    pub async fn connect(config: ClientConfig) -> Result<Admin> {
        Ok(Admin {
            client: Client::connect(config).await?,
        })
    }

    pub fn new(client: Client) -> Admin {
        Admin { client }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The broker-side timeout: shorter than ours, so the broker's answer (even a timeout
    /// error) arrives before the client gives up on the connection.
    fn timeout_ms(&self) -> i32 {
        crate::cluster::broker_timeout_ms(self.client.config().request_timeout_ms)
    }

    pub(crate) fn broker_timeout_ms(&self) -> i32 {
        self.timeout_ms()
    }

    /// Creates one topic.
    pub async fn create_topic(&self, topic: NewTopic) -> Result<()> {
        self.create_topics(vec![topic])
            .await?
            .into_iter()
            .next()
            .map(|(_, r)| r)
            .unwrap_or(Ok(()))
    }

    /// Creates topics; one result per topic.
    pub async fn create_topics(&self, topics: Vec<NewTopic>) -> Result<Vec<(String, Result<()>)>> {
        let req = CreateTopicsRequest::default()
            .with_timeout_ms(self.timeout_ms())
            .with_topics(
                topics
                    .iter()
                    .map(|t| {
                        CreatableTopic::default()
                            .with_name(topic_name(&t.name))
                            .with_num_partitions(t.partitions)
                            .with_replication_factor(t.replication_factor)
                            .with_configs(
                                t.configs
                                    .iter()
                                    .map(|(k, v)| {
                                        CreatableTopicConfig::default()
                                            .with_name(sb(k))
                                            .with_value(Some(sb(v)))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
        let resp = self.client.send_controller(&req).await?;
        Ok(resp
            .topics
            .iter()
            .map(|t| {
                (
                    s(&t.name.0),
                    Error::check_msg(t.error_code, t.error_message.as_deref()),
                )
            })
            .collect())
    }

    /// Deletes topics; one result per topic.
    pub async fn delete_topics(&self, names: &[String]) -> Result<Vec<(String, Result<()>)>> {
        let req = DeleteTopicsRequest::default()
            .with_timeout_ms(self.timeout_ms())
            .with_topic_names(names.iter().map(|n| topic_name(n)).collect());
        let resp = self.client.send_controller(&req).await?;
        for n in names {
            self.client.invalidate_topic(n);
        }
        Ok(resp
            .responses
            .iter()
            .map(|r| {
                (
                    r.name.as_ref().map(|n| s(&n.0)).unwrap_or_default(),
                    Error::check_msg(r.error_code, r.error_message.as_deref()),
                )
            })
            .collect())
    }

    /// All topics (internal ones included; see `TopicInfo::internal`).
    pub async fn list_topics(&self) -> Result<Vec<TopicInfo>> {
        Ok(self
            .client
            .describe_cluster()
            .await?
            .topics
            .into_values()
            .collect())
    }

    /// Partitions, leaders and replicas of these topics; an unknown topic is an error.
    pub async fn describe_topics(&self, names: &[String]) -> Result<Vec<TopicInfo>> {
        let info = self.client.refresh_metadata(Some(names), false).await?;
        names
            .iter()
            .map(|n| {
                info.topics.get(n).cloned().ok_or_else(|| {
                    Error::broker(
                        model::ErrorCode::UnknownTopicOrPartition,
                        Some(format!("topic {n}")),
                    )
                })
            })
            .collect()
    }

    /// Grows `topic` to `total` partitions.
    pub async fn create_partitions(&self, topic: &str, total: i32) -> Result<()> {
        let req = CreatePartitionsRequest::default()
            .with_timeout_ms(self.timeout_ms())
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(topic_name(topic))
                .with_count(total)
                .with_assignments(None)]);
        let resp = self.client.send_controller(&req).await?;
        self.client.invalidate_topic(topic);
        for r in &resp.results {
            Error::check_msg(r.error_code, r.error_message.as_deref())?;
        }
        Ok(())
    }

    /// Configs of a topic or broker (all keys, or only `keys`).
    pub async fn describe_configs(
        &self,
        resource: ResourceType,
        name: &str,
        keys: Option<&[String]>,
    ) -> Result<Vec<ConfigEntry>> {
        let req = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(resource.id())
                .with_resource_name(sb(name))
                .with_configuration_keys(keys.map(|ks| ks.iter().map(|k| sb(k)).collect())),
        ]);
        let resp = match resource {
            ResourceType::Broker => {
                let id: i32 = name
                    .parse()
                    .map_err(|_| Error::Config(format!("broker id {name:?} is not a number")))?;
                self.client.send_to(id, &req).await?
            }
            ResourceType::Topic => self.client.send_any(&req).await?,
        };
        let mut out = Vec::new();
        for r in &resp.results {
            Error::check_msg(r.error_code, r.error_message.as_deref())?;
            for c in &r.configs {
                out.push(ConfigEntry {
                    name: s(&c.name),
                    value: c.value.as_ref().map(s),
                    source: source_name(c.config_source).to_owned(),
                    read_only: c.read_only,
                    sensitive: c.is_sensitive,
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Applies incremental config changes to a topic or broker.
    pub async fn incremental_alter_configs(
        &self,
        resource: ResourceType,
        name: &str,
        ops: &[(String, ConfigOp)],
    ) -> Result<()> {
        let configs = ops
            .iter()
            .map(|(k, op)| {
                let (code, value) = match op {
                    ConfigOp::Set(v) => (0, Some(sb(v))),
                    ConfigOp::Delete => (1, None),
                    ConfigOp::Append(v) => (2, Some(sb(v))),
                    ConfigOp::Subtract(v) => (3, Some(sb(v))),
                };
                AlterableConfig::default()
                    .with_name(sb(k))
                    .with_config_operation(code)
                    .with_value(value)
            })
            .collect();
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(resource.id())
                .with_resource_name(sb(name))
                .with_configs(configs),
        ]);
        // A broker's own configs go to that broker, as Kafka's admin client sends them (a
        // Kafka broker refuses another broker's id: INVALID_REQUEST); the cluster-wide
        // default ("") and topics to the controller.
        let resp = match (resource, name.parse::<i32>()) {
            (ResourceType::Broker, Ok(id)) => self.client.send_to(id, &req).await?,
            _ => self.client.send_controller(&req).await?,
        };
        for r in &resp.responses {
            Error::check_msg(r.error_code, r.error_message.as_deref())?;
        }
        Ok(())
    }

    /// Groups known to every broker.
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>> {
        self.client.refresh_metadata(Some(&[]), false).await?;
        let mut out = Vec::new();
        for id in self.client.brokers().keys() {
            let resp = self
                .client
                .send_to(*id, &ListGroupsRequest::default())
                .await?;
            Error::check(resp.error_code)?;
            out.extend(resp.groups.iter().map(|g| GroupListing {
                group_id: s(&g.group_id.0),
                protocol_type: s(&g.protocol_type),
                state: s(&g.group_state),
                group_type: s(&g.group_type),
            }));
        }
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(out)
    }

    /// State, protocol and members (with decoded assignments) of groups. Consumer-protocol
    /// groups (KIP-848) are described with ConsumerGroupDescribe when the broker has it
    /// (member epochs, target assignments); classic groups with DescribeGroups.
    pub async fn describe_groups(&self, ids: &[String]) -> Result<Vec<GroupDescription>> {
        let mut out = Vec::new();
        for id in ids {
            let node = find_coordinator(&self.client, id).await?;
            if let Some(d) = self.describe_consumer_group(node, id).await? {
                out.push(d);
                continue;
            }
            let req = DescribeGroupsRequest::default().with_groups(vec![GroupId(sb(id))]);
            let resp = self.client.send_to(node, &req).await?;
            for g in &resp.groups {
                Error::check_msg(g.error_code, g.error_message.as_deref())?;
                let consumer = g.protocol_type.as_str() == "consumer";
                out.push(GroupDescription {
                    group_id: s(&g.group_id.0),
                    state: s(&g.group_state),
                    protocol_type: s(&g.protocol_type),
                    protocol: s(&g.protocol_data),
                    members: g
                        .members
                        .iter()
                        .map(|m| GroupMemberDescription {
                            member_id: s(&m.member_id),
                            group_instance_id: m.group_instance_id.as_ref().map(s),
                            client_id: s(&m.client_id),
                            client_host: s(&m.client_host),
                            assignment: if consumer {
                                decode_assignment(&m.member_assignment).unwrap_or_default()
                            } else {
                                Vec::new()
                            },
                            member_epoch: None,
                            target_assignment: Vec::new(),
                            subscribed_topics: Vec::new(),
                            subscribed_regex: None,
                            classic: true,
                        })
                        .collect(),
                    group_type: "classic".to_string(),
                    group_epoch: None,
                    assignment_epoch: None,
                });
            }
        }
        Ok(out)
    }

    /// ConsumerGroupDescribe of one group; None when the broker lacks the API or the group
    /// is not a consumer-protocol group (then DescribeGroups describes it).
    async fn describe_consumer_group(
        &self,
        node: i32,
        id: &str,
    ) -> Result<Option<GroupDescription>> {
        let conn = self.client.conn_coordinator(node).await?;
        if conn.version::<ConsumerGroupDescribeRequest>().is_err() {
            return Ok(None);
        }
        let req = ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(sb(id))]);
        let resp = conn.send(&req).await?;
        let Some(g) = resp.groups.first() else {
            return Ok(None);
        };
        if g.error_code == model::ErrorCode::GroupIdNotFound.code() {
            return Ok(None);
        }
        Error::check_msg(g.error_code, g.error_message.as_deref())?;
        let tps = |a: &consumer_group_describe_response::Assignment| -> Vec<TopicPartition> {
            a.topic_partitions
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(move |p| TopicPartition::new(t.topic_name.0.as_str(), *p))
                })
                .collect()
        };
        Ok(Some(GroupDescription {
            group_id: s(&g.group_id.0),
            state: s(&g.group_state),
            protocol_type: "consumer".to_string(),
            protocol: s(&g.assignor_name),
            members: g
                .members
                .iter()
                .map(|m| GroupMemberDescription {
                    member_id: s(&m.member_id),
                    group_instance_id: m.instance_id.as_ref().map(s),
                    client_id: s(&m.client_id),
                    client_host: s(&m.client_host),
                    assignment: tps(&m.assignment),
                    member_epoch: Some(m.member_epoch),
                    target_assignment: tps(&m.target_assignment),
                    subscribed_topics: m.subscribed_topic_names.iter().map(|t| s(&t.0)).collect(),
                    subscribed_regex: m.subscribed_topic_regex.as_ref().map(s),
                    classic: m.member_type == 0,
                })
                .collect(),
            group_type: "consumer".to_string(),
            group_epoch: Some(g.group_epoch),
            assignment_epoch: Some(g.assignment_epoch),
        }))
    }

    /// Deletes groups (they must be empty); one result per group.
    pub async fn delete_groups(&self, ids: &[String]) -> Result<Vec<(String, Result<()>)>> {
        let mut out = Vec::new();
        for id in ids {
            let node = find_coordinator(&self.client, id).await?;
            let req = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(sb(id))]);
            let resp = self.client.send_to(node, &req).await?;
            for r in &resp.results {
                out.push((s(&r.group_id.0), Error::check(r.error_code)));
            }
        }
        Ok(out)
    }

    /// Committed offsets of a group (all partitions it has, or only `tps`).
    pub async fn list_group_offsets(
        &self,
        group_id: &str,
        tps: Option<&[TopicPartition]>,
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        let node = find_coordinator(&self.client, group_id).await?;
        let mut m = fetch_offsets(&self.client, node, group_id, tps).await?;
        m.retain(|_, o| *o >= 0);
        Ok(m)
    }

    /// Sets committed offsets of a group (it must have no active members).
    pub async fn alter_group_offsets(
        &self,
        group_id: &str,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> Result<()> {
        let node = find_coordinator(&self.client, group_id).await?;
        commit_offsets(&self.client, node, group_id, -1, "", offsets).await
    }

    /// Deletes committed offsets of a group for these partitions.
    pub async fn delete_group_offsets(&self, group_id: &str, tps: &[TopicPartition]) -> Result<()> {
        let node = find_coordinator(&self.client, group_id).await?;
        let mut by_topic: BTreeMap<&str, Vec<OffsetDeleteRequestPartition>> = BTreeMap::new();
        for tp in tps {
            by_topic
                .entry(&tp.topic)
                .or_default()
                .push(OffsetDeleteRequestPartition::default().with_partition_index(tp.partition));
        }
        let req = OffsetDeleteRequest::default()
            .with_group_id(GroupId(sb(group_id)))
            .with_topics(
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        OffsetDeleteRequestTopic::default()
                            .with_name(topic_name(t))
                            .with_partitions(ps)
                    })
                    .collect(),
            );
        let resp = self.client.send_to(node, &req).await?;
        Error::check(resp.error_code)?;
        for t in &resp.topics {
            for p in &t.partitions {
                Error::check(p.error_code)?;
            }
        }
        Ok(())
    }

    /// Deletes records before `offset` in each partition (-1: up to the high watermark);
    /// returns the new low watermarks.
    pub async fn delete_records(
        &self,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        let mut by_node: BTreeMap<i32, Vec<(&TopicPartition, i64)>> = BTreeMap::new();
        for (tp, o) in offsets {
            let node = self.client.leader_for(&tp.topic, tp.partition).await?;
            by_node.entry(node).or_default().push((tp, *o));
        }
        let mut out = BTreeMap::new();
        for (node, parts) in by_node {
            let mut topics: Vec<DeleteRecordsTopic> = Vec::new();
            for (tp, o) in &parts {
                let p = DeleteRecordsPartition::default()
                    .with_partition_index(tp.partition)
                    .with_offset(*o);
                match topics.iter_mut().find(|t| t.name.0.as_str() == &*tp.topic) {
                    Some(t) => t.partitions.push(p),
                    None => topics.push(
                        DeleteRecordsTopic::default()
                            .with_name(topic_name(&tp.topic))
                            .with_partitions(vec![p]),
                    ),
                }
            }
            let req = DeleteRecordsRequest::default()
                .with_timeout_ms(self.timeout_ms())
                .with_topics(topics);
            let resp = self.client.send_to(node, &req).await?;
            for t in &resp.topics {
                for p in &t.partitions {
                    Error::check(p.error_code)?;
                    out.insert(
                        TopicPartition::new(t.name.0.as_str(), p.partition_index),
                        p.low_watermark,
                    );
                }
            }
        }
        Ok(out)
    }

    /// Offsets by timestamp: -2 earliest, -1 latest, else the first offset with a timestamp
    /// at or after it (-1 when there is none).
    pub async fn list_offsets(
        &self,
        queries: &[(TopicPartition, i64)],
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        self.list_offsets_isolated(queries, 0).await
    }

    /// As [`Admin::list_offsets`], at an isolation level: with 1 (read_committed) the latest
    /// offset (-1) is the last stable offset, which open transactions hold back.
    pub async fn list_offsets_isolated(
        &self,
        queries: &[(TopicPartition, i64)],
        isolation_level: i8,
    ) -> Result<BTreeMap<TopicPartition, i64>> {
        let found = list_offsets(&self.client, queries, isolation_level).await?;
        let mut out = BTreeMap::new();
        for (tp, r) in found {
            out.insert(tp, r?);
        }
        Ok(out)
    }

    /// Brokers, controller, cluster id and topics.
    pub async fn describe_cluster(&self) -> Result<ClusterInfo> {
        self.client.describe_cluster().await
    }

    /// The metadata quorum as its leader reports it (DescribeQuorum, API 55; any broker
    /// relays it to the active controller): leader, epoch, high watermark, each voter's log
    /// end.
    pub async fn describe_quorum(&self) -> Result<QuorumInfo> {
        use protocol::messages::describe_quorum_request::{PartitionData, TopicData};
        let req = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
            .with_topic_name(topic_name("__cluster_metadata"))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
        let resp = self.client.send_any(&req).await?;
        Error::check(resp.error_code)?;
        let p = resp
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or_else(|| Error::Protocol("DescribeQuorum answered no partition".into()))?;
        Error::check(p.error_code)?;
        let high_watermark = p.high_watermark;
        Ok(QuorumInfo {
            leader_id: p.leader_id.0,
            leader_epoch: p.leader_epoch,
            high_watermark,
            voters: p
                .current_voters
                .iter()
                .map(|v| QuorumVoter {
                    node_id: v.replica_id.0,
                    log_end_offset: v.log_end_offset,
                    lag: (high_watermark - v.log_end_offset).max(0),
                })
                .collect(),
        })
    }
}

/// The metadata quorum (see [`Admin::describe_quorum`]).
#[derive(Clone, Debug)]
pub struct QuorumInfo {
    /// The active controller.
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub high_watermark: i64,
    pub voters: Vec<QuorumVoter>,
}

/// One voter of the metadata quorum: how far its log reaches and how far behind the high
/// watermark it is.
#[derive(Clone, Debug)]
pub struct QuorumVoter {
    pub node_id: i32,
    pub log_end_offset: i64,
    pub lag: i64,
}
