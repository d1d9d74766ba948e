//! Request dispatch: one module per API. A handler returns its response at once, or a
//! future for the part that waits (acks=all durability, Fetch long-poll).

mod admin;
mod configs;
mod fetch;
mod metadata;
mod offsets;
mod produce;
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
}

/// The version, correlation id and API of the request being answered.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    pub api: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
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

/// Routes a decoded request to its handler.
pub fn dispatch(state: &Arc<BrokerState>, req: Request, client_host: &str) -> Reply {
    let ctx = Ctx {
        api: req.api_key,
        version: req.version(),
        correlation_id: req.correlation_id(),
    };
    let v = ctx.version;
    let client_id = req
        .header
        .client_id
        .as_ref()
        .map(|c| c.to_string())
        .unwrap_or_default();
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
        RequestKind::ApiVersions(_) => ctx.ready(ResponseKind::ApiVersions(
            protocol::versions::api_versions_response(0),
        )),
        RequestKind::Metadata(r) => {
            ctx.ready(ResponseKind::Metadata(metadata::metadata(state, r, v)))
        }
        RequestKind::Produce(r) => produce::produce(state, ctx, r),
        RequestKind::Fetch(r) => fetch::fetch(state, ctx, r),
        RequestKind::ListOffsets(r) => ctx.ready(ResponseKind::ListOffsets(offsets::list_offsets(
            state, r, v,
        ))),
        RequestKind::DeleteRecords(r) => ctx.ready(ResponseKind::DeleteRecords(
            offsets::delete_records(state, r),
        )),
        RequestKind::CreateTopics(r) => {
            let (resp, changed) = admin::create_topics(state, r, v);
            after_reconcile(state, ctx, changed, ResponseKind::CreateTopics(resp))
        }
        RequestKind::DeleteTopics(r) => ctx.ready(ResponseKind::DeleteTopics(
            admin::delete_topics(state, r, v),
        )),
        RequestKind::CreatePartitions(r) => {
            let (resp, changed) = admin::create_partitions(state, r);
            after_reconcile(state, ctx, changed, ResponseKind::CreatePartitions(resp))
        }
        RequestKind::DescribeCluster(r) => ctx.ready(ResponseKind::DescribeCluster(
            metadata::describe_cluster(state, r, v),
        )),
        RequestKind::DescribeLogDirs(r) => ctx.ready(ResponseKind::DescribeLogDirs(
            admin::describe_log_dirs(state, r, v),
        )),
        RequestKind::InitProducerId(r) if r.transactional_id.is_some() => state.txns.handle(
            state,
            ctx,
            &client_id,
            client_host,
            RequestKind::InitProducerId(r),
        ),
        RequestKind::InitProducerId(r) => ctx.ready(ResponseKind::InitProducerId(
            admin::init_producer_id(state, r),
        )),
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
        RequestKind::AlterConfigs(r) => {
            ctx.ready(ResponseKind::AlterConfigs(configs::alter_configs(state, r)))
        }
        RequestKind::IncrementalAlterConfigs(r) => ctx.ready(
            ResponseKind::IncrementalAlterConfigs(configs::incremental_alter_configs(state, r)),
        ),
        other => {
            // The version table only admits APIs listed above; reaching this is a bug in
            // that table. Closing is what Kafka does for a request it can't parse.
            tracing::error!(api = ?ctx.api, "request for an API without a handler: {other:?}");
            Reply::Later(Box::pin(async { None }))
        }
    }
}

/// Answers with `body` once the hosted partitions follow a metadata change, when `changed`.
/// Opening thousands of logs takes seconds: it runs on the blocking pool, so the connection's
/// task and the runtime's workers go on serving everyone else meanwhile.
fn after_reconcile(state: &Arc<BrokerState>, ctx: Ctx, changed: bool, body: ResponseKind) -> Reply {
    if !changed {
        return ctx.ready(body);
    }
    let state = state.clone();
    Reply::Later(Box::pin(async move {
        if let Err(e) = tokio::task::spawn_blocking(move || state.reconcile_or_log()).await {
            tracing::error!(error = %e, "applying a metadata change to local partitions panicked");
        }
        ctx.encode(body)
    }))
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
