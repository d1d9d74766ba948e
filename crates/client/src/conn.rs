//! One TCP connection to one broker: pipelined requests matched to responses by correlation
//! id, and the API versions negotiated with ApiVersions when it opened.
//!
//! A connection owns two tasks: a writer that drains an (in-flight-bounded) queue of encoded
//! frames onto the socket, and a reader that splits responses into frames and hands each to
//! the waiter registered under its correlation id. Callers decode their own responses, so
//! large Fetch responses are decoded on the caller's task, not the reader's. Dropping the
//! connection aborts both tasks; requests still pending then fail with `Disconnected`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use protocol::frame::FrameReader;
use protocol::messages::{ApiVersionsRequest, SaslAuthenticateRequest, SaslHandshakeRequest};
use protocol::StrBytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use crate::error::Error;
use crate::rpc::{decode_response, encode_request, Rpc};

/// Connection settings shared by every connection of a client.
#[derive(Clone, Debug)]
pub(crate) struct ConnConfig {
    pub client_id: String,
    pub request_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    /// Requests awaiting a response at once on this connection.
    pub in_flight_max: usize,
    /// Largest response frame accepted; a larger size prefix closes the connection.
    pub frame_bytes_max: usize,
    /// TLS and SASL settings (PLAINTEXT by default).
    pub security: crate::security::Security,
}

impl ConnConfig {
    pub(crate) fn from_client(c: &crate::cluster::ClientConfig) -> ConnConfig {
        ConnConfig {
            client_id: c.client_id.clone(),
            request_timeout_ms: c.request_timeout_ms,
            connect_timeout_ms: c.connect_timeout_ms,
            in_flight_max: c.in_flight_max,
            frame_bytes_max: c.response_bytes_max,
            security: c.security.clone(),
        }
    }
}

type Waiter = oneshot::Sender<Result<Bytes, Error>>;

/// A frame for the writer, and who to tell once it is on the socket (one-way requests).
type Outgoing = (Bytes, Option<oneshot::Sender<()>>);

#[derive(Default)]
struct Pending {
    waiters: HashMap<i32, Waiter>,
    /// Set once the connection failed; later requests fail at once with it.
    closed: Option<String>,
}

/// A negotiated connection. Cheap to share behind an `Arc`.
pub(crate) struct Connection {
    addr: String,
    config: ConnConfig,
    tx: mpsc::UnboundedSender<Outgoing>,
    pending: Arc<Mutex<Pending>>,
    next_id: AtomicI32,
    in_flight: Arc<Semaphore>,
    /// (api key) -> (min, max) the broker advertised.
    versions: HashMap<i16, (i16, i16)>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A response not yet received. Awaiting it is cancel-safe: dropping it forgets the request.
pub(crate) struct PendingResponse<R: Rpc> {
    rx: oneshot::Receiver<Result<Bytes, Error>>,
    version: i16,
    timeout_ms: u64,
    addr: String,
    /// The connection's shared state, to close it when this request times out.
    pending: Arc<Mutex<Pending>>,
    _permit: OwnedSemaphorePermit,
    _marker: std::marker::PhantomData<fn() -> R>,
}

impl<R: Rpc> PendingResponse<R> {
    pub async fn wait(self) -> Result<R::Response, Error> {
        let ms = self.timeout_ms;
        self.wait_for(ms).await
    }

    /// Like `wait`, with a timeout other than the request timeout (JoinGroup may block for
    /// the whole rebalance timeout).
    pub async fn wait_for(self, timeout_ms: u64) -> Result<R::Response, Error> {
        let frame = match tokio::time::timeout(Duration::from_millis(timeout_ms), self.rx).await {
            Err(_) => {
                // Responses come in request order, so everything behind this one is stuck
                // too: close the connection (as the Java client does); the next request
                // opens a fresh one. This also drops the waiters of abandoned requests.
                fail_all(&self.pending, &self.addr, "a request timed out");
                return Err(Error::Timeout(timeout_ms));
            }
            Ok(Err(_)) => {
                return Err(Error::Disconnected {
                    addr: self.addr,
                    reason: "connection closed".into(),
                })
            }
            Ok(Ok(r)) => r?,
        };
        decode_response::<R>(frame, self.version)
    }
}

impl Connection {
    /// Opens a connection and negotiates API versions.
    pub async fn open(addr: &str, config: ConnConfig) -> Result<Connection, Error> {
        let stream = tokio::time::timeout(
            Duration::from_millis(config.connect_timeout_ms),
            TcpStream::connect(addr),
        )
        .await
        .map_err(|_| Error::Connect {
            addr: addr.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"),
        })?
        .map_err(|source| Error::Connect {
            addr: addr.to_owned(),
            source,
        })?;
        let _ = stream.set_nodelay(true);
        let (tx, rx) = mpsc::unbounded_channel();
        let pending = Arc::new(Mutex::new(Pending::default()));
        let (writer, reader) = match &config.security.tls {
            None => {
                let (read_half, write_half) = stream.into_split();
                spawn_loops(read_half, write_half, rx, &pending, &config, addr)
            }
            Some(tls) => {
                let stream = tls_handshake(stream, tls.clone(), addr, &config).await?;
                let (read_half, write_half) = tokio::io::split(stream);
                spawn_loops(read_half, write_half, rx, &pending, &config, addr)
            }
        };
        let mut conn = Connection {
            addr: addr.to_owned(),
            in_flight: Arc::new(Semaphore::new(config.in_flight_max.max(1))),
            config,
            tx,
            pending,
            next_id: AtomicI32::new(1),
            versions: HashMap::new(),
            tasks: vec![writer, reader],
        };
        conn.versions = conn.negotiate().await?;
        if let Some(sasl) = conn.config.security.sasl.clone() {
            conn.authenticate(&sasl).await?;
        }
        Ok(conn)
    }

    /// SaslHandshake v1, then SaslAuthenticate until the mechanism's exchange is complete. A
    /// refusal is the broker's error code and message (SASL_AUTHENTICATION_FAILED,
    /// UNSUPPORTED_SASL_MECHANISM).
    async fn authenticate(&self, sasl: &crate::security::SaslCredentials) -> Result<(), Error> {
        let handshake = SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_string(sasl.mechanism.clone()));
        let resp = self.send(&handshake).await?;
        if resp.error_code != 0 {
            let enabled: Vec<&str> = resp.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(Error::broker(
                model::ErrorCode::from_code(resp.error_code),
                Some(format!(
                    "{} (the broker enables {})",
                    sasl.mechanism,
                    enabled.join(", ")
                )),
            ));
        }
        let mut exchange = crate::security::SaslClient::new(sasl)?;
        let mut server: Option<Bytes> = None;
        while let Some(token) = exchange.step(server.as_deref())? {
            let resp = self
                .send(&SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)))
                .await?;
            if resp.error_code != 0 {
                return Err(Error::broker(
                    model::ErrorCode::from_code(resp.error_code),
                    resp.error_message.map(|m| m.to_string()),
                ));
            }
            server = Some(resp.auth_bytes);
        }
        Ok(())
    }

    async fn negotiate(&self) -> Result<HashMap<i16, (i16, i16)>, Error> {
        let req = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("moldau-client"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let resp = match self.start_at(&req, 3).await?.wait().await {
            Ok(r) if r.error_code == 0 => r,
            // A broker that does not know v3 answers in v0 with UNSUPPORTED_VERSION (35),
            // which does not parse as v3: ask again in v0.
            _ => self.start_at(&req, 0).await?.wait().await?,
        };
        Error::check(resp.error_code)?;
        Ok(resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect())
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn is_closed(&self) -> bool {
        self.pending
            .lock()
            .map(|p| p.closed.is_some())
            .unwrap_or(true)
    }

    /// The highest version of `R` both sides support.
    pub fn version<R: Rpc>(&self) -> Result<i16, Error> {
        let (bmin, bmax) = self
            .versions
            .get(&(R::KEY as i16))
            .copied()
            .ok_or_else(|| Error::UnsupportedVersion(format!("{:?}", R::KEY)))?;
        let v = bmax.min(R::MAX);
        if v < bmin.max(R::MIN) {
            return Err(Error::UnsupportedVersion(format!(
                "{:?} (broker {bmin}..={bmax}, client {}..={})",
                R::KEY,
                R::MIN,
                R::MAX
            )));
        }
        Ok(v)
    }

    /// Queues `req` and returns its pending response. Waits only for an in-flight slot, so
    /// requests queued one after another from one task go out in that order.
    pub async fn start<R: Rpc>(&self, req: &R) -> Result<PendingResponse<R>, Error> {
        let v = self.version::<R>()?;
        self.start_at(req, v).await
    }

    async fn start_at<R: Rpc>(&self, req: &R, version: i16) -> Result<PendingResponse<R>, Error> {
        let permit = self
            .in_flight
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::Closed)?;
        self.start_with(permit, req, version)
    }

    /// Like `start`, but never waits: `Ok(None)` when every in-flight slot is taken.
    pub fn try_start<R: Rpc>(&self, req: &R) -> Result<Option<PendingResponse<R>>, Error> {
        let version = self.version::<R>()?;
        match self.in_flight.clone().try_acquire_owned() {
            Ok(permit) => self.start_with(permit, req, version).map(Some),
            Err(tokio::sync::TryAcquireError::NoPermits) => Ok(None),
            Err(tokio::sync::TryAcquireError::Closed) => Err(Error::Closed),
        }
    }

    fn start_with<R: Rpc>(
        &self,
        permit: OwnedSemaphorePermit,
        req: &R,
        version: i16,
    ) -> Result<PendingResponse<R>, Error> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let frame = encode_request(req, version, id, &self.config.client_id)?;
        let (wtx, rx) = oneshot::channel();
        {
            let mut p = self
                .pending
                .lock()
                .map_err(|_| Error::Protocol("poisoned connection state".into()))?;
            if let Some(reason) = &p.closed {
                return Err(Error::Disconnected {
                    addr: self.addr.clone(),
                    reason: reason.clone(),
                });
            }
            p.waiters.insert(id, wtx);
        }
        if self.tx.send((frame, None)).is_err() {
            return Err(Error::Disconnected {
                addr: self.addr.clone(),
                reason: "writer stopped".into(),
            });
        }
        Ok(PendingResponse {
            rx,
            version,
            timeout_ms: self.config.request_timeout_ms,
            addr: self.addr.clone(),
            pending: self.pending.clone(),
            _permit: permit,
            _marker: std::marker::PhantomData,
        })
    }

    /// The versions the broker advertised for `api_key`.
    pub fn advertised(&self, api_key: i16) -> Option<(i16, i16)> {
        self.versions.get(&api_key).copied()
    }

    /// Sends a body already encoded at `version` and returns the response body (its header
    /// removed), undecoded. Kafka keys use their header versions; private keys (outside
    /// Kafka's table) use request header v1 and response header v0.
    pub async fn send_encoded(
        &self,
        api_key: i16,
        version: i16,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, Error> {
        let (request_header, response_header) = match protocol::ApiKey::try_from(api_key) {
            Ok(api) => (
                api.request_header_version(version),
                api.response_header_version(version),
            ),
            Err(_) => (1, 0),
        };
        let _permit = self
            .in_flight
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::Closed)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let mut out = bytes::BytesMut::with_capacity(body.len() + 64);
        bytes::BufMut::put_i32(&mut out, 0);
        protocol::Encode::encode(
            &protocol::RequestHeader::default()
                .with_request_api_key(api_key)
                .with_request_api_version(version)
                .with_correlation_id(id)
                .with_client_id(Some(StrBytes::from_string(self.config.client_id.clone()))),
            &mut out,
            request_header,
        )
        .map_err(|e| Error::Config(format!("encode request header: {e}")))?;
        out.extend_from_slice(&body);
        let len =
            i32::try_from(out.len() - 4).map_err(|_| Error::Config("request over 2 GiB".into()))?;
        out[..4].copy_from_slice(&len.to_be_bytes());
        let (wtx, rx) = oneshot::channel();
        {
            let mut p = self
                .pending
                .lock()
                .map_err(|_| Error::Protocol("poisoned connection state".into()))?;
            if let Some(reason) = &p.closed {
                return Err(Error::Disconnected {
                    addr: self.addr.clone(),
                    reason: reason.clone(),
                });
            }
            p.waiters.insert(id, wtx);
        }
        if self.tx.send((out.freeze(), None)).is_err() {
            return Err(Error::Disconnected {
                addr: self.addr.clone(),
                reason: "writer stopped".into(),
            });
        }
        let mut frame = match tokio::time::timeout(timeout, rx).await {
            Err(_) => {
                fail_all(&self.pending, &self.addr, "a request timed out");
                return Err(Error::Timeout(timeout.as_millis() as u64));
            }
            Ok(Err(_)) => {
                return Err(Error::Disconnected {
                    addr: self.addr.clone(),
                    reason: "connection closed".into(),
                })
            }
            Ok(Ok(r)) => r?,
        };
        <protocol::ResponseHeader as protocol::Decode>::decode(&mut frame, response_header)
            .map_err(|e| Error::Protocol(format!("api {api_key} v{version} header: {e}")))?;
        Ok(frame)
    }

    /// Sends `req` and waits for its response.
    pub async fn send<R: Rpc>(&self, req: &R) -> Result<R::Response, Error> {
        self.start(req).await?.wait().await
    }

    /// Sends a request that gets no response (Produce with acks=0).
    /// Sends a request that gets no response (acks=0 produce). The returned receiver
    /// resolves once the frame is written to the socket (and fails if the connection dies
    /// first), so a caller can tell "sent" from "queued".
    pub fn send_oneway<R: Rpc>(&self, req: &R) -> Result<oneshot::Receiver<()>, Error> {
        let v = self.version::<R>()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let frame = encode_request(req, v, id, &self.config.client_id)?;
        let (done, written) = oneshot::channel();
        self.tx
            .send((frame, Some(done)))
            .map_err(|_| Error::Disconnected {
                addr: self.addr.clone(),
                reason: "writer stopped".into(),
            })?;
        Ok(written)
    }
}

fn fail_all(pending: &Mutex<Pending>, addr: &str, reason: &str) {
    let waiters = match pending.lock() {
        Ok(mut p) => {
            if p.closed.is_none() {
                p.closed = Some(reason.to_owned());
            }
            std::mem::take(&mut p.waiters)
        }
        Err(_) => return,
    };
    for (_, w) in waiters {
        let _ = w.send(Err(Error::Disconnected {
            addr: addr.to_owned(),
            reason: reason.to_owned(),
        }));
    }
}

/// Starts the writer and reader tasks of a connection over any byte stream.
fn spawn_loops<R, W>(
    read_half: R,
    write_half: W,
    rx: mpsc::UnboundedReceiver<Outgoing>,
    pending: &Arc<Mutex<Pending>>,
    config: &ConnConfig,
    addr: &str,
) -> (JoinHandle<()>, JoinHandle<()>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let writer = tokio::spawn(write_loop(write_half, rx, pending.clone(), addr.to_owned()));
    let reader = tokio::spawn(read_loop(
        read_half,
        pending.clone(),
        config.frame_bytes_max,
        addr.to_owned(),
    ));
    (writer, reader)
}

/// The TLS handshake on a fresh TCP connection, within the connect timeout. The server name
/// checked against the certificate is the host dialled (an IP address or a DNS name).
async fn tls_handshake(
    stream: TcpStream,
    tls: Arc<rustls::ClientConfig>,
    addr: &str,
    config: &ConnConfig,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Error> {
    let connect_error = |e: String| Error::Connect {
        addr: addr.to_owned(),
        source: std::io::Error::other(e),
    };
    let host = match addr.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => addr,
    };
    let name = rustls_pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| connect_error(format!("TLS server name {host}: {e}")))?;
    tokio::time::timeout(
        Duration::from_millis(config.connect_timeout_ms),
        tokio_rustls::TlsConnector::from(tls).connect(name, stream),
    )
    .await
    .map_err(|_| connect_error("TLS handshake timed out".into()))?
    .map_err(|e| connect_error(format!("TLS handshake: {e}")))
}

async fn write_loop<W: AsyncWrite + Unpin>(
    mut w: W,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    pending: Arc<Mutex<Pending>>,
    addr: String,
) {
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut notify: Vec<oneshot::Sender<()>> = Vec::new();
    while let Some((frame, done)) = rx.recv().await {
        notify.extend(done);
        // Coalesce whatever else is queued into one write.
        let result = if rx.is_empty() {
            w.write_all(&frame).await
        } else {
            buf.clear();
            buf.extend_from_slice(&frame);
            while buf.len() < 1024 * 1024 {
                match rx.try_recv() {
                    Ok((f, done)) => {
                        buf.extend_from_slice(&f);
                        notify.extend(done);
                    }
                    Err(_) => break,
                }
            }
            w.write_all(&buf).await
        };
        if let Err(e) = result {
            fail_all(&pending, &addr, &format!("write: {e}"));
            return;
        }
        for n in notify.drain(..) {
            let _ = n.send(());
        }
    }
}

async fn read_loop<R: AsyncRead + Unpin>(
    mut r: R,
    pending: Arc<Mutex<Pending>>,
    frame_bytes_max: usize,
    addr: String,
) {
    let mut frames = FrameReader::new(frame_bytes_max);
    loop {
        let frame = match frames.next(&mut r).await {
            Ok(Some(f)) => f,
            Ok(None) => {
                fail_all(&pending, &addr, "closed by broker");
                return;
            }
            Err(e) => {
                fail_all(&pending, &addr, &format!("read: {e}"));
                return;
            }
        };
        if frame.len() < 4 {
            fail_all(&pending, &addr, "response frame shorter than its header");
            return;
        }
        let id = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        let waiter = match pending.lock() {
            Ok(mut p) => p.waiters.remove(&id),
            Err(_) => return,
        };
        match waiter {
            Some(w) => {
                let _ = w.send(Ok(frame));
            }
            // A response nobody asked for means we no longer agree on the stream.
            None => {
                fail_all(
                    &pending,
                    &addr,
                    &format!("response with unknown correlation id {id}"),
                );
                return;
            }
        }
    }
}
