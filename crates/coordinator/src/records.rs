//! Kafka's own binary key/value formats for `__consumer_offsets` records (OffsetCommitKey /
//! OffsetCommitValue, GroupMetadataKey / GroupMetadataValue) and the consumer protocol
//! subscription header. Decoding is bounded and panic-free: every length is checked against the
//! bytes that remain before anything is allocated for it.
//!
//! Layout (all big-endian, each key and value prefixed by an `i16` schema version):
//! - key v0/v1 = offset commit: `group: string, topic: string, partition: i32`
//! - key v2 = group metadata: `group: string`
//! - offset value v0: `offset i64, metadata string, timestamp i64`; v1 adds `expire_timestamp`
//!   after the commit timestamp; v2 drops it again; v3 adds `leader_epoch i32` after the offset;
//!   v4 is v3 in the flexible (compact + tagged fields) encoding.
//! - group value: `protocol_type string, generation i32, protocol string?, leader string?,
//!   current_state_timestamp i64 (v2+), members []` with members
//!   `member_id, group_instance_id? (v3+), client_id, client_host, rebalance_timeout i32 (v1+),
//!   session_timeout i32, subscription bytes, assignment bytes`; v4 is flexible.
//!
//! Moldau writes offset keys as v1, offset values as v3 (v1 when an explicit expire timestamp
//! came from OffsetCommit v2-v4), group keys as v2 and group values as v3, as Kafka does.

use bytes::{BufMut, Bytes, BytesMut};

use crate::Error;

/// The key of a `__consumer_offsets` record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordKey {
    /// A committed offset of one partition for a group.
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    /// The membership metadata of a group.
    Group { group: String },
    /// A record type this coordinator does not know (for example the KIP-848 consumer group
    /// records Kafka 4 writes); replay skips it.
    Unknown { version: i16 },
}

impl RecordKey {
    /// The group the record belongs to, if known.
    pub fn group(&self) -> Option<&str> {
        match self {
            RecordKey::Offset { group, .. } | RecordKey::Group { group } => Some(group),
            RecordKey::Unknown { .. } => None,
        }
    }
}

/// A committed offset as stored in an OffsetCommitValue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    /// -1 when unknown.
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// Only from OffsetCommit v2-v4 with an explicit retention time.
    pub expire_timestamp_ms: Option<i64>,
}

/// One member in a GroupMetadataValue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberValue {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's metadata for the group's selected protocol.
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// The group metadata as stored in a GroupMetadataValue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupValue {
    /// Empty when the group has no protocol type (Kafka writes "" for none).
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    /// When the group entered its current state; None is written as -1.
    pub current_state_timestamp_ms: Option<i64>,
    pub members: Vec<MemberValue>,
}

const OFFSET_KEY_VERSION: i16 = 1;
const GROUP_KEY_VERSION: i16 = 2;
const GROUP_VALUE_VERSION: i16 = 3;

/// Encodes an offset commit key (version 1).
pub fn encode_offset_key(group: &str, topic: &str, partition: i32) -> Bytes {
    let mut b = BytesMut::with_capacity(2 + 2 + group.len() + 2 + topic.len() + 4);
    b.put_i16(OFFSET_KEY_VERSION);
    put_string(&mut b, group);
    put_string(&mut b, topic);
    b.put_i32(partition);
    b.freeze()
}

/// Encodes a group metadata key (version 2).
pub fn encode_group_key(group: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(4 + group.len());
    b.put_i16(GROUP_KEY_VERSION);
    put_string(&mut b, group);
    b.freeze()
}

/// Encodes an offset commit value: v3, or v1 when it carries an expire timestamp (v3 has none).
pub fn encode_offset_value(v: &OffsetValue) -> Bytes {
    let mut b = BytesMut::with_capacity(32 + v.metadata.len());
    match v.expire_timestamp_ms {
        Some(expire) => {
            b.put_i16(1);
            b.put_i64(v.offset);
            put_string(&mut b, &v.metadata);
            b.put_i64(v.commit_timestamp_ms);
            b.put_i64(expire);
        }
        None => {
            b.put_i16(3);
            b.put_i64(v.offset);
            b.put_i32(v.leader_epoch);
            put_string(&mut b, &v.metadata);
            b.put_i64(v.commit_timestamp_ms);
        }
    }
    b.freeze()
}

/// Encodes a group metadata value (version 3).
pub fn encode_group_value(v: &GroupValue) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    b.put_i16(GROUP_VALUE_VERSION);
    put_string(&mut b, &v.protocol_type);
    b.put_i32(v.generation);
    put_nullable_string(&mut b, v.protocol.as_deref());
    put_nullable_string(&mut b, v.leader.as_deref());
    b.put_i64(v.current_state_timestamp_ms.unwrap_or(-1));
    b.put_i32(i32::try_from(v.members.len()).unwrap_or(i32::MAX));
    for m in &v.members {
        put_string(&mut b, &m.member_id);
        put_nullable_string(&mut b, m.group_instance_id.as_deref());
        put_string(&mut b, &m.client_id);
        put_string(&mut b, &m.client_host);
        b.put_i32(m.rebalance_timeout_ms);
        b.put_i32(m.session_timeout_ms);
        put_bytes(&mut b, &m.subscription);
        put_bytes(&mut b, &m.assignment);
    }
    b.freeze()
}

/// Decodes a record key.
pub fn decode_key(bytes: &[u8]) -> Result<RecordKey, Error> {
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    match version {
        0 | 1 => {
            let group = r.string()?;
            let topic = r.string()?;
            let partition = r.i32()?;
            Ok(RecordKey::Offset {
                group,
                topic,
                partition,
            })
        }
        2 => Ok(RecordKey::Group { group: r.string()? }),
        version => Ok(RecordKey::Unknown { version }),
    }
}

/// Decodes an offset commit value (versions 0-4).
pub fn decode_offset_value(bytes: &[u8]) -> Result<OffsetValue, Error> {
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    if !(0..=4).contains(&version) {
        return Err(Error::UnsupportedVersion {
            what: "offset commit value",
            version,
        });
    }
    r.flexible = version >= 4;
    let offset = r.i64()?;
    let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
    let metadata = r.string()?;
    let commit_timestamp_ms = r.i64()?;
    let expire = if version == 1 { r.i64()? } else { -1 };
    r.tagged_fields()?;
    Ok(OffsetValue {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp_ms,
        expire_timestamp_ms: (expire >= 0).then_some(expire),
    })
}

/// Decodes a group metadata value (versions 0-4).
pub fn decode_group_value(bytes: &[u8]) -> Result<GroupValue, Error> {
    let mut r = Reader::new(bytes);
    let version = r.i16()?;
    if !(0..=4).contains(&version) {
        return Err(Error::UnsupportedVersion {
            what: "group metadata value",
            version,
        });
    }
    r.flexible = version >= 4;
    let protocol_type = r.string()?;
    let generation = r.i32()?;
    let protocol = r.nullable_string()?;
    let leader = r.nullable_string()?;
    let ts = if version >= 2 { r.i64()? } else { -1 };
    // A member takes at least 4 strings + 2 ints + 2 byte arrays of encoded lengths.
    let count = r.array_len(14)?;
    let mut members = Vec::with_capacity(count);
    for _ in 0..count {
        let member_id = r.string()?;
        let group_instance_id = if version >= 3 {
            r.nullable_string()?
        } else {
            None
        };
        let client_id = r.string()?;
        let client_host = r.string()?;
        let rebalance_timeout = if version >= 1 { Some(r.i32()?) } else { None };
        let session_timeout_ms = r.i32()?;
        let subscription = r.bytes()?;
        let assignment = r.bytes()?;
        r.tagged_fields()?;
        members.push(MemberValue {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms: rebalance_timeout.unwrap_or(session_timeout_ms),
            session_timeout_ms,
            subscription,
            assignment,
        });
    }
    r.tagged_fields()?;
    Ok(GroupValue {
        protocol_type,
        generation,
        protocol,
        leader,
        current_state_timestamp_ms: (ts >= 0).then_some(ts),
        members,
    })
}

/// The topics of a consumer protocol subscription (`ConsumerProtocolSubscription`, any
/// version: `version i16, topics [string], ...`). None when the bytes are not one.
pub fn subscription_topics(metadata: &[u8]) -> Option<Vec<String>> {
    let mut r = Reader::new(metadata);
    let version = r.i16().ok()?;
    if version < 0 {
        return None;
    }
    let count = r.array_len(2).ok()?;
    let mut topics = Vec::with_capacity(count);
    for _ in 0..count {
        topics.push(r.string().ok()?);
    }
    Some(topics)
}

pub(crate) fn put_string(b: &mut BytesMut, s: &str) {
    // Kafka strings are at most i16::MAX bytes; longer ones are cut at a char boundary so the
    // record stays decodable (group ids and topics are far below this in practice).
    let s = truncate_utf8(s, i16::MAX as usize);
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
}

pub(crate) fn put_nullable_string(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(b, s),
        None => b.put_i16(-1),
    }
}

pub(crate) fn put_bytes(b: &mut BytesMut, v: &[u8]) {
    b.put_i32(i32::try_from(v.len()).unwrap_or(i32::MAX));
    b.put_slice(v);
}

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A bounds-checked big-endian reader; `flexible` switches to compact lengths.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pub(crate) flexible: bool,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            flexible: false,
        }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if n > self.buf.len() {
            return Err(Error::Corrupt("truncated record"));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(crate) fn i16(&mut self) -> Result<i16, Error> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, Error> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, Error> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    pub(crate) fn varint(&mut self) -> Result<u32, Error> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let b = self.array::<1>()?[0];
            value |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Error::Corrupt("varint too long"))
    }

    /// A length: -1 means null.
    pub(crate) fn len(&mut self, wide: bool) -> Result<i64, Error> {
        if self.flexible {
            Ok(i64::from(self.varint()?) - 1)
        } else if wide {
            Ok(i64::from(self.i32()?))
        } else {
            Ok(i64::from(self.i16()?))
        }
    }

    pub(crate) fn nullable_string(&mut self) -> Result<Option<String>, Error> {
        let len = self.len(false)?;
        if len < 0 {
            return Ok(None);
        }
        let raw = self.take(usize::try_from(len).map_err(|_| Error::Corrupt("length"))?)?;
        std::str::from_utf8(raw)
            .map(|s| Some(s.to_string()))
            .map_err(|_| Error::Corrupt("string is not UTF-8"))
    }

    pub(crate) fn string(&mut self) -> Result<String, Error> {
        self.nullable_string()?
            .ok_or(Error::Corrupt("null in a non-nullable string"))
    }

    fn bytes(&mut self) -> Result<Bytes, Error> {
        let len = self.len(true)?;
        if len < 0 {
            return Ok(Bytes::new());
        }
        let raw = self.take(usize::try_from(len).map_err(|_| Error::Corrupt("length"))?)?;
        Ok(Bytes::copy_from_slice(raw))
    }

    /// An array length, checked against the bytes left given each element's minimum size.
    pub(crate) fn array_len(&mut self, min_element_bytes: usize) -> Result<usize, Error> {
        let len = self.len(true)?;
        if len < 0 {
            return Ok(0);
        }
        let len = usize::try_from(len).map_err(|_| Error::Corrupt("length"))?;
        if len.saturating_mul(min_element_bytes.max(1)) > self.buf.len() {
            return Err(Error::Corrupt("array longer than the record"));
        }
        Ok(len)
    }

    /// Reads a tagged-field section, handing each (tag, bytes) to `f`; nothing when not
    /// flexible.
    pub(crate) fn tagged_fields_with(
        &mut self,
        mut f: impl FnMut(u32, &[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        if !self.flexible {
            return Ok(());
        }
        let count = self.varint()?;
        for _ in 0..count {
            let tag = self.varint()?;
            let size = self.varint()?;
            let data = self.take(size as usize)?;
            f(tag, data)?;
        }
        Ok(())
    }

    pub(crate) fn tagged_fields(&mut self) -> Result<(), Error> {
        if !self.flexible {
            return Ok(());
        }
        let count = self.varint()?;
        for _ in 0..count {
            let _tag = self.varint()?;
            let size = self.varint()?;
            self.take(size as usize)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn offset_key_golden_bytes() {
        let k = encode_offset_key("g", "t", 3);
        assert_eq!(&k[..], &[0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 3]);
        assert_eq!(
            decode_key(&k).ok(),
            Some(RecordKey::Offset {
                group: "g".into(),
                topic: "t".into(),
                partition: 3
            })
        );
    }

    #[test]
    fn offset_value_v3_golden_bytes() {
        let v = OffsetValue {
            offset: 5,
            leader_epoch: 2,
            metadata: "m".into(),
            commit_timestamp_ms: 7,
            expire_timestamp_ms: None,
        };
        let b = encode_offset_value(&v);
        assert_eq!(
            &b[..],
            &[0, 3, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 2, 0, 1, b'm', 0, 0, 0, 0, 0, 0, 0, 7]
        );
        assert_eq!(decode_offset_value(&b).ok(), Some(v));
    }

    #[test]
    fn group_key_and_value_v3_golden_bytes() {
        assert_eq!(&encode_group_key("g")[..], &[0, 2, 0, 1, b'g']);
        let v = GroupValue {
            protocol_type: "consumer".into(),
            generation: 2,
            protocol: Some("range".into()),
            leader: None,
            current_state_timestamp_ms: Some(9),
            members: vec![MemberValue {
                member_id: "m".into(),
                group_instance_id: None,
                client_id: "c".into(),
                client_host: "/h".into(),
                rebalance_timeout_ms: 300,
                session_timeout_ms: 100,
                subscription: Bytes::from_static(b"S"),
                assignment: Bytes::new(),
            }],
        };
        let mut want: Vec<u8> = vec![0, 3, 0, 8];
        want.extend_from_slice(b"consumer");
        want.extend_from_slice(&[0, 0, 0, 2, 0, 5]);
        want.extend_from_slice(b"range");
        want.extend_from_slice(&[0xff, 0xff]); // null leader
        want.extend_from_slice(&9i64.to_be_bytes());
        want.extend_from_slice(&[
            0, 0, 0, 1, 0, 1, b'm', 0xff, 0xff, 0, 1, b'c', 0, 2, b'/', b'h',
        ]);
        want.extend_from_slice(&300i32.to_be_bytes());
        want.extend_from_slice(&100i32.to_be_bytes());
        want.extend_from_slice(&[0, 0, 0, 1, b'S', 0, 0, 0, 0]);
        let b = encode_group_value(&v);
        assert_eq!(&b[..], &want[..]);
        assert_eq!(decode_group_value(&b).ok(), Some(v));
        // v0 (no rebalance timeout, no timestamp): the rebalance timeout falls back to the
        // session timeout.
        let mut v0: Vec<u8> = vec![0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1];
        v0.extend_from_slice(&[0, 1, b'm', 0, 1, b'c', 0, 1, b'h']);
        v0.extend_from_slice(&50i32.to_be_bytes());
        v0.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        let d = decode_group_value(&v0).ok();
        assert_eq!(
            d.map(|d| (
                d.members[0].rebalance_timeout_ms,
                d.current_state_timestamp_ms
            )),
            Some((50, None))
        );
    }

    #[test]
    fn flexible_offset_value_v4_decodes() {
        // version 4, offset 9, epoch -1, compact "ab", ts 1, no tagged fields
        let mut b = vec![0, 4];
        b.extend_from_slice(&9i64.to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&[3, b'a', b'b']);
        b.extend_from_slice(&1i64.to_be_bytes());
        b.push(0);
        let v = decode_offset_value(&b).ok();
        assert_eq!(
            v.map(|v| (v.offset, v.metadata)),
            Some((9, "ab".to_string()))
        );
    }

    #[test]
    fn subscription_topics_parse() {
        let mut b = vec![0, 1, 0, 0, 0, 2, 0, 1, b'a', 0, 2, b'b', b'c'];
        b.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(
            subscription_topics(&b),
            Some(vec!["a".to_string(), "bc".to_string()])
        );
        assert_eq!(subscription_topics(&[0, 1, 0x7f, 0, 0, 0]), None);
    }

    fn arb_string() -> impl Strategy<Value = String> {
        "[a-z0-9._-]{0,12}"
    }

    proptest! {
        #[test]
        fn group_value_round_trips(
            protocol_type in arb_string(),
            generation in any::<i32>(),
            protocol in proptest::option::of(arb_string()),
            leader in proptest::option::of(arb_string()),
            ts in proptest::option::of(0i64..i64::MAX),
            members in proptest::collection::vec(
                (arb_string(), proptest::option::of(arb_string()), arb_string(), arb_string(),
                 any::<i32>(), any::<i32>(), proptest::collection::vec(any::<u8>(), 0..20),
                 proptest::collection::vec(any::<u8>(), 0..20)), 0..5),
        ) {
            let v = GroupValue {
                protocol_type, generation, protocol, leader, current_state_timestamp_ms: ts,
                members: members.into_iter().map(|(m, i, c, h, r, s, sub, a)| MemberValue {
                    member_id: m, group_instance_id: i, client_id: c, client_host: h,
                    rebalance_timeout_ms: r, session_timeout_ms: s,
                    subscription: Bytes::from(sub), assignment: Bytes::from(a),
                }).collect(),
            };
            let b = encode_group_value(&v);
            prop_assert_eq!(decode_group_value(&b).ok(), Some(v));
        }

        #[test]
        fn offset_value_round_trips(offset in any::<i64>(), epoch in any::<i32>(),
                                    metadata in arb_string(), ts in any::<i64>(),
                                    expire in proptest::option::of(0i64..i64::MAX)) {
            let v = OffsetValue {
                offset,
                leader_epoch: if expire.is_some() { -1 } else { epoch },
                metadata, commit_timestamp_ms: ts, expire_timestamp_ms: expire,
            };
            prop_assert_eq!(decode_offset_value(&encode_offset_value(&v)).ok(), Some(v));
        }

        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_key(&bytes);
            let _ = decode_offset_value(&bytes);
            let _ = decode_group_value(&bytes);
            let _ = subscription_topics(&bytes);
        }
    }
}
