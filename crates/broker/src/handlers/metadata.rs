//! Metadata and DescribeCluster: brokers, topics, partitions and leaders from the committed
//! image, with each broker's endpoint on the listener the request came in on.

use super::{code, from_uuid, str_bytes, to_uuid, Ctx, Reply};
use crate::state::BrokerState;
use controller::ControllerError;
use metadata::{MetadataImage, TopicImage};
use model::acl::{AclOperation, ResourceType};
use model::ErrorCode;
use protocol::messages::create_topics_request::CreatableTopic;
use protocol::messages::describe_cluster_response::DescribeClusterBroker;
use protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use protocol::messages::{
    BrokerId, CreateTopicsRequest, DescribeClusterRequest, DescribeClusterResponse,
    MetadataRequest, MetadataResponse, TopicName,
};
use protocol::{ApiKey, ResponseKind, StrBytes};
use std::sync::Arc;

fn topic_entry(state: &BrokerState, t: &TopicImage, version: i16) -> MetadataResponseTopic {
    let partitions = t
        .partitions
        .iter()
        .enumerate()
        .map(|(i, p)| {
            // The leader epoch of a hosted partition is the one its log runs with.
            let epoch = state
                .replicas
                .get(&t.name, i as i32)
                .map(|h| h.leader_epoch())
                .unwrap_or(p.leader_epoch);
            let mut r = MetadataResponsePartition::default()
                .with_partition_index(i as i32)
                .with_error_code(if p.leader < 0 {
                    code(ErrorCode::LeaderNotAvailable)
                } else {
                    0
                })
                .with_leader_id(BrokerId(p.leader))
                .with_replica_nodes(p.replicas.iter().map(|&n| BrokerId(n)).collect())
                .with_isr_nodes(p.isr.iter().map(|&n| BrokerId(n)).collect());
            if version >= 7 {
                r = r.with_leader_epoch(epoch);
            }
            let tp = model::TopicPartition::new(t.name.clone(), i as i32);
            if version >= 5 && state.replicas.offline_partition(&tp).is_some() {
                // Its log could not be opened here: Produce and Fetch get KAFKA_STORAGE_ERROR.
                r = r.with_offline_replicas(vec![BrokerId(state.node_id)]);
            }
            r
        })
        .collect();
    let mut topic = MetadataResponseTopic::default()
        .with_name(Some(super::topic_name(&t.name)))
        .with_is_internal(t.is_internal())
        .with_partitions(partitions);
    if version >= 10 {
        topic = topic.with_topic_id(to_uuid(t.id));
    }
    topic
}

fn error_topic(
    name: Option<&str>,
    id: uuid::Uuid,
    e: ErrorCode,
    version: i16,
) -> MetadataResponseTopic {
    let mut t = MetadataResponseTopic::default()
        .with_error_code(code(e))
        .with_is_internal(name.is_some_and(metadata::image::is_internal_topic))
        .with_name(name.map(super::topic_name));
    if version >= 10 {
        t = t.with_topic_id(id);
    }
    if t.name.is_none() && version < 12 {
        t.name = Some(super::topic_name(""));
    }
    t
}

/// Answers Metadata; creating missing topics (when allowed) goes through the controller, so
/// such a request is answered once they are created.
pub fn metadata(
    state: &Arc<BrokerState>,
    ctx: Ctx,
    req: MetadataRequest,
    client_id: &str,
) -> Reply {
    let version = ctx.version;
    let image = state.image();
    // v0: an empty list means all topics; v1+: null means all, empty means none.
    let requested = match &req.topics {
        None => None,
        Some(t) if t.is_empty() && version == 0 => None,
        Some(t) => Some(t.clone()),
    };
    let allow_auto_create =
        (version < 4 || req.allow_auto_topic_creation) && state.config.auto_create_topics_enable;
    let mut errors = std::collections::HashMap::new();
    let missing: Vec<String> = requested
        .iter()
        .flatten()
        .filter(|rt| rt.topic_id.is_nil())
        .filter_map(|rt| rt.name.as_ref().map(|n| n.0.to_string()))
        .filter(|n| image.topic(n).is_none())
        .filter(|n| model::ids::validate_topic_name(n).is_ok())
        .filter(|n| !metadata::is_internal_topic(n))
        .filter(|n| ctx.access.allows_topic(AclOperation::Describe, n))
        // As Kafka: a topic that would be auto-created but may not be is
        // TOPIC_AUTHORIZATION_FAILED.
        .filter(|n| {
            let may = !allow_auto_create || ctx.access.may_create_topic(n);
            if !may {
                errors.insert(n.clone(), ErrorCode::TopicAuthorizationFailed);
            }
            may
        })
        .collect();
    if missing.is_empty() || !allow_auto_create {
        let resp = build(state, &ctx, &req, &image, requested, &errors);
        return ctx.ready(ResponseKind::Metadata(resp));
    }
    let state = state.clone();
    let client_id = client_id.to_string();
    Reply::Later(Box::pin(async move {
        for name in missing {
            if let Err(e) = auto_create(&state, &ctx, &client_id, &name).await {
                // Over the client's controller mutation quota the topic is not created, and
                // Kafka's Metadata answer for a topic it asked the controller to create is
                // UNKNOWN_TOPIC_OR_PARTITION (retriable: the client asks again).
                let code = match e.code {
                    ErrorCode::ThrottlingQuotaExceeded => ErrorCode::UnknownTopicOrPartition,
                    c => c,
                };
                errors.insert(name, code);
            }
        }
        let image = state.image();
        let resp = build(&state, &ctx, &req, &image, requested, &errors);
        ctx.encode(ResponseKind::Metadata(resp))
    }))
}

/// Creates a topic a Metadata request named, for its client, as Kafka 4.4's
/// `DefaultAutoTopicCreationManager` (KRaft): a CreateTopics at the latest version, in an
/// Envelope carrying the client's principal and client id, so the active controller counts
/// the new partitions against the client's `controller_mutation_rate` as it counts a
/// CreateTopics v6+ of that client: strictly (over the quota the topic is not created; the
/// `PermissiveControllerMutationQuota` KafkaApis builds for it is not passed on in KRaft).
/// The Metadata response is not throttled for it (Kafka throttles only the Envelope).
/// Without mutation quotas, and always on the active controller itself, the broker's own
/// CreateTopics does the same with less.
async fn auto_create(
    state: &Arc<BrokerState>,
    ctx: &Ctx,
    client_id: &str,
    name: &str,
) -> Result<(), ControllerError> {
    let user = &ctx.access.who().principal.name;
    if state.is_active_controller() || !state.quotas.mutation_enabled() {
        let quota = state.quotas.mutation_quota(user, client_id, true);
        return state
            .auto_create(name, quota.map(|q| q as _))
            .await
            .map(|_| ());
    }
    const CREATE_TOPICS_VERSION: i16 = 7;
    // Kafka's `request.timeout.ms` default, which its forwarded CreateTopics carries.
    const AUTO_CREATE_TIMEOUT_MS: i32 = 30_000;
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(AUTO_CREATE_TIMEOUT_MS)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.to_string())))
            .with_num_partitions(-1)
            .with_replication_factor(-1)]);
    let Some((frame, offset)) = state
        .controller
        .forward(
            ApiKey::CreateTopics as i16,
            CREATE_TOPICS_VERSION,
            ctx.correlation_id,
            client_id,
            &req,
            ctx.access.who(),
        )
        .await
    else {
        return Err(ControllerError::new(
            ErrorCode::LeaderNotAvailable,
            "no controller reachable to create the topic",
        ));
    };
    state.wait_applied(offset).await;
    let created = match super::decode_response(ApiKey::CreateTopics, CREATE_TOPICS_VERSION, &frame)
    {
        Some(ResponseKind::CreateTopics(r)) => r.topics.into_iter().next(),
        _ => None,
    };
    let code = created.map_or(ErrorCode::UnknownServerError, |t| {
        ErrorCode::from_code(t.error_code)
    });
    match code {
        ErrorCode::None | ErrorCode::TopicAlreadyExists => {
            tracing::info!(topic = name, "auto-created topic");
            Ok(())
        }
        code => Err(ControllerError::new(code, "auto-creation refused")),
    }
}

fn build(
    state: &BrokerState,
    ctx: &Ctx,
    req: &MetadataRequest,
    image: &MetadataImage,
    requested: Option<Vec<protocol::messages::metadata_request::MetadataRequestTopic>>,
    create_errors: &std::collections::HashMap<String, ErrorCode>,
) -> MetadataResponse {
    let version = ctx.version;
    let mut topics = Vec::new();
    let describable = |name: &str| ctx.access.allows_topic(AclOperation::Describe, name);
    match requested {
        // All topics: those the requester may not describe are left out.
        None => {
            for t in image.topics.values().filter(|t| describable(&t.name)) {
                topics.push(topic_entry(state, t, version));
            }
        }
        Some(list) => {
            // Kafka reads the requested topics as a set: a name asked twice is answered once.
            let mut asked = std::collections::HashSet::new();
            for rt in list {
                if !asked.insert((rt.name.clone(), rt.topic_id)) {
                    continue;
                }
                let by_id = !rt.topic_id.is_nil();
                let name = rt.name.as_ref().map(|n| n.0.to_string());
                // As Kafka: a topic with an id is looked up by id, whatever its name says (the
                // Java consumer asks for assigned topic ids with an empty name).
                let found = if by_id {
                    image.topic_by_id(from_uuid(rt.topic_id)).cloned()
                } else {
                    name.as_deref().and_then(|n| image.topic(n).cloned())
                };
                if let Some(t) = found {
                    if describable(&t.name) {
                        topics.push(topic_entry(state, &t, version));
                    } else {
                        // Named but not describable: denied, without saying whether it exists
                        // (by id: without its name either).
                        let name = (!by_id).then_some(&*t.name);
                        topics.push(error_topic(
                            name,
                            rt.topic_id,
                            ErrorCode::TopicAuthorizationFailed,
                            version,
                        ));
                    }
                    continue;
                }
                let Some(name) = name.filter(|_| !by_id) else {
                    topics.push(error_topic(
                        None,
                        rt.topic_id,
                        ErrorCode::UnknownTopicId,
                        version,
                    ));
                    continue;
                };
                if let Err(msg) = model::ids::validate_topic_name(&name) {
                    tracing::debug!(%msg, "metadata for an invalid topic name");
                    topics.push(error_topic(
                        Some(&name),
                        rt.topic_id,
                        ErrorCode::InvalidTopicException,
                        version,
                    ));
                    continue;
                }
                let e = if describable(&name) {
                    create_errors
                        .get(&name)
                        .copied()
                        .unwrap_or(ErrorCode::UnknownTopicOrPartition)
                } else {
                    ErrorCode::TopicAuthorizationFailed
                };
                topics.push(error_topic(Some(&name), rt.topic_id, e, version));
            }
        }
    }
    let brokers = image
        .live_brokers()
        .filter_map(|b| {
            let e = b.endpoint(&ctx.listener)?;
            Some(
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(b.node_id))
                    .with_host(str_bytes(e.host.clone()))
                    .with_port(e.port)
                    .with_rack(b.rack.clone().map(str_bytes)),
            )
        })
        .collect();
    if version >= 8 && req.include_topic_authorized_operations {
        // As Kafka: every topic entry answered by name (also unknown ones) carries the
        // operations allowed on it; with no authorizer, all a topic supports. Entries for
        // unknown topic ids keep the schema default, and so do the entries refused for want
        // of DESCRIBE or CREATE (Kafka adds them after setting the operations).
        let denied = code(ErrorCode::TopicAuthorizationFailed);
        for t in topics.iter_mut().filter(|t| t.error_code != denied) {
            if let Some(name) = &t.name {
                t.topic_authorized_operations = ctx.access.operations(ResourceType::Topic, name);
            }
        }
    }
    let mut resp = MetadataResponse::default()
        .with_brokers(brokers)
        .with_topics(topics)
        .with_controller_id(BrokerId(metadata_controller(state, image)));
    // v8-v10 only: later versions moved the cluster's operations to DescribeCluster.
    if (8..=10).contains(&version) && req.include_cluster_authorized_operations {
        resp = resp.with_cluster_authorized_operations(cluster_operations(&ctx.access));
    }
    if version >= 2 {
        resp = resp.with_cluster_id(Some(str_bytes(image.cluster_id.clone())));
    }
    resp
}

/// The controller id in Metadata, where clients send admin requests: this broker when it is
/// a live one (it answered, so the client can reach it, and it forwards to the active
/// controller), as Kafka's KRaft brokers name a live broker rather than the controller. Naming
/// the active controller here would strand clients when it dies: librdkafka waits for the
/// named broker to come back instead of asking for metadata again (measured: a CreateTopics
/// after kill -9 of the active controller timed out until the 5-minute metadata refresh).
fn metadata_controller(state: &BrokerState, image: &MetadataImage) -> i32 {
    if image.live_brokers().any(|b| b.node_id == state.node_id) {
        return state.node_id;
    }
    controller_for_clients(state, image)
}

/// The controller id DescribeCluster reports (what operators read): the active controller when it is also a broker (clients
/// send admin requests there), else a live broker (any broker forwards to the controller),
/// as Kafka's KRaft brokers report a random alive broker.
fn controller_for_clients(state: &BrokerState, image: &MetadataImage) -> i32 {
    let active = state.controller_id();
    if image.live_brokers().any(|b| b.node_id == active) {
        return active;
    }
    if image.live_brokers().any(|b| b.node_id == state.node_id) {
        return state.node_id;
    }
    image.live_brokers().next().map_or(-1, |b| b.node_id)
}

pub fn describe_cluster(
    state: &Arc<BrokerState>,
    ctx: &Ctx,
    req: DescribeClusterRequest,
    version: i16,
) -> DescribeClusterResponse {
    let image = state.image();
    // Endpoint type 1 = brokers, 2 = controllers. This listener serves clients, so it
    // answers as a Kafka broker listener does: controllers are asked on their own listener.
    // Kafka's broker names the problem in its answer (its messages).
    if version >= 1 && req.endpoint_type != 1 {
        let (e, message) = if req.endpoint_type == 2 {
            (
                ErrorCode::MismatchedEndpointType,
                "The request was sent to an endpoint of type BROKER, but we wanted an \
                 endpoint of type CONTROLLER"
                    .to_string(),
            )
        } else {
            (
                ErrorCode::UnsupportedEndpointType,
                format!("Unsupported endpoint type {}", req.endpoint_type),
            )
        };
        return DescribeClusterResponse::default()
            .with_error_code(code(e))
            .with_error_message(Some(str_bytes(message)));
    }
    let brokers = image
        .live_brokers()
        .filter_map(|b| {
            let e = b.endpoint(&ctx.listener)?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(b.node_id))
                    .with_host(str_bytes(e.host.clone()))
                    .with_port(e.port)
                    .with_rack(b.rack.clone().map(str_bytes)),
            )
        })
        .collect();
    let mut resp = DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(image.cluster_id.clone()))
        .with_controller_id(BrokerId(controller_for_clients(state, &image)))
        .with_brokers(brokers);
    if version >= 1 {
        resp = resp.with_endpoint_type(req.endpoint_type);
    }
    if req.include_cluster_authorized_operations {
        resp = resp.with_cluster_authorized_operations(cluster_operations(&ctx.access));
    }
    resp
}

/// The cluster's authorized operations as Kafka reports them: 0 unless the requester may
/// DESCRIBE the cluster.
fn cluster_operations(access: &crate::authz::Access) -> i32 {
    if !access.allows_cluster(AclOperation::Describe) {
        return 0;
    }
    access.operations(ResourceType::Cluster, auth::acl::CLUSTER_NAME)
}
