//! Listener and connections: read frames, dispatch, write responses in request order.
//!
//! Each connection has a reader and a writer task. The reader decodes a request and runs the
//! handler's synchronous part at once (so appends from one connection happen in the order
//! sent), and queues the handler's reply; the writer awaits the queued replies in order and
//! writes them (Fetch record bytes as their own chunks, by vectored writes).
//!
//! Memory is bounded three ways. A frame's bytes are reserved from the broker-wide request
//! budget (`queued.max.request.bytes`) after its size prefix is read and before its body is,
//! and given back once its handler has run: when the budget is spent, connections stop being
//! read (TCP back-pressure) instead of allocating. Before reading the next request, the reader
//! waits while the connection's unwritten responses exceed `queued.max.response.bytes`, so a
//! client that pipelines requests without reading responses stops being served. And the
//! queue of replies is bounded by `queued.max.requests`.

use crate::authz::Access;
use crate::handlers::{self, Reply, Settled};
use crate::memory::ResponseBytes;
use crate::metrics::{RequestTimer, METRICS};
use crate::quotas::ConnThrottle;
use crate::sasl::{SaslGate, Step};
use crate::state::BrokerState;
use crate::tls::{ListenerTls, TLS_HANDSHAKE_TIMEOUT_MS};
use auth::acl::RequestContext;
use auth::principal::KafkaPrincipal;
use auth::quota::QuotaKind;
use bytes::Bytes;
use protocol::frame::{FrameError, FrameReader};
use protocol::{ApiKey, RequestError};
use std::io::IoSlice;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Which requests a listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenerKind {
    /// Clients (and other brokers): the broker APIs.
    Broker,
    /// Controller APIs and the quorum's private APIs.
    Controller,
}

/// Accepts connections until cancelled. On broker listeners, Kafka's connection limits apply
/// (`conn_limits`): at most `max.connections` at once broker-wide and
/// `listener.name.<listener>.max.connections` on this listener (the loop waits for a slot),
/// `max.connections.per.ip` (and its overrides) per address (a connection over it is closed at
/// once), `max.connection.creation.rate` and the listener's own
/// `listener.name.<listener>.max.connection.creation.rate` (the loop pauses accepting) and an
/// address's `connection_creation_rate` quota (that connection is closed unserved after its
/// throttle time). The inter-broker listener of a broker with several listeners is protected
/// from the broker-wide limits, as Kafka's (`conn_limits`); when its connections take the broker
/// over `max.connections`, the least recently active connections of the other listeners are
/// closed until it is back at the limit (`ConnectionCounts::close_excess`, Kafka's
/// `closeExcessConnections`). Controller listeners keep a fixed `max.connections` of their own.
pub async fn accept_loop(
    listener: TcpListener,
    listener_name: Arc<str>,
    kind: ListenerKind,
    tls: Option<Arc<ListenerTls>>,
    state: Arc<BrokerState>,
    cancel: CancellationToken,
    tasks: TaskTracker,
) {
    let limit = Arc::new(Semaphore::new(state.config.max_connections.max(1) as usize));
    let stats = METRICS.listener(&listener_name);
    let limited = kind == ListenerKind::Broker;
    let protected = limited && protected_listener(&state.config, &listener_name);
    let limits = || crate::conn_limits::Limits::from_props(&state.broker_props());
    let rate = auth::quota::RateConfig {
        samples: state.config.quota_window_num.max(1) as usize,
        window_ms: i64::from(state.config.quota_window_size_seconds.max(1)) * 1000,
    };
    loop {
        let permit = if limited {
            let since = std::time::Instant::now();
            tokio::select! {
                _ = cancel.cancelled() => return,
                waited = state.connections.wait_for_slot(&listener_name, protected, limits) => {
                    if waited {
                        stats.accept_blocked(since.elapsed());
                    }
                }
            }
            None
        } else {
            tokio::select! {
                _ = cancel.cancelled() => return,
                p = limit.clone().acquire_owned() => match p {
                    Ok(p) => Some(p),
                    Err(_) => return,
                },
            }
        };
        let accepted = tokio::select! {
            _ = cancel.cancelled() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                let mut slot = None;
                if limited {
                    let now = limits();
                    let pause =
                        state
                            .connections
                            .record_creation(&listener_name, protected, &now, rate);
                    let ip_throttle = state.connections.record_ip_creation(peer.ip(), rate);
                    if ip_throttle > 0 {
                        state
                            .connections
                            .unrecord_creation(&listener_name, protected, rate);
                    }
                    let admitted = (ip_throttle == 0)
                        .then(|| {
                            state.connections.admit(
                                peer.ip(),
                                &listener_name,
                                &now,
                                protected,
                                &cancel,
                            )
                        })
                        .flatten();
                    if admitted.is_some() {
                        close_excess(&state, &now, &listener_name);
                    }
                    if ip_throttle == 0 && admitted.is_none() {
                        tracing::info!(%peer, "closing connection: too many connections from its address (max.connections.per.ip)");
                        METRICS.connection_refused();
                    }
                    if pause > 0 {
                        stats.accept_throttled(std::time::Duration::from_millis(pause));
                        tracing::debug!(
                            pause_ms = pause,
                            listener = %listener_name,
                            "max.connection.creation.rate (broker-wide or the listener's own) reached: pausing accept"
                        );
                        tokio::select! {
                            _ = cancel.cancelled() => return,
                            _ = tokio::time::sleep(std::time::Duration::from_millis(pause)) => {}
                        }
                    }
                    if ip_throttle > 0 {
                        // Kafka's DelayedCloseSocket: a connection over its address's
                        // connection_creation_rate is held unread and closed once its throttle
                        // time has passed (the client backs off instead of reconnecting at once).
                        tracing::debug!(%peer, throttle_ms = ip_throttle, "connection_creation_rate exceeded: closing the connection after its throttle");
                        METRICS.connection_refused();
                        let cancel = cancel.clone();
                        tasks.spawn(async move {
                            tokio::select! {
                                _ = cancel.cancelled() => {}
                                _ = tokio::time::sleep(std::time::Duration::from_millis(ip_throttle)) => {}
                            }
                            drop(stream);
                        });
                        continue;
                    }
                    let Some(admitted) = admitted else {
                        drop(stream);
                        continue;
                    };
                    slot = Some(admitted);
                }
                let state = state.clone();
                // A counted connection closes on its own token too (over max.connections).
                let activity = slot
                    .as_ref()
                    .map(|s: &crate::conn_limits::Slot| s.activity().clone());
                let cancel = activity
                    .as_ref()
                    .map_or_else(|| cancel.clone(), |a| a.close_token().clone());
                let inner_tasks = tasks.clone();
                let counted = stats.opened();
                let name = listener_name.clone();
                let tls = tls.clone();
                let stats = stats.clone();
                tasks.spawn(async move {
                    tracing::debug!(%peer, "connection opened");
                    let conn = (peer, name, kind, state, cancel, inner_tasks, activity.clone());
                    serve(stream, tls, conn).await;
                    if activity.is_some_and(|a| a.closed_over_max()) {
                        tracing::info!(%peer, "connection closed: the broker was over max.connections and it was the least recently active");
                        stats.closed_over_max();
                    } else {
                        tracing::debug!(%peer, "connection closed");
                    }
                    drop(counted);
                    drop(permit);
                    drop(slot);
                });
            }
            Err(e) => {
                // Typically EMFILE: back off briefly instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
                }
            }
        }
    }
}

/// Closes connections of the non-protected listeners while the broker is over
/// `max.connections` (a connection of the protected listener was just admitted over it).
fn close_excess(state: &BrokerState, limits: &crate::conn_limits::Limits, listener: &str) {
    let told = state.connections.close_excess(limits.max_connections);
    if told > 0 {
        tracing::info!(
            %listener,
            closing = told,
            max_connections = limits.max_connections,
            "over max.connections: closing the least recently active connections of the other listeners"
        );
    }
}

/// Whether a broker listener is protected from the broker-wide connection limits, as
/// Kafka's `ConnectionQuotas.protectedListener`: the inter-broker listener, when the broker
/// has other (non-controller) listeners.
fn protected_listener(config: &model::config::BrokerConfig, listener: &str) -> bool {
    let is_controller = |name: &str| {
        config
            .controller_listener_names
            .iter()
            .any(|c| c.eq_ignore_ascii_case(name))
    };
    let broker_listeners = config
        .listeners
        .iter()
        .filter(|l| !is_controller(&l.name))
        .count();
    broker_listeners > 1
        && config
            .inter_broker_listener_name
            .eq_ignore_ascii_case(listener)
}

/// Serves one connection: over TLS first when the listener is encrypted.
async fn serve(stream: TcpStream, tls: Option<Arc<ListenerTls>>, conn: ConnParts) {
    let _ = stream.set_nodelay(true);
    let Some(tls) = tls else {
        let (read_half, write_half) = stream.into_split();
        return serve_halves(read_half, write_half, conn, KafkaPrincipal::anonymous()).await;
    };
    let (peer, cancel) = (conn.0, conn.4.clone());
    let handshake = tokio::time::timeout(
        std::time::Duration::from_millis(TLS_HANDSHAKE_TIMEOUT_MS),
        tls.acceptor().accept(stream),
    );
    let stream = tokio::select! {
        _ = cancel.cancelled() => return,
        h = handshake => match h {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::info!(%peer, error = %e, "closing connection: TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::info!(%peer, "closing connection: TLS handshake timed out");
                return;
            }
        },
    };
    let principal = tls.principal(stream.get_ref().1.peer_certificates());
    tracing::debug!(%peer, %principal, "TLS connection established");
    let (read_half, write_half) = tokio::io::split(stream);
    serve_halves(read_half, write_half, conn, KafkaPrincipal::user(principal)).await
}

/// One connection's peer, listener, owners, close token and activity record (on broker
/// listeners: a request read or a response written counts, `conn_limits::Activity`).
type ConnParts = (
    std::net::SocketAddr,
    Arc<str>,
    ListenerKind,
    Arc<BrokerState>,
    CancellationToken,
    TaskTracker,
    Option<Arc<crate::conn_limits::Activity>>,
);

/// Serves a connection's requests; `principal` is who the transport authenticated (the client
/// certificate's mapped subject, or ANONYMOUS). On a SASL listener the SASL user replaces it
/// once authenticated, as Kafka's `DefaultKafkaPrincipalBuilder` does.
async fn serve_halves<R, W>(
    mut read_half: R,
    write_half: W,
    conn: ConnParts,
    principal: KafkaPrincipal,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (peer, listener_name, kind, state, cancel, tasks, activity) = conn;
    let mut who = Arc::new(RequestContext::new(principal, peer.ip()));
    // Kafka shows a client's host as "/<ip>" in group descriptions.
    let client_host = format!("/{}", peer.ip());
    let (tx, rx) = mpsc::channel::<(Reply, Option<RequestTimer>)>(
        state.config.queued_max_requests.max(1) as usize,
    );
    let responses = Arc::new(ResponseBytes::default());
    let writer = tasks.spawn(write_replies(
        write_half,
        rx,
        responses.clone(),
        activity.clone(),
    ));
    let mut frames = FrameReader::new(state.config.socket_request_max_bytes.max(0) as usize);
    let idle = std::time::Duration::from_millis(state.config.connections_max_idle_ms.max(1) as u64);
    let response_bound = state.config.queued_max_response_bytes.max(0) as usize;
    let budget = state.request_budget.clone();
    let budget_total = state.request_budget_bytes;
    // A SASL listener's connections pass the SASL gate first.
    let mut sasl = state
        .config
        .security
        .sasl_listener(&listener_name)
        .map(SaslGate::new);
    // Client quotas mute the connection: nothing is read from it until the throttle time
    // of its last throttled request has passed (Kafka's throttled channel).
    let throttle = Arc::new(ConnThrottle::default());
    loop {
        // A client that does not read its responses is not served (nor read) further.
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = responses.wait_at_most(response_bound) => {}
        }
        if let Some(until) = throttle.muted_until() {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep_until(until.into()) => {}
            }
        }
        // next_size keeps partial prefixes in its own buffer, so dropping it (on cancellation
        // or the idle timeout) loses nothing that matters: we close anyway.
        let size = tokio::select! {
            _ = cancel.cancelled() => break,
            f = tokio::time::timeout(idle, frames.next_size(&mut read_half)) => match f {
                Ok(f) => f,
                Err(_) => {
                    tracing::debug!("closing idle connection");
                    break;
                }
            },
        };
        let size = match size {
            Ok(Some(size))
                if sasl
                    .as_ref()
                    .and_then(SaslGate::frame_limit)
                    .is_some_and(|max| size > max) =>
            {
                tracing::info!(size, "closing connection: frame over sasl.server.max.receive.size before authentication");
                break;
            }
            Ok(Some(size)) => size,
            Ok(None) => break,
            Err(FrameError::BadSize { size, max }) => {
                tracing::info!(size, max, "closing connection: request size outside limits");
                break;
            }
            Err(e) => {
                tracing::debug!(error = %e, "closing connection");
                break;
            }
        };
        // Reserve the frame's bytes before reading (and allocating for) its body. The
        // budget is never below socket.request.max.bytes, so this can always be granted.
        let permits = size.clamp(1, budget_total) as u32;
        let permit = tokio::select! {
            _ = cancel.cancelled() => break,
            p = budget.clone().acquire_many_owned(permits) => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let frame = tokio::select! {
            _ = cancel.cancelled() => break,
            f = tokio::time::timeout(idle, frames.next_body(&mut read_half)) => match f {
                Ok(Ok(f)) => f,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "closing connection");
                    break;
                }
                Err(_) => {
                    tracing::debug!("closing connection idle in the middle of a request");
                    break;
                }
            },
        };
        if let Some(a) = &activity {
            a.touch();
        }
        let step = match sasl.as_mut() {
            Some(g) => g.step(frame, state.as_ref()),
            None => Step::Pass(frame),
        };
        let frame = match step {
            Step::Pass(frame) => frame,
            Step::Answer { frame, close } => {
                drop(permit);
                responses.add(frame.len());
                if tx.send((Reply::Ready(frame), None)).await.is_err() || close {
                    break;
                }
                continue;
            }
            Step::Close => break,
        };
        if let Some(user) = sasl.as_ref().and_then(SaslGate::authorization_id) {
            if who.principal.name != user {
                who = Arc::new(RequestContext {
                    principal: KafkaPrincipal::user(user),
                    host: who.host.clone(),
                });
            }
        }
        let received = crate::metrics::now();
        if kind == ListenerKind::Controller {
            let private =
                protocol::peek_api_key(&frame).filter(|k| crate::controller_api::is_private(*k));
            // Raft traffic (private api keys) is not a Kafka request: it is not timed.
            let access = Access::new(state.authorizer(), who.clone());
            let (reply, mut timer) = if private.is_some() {
                (crate::controller_api::private(&state, frame, &access), None)
            } else {
                match protocol::decode_request_with(frame, protocol::versions::CONTROLLER_SUPPORTED)
                {
                    Ok(req) => {
                        let timer = RequestTimer::start(req.api_key, req.version(), received);
                        (
                            Some(crate::controller_api::dispatch(
                                &state,
                                req,
                                &listener_name,
                                access,
                            )),
                            Some(timer),
                        )
                    }
                    Err(RequestError::UnsupportedVersion {
                        api_key,
                        version,
                        correlation_id,
                    }) if api_key == ApiKey::ApiVersions as i16 => (
                        Some(Reply::Ready(protocol::api_versions_fallback(
                            correlation_id,
                        ))),
                        Some(RequestTimer::start(ApiKey::ApiVersions, version, received)),
                    ),
                    Err(e) => {
                        tracing::info!(error = %e, "closing controller connection: bad request");
                        (None, None)
                    }
                }
            };
            let Some(reply) = reply else { break };
            drop(permit);
            if let Some(t) = timer.as_mut() {
                t.handled();
            }
            match &reply {
                Reply::Ready(b) => responses.add(b.len()),
                Reply::Chunks(c) => responses.add(c.iter().map(Bytes::len).sum()),
                Reply::None
                | Reply::Later(_)
                | Reply::LaterChunks(_)
                | Reply::Close
                | Reply::Serial { .. } => {}
            }
            let close = matches!(reply, Reply::Close);
            if tx.send((reply, timer)).await.is_err() || close {
                break;
            }
            continue;
        }
        let (reply, mut timer) = match protocol::decode_request(frame) {
            Ok(req) => {
                let timer = RequestTimer::start(req.api_key, req.version(), received);
                let access = Access::new(state.authorizer(), who.clone());
                // The request quota counts the handler's own time (not the waits of acks=all
                // or a long-poll), as Kafka counts request-handler thread time.
                let request_quota = (state.quotas.enabled(QuotaKind::Request)
                    && !handlers::exempt_from_request_quota(&req))
                .then(|| req.header.client_id.as_deref().unwrap_or("").to_string());
                let handler_start = request_quota.is_some().then(Instant::now);
                let reply = handlers::dispatch(
                    &state,
                    req,
                    &client_host,
                    &listener_name,
                    access,
                    Some((&throttle, size)),
                );
                if let (Some(client_id), Some(handler_start)) = (request_quota, handler_start) {
                    let t = state.quotas.record(
                        QuotaKind::Request,
                        &who.principal.name,
                        &client_id,
                        crate::quotas::nanos_to_percentage(handler_start.elapsed().as_nanos()),
                    );
                    throttle.mute_for(t);
                }
                (reply, timer)
            }
            Err(RequestError::UnsupportedVersion {
                api_key,
                version,
                correlation_id,
            }) if api_key == ApiKey::ApiVersions as i16 => {
                tracing::debug!(
                    version,
                    "ApiVersions at an unsupported version; answering v0"
                );
                let reply = Reply::Ready(protocol::api_versions_fallback(correlation_id));
                let timer = RequestTimer::start(ApiKey::ApiVersions, version, received);
                (reply, timer)
            }
            Err(e) => {
                tracing::info!(error = %e, "closing connection: bad request");
                break;
            }
        };
        let (reply, serial) = match reply {
            Reply::Serial { reply, done } => (*reply, Some(done)),
            reply => (reply, None),
        };
        // The request's bytes are gone once its handler has run.
        drop(permit);
        timer.handled();
        match &reply {
            Reply::None => {
                timer.done_without_response();
                if let Some(done) = serial {
                    // An acks=0 produce verified first: nothing to answer, but the next
                    // request waits for it, and a failure closes the connection.
                    if await_settled(&cancel, done).await == Settled::Close {
                        break;
                    }
                }
                continue;
            }
            Reply::Ready(b) => responses.add(b.len()),
            Reply::Chunks(c) => responses.add(c.iter().map(Bytes::len).sum()),
            Reply::Later(_) | Reply::LaterChunks(_) | Reply::Close | Reply::Serial { .. } => {}
        }
        let close = matches!(reply, Reply::Close);
        if tx.send((reply, Some(timer))).await.is_err() || close {
            break;
        }
        if let Some(done) = serial {
            // The next request waits until this one has taken effect (see `Reply::Serial`).
            if await_settled(&cancel, done).await == Settled::Close {
                break;
            }
        }
    }
    drop(tx);
    let _ = writer.await;
}

/// Waits for a [`Reply::Serial`] request to take effect: `Close` when the connection is being
/// cancelled meanwhile; a dropped sender (its task ended without a word) reads on.
async fn await_settled(
    cancel: &CancellationToken,
    done: tokio::sync::oneshot::Receiver<Settled>,
) -> Settled {
    tokio::select! {
        _ = cancel.cancelled() => Settled::Close,
        r = done => r.unwrap_or(Settled::ReadOn),
    }
}

/// Writes `chunks` in order with vectored writes (record bytes are never copied into one
/// frame).
async fn write_chunks<W: AsyncWrite + Unpin>(
    out: &mut BufWriter<W>,
    chunks: &[Bytes],
) -> std::io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = chunks.iter().map(|c| IoSlice::new(c)).collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = out.write_vectored(rest).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut rest, n);
    }
    Ok(())
}

/// Awaits a delayed reply. When it is not ready at once, the answers already buffered are
/// written out first: buffered answers are otherwise flushed only when the queue is empty, so
/// behind a reply that waits (acks=all for the high watermark, a long-poll fetch) the earlier
/// answers of a pipelining client sat unsent until every queued reply was done — a producer
/// with many requests in flight got no acks=all answer until its whole burst was replicated.
async fn flush_unless_ready<T, W: AsyncWrite + Unpin>(
    mut fut: std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>,
    out: &mut BufWriter<W>,
) -> std::io::Result<T> {
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx))).await;
    match first {
        std::task::Poll::Ready(v) => Ok(v),
        std::task::Poll::Pending => {
            if !out.buffer().is_empty() {
                out.flush().await?;
            }
            Ok(fut.await)
        }
    }
}

/// Writes a connection's replies in order; on a broker listener each written response counts as
/// activity, and a connection told to close over `max.connections` stops at once, dropping
/// what is queued (Kafka closes the channel with its responses pending).
async fn write_replies<W: AsyncWrite + Unpin>(
    write_half: W,
    rx: mpsc::Receiver<(Reply, Option<RequestTimer>)>,
    responses: Arc<ResponseBytes>,
    activity: Option<Arc<crate::conn_limits::Activity>>,
) {
    let Some(activity) = activity else {
        return write_replies_until_done(write_half, rx, responses, None).await;
    };
    tokio::select! {
        _ = activity.told_to_close() => {}
        _ = write_replies_until_done(write_half, rx, responses, Some(&activity)) => {}
    }
}

async fn write_replies_until_done<W: AsyncWrite + Unpin>(
    write_half: W,
    mut rx: mpsc::Receiver<(Reply, Option<RequestTimer>)>,
    responses: Arc<ResponseBytes>,
    activity: Option<&crate::conn_limits::Activity>,
) {
    let mut out = BufWriter::with_capacity(64 * 1024, write_half);
    while let Some((reply, timer)) = rx.recv().await {
        let dequeued = crate::metrics::now();
        // Bytes counted by the reader when it queued them, or here once a delayed reply is
        // ready; given back once written.
        let chunks: Option<(Vec<Bytes>, bool)> = match reply {
            Reply::Ready(b) => Some((vec![b], true)),
            Reply::Chunks(c) => Some((c, true)),
            Reply::Later(fut) => match flush_unless_ready(fut, &mut out).await {
                Ok(b) => b.map(|b| (vec![b], false)),
                Err(_) => return,
            },
            Reply::LaterChunks(fut) => match flush_unless_ready(fut, &mut out).await {
                Ok(c) => c.map(|c| (c, false)),
                Err(_) => return,
            },
            // The reader unwraps `Serial` before queueing; nothing to write for these.
            Reply::None | Reply::Close | Reply::Serial { .. } => None,
        };
        let Some((chunks, counted)) = chunks else {
            // A handler could not encode its response (a bug, logged there): the client
            // would wait forever for this correlation id, so close the connection.
            break;
        };
        // A reply ready when queued waited for nothing: no second clock read.
        let ready = if counted {
            dequeued
        } else {
            crate::metrics::now()
        };
        let n: usize = chunks.iter().map(Bytes::len).sum();
        if !counted {
            responses.add(n);
        }
        let written = write_chunks(&mut out, &chunks).await;
        drop(chunks);
        responses.remove(n);
        if written.is_err() {
            return;
        }
        if let Some(a) = activity {
            a.touch();
        }
        if rx.is_empty() && out.flush().await.is_err() {
            return;
        }
        if let Some(timer) = timer {
            timer.responded(dequeued, ready, crate::metrics::now());
        }
    }
    let _ = out.flush().await;
    let _ = out.shutdown().await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A pipelining client's first answer reaches it while a later reply still waits (an
    /// acks=all produce waiting for the high watermark): it was held in the write buffer
    /// until the queue drained.
    #[tokio::test]
    async fn an_answer_is_not_held_back_by_a_later_reply_that_waits() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (tx, rx) = mpsc::channel(8);
        let writer = tokio::spawn(write_replies(
            server,
            rx,
            Arc::new(ResponseBytes::default()),
            None,
        ));
        let (release, wait) = tokio::sync::oneshot::channel::<()>();
        let later: std::pin::Pin<Box<dyn std::future::Future<Output = Option<Bytes>> + Send>> =
            Box::pin(async move { wait.await.ok().map(|()| Bytes::from_static(b"second")) });
        tx.send((Reply::Ready(Bytes::from_static(b"first")), None))
            .await
            .unwrap();
        tx.send((Reply::Later(later), None)).await.unwrap();
        // A third reply queued behind them keeps the queue from looking empty.
        tx.send((Reply::Ready(Bytes::from_static(b"third")), None))
            .await
            .unwrap();
        let mut first = [0u8; 5];
        // Without the flush this read never completes (the guard turns a hang into a failure).
        tokio::time::timeout(
            std::time::Duration::from_secs(60),
            client.read_exact(&mut first),
        )
        .await
        .expect("the first answer was held back behind the waiting reply")
        .unwrap();
        assert_eq!(&first, b"first");
        release.send(()).unwrap();
        drop(tx);
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"secondthird");
        writer.await.unwrap();
    }
}
