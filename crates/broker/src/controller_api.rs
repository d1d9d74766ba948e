//! What a CONTROLLER listener serves: Kafka's controller APIs (BrokerRegistration,
//! BrokerHeartbeat, AllocateProducerIds, DescribeQuorum, DescribeCluster, the administration
//! requests brokers send on their own behalf, and Envelope, KIP-590's wrapper for client
//! requests a broker forwards), plus the two private APIs of the quorum (`quorum::wire`:
//! RaftMessages between voters, MetadataFetch for observers).
//!
//! Also the conversions between these Kafka messages and the controller's own requests and
//! replies, used in both directions (here, and by brokers calling a remote controller).

use crate::handlers::{self, admin, configs, Ctx, Reply};
use crate::state::BrokerState;
use bytes::{Bytes, BytesMut};
use controller::{
    ControllerError, HeartbeatReply, IsrChange, Origin, RegisterBroker, Reply as CReply, Request,
};
use model::cluster::SecurityProtocol;
use model::ErrorCode;
use protocol::messages::*;
use protocol::{Encode, RequestKind, ResponseKind, StrBytes};
use quorum::wire::{self, MetadataFetch, RaftMessages};
use std::sync::Arc;
use std::time::Duration;

fn sb(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// The incarnation id a broker sends as a UUID, as the controller stores it.
pub fn incarnation_to_string(id: uuid::Uuid) -> String {
    id.simple().to_string()
}

/// BrokerRegistration -> the controller's request.
pub fn registration_request(r: &BrokerRegistrationRequest) -> RegisterBroker {
    RegisterBroker {
        node_id: r.broker_id.0,
        cluster_id: r.cluster_id.to_string(),
        incarnation_id: incarnation_to_string(r.incarnation_id),
        endpoints: r
            .listeners
            .iter()
            .map(|l| metadata::Endpoint {
                name: l.name.to_string(),
                host: l.host.to_string(),
                port: i32::from(l.port),
                security_protocol: SecurityProtocol::from_id(l.security_protocol)
                    .map_or("PLAINTEXT", SecurityProtocol::name)
                    .to_string(),
            })
            .collect(),
        rack: r.rack.as_ref().map(|r| r.to_string()),
        previous_broker_epoch: r.previous_broker_epoch,
    }
}

/// The controller's request -> BrokerRegistration.
pub fn registration_message(r: &RegisterBroker) -> BrokerRegistrationRequest {
    let incarnation = uuid::Uuid::parse_str(&r.incarnation_id).unwrap_or_default();
    BrokerRegistrationRequest::default()
        .with_broker_id(BrokerId(r.node_id))
        .with_cluster_id(sb(r.cluster_id.clone()))
        .with_incarnation_id(incarnation)
        .with_listeners(
            r.endpoints
                .iter()
                .map(|e| {
                    broker_registration_request::Listener::default()
                        .with_name(sb(e.name.clone()))
                        .with_host(sb(e.host.clone()))
                        .with_port(u16::try_from(e.port).unwrap_or(0))
                        .with_security_protocol(
                            SecurityProtocol::parse(&e.security_protocol)
                                .map_or(0, SecurityProtocol::id),
                        )
                })
                .collect(),
        )
        .with_rack(r.rack.clone().map(sb))
        .with_previous_broker_epoch(r.previous_broker_epoch)
}

fn error_of(r: &Result<impl Sized, ControllerError>) -> i16 {
    r.as_ref().err().map_or(0, |e| e.code.code())
}

fn not_controller(e: &Result<CReply, ControllerError>) -> ControllerError {
    match e {
        Err(e) => e.clone(),
        Ok(other) => ControllerError::new(
            ErrorCode::UnknownServerError,
            format!("unexpected controller reply {other:?}"),
        ),
    }
}

/// Decides one of the controller's own Kafka APIs on the local quorum member.
async fn submit(state: &BrokerState, request: Request) -> Result<CReply, ControllerError> {
    match &state.quorum {
        Some(q) => {
            crate::controller_link::submit_timed(q, request)
                .await
                .result
        }
        None => Err(ControllerError::not_controller()),
    }
}

async fn broker_registration(
    state: Arc<BrokerState>,
    req: BrokerRegistrationRequest,
) -> ResponseKind {
    let result = match submit(&state, Request::RegisterBroker(registration_request(&req))).await {
        Ok(CReply::RegisterBroker(r)) => r,
        other => Err(not_controller(&other)),
    };
    ResponseKind::BrokerRegistration(
        BrokerRegistrationResponse::default()
            .with_error_code(error_of(&result))
            .with_broker_epoch(*result.as_ref().unwrap_or(&-1)),
    )
}

async fn broker_heartbeat(state: Arc<BrokerState>, req: BrokerHeartbeatRequest) -> ResponseKind {
    let request = Request::BrokerHeartbeat {
        node_id: req.broker_id.0,
        broker_epoch: req.broker_epoch,
        current_metadata_offset: req.current_metadata_offset,
        want_fence: req.want_fence,
        want_shutdown: req.want_shut_down,
    };
    let result = match submit(&state, request).await {
        Ok(CReply::BrokerHeartbeat(r)) => r,
        other => Err(not_controller(&other)),
    };
    let reply = result.as_ref().copied().unwrap_or(HeartbeatReply {
        is_caught_up: false,
        is_fenced: true,
        should_shut_down: false,
    });
    ResponseKind::BrokerHeartbeat(
        BrokerHeartbeatResponse::default()
            .with_error_code(error_of(&result))
            .with_is_caught_up(reply.is_caught_up)
            .with_is_fenced(reply.is_fenced)
            .with_should_shut_down(reply.should_shut_down),
    )
}

/// AlterPartition (v2+: topics by id): a partition leader's ISR changes, decided by the
/// controller with Kafka's checks; answered once committed.
async fn alter_partition(
    state: Arc<BrokerState>,
    req: AlterPartitionRequest,
    version: i16,
) -> ResponseKind {
    use protocol::messages::alter_partition_response::{PartitionData, TopicData};
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let changes = t
                .partitions
                .iter()
                .map(|p| IsrChange {
                    partition: p.partition_index,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    new_isr: if version >= 3 {
                        p.new_isr_with_epochs
                            .iter()
                            .map(|b| (b.broker_id.0, b.broker_epoch))
                            .collect()
                    } else {
                        p.new_isr.iter().map(|b| (b.0, -1)).collect()
                    },
                    leader_recovery_state: p.leader_recovery_state,
                })
                .collect();
            (handlers::from_uuid(t.topic_id), changes)
        })
        .collect();
    let request = Request::AlterPartition {
        broker_id: req.broker_id.0,
        broker_epoch: req.broker_epoch,
        topics,
    };
    let result = match submit(&state, request).await {
        Ok(CReply::AlterPartition(r)) => r,
        other => Err(not_controller(&other)),
    };
    let per_topic = match result {
        Ok(r) => r,
        Err(e) => {
            return ResponseKind::AlterPartition(
                AlterPartitionResponse::default().with_error_code(handlers::code(e.code)),
            )
        }
    };
    let topics = req
        .topics
        .iter()
        .zip(per_topic)
        .map(|(t, results)| {
            let partitions = t
                .partitions
                .iter()
                .zip(results)
                .map(|(p, r)| {
                    let out = PartitionData::default().with_partition_index(p.partition_index);
                    match r {
                        Ok(reg) => out
                            .with_leader_id(BrokerId(reg.leader))
                            .with_leader_epoch(reg.leader_epoch)
                            .with_isr(reg.isr.iter().map(|b| BrokerId(*b)).collect())
                            .with_leader_recovery_state(0)
                            .with_partition_epoch(reg.partition_epoch),
                        Err(e) => out.with_error_code(handlers::code(e.code)),
                    }
                })
                .collect();
            TopicData::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    ResponseKind::AlterPartition(AlterPartitionResponse::default().with_topics(topics))
}

async fn allocate_producer_ids(
    state: Arc<BrokerState>,
    req: AllocateProducerIdsRequest,
) -> ResponseKind {
    let request = Request::AllocateProducerIds {
        broker_id: req.broker_id.0,
        broker_epoch: req.broker_epoch,
    };
    let result = match submit(&state, request).await {
        Ok(CReply::AllocateProducerIds(r)) => r,
        other => Err(not_controller(&other)),
    };
    let (start, len) = result.as_ref().copied().unwrap_or((-1, 0));
    ResponseKind::AllocateProducerIds(
        AllocateProducerIdsResponse::default()
            .with_error_code(error_of(&result))
            .with_producer_id_start(ProducerId(start))
            .with_producer_id_len(len as i32),
    )
}

/// DescribeQuorum from this node's view (answered by the leader; others say who leads).
pub async fn describe_quorum(state: &BrokerState, version: i16) -> DescribeQuorumResponse {
    use describe_quorum_response::{Listener, Node, PartitionData, ReplicaState, TopicData};
    let Some(q) = &state.quorum else {
        return DescribeQuorumResponse::default()
            .with_error_code(ErrorCode::NotLeaderOrFollower.code());
    };
    let Some((status, observers)) = q.status().await else {
        return DescribeQuorumResponse::default()
            .with_error_code(ErrorCode::NotLeaderOrFollower.code());
    };
    let now = state.clock.now_ms();
    let replica = |id: i64, log_end: i64| {
        let mut r = ReplicaState::default()
            .with_replica_id(BrokerId(id as i32))
            .with_log_end_offset(log_end);
        if version >= 1 {
            r = r
                .with_last_fetch_timestamp(now)
                .with_last_caught_up_timestamp(now);
        }
        r
    };
    let mut partition = PartitionData::default()
        .with_partition_index(0)
        .with_leader_id(BrokerId(status.leader_id as i32))
        .with_leader_epoch(status.term as i32)
        .with_high_watermark(status.commit_index as i64);
    if status.is_leader {
        partition = partition
            .with_current_voters(
                status
                    .voters
                    .iter()
                    .map(|v| replica(v.id as i64, v.log_end))
                    .collect(),
            )
            .with_observers(
                observers
                    .iter()
                    .map(|o| replica(i64::from(o.id), o.log_end))
                    .collect(),
            );
    } else {
        partition = partition.with_error_code(ErrorCode::NotLeaderOrFollower.code());
    }
    let mut resp = DescribeQuorumResponse::default().with_topics(vec![TopicData::default()
        .with_topic_name(handlers::topic_name("__cluster_metadata"))
        .with_partitions(vec![partition])]);
    if version >= 2 {
        let name = state
            .config
            .controller_listener_names
            .first()
            .cloned()
            .unwrap_or_else(|| "CONTROLLER".into());
        resp = resp.with_nodes(
            state
                .config
                .voters
                .iter()
                .map(|v| {
                    Node::default()
                        .with_node_id(BrokerId(v.id))
                        .with_listeners(vec![Listener::default()
                            .with_name(sb(name.clone()))
                            .with_host(sb(v.host.clone()))
                            .with_port(v.port)])
                })
                .collect(),
        );
    }
    resp
}

fn describe_cluster_controllers(
    state: &BrokerState,
    req: &DescribeClusterRequest,
    version: i16,
) -> DescribeClusterResponse {
    use describe_cluster_response::DescribeClusterBroker;
    let image = state.image();
    let brokers = if version >= 1 && req.endpoint_type == 2 {
        state
            .config
            .voters
            .iter()
            .map(|v| {
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(v.id))
                    .with_host(sb(v.host.clone()))
                    .with_port(i32::from(v.port))
            })
            .collect()
    } else {
        image
            .live_brokers()
            .filter_map(|b| {
                let e = b
                    .endpoint(&state.config.inter_broker_listener_name)
                    .or_else(|| b.endpoints.first())?;
                Some(
                    DescribeClusterBroker::default()
                        .with_broker_id(BrokerId(b.node_id))
                        .with_host(sb(e.host.clone()))
                        .with_port(e.port)
                        .with_rack(b.rack.clone().map(sb)),
                )
            })
            .collect()
    };
    let mut resp = DescribeClusterResponse::default()
        .with_cluster_id(sb(image.cluster_id.clone()))
        .with_controller_id(BrokerId(state.controller_id()))
        .with_brokers(brokers);
    if version >= 1 {
        resp = resp.with_endpoint_type(req.endpoint_type);
    }
    resp
}

/// Runs an administration request here (this node's controller decides it).
async fn admin(
    state: Arc<BrokerState>,
    body: RequestKind,
    version: i16,
    origin: Origin,
) -> Option<ResponseKind> {
    Some(match body {
        RequestKind::CreateTopics(r) => ResponseKind::CreateTopics(
            admin::create_topics(state, r, version, origin, None)
                .await
                .0,
        ),
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(admin::delete_topics(state, r, version, None).await.0)
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(admin::create_partitions(state, r, None).await.0)
        }
        RequestKind::AlterConfigs(r) => {
            ResponseKind::AlterConfigs(configs::alter_configs(state, r).await.0)
        }
        RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
            configs::incremental_alter_configs(state, r, Default::default())
                .await
                .0,
        ),
        RequestKind::AlterUserScramCredentials(r) => {
            ResponseKind::AlterUserScramCredentials(handlers::alter_scram(state, r).await.0)
        }
        RequestKind::CreateAcls(r) => {
            ResponseKind::CreateAcls(handlers::acls::create(state, r).await.0)
        }
        RequestKind::AlterClientQuotas(r) => {
            ResponseKind::AlterClientQuotas(handlers::quotas::alter(state, r).await.0)
        }
        RequestKind::DeleteAcls(r) => {
            ResponseKind::DeleteAcls(handlers::acls::delete(state, r).await.0)
        }
        RequestKind::ElectLeaders(r) => ResponseKind::ElectLeaders(
            handlers::elections::elect_leaders(state, r, version)
                .await
                .0,
        ),
        RequestKind::AlterPartitionReassignments(r) => ResponseKind::AlterPartitionReassignments(
            handlers::reassignments::alter(state, r, version).await.0,
        ),
        _ => return None,
    })
}

/// The client requests a broker may forward in an Envelope (KIP-590).
fn forwardable(api: protocol::ApiKey) -> bool {
    use protocol::ApiKey as A;
    matches!(
        api,
        A::CreateTopics
            | A::DeleteTopics
            | A::CreatePartitions
            | A::AlterConfigs
            | A::IncrementalAlterConfigs
            | A::AlterUserScramCredentials
            | A::AlterClientQuotas
            | A::CreateAcls
            | A::DeleteAcls
            | A::ElectLeaders
            | A::AlterPartitionReassignments
    )
}

/// Unwraps a forwarded client request, decides it as the client's (the Envelope's
/// `request_principal` and client address, authorized here as Kafka's controller does), and
/// wraps its response (KIP-590). Only a node with CLUSTER_ACTION may forward.
async fn envelope(
    state: Arc<BrokerState>,
    req: EnvelopeRequest,
    listener: Arc<str>,
    access: crate::authz::Access,
) -> ResponseKind {
    let fail = |e: ErrorCode| {
        ResponseKind::Envelope(EnvelopeResponse::default().with_error_code(e.code()))
    };
    if !access.allows_cluster(model::acl::AclOperation::ClusterAction) {
        return fail(ErrorCode::ClusterAuthorizationFailed);
    }
    if !state.is_active_controller() {
        return fail(ErrorCode::NotController);
    }
    let principal = req
        .request_principal
        .as_deref()
        .and_then(crate::authz::deserialize_principal);
    let address = crate::authz::envelope_client_address(&req.client_host_address);
    let who = match (principal, address) {
        (Some(p), Some(a)) => Arc::new(auth::acl::RequestContext::new(p, a)),
        // Without an authorizer nothing is decided by who asks.
        _ if !access.enabled() => access.who().clone().into(),
        _ => {
            tracing::info!("refusing an Envelope without a readable principal and client address");
            return fail(ErrorCode::PrincipalDeserializationFailure);
        }
    };
    let inner = match protocol::decode_request(req.request_data.clone()) {
        Ok(r) if forwardable(r.api_key) => r,
        Ok(r) => {
            tracing::debug!(api = ?r.api_key, "refusing a forwarded request that is not forwardable");
            return fail(ErrorCode::InvalidRequest);
        }
        Err(e) => {
            tracing::debug!(error = %e, "undecodable forwarded request");
            return fail(ErrorCode::InvalidRequest);
        }
    };
    let host = format!("/{}", who.host);
    let inner_access = crate::authz::Access::new(state.authorizer(), who);
    let frame = match handlers::dispatch(&state, inner, &host, &listener, inner_access, None) {
        Reply::Ready(b) => Some(b),
        Reply::Later(f) => f.await,
        _ => None,
    };
    match frame {
        // Without the size prefix: the broker frames it for its client.
        Some(frame) if frame.len() >= 4 => ResponseKind::Envelope(
            EnvelopeResponse::default().with_response_data(Some(frame.slice(4..))),
        ),
        _ => {
            tracing::error!("a forwarded request produced no response");
            fail(ErrorCode::UnknownServerError)
        }
    }
}

/// Kafka's answer to a node without CLUSTER_ACTION sending a broker-only request (or an
/// administration request on its own behalf) to a CONTROLLER listener.
fn cluster_denied(body: &RequestKind, version: i16) -> Option<ResponseKind> {
    let c = ErrorCode::ClusterAuthorizationFailed.code();
    if let Some(r) =
        crate::authz::denied_response(body, version, ErrorCode::ClusterAuthorizationFailed)
    {
        return Some(r);
    }
    Some(match body {
        RequestKind::BrokerRegistration(_) => ResponseKind::BrokerRegistration(
            BrokerRegistrationResponse::default().with_error_code(c),
        ),
        RequestKind::BrokerHeartbeat(_) => {
            ResponseKind::BrokerHeartbeat(BrokerHeartbeatResponse::default().with_error_code(c))
        }
        RequestKind::AllocateProducerIds(_) => ResponseKind::AllocateProducerIds(
            AllocateProducerIdsResponse::default().with_error_code(c),
        ),
        RequestKind::AlterPartition(_) => {
            ResponseKind::AlterPartition(AlterPartitionResponse::default().with_error_code(c))
        }
        RequestKind::Envelope(_) => {
            ResponseKind::Envelope(EnvelopeResponse::default().with_error_code(c))
        }
        RequestKind::CreateTopics(r) => ResponseKind::CreateTopics(
            CreateTopicsResponse::default().with_topics(
                r.topics
                    .iter()
                    .map(|t| {
                        create_topics_response::CreatableTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(c)
                    })
                    .collect(),
            ),
        ),
        RequestKind::DeleteTopics(r) => ResponseKind::DeleteTopics(
            DeleteTopicsResponse::default().with_responses(
                r.topic_names
                    .iter()
                    .map(|t| {
                        delete_topics_response::DeletableTopicResult::default()
                            .with_name(Some(t.clone()))
                            .with_error_code(c)
                    })
                    .collect(),
            ),
        ),
        RequestKind::CreatePartitions(r) => ResponseKind::CreatePartitions(
            CreatePartitionsResponse::default().with_results(
                r.topics
                    .iter()
                    .map(|t| {
                        create_partitions_response::CreatePartitionsTopicResult::default()
                            .with_name(t.name.clone())
                            .with_error_code(c)
                    })
                    .collect(),
            ),
        ),
        RequestKind::AlterConfigs(r) => ResponseKind::AlterConfigs(
            AlterConfigsResponse::default().with_responses(
                r.resources
                    .iter()
                    .map(|x| {
                        alter_configs_response::AlterConfigsResourceResponse::default()
                            .with_resource_type(x.resource_type)
                            .with_resource_name(x.resource_name.clone())
                            .with_error_code(c)
                    })
                    .collect(),
            ),
        ),
        RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
            IncrementalAlterConfigsResponse::default().with_responses(
                r.resources
                    .iter()
                    .map(|x| {
                        incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                            .with_resource_type(x.resource_type)
                            .with_resource_name(x.resource_name.clone())
                            .with_error_code(c)
                    })
                    .collect(),
            ),
        ),
        _ => return None,
    })
}

/// Routes a decoded request on a CONTROLLER listener.
///
/// With an authorizer, what only nodes send (BrokerRegistration, BrokerHeartbeat,
/// AllocateProducerIds, AlterPartition, Envelope, administration on a node's own behalf) needs
/// CLUSTER_ACTION on the cluster, as Kafka's `ControllerApis`; DescribeQuorum needs DESCRIBE.
/// Requests a broker forwards are authorized as their client's (see `envelope`).
pub fn dispatch(
    state: &Arc<BrokerState>,
    req: protocol::Request,
    listener: &Arc<str>,
    access: crate::authz::Access,
) -> Reply {
    let ctx = Ctx {
        api: req.api_key,
        version: req.version(),
        correlation_id: req.correlation_id(),
        listener: listener.clone(),
        access,
        quota: None,
    };
    let v = ctx.version;
    let state = state.clone();
    use model::acl::AclOperation as Op;
    let needed = match &req.body {
        RequestKind::ApiVersions(_)
        | RequestKind::DescribeCluster(_)
        | RequestKind::SaslHandshake(_)
        | RequestKind::SaslAuthenticate(_) => None,
        RequestKind::DescribeQuorum(_) => Some(Op::Describe),
        _ => Some(Op::ClusterAction),
    };
    if let Some(op) = needed {
        if !ctx.access.allows_cluster(op) {
            return match cluster_denied(&req.body, v) {
                Some(resp) => ctx.ready(resp),
                None => ctx.ready(ResponseKind::DescribeQuorum(
                    DescribeQuorumResponse::default()
                        .with_error_code(ErrorCode::ClusterAuthorizationFailed.code()),
                )),
            };
        }
    }
    match req.body {
        body @ (RequestKind::SaslHandshake(_) | RequestKind::SaslAuthenticate(_)) => {
            // Only reached on a listener without SASL.
            match crate::sasl::illegal_state(&body) {
                Some(resp) => ctx.ready(resp),
                None => Reply::Later(Box::pin(async { None })),
            }
        }
        RequestKind::ApiVersions(_) => ctx.ready(ResponseKind::ApiVersions(
            protocol::versions::api_versions_response_for(
                protocol::versions::CONTROLLER_SUPPORTED,
                0,
            ),
        )),
        RequestKind::DescribeCluster(r) => ctx.ready(ResponseKind::DescribeCluster(
            describe_cluster_controllers(&state, &r, v),
        )),
        body @ (RequestKind::CreateTopics(_)
        | RequestKind::DeleteTopics(_)
        | RequestKind::CreatePartitions(_)
        | RequestKind::AlterConfigs(_)
        | RequestKind::IncrementalAlterConfigs(_)
        | RequestKind::AlterUserScramCredentials(_)
        | RequestKind::AlterClientQuotas(_)
        | RequestKind::CreateAcls(_)
        | RequestKind::DeleteAcls(_)
        | RequestKind::ElectLeaders(_)
        | RequestKind::AlterPartitionReassignments(_)) => Reply::Later(Box::pin(async move {
            // Sent here directly: a broker on its own behalf (internal topics, auto-creation).
            let resp = admin(state, body, v, Origin::Broker).await?;
            ctx.encode(resp)
        })),
        RequestKind::Envelope(r) => Reply::Later(Box::pin(async move {
            let resp = envelope(state, r, ctx.listener.clone(), ctx.access.clone()).await;
            ctx.encode(resp)
        })),
        RequestKind::BrokerRegistration(r) => Reply::Later(Box::pin(async move {
            ctx.encode(broker_registration(state, r).await)
        })),
        RequestKind::BrokerHeartbeat(r) => Reply::Later(Box::pin(async move {
            ctx.encode(broker_heartbeat(state, r).await)
        })),
        RequestKind::AllocateProducerIds(r) => Reply::Later(Box::pin(async move {
            ctx.encode(allocate_producer_ids(state, r).await)
        })),
        RequestKind::AlterPartition(r) => Reply::Later(Box::pin(async move {
            ctx.encode(alter_partition(state, r, v).await)
        })),
        RequestKind::DescribeQuorum(_) => Reply::Later(Box::pin(async move {
            ctx.encode(ResponseKind::DescribeQuorum(
                describe_quorum(&state, v).await,
            ))
        })),
        other => {
            tracing::error!(api = ?ctx.api, "controller request without a handler: {other:?}");
            Reply::Later(Box::pin(async { None }))
        }
    }
}

/// Whether a frame is one of the private quorum APIs.
pub fn is_private(api_key: i16) -> bool {
    api_key == wire::RAFT_MESSAGES_API || api_key == wire::METADATA_FETCH_API
}

/// Cluster ids agree when either side does not know one yet.
/// Whether a peer's cluster id matches this node's (the committed one, or before this node
/// has one, its configured `cluster.id`); an empty id on either side is not known yet.
fn same_cluster(state: &BrokerState, theirs: &str) -> bool {
    let ours = state.known_cluster_id();
    ours.is_empty() || theirs.is_empty() || ours == theirs
}

fn private_frame(correlation_id: i32, body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(body.len() + 8);
    out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    out.extend_from_slice(&correlation_id.to_be_bytes());
    out.extend_from_slice(body);
    out.freeze()
}

/// Serves a private-API frame; `None` closes the connection (malformed).
///
/// With an authorizer, only nodes with CLUSTER_ACTION may send them (Kafka's Raft APIs need
/// it); others get CLUSTER_AUTHORIZATION_FAILED.
pub fn private(
    state: &Arc<BrokerState>,
    mut frame: Bytes,
    access: &crate::authz::Access,
) -> Option<Reply> {
    let header = match <protocol::RequestHeader as protocol::Decode>::decode(&mut frame, 1) {
        Ok(h) => h,
        Err(e) => {
            tracing::debug!(error = %e, "malformed private request header");
            return None;
        }
    };
    let correlation_id = header.correlation_id;
    if header.request_api_version != wire::WIRE_VERSION {
        return None;
    }
    if !access.allows_cluster(model::acl::AclOperation::ClusterAction) {
        return Some(Reply::Ready(private_frame(
            correlation_id,
            &wire::encode_error(ErrorCode::ClusterAuthorizationFailed.code()),
        )));
    }
    let quorum = state.quorum.clone();
    match header.request_api_key {
        wire::RAFT_MESSAGES_API => {
            let msgs = match RaftMessages::decode(frame) {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!(error = %e, "malformed RaftMessages");
                    return None;
                }
            };
            let code = match &quorum {
                _ if !same_cluster(state, &msgs.cluster_id) => ErrorCode::InconsistentClusterId,
                None => ErrorCode::NotController,
                Some(q) => {
                    for m in msgs.messages {
                        if m.to == q.node_id() {
                            q.step(m);
                        }
                    }
                    ErrorCode::None
                }
            };
            Some(Reply::Ready(private_frame(
                correlation_id,
                &wire::encode_error(code.code()),
            )))
        }
        wire::METADATA_FETCH_API => {
            let fetch = match MetadataFetch::decode(frame) {
                Ok(f) => f,
                Err(e) => {
                    tracing::debug!(error = %e, "malformed MetadataFetch");
                    return None;
                }
            };
            let consistent = same_cluster(state, &fetch.cluster_id);
            Some(Reply::Later(Box::pin(async move {
                let empty = quorum::CommittedRead::default();
                let (code, read) = match &quorum {
                    _ if !consistent => (ErrorCode::InconsistentClusterId, empty),
                    None => (ErrorCode::NotController, empty),
                    Some(q) => {
                        let wait = Duration::from_millis(u64::from(fetch.max_wait_ms.min(5000)));
                        match q
                            .read_committed(
                                fetch.from,
                                u64::from(fetch.max_bytes),
                                wait,
                                Some(fetch.node_id),
                            )
                            .await
                        {
                            Some(r) => (ErrorCode::None, r),
                            None => (ErrorCode::NotController, empty),
                        }
                    }
                };
                let body = wire::encode_fetch_response(code.code(), &read);
                Some(private_frame(correlation_id, &body))
            })))
        }
        _ => None,
    }
}

/// Encodes a request body at `version` (for forwarding).
pub fn encode_body(body: &impl Encode, version: i16) -> Option<Bytes> {
    let mut out = BytesMut::new();
    body.encode(&mut out, version).ok()?;
    Some(out.freeze())
}
