//! Listener and connections: read frames, dispatch, write responses in request order.
//!
//! Each connection has a reader and a writer task. The reader decodes a request and runs the
//! handler's synchronous part at once (so appends from one connection happen in the order
//! sent), and queues the handler's reply; the writer awaits the queued replies in order and
//! writes them. The queue is bounded by `queued.max.requests`, so a client that pipelines
//! without reading responses stops being read.

use crate::handlers::{self, Reply};
use crate::state::BrokerState;
use bytes::Bytes;
use protocol::frame::{FrameError, FrameReader};
use protocol::{ApiKey, RequestError};
use std::sync::Arc;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Accepts connections until cancelled, at most `max.connections` at once.
pub async fn accept_loop(
    listener: TcpListener,
    state: Arc<BrokerState>,
    cancel: CancellationToken,
    tasks: TaskTracker,
) {
    let limit = Arc::new(Semaphore::new(state.config.max_connections.max(1) as usize));
    loop {
        let permit = tokio::select! {
            _ = cancel.cancelled() => return,
            p = limit.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let accepted = tokio::select! {
            _ = cancel.cancelled() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                let state = state.clone();
                let cancel = cancel.clone();
                let inner_tasks = tasks.clone();
                tasks.spawn(async move {
                    tracing::debug!(%peer, "connection opened");
                    serve(stream, peer, state, cancel, inner_tasks).await;
                    tracing::debug!(%peer, "connection closed");
                    drop(permit);
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

async fn serve(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    state: Arc<BrokerState>,
    cancel: CancellationToken,
    tasks: TaskTracker,
) {
    let _ = stream.set_nodelay(true);
    // Kafka shows a client's host as "/<ip>" in group descriptions.
    let client_host = format!("/{}", peer.ip());
    let (mut read_half, write_half) = stream.into_split();
    let (tx, rx) = mpsc::channel::<Reply>(state.config.queued_max_requests.max(1) as usize);
    let writer = tasks.spawn(write_replies(write_half, rx));
    let mut frames = FrameReader::new(state.config.socket_request_max_bytes.max(0) as usize);
    let idle = std::time::Duration::from_millis(state.config.connections_max_idle_ms.max(1) as u64);
    loop {
        // FrameReader::next keeps partial frames in its own buffer, so dropping it (on
        // cancellation or the idle timeout) loses nothing that matters: we close anyway.
        let frame = tokio::select! {
            _ = cancel.cancelled() => break,
            f = tokio::time::timeout(idle, frames.next(&mut read_half)) => match f {
                Ok(f) => f,
                Err(_) => {
                    tracing::debug!("closing idle connection");
                    break;
                }
            },
        };
        let frame = match frame {
            Ok(Some(f)) => f,
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
        let reply = match protocol::decode_request(frame) {
            Ok(req) => handlers::dispatch(&state, req, &client_host),
            Err(RequestError::UnsupportedVersion {
                api_key,
                version,
                correlation_id,
            }) if api_key == ApiKey::ApiVersions as i16 => {
                tracing::debug!(
                    version,
                    "ApiVersions at an unsupported version; answering v0"
                );
                Reply::Ready(protocol::api_versions_fallback(correlation_id))
            }
            Err(e) => {
                tracing::info!(error = %e, "closing connection: bad request");
                break;
            }
        };
        if matches!(reply, Reply::None) {
            continue;
        }
        if tx.send(reply).await.is_err() {
            break;
        }
    }
    drop(tx);
    let _ = writer.await;
}

async fn write_replies(write_half: tokio::net::tcp::OwnedWriteHalf, mut rx: mpsc::Receiver<Reply>) {
    let mut out = BufWriter::with_capacity(64 * 1024, write_half);
    while let Some(reply) = rx.recv().await {
        let bytes: Option<Bytes> = match reply {
            Reply::Ready(b) => Some(b),
            Reply::Later(fut) => fut.await,
            Reply::None => None,
        };
        let Some(bytes) = bytes else {
            // A handler could not encode its response (a bug, logged there): the client
            // would wait forever for this correlation id, so close the connection.
            break;
        };
        if out.write_all(&bytes).await.is_err() {
            return;
        }
        if rx.is_empty() && out.flush().await.is_err() {
            return;
        }
    }
    let _ = out.flush().await;
    let _ = out.shutdown().await;
}
