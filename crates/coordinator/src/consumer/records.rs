//! Kafka's `__consumer_offsets` record types for consumer-protocol (KIP-848) groups, so Kafka's
//! tools can read what Moldau writes and Moldau can replay what Kafka 4 wrote:
//!
//! | key version | key                                   | value (flexible v0)                          |
//! |-------------|---------------------------------------|----------------------------------------------|
//! | 3           | ConsumerGroupMetadataKey(group)       | Epoch i32 (+ tagged MetadataHash, ignored)   |
//! | 4           | ConsumerGroupPartitionMetadataKey     | Topics [TopicId, TopicName, NumPartitions, PartitionMetadata [Partition, Racks []]] |
//! | 5           | ConsumerGroupMemberMetadataKey(g, m)  | InstanceId?, RackId?, ClientId, ClientHost, SubscribedTopicNames [], SubscribedTopicRegex?, RebalanceTimeoutMs, ServerAssignor?, tag 0: ClassicMemberMetadata? |
//! | 6           | ConsumerGroupTargetAssignmentMetadataKey | AssignmentEpoch i32                       |
//! | 7           | ConsumerGroupTargetAssignmentMemberKey(g, m) | TopicPartitions [TopicId, Partitions []] |
//! | 8           | ConsumerGroupCurrentMemberAssignmentKey(g, m) | MemberEpoch, PreviousMemberEpoch, State i8, AssignedPartitions [], PartitionsPendingRevocation [] |
//! | 16          | ConsumerGroupRegularExpressionKey(g, regex) | Topics [string], Version i64, Timestamp i64 |
//!
//! Keys are non-flexible (`i16` version, then `i16`-length strings); values are an `i16`
//! version followed by the flexible encoding (compact lengths, tagged-field sections). A
//! missing value is a tombstone. Decoding is bounded and never panics; unknown tagged fields
//! (later Kafka versions add some) are skipped.
//!
//! Also here: the consumer embedded protocol (`ConsumerProtocolSubscription`,
//! `ConsumerProtocolAssignment`) that classic members of a consumer group speak in
//! JoinGroup/SyncGroup.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{BufMut, Bytes, BytesMut};
use model::TopicId;

use crate::records::Reader;
use crate::Error;

/// Partitions per topic id, ordered (so records and responses are deterministic).
pub type Assignment = BTreeMap<TopicId, BTreeSet<i32>>;

/// The epoch at which a member was given each partition it holds (KIP-1251): an offset
/// commit with an older member epoch is accepted for a partition held since that epoch.
pub type AssignmentEpochs = BTreeMap<(TopicId, i32), i32>;

pub const GROUP_METADATA_KEY: i16 = 3;
pub const PARTITION_METADATA_KEY: i16 = 4;
pub const MEMBER_METADATA_KEY: i16 = 5;
pub const TARGET_ASSIGNMENT_METADATA_KEY: i16 = 6;
pub const TARGET_ASSIGNMENT_MEMBER_KEY: i16 = 7;
pub const CURRENT_MEMBER_ASSIGNMENT_KEY: i16 = 8;
pub const REGULAR_EXPRESSION_KEY: i16 = 16;

/// Whether a key version is one of the consumer group record types above.
pub fn is_consumer_group_key(version: i16) -> bool {
    matches!(version, 3..=8 | 16)
}

/// The reconciliation state of a member (Kafka's `MemberState`, persisted as an `i8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemberState {
    /// The member owns exactly what it should at its epoch.
    Stable,
    /// The member must revoke partitions before it can move to the next epoch.
    UnrevokedPartitions,
    /// The member waits for partitions other members still own.
    UnreleasedPartitions,
    /// A state a newer coordinator wrote; the member is fenced and rejoins.
    Unknown,
}

impl MemberState {
    pub fn value(self) -> i8 {
        match self {
            MemberState::Stable => 0,
            MemberState::UnrevokedPartitions => 1,
            MemberState::UnreleasedPartitions => 2,
            MemberState::Unknown => 127,
        }
    }

    pub fn from_value(v: i8) -> MemberState {
        match v {
            0 => MemberState::Stable,
            1 => MemberState::UnrevokedPartitions,
            2 => MemberState::UnreleasedPartitions,
            _ => MemberState::Unknown,
        }
    }

    /// Kafka's name (`ConsumerGroupDescribe` does not carry it; logs and the CLI do).
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Stable => "stable",
            MemberState::UnrevokedPartitions => "unrevoked_partitions",
            MemberState::UnreleasedPartitions => "unreleased_partitions",
            MemberState::Unknown => "unknown",
        }
    }
}

/// The classic-protocol part of a member that joined through JoinGroup (a mixed group).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassicMemberMetadata {
    pub session_timeout_ms: i32,
    /// (protocol name, subscription metadata), in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
}

/// ConsumerGroupMemberMetadataValue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberMetadata {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Sorted, without duplicates.
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    /// -1 when never given.
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    pub classic: Option<ClassicMemberMetadata>,
}

/// ConsumerGroupCurrentMemberAssignmentValue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CurrentAssignment {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    pub assigned: Assignment,
    pub pending_revocation: Assignment,
    /// Per held partition (assigned and pending revocation), the epoch it was assigned at;
    /// Kafka's tagged `AssignmentEpochs` (4.3+). Records without it read as the member epoch.
    pub epochs: AssignmentEpochs,
}

/// One topic of ConsumerGroupPartitionMetadataValue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicMetadata {
    pub id: TopicId,
    pub name: String,
    pub partitions: i32,
    /// (partition, racks) for partitions with known racks.
    pub racks: Vec<(i32, Vec<String>)>,
}

/// ConsumerGroupRegularExpressionValue: what a subscription regex resolved to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedRegex {
    pub topics: BTreeSet<String>,
    /// The metadata version it was resolved against (Moldau: a counter of topic images).
    pub version: i64,
    pub timestamp_ms: i64,
}

/// One consumer group record, keyed and typed. `None` values are tombstones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CgRecord {
    GroupEpoch {
        group: String,
        epoch: Option<i32>,
    },
    SubscriptionMetadata {
        group: String,
        topics: Option<BTreeMap<String, TopicMetadata>>,
    },
    Member {
        group: String,
        member: String,
        value: Option<MemberMetadata>,
    },
    TargetEpoch {
        group: String,
        epoch: Option<i32>,
    },
    TargetMember {
        group: String,
        member: String,
        value: Option<Assignment>,
    },
    Current {
        group: String,
        member: String,
        value: Option<CurrentAssignment>,
    },
    Regex {
        group: String,
        regex: String,
        value: Option<ResolvedRegex>,
    },
}

impl CgRecord {
    pub fn group(&self) -> &str {
        match self {
            CgRecord::GroupEpoch { group, .. }
            | CgRecord::SubscriptionMetadata { group, .. }
            | CgRecord::Member { group, .. }
            | CgRecord::TargetEpoch { group, .. }
            | CgRecord::TargetMember { group, .. }
            | CgRecord::Current { group, .. }
            | CgRecord::Regex { group, .. } => group,
        }
    }

    /// The record's key and value bytes (value None = tombstone).
    pub fn encode(&self) -> (Bytes, Option<Bytes>) {
        match self {
            CgRecord::GroupEpoch { group, epoch } => (
                key(GROUP_METADATA_KEY, group, None),
                epoch.map(|e| {
                    let mut w = FlexWriter::new();
                    w.i32(e);
                    w.no_tags();
                    w.finish()
                }),
            ),
            CgRecord::SubscriptionMetadata { group, topics } => (
                key(PARTITION_METADATA_KEY, group, None),
                topics.as_ref().map(|topics| {
                    let mut w = FlexWriter::new();
                    w.len(topics.len());
                    for t in topics.values() {
                        w.uuid(&t.id);
                        w.string(&t.name);
                        w.i32(t.partitions);
                        w.len(t.racks.len());
                        for (p, racks) in &t.racks {
                            w.i32(*p);
                            w.len(racks.len());
                            for r in racks {
                                w.string(r);
                            }
                            w.no_tags();
                        }
                        w.no_tags();
                    }
                    w.no_tags();
                    w.finish()
                }),
            ),
            CgRecord::Member {
                group,
                member,
                value,
            } => (
                key(MEMBER_METADATA_KEY, group, Some(member)),
                value.as_ref().map(encode_member),
            ),
            CgRecord::TargetEpoch { group, epoch } => (
                key(TARGET_ASSIGNMENT_METADATA_KEY, group, None),
                epoch.map(|e| {
                    let mut w = FlexWriter::new();
                    w.i32(e);
                    w.no_tags();
                    w.finish()
                }),
            ),
            CgRecord::TargetMember {
                group,
                member,
                value,
            } => (
                key(TARGET_ASSIGNMENT_MEMBER_KEY, group, Some(member)),
                value.as_ref().map(|a| {
                    let mut w = FlexWriter::new();
                    w.assignment(a);
                    w.no_tags();
                    w.finish()
                }),
            ),
            CgRecord::Current {
                group,
                member,
                value,
            } => (
                key(CURRENT_MEMBER_ASSIGNMENT_KEY, group, Some(member)),
                value.as_ref().map(|c| {
                    let mut w = FlexWriter::new();
                    w.i32(c.member_epoch);
                    w.i32(c.previous_member_epoch);
                    w.b.put_i8(c.state.value());
                    w.assignment_with_epochs(&c.assigned, &c.epochs);
                    w.assignment_with_epochs(&c.pending_revocation, &c.epochs);
                    w.no_tags();
                    w.finish()
                }),
            ),
            CgRecord::Regex {
                group,
                regex,
                value,
            } => (
                key(REGULAR_EXPRESSION_KEY, group, Some(regex)),
                value.as_ref().map(|r| {
                    let mut w = FlexWriter::new();
                    w.len(r.topics.len());
                    for t in &r.topics {
                        w.string(t);
                    }
                    w.b.put_i64(r.version);
                    w.b.put_i64(r.timestamp_ms);
                    w.no_tags();
                    w.finish()
                }),
            ),
        }
    }

    /// Decodes a consumer group record. `Ok(None)` when the key is not a consumer group
    /// record type.
    pub fn decode(key_bytes: &[u8], value: Option<&[u8]>) -> Result<Option<CgRecord>, Error> {
        let mut k = Reader::new(key_bytes);
        let version = k.i16()?;
        if !is_consumer_group_key(version) {
            return Ok(None);
        }
        let group = k.string()?;
        let second = match version {
            MEMBER_METADATA_KEY
            | TARGET_ASSIGNMENT_MEMBER_KEY
            | CURRENT_MEMBER_ASSIGNMENT_KEY
            | REGULAR_EXPRESSION_KEY => k.string()?,
            _ => String::new(),
        };
        let mut v = match value {
            Some(bytes) => {
                let mut r = Reader::new(bytes);
                let value_version = r.i16()?;
                if value_version != 0 {
                    return Err(Error::UnsupportedVersion {
                        what: "consumer group record value",
                        version: value_version,
                    });
                }
                r.flexible = true;
                Some(r)
            }
            None => None,
        };
        let rec = match version {
            GROUP_METADATA_KEY => CgRecord::GroupEpoch {
                group,
                epoch: v.as_mut().map(epoch_value).transpose()?,
            },
            TARGET_ASSIGNMENT_METADATA_KEY => CgRecord::TargetEpoch {
                group,
                epoch: v.as_mut().map(epoch_value).transpose()?,
            },
            PARTITION_METADATA_KEY => CgRecord::SubscriptionMetadata {
                group,
                topics: v.as_mut().map(decode_partition_metadata).transpose()?,
            },
            MEMBER_METADATA_KEY => CgRecord::Member {
                group,
                member: second,
                value: v.as_mut().map(decode_member).transpose()?,
            },
            TARGET_ASSIGNMENT_MEMBER_KEY => CgRecord::TargetMember {
                group,
                member: second,
                value: v
                    .as_mut()
                    .map(|r| {
                        let a = read_assignment(r)?;
                        r.tagged_fields()?;
                        Ok::<_, Error>(a)
                    })
                    .transpose()?,
            },
            CURRENT_MEMBER_ASSIGNMENT_KEY => CgRecord::Current {
                group,
                member: second,
                value: v
                    .as_mut()
                    .map(|r| {
                        let member_epoch = r.i32()?;
                        let previous_member_epoch = r.i32()?;
                        let state = MemberState::from_value(r.take(1)?[0] as i8);
                        let mut epochs = AssignmentEpochs::new();
                        let default_epoch = member_epoch.max(0);
                        let assigned = read_assignment_epochs(r, default_epoch, &mut epochs)?;
                        let pending_revocation =
                            read_assignment_epochs(r, default_epoch, &mut epochs)?;
                        r.tagged_fields()?;
                        Ok::<_, Error>(CurrentAssignment {
                            member_epoch,
                            previous_member_epoch,
                            state,
                            assigned,
                            pending_revocation,
                            epochs,
                        })
                    })
                    .transpose()?,
            },
            _ => CgRecord::Regex {
                group,
                regex: second,
                value: v
                    .as_mut()
                    .map(|r| {
                        let n = r.array_len(1)?;
                        let mut topics = BTreeSet::new();
                        for _ in 0..n {
                            topics.insert(r.string()?);
                        }
                        let version = r.i64()?;
                        let timestamp_ms = r.i64()?;
                        r.tagged_fields()?;
                        Ok::<_, Error>(ResolvedRegex {
                            topics,
                            version,
                            timestamp_ms,
                        })
                    })
                    .transpose()?,
            },
        };
        Ok(Some(rec))
    }
}

fn read_uuid(r: &mut Reader<'_>) -> Result<TopicId, Error> {
    let raw = r.take(16)?;
    let mut id = [0u8; 16];
    id.copy_from_slice(raw);
    Ok(TopicId(id))
}

fn read_bytes(r: &mut Reader<'_>) -> Result<Bytes, Error> {
    let len = r.len(true)?;
    if len < 0 {
        return Ok(Bytes::new());
    }
    let raw = r.take(usize::try_from(len).map_err(|_| Error::Corrupt("length"))?)?;
    Ok(Bytes::copy_from_slice(raw))
}

fn epoch_value(r: &mut Reader<'_>) -> Result<i32, Error> {
    let e = r.i32()?;
    r.tagged_fields()?;
    Ok(e)
}

fn key(version: i16, group: &str, second: Option<&str>) -> Bytes {
    let mut b = BytesMut::with_capacity(6 + group.len() + second.map_or(0, str::len));
    b.put_i16(version);
    crate::records::put_string(&mut b, group);
    if let Some(s) = second {
        crate::records::put_string(&mut b, s);
    }
    b.freeze()
}

fn encode_member(m: &MemberMetadata) -> Bytes {
    let mut w = FlexWriter::new();
    w.nullable_string(m.instance_id.as_deref());
    w.nullable_string(m.rack_id.as_deref());
    w.string(&m.client_id);
    w.string(&m.client_host);
    w.len(m.subscribed_topic_names.len());
    for t in &m.subscribed_topic_names {
        w.string(t);
    }
    w.nullable_string(m.subscribed_topic_regex.as_deref());
    w.i32(m.rebalance_timeout_ms);
    w.nullable_string(m.server_assignor.as_deref());
    match &m.classic {
        None => w.no_tags(),
        Some(c) => {
            // Tag 0: a nullable struct, written as size + presence marker + struct.
            let mut s = FlexWriter::new();
            s.i32(c.session_timeout_ms);
            s.len(c.protocols.len());
            for (name, metadata) in &c.protocols {
                s.string(name);
                s.bytes(metadata);
                s.no_tags();
            }
            s.no_tags();
            // The struct without the value version `FlexWriter::new` starts with.
            let body = s.b.split_off(2);
            w.uvarint(1); // one tagged field
            w.uvarint(0); // tag 0
            w.uvarint(body.len() as u32 + 1);
            w.uvarint(1); // not null
            w.b.put_slice(&body);
        }
    }
    w.finish()
}

fn decode_member(r: &mut Reader<'_>) -> Result<MemberMetadata, Error> {
    let instance_id = r.nullable_string()?;
    let rack_id = r.nullable_string()?;
    let client_id = r.string()?;
    let client_host = r.string()?;
    let n = r.array_len(1)?;
    let mut subscribed_topic_names = Vec::with_capacity(n);
    for _ in 0..n {
        subscribed_topic_names.push(r.string()?);
    }
    let subscribed_topic_regex = r.nullable_string()?;
    let rebalance_timeout_ms = r.i32()?;
    let server_assignor = r.nullable_string()?;
    let mut classic = None;
    r.tagged_fields_with(|tag, raw| {
        if tag != 0 {
            return Ok(());
        }
        let mut s = Reader::new(raw);
        s.flexible = true;
        if s.varint()? > 0 {
            let session_timeout_ms = s.i32()?;
            let n = s.array_len(2)?;
            let mut protocols = Vec::with_capacity(n);
            for _ in 0..n {
                let name = s.string()?;
                let metadata = read_bytes(&mut s)?;
                s.tagged_fields()?;
                protocols.push((name, metadata));
            }
            s.tagged_fields()?;
            classic = Some(ClassicMemberMetadata {
                session_timeout_ms,
                protocols,
            });
        }
        Ok(())
    })?;
    Ok(MemberMetadata {
        instance_id,
        rack_id,
        client_id,
        client_host,
        subscribed_topic_names,
        subscribed_topic_regex,
        rebalance_timeout_ms,
        server_assignor,
        classic,
    })
}

fn decode_partition_metadata(r: &mut Reader<'_>) -> Result<BTreeMap<String, TopicMetadata>, Error> {
    // A topic takes at least a uuid, a name, a count and two empty sections.
    let n = r.array_len(16 + 1 + 4 + 1 + 1)?;
    let mut topics = BTreeMap::new();
    for _ in 0..n {
        let id = read_uuid(r)?;
        let name = r.string()?;
        let partitions = r.i32()?;
        let np = r.array_len(4 + 1 + 1)?;
        let mut racks = Vec::with_capacity(np);
        for _ in 0..np {
            let p = r.i32()?;
            let nr = r.array_len(1)?;
            let mut rs = Vec::with_capacity(nr);
            for _ in 0..nr {
                rs.push(r.string()?);
            }
            r.tagged_fields()?;
            racks.push((p, rs));
        }
        r.tagged_fields()?;
        topics.insert(
            name.clone(),
            TopicMetadata {
                id,
                name,
                partitions,
                racks,
            },
        );
    }
    r.tagged_fields()?;
    Ok(topics)
}

/// An assignment whose topics may carry `AssignmentEpochs` (tag 0, aligned with the
/// partitions); partitions without one get `default_epoch`.
fn read_assignment_epochs(
    r: &mut Reader<'_>,
    default_epoch: i32,
    epochs: &mut AssignmentEpochs,
) -> Result<Assignment, Error> {
    let n = r.array_len(16 + 1 + 1)?;
    let mut a = Assignment::new();
    for _ in 0..n {
        let id = read_uuid(r)?;
        let np = r.array_len(4)?;
        let mut parts = Vec::with_capacity(np);
        for _ in 0..np {
            parts.push(r.i32()?);
        }
        let mut tagged: Option<Vec<i32>> = None;
        r.tagged_fields_with(|tag, raw| {
            if tag == 0 {
                let mut t = Reader::new(raw);
                t.flexible = true;
                // A null array reads as empty: every partition then takes the default.
                let n = t.array_len(4)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(t.i32()?);
                }
                tagged = Some(v);
            }
            Ok(())
        })?;
        let set = a.entry(id).or_default();
        for (i, p) in parts.iter().enumerate() {
            set.insert(*p);
            let e = tagged
                .as_ref()
                .and_then(|v| v.get(i))
                .copied()
                .unwrap_or(default_epoch);
            epochs.insert((id, *p), e);
        }
    }
    Ok(a)
}

fn read_assignment(r: &mut Reader<'_>) -> Result<Assignment, Error> {
    let n = r.array_len(16 + 1 + 1)?;
    let mut a = Assignment::new();
    for _ in 0..n {
        let id = read_uuid(r)?;
        let np = r.array_len(4)?;
        let set = a.entry(id).or_default();
        for _ in 0..np {
            set.insert(r.i32()?);
        }
        r.tagged_fields()?;
    }
    Ok(a)
}

/// A writer of the flexible (compact) encoding, starting with the value version 0.
struct FlexWriter {
    b: BytesMut,
}

impl FlexWriter {
    fn new() -> Self {
        let mut b = BytesMut::with_capacity(64);
        b.put_i16(0);
        FlexWriter { b }
    }

    fn finish(self) -> Bytes {
        self.b.freeze()
    }

    fn uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.b.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.b.put_u8(v as u8);
    }

    fn len(&mut self, n: usize) {
        self.uvarint(u32::try_from(n).unwrap_or(u32::MAX - 1) + 1);
    }

    fn i32(&mut self, v: i32) {
        self.b.put_i32(v);
    }

    fn uuid(&mut self, id: &TopicId) {
        self.b.put_slice(&id.0);
    }

    fn string(&mut self, s: &str) {
        self.len(s.len());
        self.b.put_slice(s.as_bytes());
    }

    fn nullable_string(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.string(s),
            None => self.uvarint(0),
        }
    }

    fn bytes(&mut self, v: &[u8]) {
        self.len(v.len());
        self.b.put_slice(v);
    }

    fn no_tags(&mut self) {
        self.uvarint(0);
    }

    /// An assignment with each topic's `AssignmentEpochs` (tag 0) aligned with its partitions.
    fn assignment_with_epochs(&mut self, a: &Assignment, epochs: &AssignmentEpochs) {
        self.len(a.len());
        for (id, parts) in a {
            self.uuid(id);
            self.len(parts.len());
            for p in parts {
                self.i32(*p);
            }
            let mut tag = FlexWriter { b: BytesMut::new() };
            tag.len(parts.len());
            for p in parts {
                tag.i32(epochs.get(&(*id, *p)).copied().unwrap_or(-1));
            }
            self.uvarint(1);
            self.uvarint(0);
            self.uvarint(tag.b.len() as u32);
            self.b.put_slice(&tag.b);
        }
    }

    fn assignment(&mut self, a: &Assignment) {
        self.len(a.len());
        for (id, parts) in a {
            self.uuid(id);
            self.len(parts.len());
            for p in parts {
                self.i32(*p);
            }
            self.no_tags();
        }
    }
}

// ---- the consumer embedded protocol (classic members) ---------------------------------------

/// A `ConsumerProtocolSubscription` (versions 0-3) as classic members send it in JoinGroup.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subscription {
    pub version: i16,
    pub topics: Vec<String>,
    /// v1+: the partitions the member owns (cooperative rebalancing).
    pub owned: Vec<(String, Vec<i32>)>,
    /// v3+.
    pub rack_id: Option<String>,
}

/// Decodes a `ConsumerProtocolSubscription`; None when the bytes are not one.
pub fn decode_subscription(bytes: &[u8]) -> Option<Subscription> {
    let mut r = Reader::new(bytes);
    let version = r.i16().ok()?;
    if version < 0 {
        return None;
    }
    let n = r.array_len(2).ok()?;
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        topics.push(r.string().ok()?);
    }
    let _user_data = read_bytes(&mut r).ok()?;
    let mut sub = Subscription {
        version,
        topics,
        ..Subscription::default()
    };
    if version >= 1 {
        let n = r.array_len(6).ok()?;
        for _ in 0..n {
            let topic = r.string().ok()?;
            let np = r.array_len(4).ok()?;
            let mut parts = Vec::with_capacity(np);
            for _ in 0..np {
                parts.push(r.i32().ok()?);
            }
            sub.owned.push((topic, parts));
        }
    }
    if version >= 2 {
        let _generation = r.i32().ok()?;
    }
    if version >= 3 {
        sub.rack_id = r.nullable_string().ok()?;
    }
    Some(sub)
}

/// Encodes a `ConsumerProtocolAssignment` at `version` (0-3; no user data).
pub fn encode_assignment(version: i16, topics: &[(String, Vec<i32>)]) -> Bytes {
    let mut b = BytesMut::with_capacity(16);
    b.put_i16(version.clamp(0, 3));
    b.put_i32(i32::try_from(topics.len()).unwrap_or(i32::MAX));
    for (t, parts) in topics {
        crate::records::put_string(&mut b, t);
        b.put_i32(i32::try_from(parts.len()).unwrap_or(i32::MAX));
        for p in parts {
            b.put_i32(*p);
        }
    }
    b.put_i32(-1); // user data: null
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tid(n: u8) -> TopicId {
        TopicId([n; 16])
    }

    #[test]
    fn group_epoch_golden_bytes() {
        let r = CgRecord::GroupEpoch {
            group: "g".into(),
            epoch: Some(5),
        };
        let (k, v) = r.encode();
        assert_eq!(&k[..], &[0, 3, 0, 1, b'g']);
        // version 0, epoch 5, no tagged fields
        assert_eq!(v.as_deref(), Some(&[0, 0, 0, 0, 0, 5, 0][..]));
        assert_eq!(CgRecord::decode(&k, v.as_deref()).ok(), Some(Some(r)));
    }

    #[test]
    fn current_assignment_golden_bytes() {
        let mut assigned = Assignment::new();
        assigned.insert(tid(1), [0, 2].into_iter().collect());
        let r = CgRecord::Current {
            group: "g".into(),
            member: "m".into(),
            value: Some(CurrentAssignment {
                member_epoch: 3,
                previous_member_epoch: 2,
                state: MemberState::UnrevokedPartitions,
                assigned,
                pending_revocation: Assignment::new(),
                epochs: [((tid(1), 0), 3), ((tid(1), 2), 1)].into_iter().collect(),
            }),
        };
        let (k, v) = r.encode();
        assert_eq!(&k[..], &[0, 8, 0, 1, b'g', 0, 1, b'm']);
        let mut want = vec![0, 0, 0, 0, 0, 3, 0, 0, 0, 2, 1, 2];
        want.extend_from_slice(&[1; 16]);
        want.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0, 2]);
        // AssignmentEpochs: one tagged field, tag 0, 9 bytes, aligned with the partitions.
        want.extend_from_slice(&[1, 0, 9, 3, 0, 0, 0, 3, 0, 0, 0, 1]);
        want.extend_from_slice(&[1, 0]);
        assert_eq!(v.as_deref(), Some(&want[..]));
        assert_eq!(CgRecord::decode(&k, v.as_deref()).ok(), Some(Some(r)));
    }

    #[test]
    fn current_assignment_without_assignment_epochs_reads_member_epoch() {
        // As Kafka before 4.3 writes it: no AssignmentEpochs tag.
        let mut v = vec![0, 0, 0, 0, 0, 3, 0, 0, 0, 2, 1, 2];
        v.extend_from_slice(&[1; 16]);
        v.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0]);
        let k = [0, 8, 0, 1, b'g', 0, 1, b'm'];
        let Ok(Some(CgRecord::Current { value: Some(c), .. })) = CgRecord::decode(&k, Some(&v))
        else {
            panic!("not a current assignment");
        };
        let want: AssignmentEpochs = [((tid(1), 0), 3), ((tid(1), 2), 3)].into_iter().collect();
        assert_eq!(c.epochs, want);
        // A static member that left (-2) reads as epoch 0.
        v[2..6].copy_from_slice(&(-2i32).to_be_bytes());
        let Ok(Some(CgRecord::Current { value: Some(c), .. })) = CgRecord::decode(&k, Some(&v))
        else {
            panic!("not a current assignment");
        };
        assert!(c.epochs.values().all(|e| *e == 0));
    }

    #[test]
    fn tagged_fields_of_newer_kafka_are_skipped() {
        // ConsumerGroupMetadataValue with MetadataHash (tag 0, int64) as Kafka 4.1 writes it.
        let mut v = vec![0, 0, 0, 0, 0, 9, 1, 0, 8];
        v.extend_from_slice(&77i64.to_be_bytes());
        let k = [0, 3, 0, 1, b'g'];
        assert_eq!(
            CgRecord::decode(&k, Some(&v)).ok(),
            Some(Some(CgRecord::GroupEpoch {
                group: "g".into(),
                epoch: Some(9)
            }))
        );
    }

    #[test]
    fn other_keys_are_not_consumer_group_records() {
        assert_eq!(CgRecord::decode(&[0, 2, 0, 1, b'g'], None).ok(), Some(None));
    }

    #[test]
    fn subscription_and_assignment_protocol() {
        // v1 subscription: topics [a], user data null, owned [(a, [1])]
        let mut b = vec![0, 1, 0, 0, 0, 1, 0, 1, b'a', 0xff, 0xff, 0xff, 0xff];
        b.extend_from_slice(&[0, 0, 0, 1, 0, 1, b'a', 0, 0, 0, 1, 0, 0, 0, 1]);
        let s = decode_subscription(&b).unwrap();
        assert_eq!(s.topics, vec!["a"]);
        assert_eq!(s.owned, vec![("a".to_string(), vec![1])]);
        let a = encode_assignment(1, &[("a".into(), vec![0, 1])]);
        assert_eq!(
            &a[..],
            &[
                0, 1, 0, 0, 0, 1, 0, 1, b'a', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff,
                0xff
            ]
        );
    }

    fn arb_name() -> impl Strategy<Value = String> {
        "[a-z0-9._-]{0,10}"
    }

    fn arb_assignment() -> impl Strategy<Value = Assignment> {
        proptest::collection::btree_map(
            any::<u8>().prop_map(tid),
            proptest::collection::btree_set(0i32..64, 0..5),
            0..4,
        )
    }

    fn arb_record() -> impl Strategy<Value = CgRecord> {
        let member = (
            proptest::option::of(arb_name()),
            proptest::option::of(arb_name()),
            arb_name(),
            arb_name(),
            proptest::collection::vec(arb_name(), 0..4),
            proptest::option::of(arb_name()),
            any::<i32>(),
            proptest::option::of(arb_name()),
            proptest::option::of((
                any::<i32>(),
                proptest::collection::vec(
                    (arb_name(), proptest::collection::vec(any::<u8>(), 0..8)),
                    0..3,
                ),
            )),
        )
            .prop_map(
                |(i, r, c, h, names, regex, rt, a, classic)| MemberMetadata {
                    instance_id: i,
                    rack_id: r,
                    client_id: c,
                    client_host: h,
                    subscribed_topic_names: names,
                    subscribed_topic_regex: regex,
                    rebalance_timeout_ms: rt,
                    server_assignor: a,
                    classic: classic.map(|(s, ps)| ClassicMemberMetadata {
                        session_timeout_ms: s,
                        protocols: ps.into_iter().map(|(n, m)| (n, Bytes::from(m))).collect(),
                    }),
                },
            );
        prop_oneof![
            (arb_name(), proptest::option::of(any::<i32>()))
                .prop_map(|(group, epoch)| CgRecord::GroupEpoch { group, epoch }),
            (arb_name(), proptest::option::of(any::<i32>()))
                .prop_map(|(group, epoch)| CgRecord::TargetEpoch { group, epoch }),
            (arb_name(), arb_name(), proptest::option::of(member)).prop_map(
                |(group, member, value)| CgRecord::Member {
                    group,
                    member,
                    value
                }
            ),
            (
                arb_name(),
                arb_name(),
                proptest::option::of(arb_assignment())
            )
                .prop_map(|(group, member, value)| CgRecord::TargetMember {
                    group,
                    member,
                    value
                }),
            (
                arb_name(),
                arb_name(),
                proptest::option::of((
                    any::<i32>(),
                    any::<i32>(),
                    0i8..3,
                    arb_assignment(),
                    arb_assignment()
                ))
            )
                .prop_map(|(group, member, value)| CgRecord::Current {
                    group,
                    member,
                    value: value.map(|(e, p, s, a, r)| CurrentAssignment {
                        member_epoch: e,
                        previous_member_epoch: p,
                        state: MemberState::from_value(s),
                        epochs: a
                            .iter()
                            .chain(r.iter())
                            .flat_map(|(t, ps)| ps.iter().map(move |p| ((*t, *p), p ^ e)))
                            .collect(),
                        assigned: a,
                        pending_revocation: r,
                    }),
                }),
            (
                arb_name(),
                proptest::option::of(proptest::collection::vec(
                    (
                        any::<u8>(),
                        arb_name(),
                        any::<i32>(),
                        proptest::collection::vec(
                            (any::<i32>(), proptest::collection::vec(arb_name(), 0..3)),
                            0..3
                        )
                    ),
                    0..3
                ))
            )
                .prop_map(|(group, topics)| CgRecord::SubscriptionMetadata {
                    group,
                    topics: topics.map(|ts| ts
                        .into_iter()
                        .map(|(id, name, partitions, racks)| (
                            name.clone(),
                            TopicMetadata {
                                id: tid(id),
                                name,
                                partitions,
                                racks
                            }
                        ))
                        .collect()),
                }),
            (
                arb_name(),
                arb_name(),
                proptest::option::of((
                    proptest::collection::btree_set(arb_name(), 0..4),
                    any::<i64>(),
                    any::<i64>()
                ))
            )
                .prop_map(|(group, regex, value)| CgRecord::Regex {
                    group,
                    regex,
                    value: value.map(|(topics, version, timestamp_ms)| ResolvedRegex {
                        topics,
                        version,
                        timestamp_ms
                    }),
                }),
        ]
    }

    proptest! {
        #[test]
        fn records_round_trip(r in arb_record()) {
            let (k, v) = r.encode();
            prop_assert_eq!(CgRecord::decode(&k, v.as_deref()).ok(), Some(Some(r)));
        }

        #[test]
        fn decoding_garbage_never_panics(
            version in prop_oneof![Just(3i16), Just(4), Just(5), Just(6), Just(7), Just(8), Just(16)],
            key in proptest::collection::vec(any::<u8>(), 0..12),
            value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..80)),
        ) {
            let mut k = version.to_be_bytes().to_vec();
            k.extend_from_slice(&key);
            let _ = CgRecord::decode(&k, value.as_deref());
            let _ = decode_subscription(value.as_deref().unwrap_or(&[]));
        }
    }
}
