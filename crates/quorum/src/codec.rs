//! A bounded binary codec for raft-rs messages, so peers' bytes never reach a generic protobuf
//! decoder: every length is checked against the bytes that remain before anything is
//! allocated, and nothing here can panic on input.
//!
//! Layout (big-endian): the fixed fields of `eraftpb::Message`, then its entries, then an
//! optional snapshot. Entry and snapshot data are `u32` length-prefixed byte strings.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use raft::eraftpb::{ConfState, Entry, EntryType, Message, MessageType, Snapshot};

/// Why bytes are not a raft message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed raft message: {0}")]
pub struct CodecError(pub &'static str);

fn msg_type(v: u8) -> Result<MessageType, CodecError> {
    use MessageType::*;
    Ok(match v {
        0 => MsgHup,
        1 => MsgBeat,
        2 => MsgPropose,
        3 => MsgAppend,
        4 => MsgAppendResponse,
        5 => MsgRequestVote,
        6 => MsgRequestVoteResponse,
        7 => MsgSnapshot,
        8 => MsgHeartbeat,
        9 => MsgHeartbeatResponse,
        10 => MsgUnreachable,
        11 => MsgSnapStatus,
        12 => MsgCheckQuorum,
        13 => MsgTransferLeader,
        14 => MsgTimeoutNow,
        15 => MsgReadIndex,
        16 => MsgReadIndexResp,
        17 => MsgRequestPreVote,
        18 => MsgRequestPreVoteResponse,
        _ => return Err(CodecError("unknown message type")),
    })
}

fn entry_type(v: u8) -> Result<EntryType, CodecError> {
    Ok(match v {
        0 => EntryType::EntryNormal,
        1 => EntryType::EntryConfChange,
        2 => EntryType::EntryConfChangeV2,
        _ => return Err(CodecError("unknown entry type")),
    })
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_u32(b.len() as u32);
    out.put_slice(b);
}

fn put_ids(out: &mut BytesMut, ids: &[u64]) {
    out.put_u32(ids.len() as u32);
    for id in ids {
        out.put_u64(*id);
    }
}

/// Encodes one entry (also the on-disk form of an entry's body).
pub fn put_entry(out: &mut BytesMut, e: &Entry) {
    out.put_u8(e.entry_type as u8);
    out.put_u64(e.term);
    out.put_u64(e.index);
    put_bytes(out, &e.data);
    put_bytes(out, &e.context);
    out.put_u8(u8::from(e.sync_log));
}

/// Encodes a snapshot's metadata and data.
pub fn put_snapshot(out: &mut BytesMut, s: &Snapshot) {
    let m = s.get_metadata();
    out.put_u64(m.index);
    out.put_u64(m.term);
    let cs = m.get_conf_state();
    put_ids(out, &cs.voters);
    put_ids(out, &cs.learners);
    put_ids(out, &cs.voters_outgoing);
    put_ids(out, &cs.learners_next);
    out.put_u8(u8::from(cs.auto_leave));
    put_bytes(out, &s.data);
}

pub fn encode_message(m: &Message) -> Bytes {
    let mut out = BytesMut::with_capacity(96);
    out.put_u8(m.msg_type as u8);
    for v in [
        m.to,
        m.from,
        m.term,
        m.log_term,
        m.index,
        m.commit,
        m.commit_term,
        m.request_snapshot,
        m.reject_hint,
    ] {
        out.put_u64(v);
    }
    out.put_u8(u8::from(m.reject));
    out.put_i64(m.priority);
    put_bytes(&mut out, &m.context);
    out.put_u32(m.entries.len() as u32);
    for e in m.entries.iter() {
        put_entry(&mut out, e);
    }
    match m.snapshot.as_ref() {
        Some(s) => {
            out.put_u8(1);
            put_snapshot(&mut out, s);
        }
        None => out.put_u8(0),
    }
    out.freeze()
}

/// A cursor over untrusted bytes.
pub struct Reader {
    buf: Bytes,
}

impl Reader {
    pub fn new(buf: Bytes) -> Reader {
        Reader { buf }
    }

    pub fn remaining(&self) -> usize {
        self.buf.remaining()
    }

    fn need(&self, n: usize) -> Result<(), CodecError> {
        if self.buf.remaining() < n {
            return Err(CodecError("truncated"));
        }
        Ok(())
    }

    pub fn u8(&mut self) -> Result<u8, CodecError> {
        self.need(1)?;
        Ok(self.buf.get_u8())
    }

    pub fn u16(&mut self) -> Result<u16, CodecError> {
        self.need(2)?;
        Ok(self.buf.get_u16())
    }

    pub fn i16(&mut self) -> Result<i16, CodecError> {
        self.need(2)?;
        Ok(self.buf.get_i16())
    }

    pub fn u32(&mut self) -> Result<u32, CodecError> {
        self.need(4)?;
        Ok(self.buf.get_u32())
    }

    pub fn u64(&mut self) -> Result<u64, CodecError> {
        self.need(8)?;
        Ok(self.buf.get_u64())
    }

    pub fn i64(&mut self) -> Result<i64, CodecError> {
        self.need(8)?;
        Ok(self.buf.get_i64())
    }

    pub fn bytes(&mut self) -> Result<Bytes, CodecError> {
        let n = self.u32()? as usize;
        self.need(n)?;
        Ok(self.buf.split_to(n))
    }

    pub fn bool(&mut self) -> Result<bool, CodecError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(CodecError("bad boolean")),
        }
    }

    /// A count of elements each at least `min_bytes` long, checked against what remains.
    pub fn count(&mut self, min_bytes: usize) -> Result<usize, CodecError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_bytes) > self.remaining() {
            return Err(CodecError("count larger than the bytes that remain"));
        }
        Ok(n)
    }

    fn ids(&mut self) -> Result<Vec<u64>, CodecError> {
        let n = self.count(8)?;
        (0..n).map(|_| self.u64()).collect()
    }

    pub fn entry(&mut self) -> Result<Entry, CodecError> {
        let mut e = Entry::default();
        e.entry_type = entry_type(self.u8()?)?;
        e.term = self.u64()?;
        e.index = self.u64()?;
        e.data = self.bytes()?;
        e.context = self.bytes()?;
        e.sync_log = self.bool()?;
        Ok(e)
    }

    pub fn snapshot(&mut self) -> Result<Snapshot, CodecError> {
        let mut s = Snapshot::default();
        let index = self.u64()?;
        let term = self.u64()?;
        let cs = ConfState {
            voters: self.ids()?,
            learners: self.ids()?,
            voters_outgoing: self.ids()?,
            learners_next: self.ids()?,
            auto_leave: self.bool()?,
            ..Default::default()
        };
        s.data = self.bytes()?;
        let m = s.mut_metadata();
        m.index = index;
        m.term = term;
        m.set_conf_state(cs);
        Ok(s)
    }
}

/// Decodes a message written by [`encode_message`]; trailing bytes are an error.
pub fn decode_message(bytes: Bytes) -> Result<Message, CodecError> {
    let mut r = Reader::new(bytes);
    let mut m = Message::default();
    m.msg_type = msg_type(r.u8()?)?;
    m.to = r.u64()?;
    m.from = r.u64()?;
    m.term = r.u64()?;
    m.log_term = r.u64()?;
    m.index = r.u64()?;
    m.commit = r.u64()?;
    m.commit_term = r.u64()?;
    m.request_snapshot = r.u64()?;
    m.reject_hint = r.u64()?;
    m.reject = r.bool()?;
    m.priority = r.i64()?;
    m.context = r.bytes()?;
    // An entry takes at least 27 bytes.
    let n = r.count(27)?;
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        entries.push(r.entry()?);
    }
    m.set_entries(entries.into());
    if r.bool()? {
        m.set_snapshot(r.snapshot()?);
    }
    if r.remaining() != 0 {
        return Err(CodecError("trailing bytes"));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sample() -> Message {
        let mut m = Message::default();
        m.msg_type = MessageType::MsgAppend;
        m.to = 2;
        m.from = 1;
        m.term = 7;
        m.index = 10;
        m.commit = 9;
        let mut e = Entry::default();
        e.term = 7;
        e.index = 11;
        e.data = Bytes::from_static(b"\x01[]");
        m.set_entries(vec![e.clone(), e].into());
        let mut s = Snapshot::default();
        s.data = Bytes::from_static(b"snap");
        s.mut_metadata().index = 5;
        s.mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
        m.set_snapshot(s);
        m
    }

    #[test]
    fn round_trips() {
        let m = sample();
        assert_eq!(decode_message(encode_message(&m)).unwrap(), m);
        let empty = Message::default();
        assert_eq!(decode_message(encode_message(&empty)).unwrap(), empty);
    }

    proptest::proptest! {
        #[test]
        fn mutated_bytes_never_panic(pos in 0usize..400, byte in proptest::num::u8::ANY, cut in 0usize..400) {
            let mut b = encode_message(&sample()).to_vec();
            if pos < b.len() { b[pos] = byte; }
            b.truncate(cut.max(1));
            let _ = decode_message(Bytes::from(b));
        }
    }
}
