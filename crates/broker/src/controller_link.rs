//! The link from this node to the active controller: the local quorum member when it is the
//! active controller, otherwise the leader's CONTROLLER listener (found through the quorum's
//! leadership as this node sees it: its own voter, or its observer).
//!
//! Remote calls use Kafka's APIs: BrokerRegistration, BrokerHeartbeat, AllocateProducerIds,
//! CreateTopics and AlterPartition (a partition leader's ISR changes) for a broker's own needs; Envelope for client requests it forwards (KIP-590);
//! DescribeQuorum as a read barrier: its high watermark, read after an answer arrived, is an
//! offset at or past the answer's commit, so waiting to apply it makes the change visible here.

use crate::controller_api::{encode_body, registration_message};
use bytes::Bytes;
use client::{ClientConfig, NodeLink};
use controller::{ControllerError, CreatedTopic, HeartbeatReply, Reply, Request};
use model::ErrorCode;
use protocol::messages::*;
use protocol::StrBytes;
use quorum::{Answer, Leadership, QuorumHandle};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long a call looks for an active controller before answering NOT_CONTROLLER.
const FIND_CONTROLLER: Duration = Duration::from_secs(5);
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// See the module docs. Cheap to share.
#[derive(Clone)]
pub struct ControllerLink {
    inner: Arc<Inner>,
}

struct Inner {
    local: Option<QuorumHandle>,
    leadership: watch::Receiver<Leadership>,
    /// `(id, controller listener address)` of every voter.
    voters: Vec<(u64, String)>,
    client: ClientConfig,
    link: tokio::sync::Mutex<Option<(u64, Arc<NodeLink>)>>,
}

impl std::fmt::Debug for ControllerLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerLink")
            .field("leader", &self.leader_id())
            .finish()
    }
}

fn not_controller(offset: i64) -> Answer {
    Answer {
        token: 0,
        result: Err(ControllerError::not_controller()),
        offset,
    }
}

fn check(code: i16, message: Option<&StrBytes>) -> Result<(), ControllerError> {
    match ErrorCode::from_code(code) {
        ErrorCode::None => Ok(()),
        e => Err(ControllerError::new(
            e,
            message.map_or_else(|| e.name().to_string(), |m| m.to_string()),
        )),
    }
}

/// Submits a change to this node's quorum member and times it until committed and answered
/// (`moldau_metadata_commit_latency_seconds`). Every change decided on this node goes through
/// here: its own, client admin requests (local or forwarded in an Envelope) and other brokers'
/// registrations, heartbeats, AlterPartition and CreateTopics. Only changes that wrote records
/// (answered at a newer offset) count; decisions without records are answered at once.
pub(crate) async fn submit_timed(q: &QuorumHandle, request: Request) -> Answer {
    let before = q.leadership().borrow().applied;
    let started = std::time::Instant::now();
    let answer = q.submit(request).await;
    if answer.result.is_ok() && answer.offset > before as i64 {
        crate::metrics::METRICS.metadata_commit(started.elapsed());
    }
    answer
}

impl ControllerLink {
    pub fn new(
        local: Option<QuorumHandle>,
        leadership: watch::Receiver<Leadership>,
        voters: Vec<(u64, String)>,
        client: ClientConfig,
    ) -> ControllerLink {
        ControllerLink {
            inner: Arc::new(Inner {
                local,
                leadership,
                voters,
                client,
                link: tokio::sync::Mutex::new(None),
            }),
        }
    }

    /// The active controller's node id, as this node knows it.
    pub fn leader_id(&self) -> Option<u64> {
        self.inner.leadership.borrow().leader_id
    }

    /// The quorum as this node last saw it (leader, epoch, applied offset, log end).
    pub fn leadership(&self) -> Leadership {
        *self.inner.leadership.borrow()
    }

    fn local_active(&self) -> Option<&QuorumHandle> {
        self.inner
            .local
            .as_ref()
            .filter(|q| q.leadership().borrow().active)
    }

    /// A connection to the leader's controller listener, waiting a while for one to be known.
    async fn leader_link(&self) -> Result<Arc<NodeLink>, ControllerError> {
        let deadline = Instant::now() + FIND_CONTROLLER;
        loop {
            if let Some(leader) = self.leader_id() {
                let mut guard = self.inner.link.lock().await;
                if let Some((id, l)) = guard.as_ref() {
                    if *id == leader && !l.is_closed() {
                        return Ok(l.clone());
                    }
                }
                if let Some((_, addr)) = self.inner.voters.iter().find(|(id, _)| *id == leader) {
                    match NodeLink::connect(addr, &self.inner.client).await {
                        Ok(l) => {
                            let l = Arc::new(l);
                            *guard = Some((leader, l.clone()));
                            return Ok(l);
                        }
                        Err(e) => {
                            tracing::debug!(leader, %addr, error = %e, "cannot reach the controller")
                        }
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(ControllerError::not_controller());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn drop_link(&self) {
        *self.inner.link.lock().await = None;
    }

    /// An offset at or past every change the leader had committed when this was called.
    async fn barrier(&self, link: &NodeLink) -> i64 {
        let req = DescribeQuorumRequest::default();
        match link.call(&req).await {
            Ok(r) => r
                .topics
                .first()
                .and_then(|t| t.partitions.first())
                .map_or(-1, |p| p.high_watermark),
            Err(_) => -1,
        }
    }

    /// Submits a request to the active controller: locally when this node is it, else over
    /// the network (the kinds a broker sends on its own behalf).
    pub async fn submit(&self, request: Request) -> Answer {
        if let Some(q) = self.local_active() {
            return submit_timed(q, request).await;
        }
        // Client administration reaches a remote controller forwarded (Envelope), not here.
        let remote_kind = matches!(
            request,
            Request::RegisterBroker(_)
                | Request::BrokerHeartbeat { .. }
                | Request::AllocateProducerIds { .. }
                | Request::CreateTopics { .. }
                | Request::AlterPartition { .. }
        );
        if !remote_kind {
            return not_controller(-1);
        }
        for _ in 0..3 {
            let link = match self.leader_link().await {
                Ok(l) => l,
                Err(_) => return not_controller(-1),
            };
            if let Some(q) = self.local_active() {
                return submit_timed(q, request).await;
            }
            // A call to a controller that froze (SIGSTOP, a stalled machine) would hang until
            // its timeout, longer than a broker session: when the quorum elects another
            // leader meanwhile, the call is abandoned and sent to the new one (heartbeats
            // would otherwise stop and fence this live broker).
            let called = self.leader_id();
            let mut leadership = self.inner.leadership.clone();
            let moved = async move {
                loop {
                    if leadership.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                    if leadership.borrow_and_update().leader_id != called {
                        return;
                    }
                }
            };
            let outcome = tokio::select! {
                r = self.remote(&link, &request) => Some(r),
                () = moved => None,
            };
            let Some(outcome) = outcome else {
                tracing::debug!(from = ?called, to = ?self.leader_id(), "the controller changed during a call; retrying");
                self.drop_link().await;
                continue;
            };
            match outcome {
                Ok(reply) => {
                    if let Some(e) = reply_not_controller(&reply) {
                        tracing::debug!(error = %e, "the controller moved; retrying");
                        self.drop_link().await;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                    let offset = self.barrier(&link).await;
                    return Answer {
                        token: 0,
                        result: Ok(reply),
                        offset,
                    };
                }
                Err(e) => {
                    tracing::debug!(error = %e, "controller call failed; retrying");
                    self.drop_link().await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        not_controller(-1)
    }

    async fn remote(&self, link: &NodeLink, request: &Request) -> Result<Reply, client::Error> {
        Ok(match request {
            Request::RegisterBroker(r) => {
                let resp = link.call(&registration_message(r)).await?;
                Reply::RegisterBroker(check(resp.error_code, None).map(|()| resp.broker_epoch))
            }
            Request::BrokerHeartbeat {
                node_id,
                broker_epoch,
                current_metadata_offset,
                want_fence,
                want_shutdown,
            } => {
                let req = BrokerHeartbeatRequest::default()
                    .with_broker_id(BrokerId(*node_id))
                    .with_broker_epoch(*broker_epoch)
                    .with_current_metadata_offset(*current_metadata_offset)
                    .with_want_fence(*want_fence)
                    .with_want_shut_down(*want_shutdown);
                let resp = link.call(&req).await?;
                Reply::BrokerHeartbeat(check(resp.error_code, None).map(|()| HeartbeatReply {
                    is_caught_up: resp.is_caught_up,
                    is_fenced: resp.is_fenced,
                    should_shut_down: resp.should_shut_down,
                }))
            }
            Request::AllocateProducerIds {
                broker_id,
                broker_epoch,
            } => {
                let req = AllocateProducerIdsRequest::default()
                    .with_broker_id(BrokerId(*broker_id))
                    .with_broker_epoch(*broker_epoch);
                let resp = link.call(&req).await?;
                Reply::AllocateProducerIds(
                    check(resp.error_code, None)
                        .map(|()| (resp.producer_id_start.0, i64::from(resp.producer_id_len))),
                )
            }
            Request::CreateTopics {
                topics,
                validate_only,
                ..
            } => {
                use create_topics_request::{
                    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
                };
                let req = CreateTopicsRequest::default()
                    .with_timeout_ms(CALL_TIMEOUT.as_millis() as i32)
                    .with_validate_only(*validate_only)
                    .with_topics(
                        topics
                            .iter()
                            .map(|t| {
                                CreatableTopic::default()
                                    .with_name(TopicName(StrBytes::from_string(t.name.clone())))
                                    .with_num_partitions(if t.assignment.is_empty() {
                                        t.partitions
                                    } else {
                                        -1
                                    })
                                    .with_replication_factor(if t.assignment.is_empty() {
                                        t.replication_factor
                                    } else {
                                        -1
                                    })
                                    .with_assignments(
                                        t.assignment
                                            .iter()
                                            .enumerate()
                                            .map(|(i, r)| {
                                                CreatableReplicaAssignment::default()
                                                    .with_partition_index(i as i32)
                                                    .with_broker_ids(
                                                        r.iter().map(|b| BrokerId(*b)).collect(),
                                                    )
                                            })
                                            .collect(),
                                    )
                                    .with_configs(
                                        t.configs
                                            .iter()
                                            .map(|(k, v)| {
                                                CreatableTopicConfig::default()
                                                    .with_name(StrBytes::from_string(k.clone()))
                                                    .with_value(Some(StrBytes::from_string(
                                                        v.clone(),
                                                    )))
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    );
                let resp = link.call(&req).await?;
                Reply::CreateTopics(
                    resp.topics
                        .iter()
                        .map(|t| {
                            check(t.error_code, t.error_message.as_ref()).map(|()| CreatedTopic {
                                id: model::TopicId(*t.topic_id.as_bytes()),
                                partitions: t.num_partitions,
                                replication_factor: t.replication_factor,
                                configs: BTreeMap::new(),
                            })
                        })
                        .collect(),
                )
            }
            Request::AlterPartition {
                broker_id,
                broker_epoch,
                topics,
            } => {
                use alter_partition_request::{BrokerState, PartitionData, TopicData};
                let version = link
                    .versions(ApiKey::AlterPartition as i16)
                    .map_or(2, |(_, max)| max.min(3));
                let req = AlterPartitionRequest::default()
                    .with_broker_id(BrokerId(*broker_id))
                    .with_broker_epoch(*broker_epoch)
                    .with_topics(
                        topics
                            .iter()
                            .map(|(topic_id, changes)| {
                                TopicData::default()
                                    .with_topic_id(uuid::Uuid::from_bytes(topic_id.0))
                                    .with_partitions(
                                        changes
                                            .iter()
                                            .map(|c| {
                                                let p = PartitionData::default()
                                                    .with_partition_index(c.partition)
                                                    .with_leader_epoch(c.leader_epoch)
                                                    .with_partition_epoch(c.partition_epoch)
                                                    .with_leader_recovery_state(
                                                        c.leader_recovery_state,
                                                    );
                                                // v3 names each member with its broker epoch
                                                // (-1: not checked); v2 by id only.
                                                if version >= 3 {
                                                    p.with_new_isr_with_epochs(
                                                        c.new_isr
                                                            .iter()
                                                            .map(|(id, epoch)| {
                                                                BrokerState::default()
                                                                    .with_broker_id(BrokerId(*id))
                                                                    .with_broker_epoch(*epoch)
                                                            })
                                                            .collect(),
                                                    )
                                                } else {
                                                    p.with_new_isr(
                                                        c.new_isr
                                                            .iter()
                                                            .map(|(id, _)| BrokerId(*id))
                                                            .collect(),
                                                    )
                                                }
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    );
                let resp = link.call(&req).await?;
                let result = check(resp.error_code, None).map(|()| {
                    topics
                        .iter()
                        .map(|(topic_id, changes)| {
                            let answered = resp
                                .topics
                                .iter()
                                .find(|t| t.topic_id.as_bytes() == &topic_id.0);
                            changes
                                .iter()
                                .map(|c| {
                                    let p = answered
                                        .and_then(|t| {
                                            t.partitions
                                                .iter()
                                                .find(|p| p.partition_index == c.partition)
                                        })
                                        .ok_or_else(|| {
                                            ControllerError::new(
                                                ErrorCode::UnknownServerError,
                                                "the AlterPartition answer left out a partition",
                                            )
                                        })?;
                                    check(p.error_code, None)?;
                                    // The answer carries no replica set; the caller keeps its own.
                                    Ok(metadata::PartitionRegistration {
                                        replicas: Vec::new(),
                                        isr: p.isr.iter().map(|b| b.0).collect(),
                                        elr: Vec::new(),
                                        removing_replicas: Vec::new(),
                                        adding_replicas: Vec::new(),
                                        leader: p.leader_id.0,
                                        leader_epoch: p.leader_epoch,
                                        partition_epoch: p.partition_epoch,
                                    })
                                })
                                .collect()
                        })
                        .collect()
                });
                Reply::AlterPartition(result)
            }
            other => {
                tracing::error!(?other, "request not sent to a remote controller");
                return Err(client::Error::Config(
                    "not a remote controller request".into(),
                ));
            }
        })
    }

    /// Forwards a client's request (its header and body, encoded at the client's version) to
    /// the active controller in an Envelope; returns the controller's response frame (size
    /// prefix included) and the offset to apply before relaying it. `None`: no controller
    /// answered.
    pub async fn forward(
        &self,
        api_key: i16,
        version: i16,
        correlation_id: i32,
        client_id: &str,
        body: &impl protocol::Encode,
        who: &auth::acl::RequestContext,
    ) -> Option<(Bytes, i64)> {
        let inner = self.inner_request(api_key, version, correlation_id, client_id, body)?;
        // As Kafka: the client's principal (DefaultPrincipalData) and address (raw bytes), so
        // the controller authorizes the request as the client's.
        let address = match who.host.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(a)) => Bytes::copy_from_slice(&a.octets()),
            Ok(std::net::IpAddr::V6(a)) => Bytes::copy_from_slice(&a.octets()),
            Err(_) => Bytes::new(),
        };
        let envelope = EnvelopeRequest::default()
            .with_request_data(inner)
            .with_request_principal(Some(crate::authz::serialize_principal(&who.principal)))
            .with_client_host_address(address);
        let link = self.leader_link().await.ok()?;
        let resp = match link.call(&envelope).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %e, "forwarding to the controller failed");
                self.drop_link().await;
                return None;
            }
        };
        if resp.error_code != 0 {
            tracing::debug!(
                code = resp.error_code,
                "the controller refused a forwarded request"
            );
            return None;
        }
        let data = resp.response_data?;
        let offset = self.barrier(&link).await;
        Some(frame(data, offset))
    }

    /// Sends a request as it came (header and body at the client's version) to the leader's
    /// controller listener and returns its response frame (DescribeQuorum on a broker).
    pub async fn relay(
        &self,
        api_key: i16,
        version: i16,
        correlation_id: i32,
        body: &impl protocol::Encode,
    ) -> Option<Bytes> {
        let body = encode_body(body, version)?;
        let link = self.leader_link().await.ok()?;
        let resp = link
            .call_encoded(api_key, version, body, CALL_TIMEOUT)
            .await
            .ok()?;
        let api = protocol::ApiKey::try_from(api_key).ok()?;
        let mut out = bytes::BytesMut::new();
        out.extend_from_slice(&[0; 4]);
        protocol::Encode::encode(
            &protocol::ResponseHeader::default().with_correlation_id(correlation_id),
            &mut out,
            api.response_header_version(version),
        )
        .ok()?;
        out.extend_from_slice(&resp);
        let len = (out.len() - 4) as i32;
        out[..4].copy_from_slice(&len.to_be_bytes());
        Some(out.freeze())
    }

    fn inner_request(
        &self,
        api_key: i16,
        version: i16,
        correlation_id: i32,
        client_id: &str,
        body: &impl protocol::Encode,
    ) -> Option<Bytes> {
        let api = protocol::ApiKey::try_from(api_key).ok()?;
        let mut out = bytes::BytesMut::new();
        protocol::Encode::encode(
            &protocol::RequestHeader::default()
                .with_request_api_key(api_key)
                .with_request_api_version(version)
                .with_correlation_id(correlation_id)
                .with_client_id(Some(StrBytes::from_string(client_id.to_string()))),
            &mut out,
            api.request_header_version(version),
        )
        .ok()?;
        body.encode(&mut out, version).ok()?;
        Some(out.freeze())
    }
}

/// Frames a response (header + body) with its size prefix.
fn frame(data: Bytes, offset: i64) -> (Bytes, i64) {
    let mut out = bytes::BytesMut::with_capacity(data.len() + 4);
    out.extend_from_slice(&(data.len() as i32).to_be_bytes());
    out.extend_from_slice(&data);
    (out.freeze(), offset)
}

/// A reply whose every result says NOT_CONTROLLER: the leader moved under the call.
fn reply_not_controller(reply: &Reply) -> Option<ControllerError> {
    let nc = |e: &ControllerError| e.code == ErrorCode::NotController;
    match reply {
        Reply::RegisterBroker(Err(e))
        | Reply::BrokerHeartbeat(Err(e))
        | Reply::AllocateProducerIds(Err(e))
        | Reply::AlterPartition(Err(e))
            if nc(e) =>
        {
            Some(e.clone())
        }
        Reply::CreateTopics(r) if !r.is_empty() && r.iter().all(|x| x.as_ref().is_err_and(nc)) => {
            r.first().and_then(|x| x.as_ref().err().cloned())
        }
        _ => None,
    }
}
