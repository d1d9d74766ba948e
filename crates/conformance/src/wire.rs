//! One blocking TCP connection to a broker speaking raw Kafka frames: requests encoded with
//! Moldau's protocol layer, responses matched by correlation id and decoded at the version
//! they answer. A connection with credentials authenticates with SASL/PLAIN (SaslHandshake v1,
//! SaslAuthenticate v2) each time it connects, before its first request.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use protocol::StrBytes;
use protocol::{ApiKey, Decode, Encode, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Largest response frame the harness accepts.
const RESPONSE_BYTES_MAX: usize = 128 << 20;

/// What came back for one request.
#[derive(Debug)]
pub enum Outcome {
    /// A response, decoded at the version it answers.
    Response(Box<ResponseKind>),
    /// The broker closed the connection instead of answering.
    Closed,
    /// No answer within the step's deadline.
    Timeout,
    /// A frame came back that could not be decoded (version, correlation id, body).
    Undecodable(String),
}

/// How a request goes on the wire.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub api: ApiKey,
    /// The version in the request header.
    pub header_version: i16,
    /// The version the body was encoded with (the header version, unless a scenario claims
    /// a version the codec does not know).
    pub body: Bytes,
    pub client_id: Option<String>,
    /// Whether the broker answers at all (acks=0 produce requests get no response).
    pub expects_response: bool,
}

#[derive(Debug)]
struct Pending {
    correlation_id: i32,
    api: ApiKey,
    version: i16,
}

/// A SASL/PLAIN user and password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

/// A connection with requests in flight (answered in order, as Kafka guarantees per
/// connection).
#[derive(Debug)]
pub struct Conn {
    stream: Option<TcpStream>,
    addr: SocketAddr,
    /// Authenticates as this user on every (re)connect; none: the listener is PLAINTEXT.
    credentials: Option<Credentials>,
    /// Why the last connect failed to authenticate (reported instead of a plain close).
    auth_error: Option<String>,
    next_correlation_id: i32,
    pending: VecDeque<Pending>,
}

/// How long the SASL exchange of a new connection may take.
const AUTH_TIMEOUT: Duration = Duration::from_secs(30);
/// Correlation ids of the SASL exchange (requests use ids counting up from 1).
const AUTH_CORRELATION_ID: i32 = -1000;

/// Encodes a request body at `version`.
pub fn encode_body(body: &RequestKind, version: i16) -> Result<Bytes, String> {
    let mut out = BytesMut::new();
    body.encode(&mut out, version)
        .map_err(|e| format!("{e:#}"))?;
    Ok(out.freeze())
}

/// The version a response to a request of `api` at `version` is encoded with: ApiVersions at
/// a version the broker does not know is answered with v0 (Kafka's rule, so old clients can
/// read it).
pub fn response_version(api: ApiKey, version: i16) -> i16 {
    let max = api.valid_versions().max;
    if api == ApiKey::ApiVersions && version > max {
        0
    } else {
        version
    }
}

/// One request frame: size, header, body.
fn frame(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: Option<String>,
    body: &[u8],
) -> Result<BytesMut, String> {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(client_id.map(StrBytes::from_string));
    let mut frame = BytesMut::new();
    frame.put_i32(0);
    header
        .encode(&mut frame, api.request_header_version(version))
        .map_err(|e| format!("encode request header: {e}"))?;
    frame.extend_from_slice(body);
    let len = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&len.to_be_bytes());
    Ok(frame)
}

/// Sends one request on a fresh connection and decodes its response (the SASL exchange).
fn exchange(
    stream: &mut TcpStream,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &RequestKind,
) -> Result<ResponseKind, String> {
    let body = encode_body(body, version)?;
    let f = frame(
        api,
        version,
        correlation_id,
        Some("conformance".into()),
        &body,
    )?;
    stream
        .write_all(&f)
        .map_err(|e| format!("{api:?}: write: {e}"))?;
    let mut buf = read_frame_on(stream, Instant::now() + AUTH_TIMEOUT)
        .map_err(|o| format!("{api:?}: {o:?}"))?;
    let header = ResponseHeader::decode(&mut buf, api.response_header_version(version))
        .map_err(|e| format!("{api:?}: response header: {e}"))?;
    if header.correlation_id != correlation_id {
        return Err(format!(
            "{api:?}: correlation id {} instead of {correlation_id}",
            header.correlation_id
        ));
    }
    ResponseKind::decode(api, &mut buf, version).map_err(|e| format!("{api:?}: {e:#}"))
}

/// SASL/PLAIN on a fresh connection: SaslHandshake v1 then SaslAuthenticate v2 with
/// `\0user\0password` (RFC 4616, no authorization id).
fn authenticate(stream: &mut TcpStream, c: &Credentials) -> Result<(), String> {
    use protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
    let hs = RequestKind::SaslHandshake(
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    );
    match exchange(stream, ApiKey::SaslHandshake, 1, AUTH_CORRELATION_ID, &hs)? {
        ResponseKind::SaslHandshake(r) if r.error_code == 0 => {}
        ResponseKind::SaslHandshake(r) => {
            return Err(format!(
                "SaslHandshake PLAIN: error {} (mechanisms {:?})",
                r.error_code, r.mechanisms
            ))
        }
        other => return Err(format!("SaslHandshake: answered {other:?}")),
    }
    let mut token = Vec::with_capacity(c.user.len() + c.password.len() + 2);
    token.push(0);
    token.extend_from_slice(c.user.as_bytes());
    token.push(0);
    token.extend_from_slice(c.password.as_bytes());
    let auth = RequestKind::SaslAuthenticate(
        SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
    );
    match exchange(
        stream,
        ApiKey::SaslAuthenticate,
        2,
        AUTH_CORRELATION_ID + 1,
        &auth,
    )? {
        ResponseKind::SaslAuthenticate(r) if r.error_code == 0 => Ok(()),
        ResponseKind::SaslAuthenticate(r) => Err(format!(
            "SaslAuthenticate as {}: error {} ({:?})",
            c.user, r.error_code, r.error_message
        )),
        other => Err(format!("SaslAuthenticate: answered {other:?}")),
    }
}

impl Conn {
    pub fn new(addr: SocketAddr) -> Conn {
        Conn::with_credentials(addr, None)
    }

    /// A connection that authenticates with SASL/PLAIN as `credentials` (if any).
    pub fn with_credentials(addr: SocketAddr, credentials: Option<Credentials>) -> Conn {
        Conn {
            stream: None,
            addr,
            credentials,
            auth_error: None,
            next_correlation_id: 1,
            pending: VecDeque::new(),
        }
    }

    /// Why the last connect could not authenticate, if it could not.
    pub fn auth_error(&self) -> Option<&str> {
        self.auth_error.as_deref()
    }

    fn stream(&mut self) -> std::io::Result<&mut TcpStream> {
        if self.stream.is_none() {
            let mut s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(10))?;
            s.set_nodelay(true)?;
            if let Some(c) = &self.credentials {
                if let Err(e) = authenticate(&mut s, c) {
                    self.auth_error = Some(e.clone());
                    return Err(std::io::Error::other(e));
                }
            }
            self.auth_error = None;
            self.stream = Some(s);
        }
        self.stream
            .as_mut()
            .ok_or_else(|| std::io::Error::other("no stream"))
    }

    /// Drops the connection (the next send reconnects) and forgets requests in flight.
    pub fn reset(&mut self) {
        self.stream = None;
        self.pending.clear();
    }

    /// Whether requests are waiting for their responses.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Writes one request frame. A write error means the broker closed the connection.
    pub fn send(&mut self, req: &Outgoing) -> Result<(), Outcome> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let frame = frame(
            req.api,
            req.header_version,
            correlation_id,
            req.client_id.clone(),
            &req.body,
        )
        .map_err(Outcome::Undecodable)?;
        let written = self.stream().and_then(|s| s.write_all(&frame));
        if written.is_err() {
            self.reset();
            return Err(Outcome::Closed);
        }
        if req.expects_response {
            self.pending.push_back(Pending {
                correlation_id,
                api: req.api,
                version: response_version(req.api, req.header_version),
            });
        }
        Ok(())
    }

    /// Reads the response to the oldest request in flight, waiting until `deadline`.
    pub fn recv(&mut self, deadline: Instant) -> Outcome {
        let Some(p) = self.pending.pop_front() else {
            return Outcome::Undecodable("no request in flight".into());
        };
        let frame = match self.read_frame(deadline) {
            Ok(f) => f,
            Err(o) => {
                // A timeout may leave half a frame unread: the connection can't be reused.
                self.reset();
                return o;
            }
        };
        let mut buf = frame;
        let header =
            match ResponseHeader::decode(&mut buf, p.api.response_header_version(p.version)) {
                Ok(h) => h,
                Err(e) => return Outcome::Undecodable(format!("response header: {e}")),
            };
        if header.correlation_id != p.correlation_id {
            self.reset();
            return Outcome::Undecodable(format!(
                "correlation id {} answers a request other than {} (a response to a request \
                 that should get none?)",
                header.correlation_id, p.correlation_id
            ));
        }
        match ResponseKind::decode(p.api, &mut buf, p.version) {
            Ok(r) if !buf.has_remaining() => Outcome::Response(Box::new(r)),
            Ok(_) => Outcome::Undecodable(format!(
                "{:?} v{}: {} bytes after the body",
                p.api,
                p.version,
                buf.remaining()
            )),
            Err(e) => Outcome::Undecodable(format!("{:?} v{}: {e:#}", p.api, p.version)),
        }
    }

    fn read_frame(&mut self, deadline: Instant) -> Result<Bytes, Outcome> {
        let stream = self.stream().map_err(|_| Outcome::Closed)?;
        read_frame_on(stream, deadline)
    }
}

fn read_frame_on(stream: &mut TcpStream, deadline: Instant) -> Result<Bytes, Outcome> {
    let mut size = [0u8; 4];
    read_exact_on(stream, &mut size, deadline)?;
    let size = i32::from_be_bytes(size);
    let size = usize::try_from(size)
        .ok()
        .filter(|&s| s <= RESPONSE_BYTES_MAX)
        .ok_or_else(|| Outcome::Undecodable(format!("response frame of {size} bytes")))?;
    let mut body = vec![0u8; size];
    read_exact_on(stream, &mut body, deadline)?;
    Ok(Bytes::from(body))
}

fn read_exact_on(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), Outcome> {
    let mut filled = 0;
    while filled < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Outcome::Timeout);
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|_| Outcome::Closed)?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => return Err(Outcome::Closed),
            Ok(n) => filled += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(Outcome::Timeout)
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Err(Outcome::Closed),
        }
    }
    Ok(())
}
