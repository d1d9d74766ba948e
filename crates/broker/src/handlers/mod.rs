//! Request dispatch: one module per API. A handler returns its response at once, or a
//! future for the part that waits (acks=all durability, Fetch long-poll).

pub(crate) mod acls;
pub(crate) mod admin;
pub(crate) mod configs;
mod describe_topic_partitions;
pub(crate) mod elections;
mod fetch;
mod leader_hints;
mod metadata;
mod offsets;
mod produce;
pub(crate) mod quotas;
pub(crate) mod reassignments;
mod scram;

pub(crate) use scram::alter as alter_scram;
mod txn;

use crate::authz::Access;
use crate::quotas::ConnThrottle;
use crate::state::BrokerState;
use auth::quota::QuotaKind;
use bytes::Bytes;
use model::{ErrorCode, TopicId};
use protocol::messages::TopicName;
use protocol::{ApiKey, Request, RequestKind, ResponseKind, StrBytes};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// What the connection writes back for one request.
pub enum Reply {
    /// An encoded response frame.
    Ready(Bytes),
    /// An encoded response frame in chunks, written in order by vectored writes (Fetch:
    /// record bytes from the log are chunks of their own, never copied into one frame).
    Chunks(Vec<Bytes>),
    /// A response still being produced; `None` means it could not be encoded (close).
    Later(Pin<Box<dyn Future<Output = Option<Bytes>> + Send>>),
    /// Like `Later`, for a response in chunks.
    LaterChunks(Pin<Box<dyn Future<Output = Option<Vec<Bytes>>> + Send>>),
    /// No response at all (acks=0 produce).
    None,
    /// Close the connection after the replies before this one, reading nothing more from it
    /// (Kafka's answer to requests it cannot parse, and to a failed acks=0 produce).
    Close,
    /// `reply`, for a request whose effects are not all done when its handler returns (a
    /// transactional produce verified with a coordinator on another broker): the connection
    /// reads its next request only once `done` fires (or is dropped), so the requests of one
    /// connection take effect in the order they were sent, as Kafka's muted channels do.
    Serial {
        reply: Box<Reply>,
        done: tokio::sync::oneshot::Receiver<Settled>,
    },
}

/// How a [`Reply::Serial`] request ended: the connection reads on, or (an acks=0 produce
/// that failed once verified, with `Reply::None` as its reply) is closed so the producer
/// notices, as Kafka closes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    ReadOn,
    Close,
}

impl Reply {
    /// The whole response frame, once ready (`None`: no response, or it could not be
    /// encoded). For handlers that finish another handler's reply inside their own.
    pub fn into_frame(self) -> Pin<Box<dyn Future<Output = Option<Bytes>> + Send>> {
        Box::pin(async move {
            match self {
                Reply::Ready(b) => Some(b),
                Reply::Later(f) => f.await,
                Reply::Chunks(c) => Some(c.concat().into()),
                Reply::LaterChunks(f) => f.await.map(|c| c.concat().into()),
                Reply::None | Reply::Close => None,
                Reply::Serial { reply, .. } => reply.into_frame().await,
            }
        })
    }
}

/// The version, correlation id and API of the request being answered, the listener it
/// came in on (Metadata and FindCoordinator answer with endpoints of that listener), and what
/// its principal may do.
#[derive(Clone, Debug)]
pub struct Ctx {
    pub api: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    pub listener: Arc<str>,
    pub access: Access,
    /// Who the request counts against for client quotas (`None`: not subject to them, as a
    /// request forwarded by another broker, which that broker already counted).
    pub quota: Option<QuotaClient>,
}

/// The client a request is counted against for client quotas, and its connection's mute.
#[derive(Clone, Debug)]
pub struct QuotaClient {
    pub user: Arc<str>,
    pub client_id: Arc<str>,
    pub conn: Arc<ConnThrottle>,
    /// Throttle time decided before the handler ran (produce bytes, the request quota).
    pub throttle_ms: i64,
}

/// Raises a response's `throttle_time_ms` to `ms` where its version has the field (a
/// handler's own throttle, a fetch's or the controller's, stays when it is longer).
fn set_throttle_time(body: &mut ResponseKind, version: i16, ms: i32) {
    macro_rules! from_v0 {
        ($($kind:ident),* $(,)?) => {
            match body {
                $(ResponseKind::$kind(r) => r.throttle_time_ms = r.throttle_time_ms.max(ms),)*
                _ => {}
            }
        };
    }
    use ResponseKind as R;
    let min_version = match body {
        R::Produce(_) | R::Fetch(_) | R::FindCoordinator(_) | R::Heartbeat(_) => 1,
        R::LeaveGroup(_) | R::SyncGroup(_) | R::DescribeGroups(_) | R::ListGroups(_) => 1,
        R::ApiVersions(_) | R::DeleteTopics(_) => 1,
        R::JoinGroup(_) | R::CreateTopics(_) | R::ListOffsets(_) => 2,
        R::OffsetForLeaderEpoch(_) => 2,
        R::Metadata(_) | R::OffsetCommit(_) | R::OffsetFetch(_) => 3,
        _ => 0,
    };
    if version < min_version {
        return;
    }
    from_v0!(
        Produce,
        Fetch,
        Metadata,
        ListOffsets,
        OffsetCommit,
        OffsetFetch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        OffsetForLeaderEpoch,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
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
        OffsetDelete,
        DescribeClientQuotas,
        AlterClientQuotas,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        DescribeCluster,
        DescribeProducers,
        DescribeTransactions,
        ListTransactions,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
    );
}

/// Whether a request is exempt from the request-time quota, as Kafka exempts the requests
/// of the connection handshake and of other brokers (cluster actions).
pub fn exempt_from_request_quota(req: &Request) -> bool {
    match &req.body {
        RequestKind::ApiVersions(_)
        | RequestKind::SaslHandshake(_)
        | RequestKind::SaslAuthenticate(_)
        | RequestKind::WriteTxnMarkers(_) => true,
        RequestKind::Fetch(r) => r.replica_id.0 >= 0 || r.replica_state.replica_id.0 >= 0,
        RequestKind::AddPartitionsToTxn(_) => req.version() >= 4,
        _ => false,
    }
}

impl Ctx {
    /// Encodes a response for this request; an encode failure is a handler bug, logged here.
    pub fn encode(&self, mut body: ResponseKind) -> Option<Bytes> {
        crate::metrics::count_errors(self.api, &body);
        if let Some(q) = self.quota.as_ref().filter(|q| q.throttle_ms > 0) {
            set_throttle_time(
                &mut body,
                self.version,
                q.throttle_ms.min(i64::from(i32::MAX)) as i32,
            );
        }
        match protocol::encode_response(self.api, self.version, self.correlation_id, &body) {
            Ok(b) => Some(b),
            Err(e) => {
                tracing::error!(error = %e, "response encoding failed; closing connection");
                None
            }
        }
    }

    pub fn ready(&self, body: ResponseKind) -> Reply {
        match self.encode(body) {
            Some(b) => Reply::Ready(b),
            None => Reply::Later(Box::pin(async { None })),
        }
    }
}

/// Runs a request that changes metadata on the active controller: here when this node is it
/// (the handler decides it and returns the offset its change committed at), else forwarded to
/// it in an Envelope. Either way the answer waits until this broker applied the change.
fn via_controller<R, F, Fut>(
    state: &Arc<BrokerState>,
    ctx: Ctx,
    client: (String, String),
    req: R,
    local: F,
) -> Reply
where
    R: protocol::Encode + Send + Sync + 'static,
    F: FnOnce(Arc<BrokerState>, R) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = (ResponseKind, i64)> + Send + 'static,
{
    let state = state.clone();
    Reply::Later(Box::pin(async move {
        if let Some(frame) = forward(&state, &ctx, &client.0, &req).await {
            return throttle_forwarded(&ctx, frame);
        }
        // The active controller (or, with none reachable, NOT_CONTROLLER for each item).
        let (resp, offset) = local(state.clone(), req).await;
        state.wait_applied(offset).await;
        if let Some(q) = &ctx.quota {
            let controller = i64::from(throttle_time(&resp));
            if controller > 0 {
                crate::metrics::METRICS.mutation_throttled(controller);
            }
            q.conn.mute_for(controller);
        }
        ctx.encode(resp)
    }))
}

/// A topic mutation's reply while controller mutation quotas are on: the connection reads
/// nothing more until it is answered (and muted for its throttle), as Kafka's channel is
/// muted while its request is processed; otherwise a request sent meanwhile would be read
/// before the throttle that should delay it is known.
fn mutation_serial(state: &BrokerState, ctx: &Ctx, reply: Reply) -> Reply {
    if ctx.quota.is_none() || !state.quotas.mutation_enabled() {
        return reply;
    }
    let (done, rx) = tokio::sync::oneshot::channel();
    let answered = Reply::Later(Box::pin(async move {
        let frame = reply.into_frame().await;
        let _ = done.send(Settled::ReadOn);
        frame
    }));
    Reply::Serial {
        reply: Box::new(answered),
        done: rx,
    }
}

/// Who a topic mutation counts against for the controller mutation quota: the request's
/// principal (the client's, for a request forwarded in an Envelope) and client id.
fn mutation_client(ctx: &Ctx, client_id: &str) -> (String, String) {
    (
        ctx.access.who().principal.name.clone(),
        client_id.to_string(),
    )
}

/// The throttle time a request's controller mutation quota calls for, for its response.
fn mutation_throttle(quota: &Option<Arc<crate::quotas::RequestMutationQuota>>) -> i32 {
    quota
        .as_ref()
        .map_or(0, |q| q.throttle_time_ms().min(i64::from(i32::MAX)) as i32)
}

/// The `throttle_time_ms` of the responses the controller may throttle (KIP-599).
fn throttle_time(resp: &ResponseKind) -> i32 {
    match resp {
        ResponseKind::CreateTopics(r) => r.throttle_time_ms,
        ResponseKind::DeleteTopics(r) => r.throttle_time_ms,
        ResponseKind::CreatePartitions(r) => r.throttle_time_ms,
        _ => 0,
    }
}

/// A response the active controller answered for a forwarded request, as Kafka's forwarding
/// broker sends it: the client's connection muted for the larger of the controller's throttle
/// (its controller mutation quota) and this broker's request quota, which the response
/// announces.
fn throttle_forwarded(ctx: &Ctx, frame: Bytes) -> Option<Bytes> {
    let Some(q) = &ctx.quota else {
        return Some(frame);
    };
    let Some(resp) = decode_response(ctx.api, ctx.version, &frame) else {
        return Some(frame);
    };
    let controller = i64::from(throttle_time(&resp));
    if controller > 0 {
        crate::metrics::METRICS.mutation_throttled(controller);
    }
    q.conn.mute_for(controller);
    if q.throttle_ms > controller {
        return ctx.encode(resp);
    }
    Some(frame)
}

/// On a node that is not the active controller: the request forwarded to it in an Envelope,
/// its answer once this node applied what it committed; `None` with no controller reachable.
async fn forward<R: protocol::Encode>(
    state: &BrokerState,
    ctx: &Ctx,
    client_id: &str,
    req: &R,
) -> Option<Bytes> {
    if state.is_active_controller() {
        return None;
    }
    let (frame, offset) = state
        .controller
        .forward(
            ctx.api as i16,
            ctx.version,
            ctx.correlation_id,
            client_id,
            req,
            ctx.access.who(),
        )
        .await?;
    state.wait_applied(offset).await;
    Some(frame)
}

/// Like [`via_controller`] for the admin requests whose top-level NOT_CONTROLLER the admin
/// client does not retry (ElectLeaders, AlterPartitionReassignments): as Kafka's forwarding
/// does, it waits for a reachable controller until the request's timeout (a controller
/// election after a restart takes a moment). `local` answers (response, offset, whether it
/// was NOT_CONTROLLER).
fn via_controller_waiting<R, F, Fut>(
    state: &Arc<BrokerState>,
    ctx: Ctx,
    client: (String, String),
    req: R,
    timeout_ms: i32,
    local: F,
) -> Reply
where
    R: protocol::Encode + Clone + Send + Sync + 'static,
    F: Fn(Arc<BrokerState>, R) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = (ResponseKind, i64, bool)> + Send + 'static,
{
    let state = state.clone();
    Reply::Later(Box::pin(async move {
        let wait = u64::try_from(timeout_ms.clamp(0, 60_000)).unwrap_or(0);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(wait);
        loop {
            if let Some(frame) = forward(&state, &ctx, &client.0, &req).await {
                return Some(frame);
            }
            let (resp, offset, not_controller) = local(state.clone(), req.clone()).await;
            if !not_controller || tokio::time::Instant::now() >= deadline {
                state.wait_applied(offset).await;
                return ctx.encode(resp);
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }))
}

/// Routes a decoded request to its handler, once it passed the authorizer's request-level
/// check (`authz::gate`).
pub fn dispatch(
    state: &Arc<BrokerState>,
    req: Request,
    client_host: &str,
    listener: &Arc<str>,
    access: Access,
    conn: Option<(&Arc<ConnThrottle>, usize)>,
) -> Reply {
    let quota = conn.map(|(conn, size)| {
        let user: Arc<str> = access.who().principal.name.as_str().into();
        let client_id: Arc<str> = req.header.client_id.as_deref().unwrap_or("").into();
        // Kafka records a Produce request's size against the producer byte rate and mutes
        // the connection for the throttle time; the request quota announces the throttle the
        // client's handler time so far calls for (recorded once this handler ran).
        let produce = match &req.body {
            RequestKind::Produce(_) => {
                state
                    .quotas
                    .record(QuotaKind::Produce, &user, &client_id, size as f64)
            }
            _ => 0,
        };
        conn.mute_for(produce);
        let request = if exempt_from_request_quota(&req) {
            0
        } else {
            state.quotas.pending(QuotaKind::Request, &user, &client_id)
        };
        QuotaClient {
            user,
            client_id,
            conn: conn.clone(),
            throttle_ms: produce.max(request),
        }
    });
    let ctx = Ctx {
        api: req.api_key,
        version: req.version(),
        correlation_id: req.correlation_id(),
        listener: listener.clone(),
        access,
        quota,
    };
    let v = ctx.version;
    if let Some(e) = crate::authz::gate(&ctx.access, &req.body, v) {
        if let Some(resp) = crate::authz::denied_response(&req.body, v, e) {
            return ctx.ready(resp);
        }
    }
    let client_id: String = req
        .header
        .client_id
        .as_ref()
        .map(|c| c.to_string())
        .unwrap_or_default();
    let client = (client_id.clone(), client_host.to_string());
    match req.body {
        body @ (RequestKind::FindCoordinator(_)
        | RequestKind::JoinGroup(_)
        | RequestKind::SyncGroup(_)
        | RequestKind::Heartbeat(_)
        | RequestKind::LeaveGroup(_)
        | RequestKind::OffsetCommit(_)
        | RequestKind::OffsetFetch(_)
        | RequestKind::OffsetDelete(_)
        | RequestKind::ListGroups(_)
        | RequestKind::DescribeGroups(_)
        | RequestKind::DeleteGroups(_)
        | RequestKind::ConsumerGroupHeartbeat(_)
        | RequestKind::ConsumerGroupDescribe(_)
        | RequestKind::TxnOffsetCommit(_)) => {
            if ctx.access.enabled() {
                return group_items(state, ctx, &client_id, client_host, body);
            }
            state
                .groups
                .handle(state, ctx, &client_id, client_host, body)
        }
        body @ (RequestKind::SaslHandshake(_) | RequestKind::SaslAuthenticate(_)) => {
            match crate::sasl::illegal_state(&body) {
                Some(resp) => ctx.ready(resp),
                None => Reply::Later(Box::pin(async { None })),
            }
        }
        RequestKind::ApiVersions(r) => {
            // v3+ name the client software; Kafka refuses names outside its pattern.
            let valid = |s: &StrBytes| valid_software_name(s);
            let resp = if v >= 3
                && !(valid(&r.client_software_name) && valid(&r.client_software_version))
            {
                protocol::messages::ApiVersionsResponse::default()
                    .with_error_code(code(ErrorCode::InvalidRequest))
            } else {
                protocol::versions::with_features(
                    protocol::versions::api_versions_response(0),
                    state.image().offset,
                )
            };
            ctx.ready(ResponseKind::ApiVersions(resp))
        }
        // Null topics ("all") exist from v1 on; Kafka cannot parse them at v0 and closes.
        RequestKind::Metadata(r) if v == 0 && r.topics.is_none() => Reply::Close,
        RequestKind::Metadata(r) => metadata::metadata(state, ctx, r, &client_id),
        RequestKind::Produce(r) => produce::produce(state, ctx, r),
        RequestKind::Fetch(r) => fetch::fetch(state, ctx, r),
        RequestKind::ListOffsets(r) => ctx.ready(ResponseKind::ListOffsets(offsets::list_offsets(
            state,
            &ctx.access,
            r,
            v,
        ))),
        RequestKind::OffsetForLeaderEpoch(mut r) => {
            // Kafka: CLUSTER_ACTION (followers) or DESCRIBE on each topic.
            use model::acl::AclOperation as Op;
            let denied = if ctx.access.enabled() && !ctx.access.allows_cluster(Op::ClusterAction) {
                take_denied(&mut r.topics, |t| {
                    !ctx.access.allows_topic(Op::Describe, &t.topic)
                })
            } else {
                Vec::new()
            };
            let mut resp = offsets::offset_for_leader_epoch(state, r);
            resp.topics.extend(denied.into_iter().map(|t| {
                use protocol::messages::offset_for_leader_epoch_response as o;
                o::OffsetForLeaderTopicResult::default()
                    .with_topic(t.topic)
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                o::EpochEndOffset::default()
                                    .with_partition(p.partition)
                                    .with_error_code(code(ErrorCode::TopicAuthorizationFailed))
                                    .with_leader_epoch(-1)
                                    .with_end_offset(-1)
                            })
                            .collect(),
                    )
            }));
            ctx.ready(ResponseKind::OffsetForLeaderEpoch(resp))
        }
        RequestKind::DeleteRecords(r) => ctx.ready(ResponseKind::DeleteRecords(
            offsets::delete_records(state, &ctx.access, r),
        )),
        RequestKind::CreateTopics(mut r) => {
            let denied = take_denied(&mut r.topics, |t| !ctx.access.may_create_topic(&t.name));
            let who = mutation_client(&ctx, &client_id);
            let reply = via_controller(state, ctx.clone(), client, r, move |s, r| async move {
                // Kafka: strict (THROTTLING_QUOTA_EXCEEDED per topic) from v6.
                let quota = s.quotas.mutation_quota(&who.0, &who.1, v >= 6);
                let (mut resp, offset) = admin::create_topics(
                    s,
                    r,
                    v,
                    controller::Origin::Client,
                    quota.clone().map(|q| q as _),
                )
                .await;
                resp.throttle_time_ms = mutation_throttle(&quota);
                (ResponseKind::CreateTopics(resp), offset)
            });
            let reply = mutation_serial(state, &ctx, reply);
            // As Kafka's controller: a topic created (or validated) by a caller who may not
            // DESCRIBE_CONFIGS it is answered without its configs, partition count and
            // replication factor, its config error TOPIC_AUTHORIZATION_FAILED.
            let reply = if ctx.access.enabled() && v >= 5 {
                let access = ctx.access.clone();
                post_process(ctx.clone(), reply, move |resp| {
                    let ResponseKind::CreateTopics(c) = resp else {
                        return;
                    };
                    let hidden = c.topics.iter_mut().filter(|t| {
                        t.error_code == 0
                            && !access
                                .allows_topic(model::acl::AclOperation::DescribeConfigs, &t.name)
                    });
                    for t in hidden {
                        t.configs = Some(Vec::new());
                        t.num_partitions = -1;
                        t.replication_factor = -1;
                        t.topic_config_error_code = code(ErrorCode::TopicAuthorizationFailed);
                    }
                })
            } else {
                reply
            };
            with_denied(ctx, reply, denied, move |resp, denied| {
                if let ResponseKind::CreateTopics(c) = resp {
                    c.topics.extend(denied.into_iter().map(|t| {
                        let mut r = protocol::messages::create_topics_response::CreatableTopicResult::default()
                            .with_name(t.name)
                            .with_error_code(code(ErrorCode::TopicAuthorizationFailed))
                            .with_error_message(Some(str_bytes("Authorization failed.")));
                        if v >= 5 {
                            r = r.with_num_partitions(-1).with_replication_factor(-1);
                        }
                        r
                    }));
                }
            })
        }
        RequestKind::DeleteTopics(mut r) => {
            let image = state.image();
            let may_delete = |name: Option<&str>, id: uuid::Uuid| {
                let name = match name {
                    Some(n) if !n.is_empty() => n.to_string(),
                    // By id: an unknown id is the handler's UNKNOWN_TOPIC_ID.
                    _ => match image.topic_by_id(from_uuid(id)) {
                        Some(t) => t.name.to_string(),
                        None => return true,
                    },
                };
                ctx.access
                    .allows_topic(model::acl::AclOperation::Delete, &name)
            };
            let denied_names = take_denied(&mut r.topic_names, |n| {
                !may_delete(Some(n), uuid::Uuid::nil())
            });
            let denied = take_denied(&mut r.topics, |t| {
                !may_delete(t.name.as_ref().map(|n| n.0.as_str()), t.topic_id)
            });
            let who = mutation_client(&ctx, &client_id);
            let reply = via_controller(state, ctx.clone(), client, r, move |s, r| async move {
                // Kafka: strict from v5.
                let quota = s.quotas.mutation_quota(&who.0, &who.1, v >= 5);
                let (mut resp, offset) =
                    admin::delete_topics(s, r, v, quota.clone().map(|q| q as _)).await;
                resp.throttle_time_ms = mutation_throttle(&quota);
                (ResponseKind::DeleteTopics(resp), offset)
            });
            let denied: Vec<_> = denied_names
                .into_iter()
                .map(|n| (Some(n), uuid::Uuid::nil()))
                .chain(denied.into_iter().map(|t| (t.name, t.topic_id)))
                .collect();
            let reply = mutation_serial(state, &ctx, reply);
            with_denied(ctx, reply, denied, move |resp, denied| {
                if let ResponseKind::DeleteTopics(d) = resp {
                    d.responses.extend(denied.into_iter().map(|(name, id)| {
                        let mut r = protocol::messages::delete_topics_response::DeletableTopicResult::default()
                            .with_name(name)
                            .with_error_code(code(ErrorCode::TopicAuthorizationFailed));
                        // Kafka's `ApiError(TOPIC_AUTHORIZATION_FAILED)`: the error's message.
                        if v >= 5 {
                            let e = ErrorCode::TopicAuthorizationFailed;
                            r = r.with_error_message(Some(str_bytes(e.default_message())));
                        }
                        if v >= 6 {
                            r = r.with_topic_id(id);
                        }
                        r
                    }));
                }
            })
        }
        RequestKind::ElectLeaders(r) => {
            let (timeout, v) = (r.timeout_ms, ctx.version);
            via_controller_waiting(state, ctx, client, r, timeout, move |s, r| async move {
                let (resp, offset) = elections::elect_leaders(s, r, v).await;
                let not_controller = resp.error_code == ErrorCode::NotController.code();
                (ResponseKind::ElectLeaders(resp), offset, not_controller)
            })
        }
        RequestKind::AlterPartitionReassignments(r) => {
            let (timeout, v) = (r.timeout_ms, ctx.version);
            via_controller_waiting(state, ctx, client, r, timeout, move |s, r| async move {
                let (resp, offset) = reassignments::alter(s, r, v).await;
                let not_controller = resp.error_code == ErrorCode::NotController.code();
                (
                    ResponseKind::AlterPartitionReassignments(resp),
                    offset,
                    not_controller,
                )
            })
        }
        RequestKind::DescribeTopicPartitions(r) => {
            let resp = describe_topic_partitions::describe(state, &ctx, &r);
            ctx.ready(ResponseKind::DescribeTopicPartitions(resp))
        }
        RequestKind::ListPartitionReassignments(r) => ctx.ready(
            ResponseKind::ListPartitionReassignments(reassignments::list(state, &r)),
        ),
        RequestKind::CreatePartitions(mut r) => {
            let denied = take_denied(&mut r.topics, |t| {
                !ctx.access
                    .allows_topic(model::acl::AclOperation::Alter, &t.name)
            });
            let who = mutation_client(&ctx, &client_id);
            let reply = via_controller(state, ctx.clone(), client, r, move |s, r| async move {
                // Kafka: strict from v3.
                let quota = s.quotas.mutation_quota(&who.0, &who.1, v >= 3);
                let (mut resp, offset) =
                    admin::create_partitions(s, r, quota.clone().map(|q| q as _)).await;
                resp.throttle_time_ms = mutation_throttle(&quota);
                (ResponseKind::CreatePartitions(resp), offset)
            });
            let reply = mutation_serial(state, &ctx, reply);
            with_denied(ctx, reply, denied, |resp, denied| {
                if let ResponseKind::CreatePartitions(c) = resp {
                    c.results.extend(denied.into_iter().map(|t| {
                        protocol::messages::create_partitions_response::CreatePartitionsTopicResult::default()
                            .with_name(t.name)
                            .with_error_code(code(ErrorCode::TopicAuthorizationFailed))
                            // Kafka's controller answers a denied topic without a message.
                            .with_error_message(None)
                    }));
                }
            })
        }
        RequestKind::DescribeQuorum(r) => {
            let s = state.clone();
            Reply::Later(Box::pin(async move {
                let is_leader = s
                    .quorum
                    .as_ref()
                    .is_some_and(|q| q.leadership().borrow().leader_id == Some(q.node_id()));
                if !is_leader {
                    if let Some(frame) = s
                        .controller
                        .relay(ctx.api as i16, ctx.version, ctx.correlation_id, &r)
                        .await
                    {
                        return Some(frame);
                    }
                }
                let resp = crate::controller_api::describe_quorum(&s, ctx.version).await;
                ctx.encode(ResponseKind::DescribeQuorum(resp))
            }))
        }
        RequestKind::DescribeCluster(r) => ctx.ready(ResponseKind::DescribeCluster(
            metadata::describe_cluster(state, &ctx, r, v),
        )),
        RequestKind::DescribeLogDirs(r) => ctx.ready(ResponseKind::DescribeLogDirs(
            admin::describe_log_dirs(state, r, v),
        )),
        // Kafka (KafkaApis) refuses a producer id without an epoch, or an epoch without an id,
        // before the coordinator sees the request.
        RequestKind::InitProducerId(r) if (r.producer_id.0 == -1) != (r.producer_epoch == -1) => {
            ctx.ready(ResponseKind::InitProducerId(
                protocol::messages::InitProducerIdResponse::default()
                    .with_error_code(ErrorCode::InvalidRequest.code())
                    .with_producer_id(protocol::messages::ProducerId(-1))
                    .with_producer_epoch(-1),
            ))
        }
        RequestKind::InitProducerId(r) if r.transactional_id.is_some() => {
            // The coordinator hands out ids synchronously: make sure a block is here first
            // (Kafka answers COORDINATOR_LOAD_IN_PROGRESS meanwhile; waiting is kinder).
            let s = state.clone();
            let client_id = client_id.to_string();
            let client_host = client_host.to_string();
            Reply::Later(Box::pin(async move {
                s.wait_producer_ids().await;
                let reply = s.txns.handle(
                    &s,
                    ctx,
                    &client_id,
                    &client_host,
                    RequestKind::InitProducerId(r),
                );
                reply.into_frame().await
            }))
        }
        RequestKind::InitProducerId(r) => {
            let s = state.clone();
            Reply::Later(Box::pin(async move {
                ctx.encode(ResponseKind::InitProducerId(
                    admin::init_producer_id(s, r).await,
                ))
            }))
        }
        // Kafka (KafkaApis) authorizes WRITE on every topic and never on an internal one:
        // a client may not add `__consumer_offsets` or `__transaction_state` to a
        // transaction (TOPIC_AUTHORIZATION_FAILED, OPERATION_NOT_ATTEMPTED for the rest).
        RequestKind::AddPartitionsToTxn(r)
            if v < 4
                && r.v3_and_below_topics.iter().any(|t| {
                    ::metadata::is_internal_topic(&t.name)
                        || !ctx
                            .access
                            .allows_topic(model::acl::AclOperation::Write, &t.name)
                }) =>
        {
            use protocol::messages::add_partitions_to_txn_response as a;
            let results = r
                .v3_and_below_topics
                .iter()
                .map(|t| {
                    let e = if !::metadata::is_internal_topic(&t.name)
                        && ctx
                            .access
                            .allows_topic(model::acl::AclOperation::Write, &t.name)
                    {
                        ErrorCode::OperationNotAttempted
                    } else {
                        ErrorCode::TopicAuthorizationFailed
                    };
                    a::AddPartitionsToTxnTopicResult::default()
                        .with_name(t.name.clone())
                        .with_results_by_partition(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    a::AddPartitionsToTxnPartitionResult::default()
                                        .with_partition_index(*p)
                                        .with_partition_error_code(code(e))
                                })
                                .collect(),
                        )
                })
                .collect();
            ctx.ready(ResponseKind::AddPartitionsToTxn(
                protocol::messages::AddPartitionsToTxnResponse::default()
                    .with_results_by_topic_v3_and_below(results),
            ))
        }
        RequestKind::DescribeTransactions(mut r) if ctx.access.enabled() => {
            use model::acl::{AclOperation as Op, ResourceType as Rt};
            use protocol::messages::describe_transactions_response as d;
            let access = ctx.access.clone();
            let denied = take_denied(&mut r.transactional_ids, |t| {
                !access.allows(Op::Describe, Rt::TransactionalId, t)
            });
            let reply = state.txns.handle(
                state,
                ctx.clone(),
                &client_id,
                client_host,
                RequestKind::DescribeTransactions(r),
            );
            // Kafka: the partitions of topics the requester may not describe are left out.
            post_process(ctx, reply, move |resp| {
                let ResponseKind::DescribeTransactions(d) = resp else {
                    return;
                };
                for t in &mut d.transaction_states {
                    t.topics
                        .retain(|topic| access.allows_topic(Op::Describe, &topic.topic));
                }
                d.transaction_states.extend(denied.into_iter().map(|t| {
                    d::TransactionState::default()
                        .with_transactional_id(t)
                        .with_error_code(code(ErrorCode::TransactionalIdAuthorizationFailed))
                        .with_transaction_state(str_bytes(""))
                        .with_producer_id(protocol::messages::ProducerId(-1))
                        .with_producer_epoch(-1)
                        .with_transaction_timeout_ms(-1)
                        .with_transaction_start_time_ms(-1)
                }));
            })
        }
        RequestKind::ListTransactions(r) if ctx.access.enabled() => {
            use model::acl::{AclOperation as Op, ResourceType as Rt};
            let access = ctx.access.clone();
            let reply = state.txns.handle(
                state,
                ctx.clone(),
                &client_id,
                client_host,
                RequestKind::ListTransactions(r),
            );
            post_process(ctx, reply, move |resp| {
                if let ResponseKind::ListTransactions(l) = resp {
                    l.transaction_states.retain(|t| {
                        access.allows(Op::Describe, Rt::TransactionalId, &t.transactional_id)
                    });
                }
            })
        }
        body @ (RequestKind::AddPartitionsToTxn(_)
        | RequestKind::AddOffsetsToTxn(_)
        | RequestKind::EndTxn(_)
        | RequestKind::DescribeTransactions(_)
        | RequestKind::ListTransactions(_)) => {
            state.txns.handle(state, ctx, &client_id, client_host, body)
        }
        RequestKind::WriteTxnMarkers(r) => txn::write_txn_markers(state, ctx, r),
        RequestKind::DescribeProducers(mut r) => {
            use protocol::messages::describe_producers_response as d;
            let denied = take_denied(&mut r.topics, |t| {
                !ctx.access
                    .allows_topic(model::acl::AclOperation::Read, &t.name)
            });
            let mut resp = txn::describe_producers(state, r);
            resp.topics.extend(denied.into_iter().map(|t| {
                d::TopicResponse::default()
                    .with_name(t.name)
                    .with_partitions(
                        t.partition_indexes
                            .iter()
                            .map(|p| {
                                d::PartitionResponse::default()
                                    .with_partition_index(*p)
                                    .with_error_code(code(ErrorCode::TopicAuthorizationFailed))
                            })
                            .collect(),
                    )
            }));
            ctx.ready(ResponseKind::DescribeProducers(resp))
        }
        RequestKind::DescribeConfigs(mut r) => {
            let op = model::acl::AclOperation::DescribeConfigs;
            let denied = take_denied(&mut r.resources, |x| {
                config_denied(&ctx.access, op, x.resource_type, &x.resource_name).is_some()
            });
            let mut resp = configs::describe_configs(state, r, v);
            resp.results.extend(denied.into_iter().map(|x| {
                let e = config_denied(&ctx.access, op, x.resource_type, &x.resource_name)
                    .unwrap_or(ErrorCode::ClusterAuthorizationFailed);
                protocol::messages::describe_configs_response::DescribeConfigsResult::default()
                    .with_error_code(code(e))
                    .with_error_message(Some(str_bytes(e.default_message())))
                    .with_resource_type(x.resource_type)
                    .with_resource_name(x.resource_name)
            }));
            ctx.ready(ResponseKind::DescribeConfigs(resp))
        }
        RequestKind::AlterConfigs(mut r) => {
            let access = ctx.access.clone();
            let op = model::acl::AclOperation::AlterConfigs;
            let denied = take_denied(&mut r.resources, |x| {
                config_denied(&access, op, x.resource_type, &x.resource_name).is_some()
            });
            let reply = via_controller(state, ctx.clone(), client, r, |s, r| async move {
                let (resp, offset) = configs::alter_configs(s, r).await;
                (ResponseKind::AlterConfigs(resp), offset)
            });
            with_denied(ctx, reply, denied, move |resp, denied| {
                if let ResponseKind::AlterConfigs(a) = resp {
                    a.responses.extend(denied.into_iter().map(|x| {
                        let e = config_denied(&access, op, x.resource_type, &x.resource_name)
                            .unwrap_or(ErrorCode::ClusterAuthorizationFailed);
                        protocol::messages::alter_configs_response::AlterConfigsResourceResponse::default()
                            .with_error_code(code(e))
                            .with_error_message(Some(str_bytes(e.default_message())))
                            .with_resource_type(x.resource_type)
                            .with_resource_name(x.resource_name)
                    }));
                }
            })
        }
        RequestKind::DescribeUserScramCredentials(r) => ctx.ready(
            ResponseKind::DescribeUserScramCredentials(scram::describe(state, &r)),
        ),
        RequestKind::DescribeClientQuotas(r) => ctx.ready(ResponseKind::DescribeClientQuotas(
            quotas::describe(state, &r),
        )),
        RequestKind::AlterClientQuotas(r) => {
            via_controller(state, ctx, client, r, |s, r| async move {
                let (resp, offset) = quotas::alter(s, r).await;
                (ResponseKind::AlterClientQuotas(resp), offset)
            })
        }
        RequestKind::AlterUserScramCredentials(r) => {
            via_controller(state, ctx, client, r, |s, r| async move {
                let (resp, offset) = scram::alter(s, r).await;
                (ResponseKind::AlterUserScramCredentials(resp), offset)
            })
        }
        RequestKind::IncrementalAlterConfigs(mut r) => {
            let access = ctx.access.clone();
            let op = model::acl::AclOperation::AlterConfigs;
            let denied = take_denied(&mut r.resources, |x| {
                config_denied(&access, op, x.resource_type, &x.resource_name).is_some()
            });
            let add = move |resp: &mut ResponseKind,
                            denied: Vec<
                protocol::messages::incremental_alter_configs_request::AlterConfigsResource,
            >| {
                if let ResponseKind::IncrementalAlterConfigs(a) = resp {
                    a.responses.extend(denied.into_iter().map(|x| {
                        let e = config_denied(&access, op, x.resource_type, &x.resource_name)
                            .unwrap_or(ErrorCode::ClusterAuthorizationFailed);
                        protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                            .with_error_code(code(e))
                            .with_error_message(Some(str_bytes(e.default_message())))
                            .with_resource_type(x.resource_type)
                            .with_resource_name(x.resource_name)
                    }));
                }
            };
            // Log levels (BROKER_LOGGER) are this broker's own and never metadata: decided
            // here, as Kafka does before it forwards the rest. A request holding both kinds
            // is decided on this broker (its other resources need it to be the controller).
            let loggers = configs::alter_loggers(state, &r);
            if loggers.is_empty() {
                let reply = via_controller(state, ctx.clone(), client, r, |s, r| async move {
                    let (resp, offset) =
                        configs::incremental_alter_configs(s, r, HashMap::new()).await;
                    (ResponseKind::IncrementalAlterConfigs(resp), offset)
                });
                return with_denied(ctx, reply, denied, add);
            }
            let state = state.clone();
            let inner_ctx = ctx.clone();
            let reply = Reply::Later(Box::pin(async move {
                let (resp, offset) =
                    configs::incremental_alter_configs(state.clone(), r, loggers).await;
                state.wait_applied(offset).await;
                inner_ctx.encode(ResponseKind::IncrementalAlterConfigs(resp))
            }));
            with_denied(ctx, reply, denied, add)
        }
        RequestKind::DescribeAcls(r) => {
            ctx.ready(ResponseKind::DescribeAcls(acls::describe(state, &r)))
        }
        RequestKind::CreateAcls(r) => via_controller(state, ctx, client, r, |s, r| async move {
            let (resp, offset) = acls::create(s, r).await;
            (ResponseKind::CreateAcls(resp), offset)
        }),
        RequestKind::DeleteAcls(r) => via_controller(state, ctx, client, r, |s, r| async move {
            let (resp, offset) = acls::delete(s, r).await;
            (ResponseKind::DeleteAcls(resp), offset)
        }),
        other => {
            // The version table only admits APIs listed above; reaching this is a bug in
            // that table. Closing is what Kafka does for a request it can't parse.
            tracing::error!(api = ?ctx.api, "request for an API without a handler: {other:?}");
            Reply::Later(Box::pin(async { None }))
        }
    }
}

/// Kafka's pattern for ApiVersions client software names and versions:
/// `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`.
fn valid_software_name(s: &str) -> bool {
    let b = s.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'.';
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric() && l.is_ascii_alphanumeric() && b.iter().all(inner)
        }
        _ => false,
    }
}

/// The group requests that name several groups (or list them), with an authorizer: denied
/// groups are answered GROUP_AUTHORIZATION_FAILED next to what the coordinator answers for the
/// others; ListGroups lists only groups the requester may describe (all of them with DESCRIBE
/// on the cluster); described groups carry their authorized operations.
fn group_items(
    state: &Arc<BrokerState>,
    ctx: Ctx,
    client_id: &str,
    client_host: &str,
    body: RequestKind,
) -> Reply {
    use model::acl::{AclOperation as Op, ResourceType as Rt};
    use protocol::messages::{consumer_group_describe_response as cgd, describe_groups_response};
    let access = ctx.access.clone();
    let denied_code = code(ErrorCode::GroupAuthorizationFailed);
    let handle = |ctx: Ctx, body| {
        state
            .groups
            .handle(state, ctx, client_id, client_host, body)
    };
    match body {
        RequestKind::DescribeGroups(mut r) => {
            let denied = take_denied(&mut r.groups, |g| {
                !access.allows(Op::Describe, Rt::Group, g)
            });
            let ops = r.include_authorized_operations;
            let reply = handle(ctx.clone(), RequestKind::DescribeGroups(r));
            post_process(ctx, reply, move |resp| {
                let ResponseKind::DescribeGroups(d) = resp else {
                    return;
                };
                if ops {
                    for g in &mut d.groups {
                        g.authorized_operations = access.operations(Rt::Group, &g.group_id);
                    }
                }
                // As Kafka's `handleDescribeGroupsRequest`: the denied groups first, then what
                // the coordinator answered.
                let described = std::mem::take(&mut d.groups);
                d.groups = denied
                    .into_iter()
                    .map(|g| {
                        describe_groups_response::DescribedGroup::default()
                            .with_group_id(g)
                            .with_error_code(denied_code)
                            .with_authorized_operations(i32::MIN)
                    })
                    .chain(described)
                    .collect();
            })
        }
        RequestKind::ConsumerGroupDescribe(mut r) => {
            let denied = take_denied(&mut r.group_ids, |g| {
                !access.allows(Op::Describe, Rt::Group, g)
            });
            let ops = r.include_authorized_operations;
            let reply = handle(ctx.clone(), RequestKind::ConsumerGroupDescribe(r));
            post_process(ctx, reply, move |resp| {
                let ResponseKind::ConsumerGroupDescribe(d) = resp else {
                    return;
                };
                // As Kafka's `handleConsumerGroupDescribe`: authorized operations on the rows
                // the coordinator answered without error, the denied groups first, then the
                // groups that would show a topic the caller may not describe hidden.
                if ops {
                    for g in d.groups.iter_mut().filter(|g| g.error_code == 0) {
                        g.authorized_operations = access.operations(Rt::Group, &g.group_id);
                    }
                }
                let described = std::mem::take(&mut d.groups);
                d.groups = denied
                    .into_iter()
                    .map(|g| {
                        cgd::DescribedGroup::default()
                            .with_group_id(g)
                            .with_error_code(denied_code)
                            .with_authorized_operations(i32::MIN)
                    })
                    .chain(described)
                    .collect();
                crate::authz::hide_undescribable_topics(&access, &mut d.groups);
            })
        }
        RequestKind::DeleteGroups(mut r) => {
            let denied = take_denied(&mut r.groups_names, |g| {
                !access.allows(Op::Delete, Rt::Group, g)
            });
            let reply = handle(ctx.clone(), RequestKind::DeleteGroups(r));
            with_denied(ctx, reply, denied, move |resp, denied| {
                let ResponseKind::DeleteGroups(d) = resp else {
                    return;
                };
                d.results.extend(denied.into_iter().map(|g| {
                    protocol::messages::delete_groups_response::DeletableGroupResult::default()
                        .with_group_id(g)
                        .with_error_code(denied_code)
                }));
            })
        }
        RequestKind::ListGroups(r) => {
            let reply = handle(ctx.clone(), RequestKind::ListGroups(r));
            if access.allows_cluster(Op::Describe) {
                return reply;
            }
            post_process(ctx, reply, move |resp| {
                if let ResponseKind::ListGroups(l) = resp {
                    l.groups
                        .retain(|g| access.allows(Op::Describe, Rt::Group, &g.group_id));
                }
            })
        }
        RequestKind::OffsetCommit(mut r) => {
            let image = state.image();
            let denied = take_denied(&mut r.topics, |t| {
                let name = match image.topic_by_id(from_uuid(t.topic_id)) {
                    Some(found) if t.name.0.is_empty() => found.name.to_string(),
                    _ => t.name.0.to_string(),
                };
                !access.allows_topic(Op::Read, &name)
            });
            let add = move |resp: &mut ResponseKind, denied: Vec<_>| {
                use protocol::messages::offset_commit_response as oc;
                let ResponseKind::OffsetCommit(c) = resp else {
                    return;
                };
                c.topics.extend(denied.into_iter().map(
                    |t: protocol::messages::offset_commit_request::OffsetCommitRequestTopic| {
                        oc::OffsetCommitResponseTopic::default()
                            .with_name(t.name)
                            .with_topic_id(t.topic_id)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        oc::OffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code(
                                                ErrorCode::TopicAuthorizationFailed,
                                            ))
                                    })
                                    .collect(),
                            )
                    },
                ));
            };
            if r.topics.is_empty() && !denied.is_empty() {
                // Nothing left for the coordinator: answered without it, as Kafka does.
                let mut resp = ResponseKind::OffsetCommit(Default::default());
                add(&mut resp, denied);
                return ctx.ready(resp);
            }
            let reply = handle(ctx.clone(), RequestKind::OffsetCommit(r));
            with_denied(ctx, reply, denied, add)
        }
        RequestKind::OffsetDelete(mut r) => {
            use protocol::messages::offset_delete_response as od;
            let denied = take_denied(&mut r.topics, |t| !access.allows_topic(Op::Read, &t.name));
            let reply = handle(ctx.clone(), RequestKind::OffsetDelete(r));
            with_denied(ctx, reply, denied, move |resp, denied| {
                let ResponseKind::OffsetDelete(d) = resp else {
                    return;
                };
                // A group-level error answers the whole request.
                if d.error_code != 0 {
                    return;
                }
                d.topics.extend(denied.into_iter().map(|t| {
                    od::OffsetDeleteResponseTopic::default()
                        .with_name(t.name)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    od::OffsetDeleteResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(code(ErrorCode::TopicAuthorizationFailed))
                                })
                                .collect(),
                        )
                }));
            })
        }
        RequestKind::TxnOffsetCommit(mut r) => {
            use protocol::messages::txn_offset_commit_response as t;
            let denied = take_denied(&mut r.topics, |x| !access.allows_topic(Op::Read, &x.name));
            let add = move |resp: &mut ResponseKind,
                            denied: Vec<
                protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequestTopic,
            >| {
                let ResponseKind::TxnOffsetCommit(c) = resp else {
                    return;
                };
                c.topics.extend(denied.into_iter().map(|x| {
                    t::TxnOffsetCommitResponseTopic::default()
                        .with_name(x.name)
                        .with_partitions(
                            x.partitions
                                .iter()
                                .map(|p| {
                                    t::TxnOffsetCommitResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(code(ErrorCode::TopicAuthorizationFailed))
                                })
                                .collect(),
                        )
                }));
            };
            if r.topics.is_empty() && !denied.is_empty() {
                // Nothing left for the coordinator: answered without it, as Kafka does.
                let mut resp = ResponseKind::TxnOffsetCommit(Default::default());
                add(&mut resp, denied);
                return ctx.ready(resp);
            }
            let reply = handle(ctx.clone(), RequestKind::TxnOffsetCommit(r));
            with_denied(ctx, reply, denied, add)
        }
        RequestKind::ConsumerGroupHeartbeat(r)
            if r.subscribed_topic_names.as_ref().is_some_and(|names| {
                names.iter().any(|n| !access.allows_topic(Op::Describe, n))
            }) =>
        {
            // Kafka: every subscribed topic must be describable.
            ctx.ready(ResponseKind::ConsumerGroupHeartbeat(
                protocol::messages::ConsumerGroupHeartbeatResponse::default()
                    .with_error_code(code(ErrorCode::TopicAuthorizationFailed))
                    .with_error_message(Some(str_bytes(
                        ErrorCode::TopicAuthorizationFailed.default_message(),
                    ))),
            ))
        }
        RequestKind::OffsetFetch(mut r) => {
            // v8+ names several groups: each is answered on its own (Kafka's KafkaApis), a
            // denied one with GROUP_AUTHORIZATION_FAILED next to the others' offsets, in the
            // request's order.
            let order: Vec<String> = r.groups.iter().map(|g| g.group_id.to_string()).collect();
            let denied_groups = take_denied(&mut r.groups, |g| {
                !access.allows(Op::Describe, Rt::Group, &g.group_id)
            });
            let add_denied = move |f: &mut protocol::messages::OffsetFetchResponse,
                                   denied: Vec<
                protocol::messages::offset_fetch_request::OffsetFetchRequestGroup,
            >| {
                f.groups.extend(denied.into_iter().map(|g| {
                    protocol::messages::offset_fetch_response::OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id)
                        .with_error_code(code(ErrorCode::GroupAuthorizationFailed))
                }));
                f.groups.sort_by_key(|g| {
                    order
                        .iter()
                        .position(|o| o.as_str() == g.group_id.as_str())
                        .unwrap_or(usize::MAX)
                });
            };
            if r.groups.is_empty() && !denied_groups.is_empty() {
                let mut f = protocol::messages::OffsetFetchResponse::default();
                add_denied(&mut f, denied_groups);
                return ctx.ready(ResponseKind::OffsetFetch(f));
            }
            // Offsets of topics that may not be described: TOPIC_AUTHORIZATION_FAILED where the
            // request named them, left out where it asked for all.
            let named = r.topics.is_some();
            let groups_named: Vec<bool> = r.groups.iter().map(|g| g.topics.is_some()).collect();
            let reply = handle(ctx.clone(), RequestKind::OffsetFetch(r));
            let image = state.image();
            post_process(ctx, reply, move |resp| {
                let ResponseKind::OffsetFetch(f) = resp else {
                    return;
                };
                let denied_code = code(ErrorCode::TopicAuthorizationFailed);
                let may = |name: &str, id: uuid::Uuid| {
                    let name = match image.topic_by_id(from_uuid(id)) {
                        Some(t) if name.is_empty() => t.name.to_string(),
                        _ => name.to_string(),
                    };
                    access.allows_topic(Op::Describe, &name)
                };
                if named {
                    for t in f
                        .topics
                        .iter_mut()
                        .filter(|t| !may(&t.name, uuid::Uuid::nil()))
                    {
                        for p in &mut t.partitions {
                            p.committed_offset = -1;
                            p.committed_leader_epoch = -1;
                            p.metadata = Some(str_bytes(""));
                            p.error_code = denied_code;
                        }
                    }
                } else {
                    f.topics.retain(|t| may(&t.name, uuid::Uuid::nil()));
                }
                for (g, named) in f.groups.iter_mut().zip(groups_named) {
                    if named {
                        for t in g.topics.iter_mut().filter(|t| !may(&t.name, t.topic_id)) {
                            for p in &mut t.partitions {
                                p.committed_offset = -1;
                                p.committed_leader_epoch = -1;
                                p.metadata = Some(str_bytes(""));
                                p.error_code = denied_code;
                            }
                        }
                    } else {
                        g.topics.retain(|t| may(&t.name, t.topic_id));
                    }
                }
                if !denied_groups.is_empty() {
                    add_denied(f, denied_groups);
                }
            })
        }
        RequestKind::FindCoordinator(mut r)
            if ctx.version >= 4
                && r.coordinator_keys.iter().any(|k| {
                    !access.allows(Op::Describe, find_coordinator_resource(r.key_type).0, k)
                }) =>
        {
            // Several keys (v4+): each denied key gets its error, the others their
            // coordinator, as Kafka answers a mixed request. Kafka sets no message on a
            // denied key (the schema default, "").
            let (rt, e) = find_coordinator_resource(r.key_type);
            let denied = take_denied(&mut r.coordinator_keys, |k| {
                !access.allows(Op::Describe, rt, k)
            });
            let entry = move |k: StrBytes| {
                protocol::messages::find_coordinator_response::Coordinator::default()
                    .with_key(k)
                    .with_node_id(protocol::messages::BrokerId(-1))
                    .with_port(-1)
                    .with_error_code(code(e))
            };
            if r.coordinator_keys.is_empty() {
                return ctx.ready(ResponseKind::FindCoordinator(
                    protocol::messages::FindCoordinatorResponse::default()
                        .with_coordinators(denied.into_iter().map(entry).collect()),
                ));
            }
            let reply = handle(ctx.clone(), RequestKind::FindCoordinator(r));
            with_denied(ctx, reply, denied, move |resp, denied| {
                if let ResponseKind::FindCoordinator(f) = resp {
                    f.coordinators.extend(denied.into_iter().map(entry));
                }
            })
        }
        RequestKind::FindCoordinator(r) => {
            // One key (v0-3): denied as Kafka denies it.
            let (key_type, keys): (i8, Vec<&str>) = if ctx.version >= 4 {
                (
                    r.key_type,
                    r.coordinator_keys.iter().map(|k| k.as_str()).collect(),
                )
            } else {
                (
                    if ctx.version >= 1 { r.key_type } else { 0 },
                    vec![r.key.as_str()],
                )
            };
            let (rt, e) = if key_type == 1 {
                (
                    Rt::TransactionalId,
                    ErrorCode::TransactionalIdAuthorizationFailed,
                )
            } else {
                (Rt::Group, ErrorCode::GroupAuthorizationFailed)
            };
            if !keys.is_empty() && keys.iter().all(|k| !access.allows(Op::Describe, rt, k)) {
                let mut resp = protocol::messages::FindCoordinatorResponse::default();
                if ctx.version >= 4 {
                    resp.coordinators = keys
                        .iter()
                        .map(|k| {
                            protocol::messages::find_coordinator_response::Coordinator::default()
                                .with_key(str_bytes(*k))
                                .with_node_id(protocol::messages::BrokerId(-1))
                                .with_port(-1)
                                .with_error_code(code(e))
                        })
                        .collect();
                } else {
                    resp = resp
                        .with_error_code(code(e))
                        .with_node_id(protocol::messages::BrokerId(-1))
                        .with_port(-1);
                    // Kafka's `createFindCoordinatorResponse`: the error's message (v1+).
                    if ctx.version >= 1 {
                        resp.error_message = Some(str_bytes(e.default_message()));
                    }
                }
                return ctx.ready(ResponseKind::FindCoordinator(resp));
            }
            handle(ctx, RequestKind::FindCoordinator(r))
        }
        other => handle(ctx, other),
    }
}

/// Removes the items the requester may not act on from a request, returning them.
fn take_denied<T>(items: &mut Vec<T>, denied: impl Fn(&T) -> bool) -> Vec<T> {
    let (out, keep): (Vec<T>, Vec<T>) = std::mem::take(items).into_iter().partition(denied);
    *items = keep;
    out
}

/// A request served without the items the authorizer denied (`reply`), whose response gets
/// `add` the denied items' errors. Without denied items the reply is returned as is.
fn with_denied<T: Send + 'static>(
    ctx: Ctx,
    reply: Reply,
    denied: Vec<T>,
    add: impl FnOnce(&mut ResponseKind, Vec<T>) + Send + 'static,
) -> Reply {
    if denied.is_empty() {
        return reply;
    }
    post_process(ctx, reply, move |resp| add(resp, denied))
}

/// `reply`'s response, changed by `f` before it is written (the authorizer's per-item answers
/// added to a response a coordinator or the controller built).
fn post_process(
    ctx: Ctx,
    reply: Reply,
    f: impl FnOnce(&mut ResponseKind) + Send + 'static,
) -> Reply {
    if let Reply::Serial { reply, done } = reply {
        return Reply::Serial {
            reply: Box::new(post_process(ctx, *reply, f)),
            done,
        };
    }
    Reply::Later(Box::pin(async move {
        let frame = match reply {
            Reply::Ready(b) => b,
            Reply::Later(f) => f.await?,
            _ => return None,
        };
        let mut resp = decode_response(ctx.api, ctx.version, &frame)?;
        f(&mut resp);
        ctx.encode(resp)
    }))
}

/// Decodes a response frame (size prefix, header, body) of the APIs [`post_process`] is used
/// for.
pub(crate) fn decode_response(api: ApiKey, version: i16, frame: &Bytes) -> Option<ResponseKind> {
    use protocol::Decode;
    let mut buf = frame.slice(4.min(frame.len())..);
    protocol::ResponseHeader::decode(&mut buf, api.response_header_version(version)).ok()?;
    let decoded = match api {
        ApiKey::CreateTopics => Decode::decode(&mut buf, version).map(ResponseKind::CreateTopics),
        ApiKey::DeleteTopics => Decode::decode(&mut buf, version).map(ResponseKind::DeleteTopics),
        ApiKey::CreatePartitions => {
            Decode::decode(&mut buf, version).map(ResponseKind::CreatePartitions)
        }
        ApiKey::DescribeGroups => {
            Decode::decode(&mut buf, version).map(ResponseKind::DescribeGroups)
        }
        ApiKey::DeleteGroups => Decode::decode(&mut buf, version).map(ResponseKind::DeleteGroups),
        ApiKey::ListGroups => Decode::decode(&mut buf, version).map(ResponseKind::ListGroups),
        ApiKey::OffsetCommit => Decode::decode(&mut buf, version).map(ResponseKind::OffsetCommit),
        ApiKey::OffsetFetch => Decode::decode(&mut buf, version).map(ResponseKind::OffsetFetch),
        ApiKey::ConsumerGroupDescribe => {
            Decode::decode(&mut buf, version).map(ResponseKind::ConsumerGroupDescribe)
        }
        ApiKey::AlterConfigs => Decode::decode(&mut buf, version).map(ResponseKind::AlterConfigs),
        ApiKey::IncrementalAlterConfigs => {
            Decode::decode(&mut buf, version).map(ResponseKind::IncrementalAlterConfigs)
        }
        ApiKey::OffsetDelete => Decode::decode(&mut buf, version).map(ResponseKind::OffsetDelete),
        ApiKey::TxnOffsetCommit => {
            Decode::decode(&mut buf, version).map(ResponseKind::TxnOffsetCommit)
        }
        ApiKey::FindCoordinator => {
            Decode::decode(&mut buf, version).map(ResponseKind::FindCoordinator)
        }
        ApiKey::DescribeTransactions => {
            Decode::decode(&mut buf, version).map(ResponseKind::DescribeTransactions)
        }
        ApiKey::ListTransactions => {
            Decode::decode(&mut buf, version).map(ResponseKind::ListTransactions)
        }
        _ => return None,
    };
    match decoded {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::error!(error = %e, ?api, "could not decode an administration response");
            None
        }
    }
}

pub fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

pub fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

pub fn to_uuid(id: TopicId) -> uuid::Uuid {
    uuid::Uuid::from_bytes(id.0)
}

pub fn from_uuid(id: uuid::Uuid) -> TopicId {
    TopicId(*id.as_bytes())
}

pub fn code(e: ErrorCode) -> i16 {
    e.code()
}

/// The resource type a FindCoordinator key names, and the error for a denied key.
fn find_coordinator_resource(key_type: i8) -> (model::acl::ResourceType, ErrorCode) {
    if key_type == 1 {
        (
            model::acl::ResourceType::TransactionalId,
            ErrorCode::TransactionalIdAuthorizationFailed,
        )
    } else {
        (
            model::acl::ResourceType::Group,
            ErrorCode::GroupAuthorizationFailed,
        )
    }
}

/// Whether `op` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on a config resource is denied, and Kafka's
/// error then: the topic (TOPIC_AUTHORIZATION_FAILED) or group (GROUP_AUTHORIZATION_FAILED)
/// itself, the cluster for brokers, broker loggers and client metrics
/// (CLUSTER_AUTHORIZATION_FAILED).
fn config_denied(
    access: &Access,
    op: model::acl::AclOperation,
    resource_type: i8,
    name: &str,
) -> Option<ErrorCode> {
    use model::acl::ResourceType as Rt;
    if !access.enabled() {
        return None;
    }
    match resource_type {
        2 => (!access.allows_topic(op, name)).then_some(ErrorCode::TopicAuthorizationFailed),
        32 => (!access.allows(op, Rt::Group, name)).then_some(ErrorCode::GroupAuthorizationFailed),
        _ => (!access.allows_cluster(op)).then_some(ErrorCode::ClusterAuthorizationFailed),
    }
}

/// The ElectLeaders answer when the authorizer denies it (ALTER on the cluster).
pub fn elect_leaders_denied(
    req: &protocol::messages::ElectLeadersRequest,
    e: ErrorCode,
    version: i16,
) -> protocol::messages::ElectLeadersResponse {
    elections::error_response(req, e, version)
}
