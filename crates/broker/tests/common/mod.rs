//! Helpers shared by the broker's wire tests: a broker config on a free port, request
//! framing, and one-call request/response over a real socket.
#![allow(dead_code, clippy::unwrap_used)]

use bytes::{BufMut, Bytes, BytesMut};
use model::BrokerConfig;
use protocol::messages::{ApiVersionsRequest, MetadataRequest, TopicName};
use protocol::{ApiKey, Decode, Encode, RequestHeader, ResponseHeader, StrBytes};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const DEADLINE: Duration = Duration::from_secs(10);

/// A broker config on a free port with its data in `dir`, plus `extra` settings.
pub fn config(dir: &std::path::Path, extra: &[(&str, &str)]) -> BrokerConfig {
    let mut props = BTreeMap::new();
    props.insert("listeners".to_string(), "127.0.0.1:0".to_string());
    props.insert("log.dirs".to_string(), dir.display().to_string());
    for (k, v) in extra {
        props.insert(k.to_string(), v.to_string());
    }
    BrokerConfig::from_props(props).unwrap()
}

/// Metadata for one topic, creating it if needed.
pub fn metadata_request(topic: &'static str) -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(Some(vec![
            protocol::messages::metadata_request::MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str(topic)))),
        ]))
        .with_allow_auto_topic_creation(true)
}

pub fn frame(api: ApiKey, version: i16, correlation_id: i32, body: &impl Encode) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("wire-test")))
        .encode(&mut out, api.request_header_version(version))
        .unwrap();
    body.encode(&mut out, version).unwrap();
    let len = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&len.to_be_bytes());
    out.freeze()
}

/// Reads one response frame; None if the broker closed the connection.
pub async fn read_response(s: &mut TcpStream) -> Option<Bytes> {
    let read = async {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).await.ok()?;
        let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
        s.read_exact(&mut buf).await.ok()?;
        Some(Bytes::from(buf))
    };
    tokio::time::timeout(DEADLINE, read)
        .await
        .expect("response in time")
}

pub async fn call<R: Decode>(
    s: &mut TcpStream,
    api: ApiKey,
    version: i16,
    body: &impl Encode,
) -> R {
    s.write_all(&frame(api, version, 42, body)).await.unwrap();
    let mut resp = read_response(s).await.expect("a response");
    let header = ResponseHeader::decode(&mut resp, api.response_header_version(version)).unwrap();
    assert_eq!(header.correlation_id, 42);
    R::decode(&mut resp, version).unwrap()
}

pub async fn still_serving(addr: std::net::SocketAddr) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let r: protocol::messages::ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        // Kafka refuses v3+ requests without a valid client software name (INVALID_REQUEST).
        &ApiVersionsRequest::default()
            .with_client_software_name(protocol::StrBytes::from_static_str("wire-test"))
            .with_client_software_version(protocol::StrBytes::from_static_str("1.0")),
    )
    .await;
    assert_eq!(r.error_code, 0);
    assert!(!r.api_keys.is_empty());
}
