//! One connection to one node, for cluster-internal callers (brokers talking to the active
//! controller, voters talking to each other): typed Kafka requests at the negotiated version,
//! and requests whose body is already encoded (relayed as they came, or private api keys the
//! caller encodes itself), answered with the raw response body.

use crate::cluster::ClientConfig;
use crate::conn::{ConnConfig, Connection};
use crate::error::Result;
use crate::rpc::Rpc;
use bytes::Bytes;
use std::time::Duration;

/// See the module docs. Dropping it closes the connection.
#[derive(Debug)]
pub struct NodeLink {
    conn: Connection,
}

impl NodeLink {
    /// Connects and negotiates API versions.
    pub async fn connect(addr: &str, config: &ClientConfig) -> Result<NodeLink> {
        let conn = Connection::open(addr, ConnConfig::from_client(config)).await?;
        Ok(NodeLink { conn })
    }

    pub fn addr(&self) -> &str {
        self.conn.addr()
    }

    /// Whether the connection failed (a new one is needed).
    pub fn is_closed(&self) -> bool {
        self.conn.is_closed()
    }

    /// The versions the node advertised for `api_key`.
    pub fn versions(&self, api_key: i16) -> Option<(i16, i16)> {
        self.conn.advertised(api_key)
    }

    /// Sends a typed request at the highest version both sides support.
    pub async fn call<R: Rpc>(&self, req: &R) -> Result<R::Response> {
        self.conn.send(req).await
    }

    /// Sends a request body already encoded at `version` and returns the response body
    /// (after its header), undecoded. Kafka api keys use their header versions; other (private)
    /// keys use request header v1 and response header v0.
    pub async fn call_encoded(
        &self,
        api_key: i16,
        version: i16,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Bytes> {
        self.conn
            .send_encoded(api_key, version, body, timeout)
            .await
    }
}
