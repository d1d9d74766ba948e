//! The two private APIs of the CONTROLLER listener, in Kafka framing (a request header v1, a
//! response header v0) with bodies of our own bounded codec. Kafka has no API for raft-rs's
//! messages nor for a Raft observer that pulls only committed entries, so these are new; they
//! use api keys far outside Kafka's range and exist only on controller listeners.
//!
//! - `RaftMessages` (api key 32700, v0): a voter's raft messages to another voter.
//!   Request: `cluster_id` (u16-prefixed string, empty if not known yet), `count` (u32), then
//!   each message (u32-prefixed, [`crate::codec::encode_message`]). Response: `error_code`
//!   (i16).
//! - `MetadataFetch` (api key 32701, v0): an observer (broker-only node) asks a voter for
//!   committed metadata from `from` on, waiting up to `max_wait_ms` when there is none.
//!   Request: `cluster_id`, `node_id` (i32), `from` (u64), `max_bytes` (u32), `max_wait_ms`
//!   (u32). Response: `error_code` (i16), `leader_id` (u64), `term` (u64), `high_watermark`
//!   (u64), a snapshot flag (u8) and snapshot, `count` (u32) and entries.
//!
//! Both sides compare cluster ids when both know one: a mismatch is INCONSISTENT_CLUSTER_ID.

use crate::codec::{decode_message, encode_message, put_entry, put_snapshot, CodecError, Reader};
use crate::node::CommittedRead;
use bytes::{BufMut, Bytes, BytesMut};
use raft::eraftpb::Message;

/// Private api key: raft messages between voters.
pub const RAFT_MESSAGES_API: i16 = 32700;
/// Private api key: an observer's fetch of committed metadata.
pub const METADATA_FETCH_API: i16 = 32701;
/// The only version of both.
pub const WIRE_VERSION: i16 = 0;

fn put_str(out: &mut BytesMut, s: &str) {
    let b = s.as_bytes();
    out.put_u16(b.len().min(u16::MAX as usize) as u16);
    out.put_slice(&b[..b.len().min(u16::MAX as usize)]);
}

fn get_str(r: &mut Reader) -> Result<String, CodecError> {
    let n = r.u16()? as usize;
    let mut bytes = Vec::with_capacity(n.min(r.remaining()));
    for _ in 0..n {
        bytes.push(r.u8()?);
    }
    String::from_utf8(bytes).map_err(|_| CodecError("cluster id is not UTF-8"))
}

/// A batch of raft messages for one peer.
#[derive(Debug, Clone, PartialEq)]
pub struct RaftMessages {
    pub cluster_id: String,
    pub messages: Vec<Message>,
}

impl RaftMessages {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        put_str(&mut out, &self.cluster_id);
        out.put_u32(self.messages.len() as u32);
        for m in &self.messages {
            let b = encode_message(m);
            out.put_u32(b.len() as u32);
            out.put_slice(&b);
        }
        out.freeze()
    }

    pub fn decode(body: Bytes) -> Result<RaftMessages, CodecError> {
        let mut r = Reader::new(body);
        let cluster_id = get_str(&mut r)?;
        let n = r.count(4)?;
        let mut messages = Vec::with_capacity(n);
        for _ in 0..n {
            messages.push(decode_message(r.bytes()?)?);
        }
        if r.remaining() != 0 {
            return Err(CodecError("trailing bytes"));
        }
        Ok(RaftMessages {
            cluster_id,
            messages,
        })
    }
}

/// An observer's request for committed metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataFetch {
    pub cluster_id: String,
    pub node_id: i32,
    pub from: u64,
    pub max_bytes: u32,
    pub max_wait_ms: u32,
}

impl MetadataFetch {
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::new();
        put_str(&mut out, &self.cluster_id);
        out.put_i32(self.node_id);
        out.put_u64(self.from);
        out.put_u32(self.max_bytes);
        out.put_u32(self.max_wait_ms);
        out.freeze()
    }

    pub fn decode(body: Bytes) -> Result<MetadataFetch, CodecError> {
        let mut r = Reader::new(body);
        let cluster_id = get_str(&mut r)?;
        let node_id = r.u32()? as i32;
        let from = r.u64()?;
        let max_bytes = r.u32()?;
        let max_wait_ms = r.u32()?;
        if r.remaining() != 0 {
            return Err(CodecError("trailing bytes"));
        }
        Ok(MetadataFetch {
            cluster_id,
            node_id,
            from,
            max_bytes,
            max_wait_ms,
        })
    }
}

/// Encodes the answer to a [`MetadataFetch`].
pub fn encode_fetch_response(error_code: i16, read: &CommittedRead) -> Bytes {
    let mut out = BytesMut::new();
    out.put_i16(error_code);
    out.put_u64(read.leader_id);
    out.put_u64(read.term);
    out.put_u64(read.high_watermark);
    match &read.snapshot {
        Some(s) => {
            out.put_u8(1);
            put_snapshot(&mut out, s);
        }
        None => out.put_u8(0),
    }
    out.put_u32(read.entries.len() as u32);
    for e in &read.entries {
        put_entry(&mut out, e);
    }
    out.freeze()
}

/// Decodes the answer to a [`MetadataFetch`]: its error code and what it carried.
pub fn decode_fetch_response(body: Bytes) -> Result<(i16, CommittedRead), CodecError> {
    let mut r = Reader::new(body);
    let error = r.i16()?;
    let mut read = CommittedRead {
        leader_id: r.u64()?,
        term: r.u64()?,
        high_watermark: r.u64()?,
        ..CommittedRead::default()
    };
    if r.bool()? {
        read.snapshot = Some(r.snapshot()?);
    }
    // An entry takes at least 27 bytes.
    let n = r.count(27)?;
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        entries.push(r.entry()?);
    }
    read.entries = entries;
    if r.remaining() != 0 {
        return Err(CodecError("trailing bytes"));
    }
    Ok((error, read))
}

/// Encodes a response that is only an error code (RaftMessages).
pub fn encode_error(error_code: i16) -> Bytes {
    Bytes::copy_from_slice(&error_code.to_be_bytes())
}

/// Decodes a response that is only an error code.
pub fn decode_error(body: Bytes) -> Result<i16, CodecError> {
    let mut r = Reader::new(body);
    let e = r.i16()?;
    if r.remaining() != 0 {
        return Err(CodecError("trailing bytes"));
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use raft::eraftpb::{Entry, MessageType};

    #[test]
    fn private_apis_round_trip() {
        let mut m = Message::default();
        m.msg_type = MessageType::MsgHeartbeat;
        m.to = 2;
        m.from = 1;
        let rm = RaftMessages {
            cluster_id: "c1".into(),
            messages: vec![m.clone(), m],
        };
        assert_eq!(RaftMessages::decode(rm.encode()).unwrap(), rm);
        let f = MetadataFetch {
            cluster_id: String::new(),
            node_id: 4,
            from: 17,
            max_bytes: 1 << 20,
            max_wait_ms: 500,
        };
        assert_eq!(MetadataFetch::decode(f.encode()).unwrap(), f);
        let mut e = Entry::default();
        e.index = 17;
        e.term = 3;
        e.data = Bytes::from_static(b"\x01[]");
        let read = CommittedRead {
            entries: vec![e],
            high_watermark: 17,
            leader_id: 1,
            term: 3,
            snapshot: None,
        };
        let (code, back) = decode_fetch_response(encode_fetch_response(0, &read)).unwrap();
        assert_eq!(code, 0);
        assert_eq!(back.entries, read.entries);
        assert_eq!(back.high_watermark, 17);
        assert!(decode_fetch_response(Bytes::from_static(&[0, 0, 1])).is_err());
        assert!(RaftMessages::decode(Bytes::from_static(&[0, 0, 0x7f, 0xff, 0xff, 0xff])).is_err());
    }
}
