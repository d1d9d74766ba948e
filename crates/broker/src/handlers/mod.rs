//! Request dispatch: one module per API. A handler returns its response at once, or a
//! future for the part that waits (acks=all durability, Fetch long-poll).

pub(crate) mod admin;
pub(crate) mod configs;
mod fetch;
mod metadata;
mod offsets;
mod produce;
mod scram;

pub(crate) use scram::alter as alter_scram;
mod txn;

use crate::state::BrokerState;
use bytes::Bytes;
use model::{ErrorCode, TopicId};
use protocol::messages::TopicName;
use protocol::{ApiKey, Request, RequestKind, ResponseKind, StrBytes};
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
}

/// The version, correlation id and API of the request being answered, and the listener it
/// came in on (Metadata and FindCoordinator answer with endpoints of that listener).
#[derive(Clone, Debug)]
pub struct Ctx {
    pub api: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    pub listener: Arc<str>,
}

impl Ctx {
    /// Encodes a response for this request; an encode failure is a handler bug, logged here.
    pub fn encode(&self, body: ResponseKind) -> Option<Bytes> {
        crate::metrics::count_errors(self.api, &body);
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
        if !state.is_active_controller() {
            let (client_id, client_host) = &client;
            let forwarded = state
                .controller
                .forward(
                    ctx.api as i16,
                    ctx.version,
                    ctx.correlation_id,
                    client_id,
                    &req,
                    client_host,
                )
                .await;
            if let Some((frame, offset)) = forwarded {
                state.wait_applied(offset).await;
                return Some(frame);
            }
        }
        // The active controller (or, with none reachable, NOT_CONTROLLER for each item).
        let (resp, offset) = local(state.clone(), req).await;
        state.wait_applied(offset).await;
        ctx.encode(resp)
    }))
}

/// Routes a decoded request to its handler.
pub fn dispatch(
    state: &Arc<BrokerState>,
    req: Request,
    client_host: &str,
    listener: &Arc<str>,
) -> Reply {
    let ctx = Ctx {
        api: req.api_key,
        version: req.version(),
        correlation_id: req.correlation_id(),
        listener: listener.clone(),
    };
    let v = ctx.version;
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
                protocol::versions::api_versions_response(0)
            };
            ctx.ready(ResponseKind::ApiVersions(resp))
        }
        // Null topics ("all") exist from v1 on; Kafka cannot parse them at v0 and closes.
        RequestKind::Metadata(r) if v == 0 && r.topics.is_none() => Reply::Close,
        RequestKind::Metadata(r) => metadata::metadata(state, ctx, r),
        RequestKind::Produce(r) => produce::produce(state, ctx, r),
        RequestKind::Fetch(r) => fetch::fetch(state, ctx, r),
        RequestKind::ListOffsets(r) => ctx.ready(ResponseKind::ListOffsets(offsets::list_offsets(
            state, r, v,
        ))),
        RequestKind::OffsetForLeaderEpoch(r) => ctx.ready(ResponseKind::OffsetForLeaderEpoch(
            offsets::offset_for_leader_epoch(state, r),
        )),
        RequestKind::DeleteRecords(r) => ctx.ready(ResponseKind::DeleteRecords(
            offsets::delete_records(state, r),
        )),
        RequestKind::CreateTopics(r) => {
            via_controller(state, ctx, client, r, move |s, r| async move {
                let (resp, offset) =
                    admin::create_topics(s, r, v, controller::Origin::Client).await;
                (ResponseKind::CreateTopics(resp), offset)
            })
        }
        RequestKind::DeleteTopics(r) => {
            via_controller(state, ctx, client, r, move |s, r| async move {
                let (resp, offset) = admin::delete_topics(s, r, v).await;
                (ResponseKind::DeleteTopics(resp), offset)
            })
        }
        RequestKind::CreatePartitions(r) => {
            via_controller(state, ctx, client, r, |s, r| async move {
                let (resp, offset) = admin::create_partitions(s, r).await;
                (ResponseKind::CreatePartitions(resp), offset)
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
                match reply {
                    Reply::Ready(b) => Some(b),
                    Reply::Later(f) => f.await,
                    Reply::Chunks(c) => Some(c.concat().into()),
                    Reply::LaterChunks(f) => f.await.map(|c| c.concat().into()),
                    Reply::None | Reply::Close => None,
                }
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
        body @ (RequestKind::AddPartitionsToTxn(_)
        | RequestKind::AddOffsetsToTxn(_)
        | RequestKind::EndTxn(_)
        | RequestKind::DescribeTransactions(_)
        | RequestKind::ListTransactions(_)) => {
            state.txns.handle(state, ctx, &client_id, client_host, body)
        }
        RequestKind::WriteTxnMarkers(r) => txn::write_txn_markers(state, ctx, r),
        RequestKind::DescribeProducers(r) => ctx.ready(ResponseKind::DescribeProducers(
            txn::describe_producers(state, r),
        )),
        RequestKind::DescribeConfigs(r) => ctx.ready(ResponseKind::DescribeConfigs(
            configs::describe_configs(state, r, v),
        )),
        RequestKind::AlterConfigs(r) => via_controller(state, ctx, client, r, |s, r| async move {
            let (resp, offset) = configs::alter_configs(s, r).await;
            (ResponseKind::AlterConfigs(resp), offset)
        }),
        RequestKind::DescribeUserScramCredentials(r) => ctx.ready(
            ResponseKind::DescribeUserScramCredentials(scram::describe(state, &r)),
        ),
        RequestKind::AlterUserScramCredentials(r) => {
            via_controller(state, ctx, client, r, |s, r| async move {
                let (resp, offset) = scram::alter(s, r).await;
                (ResponseKind::AlterUserScramCredentials(resp), offset)
            })
        }
        RequestKind::IncrementalAlterConfigs(r) => {
            via_controller(state, ctx, client, r, |s, r| async move {
                let (resp, offset) = configs::incremental_alter_configs(s, r).await;
                (ResponseKind::IncrementalAlterConfigs(resp), offset)
            })
        }
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
