//! Authorization: who a request acts as, and Kafka's table of the operation on a resource each
//! request needs, decided by `auth::acl::Authorizer` (StandardAuthorizer semantics) over the
//! ACLs of the committed metadata image.
//!
//! Every request passes [`gate`] once, in `handlers::dispatch`, before its handler runs: the
//! requests whose whole answer depends on one resource (a group, a transactional id, the
//! cluster) are decided there and answered with Kafka's error for every item. Requests that name
//! many resources are answered item by item, as Kafka does: topics in Produce, Fetch, Metadata,
//! ListOffsets and DeleteRecords by their handlers through the request's [`Access`]; topics of
//! CreateTopics/DeleteTopics/CreatePartitions and groups of DescribeGroups/DeleteGroups/
//! ListGroups/FindCoordinator in `handlers::dispatch`, which takes the denied items out of the
//! request and adds their errors to the response. The subscription regexes of KIP-848 consumer
//! groups resolve only to topics the heartbeat's principal may DESCRIBE: `groups` hands the
//! coordinator that filter, built on the request's [`Access`], as its `TopicVisibility`.
//! ConsumerGroupDescribe shows no topic the caller may not DESCRIBE: a group whose assignments
//! name one is answered TOPIC_AUTHORIZATION_FAILED instead ([`hide_undescribable_topics`]).
//! With no authorizer configured [`Access`] allows everything and `gate` passes every request
//! untouched.

use auth::acl::{Authorizer, RequestContext, CLUSTER_NAME};
use auth::principal::KafkaPrincipal;
use model::acl::{AclOperation as Op, ResourceType as Rt};
use model::ErrorCode;
use protocol::messages::consumer_group_describe_response as cgd;
use protocol::messages::{
    add_partitions_to_txn_response::{
        AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
    },
    alter_user_scram_credentials_response::AlterUserScramCredentialsResult,
    create_acls_response::AclCreationResult,
    delete_acls_response::DeleteAclsFilterResult,
    offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic},
    offset_fetch_response::OffsetFetchResponseGroup,
    produce_response::{PartitionProduceResponse, TopicProduceResponse},
    write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    },
    AddOffsetsToTxnResponse, AddPartitionsToTxnResponse, AlterUserScramCredentialsResponse,
    ConsumerGroupHeartbeatResponse, CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse,
    DescribeLogDirsResponse, DescribeQuorumResponse, DescribeUserScramCredentialsResponse,
    EndTxnResponse, HeartbeatResponse, InitProducerIdResponse, JoinGroupResponse,
    LeaveGroupResponse, OffsetCommitResponse, OffsetFetchResponse, ProduceResponse,
    SyncGroupResponse, WriteTxnMarkersResponse,
};
use protocol::{RequestKind, ResponseKind};
use std::collections::HashMap;
use std::sync::Arc;

/// What one request may do: the authorizer (none when `authorizer.class.name` is unset) and
/// who asks. Cheap to clone; built per request from the connection's principal and the
/// authorizer of the current image.
#[derive(Clone, Debug)]
pub struct Access {
    authorizer: Option<Arc<Authorizer>>,
    who: Arc<RequestContext>,
}

impl Access {
    /// Everything allowed: no authorizer, or a listener that is not authorized (the controller
    /// listener, private to the cluster).
    pub fn unrestricted() -> Access {
        Access {
            authorizer: None,
            who: Arc::new(RequestContext {
                principal: KafkaPrincipal::anonymous(),
                host: String::new(),
            }),
        }
    }

    pub fn new(authorizer: Option<Arc<Authorizer>>, who: Arc<RequestContext>) -> Access {
        Access { authorizer, who }
    }

    /// Who asks.
    pub fn who(&self) -> &RequestContext {
        &self.who
    }

    /// Whether ACLs are enforced.
    pub fn enabled(&self) -> bool {
        self.authorizer.is_some()
    }

    /// May the requester do `op` on `rt:name`? Denials are logged as Kafka's authorizer logger
    /// does (at debug: a denied client retrying would flood the log).
    pub fn allows(&self, op: Op, rt: Rt, name: &str) -> bool {
        let Some(a) = &self.authorizer else {
            return true;
        };
        let allowed = a.authorize(&self.who, op, rt, name).allowed();
        if !allowed {
            tracing::debug!(
                principal = %self.who.principal,
                host = %self.who.host,
                operation = op.name(),
                resource = %format_args!("{}:{name}", rt.name()),
                "authorization denied"
            );
        }
        allowed
    }

    pub fn allows_topic(&self, op: Op, topic: &str) -> bool {
        self.allows(op, Rt::Topic, topic)
    }

    pub fn allows_cluster(&self, op: Op) -> bool {
        self.allows(op, Rt::Cluster, CLUSTER_NAME)
    }

    /// May the requester do `op` on at least one resource of the type (Kafka's
    /// `authorizeByResourceType`)?
    pub fn allows_any(&self, op: Op, rt: Rt) -> bool {
        self.authorizer
            .as_ref()
            .is_none_or(|a| a.authorize_by_resource_type(&self.who, op, rt).allowed())
    }

    /// The authorized-operations bitfield of a resource: all the type supports without an
    /// authorizer, else what the ACLs allow the requester.
    pub fn operations(&self, rt: Rt, name: &str) -> i32 {
        match &self.authorizer {
            None => rt.all_operations_bitfield(),
            Some(a) => a.authorized_operations(&self.who, rt, name),
        }
    }

    /// Creating topics: CREATE on the cluster, else CREATE on the topic (Kafka's
    /// `KafkaApis.handleCreateTopicsRequest` and auto-creation).
    pub fn may_create_topic(&self, topic: &str) -> bool {
        !self.enabled() || self.allows_cluster(Op::Create) || self.allows_topic(Op::Create, topic)
    }
}

/// The message of the row that replaces a described group naming a topic the caller may not
/// DESCRIBE (Kafka 4.4's `KafkaApis.handleConsumerGroupDescribe`, word for word).
pub const UNDESCRIBABLE_TOPICS_MESSAGE: &str =
    "The group has described topic(s) that the client is not authorized to describe.";

/// ConsumerGroupDescribe must not show, through a group, a topic the caller may not DESCRIBE.
/// As Kafka 4.4 (`KafkaApis.handleConsumerGroupDescribe`, "Clients are not allowed to see
/// topics that are not authorized for Describe"): a described group in which any member's
/// assignment or target assignment names such a topic is replaced, in place, by a row with
/// only its id, TOPIC_AUTHORIZATION_FAILED and [`UNDESCRIBABLE_TOPICS_MESSAGE`]: no members,
/// state, epochs, assignor or authorized operations. The other groups are untouched. Members'
/// subscribed topic names and regexes are not checked, as in Kafka. Without an authorizer
/// nothing changes.
pub fn hide_undescribable_topics(access: &Access, groups: &mut [cgd::DescribedGroup]) {
    if !access.enabled() {
        return;
    }
    // One decision per topic, as Kafka's `filterByAuthorized` over the set of named topics.
    let mut decided: HashMap<String, bool> = HashMap::new();
    for group in groups.iter_mut() {
        let hides = group
            .members
            .iter()
            .flat_map(|m| {
                m.assignment
                    .topic_partitions
                    .iter()
                    .chain(&m.target_assignment.topic_partitions)
            })
            .any(|t| {
                let name = t.topic_name.as_str();
                if let Some(&allowed) = decided.get(name) {
                    return !allowed;
                }
                let allowed = access.allows_topic(Op::Describe, name);
                decided.insert(name.to_string(), allowed);
                !allowed
            });
        if hides {
            *group = cgd::DescribedGroup::default()
                .with_group_id(std::mem::take(&mut group.group_id))
                .with_error_code(ErrorCode::TopicAuthorizationFailed.code())
                .with_error_message(Some(protocol::StrBytes::from_static_str(
                    UNDESCRIBABLE_TOPICS_MESSAGE,
                )));
        }
    }
}

/// The request-level part of Kafka's table: a request whose whole answer depends on one group,
/// transactional id or the cluster. `Some(code)` when it is denied.
pub fn gate(access: &Access, body: &RequestKind, version: i16) -> Option<ErrorCode> {
    if !access.enabled() {
        return None;
    }
    use RequestKind as K;
    let group = |g: &str, op: Op| {
        (!access.allows(op, Rt::Group, g)).then_some(ErrorCode::GroupAuthorizationFailed)
    };
    let txn = |t: &str| {
        (!access.allows(Op::Write, Rt::TransactionalId, t))
            .then_some(ErrorCode::TransactionalIdAuthorizationFailed)
    };
    let cluster =
        |op: Op| (!access.allows_cluster(op)).then_some(ErrorCode::ClusterAuthorizationFailed);
    match body {
        K::JoinGroup(r) => group(&r.group_id, Op::Read),
        K::SyncGroup(r) => group(&r.group_id, Op::Read),
        K::Heartbeat(r) => group(&r.group_id, Op::Read),
        K::LeaveGroup(r) => group(&r.group_id, Op::Read),
        K::OffsetCommit(r) => group(&r.group_id, Op::Read),
        K::OffsetDelete(r) => group(&r.group_id, Op::Delete),
        K::ConsumerGroupHeartbeat(r) => group(&r.group_id, Op::Read),
        // v8+ names several groups, each answered on its own (`handlers::group_items`).
        // Null topics before v2 cannot be parsed: Kafka closes before authorizing (the group
        // handler closes).
        K::OffsetFetch(r) if version < 2 && r.topics.is_none() => None,
        K::OffsetFetch(r) if version < 8 => group(&r.group_id, Op::Describe),
        K::TxnOffsetCommit(r) => txn(&r.transactional_id).or_else(|| group(&r.group_id, Op::Read)),
        K::AddOffsetsToTxn(r) => txn(&r.transactional_id).or_else(|| group(&r.group_id, Op::Read)),
        K::EndTxn(r) => txn(&r.transactional_id),
        K::AddPartitionsToTxn(r) if version < 4 => txn(&r.v3_and_below_transactional_id),
        // v4+ is the brokers' verification request.
        K::AddPartitionsToTxn(_) => cluster(Op::ClusterAction),
        K::InitProducerId(r) => match &r.transactional_id {
            Some(t) => txn(t),
            // An idempotent producer: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic.
            None => (!access.allows_cluster(Op::IdempotentWrite)
                && !access.allows_any(Op::Write, Rt::Topic))
            .then_some(ErrorCode::ClusterAuthorizationFailed),
        },
        K::Produce(r) => r.transactional_id.as_ref().and_then(|t| txn(t)),
        // A follower's fetch (replica id >= 0, or a replica state from v15).
        K::Fetch(r) if r.replica_id.0 >= 0 || r.replica_state.replica_id.0 >= 0 => {
            cluster(Op::ClusterAction)
        }
        K::WriteTxnMarkers(_) => cluster(Op::ClusterAction),
        K::DescribeAcls(_) | K::DescribeUserScramCredentials(_) => cluster(Op::Describe),
        K::DescribeLogDirs(_) | K::DescribeQuorum(_) => cluster(Op::Describe),
        K::CreateAcls(_) | K::DeleteAcls(_) | K::AlterUserScramCredentials(_) => cluster(Op::Alter),
        K::ElectLeaders(_) | K::AlterPartitionReassignments(_) => cluster(Op::Alter),
        K::ListPartitionReassignments(_) => cluster(Op::Describe),
        K::DescribeClientQuotas(_) => cluster(Op::DescribeConfigs),
        K::AlterClientQuotas(_) => cluster(Op::AlterConfigs),
        _ => None,
    }
}

/// Kafka's answer to a request [`gate`] denied: the error on every item the request names (or
/// its top-level error code). `None` for a request kind the gate never denies.
pub fn denied_response(body: &RequestKind, version: i16, e: ErrorCode) -> Option<ResponseKind> {
    use RequestKind as K;
    use ResponseKind as R;
    let c = e.code();
    Some(match body {
        // As Kafka's `JoinGroupRequest.getErrorResponse`: no protocol name (null) from v7.
        K::JoinGroup(_) => R::JoinGroup(
            JoinGroupResponse::default()
                .with_error_code(c)
                .with_protocol_name((version < 7).then(Default::default)),
        ),
        K::OffsetDelete(_) => {
            R::OffsetDelete(protocol::messages::OffsetDeleteResponse::default().with_error_code(c))
        }
        K::SyncGroup(_) => R::SyncGroup(SyncGroupResponse::default().with_error_code(c)),
        K::Heartbeat(_) => R::Heartbeat(HeartbeatResponse::default().with_error_code(c)),
        K::LeaveGroup(_) => R::LeaveGroup(LeaveGroupResponse::default().with_error_code(c)),
        K::ConsumerGroupHeartbeat(_) => {
            R::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatResponse::default().with_error_code(c))
        }
        K::OffsetCommit(r) => R::OffsetCommit(
            OffsetCommitResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        OffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        OffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(c)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        K::OffsetFetch(r) if version < 8 => {
            R::OffsetFetch(OffsetFetchResponse::default().with_error_code(c))
        }
        K::OffsetFetch(r) => R::OffsetFetch(
            OffsetFetchResponse::default().with_groups(
                r.groups
                    .iter()
                    .map(|g| {
                        OffsetFetchResponseGroup::default()
                            .with_group_id(g.group_id.clone())
                            .with_error_code(c)
                    })
                    .collect(),
            ),
        ),
        K::TxnOffsetCommit(r) => R::TxnOffsetCommit(crate::groups::txn_offset_commit_error(r, e)),
        K::AddOffsetsToTxn(_) => {
            R::AddOffsetsToTxn(AddOffsetsToTxnResponse::default().with_error_code(c))
        }
        K::EndTxn(_) => R::EndTxn(EndTxnResponse::default().with_error_code(c)),
        K::AddPartitionsToTxn(r) if version < 4 => R::AddPartitionsToTxn(
            AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(
                r.v3_and_below_topics
                    .iter()
                    .map(|t| {
                        AddPartitionsToTxnTopicResult::default()
                            .with_name(t.name.clone())
                            .with_results_by_partition(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        AddPartitionsToTxnPartitionResult::default()
                                            .with_partition_index(*p)
                                            .with_partition_error_code(c)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        K::AddPartitionsToTxn(_) => {
            R::AddPartitionsToTxn(AddPartitionsToTxnResponse::default().with_error_code(c))
        }
        K::InitProducerId(_) => R::InitProducerId(
            InitProducerIdResponse::default()
                .with_error_code(c)
                .with_producer_id(protocol::messages::ProducerId(-1))
                .with_producer_epoch(-1),
        ),
        K::Produce(r) => R::Produce(
            ProduceResponse::default().with_responses(
                r.topic_data
                    .iter()
                    .map(|t| {
                        TopicProduceResponse::default()
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id)
                            .with_partition_responses(
                                t.partition_data
                                    .iter()
                                    .map(|p| {
                                        PartitionProduceResponse::default()
                                            .with_index(p.index)
                                            .with_error_code(c)
                                            .with_base_offset(-1)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        K::Fetch(_) => R::Fetch(
            protocol::messages::FetchResponse::default()
                .with_error_code(c)
                .with_session_id(0),
        ),
        K::WriteTxnMarkers(r) => R::WriteTxnMarkers(
            WriteTxnMarkersResponse::default().with_markers(
                r.markers
                    .iter()
                    .map(|m| {
                        WritableTxnMarkerResult::default()
                            .with_producer_id(m.producer_id)
                            .with_topics(
                                m.topics
                                    .iter()
                                    .map(|t| {
                                        WritableTxnMarkerTopicResult::default()
                                            .with_name(t.name.clone())
                                            .with_partitions(
                                                t.partition_indexes
                                                    .iter()
                                                    .map(|p| {
                                                        WritableTxnMarkerPartitionResult::default()
                                                            .with_partition_index(*p)
                                                            .with_error_code(c)
                                                    })
                                                    .collect(),
                                            )
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        K::DescribeAcls(_) => R::DescribeAcls(
            DescribeAclsResponse::default()
                .with_error_code(c)
                .with_error_message(Some(denied_message(e))),
        ),
        K::CreateAcls(r) => R::CreateAcls(
            CreateAclsResponse::default().with_results(
                r.creations
                    .iter()
                    .map(|_| {
                        AclCreationResult::default()
                            .with_error_code(c)
                            .with_error_message(Some(denied_message(e)))
                    })
                    .collect(),
            ),
        ),
        K::ElectLeaders(r) => R::ElectLeaders(crate::handlers::elect_leaders_denied(r, e, version)),
        K::AlterPartitionReassignments(r) => {
            R::AlterPartitionReassignments(crate::handlers::reassignments::alter_error_response(
                r,
                e,
                Some(denied_message(e).to_string()),
            ))
        }
        K::ListPartitionReassignments(_) => R::ListPartitionReassignments(
            crate::handlers::reassignments::list_error_response(e)
                .with_error_message(Some(denied_message(e))),
        ),
        K::DeleteAcls(r) => R::DeleteAcls(
            DeleteAclsResponse::default().with_filter_results(
                r.filters
                    .iter()
                    .map(|_| {
                        DeleteAclsFilterResult::default()
                            .with_error_code(c)
                            .with_error_message(Some(denied_message(e)))
                    })
                    .collect(),
            ),
        ),
        K::DescribeClientQuotas(_) => R::DescribeClientQuotas(
            protocol::messages::DescribeClientQuotasResponse::default()
                .with_error_code(c)
                .with_error_message(Some(denied_message(e))),
        ),
        K::AlterClientQuotas(r) => R::AlterClientQuotas(
            protocol::messages::AlterClientQuotasResponse::default().with_entries(
                r.entries
                    .iter()
                    .map(|x| {
                        use protocol::messages::alter_client_quotas_response as a;
                        a::EntryData::default()
                            .with_error_code(c)
                            .with_error_message(Some(denied_message(e)))
                            .with_entity(
                                x.entity
                                    .iter()
                                    .map(|d| {
                                        a::EntityData::default()
                                            .with_entity_type(d.entity_type.clone())
                                            .with_entity_name(d.entity_name.clone())
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            ),
        ),
        K::DescribeUserScramCredentials(_) => R::DescribeUserScramCredentials(
            DescribeUserScramCredentialsResponse::default()
                .with_error_code(c)
                .with_error_message(Some(denied_message(e))),
        ),
        K::AlterUserScramCredentials(r) => {
            let mut users: Vec<&protocol::StrBytes> = Vec::new();
            for u in r
                .deletions
                .iter()
                .map(|d| &d.name)
                .chain(r.upsertions.iter().map(|u| &u.name))
            {
                if !users.contains(&u) {
                    users.push(u);
                }
            }
            R::AlterUserScramCredentials(
                AlterUserScramCredentialsResponse::default().with_results(
                    users
                        .into_iter()
                        .map(|u| {
                            AlterUserScramCredentialsResult::default()
                                .with_user(u.clone())
                                .with_error_code(c)
                                .with_error_message(Some(denied_message(e)))
                        })
                        .collect(),
                ),
            )
        }
        // Before v3 there is no error code: Kafka answers no log dirs.
        K::DescribeLogDirs(_) => {
            R::DescribeLogDirs(DescribeLogDirsResponse::default().with_error_code(c))
        }
        K::DescribeQuorum(_) => R::DescribeQuorum(
            DescribeQuorumResponse::default()
                .with_error_code(c)
                .with_error_message(Some(denied_message(e))),
        ),
        _ => return None,
    })
}

fn denied_message(e: ErrorCode) -> protocol::StrBytes {
    let what = match e {
        ErrorCode::ClusterAuthorizationFailed => "Cluster authorization failed.",
        ErrorCode::GroupAuthorizationFailed => "Group authorization failed.",
        ErrorCode::TransactionalIdAuthorizationFailed => "Transactional Id authorization failed.",
        _ => "Authorization failed.",
    };
    protocol::StrBytes::from_static_str(what)
}

/// A principal as Kafka's `DefaultKafkaPrincipalBuilder.serialize` writes it into an
/// Envelope's `request_principal`: the version (0) then `DefaultPrincipalData` v0 (flexible:
/// compact strings type and name, a boolean, no tagged fields).
pub fn serialize_principal(p: &KafkaPrincipal) -> bytes::Bytes {
    let mut out = Vec::with_capacity(p.principal_type.len() + p.name.len() + 8);
    out.extend_from_slice(&0i16.to_be_bytes());
    for s in [&p.principal_type, &p.name] {
        put_uvarint(&mut out, s.len() as u64 + 1);
        out.extend_from_slice(s.as_bytes());
    }
    out.push(0); // token_authenticated
    out.push(0); // no tagged fields
    bytes::Bytes::from(out)
}

fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads what [`serialize_principal`] (or Kafka) wrote; `None` for anything else, never a
/// panic: the bytes come from the network.
pub fn deserialize_principal(b: &[u8]) -> Option<KafkaPrincipal> {
    let mut at = 0usize;
    let version = i16::from_be_bytes([*b.first()?, *b.get(1)?]);
    if version != 0 {
        return None;
    }
    at += 2;
    let uvarint = |at: &mut usize| -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..35).step_by(7) {
            let byte = *b.get(*at)?;
            *at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    };
    let mut strings = Vec::with_capacity(2);
    for _ in 0..2 {
        let len = usize::try_from(uvarint(&mut at)?.checked_sub(1)?).ok()?;
        let s = b.get(at..at.checked_add(len)?)?;
        strings.push(std::str::from_utf8(s).ok()?.to_string());
        at += len;
    }
    let _token_authenticated = *b.get(at)?;
    let name = strings.pop()?;
    let principal_type = strings.pop()?;
    Some(KafkaPrincipal {
        principal_type,
        name,
    })
}

/// The client address of an Envelope (`client_host_address`: the raw 4 or 16 bytes of Java's
/// `InetAddress.getAddress()`).
pub fn envelope_client_address(b: &[u8]) -> Option<std::net::IpAddr> {
    match b.len() {
        4 => Some(std::net::IpAddr::from(<[u8; 4]>::try_from(b).ok()?)),
        16 => Some(std::net::IpAddr::from(<[u8; 16]>::try_from(b).ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn topics(names: &[&str]) -> cgd::Assignment {
        cgd::Assignment::default().with_topic_partitions(
            names
                .iter()
                .map(|n| {
                    cgd::TopicPartitions::default()
                        .with_topic_name(protocol::messages::TopicName(
                            protocol::StrBytes::from_string(n.to_string()),
                        ))
                        .with_partitions(vec![0])
                })
                .collect(),
        )
    }

    fn group(id: &str, assigned: &[&str], target: &[&str]) -> cgd::DescribedGroup {
        let member = cgd::Member::default()
            .with_member_id(protocol::StrBytes::from_static_str("m"))
            // Subscriptions are not checked, as in Kafka: only what is assigned is shown.
            .with_subscribed_topic_names(vec![protocol::messages::TopicName(
                protocol::StrBytes::from_static_str("hidden"),
            )])
            .with_subscribed_topic_regex(Some(protocol::StrBytes::from_static_str("hid.*")))
            .with_assignment(topics(assigned))
            .with_target_assignment(topics(target));
        cgd::DescribedGroup::default()
            .with_group_id(protocol::messages::GroupId(
                protocol::StrBytes::from_string(id.to_string()),
            ))
            .with_group_state(protocol::StrBytes::from_static_str("Stable"))
            .with_group_epoch(3)
            .with_assignment_epoch(3)
            .with_assignor_name(protocol::StrBytes::from_static_str("uniform"))
            .with_authorized_operations(1 << 3)
            .with_members(vec![member])
    }

    #[test]
    fn described_groups_naming_a_topic_the_caller_may_not_describe_are_hidden() {
        use auth::acl::{AccessControlEntry, AclBinding, ResourcePattern};
        use model::acl::{PatternType, PermissionType};
        let acls = [AclBinding {
            pattern: ResourcePattern {
                resource_type: Rt::Topic,
                name: "shown".into(),
                pattern_type: PatternType::Literal,
            },
            entry: AccessControlEntry {
                principal: "User:alice".into(),
                host: "*".into(),
                operation: Op::Describe,
                permission: PermissionType::Allow,
            },
        }];
        let alice = Access::new(
            Some(Arc::new(Authorizer::new("", false, &acls))),
            Arc::new(RequestContext::new(
                KafkaPrincipal::user("alice"),
                "127.0.0.1".parse().unwrap(),
            )),
        );
        let denied = cgd::DescribedGroup::default()
            .with_group_id(protocol::messages::GroupId(
                protocol::StrBytes::from_static_str("denied"),
            ))
            .with_error_code(ErrorCode::GroupAuthorizationFailed.code());
        let original = vec![
            denied.clone(),
            group("plain", &["shown"], &["shown"]),
            group("assigned", &["shown", "hidden"], &["shown", "hidden"]),
            // Only the target assignment names it: hidden all the same.
            group("target", &["shown"], &["shown", "hidden"]),
        ];

        let mut groups = original.clone();
        hide_undescribable_topics(&Access::unrestricted(), &mut groups);
        assert_eq!(groups, original, "no authorizer: nothing is hidden");

        hide_undescribable_topics(&alice, &mut groups);
        let hidden = |id: &'static str| {
            cgd::DescribedGroup::default()
                .with_group_id(protocol::messages::GroupId(
                    protocol::StrBytes::from_static_str(id),
                ))
                .with_error_code(ErrorCode::TopicAuthorizationFailed.code())
                .with_error_message(Some(protocol::StrBytes::from_static_str(
                    "The group has described topic(s) that the client is not authorized to describe.",
                )))
        };
        assert_eq!(
            groups,
            vec![
                denied,
                group("plain", &["shown"], &["shown"]),
                hidden("assigned"),
                hidden("target"),
            ]
        );
        assert_eq!(groups[2].authorized_operations, i32::MIN);
        assert!(groups[2].group_state.is_empty() && groups[2].members.is_empty());
    }

    #[test]
    fn envelope_principals_round_trip_and_bad_bytes_are_refused() {
        let p = KafkaPrincipal::user("alice");
        let b = serialize_principal(&p);
        assert_eq!(&b[..], b"\0\0\x05User\x06alice\0\0");
        assert_eq!(deserialize_principal(&b), Some(p));
        for bad in [
            &b""[..],
            b"\0",
            b"\0\x01\x05User\x06alice\0\0",
            b"\0\0\x05Us",
            b"\0\0\xff\xff\xff\xff\x0f",
        ] {
            assert_eq!(deserialize_principal(bad), None, "{bad:?}");
        }
        assert_eq!(
            envelope_client_address(&[10, 0, 0, 1]),
            Some("10.0.0.1".parse().unwrap())
        );
        assert_eq!(envelope_client_address(b"/10.0.0.1"), None);
    }
}
