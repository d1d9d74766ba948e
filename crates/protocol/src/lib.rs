//! The Kafka wire layer: frame codec, request decoding with guards, response encoding, and the
//! table of API versions Moldau implements.
//!
//! This is the only crate that names `kafka-protocol`; everything else uses the re-exports
//! below, so the codec can be swapped without touching handlers.

pub mod fetch_frame;
pub mod frame;
pub mod guard;
pub mod versions;

use bytes::{BufMut, Bytes, BytesMut};
pub use fetch_frame::encode_fetch_response;
pub use kafka_protocol::messages;
pub use kafka_protocol::messages::{
    ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind,
};
pub use kafka_protocol::protocol::StrBytes;
use kafka_protocol::protocol::{Decodable, Encodable};
pub use kafka_protocol::protocol::{Decodable as Decode, Encodable as Encode};

/// A decoded request.
#[derive(Debug)]
pub struct Request {
    pub header: RequestHeader,
    pub api_key: ApiKey,
    pub body: RequestKind,
}

impl Request {
    pub fn version(&self) -> i16 {
        self.header.request_api_version
    }

    pub fn correlation_id(&self) -> i32 {
        self.header.correlation_id
    }
}

/// Why a request frame could not be decoded. The connection decides what to do: answer
/// `UnsupportedVersion` of ApiVersions with a v0 error response; close on everything else.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("malformed request: {0}")]
    Malformed(String),
    #[error("unknown api key {api_key}")]
    UnknownApi { api_key: i16, correlation_id: i32 },
    #[error("unsupported version {version} of api {api_key}")]
    UnsupportedVersion {
        api_key: i16,
        version: i16,
        correlation_id: i32,
    },
}

/// A response could not be encoded (a handler set a field the version lacks: a bug).
#[derive(Debug, thiserror::Error)]
#[error("encode {api:?} v{version} response: {reason}")]
pub struct EncodeError {
    pub api: ApiKey,
    pub version: i16,
    pub reason: String,
}

/// The fixed prefix every request header starts with, readable before knowing the version.
fn raw_prefix(frame: &[u8]) -> Option<(i16, i16, i32)> {
    if frame.len() < 8 {
        return None;
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    Some((api_key, version, correlation_id))
}

/// Decodes one request frame (without its size prefix). The body is checked by [`guard`]
/// before `kafka-protocol` sees it, so claimed array lengths can't trigger huge allocations.
pub fn decode_request(frame: Bytes) -> Result<Request, RequestError> {
    decode_request_with(frame, versions::SUPPORTED)
}

/// The api key of a frame, read before anything else (private api keys are routed on it).
pub fn peek_api_key(frame: &[u8]) -> Option<i16> {
    raw_prefix(frame).map(|(api, _, _)| api)
}

/// Like [`decode_request`], serving the versions of `table` (a listener's own table).
pub fn decode_request_with(
    frame: Bytes,
    table: &[(ApiKey, i16, i16)],
) -> Result<Request, RequestError> {
    let (api_key_raw, version, correlation_id) = raw_prefix(&frame)
        .ok_or_else(|| RequestError::Malformed(format!("frame of {} bytes", frame.len())))?;
    let api_key = ApiKey::try_from(api_key_raw).map_err(|_| RequestError::UnknownApi {
        api_key: api_key_raw,
        correlation_id,
    })?;
    if !versions::is_supported_in(table, api_key, version) {
        return Err(RequestError::UnsupportedVersion {
            api_key: api_key_raw,
            version,
            correlation_id,
        });
    }
    let mut buf = frame;
    let header_version = api_key.request_header_version(version);
    let header = RequestHeader::decode(&mut buf, header_version)
        .map_err(|e| RequestError::Malformed(format!("request header: {e}")))?;
    // Bytes after the body are tolerated, as Kafka does: librdkafka 2.x sends a few extra
    // bytes after some Metadata v13 requests.
    guard::walk_request(api_key_raw, version, &buf)
        .map_err(|e| RequestError::Malformed(format!("{api_key:?} v{version}: {e}")))?;
    let body = RequestKind::decode(api_key, &mut buf, version)
        .map_err(|e| RequestError::Malformed(format!("{api_key:?} v{version}: {e:#}")))?;
    Ok(Request {
        header,
        api_key,
        body,
    })
}

/// Encodes a response frame, size prefix included, with the header version the API and
/// version call for (ApiVersions always uses header v0).
pub fn encode_response(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<Bytes, EncodeError> {
    let err = |reason: String| EncodeError {
        api,
        version,
        reason,
    };
    let mut out = BytesMut::with_capacity(256);
    out.put_i32(0);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    header
        .encode(&mut out, api.response_header_version(version))
        .map_err(|e| err(e.to_string()))?;
    body.encode(&mut out, version)
        .map_err(|e| err(format!("{e:#}")))?;
    let len = i32::try_from(out.len() - 4).map_err(|_| err("response over 2 GiB".into()))?;
    out[..4].copy_from_slice(&len.to_be_bytes());
    Ok(out.freeze())
}

/// The answer to an ApiVersions request at a version we don't know: a v0 response with
/// UNSUPPORTED_VERSION and our table, so the client can retry with a version we speak.
pub fn api_versions_fallback(correlation_id: i32) -> Bytes {
    let body = versions::api_versions_response(35);
    // v0 carries no field a fallback response sets beyond error and keys, so this can't fail.
    encode_response(
        ApiKey::ApiVersions,
        0,
        correlation_id,
        &ResponseKind::ApiVersions(body),
    )
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::protocol::Encodable;

    fn frame(api: ApiKey, version: i16, body: &impl Encodable) -> Bytes {
        let mut out = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .with_client_id(Some(StrBytes::from_static_str("t")))
            .encode(&mut out, api.request_header_version(version))
            .unwrap();
        body.encode(&mut out, version).unwrap();
        out.freeze()
    }

    #[test]
    fn decodes_a_metadata_request() {
        let body = messages::MetadataRequest::default();
        let req = decode_request(frame(ApiKey::Metadata, 12, &body)).unwrap();
        assert_eq!(req.correlation_id(), 7);
        assert!(matches!(req.body, RequestKind::Metadata(_)));
    }

    #[test]
    fn rejects_short_unknown_and_unsupported() {
        assert!(matches!(
            decode_request(Bytes::from_static(&[0, 1])),
            Err(RequestError::Malformed(_))
        ));
        assert!(matches!(
            decode_request(Bytes::from_static(&[0x7f, 0, 0, 0, 0, 0, 0, 1])),
            Err(RequestError::UnknownApi { .. })
        ));
        assert!(matches!(
            decode_request(Bytes::from_static(&[0, 18, 0, 99, 0, 0, 0, 1])),
            Err(RequestError::UnsupportedVersion { version: 99, .. })
        ));
    }

    #[test]
    fn fallback_is_a_v0_api_versions_response() {
        let b = api_versions_fallback(42);
        let mut body = b.slice(4..);
        let header = ResponseHeader::decode(&mut body, 0).unwrap();
        assert_eq!(header.correlation_id, 42);
        let resp = messages::ApiVersionsResponse::decode(&mut body, 0).unwrap();
        assert_eq!(resp.error_code, 35);
        assert!(!resp.api_keys.is_empty());
    }

    #[test]
    fn produce_with_huge_claimed_array_is_rejected_not_aborted() {
        // Produce v3: transactional_id (null), acks, timeout, then topics count = i32::MAX.
        let mut f = BytesMut::new();
        f.put_i16(0);
        f.put_i16(3);
        f.put_i32(1);
        f.put_i16(-1); // client id null
        f.put_i16(-1); // transactional id null
        f.put_i16(1);
        f.put_i32(1000);
        f.put_i32(i32::MAX);
        assert!(matches!(
            decode_request(f.freeze()),
            Err(RequestError::Malformed(_))
        ));
    }
}
