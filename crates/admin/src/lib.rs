//! The admin HTTP listener: `/metrics` (Prometheus text, or OpenMetrics when the scraper's
//! `Accept` header asks for it), `/health/live` and `/health/ready`.
//!
//! HTTP/1.1 by hyper; each connection is one task owned by the server's `TaskTracker` and
//! stopped by its `CancellationToken`. What the endpoints report comes from an [`Endpoints`]
//! implementation (the binary wires the broker in), so this crate knows nothing of the
//! broker. Rendering `/metrics` runs on the blocking pool: on a broker with many partitions
//! it walks them all, and the runtime's workers keep serving Kafka clients meanwhile.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
pub use telemetry::Format;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Connections the admin listener serves at once; more wait in the accept queue. Scrapers
/// and health probes are few; this bounds what a misbehaving one can hold.
pub const CONNECTIONS_MAX: usize = 64;
/// A connection that sends no complete request header within this time is closed.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the endpoints answer.
pub trait Endpoints: Send + Sync + 'static {
    /// The exposition in `format`.
    fn metrics(&self, format: Format) -> String;
    /// `Ok` when ready to serve clients; otherwise why not (the 503 body).
    fn ready(&self) -> Result<(), String>;
}

/// A bound admin listener, serving until its token is cancelled.
#[derive(Debug)]
pub struct AdminServer {
    addr: SocketAddr,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

impl AdminServer {
    /// Binds `addr` (port 0 picks a free port) and starts serving on the current runtime.
    pub async fn start(addr: &str, endpoints: Arc<dyn Endpoints>) -> std::io::Result<AdminServer> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let cancel = CancellationToken::new();
        let tasks = TaskTracker::new();
        tasks.spawn(accept_loop(
            listener,
            endpoints,
            cancel.clone(),
            tasks.clone(),
        ));
        Ok(AdminServer {
            addr,
            cancel,
            tasks,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, closes connections, waits for their tasks.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn accept_loop(
    listener: TcpListener,
    endpoints: Arc<dyn Endpoints>,
    cancel: CancellationToken,
    tasks: TaskTracker,
) {
    let limit = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    loop {
        let permit = tokio::select! {
            _ = cancel.cancelled() => return,
            p = limit.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let (stream, _peer) = tokio::select! {
            _ = cancel.cancelled() => return,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "admin listener: accept failed");
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(50)) => continue,
                    }
                }
            },
        };
        let endpoints = endpoints.clone();
        let cancel = cancel.clone();
        tasks.spawn(async move {
            let service = service_fn(move |req| handle(endpoints.clone(), req));
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "admin connection ended");
                    }
                }
                _ = cancel.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
                }
            }
            drop(permit);
        });
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn handle(
    endpoints: Arc<dyn Endpoints>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n");
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Ok(r);
    }
    Ok(match req.uri().path() {
        "/metrics" => {
            let format = Format::negotiate(req.headers().get(ACCEPT).and_then(|v| v.to_str().ok()));
            match tokio::task::spawn_blocking(move || endpoints.metrics(format)).await {
                Ok(body) => {
                    let mut r = Response::new(Full::new(Bytes::from(body)));
                    r.headers_mut().insert(
                        CONTENT_TYPE,
                        HeaderValue::from_static(format.content_type()),
                    );
                    r
                }
                Err(e) => {
                    tracing::error!(error = %e, "rendering /metrics failed");
                    text(StatusCode::INTERNAL_SERVER_ERROR, "metrics failed\n")
                }
            }
        }
        "/health/live" => text(StatusCode::OK, "live\n"),
        "/health/ready" => match endpoints.ready() {
            Ok(()) => text(StatusCode::OK, "ready\n"),
            Err(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {why}\n"),
            ),
        },
        "/" => text(
            StatusCode::OK,
            "moldau admin: /metrics /health/live /health/ready\n",
        ),
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    })
}
