//! One blocking TCP connection to a broker speaking raw Kafka frames: requests encoded with
//! Moldau's protocol layer, responses matched by correlation id and decoded at the version
//! they answer.

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

/// A connection with requests in flight (answered in order, as Kafka guarantees per
/// connection).
#[derive(Debug)]
pub struct Conn {
    stream: Option<TcpStream>,
    addr: SocketAddr,
    next_correlation_id: i32,
    pending: VecDeque<Pending>,
}

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

impl Conn {
    pub fn new(addr: SocketAddr) -> Conn {
        Conn {
            stream: None,
            addr,
            next_correlation_id: 1,
            pending: VecDeque::new(),
        }
    }

    fn stream(&mut self) -> std::io::Result<&mut TcpStream> {
        if self.stream.is_none() {
            let s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(10))?;
            s.set_nodelay(true)?;
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
        let header = RequestHeader::default()
            .with_request_api_key(req.api as i16)
            .with_request_api_version(req.header_version)
            .with_correlation_id(correlation_id)
            .with_client_id(req.client_id.clone().map(StrBytes::from_string));
        let mut frame = BytesMut::new();
        frame.put_i32(0);
        header
            .encode(
                &mut frame,
                req.api.request_header_version(req.header_version),
            )
            .map_err(|e| Outcome::Undecodable(format!("encode request header: {e}")))?;
        frame.extend_from_slice(&req.body);
        let len = (frame.len() - 4) as i32;
        frame[..4].copy_from_slice(&len.to_be_bytes());
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
        let mut size = [0u8; 4];
        self.read_exact(&mut size, deadline)?;
        let size = i32::from_be_bytes(size);
        let size = usize::try_from(size)
            .ok()
            .filter(|&s| s <= RESPONSE_BYTES_MAX)
            .ok_or_else(|| Outcome::Undecodable(format!("response frame of {size} bytes")))?;
        let mut body = vec![0u8; size];
        self.read_exact(&mut body, deadline)?;
        Ok(Bytes::from(body))
    }

    fn read_exact(&mut self, buf: &mut [u8], deadline: Instant) -> Result<(), Outcome> {
        let stream = self.stream().map_err(|_| Outcome::Closed)?;
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
}
