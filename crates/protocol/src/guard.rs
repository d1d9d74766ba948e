//! Request body guard: a schema-aware walk over an untrusted request body that rejects any
//! claimed length the bytes can't back, before `kafka-protocol` decodes (and allocates for) it.
//!
//! `kafka-protocol` 0.18 sizes every array with `Vec::with_capacity(claimed_count)` before it
//! reads a single element, so a 12-byte Produce body claiming `i32::MAX` topics aborts the
//! process on allocation failure. [`check_request`] walks the body following the request
//! schema of the (api key, version) pair: field order, fixed-width types, nullable and compact
//! (flexible-version) strings, bytes and arrays, and tagged-field sections. It fails if any
//! array claims more elements than bytes remain (every element takes at least one byte), any
//! string or bytes length exceeds the remaining bytes, a varint is malformed, the body is
//! truncated, or bytes are left over. It checks nothing semantic (UTF-8, enum values).
//!
//! What it does not bound: once every element is backed by bytes, the decoded structs may
//! still be larger in memory than on the wire (a few bytes of partition on the wire become a
//! struct of tens of bytes). That growth is linear in the body, which the frame size limit
//! (`socket.request.max.bytes`) caps.
//!
//! The schema tables at the bottom mirror the request decoders of `kafka-protocol` 0.18 (which
//! are generated from Kafka's `clients/src/main/resources/common/message/*Request.json`).
//! *Invariant:* for every (api key, version) in `MESSAGES`, the walk consumes exactly the
//! bytes `kafka-protocol` encodes for that version, and takes null exactly where its decoder
//! does; the tests below check both for every entry against `kafka-protocol` itself. Versions
//! outside the table are [`GuardError::Unsupported`].

use std::fmt;

/// Why a request body was rejected. Offsets are byte positions within the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    /// The guard has no schema for this api key and version: (api key, version).
    #[error("unsupported api {0} version {1}")]
    Unsupported(i16, i16),
    /// The body ended inside a field.
    #[error("body truncated at byte {offset} reading {what}")]
    Truncated { offset: usize, what: What },
    /// A string, bytes or array length is negative (other than null) or null where the field
    /// is not nullable.
    #[error("invalid length {len} at byte {offset} for {what}")]
    InvalidLength { offset: usize, len: i64, what: What },
    /// A claimed length or element count exceeds the bytes that remain.
    #[error("{what} at byte {offset} claims {claimed} but only {remaining} bytes remain")]
    LengthTooLarge {
        offset: usize,
        claimed: u64,
        remaining: usize,
        what: What,
    },
    /// An unsigned varint is longer than 5 bytes or overflows 32 bits.
    #[error("malformed varint at byte {offset}")]
    MalformedVarint { offset: usize },
    /// A known tagged field's declared size differs from what its schema consumed, or the tag
    /// is not valid at this version.
    #[error("tagged field {tag} at byte {offset} is malformed")]
    BadTaggedField { offset: usize, tag: u32 },
    /// The schema was fully walked but bytes remain.
    #[error("{trailing} trailing bytes after the body at byte {offset}")]
    TrailingBytes { offset: usize, trailing: usize },
}

/// The kind of value being read when a [`GuardError`] happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum What {
    Fixed,
    Varint,
    String,
    Bytes,
    Array,
    TaggedFields,
}

impl fmt::Display for What {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            What::Fixed => "fixed-width field",
            What::Varint => "varint",
            What::String => "string",
            What::Bytes => "bytes",
            What::Array => "array",
            What::TaggedFields => "tagged fields",
        };
        f.write_str(s)
    }
}

/// Checks that `body` (the request bytes after the request header) is well-formed for
/// `api_key` at `api_version`: every length it claims is backed by bytes, and nothing is left
/// over. Call it before `RequestKind::decode`; it never allocates and never panics.
pub fn check_request(api_key: i16, api_version: i16, body: &[u8]) -> Result<(), GuardError> {
    let consumed = walk_request(api_key, api_version, body)?;
    if consumed != body.len() {
        return Err(GuardError::TrailingBytes {
            offset: consumed,
            trailing: body.len() - consumed,
        });
    }
    Ok(())
}

/// Walks one request body from the start of `body` and returns how many bytes it spans.
/// Unlike [`check_request`] it tolerates bytes after the body.
pub fn walk_request(api_key: i16, api_version: i16, body: &[u8]) -> Result<usize, GuardError> {
    let message =
        find_message(api_key, api_version).ok_or(GuardError::Unsupported(api_key, api_version))?;
    let mut walker = Walker {
        buf: body,
        pos: 0,
        end: body.len(),
        version: api_version,
        flexible: message.flexible_from.is_some_and(|v| api_version >= v),
    };
    walker.walk_struct(message.body)?;
    Ok(walker.pos)
}

/// The version range of `api_key` the guard can check, if it knows the api at all. The
/// supported-versions table must not advertise beyond it.
pub fn guarded_versions(api_key: i16) -> Option<(i16, i16)> {
    MESSAGES
        .iter()
        .find(|m| m.api_key == api_key)
        .map(|m| (m.versions.min, m.versions.max))
}

/// Every (api key, name, min version, max version) in the schema table, for tests and for
/// cross-checking the advertised versions.
pub fn guarded_apis() -> impl Iterator<Item = (i16, &'static str, i16, i16)> {
    MESSAGES
        .iter()
        .map(|m| (m.api_key, m.name, m.versions.min, m.versions.max))
}

fn find_message(api_key: i16, api_version: i16) -> Option<&'static Message> {
    MESSAGES
        .iter()
        .find(|m| m.api_key == api_key && m.versions.contains(api_version))
}

// ---------------------------------------------------------------------------------------------
// Schema DSL

/// An inclusive version range; `max` is `i16::MAX` for "and every later version".
#[derive(Debug, Clone, Copy)]
struct Versions {
    min: i16,
    max: i16,
}

impl Versions {
    fn contains(self, version: i16) -> bool {
        self.min <= version && version <= self.max
    }
}

/// Every version of the message.
const ALL: Versions = Versions {
    min: 0,
    max: i16::MAX,
};

const fn since(min: i16) -> Versions {
    Versions { min, max: i16::MAX }
}

const fn range(min: i16, max: i16) -> Versions {
    Versions { min, max }
}

/// A wire type. Strings, bytes and arrays are compact (unsigned-varint length + 1) in the
/// message's flexible versions and i16/i32-length-prefixed before.
#[derive(Debug)]
enum Ty {
    Int8,
    Int16,
    Int32,
    Int64,
    Uuid,
    Bool,
    String,
    NullableString,
    Bytes,
    /// Nullable bytes; also Produce's record data.
    NullableBytes,
    Struct(&'static Schema),
    /// A struct that may be null: an int8 marker (-1 null, else present) before its fields.
    NullableStruct(&'static Schema),
    Array(&'static Ty),
    NullableArray(&'static Ty),
}

impl Ty {
    /// The fewest bytes one value of this type takes on the wire, used to bound a claimed
    /// array count before walking its elements.
    fn min_len(&self, flexible: bool) -> usize {
        match self {
            Ty::Int8 | Ty::Bool => 1,
            Ty::Int16 => 2,
            Ty::Int32 => 4,
            Ty::Int64 => 8,
            Ty::Uuid => 16,
            Ty::String | Ty::NullableString if !flexible => 2,
            Ty::Bytes | Ty::NullableBytes | Ty::Array(_) | Ty::NullableArray(_) if !flexible => 4,
            // Compact lengths and structs (whose fields may all be absent at a version) take
            // at least one byte, the floor every element must meet.
            _ => 1,
        }
    }
}

/// A struct field present in `versions`.
#[derive(Debug)]
struct Field {
    #[allow(dead_code)] // Read in debug output and by whoever edits the tables.
    name: &'static str,
    versions: Versions,
    ty: Ty,
}

/// A known tagged field: its value is walked with `ty` and must fill its declared size.
#[derive(Debug)]
struct Tagged {
    tag: u32,
    #[allow(dead_code)]
    name: &'static str,
    versions: Versions,
    ty: Ty,
}

/// The fields of one struct in wire order; tagged fields only exist in flexible versions.
#[derive(Debug)]
struct Schema {
    fields: &'static [Field],
    tagged: &'static [Tagged],
}

/// One request: its api key, the versions `kafka-protocol` decodes, and the first flexible
/// version (compact encodings and tagged-field sections), if any.
#[derive(Debug)]
struct Message {
    api_key: i16,
    name: &'static str,
    versions: Versions,
    flexible_from: Option<i16>,
    body: &'static Schema,
}

const fn f(name: &'static str, versions: Versions, ty: Ty) -> Field {
    Field { name, versions, ty }
}

const fn m(
    api_key: i16,
    name: &'static str,
    versions: Versions,
    flexible_from: Option<i16>,
    body: &'static Schema,
) -> Message {
    Message {
        api_key,
        name,
        versions,
        flexible_from,
        body,
    }
}

const fn t(tag: u32, name: &'static str, versions: Versions, ty: Ty) -> Tagged {
    Tagged {
        tag,
        name,
        versions,
        ty,
    }
}

// ---------------------------------------------------------------------------------------------
// Walker

/// A cursor over the body. `end` is normally the body's end; inside a known tagged field it is
/// the end of that field's declared size, so the field can't read past it.
struct Walker<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
    version: i16,
    flexible: bool,
}

impl Walker<'_> {
    fn remaining(&self) -> usize {
        self.end - self.pos
    }

    fn skip(&mut self, n: usize, what: What) -> Result<(), GuardError> {
        if n > self.remaining() {
            return Err(GuardError::Truncated {
                offset: self.pos,
                what,
            });
        }
        self.pos += n;
        Ok(())
    }

    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], GuardError> {
        let start = self.pos;
        self.skip(N, What::Fixed)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&self.buf[start..self.pos]);
        Ok(out)
    }

    fn i16(&mut self) -> Result<i16, GuardError> {
        self.fixed::<2>().map(i16::from_be_bytes)
    }

    fn i32(&mut self) -> Result<i32, GuardError> {
        self.fixed::<4>().map(i32::from_be_bytes)
    }

    /// An unsigned varint of at most 5 bytes whose value fits in 32 bits (stricter than
    /// `kafka-protocol`, which silently drops overflowing bits).
    fn uvarint(&mut self) -> Result<u32, GuardError> {
        let start = self.pos;
        let mut value: u32 = 0;
        for i in 0..5 {
            let Some(&b) = self.buf[..self.end].get(self.pos) else {
                return Err(GuardError::Truncated {
                    offset: self.pos,
                    what: What::Varint,
                });
            };
            self.pos += 1;
            if i == 4 && b > 0x0f {
                return Err(GuardError::MalformedVarint { offset: start });
            }
            value |= u32::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err(GuardError::MalformedVarint { offset: start })
    }

    /// Reads a length prefix: `None` for null, `Some(len)` otherwise. Compact lengths are
    /// stored plus one (0 = null); classic lengths use -1 for null.
    fn length(&mut self, classic_i16: bool, what: What) -> Result<Option<u64>, GuardError> {
        let offset = self.pos;
        let len: i64 = if self.flexible {
            i64::from(self.uvarint()?) - 1
        } else if classic_i16 {
            i64::from(self.i16()?)
        } else {
            i64::from(self.i32()?)
        };
        match len {
            -1 => Ok(None),
            n if n < 0 => Err(GuardError::InvalidLength {
                offset,
                len: n,
                what,
            }),
            n => Ok(Some(n.unsigned_abs())),
        }
    }

    /// A length that must be backed by `unit` bytes per unit of remaining input.
    fn bounded_length(
        &mut self,
        classic_i16: bool,
        nullable: bool,
        unit: usize,
        what: What,
    ) -> Result<Option<usize>, GuardError> {
        let offset = self.pos;
        let Some(len) = self.length(classic_i16, what)? else {
            if nullable {
                return Ok(None);
            }
            return Err(GuardError::InvalidLength {
                offset,
                len: -1,
                what,
            });
        };
        let remaining = self.remaining();
        let fits = usize::try_from(len)
            .ok()
            .and_then(|n| n.checked_mul(unit))
            .is_some_and(|bytes| bytes <= remaining);
        if !fits {
            return Err(GuardError::LengthTooLarge {
                offset,
                claimed: len,
                remaining,
                what,
            });
        }
        // `fits` proved len * unit <= remaining, so len fits in usize.
        Ok(usize::try_from(len).ok())
    }

    fn walk_struct(&mut self, schema: &Schema) -> Result<(), GuardError> {
        for field in schema.fields {
            if field.versions.contains(self.version) {
                self.walk(&field.ty)?;
            }
        }
        if self.flexible {
            self.walk_tagged(schema.tagged)?;
        }
        Ok(())
    }

    fn walk(&mut self, ty: &Ty) -> Result<(), GuardError> {
        match ty {
            Ty::Int8 | Ty::Bool => self.skip(1, What::Fixed),
            Ty::Int16 => self.skip(2, What::Fixed),
            Ty::Int32 => self.skip(4, What::Fixed),
            Ty::Int64 => self.skip(8, What::Fixed),
            Ty::Uuid => self.skip(16, What::Fixed),
            Ty::String | Ty::NullableString => {
                let nullable = matches!(ty, Ty::NullableString);
                let len = self.bounded_length(true, nullable, 1, What::String)?;
                self.skip(len.unwrap_or(0), What::String)
            }
            Ty::Bytes | Ty::NullableBytes => {
                let nullable = matches!(ty, Ty::NullableBytes);
                let len = self.bounded_length(false, nullable, 1, What::Bytes)?;
                self.skip(len.unwrap_or(0), What::Bytes)
            }
            Ty::Struct(schema) => self.walk_struct(schema),
            Ty::NullableStruct(schema) => {
                let [marker] = self.fixed::<1>()?;
                if (marker as i8) < 0 {
                    Ok(())
                } else {
                    self.walk_struct(schema)
                }
            }
            Ty::Array(elem) | Ty::NullableArray(elem) => {
                let nullable = matches!(ty, Ty::NullableArray(_));
                let unit = elem.min_len(self.flexible);
                let count = self.bounded_length(false, nullable, unit, What::Array)?;
                for _ in 0..count.unwrap_or(0) {
                    self.walk(elem)?;
                }
                Ok(())
            }
        }
    }

    /// A tagged-field section: a count, then (tag, size, value) triples. Unknown tags are
    /// skipped by size; known tags are walked by their schema, since `kafka-protocol` decodes
    /// them in place, and must fill exactly their declared size.
    fn walk_tagged(&mut self, known: &[Tagged]) -> Result<(), GuardError> {
        let offset = self.pos;
        let count = self.uvarint()?;
        // Each tagged field takes at least two bytes (tag and size varints).
        let remaining = self.remaining();
        if u64::from(count) * 2 > remaining as u64 {
            return Err(GuardError::LengthTooLarge {
                offset,
                claimed: u64::from(count),
                remaining,
                what: What::TaggedFields,
            });
        }
        for _ in 0..count {
            let field_offset = self.pos;
            let tag = self.uvarint()?;
            let size = self.uvarint()?;
            let remaining = self.remaining();
            let size = usize::try_from(size)
                .ok()
                .filter(|&s| s <= remaining)
                .ok_or(GuardError::LengthTooLarge {
                    offset: field_offset,
                    claimed: u64::from(size),
                    remaining,
                    what: What::TaggedFields,
                })?;
            match known.iter().find(|k| k.tag == tag) {
                None => self.pos += size,
                Some(k) if !k.versions.contains(self.version) => {
                    // `kafka-protocol` refuses a known tag outside its versions.
                    return Err(GuardError::BadTaggedField {
                        offset: field_offset,
                        tag,
                    });
                }
                Some(k) => {
                    let outer_end = self.end;
                    let field_end = self.pos + size;
                    self.end = field_end;
                    let walked = self.walk(&k.ty);
                    self.end = outer_end;
                    match walked {
                        Ok(()) if self.pos == field_end => {}
                        _ => {
                            return Err(GuardError::BadTaggedField {
                                offset: field_offset,
                                tag,
                            })
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Schema tables

/// The schema tables, one block per api, laid out by hand (one field per line) rather than by
/// rustfmt. Field names are Kafka's, in snake_case; each field lists the versions it exists in.
#[rustfmt::skip]
mod tables {
use super::{f, m, range, since, t, Message, Schema, Ty, ALL};

/// Every guarded request: (api key, name, versions `kafka-protocol` decodes, first flexible
/// version, body schema).
pub(super) static MESSAGES: &[Message] = &[
    m(0,  "Produce",                 range(3, 13),   Some(9),  &PRODUCE_REQUEST),
    m(1,  "Fetch",                   range(4, 18),   Some(12), &FETCH_REQUEST),
    m(2,  "ListOffsets",             range(1, 10),   Some(6),  &LIST_OFFSETS_REQUEST),
    m(3,  "Metadata",                range(0, 13),   Some(9),  &METADATA_REQUEST),
    m(8,  "OffsetCommit",            range(2, 9),    Some(8),  &OFFSET_COMMIT_REQUEST),
    m(9,  "OffsetFetch",             range(1, 9),    Some(6),  &OFFSET_FETCH_REQUEST),
    m(10, "FindCoordinator",         range(0, 6),    Some(3),  &FIND_COORDINATOR_REQUEST),
    m(11, "JoinGroup",               range(0, 9),    Some(6),  &JOIN_GROUP_REQUEST),
    m(12, "Heartbeat",               range(0, 4),    Some(4),  &HEARTBEAT_REQUEST),
    m(13, "LeaveGroup",              range(0, 5),    Some(4),  &LEAVE_GROUP_REQUEST),
    m(14, "SyncGroup",               range(0, 5),    Some(4),  &SYNC_GROUP_REQUEST),
    m(15, "DescribeGroups",          range(0, 6),    Some(5),  &DESCRIBE_GROUPS_REQUEST),
    m(16, "ListGroups",              range(0, 5),    Some(3),  &LIST_GROUPS_REQUEST),
    m(17, "SaslHandshake",           range(0, 1),    None,     &SASL_HANDSHAKE_REQUEST),
    m(18, "ApiVersions",             range(0, 4),    Some(3),  &API_VERSIONS_REQUEST),
    m(19, "CreateTopics",            range(2, 7),    Some(5),  &CREATE_TOPICS_REQUEST),
    m(20, "DeleteTopics",            range(1, 6),    Some(4),  &DELETE_TOPICS_REQUEST),
    m(21, "DeleteRecords",           range(0, 2),    Some(2),  &DELETE_RECORDS_REQUEST),
    m(22, "InitProducerId",          range(0, 5),    Some(2),  &INIT_PRODUCER_ID_REQUEST),
    m(23, "OffsetForLeaderEpoch",    range(2, 4),    Some(4),  &OFFSET_FOR_LEADER_EPOCH_REQUEST),
    m(24, "AddPartitionsToTxn",      range(0, 5),    Some(3),  &ADD_PARTITIONS_TO_TXN_REQUEST),
    m(25, "AddOffsetsToTxn",         range(0, 4),    Some(3),  &ADD_OFFSETS_TO_TXN_REQUEST),
    m(26, "EndTxn",                  range(0, 5),    Some(3),  &END_TXN_REQUEST),
    m(27, "WriteTxnMarkers",         range(1, 1),    Some(1),  &WRITE_TXN_MARKERS_REQUEST),
    m(28, "TxnOffsetCommit",         range(0, 5),    Some(3),  &TXN_OFFSET_COMMIT_REQUEST),
    m(29, "DescribeAcls",            range(1, 3),    Some(2),  &DESCRIBE_ACLS_REQUEST),
    m(30, "CreateAcls",              range(1, 3),    Some(2),  &CREATE_ACLS_REQUEST),
    m(31, "DeleteAcls",              range(1, 3),    Some(2),  &DELETE_ACLS_REQUEST),
    m(32, "DescribeConfigs",         range(1, 4),    Some(4),  &DESCRIBE_CONFIGS_REQUEST),
    m(33, "AlterConfigs",            range(0, 2),    Some(2),  &ALTER_CONFIGS_REQUEST),
    m(35, "DescribeLogDirs",         range(1, 4),    Some(2),  &DESCRIBE_LOG_DIRS_REQUEST),
    m(36, "SaslAuthenticate",        range(0, 2),    Some(2),  &SASL_AUTHENTICATE_REQUEST),
    m(37, "CreatePartitions",        range(0, 3),    Some(2),  &CREATE_PARTITIONS_REQUEST),
    m(42, "DeleteGroups",            range(0, 2),    Some(2),  &DELETE_GROUPS_REQUEST),
    m(43, "ElectLeaders",            range(0, 2),    Some(2),  &ELECT_LEADERS_REQUEST),
    m(44, "IncrementalAlterConfigs", range(0, 1),    Some(1),  &INCREMENTAL_ALTER_CONFIGS_REQUEST),
    m(45, "AlterPartitionReassignments", range(0, 1), Some(0), &ALTER_PARTITION_REASSIGNMENTS_REQUEST),
    m(46, "ListPartitionReassignments", range(0, 0), Some(0), &LIST_PARTITION_REASSIGNMENTS_REQUEST),
    m(47, "OffsetDelete",            range(0, 0),    None,     &OFFSET_DELETE_REQUEST),
    m(48, "DescribeClientQuotas",    range(0, 1),    Some(1),  &DESCRIBE_CLIENT_QUOTAS_REQUEST),
    m(49, "AlterClientQuotas",       range(0, 1),    Some(1),  &ALTER_CLIENT_QUOTAS_REQUEST),
    m(50, "DescribeUserScramCredentials", range(0, 0), Some(0), &DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST),
    m(51, "AlterUserScramCredentials", range(0, 0), Some(0),  &ALTER_USER_SCRAM_CREDENTIALS_REQUEST),
    m(55, "DescribeQuorum",          range(0, 2),    Some(0),  &DESCRIBE_QUORUM_REQUEST),
    m(56, "AlterPartition",          range(2, 3),    Some(0),  &ALTER_PARTITION_REQUEST),
    m(58, "Envelope",                range(0, 0),    Some(0),  &ENVELOPE_REQUEST),
    m(60, "DescribeCluster",         range(0, 2),    Some(0),  &DESCRIBE_CLUSTER_REQUEST),
    m(61, "DescribeProducers",       range(0, 0),    Some(0),  &DESCRIBE_PRODUCERS_REQUEST),
    m(62, "BrokerRegistration",      range(0, 4),    Some(0),  &BROKER_REGISTRATION_REQUEST),
    m(63, "BrokerHeartbeat",         range(0, 1),    Some(0),  &BROKER_HEARTBEAT_REQUEST),
    m(65, "DescribeTransactions",    range(0, 0),    Some(0),  &DESCRIBE_TRANSACTIONS_REQUEST),
    m(66, "ListTransactions",        range(0, 2),    Some(0),  &LIST_TRANSACTIONS_REQUEST),
    m(67, "AllocateProducerIds",     range(0, 0),    Some(0),  &ALLOCATE_PRODUCER_IDS_REQUEST),
    m(68, "ConsumerGroupHeartbeat",  range(0, 1),    Some(0),  &CONSUMER_GROUP_HEARTBEAT_REQUEST),
    m(69, "ConsumerGroupDescribe",   range(0, 1),    Some(0),  &CONSUMER_GROUP_DESCRIBE_REQUEST),
    m(75, "DescribeTopicPartitions", range(0, 0),    Some(0),  &DESCRIBE_TOPIC_PARTITIONS_REQUEST),
];

// Produce (api key 0)
static PRODUCE_REQUEST: Schema = Schema {
    fields: &[
        f("transactional_id", ALL, Ty::NullableString),
        f("acks", ALL, Ty::Int16),
        f("timeout_ms", ALL, Ty::Int32),
        f("topic_data", ALL, Ty::Array(&Ty::Struct(&PRODUCE_TOPIC_PRODUCE_DATA))),
    ],
    tagged: &[],
};

static PRODUCE_TOPIC_PRODUCE_DATA: Schema = Schema {
    fields: &[
        f("name", range(3, 12), Ty::String),
        f("topic_id", since(13), Ty::Uuid),
        f("partition_data", ALL, Ty::Array(&Ty::Struct(&PRODUCE_PARTITION_PRODUCE_DATA))),
    ],
    tagged: &[],
};

static PRODUCE_PARTITION_PRODUCE_DATA: Schema = Schema {
    fields: &[
        f("index", ALL, Ty::Int32),
        f("records", ALL, Ty::NullableBytes),
    ],
    tagged: &[],
};

// Fetch (api key 1)
static FETCH_REQUEST: Schema = Schema {
    fields: &[
        f("replica_id", range(4, 14), Ty::Int32),
        f("max_wait_ms", ALL, Ty::Int32),
        f("min_bytes", ALL, Ty::Int32),
        f("max_bytes", ALL, Ty::Int32),
        f("isolation_level", ALL, Ty::Int8),
        f("session_id", since(7), Ty::Int32),
        f("session_epoch", since(7), Ty::Int32),
        f("topics", ALL, Ty::Array(&Ty::Struct(&FETCH_TOPIC))),
        f("forgotten_topics_data", since(7), Ty::Array(&Ty::Struct(&FETCH_FORGOTTEN_TOPIC))),
        f("rack_id", since(11), Ty::String),
    ],
    tagged: &[
        t(0, "cluster_id", since(12), Ty::NullableString),
        t(1, "replica_state", since(15), Ty::Struct(&FETCH_REPLICA_STATE)),
    ],
};

static FETCH_TOPIC: Schema = Schema {
    fields: &[
        f("topic", range(4, 12), Ty::String),
        f("topic_id", since(13), Ty::Uuid),
        f("partitions", ALL, Ty::Array(&Ty::Struct(&FETCH_PARTITION))),
    ],
    tagged: &[],
};

static FETCH_FORGOTTEN_TOPIC: Schema = Schema {
    fields: &[
        f("topic", range(7, 12), Ty::String),
        f("topic_id", since(13), Ty::Uuid),
        f("partitions", since(7), Ty::Array(&Ty::Int32)),
    ],
    tagged: &[],
};

static FETCH_REPLICA_STATE: Schema = Schema {
    fields: &[
        f("replica_id", since(15), Ty::Int32),
        f("replica_epoch", since(15), Ty::Int64),
    ],
    tagged: &[],
};

static FETCH_PARTITION: Schema = Schema {
    fields: &[
        f("partition", ALL, Ty::Int32),
        f("current_leader_epoch", since(9), Ty::Int32),
        f("fetch_offset", ALL, Ty::Int64),
        f("last_fetched_epoch", since(12), Ty::Int32),
        f("log_start_offset", since(5), Ty::Int64),
        f("partition_max_bytes", ALL, Ty::Int32),
    ],
    tagged: &[
        t(0, "replica_directory_id", since(17), Ty::Uuid),
        t(1, "high_watermark", since(18), Ty::Int64),
    ],
};

// ListOffsets (api key 2)
static LIST_OFFSETS_REQUEST: Schema = Schema {
    fields: &[
        f("replica_id", ALL, Ty::Int32),
        f("isolation_level", since(2), Ty::Int8),
        f("topics", ALL, Ty::Array(&Ty::Struct(&LIST_OFFSETS_TOPIC))),
        f("timeout_ms", since(10), Ty::Int32),
    ],
    tagged: &[],
};

static LIST_OFFSETS_TOPIC: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("partitions", ALL, Ty::Array(&Ty::Struct(&LIST_OFFSETS_PARTITION))),
    ],
    tagged: &[],
};

static LIST_OFFSETS_PARTITION: Schema = Schema {
    fields: &[
        f("partition_index", ALL, Ty::Int32),
        f("current_leader_epoch", since(4), Ty::Int32),
        f("timestamp", ALL, Ty::Int64),
    ],
    tagged: &[],
};

// Metadata (api key 3)
static METADATA_REQUEST: Schema = Schema {
    fields: &[
        f("topics", ALL, Ty::NullableArray(&Ty::Struct(&METADATA_REQUEST_TOPIC))),
        f("allow_auto_topic_creation", since(4), Ty::Bool),
        f("include_cluster_authorized_operations", range(8, 10), Ty::Bool),
        f("include_topic_authorized_operations", since(8), Ty::Bool),
    ],
    tagged: &[],
};

static METADATA_REQUEST_TOPIC: Schema = Schema {
    fields: &[
        f("topic_id", since(10), Ty::Uuid),
        f("name", ALL, Ty::NullableString),
    ],
    tagged: &[],
};

// OffsetCommit (api key 8)
static OFFSET_COMMIT_REQUEST: Schema = Schema {
    fields: &[
        f("group_id", ALL, Ty::String),
        f("generation_id_or_member_epoch", ALL, Ty::Int32),
        f("member_id", ALL, Ty::String),
        f("group_instance_id", since(7), Ty::NullableString),
        f("retention_time_ms", range(2, 4), Ty::Int64),
        f("topics", ALL, Ty::Array(&Ty::Struct(&OFFSET_COMMIT_REQUEST_TOPIC))),
    ],
    tagged: &[],
};

static OFFSET_COMMIT_REQUEST_TOPIC: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("partitions", ALL, Ty::Array(&Ty::Struct(&OFFSET_COMMIT_REQUEST_PARTITION))),
    ],
    tagged: &[],
};

static OFFSET_COMMIT_REQUEST_PARTITION: Schema = Schema {
    fields: &[
        f("partition_index", ALL, Ty::Int32),
        f("committed_offset", ALL, Ty::Int64),
        f("committed_leader_epoch", since(6), Ty::Int32),
        f("committed_metadata", ALL, Ty::NullableString),
    ],
    tagged: &[],
};

// OffsetFetch (api key 9)
static OFFSET_FETCH_REQUEST: Schema = Schema {
    fields: &[
        f("group_id", range(1, 7), Ty::String),
        f("topics", range(1, 7), Ty::NullableArray(&Ty::Struct(&OFFSET_FETCH_REQUEST_TOPIC))),
        f("groups", since(8), Ty::Array(&Ty::Struct(&OFFSET_FETCH_REQUEST_GROUP))),
        f("require_stable", since(7), Ty::Bool),
    ],
    tagged: &[],
};

static OFFSET_FETCH_REQUEST_TOPIC: Schema = Schema {
    fields: &[
        f("name", range(1, 7), Ty::String),
        f("partition_indexes", range(1, 7), Ty::Array(&Ty::Int32)),
    ],
    tagged: &[],
};

static OFFSET_FETCH_REQUEST_GROUP: Schema = Schema {
    fields: &[
        f("group_id", since(8), Ty::String),
        f("member_id", since(9), Ty::NullableString),
        f("member_epoch", since(9), Ty::Int32),
        f("topics", since(8), Ty::NullableArray(&Ty::Struct(&OFFSET_FETCH_REQUEST_TOPICS))),
    ],
    tagged: &[],
};

static OFFSET_FETCH_REQUEST_TOPICS: Schema = Schema {
    fields: &[
        f("name", since(8), Ty::String),
        f("partition_indexes", since(8), Ty::Array(&Ty::Int32)),
    ],
    tagged: &[],
};

// FindCoordinator (api key 10)
static FIND_COORDINATOR_REQUEST: Schema = Schema {
    fields: &[
        f("key", range(0, 3), Ty::String),
        f("key_type", since(1), Ty::Int8),
        f("coordinator_keys", since(4), Ty::Array(&Ty::String)),
    ],
    tagged: &[],
};

// JoinGroup (api key 11)
static JOIN_GROUP_REQUEST: Schema = Schema {
    fields: &[
        f("group_id", ALL, Ty::String),
        f("session_timeout_ms", ALL, Ty::Int32),
        f("rebalance_timeout_ms", since(1), Ty::Int32),
        f("member_id", ALL, Ty::String),
        f("group_instance_id", since(5), Ty::NullableString),
        f("protocol_type", ALL, Ty::String),
        f("protocols", ALL, Ty::Array(&Ty::Struct(&JOIN_GROUP_REQUEST_PROTOCOL))),
        f("reason", since(8), Ty::NullableString),
    ],
    tagged: &[],
};

static JOIN_GROUP_REQUEST_PROTOCOL: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("metadata", ALL, Ty::Bytes),
    ],
    tagged: &[],
};

// Heartbeat (api key 12)
static HEARTBEAT_REQUEST: Schema = Schema {
    fields: &[
        f("group_id", ALL, Ty::String),
        f("generation_id", ALL, Ty::Int32),
        f("member_id", ALL, Ty::String),
        f("group_instance_id", since(3), Ty::NullableString),
    ],
    tagged: &[],
};

// LeaveGroup (api key 13)
static LEAVE_GROUP_REQUEST: Schema = Schema {
    fields: &[
        f("group_id", ALL, Ty::String),
        f("member_id", range(0, 2), Ty::String),
        f("members", since(3), Ty::Array(&Ty::Struct(&LEAVE_GROUP_MEMBER_IDENTITY))),
    ],
    tagged: &[],
};

static LEAVE_GROUP_MEMBER_IDENTITY: Schema = Schema {
    fields: &[
        f("member_id", since(3), Ty::String),
        f("group_instance_id", since(3), Ty::NullableString),
        f("reason", since(5), Ty::NullableString),
    ],
    tagged: &[],
};

// SyncGroup (api key 14)
static SYNC_GROUP_REQUEST: Schema = Schema {
    fields: &[
        f("group_id", ALL, Ty::String),
        f("generation_id", ALL, Ty::Int32),
        f("member_id", ALL, Ty::String),
        f("group_instance_id", since(3), Ty::NullableString),
        f("protocol_type", since(5), Ty::NullableString),
        f("protocol_name", since(5), Ty::NullableString),
        f("assignments", ALL, Ty::Array(&Ty::Struct(&SYNC_GROUP_REQUEST_ASSIGNMENT))),
    ],
    tagged: &[],
};

static SYNC_GROUP_REQUEST_ASSIGNMENT: Schema = Schema {
    fields: &[
        f("member_id", ALL, Ty::String),
        f("assignment", ALL, Ty::Bytes),
    ],
    tagged: &[],
};

// DescribeGroups (api key 15)
static DESCRIBE_GROUPS_REQUEST: Schema = Schema {
    fields: &[
        f("groups", ALL, Ty::Array(&Ty::String)),
        f("include_authorized_operations", since(3), Ty::Bool),
    ],
    tagged: &[],
};

// ListGroups (api key 16)
static LIST_GROUPS_REQUEST: Schema = Schema {
    fields: &[
        f("states_filter", since(4), Ty::Array(&Ty::String)),
        f("types_filter", since(5), Ty::Array(&Ty::String)),
    ],
    tagged: &[],
};

// SaslHandshake (api key 17)
static SASL_HANDSHAKE_REQUEST: Schema = Schema {
    fields: &[
        f("mechanism", ALL, Ty::String),
    ],
    tagged: &[],
};

// SaslAuthenticate (api key 36)
static SASL_AUTHENTICATE_REQUEST: Schema = Schema {
    fields: &[
        f("auth_bytes", ALL, Ty::Bytes),
    ],
    tagged: &[],
};

// ApiVersions (api key 18)
static API_VERSIONS_REQUEST: Schema = Schema {
    fields: &[
        f("client_software_name", since(3), Ty::String),
        f("client_software_version", since(3), Ty::String),
    ],
    tagged: &[],
};

// CreateTopics (api key 19)
static CREATE_TOPICS_REQUEST: Schema = Schema {
    fields: &[
        f("topics", ALL, Ty::Array(&Ty::Struct(&CREATE_TOPICS_CREATABLE_TOPIC))),
        f("timeout_ms", ALL, Ty::Int32),
        f("validate_only", ALL, Ty::Bool),
    ],
    tagged: &[],
};

static CREATE_TOPICS_CREATABLE_TOPIC: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("num_partitions", ALL, Ty::Int32),
        f("replication_factor", ALL, Ty::Int16),
        f("assignments", ALL, Ty::Array(&Ty::Struct(&CREATE_TOPICS_CREATABLE_REPLICA_ASSIGNMENT))),
        f("configs", ALL, Ty::Array(&Ty::Struct(&CREATE_TOPICS_CREATABLE_TOPIC_CONFIG))),
    ],
    tagged: &[],
};

static CREATE_TOPICS_CREATABLE_REPLICA_ASSIGNMENT: Schema = Schema {
    fields: &[
        f("partition_index", ALL, Ty::Int32),
        f("broker_ids", ALL, Ty::Array(&Ty::Int32)),
    ],
    tagged: &[],
};

static CREATE_TOPICS_CREATABLE_TOPIC_CONFIG: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("value", ALL, Ty::NullableString),
    ],
    tagged: &[],
};

// DeleteTopics (api key 20)
static DELETE_TOPICS_REQUEST: Schema = Schema {
    fields: &[
        f("topics", since(6), Ty::Array(&Ty::Struct(&DELETE_TOPICS_DELETE_TOPIC_STATE))),
        f("topic_names", range(1, 5), Ty::Array(&Ty::String)),
        f("timeout_ms", ALL, Ty::Int32),
    ],
    tagged: &[],
};

static DELETE_TOPICS_DELETE_TOPIC_STATE: Schema = Schema {
    fields: &[
        f("name", since(6), Ty::NullableString),
        f("topic_id", since(6), Ty::Uuid),
    ],
    tagged: &[],
};

// DeleteRecords (api key 21)
static DELETE_RECORDS_REQUEST: Schema = Schema {
    fields: &[
        f("topics", ALL, Ty::Array(&Ty::Struct(&DELETE_RECORDS_TOPIC))),
        f("timeout_ms", ALL, Ty::Int32),
    ],
    tagged: &[],
};

static DELETE_RECORDS_TOPIC: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("partitions", ALL, Ty::Array(&Ty::Struct(&DELETE_RECORDS_PARTITION))),
    ],
    tagged: &[],
};

static DELETE_RECORDS_PARTITION: Schema = Schema {
    fields: &[
        f("partition_index", ALL, Ty::Int32),
        f("offset", ALL, Ty::Int64),
    ],
    tagged: &[],
};

// InitProducerId (api key 22)
static INIT_PRODUCER_ID_REQUEST: Schema = Schema {
    fields: &[
        f("transactional_id", ALL, Ty::NullableString),
        f("transaction_timeout_ms", ALL, Ty::Int32),
        f("producer_id", since(3), Ty::Int64),
        f("producer_epoch", since(3), Ty::Int16),
    ],
    tagged: &[],
};

// OffsetForLeaderEpoch (api key 23)
static OFFSET_FOR_LEADER_EPOCH_REQUEST: Schema = Schema {
    fields: &[
        f("replica_id", since(3), Ty::Int32),
        f("topics", ALL, Ty::Array(&Ty::Struct(&OFFSET_FOR_LEADER_EPOCH_OFFSET_FOR_LEADER_TOPIC))),
    ],
    tagged: &[],
};

static OFFSET_FOR_LEADER_EPOCH_OFFSET_FOR_LEADER_TOPIC: Schema = Schema {
    fields: &[
        f("topic", ALL, Ty::String),
        f("partitions", ALL, Ty::Array(&Ty::Struct(&OFFSET_FOR_LEADER_EPOCH_OFFSET_FOR_LEADER_PARTITION))),
    ],
    tagged: &[],
};

static OFFSET_FOR_LEADER_EPOCH_OFFSET_FOR_LEADER_PARTITION: Schema = Schema {
    fields: &[
        f("partition", ALL, Ty::Int32),
        f("current_leader_epoch", ALL, Ty::Int32),
        f("leader_epoch", ALL, Ty::Int32),
    ],
    tagged: &[],
};

// AddPartitionsToTxn (api key 24)
static ADD_PARTITIONS_TO_TXN_REQUEST: Schema = Schema {
    fields: &[
        f("transactions", since(4), Ty::Array(&Ty::Struct(&ADD_PARTITIONS_TO_TXN_TRANSACTION))),
        f("v3_and_below_transactional_id", range(0, 3), Ty::String),
        f("v3_and_below_producer_id", range(0, 3), Ty::Int64),
        f("v3_and_below_producer_epoch", range(0, 3), Ty::Int16),
        f("v3_and_below_topics", range(0, 3), Ty::Array(&Ty::Struct(&ADD_PARTITIONS_TO_TXN_TOPIC))),
    ],
    tagged: &[],
};

static ADD_PARTITIONS_TO_TXN_TRANSACTION: Schema = Schema {
    fields: &[
        f("transactional_id", since(4), Ty::String),
        f("producer_id", since(4), Ty::Int64),
        f("producer_epoch", since(4), Ty::Int16),
        f("verify_only", since(4), Ty::Bool),
        f("topics", since(4), Ty::Array(&Ty::Struct(&ADD_PARTITIONS_TO_TXN_TOPIC))),
    ],
    tagged: &[],
};

static ADD_PARTITIONS_TO_TXN_TOPIC: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("partitions", ALL, Ty::Array(&Ty::Int32)),
    ],
    tagged: &[],
};

// AddOffsetsToTxn (api key 25)
static ADD_OFFSETS_TO_TXN_REQUEST: Schema = Schema {
    fields: &[
        f("transactional_id", ALL, Ty::String),
        f("producer_id", ALL, Ty::Int64),
        f("producer_epoch", ALL, Ty::Int16),
        f("group_id", ALL, Ty::String),
    ],
    tagged: &[],
};

// EndTxn (api key 26)
static END_TXN_REQUEST: Schema = Schema {
    fields: &[
        f("transactional_id", ALL, Ty::String),
        f("producer_id", ALL, Ty::Int64),
        f("producer_epoch", ALL, Ty::Int16),
        f("committed", ALL, Ty::Bool),
    ],
    tagged: &[],
};

// TxnOffsetCommit (api key 28)
static TXN_OFFSET_COMMIT_REQUEST: Schema = Schema {
    fields: &[
        f("transactional_id", ALL, Ty::String),
        f("group_id", ALL, Ty::String),
        f("producer_id", ALL, Ty::Int64),
        f("producer_epoch", ALL, Ty::Int16),
        f("generation_id", since(3), Ty::Int32),
        f("member_id", since(3), Ty::String),
        f("group_instance_id", since(3), Ty::NullableString),
        f("topics", ALL, Ty::Array(&Ty::Struct(&TXN_OFFSET_COMMIT_REQUEST_TOPIC))),
    ],
    tagged: &[],
};

static TXN_OFFSET_COMMIT_REQUEST_TOPIC: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("partitions", ALL, Ty::Array(&Ty::Struct(&TXN_OFFSET_COMMIT_REQUEST_PARTITION))),
    ],
    tagged: &[],
};

static TXN_OFFSET_COMMIT_REQUEST_PARTITION: Schema = Schema {
    fields: &[
        f("partition_index", ALL, Ty::Int32),
        f("committed_offset", ALL, Ty::Int64),
        f("committed_leader_epoch", since(2), Ty::Int32),
        f("committed_metadata", ALL, Ty::NullableString),
    ],
    tagged: &[],
};

// DescribeConfigs (api key 32)
static DESCRIBE_CONFIGS_REQUEST: Schema = Schema {
    fields: &[
        f("resources", ALL, Ty::Array(&Ty::Struct(&DESCRIBE_CONFIGS_RESOURCE))),
        f("include_synonyms", ALL, Ty::Bool),
        f("include_documentation", since(3), Ty::Bool),
    ],
    tagged: &[],
};

static DESCRIBE_CONFIGS_RESOURCE: Schema = Schema {
    fields: &[
        f("resource_type", ALL, Ty::Int8),
        f("resource_name", ALL, Ty::String),
        f("configuration_keys", ALL, Ty::NullableArray(&Ty::String)),
    ],
    tagged: &[],
};

// AlterConfigs (api key 33)
static ALTER_CONFIGS_REQUEST: Schema = Schema {
    fields: &[
        f("resources", ALL, Ty::Array(&Ty::Struct(&ALTER_CONFIGS_RESOURCE))),
        f("validate_only", ALL, Ty::Bool),
    ],
    tagged: &[],
};

static ALTER_CONFIGS_RESOURCE: Schema = Schema {
    fields: &[
        f("resource_type", ALL, Ty::Int8),
        f("resource_name", ALL, Ty::String),
        f("configs", ALL, Ty::Array(&Ty::Struct(&ALTER_CONFIGS_ALTERABLE_CONFIG))),
    ],
    tagged: &[],
};

static ALTER_CONFIGS_ALTERABLE_CONFIG: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("value", ALL, Ty::NullableString),
    ],
    tagged: &[],
};

// DescribeLogDirs (api key 35)
static DESCRIBE_LOG_DIRS_REQUEST: Schema = Schema {
    fields: &[
        f("topics", ALL, Ty::NullableArray(&Ty::Struct(&DESCRIBE_LOG_DIRS_DESCRIBABLE_LOG_DIR_TOPIC))),
    ],
    tagged: &[],
};

static DESCRIBE_LOG_DIRS_DESCRIBABLE_LOG_DIR_TOPIC: Schema = Schema {
    fields: &[
        f("topic", ALL, Ty::String),
        f("partitions", ALL, Ty::Array(&Ty::Int32)),
    ],
    tagged: &[],
};

// CreatePartitions (api key 37)
static CREATE_PARTITIONS_REQUEST: Schema = Schema {
    fields: &[
        f("topics", ALL, Ty::Array(&Ty::Struct(&CREATE_PARTITIONS_TOPIC))),
        f("timeout_ms", ALL, Ty::Int32),
        f("validate_only", ALL, Ty::Bool),
    ],
    tagged: &[],
};

static CREATE_PARTITIONS_TOPIC: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("count", ALL, Ty::Int32),
        f("assignments", ALL, Ty::NullableArray(&Ty::Struct(&CREATE_PARTITIONS_ASSIGNMENT))),
    ],
    tagged: &[],
};

static CREATE_PARTITIONS_ASSIGNMENT: Schema = Schema {
    fields: &[
        f("broker_ids", ALL, Ty::Array(&Ty::Int32)),
    ],
    tagged: &[],
};

// DeleteGroups (api key 42)
static DELETE_GROUPS_REQUEST: Schema = Schema {
    fields: &[
        f("groups_names", ALL, Ty::Array(&Ty::String)),
    ],
    tagged: &[],
};

// IncrementalAlterConfigs (api key 44)
static INCREMENTAL_ALTER_CONFIGS_REQUEST: Schema = Schema {
    fields: &[
        f("resources", ALL, Ty::Array(&Ty::Struct(&INCREMENTAL_ALTER_CONFIGS_ALTER_CONFIGS_RESOURCE))),
        f("validate_only", ALL, Ty::Bool),
    ],
    tagged: &[],
};

static INCREMENTAL_ALTER_CONFIGS_ALTER_CONFIGS_RESOURCE: Schema = Schema {
    fields: &[
        f("resource_type", ALL, Ty::Int8),
        f("resource_name", ALL, Ty::String),
        f("configs", ALL, Ty::Array(&Ty::Struct(&INCREMENTAL_ALTER_CONFIGS_ALTERABLE_CONFIG))),
    ],
    tagged: &[],
};

static INCREMENTAL_ALTER_CONFIGS_ALTERABLE_CONFIG: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("config_operation", ALL, Ty::Int8),
        f("value", ALL, Ty::NullableString),
    ],
    tagged: &[],
};

// OffsetDelete (api key 47)
static OFFSET_DELETE_REQUEST: Schema = Schema {
    fields: &[
        f("group_id", ALL, Ty::String),
        f("topics", ALL, Ty::Array(&Ty::Struct(&OFFSET_DELETE_REQUEST_TOPIC))),
    ],
    tagged: &[],
};

static OFFSET_DELETE_REQUEST_TOPIC: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("partitions", ALL, Ty::Array(&Ty::Struct(&OFFSET_DELETE_REQUEST_PARTITION))),
    ],
    tagged: &[],
};

static OFFSET_DELETE_REQUEST_PARTITION: Schema = Schema {
    fields: &[
        f("partition_index", ALL, Ty::Int32),
    ],
    tagged: &[],
};

// DescribeQuorum (api key 55)
static DESCRIBE_QUORUM_REQUEST: Schema = Schema {
    fields: &[
        f("topics", ALL, Ty::Array(&Ty::Struct(&DESCRIBE_QUORUM_TOPIC))),
    ],
    tagged: &[],
};

static DESCRIBE_QUORUM_TOPIC: Schema = Schema {
    fields: &[
        f("topic_name", ALL, Ty::String),
        f("partitions", ALL, Ty::Array(&Ty::Struct(&DESCRIBE_QUORUM_PARTITION))),
    ],
    tagged: &[],
};

static DESCRIBE_QUORUM_PARTITION: Schema = Schema {
    fields: &[
        f("partition_index", ALL, Ty::Int32),
    ],
    tagged: &[],
};

// AlterPartition (api key 56)
static ALTER_PARTITION_REQUEST: Schema = Schema {
    fields: &[
        f("broker_id", ALL, Ty::Int32),
        f("broker_epoch", ALL, Ty::Int64),
        f("topics", ALL, Ty::Array(&Ty::Struct(&ALTER_PARTITION_TOPIC))),
    ],
    tagged: &[],
};

static ALTER_PARTITION_TOPIC: Schema = Schema {
    fields: &[
        f("topic_id", ALL, Ty::Uuid),
        f("partitions", ALL, Ty::Array(&Ty::Struct(&ALTER_PARTITION_PARTITION))),
    ],
    tagged: &[],
};

static ALTER_PARTITION_PARTITION: Schema = Schema {
    fields: &[
        f("partition_index", ALL, Ty::Int32),
        f("leader_epoch", ALL, Ty::Int32),
        f("new_isr", range(0, 2), Ty::Array(&Ty::Int32)),
        f("new_isr_with_epochs", since(3), Ty::Array(&Ty::Struct(&ALTER_PARTITION_BROKER_STATE))),
        f("leader_recovery_state", since(1), Ty::Int8),
        f("partition_epoch", ALL, Ty::Int32),
    ],
    tagged: &[],
};

static ALTER_PARTITION_BROKER_STATE: Schema = Schema {
    fields: &[
        f("broker_id", ALL, Ty::Int32),
        f("broker_epoch", ALL, Ty::Int64),
    ],
    tagged: &[],
};

// Envelope (api key 58)
static ENVELOPE_REQUEST: Schema = Schema {
    fields: &[
        f("request_data", ALL, Ty::Bytes),
        f("request_principal", ALL, Ty::NullableBytes),
        f("client_host_address", ALL, Ty::Bytes),
    ],
    tagged: &[],
};

// BrokerRegistration (api key 62)
static BROKER_REGISTRATION_REQUEST: Schema = Schema {
    fields: &[
        f("broker_id", ALL, Ty::Int32),
        f("cluster_id", ALL, Ty::String),
        f("incarnation_id", ALL, Ty::Uuid),
        f("listeners", ALL, Ty::Array(&Ty::Struct(&BROKER_REGISTRATION_LISTENER))),
        f("features", ALL, Ty::Array(&Ty::Struct(&BROKER_REGISTRATION_FEATURE))),
        f("rack", ALL, Ty::NullableString),
        f("is_migrating_zk_broker", since(1), Ty::Bool),
        f("log_dirs", since(2), Ty::Array(&Ty::Uuid)),
        f("previous_broker_epoch", since(3), Ty::Int64),
    ],
    tagged: &[],
};

static BROKER_REGISTRATION_LISTENER: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("host", ALL, Ty::String),
        f("port", ALL, Ty::Int16),
        f("security_protocol", ALL, Ty::Int16),
    ],
    tagged: &[],
};

static BROKER_REGISTRATION_FEATURE: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("min_supported_version", ALL, Ty::Int16),
        f("max_supported_version", ALL, Ty::Int16),
    ],
    tagged: &[],
};

// BrokerHeartbeat (api key 63)
static BROKER_HEARTBEAT_REQUEST: Schema = Schema {
    fields: &[
        f("broker_id", ALL, Ty::Int32),
        f("broker_epoch", ALL, Ty::Int64),
        f("current_metadata_offset", ALL, Ty::Int64),
        f("want_fence", ALL, Ty::Bool),
        f("want_shut_down", ALL, Ty::Bool),
    ],
    tagged: &[
        t(0, "offline_log_dirs", since(1), Ty::Array(&Ty::Uuid)),
    ],
};

// AllocateProducerIds (api key 67)
static ALLOCATE_PRODUCER_IDS_REQUEST: Schema = Schema {
    fields: &[
        f("broker_id", ALL, Ty::Int32),
        f("broker_epoch", ALL, Ty::Int64),
    ],
    tagged: &[],
};

// DescribeCluster (api key 60)
static DESCRIBE_CLUSTER_REQUEST: Schema = Schema {
    fields: &[
        f("include_cluster_authorized_operations", ALL, Ty::Bool),
        f("endpoint_type", since(1), Ty::Int8),
        f("include_fenced_brokers", since(2), Ty::Bool),
    ],
    tagged: &[],
};

// DescribeProducers (api key 61)
// WriteTxnMarkers (api key 27)
static WRITE_TXN_MARKERS_REQUEST: Schema = Schema {
    fields: &[
        f("markers", ALL, Ty::Array(&Ty::Struct(&WRITABLE_TXN_MARKER))),
    ],
    tagged: &[],
};

static WRITABLE_TXN_MARKER: Schema = Schema {
    fields: &[
        f("producer_id", ALL, Ty::Int64),
        f("producer_epoch", ALL, Ty::Int16),
        f("transaction_result", ALL, Ty::Bool),
        f("topics", ALL, Ty::Array(&Ty::Struct(&WRITABLE_TXN_MARKER_TOPIC))),
        f("coordinator_epoch", ALL, Ty::Int32),
    ],
    tagged: &[],
};

static WRITABLE_TXN_MARKER_TOPIC: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("partition_indexes", ALL, Ty::Array(&Ty::Int32)),
    ],
    tagged: &[],
};

// DescribeProducers (api key 61)
static DESCRIBE_PRODUCERS_REQUEST: Schema = Schema {
    fields: &[
        f("topics", ALL, Ty::Array(&Ty::Struct(&DESCRIBE_PRODUCERS_TOPIC_REQUEST))),
    ],
    tagged: &[],
};

static DESCRIBE_PRODUCERS_TOPIC_REQUEST: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("partition_indexes", ALL, Ty::Array(&Ty::Int32)),
    ],
    tagged: &[],
};

// DescribeAcls (api key 29): one filter.
static DESCRIBE_ACLS_REQUEST: Schema = Schema {
    fields: &[
        f("resource_type_filter", ALL, Ty::Int8),
        f("resource_name_filter", ALL, Ty::NullableString),
        f("pattern_type_filter", ALL, Ty::Int8),
        f("principal_filter", ALL, Ty::NullableString),
        f("host_filter", ALL, Ty::NullableString),
        f("operation", ALL, Ty::Int8),
        f("permission_type", ALL, Ty::Int8),
    ],
    tagged: &[],
};

// CreateAcls (api key 30)
static CREATE_ACLS_REQUEST: Schema = Schema {
    fields: &[
        f("creations", ALL, Ty::Array(&Ty::Struct(&CREATE_ACLS_CREATION))),
    ],
    tagged: &[],
};

static CREATE_ACLS_CREATION: Schema = Schema {
    fields: &[
        f("resource_type", ALL, Ty::Int8),
        f("resource_name", ALL, Ty::String),
        f("resource_pattern_type", ALL, Ty::Int8),
        f("principal", ALL, Ty::String),
        f("host", ALL, Ty::String),
        f("operation", ALL, Ty::Int8),
        f("permission_type", ALL, Ty::Int8),
    ],
    tagged: &[],
};

// DeleteAcls (api key 31): filters as DescribeAcls'.
static DELETE_ACLS_REQUEST: Schema = Schema {
    fields: &[
        f("filters", ALL, Ty::Array(&Ty::Struct(&DESCRIBE_ACLS_REQUEST))),
    ],
    tagged: &[],
};

// ElectLeaders (api key 43): a null topic list means every partition.
static ELECT_LEADERS_REQUEST: Schema = Schema {
    fields: &[
        f("election_type", since(1), Ty::Int8),
        f("topic_partitions", ALL, Ty::NullableArray(&Ty::Struct(&ELECT_LEADERS_TOPIC))),
        f("timeout_ms", ALL, Ty::Int32),
    ],
    tagged: &[],
};

static ELECT_LEADERS_TOPIC: Schema = Schema {
    fields: &[
        f("topic", ALL, Ty::String),
        f("partitions", ALL, Ty::Array(&Ty::Int32)),
    ],
    tagged: &[],
};

// AlterPartitionReassignments (api key 45): a null replica list cancels.
static ALTER_PARTITION_REASSIGNMENTS_REQUEST: Schema = Schema {
    fields: &[
        f("timeout_ms", ALL, Ty::Int32),
        f("allow_replication_factor_change", since(1), Ty::Bool),
        f("topics", ALL, Ty::Array(&Ty::Struct(&REASSIGNABLE_TOPIC))),
    ],
    tagged: &[],
};

static REASSIGNABLE_TOPIC: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("partitions", ALL, Ty::Array(&Ty::Struct(&REASSIGNABLE_PARTITION))),
    ],
    tagged: &[],
};

static REASSIGNABLE_PARTITION: Schema = Schema {
    fields: &[
        f("partition_index", ALL, Ty::Int32),
        f("replicas", ALL, Ty::NullableArray(&Ty::Int32)),
    ],
    tagged: &[],
};

// ListPartitionReassignments (api key 46): a null topic list means every partition.
static LIST_PARTITION_REASSIGNMENTS_REQUEST: Schema = Schema {
    fields: &[
        f("timeout_ms", ALL, Ty::Int32),
        f("topics", ALL, Ty::NullableArray(&Ty::Struct(&LIST_REASSIGNMENTS_TOPIC))),
    ],
    tagged: &[],
};

static LIST_REASSIGNMENTS_TOPIC: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("partition_indexes", ALL, Ty::Array(&Ty::Int32)),
    ],
    tagged: &[],
};

// DescribeTopicPartitions (api key 75): the cursor is a nullable struct.
static DESCRIBE_TOPIC_PARTITIONS_REQUEST: Schema = Schema {
    fields: &[
        f("topics", ALL, Ty::Array(&Ty::Struct(&DESCRIBE_TOPIC_PARTITIONS_TOPIC))),
        f("response_partition_limit", ALL, Ty::Int32),
        f("cursor", ALL, Ty::NullableStruct(&DESCRIBE_TOPIC_PARTITIONS_CURSOR)),
    ],
    tagged: &[],
};

static DESCRIBE_TOPIC_PARTITIONS_TOPIC: Schema = Schema {
    fields: &[f("name", ALL, Ty::String)],
    tagged: &[],
};

static DESCRIBE_TOPIC_PARTITIONS_CURSOR: Schema = Schema {
    fields: &[
        f("topic_name", ALL, Ty::String),
        f("partition_index", ALL, Ty::Int32),
    ],
    tagged: &[],
};

// DescribeClientQuotas (api key 48)
static DESCRIBE_CLIENT_QUOTAS_REQUEST: Schema = Schema {
    fields: &[
        f("components", ALL, Ty::Array(&Ty::Struct(&DESCRIBE_CLIENT_QUOTAS_COMPONENT))),
        f("strict", ALL, Ty::Bool),
    ],
    tagged: &[],
};

static DESCRIBE_CLIENT_QUOTAS_COMPONENT: Schema = Schema {
    fields: &[
        f("entity_type", ALL, Ty::String),
        f("match_type", ALL, Ty::Int8),
        f("match", ALL, Ty::NullableString),
    ],
    tagged: &[],
};

// AlterClientQuotas (api key 49)
static ALTER_CLIENT_QUOTAS_REQUEST: Schema = Schema {
    fields: &[
        f("entries", ALL, Ty::Array(&Ty::Struct(&ALTER_CLIENT_QUOTAS_ENTRY))),
        f("validate_only", ALL, Ty::Bool),
    ],
    tagged: &[],
};

static ALTER_CLIENT_QUOTAS_ENTRY: Schema = Schema {
    fields: &[
        f("entity", ALL, Ty::Array(&Ty::Struct(&ALTER_CLIENT_QUOTAS_ENTITY))),
        f("ops", ALL, Ty::Array(&Ty::Struct(&ALTER_CLIENT_QUOTAS_OP))),
    ],
    tagged: &[],
};

static ALTER_CLIENT_QUOTAS_ENTITY: Schema = Schema {
    fields: &[
        f("entity_type", ALL, Ty::String),
        f("entity_name", ALL, Ty::NullableString),
    ],
    tagged: &[],
};

static ALTER_CLIENT_QUOTAS_OP: Schema = Schema {
    fields: &[
        f("key", ALL, Ty::String),
        // A float64: eight bytes, like an int64.
        f("value", ALL, Ty::Int64),
        f("remove", ALL, Ty::Bool),
    ],
    tagged: &[],
};

// DescribeUserScramCredentials (api key 50)
static DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST: Schema = Schema {
    fields: &[
        f("users", ALL, Ty::NullableArray(&Ty::Struct(&DESCRIBE_USER_SCRAM_CREDENTIALS_USER))),
    ],
    tagged: &[],
};

static DESCRIBE_USER_SCRAM_CREDENTIALS_USER: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
    ],
    tagged: &[],
};

// AlterUserScramCredentials (api key 51)
static ALTER_USER_SCRAM_CREDENTIALS_REQUEST: Schema = Schema {
    fields: &[
        f("deletions", ALL, Ty::Array(&Ty::Struct(&ALTER_USER_SCRAM_CREDENTIALS_DELETION))),
        f("upsertions", ALL, Ty::Array(&Ty::Struct(&ALTER_USER_SCRAM_CREDENTIALS_UPSERTION))),
    ],
    tagged: &[],
};

static ALTER_USER_SCRAM_CREDENTIALS_DELETION: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("mechanism", ALL, Ty::Int8),
    ],
    tagged: &[],
};

static ALTER_USER_SCRAM_CREDENTIALS_UPSERTION: Schema = Schema {
    fields: &[
        f("name", ALL, Ty::String),
        f("mechanism", ALL, Ty::Int8),
        f("iterations", ALL, Ty::Int32),
        f("salt", ALL, Ty::Bytes),
        f("salted_password", ALL, Ty::Bytes),
    ],
    tagged: &[],
};

// DescribeTransactions (api key 65)
static DESCRIBE_TRANSACTIONS_REQUEST: Schema = Schema {
    fields: &[
        f("transactional_ids", ALL, Ty::Array(&Ty::String)),
    ],
    tagged: &[],
};

// ListTransactions (api key 66)
static LIST_TRANSACTIONS_REQUEST: Schema = Schema {
    fields: &[
        f("state_filters", ALL, Ty::Array(&Ty::String)),
        f("producer_id_filters", ALL, Ty::Array(&Ty::Int64)),
        f("duration_filter", since(1), Ty::Int64),
        f("transactional_id_pattern", since(2), Ty::NullableString),
    ],
    tagged: &[],
};

// ConsumerGroupHeartbeat (api key 68)
static CONSUMER_GROUP_HEARTBEAT_REQUEST: Schema = Schema {
    fields: &[
        f("group_id", ALL, Ty::String),
        f("member_id", ALL, Ty::String),
        f("member_epoch", ALL, Ty::Int32),
        f("instance_id", ALL, Ty::NullableString),
        f("rack_id", ALL, Ty::NullableString),
        f("rebalance_timeout_ms", ALL, Ty::Int32),
        f("subscribed_topic_names", ALL, Ty::NullableArray(&Ty::String)),
        f("subscribed_topic_regex", since(1), Ty::NullableString),
        f("server_assignor", ALL, Ty::NullableString),
        f("topic_partitions", ALL, Ty::NullableArray(&Ty::Struct(&CONSUMER_GROUP_HEARTBEAT_REQUEST_TOPIC_PARTITIONS))),
    ],
    tagged: &[],
};

static CONSUMER_GROUP_HEARTBEAT_REQUEST_TOPIC_PARTITIONS: Schema = Schema {
    fields: &[
        f("topic_id", ALL, Ty::Uuid),
        f("partitions", ALL, Ty::Array(&Ty::Int32)),
    ],
    tagged: &[],
};

// ConsumerGroupDescribe (api key 69)
static CONSUMER_GROUP_DESCRIBE_REQUEST: Schema = Schema {
    fields: &[
        f("group_ids", ALL, Ty::Array(&Ty::String)),
        f("include_authorized_operations", ALL, Ty::Bool),
    ],
    tagged: &[],
};
}

use tables::MESSAGES;

#[cfg(test)]
mod tests {
    //! The tables are checked against `kafka-protocol` itself: bodies generated from the
    //! tables (random values, nested arrays, nulls, known and unknown tagged fields) must
    //! decode with `kafka-protocol`, leave nothing unread, and re-encode to the same bytes.
    //! Any field missing, extra, misordered, mistyped or wrongly versioned shows up as a
    //! decode error, leftover bytes or a byte difference.

    use super::*;
    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::messages::{ApiKey, RequestKind};
    use proptest::prelude::*;

    /// splitmix64: deterministic from the proptest-chosen seed, so failures shrink and replay.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Writes a random body for one message version, following the tables.
    struct Gen<'r> {
        rng: &'r mut Rng,
        out: BytesMut,
        version: i16,
        flexible: bool,
        /// Nesting depth, to keep nested arrays small.
        depth: u32,
        /// Non-nullable strings, bytes and arrays written so far (outside tagged fields).
        non_nullable_seen: usize,
        /// Write null for the non-nullable value with this index, to probe that
        /// `kafka-protocol` refuses it too.
        null_at: Option<usize>,
    }

    fn put_uvarint(out: &mut BytesMut, mut v: u32) {
        while v >= 0x80 {
            out.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        out.put_u8(v as u8);
    }

    impl Gen<'_> {
        fn put_len(&mut self, len: Option<usize>, classic_i16: bool) {
            match (self.flexible, len) {
                (true, None) => put_uvarint(&mut self.out, 0),
                (true, Some(n)) => put_uvarint(&mut self.out, n as u32 + 1),
                (false, None) if classic_i16 => self.out.put_i16(-1),
                (false, None) => self.out.put_i32(-1),
                (false, Some(n)) if classic_i16 => self.out.put_i16(n as i16),
                (false, Some(n)) => self.out.put_i32(n as i32),
            }
        }

        /// `non_default` forces values a tagged-field encoder would not omit.
        fn value(&mut self, ty: &Ty, non_default: bool) {
            let null = !non_default && self.rng.below(4) == 0;
            if !non_default && matches!(ty, Ty::String | Ty::Bytes | Ty::Array(_)) {
                let index = self.non_nullable_seen;
                self.non_nullable_seen += 1;
                if self.null_at == Some(index) {
                    self.put_len(None, matches!(ty, Ty::String));
                    return;
                }
            }
            match ty {
                Ty::Int8 => self.out.put_u8(self.rng.next() as u8),
                Ty::Bool => self.out.put_u8(self.rng.below(2) as u8),
                Ty::Int16 => self.out.put_u16(self.rng.next() as u16),
                Ty::Int32 => self.out.put_u32(self.rng.next() as u32),
                Ty::Int64 => self.out.put_u64(self.rng.next()),
                Ty::Uuid => {
                    self.out.put_u64(self.rng.next() | 1);
                    self.out.put_u64(self.rng.next());
                }
                Ty::String | Ty::NullableString => {
                    if null && matches!(ty, Ty::NullableString) {
                        self.put_len(None, true);
                    } else {
                        let n = self.rng.below(6) as usize + usize::from(non_default);
                        self.put_len(Some(n), true);
                        for _ in 0..n {
                            self.out.put_u8(b'a' + self.rng.below(26) as u8);
                        }
                    }
                }
                Ty::Bytes | Ty::NullableBytes => {
                    if null && matches!(ty, Ty::NullableBytes) {
                        self.put_len(None, false);
                    } else {
                        let n = self.rng.below(6) as usize;
                        self.put_len(Some(n), false);
                        for _ in 0..n {
                            self.out.put_u8(self.rng.next() as u8);
                        }
                    }
                }
                Ty::Struct(schema) => self.schema(schema),
                Ty::NullableStruct(schema) => {
                    if null {
                        self.out.put_i8(-1);
                    } else {
                        self.out.put_i8(1);
                        self.schema(schema);
                    }
                }
                Ty::Array(elem) | Ty::NullableArray(elem) => {
                    if null && matches!(ty, Ty::NullableArray(_)) {
                        self.put_len(None, false);
                    } else {
                        // Mostly non-empty, shrinking with depth.
                        let max = if self.depth < 3 { 3 } else { 1 };
                        // A tagged array is written only when not empty (its default).
                        let n = (self.rng.below(max + 1) as usize).max(usize::from(non_default));
                        self.put_len(Some(n), false);
                        self.depth += 1;
                        for _ in 0..n {
                            self.value(elem, false);
                        }
                        self.depth -= 1;
                    }
                }
            }
        }

        fn schema(&mut self, schema: &Schema) {
            for field in schema.fields {
                if field.versions.contains(self.version) {
                    self.value(&field.ty, false);
                }
            }
            if !self.flexible {
                return;
            }
            // Known tags first, in tag order, as the encoder writes them; then unknown tags
            // above every known one.
            let mut fields: Vec<(u32, Bytes)> = Vec::new();
            for k in schema.tagged {
                if k.versions.contains(self.version) && self.rng.below(2) == 0 {
                    let mut sub = Gen {
                        rng: self.rng,
                        out: BytesMut::new(),
                        version: self.version,
                        flexible: self.flexible,
                        depth: self.depth + 1,
                        non_nullable_seen: 0,
                        null_at: None,
                    };
                    sub.value(&k.ty, true);
                    fields.push((k.tag, sub.out.freeze()));
                }
            }
            let mut tag = schema.tagged.iter().map(|k| k.tag + 1).max().unwrap_or(0);
            for _ in 0..self.rng.below(3) {
                tag += self.rng.below(40) as u32;
                let len = self.rng.below(5) as usize;
                let value: Vec<u8> = (0..len).map(|_| self.rng.next() as u8).collect();
                fields.push((tag, Bytes::from(value)));
                tag += 1;
            }
            put_uvarint(&mut self.out, fields.len() as u32);
            for (tag, value) in fields {
                put_uvarint(&mut self.out, tag);
                put_uvarint(&mut self.out, value.len() as u32);
                self.out.put_slice(&value);
            }
        }
    }

    fn generate(message: &Message, version: i16, seed: u64) -> Bytes {
        generate_with_null(message, version, seed, None).0
    }

    /// A generated body, with null written for the `null_at`-th non-nullable value if given,
    /// and the number of non-nullable values the body has.
    fn generate_with_null(
        message: &Message,
        version: i16,
        seed: u64,
        null_at: Option<usize>,
    ) -> (Bytes, usize) {
        let mut rng = Rng(seed);
        let mut gen = Gen {
            rng: &mut rng,
            out: BytesMut::new(),
            version,
            flexible: message.flexible_from.is_some_and(|v| version >= v),
            depth: 0,
            non_nullable_seen: 0,
            null_at,
        };
        gen.schema(message.body);
        (gen.out.freeze(), gen.non_nullable_seen)
    }

    fn api(message: &Message) -> ApiKey {
        ApiKey::try_from(message.api_key).expect("table api keys are Kafka api keys")
    }

    fn all_versions() -> impl Iterator<Item = (&'static Message, i16)> {
        MESSAGES
            .iter()
            .flat_map(|m| (m.versions.min..=m.versions.max).map(move |v| (m, v)))
    }

    /// Checks one generated body against the guard and against `kafka-protocol`.
    fn roundtrip(message: &Message, version: i16, body: &Bytes) -> Result<(), String> {
        let ctx = format!("{} v{version} body {:02x?}", message.name, body.as_ref());
        let consumed = walk_request(message.api_key, version, body)
            .map_err(|e| format!("{ctx}: walk: {e}"))?;
        if consumed != body.len() {
            return Err(format!("{ctx}: walked {consumed} of {}", body.len()));
        }
        check_request(message.api_key, version, body).map_err(|e| format!("{ctx}: {e}"))?;
        let mut buf = body.clone();
        let decoded = RequestKind::decode(api(message), &mut buf, version)
            .map_err(|e| format!("{ctx}: kafka-protocol decode: {e:#}"))?;
        if !buf.is_empty() {
            return Err(format!("{ctx}: kafka-protocol left {} bytes", buf.len()));
        }
        let mut encoded = BytesMut::new();
        decoded
            .encode(&mut encoded, version)
            .map_err(|e| format!("{ctx}: kafka-protocol encode: {e:#}"))?;
        if encoded.as_ref() != body.as_ref() {
            return Err(format!("{ctx}: re-encoded as {:02x?}", encoded.as_ref()));
        }
        Ok(())
    }

    #[test]
    fn table_matches_kafka_protocol_for_every_version() {
        let mut samples = 0;
        for (message, version) in all_versions() {
            for seed in 0..200 {
                let body = generate(message, version, seed);
                if let Err(e) = roundtrip(message, version, &body) {
                    panic!("{e}");
                }
                samples += 1;
            }
        }
        assert!(samples > 200 * 150, "only {samples} samples");
    }

    /// The generator only writes null where the table allows it, and those samples must
    /// decode; here every value the table calls non-nullable is set to null in turn, and
    /// `kafka-protocol` must refuse it too. Together they pin nullability both ways, so the
    /// guard never rejects a null the decoder would take (e.g. DescribeConfigs' null
    /// configuration_keys, "all keys").
    #[test]
    fn table_nullability_matches_kafka_protocol() {
        let mut probes = 0;
        for (message, version) in all_versions() {
            for seed in 0..8 {
                let (_, slots) = generate_with_null(message, version, seed, None);
                for slot in 0..slots {
                    let (body, _) = generate_with_null(message, version, seed, Some(slot));
                    let mut buf = body.clone();
                    assert!(
                        RequestKind::decode(api(message), &mut buf, version).is_err(),
                        "{} v{version}: kafka-protocol takes a null the table refuses (value \
                         {slot}, body {:02x?})",
                        message.name,
                        body.as_ref()
                    );
                    assert!(check_request(message.api_key, version, &body).is_err());
                    probes += 1;
                }
            }
        }
        assert!(probes > 1000, "only {probes} probes");
    }

    #[test]
    fn table_versions_are_exactly_what_kafka_protocol_decodes() {
        for message in MESSAGES {
            let body = generate(message, message.versions.max, 1);
            let below = message.versions.min - 1;
            let above = message.versions.max + 1;
            for outside in [below, above] {
                let mut buf = body.clone();
                assert!(
                    RequestKind::decode(api(message), &mut buf, outside).is_err(),
                    "{} v{outside} decodes but is not in the table",
                    message.name
                );
                assert_eq!(
                    check_request(message.api_key, outside, &body),
                    Err(GuardError::Unsupported(message.api_key, outside))
                );
            }
        }
    }

    #[test]
    fn every_truncation_of_a_valid_body_is_rejected() {
        for (message, version) in all_versions() {
            for seed in 0..4 {
                let body = generate(message, version, seed);
                for cut in 0..body.len() {
                    assert!(
                        check_request(message.api_key, version, &body[..cut]).is_err(),
                        "{} v{version} accepted {cut} of {} bytes",
                        message.name,
                        body.len()
                    );
                }
            }
        }
    }

    #[test]
    fn trailing_bytes_are_rejected() {
        let message = find_message(3, 12).expect("metadata v12");
        let mut body = BytesMut::from(generate(message, 12, 7).as_ref());
        let len = body.len();
        body.put_u8(0);
        assert_eq!(
            check_request(3, 12, &body),
            Err(GuardError::TrailingBytes {
                offset: len,
                trailing: 1
            })
        );
        assert_eq!(walk_request(3, 12, &body), Ok(len));
    }

    #[test]
    fn malformed_varints_are_rejected() {
        // ListTransactions v0 is flexible from the start: a compact array comes first.
        for bad in [
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0x01][..], // six bytes
            &[0x80, 0x80, 0x80, 0x80, 0x10][..],       // overflows 32 bits
            &[0x80][..],                               // truncated
        ] {
            let err = check_request(66, 0, bad).expect_err("bad varint accepted");
            assert!(
                matches!(
                    err,
                    GuardError::MalformedVarint { offset: 0 } | GuardError::Truncated { .. }
                ),
                "{err:?}"
            );
        }
    }

    #[test]
    fn known_tagged_field_must_fill_its_size() {
        // Fetch v12 with every field empty, then one tagged field: cluster_id (tag 0) whose
        // compact string takes 2 bytes but whose size claims 3.
        let mut body = BytesMut::new();
        body.put_i32(-1); // replica_id
        body.put_i32(0); // max_wait_ms
        body.put_i32(0); // min_bytes
        body.put_i32(0); // max_bytes
        body.put_i8(0); // isolation_level
        body.put_i32(0); // session_id
        body.put_i32(0); // session_epoch
        body.put_u8(1); // topics: empty
        body.put_u8(1); // forgotten_topics_data: empty
        body.put_u8(1); // rack_id: ""
        let fixed = body.len();
        body.put_slice(&[1, 0, 3, 2, b'c', 0]);
        assert_eq!(
            check_request(1, 12, &body),
            Err(GuardError::BadTaggedField {
                offset: fixed + 1,
                tag: 0
            })
        );
        body.truncate(fixed);
        body.put_slice(&[1, 0, 2, 2, b'c']);
        assert_eq!(check_request(1, 12, &body), Ok(()));
        // replica_state (tag 1) only exists from v15; kafka-protocol refuses it before.
        body.truncate(fixed);
        body.put_slice(&[1, 1, 1, 0]);
        assert!(matches!(
            check_request(1, 12, &body),
            Err(GuardError::BadTaggedField { tag: 1, .. })
        ));
    }

    proptest! {
        #[test]
        fn random_tables_samples_roundtrip(seed in any::<u64>(), pick in any::<prop::sample::Index>()) {
            let pairs: Vec<_> = all_versions().collect();
            let (message, version) = pairs[pick.index(pairs.len())];
            let body = generate(message, version, seed);
            if let Err(e) = roundtrip(message, version, &body) {
                prop_assert!(false, "{}", e);
            }
        }

        #[test]
        fn mutated_valid_bodies_never_panic_and_decode_safely(
            seed in any::<u64>(),
            pick in any::<prop::sample::Index>(),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            let pairs: Vec<_> = all_versions().collect();
            let (message, version) = pairs[pick.index(pairs.len())];
            let mut body = BytesMut::from(generate(message, version, seed).as_ref());
            if body.is_empty() {
                return Ok(());
            }
            for (at, byte) in flips {
                let i = at.index(body.len());
                body[i] = byte;
            }
            if check_request(message.api_key, version, &body).is_ok() {
                // Accepted bodies must be safe to hand to kafka-protocol (it may still refuse
                // them, e.g. for invalid UTF-8, but must not abort).
                // When it does decode, it reads exactly the bytes the guard walked.
                let mut buf = body.freeze();
                if RequestKind::decode(api(message), &mut buf, version).is_ok() {
                    prop_assert!(buf.is_empty(), "{} v{} left {} bytes", message.name, version, buf.len());
                }
            }
        }
    }
}
