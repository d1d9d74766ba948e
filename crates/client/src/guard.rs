//! Response guard: a schema walk over an untrusted response body that rejects any claimed
//! array length the bytes can't back, before `kafka-protocol` decodes (and allocates for) it.
//!
//! `kafka-protocol` 0.18 sizes each array with `Vec::with_capacity(claimed)` before reading an
//! element, so a tiny response claiming `i32::MAX` brokers would abort the client on allocation
//! failure. [`check_response`] follows the wire schema of the responses this client decodes
//! (field order and types per version, compact encodings and tagged fields in flexible
//! versions, walking known tagged fields that hold structs or arrays) and fails if an array
//! claims more elements than bytes remain, a length runs past the end, or the body is
//! truncated. It checks nothing semantic. Schemas follow Kafka's `*Response.json` message
//! definitions; *invariant:* for every message and version here, the walk consumes exactly the
//! bytes `kafka-protocol` encodes (tested below for default and populated responses).

use protocol::ApiKey;

/// Why a response body was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    #[error("no response schema for {0:?} v{1}")]
    Unsupported(ApiKey, i16),
    #[error("body truncated at byte {0}")]
    Truncated(usize),
    #[error("length {len} at byte {at} is invalid or exceeds the {remaining} bytes left")]
    BadLength {
        at: usize,
        len: i64,
        remaining: usize,
    },
    #[error("malformed varint at byte {0}")]
    Varint(usize),
    #[error("tagged field {tag} at byte {at} does not fill its declared size")]
    Tagged { at: usize, tag: u32 },
}

/// Versions a field exists in, inclusive.
#[derive(Debug, Clone, Copy)]
struct V(i16, i16);

const ALL: V = V(0, i16::MAX);

const fn from(v: i16) -> V {
    V(v, i16::MAX)
}

impl V {
    fn has(self, v: i16) -> bool {
        self.0 <= v && v <= self.1
    }
}

/// A wire type; strings, bytes and arrays are compact in flexible versions.
#[derive(Debug)]
enum T {
    I8,
    I16,
    I32,
    I64,
    Uuid,
    Bool,
    /// A string or nullable string (both walk the same way; null is allowed).
    Str,
    /// Bytes or nullable bytes.
    Bytes,
    Struct(&'static S),
    /// A nullable struct: an int8 marker (-1 null), then the struct.
    OptStruct(&'static S),
    Array(&'static S),
    /// An array of int32 (broker ids).
    ArrayI32,
    /// An array of strings.
    ArrayStr,
}

#[derive(Debug)]
struct F(V, T);

#[derive(Debug)]
struct Tag(u32, V, T);

/// One struct: its regular fields in wire order, then (flexible versions) its known tags.
#[derive(Debug)]
struct S {
    fields: &'static [F],
    tags: &'static [Tag],
}

const fn s(fields: &'static [F]) -> S {
    S { fields, tags: &[] }
}

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

    fn skip(&mut self, n: usize) -> Result<(), GuardError> {
        if n > self.remaining() {
            return Err(GuardError::Truncated(self.pos));
        }
        self.pos += n;
        Ok(())
    }

    fn be(&mut self, n: usize) -> Result<i64, GuardError> {
        let at = self.pos;
        self.skip(n)?;
        Ok(self.buf[at..self.pos]
            .iter()
            .fold(0i64, |acc, &b| (acc << 8) | i64::from(b))
            .wrapping_shl((64 - 8 * n) as u32)
            >> (64 - 8 * n))
    }

    fn uvarint(&mut self) -> Result<u32, GuardError> {
        let at = self.pos;
        let mut v: u32 = 0;
        for i in 0..5 {
            if self.pos >= self.end {
                return Err(GuardError::Truncated(self.pos));
            }
            let b = self.buf[self.pos];
            self.pos += 1;
            if i == 4 && b > 0x0f {
                return Err(GuardError::Varint(at));
            }
            v |= u32::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(GuardError::Varint(at))
    }

    /// A length prefix: `None` for null. `i16_len` selects classic strings' 2-byte lengths.
    /// Each unit must be backed by at least `unit` bytes.
    fn length(&mut self, i16_len: bool, unit: usize) -> Result<Option<usize>, GuardError> {
        let at = self.pos;
        let len = if self.flexible {
            i64::from(self.uvarint()?) - 1
        } else if i16_len {
            self.be(2)?
        } else {
            self.be(4)?
        };
        if len == -1 {
            return Ok(None);
        }
        let remaining = self.remaining();
        match usize::try_from(len) {
            Ok(n) if n.checked_mul(unit).is_some_and(|b| b <= remaining) => Ok(Some(n)),
            _ => Err(GuardError::BadLength { at, len, remaining }),
        }
    }

    fn walk(&mut self, t: &T) -> Result<(), GuardError> {
        match t {
            T::I8 | T::Bool => self.skip(1),
            T::I16 => self.skip(2),
            T::I32 => self.skip(4),
            T::I64 => self.skip(8),
            T::Uuid => self.skip(16),
            T::Str => {
                let n = self.length(true, 1)?.unwrap_or(0);
                self.skip(n)
            }
            T::Bytes => {
                let n = self.length(false, 1)?.unwrap_or(0);
                self.skip(n)
            }
            T::Struct(st) => self.walk_struct(st),
            T::OptStruct(st) => {
                if self.be(1)? < 0 {
                    Ok(())
                } else {
                    self.walk_struct(st)
                }
            }
            T::ArrayI32 => {
                let n = self.length(false, 4)?.unwrap_or(0);
                self.skip(n * 4)
            }
            T::ArrayStr => {
                let n = self.length(false, 1)?.unwrap_or(0);
                for _ in 0..n {
                    self.walk(&T::Str)?;
                }
                Ok(())
            }
            T::Array(st) => {
                // Every element takes at least one byte.
                let n = self.length(false, 1)?.unwrap_or(0);
                for _ in 0..n {
                    self.walk_struct(st)?;
                }
                Ok(())
            }
        }
    }

    fn walk_struct(&mut self, st: &S) -> Result<(), GuardError> {
        for F(v, t) in st.fields {
            if v.has(self.version) {
                self.walk(t)?;
            }
        }
        if self.flexible {
            let count = self.uvarint()?;
            for _ in 0..count {
                let tag = self.uvarint()?;
                let at = self.pos;
                let size = self.uvarint()? as usize;
                if size > self.remaining() {
                    return Err(GuardError::BadLength {
                        at,
                        len: size as i64,
                        remaining: self.remaining(),
                    });
                }
                let known = st
                    .tags
                    .iter()
                    .find(|Tag(t, v, _)| *t == tag && v.has(self.version));
                match known {
                    None => self.skip(size)?,
                    Some(Tag(_, _, t)) => {
                        let (outer_end, field_end) = (self.end, self.pos + size);
                        self.end = field_end;
                        let r = self.walk(t);
                        self.end = outer_end;
                        r?;
                        if self.pos != field_end {
                            return Err(GuardError::Tagged { at, tag });
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Checks `body` (the response bytes after the response header) against the schema of
/// `api` at `version`. Never allocates, never panics.
pub fn check_response(api: ApiKey, version: i16, body: &[u8]) -> Result<(), GuardError> {
    walk_response(api, version, body).map(|_| ())
}

/// Walks a response body and returns how many bytes it spans (bytes after it are tolerated,
/// as a newer broker's are at the same version).
fn walk_response(api: ApiKey, version: i16, body: &[u8]) -> Result<usize, GuardError> {
    let (flexible_from, schema) = schema(api).ok_or(GuardError::Unsupported(api, version))?;
    let mut w = Walker {
        buf: body,
        pos: 0,
        end: body.len(),
        version,
        flexible: flexible_from.is_some_and(|f| version >= f),
    };
    w.walk_struct(schema)?;
    Ok(w.pos)
}

/// The first flexible version and body schema of each response the client decodes.
fn schema(api: ApiKey) -> Option<(Option<i16>, &'static S)> {
    Some(match api {
        ApiKey::Produce => (Some(9), &PRODUCE),
        ApiKey::Fetch => (Some(12), &FETCH),
        ApiKey::ListOffsets => (Some(6), &LIST_OFFSETS),
        ApiKey::Metadata => (Some(9), &METADATA),
        ApiKey::OffsetCommit => (Some(8), &OFFSET_COMMIT),
        ApiKey::OffsetFetch => (Some(6), &OFFSET_FETCH),
        ApiKey::FindCoordinator => (Some(3), &FIND_COORDINATOR),
        ApiKey::JoinGroup => (Some(6), &JOIN_GROUP),
        ApiKey::Heartbeat => (Some(4), &HEARTBEAT),
        ApiKey::LeaveGroup => (Some(4), &LEAVE_GROUP),
        ApiKey::SyncGroup => (Some(4), &SYNC_GROUP),
        ApiKey::DescribeGroups => (Some(5), &DESCRIBE_GROUPS),
        ApiKey::ListGroups => (Some(3), &LIST_GROUPS),
        ApiKey::ApiVersions => (Some(3), &API_VERSIONS),
        ApiKey::SaslHandshake => (None, &SASL_HANDSHAKE),
        ApiKey::SaslAuthenticate => (Some(2), &SASL_AUTHENTICATE),
        ApiKey::CreateTopics => (Some(5), &CREATE_TOPICS),
        ApiKey::DeleteTopics => (Some(4), &DELETE_TOPICS),
        ApiKey::DeleteRecords => (Some(2), &DELETE_RECORDS),
        ApiKey::InitProducerId => (Some(2), &INIT_PRODUCER_ID),
        ApiKey::DescribeConfigs => (Some(4), &DESCRIBE_CONFIGS),
        ApiKey::CreatePartitions => (Some(2), &CREATE_PARTITIONS),
        ApiKey::DeleteGroups => (Some(2), &DELETE_GROUPS),
        ApiKey::IncrementalAlterConfigs => (Some(1), &INCREMENTAL_ALTER_CONFIGS),
        ApiKey::OffsetDelete => (None, &OFFSET_DELETE),
        ApiKey::DescribeCluster => (Some(0), &DESCRIBE_CLUSTER),
        ApiKey::ConsumerGroupHeartbeat => (Some(0), &CONSUMER_GROUP_HEARTBEAT),
        ApiKey::ConsumerGroupDescribe => (Some(0), &CONSUMER_GROUP_DESCRIBE),
        ApiKey::AddPartitionsToTxn => (Some(3), &ADD_PARTITIONS_TO_TXN),
        ApiKey::AddOffsetsToTxn => (Some(3), &ERROR_ONLY),
        ApiKey::EndTxn => (Some(3), &END_TXN),
        ApiKey::TxnOffsetCommit => (Some(3), &TXN_OFFSET_COMMIT),
        ApiKey::DescribeTransactions => (Some(0), &DESCRIBE_TRANSACTIONS),
        ApiKey::ListTransactions => (Some(0), &LIST_TRANSACTIONS),
        ApiKey::DescribeProducers => (Some(0), &DESCRIBE_PRODUCERS),
        ApiKey::WriteTxnMarkers => (Some(1), &WRITE_TXN_MARKERS),
        ApiKey::DescribeQuorum => (Some(0), &DESCRIBE_QUORUM),
        ApiKey::BrokerRegistration => (Some(0), &BROKER_REGISTRATION),
        ApiKey::BrokerHeartbeat => (Some(0), &BROKER_HEARTBEAT),
        ApiKey::AllocateProducerIds => (Some(0), &ALLOCATE_PRODUCER_IDS),
        ApiKey::AlterPartition => (Some(0), &ALTER_PARTITION),
        ApiKey::Envelope => (Some(0), &ENVELOPE),
        ApiKey::CreateAcls => (Some(2), &CREATE_ACLS),
        ApiKey::DescribeAcls => (Some(2), &DESCRIBE_ACLS),
        ApiKey::DeleteAcls => (Some(2), &DELETE_ACLS),
        ApiKey::AlterUserScramCredentials => (Some(0), &ALTER_USER_SCRAM),
        ApiKey::DescribeUserScramCredentials => (Some(0), &DESCRIBE_USER_SCRAM),
        ApiKey::DescribeClientQuotas => (Some(1), &DESCRIBE_CLIENT_QUOTAS),
        ApiKey::AlterClientQuotas => (Some(1), &ALTER_CLIENT_QUOTAS),
        ApiKey::AlterPartitionReassignments => (Some(0), &ALTER_PARTITION_REASSIGNMENTS),
        ApiKey::ListPartitionReassignments => (Some(0), &LIST_PARTITION_REASSIGNMENTS),
        _ => return None,
    })
}

use T::*;

// Produce
static LEADER_ID_AND_EPOCH: S = s(&[F(ALL, I32), F(ALL, I32)]);
static NODE_ENDPOINT: S = s(&[F(ALL, I32), F(ALL, Str), F(ALL, I32), F(ALL, Str)]);
static BATCH_INDEX_ERROR: S = s(&[F(ALL, I32), F(ALL, Str)]);
static PRODUCE_PARTITION: S = S {
    fields: &[
        F(ALL, I32),
        F(ALL, I16),
        F(ALL, I64),
        F(ALL, I64),
        F(from(5), I64),
        F(from(8), Array(&BATCH_INDEX_ERROR)),
        F(from(8), Str),
    ],
    tags: &[Tag(0, from(10), Struct(&LEADER_ID_AND_EPOCH))],
};
static PRODUCE_TOPIC: S = s(&[
    F(V(0, 12), Str),
    F(from(13), Uuid),
    F(ALL, Array(&PRODUCE_PARTITION)),
]);
static PRODUCE: S = S {
    fields: &[F(ALL, Array(&PRODUCE_TOPIC)), F(ALL, I32)],
    tags: &[Tag(0, from(10), Array(&NODE_ENDPOINT))],
};

// Fetch
static EPOCH_END_OFFSET: S = s(&[F(ALL, I32), F(ALL, I64)]);
static SNAPSHOT_ID: S = s(&[F(ALL, I64), F(ALL, I32)]);
static ABORTED_TXN: S = s(&[F(ALL, I64), F(ALL, I64)]);
static FETCH_PARTITION: S = S {
    fields: &[
        F(ALL, I32),
        F(ALL, I16),
        F(ALL, I64),
        F(ALL, I64),
        F(from(5), I64),
        F(ALL, Array(&ABORTED_TXN)),
        F(from(11), I32),
        F(ALL, Bytes),
    ],
    tags: &[
        Tag(0, ALL, Struct(&EPOCH_END_OFFSET)),
        Tag(1, ALL, Struct(&LEADER_ID_AND_EPOCH)),
        Tag(2, ALL, Struct(&SNAPSHOT_ID)),
    ],
};
static FETCH_TOPIC: S = s(&[
    F(V(0, 12), Str),
    F(from(13), Uuid),
    F(ALL, Array(&FETCH_PARTITION)),
]);
static FETCH: S = S {
    fields: &[
        F(ALL, I32),
        F(from(7), I16),
        F(from(7), I32),
        F(ALL, Array(&FETCH_TOPIC)),
    ],
    tags: &[Tag(0, from(16), Array(&NODE_ENDPOINT))],
};

// ListOffsets
static LIST_OFFSETS_PARTITION: S = s(&[
    F(ALL, I32),
    F(ALL, I16),
    F(ALL, I64),
    F(ALL, I64),
    F(from(4), I32),
]);
static LIST_OFFSETS_TOPIC: S = s(&[F(ALL, Str), F(ALL, Array(&LIST_OFFSETS_PARTITION))]);
static LIST_OFFSETS: S = s(&[F(from(2), I32), F(ALL, Array(&LIST_OFFSETS_TOPIC))]);

// Metadata
static METADATA_BROKER: S = s(&[F(ALL, I32), F(ALL, Str), F(ALL, I32), F(from(1), Str)]);
static METADATA_PARTITION: S = s(&[
    F(ALL, I16),
    F(ALL, I32),
    F(ALL, I32),
    F(from(7), I32),
    F(ALL, ArrayI32),
    F(ALL, ArrayI32),
    F(from(5), ArrayI32),
]);
static METADATA_TOPIC: S = s(&[
    F(ALL, I16),
    F(ALL, Str),
    F(from(10), Uuid),
    F(from(1), Bool),
    F(ALL, Array(&METADATA_PARTITION)),
    F(from(8), I32),
]);
static METADATA: S = s(&[
    F(from(3), I32),
    F(ALL, Array(&METADATA_BROKER)),
    F(from(2), Str),
    F(from(1), I32),
    F(ALL, Array(&METADATA_TOPIC)),
    F(V(8, 10), I32),
    F(from(13), I16),
]);

// OffsetCommit
static OFFSET_COMMIT_PARTITION: S = s(&[F(ALL, I32), F(ALL, I16)]);
static OFFSET_COMMIT_TOPIC: S = s(&[
    F(V(0, 9), Str),
    F(from(10), Uuid),
    F(ALL, Array(&OFFSET_COMMIT_PARTITION)),
]);
static OFFSET_COMMIT: S = s(&[F(from(3), I32), F(ALL, Array(&OFFSET_COMMIT_TOPIC))]);

// OffsetFetch (v1-7: one group; v8+: groups)
static OFFSET_FETCH_PARTITION: S = s(&[
    F(ALL, I32),
    F(ALL, I64),
    F(from(5), I32),
    F(ALL, Str),
    F(ALL, I16),
]);
static OFFSET_FETCH_TOPIC: S = s(&[
    F(V(0, 9), Str),
    F(from(10), Uuid),
    F(ALL, Array(&OFFSET_FETCH_PARTITION)),
]);
static OFFSET_FETCH_GROUP: S = s(&[F(ALL, Str), F(ALL, Array(&OFFSET_FETCH_TOPIC)), F(ALL, I16)]);
static OFFSET_FETCH: S = s(&[
    F(from(3), I32),
    F(V(0, 7), Array(&OFFSET_FETCH_TOPIC)),
    F(V(2, 7), I16),
    F(from(8), Array(&OFFSET_FETCH_GROUP)),
]);

// FindCoordinator
static COORDINATOR: S = s(&[
    F(ALL, Str),
    F(ALL, I32),
    F(ALL, Str),
    F(ALL, I32),
    F(ALL, I16),
    F(ALL, Str),
]);
static FIND_COORDINATOR: S = s(&[
    F(from(1), I32),
    F(V(0, 3), I16),
    F(V(1, 3), Str),
    F(V(0, 3), I32),
    F(V(0, 3), Str),
    F(V(0, 3), I32),
    F(from(4), Array(&COORDINATOR)),
]);

// Group membership
static JOIN_GROUP_MEMBER: S = s(&[F(ALL, Str), F(from(5), Str), F(ALL, Bytes)]);
static JOIN_GROUP: S = s(&[
    F(from(2), I32),
    F(ALL, I16),
    F(ALL, I32),
    F(from(7), Str),
    F(ALL, Str),
    F(ALL, Str),
    F(from(9), Bool),
    F(ALL, Str),
    F(ALL, Array(&JOIN_GROUP_MEMBER)),
]);
static HEARTBEAT: S = s(&[F(from(1), I32), F(ALL, I16)]);
static LEAVE_GROUP_MEMBER: S = s(&[F(ALL, Str), F(ALL, Str), F(ALL, I16)]);
static LEAVE_GROUP: S = s(&[
    F(from(1), I32),
    F(ALL, I16),
    F(from(3), Array(&LEAVE_GROUP_MEMBER)),
]);
static SYNC_GROUP: S = s(&[
    F(from(1), I32),
    F(ALL, I16),
    F(from(5), Str),
    F(from(5), Str),
    F(ALL, Bytes),
]);
static DESCRIBED_MEMBER: S = s(&[
    F(ALL, Str),
    F(from(4), Str),
    F(ALL, Str),
    F(ALL, Str),
    F(ALL, Bytes),
    F(ALL, Bytes),
]);
static DESCRIBED_GROUP: S = s(&[
    F(ALL, I16),
    F(from(6), Str),
    F(ALL, Str),
    F(ALL, Str),
    F(ALL, Str),
    F(ALL, Str),
    F(ALL, Array(&DESCRIBED_MEMBER)),
    F(from(3), I32),
]);
static DESCRIBE_GROUPS: S = s(&[F(from(1), I32), F(ALL, Array(&DESCRIBED_GROUP))]);
static LISTED_GROUP: S = s(&[F(ALL, Str), F(ALL, Str), F(from(4), Str), F(from(5), Str)]);
static LIST_GROUPS: S = s(&[F(from(1), I32), F(ALL, I16), F(ALL, Array(&LISTED_GROUP))]);

// ApiVersions
static API_VERSION: S = s(&[F(ALL, I16), F(ALL, I16), F(ALL, I16)]);
static FEATURE_KEY: S = s(&[F(ALL, Str), F(ALL, I16), F(ALL, I16)]);
static API_VERSIONS: S = S {
    fields: &[F(ALL, I16), F(ALL, Array(&API_VERSION)), F(from(1), I32)],
    tags: &[
        Tag(0, from(3), Array(&FEATURE_KEY)),
        Tag(1, from(3), I64),
        Tag(2, from(3), Array(&FEATURE_KEY)),
        Tag(3, from(3), Bool),
    ],
};

// SASL
static SASL_HANDSHAKE: S = s(&[F(ALL, I16), F(ALL, ArrayStr)]);
static SASL_AUTHENTICATE: S = s(&[F(ALL, I16), F(ALL, Str), F(ALL, Bytes), F(from(1), I64)]);

// Admin
static CREATABLE_TOPIC_CONFIG: S = s(&[
    F(ALL, Str),
    F(ALL, Str),
    F(ALL, Bool),
    F(ALL, I8),
    F(ALL, Bool),
]);
static CREATABLE_TOPIC_RESULT: S = S {
    fields: &[
        F(ALL, Str),
        F(from(7), Uuid),
        F(ALL, I16),
        F(ALL, Str),
        F(from(5), I32),
        F(from(5), I16),
        F(from(5), Array(&CREATABLE_TOPIC_CONFIG)),
    ],
    tags: &[Tag(0, from(5), I16)],
};
static CREATE_TOPICS: S = s(&[F(ALL, I32), F(ALL, Array(&CREATABLE_TOPIC_RESULT))]);
static DELETABLE_TOPIC: S = s(&[F(ALL, Str), F(from(6), Uuid), F(ALL, I16), F(from(5), Str)]);
static DELETE_TOPICS: S = s(&[F(ALL, I32), F(ALL, Array(&DELETABLE_TOPIC))]);
static DELETE_RECORDS_PARTITION: S = s(&[F(ALL, I32), F(ALL, I64), F(ALL, I16)]);
static DELETE_RECORDS_TOPIC: S = s(&[F(ALL, Str), F(ALL, Array(&DELETE_RECORDS_PARTITION))]);
static DELETE_RECORDS: S = s(&[F(ALL, I32), F(ALL, Array(&DELETE_RECORDS_TOPIC))]);
static INIT_PRODUCER_ID: S = s(&[
    F(ALL, I32),
    F(ALL, I16),
    F(ALL, I64),
    F(ALL, I16),
    F(from(6), I64),
    F(from(6), I16),
]);
static CONFIG_SYNONYM: S = s(&[F(ALL, Str), F(ALL, Str), F(ALL, I8)]);
static CONFIG_ENTRY: S = s(&[
    F(ALL, Str),
    F(ALL, Str),
    F(ALL, Bool),
    F(ALL, I8),
    F(ALL, Bool),
    F(ALL, Array(&CONFIG_SYNONYM)),
    F(from(3), I8),
    F(from(3), Str),
]);
static CONFIG_RESULT: S = s(&[
    F(ALL, I16),
    F(ALL, Str),
    F(ALL, I8),
    F(ALL, Str),
    F(ALL, Array(&CONFIG_ENTRY)),
]);
static DESCRIBE_CONFIGS: S = s(&[F(ALL, I32), F(ALL, Array(&CONFIG_RESULT))]);
static CREATE_PARTITIONS_RESULT: S = s(&[F(ALL, Str), F(ALL, I16), F(ALL, Str)]);
static CREATE_PARTITIONS: S = s(&[F(ALL, I32), F(ALL, Array(&CREATE_PARTITIONS_RESULT))]);
static DELETABLE_GROUP: S = s(&[F(ALL, Str), F(ALL, I16)]);
static DELETE_GROUPS: S = s(&[F(ALL, I32), F(ALL, Array(&DELETABLE_GROUP))]);
static ALTER_CONFIGS_RESULT: S = s(&[F(ALL, I16), F(ALL, Str), F(ALL, I8), F(ALL, Str)]);
static INCREMENTAL_ALTER_CONFIGS: S = s(&[F(ALL, I32), F(ALL, Array(&ALTER_CONFIGS_RESULT))]);
static OFFSET_DELETE_PARTITION: S = s(&[F(ALL, I32), F(ALL, I16)]);
static OFFSET_DELETE_TOPIC: S = s(&[F(ALL, Str), F(ALL, Array(&OFFSET_DELETE_PARTITION))]);
static OFFSET_DELETE: S = s(&[
    F(ALL, I16),
    F(ALL, I32),
    F(ALL, Array(&OFFSET_DELETE_TOPIC)),
]);
static CLUSTER_BROKER: S = s(&[
    F(ALL, I32),
    F(ALL, Str),
    F(ALL, I32),
    F(ALL, Str),
    F(from(2), Bool),
]);
static DESCRIBE_CLUSTER: S = s(&[
    F(ALL, I32),
    F(ALL, I16),
    F(ALL, Str),
    F(from(1), I8),
    F(ALL, Str),
    F(ALL, I32),
    F(ALL, Array(&CLUSTER_BROKER)),
    F(ALL, I32),
]);
// DescribeQuorum
static QUORUM_REPLICA: S = s(&[
    F(ALL, I32),
    F(from(2), Uuid),
    F(ALL, I64),
    F(from(1), I64),
    F(from(1), I64),
]);
static QUORUM_PARTITION: S = s(&[
    F(ALL, I32),
    F(ALL, I16),
    F(from(2), Str),
    F(ALL, I32),
    F(ALL, I32),
    F(ALL, I64),
    F(ALL, Array(&QUORUM_REPLICA)),
    F(ALL, Array(&QUORUM_REPLICA)),
]);
static QUORUM_TOPIC: S = s(&[F(ALL, Str), F(ALL, Array(&QUORUM_PARTITION))]);
static QUORUM_LISTENER: S = s(&[F(from(2), Str), F(from(2), Str), F(from(2), I16)]);
static QUORUM_NODE: S = s(&[F(from(2), I32), F(from(2), Array(&QUORUM_LISTENER))]);
static DESCRIBE_QUORUM: S = s(&[
    F(ALL, I16),
    F(from(2), Str),
    F(ALL, Array(&QUORUM_TOPIC)),
    F(from(2), Array(&QUORUM_NODE)),
]);
static BROKER_REGISTRATION: S = s(&[F(ALL, I32), F(ALL, I16), F(ALL, I64)]);
static BROKER_HEARTBEAT: S = s(&[
    F(ALL, I32),
    F(ALL, I16),
    F(ALL, Bool),
    F(ALL, Bool),
    F(ALL, Bool),
]);
static ALLOCATE_PRODUCER_IDS: S = s(&[F(ALL, I32), F(ALL, I16), F(ALL, I64), F(ALL, I32)]);
static ENVELOPE: S = s(&[F(ALL, Bytes), F(ALL, I16)]);
// AlterPartition (v2+: topics by id)
static ALTER_PARTITION_PARTITION: S = s(&[
    F(ALL, I32),
    F(ALL, I16),
    F(ALL, I32),
    F(ALL, I32),
    F(ALL, ArrayI32),
    F(from(1), I8),
    F(ALL, I32),
]);
static ALTER_PARTITION_TOPIC: S = s(&[
    F(V(0, 1), Str),
    F(from(2), Uuid),
    F(ALL, Array(&ALTER_PARTITION_PARTITION)),
]);
static ALTER_PARTITION: S = s(&[
    F(ALL, I32),
    F(ALL, I16),
    F(ALL, Array(&ALTER_PARTITION_TOPIC)),
]);

// Consumer groups (KIP-848)
static CG_TOPIC_PARTITIONS: S = s(&[F(ALL, Uuid), F(ALL, ArrayI32)]);
static CG_ASSIGNMENT: S = s(&[F(ALL, Array(&CG_TOPIC_PARTITIONS))]);
static CONSUMER_GROUP_HEARTBEAT: S = s(&[
    F(ALL, I32),
    F(ALL, I16),
    F(ALL, Str),
    F(ALL, Str),
    F(ALL, I32),
    F(ALL, I32),
    F(ALL, OptStruct(&CG_ASSIGNMENT)),
]);
static CGD_TOPIC_PARTITIONS: S = s(&[F(ALL, Uuid), F(ALL, Str), F(ALL, ArrayI32)]);
static CGD_ASSIGNMENT: S = s(&[F(ALL, Array(&CGD_TOPIC_PARTITIONS))]);
static CGD_MEMBER: S = s(&[
    F(ALL, Str),
    F(ALL, Str),
    F(ALL, Str),
    F(ALL, I32),
    F(ALL, Str),
    F(ALL, Str),
    F(ALL, ArrayStr),
    F(ALL, Str),
    F(ALL, Struct(&CGD_ASSIGNMENT)),
    F(ALL, Struct(&CGD_ASSIGNMENT)),
    F(from(1), I8),
]);
static CGD_GROUP: S = s(&[
    F(ALL, I16),
    F(ALL, Str),
    F(ALL, Str),
    F(ALL, Str),
    F(ALL, I32),
    F(ALL, I32),
    F(ALL, Str),
    F(ALL, Array(&CGD_MEMBER)),
    F(ALL, I32),
]);
static CONSUMER_GROUP_DESCRIBE: S = s(&[F(ALL, I32), F(ALL, Array(&CGD_GROUP))]);

// Transactions
static TXN_PARTITION_RESULT: S = s(&[F(ALL, I32), F(ALL, I16)]);
static TXN_TOPIC_RESULT: S = s(&[F(ALL, Str), F(ALL, Array(&TXN_PARTITION_RESULT))]);
static ADD_PARTITIONS_RESULT: S = s(&[F(ALL, Str), F(ALL, Array(&TXN_TOPIC_RESULT))]);
static ADD_PARTITIONS_TO_TXN: S = s(&[
    F(ALL, I32),
    F(from(4), I16),
    F(from(4), Array(&ADD_PARTITIONS_RESULT)),
    F(V(0, 3), Array(&TXN_TOPIC_RESULT)),
]);
/// Throttle time and an error code (AddOffsetsToTxn).
static ERROR_ONLY: S = s(&[F(ALL, I32), F(ALL, I16)]);
static END_TXN: S = s(&[F(ALL, I32), F(ALL, I16), F(from(5), I64), F(from(5), I16)]);
static TXN_OFFSET_COMMIT: S = s(&[F(ALL, I32), F(ALL, Array(&TXN_TOPIC_RESULT))]);
static TXN_TOPIC_DATA: S = s(&[F(ALL, Str), F(ALL, ArrayI32)]);
static TXN_STATE: S = s(&[
    F(ALL, I16),
    F(ALL, Str),
    F(ALL, Str),
    F(ALL, I32),
    F(ALL, I64),
    F(ALL, I64),
    F(ALL, I16),
    F(ALL, Array(&TXN_TOPIC_DATA)),
]);
static DESCRIBE_TRANSACTIONS: S = s(&[F(ALL, I32), F(ALL, Array(&TXN_STATE))]);
static LISTED_TXN: S = s(&[F(ALL, Str), F(ALL, I64), F(ALL, Str)]);
static LIST_TRANSACTIONS: S = s(&[
    F(ALL, I32),
    F(ALL, I16),
    F(ALL, ArrayStr),
    F(ALL, Array(&LISTED_TXN)),
]);
static PRODUCER_STATE: S = s(&[
    F(ALL, I64),
    F(ALL, I32),
    F(ALL, I32),
    F(ALL, I64),
    F(ALL, I32),
    F(ALL, I64),
]);
static PRODUCERS_PARTITION: S = s(&[
    F(ALL, I32),
    F(ALL, I16),
    F(ALL, Str),
    F(ALL, Array(&PRODUCER_STATE)),
]);
static PRODUCERS_TOPIC: S = s(&[F(ALL, Str), F(ALL, Array(&PRODUCERS_PARTITION))]);
static DESCRIBE_PRODUCERS: S = s(&[F(ALL, I32), F(ALL, Array(&PRODUCERS_TOPIC))]);
static MARKER_RESULT: S = s(&[F(ALL, I64), F(ALL, Array(&TXN_TOPIC_RESULT))]);
static ERROR_AND_MESSAGE: S = s(&[F(ALL, I16), F(ALL, Str)]);
static CREATE_ACLS: S = s(&[F(ALL, I32), F(ALL, Array(&ERROR_AND_MESSAGE))]);
static ACL_DESCRIPTION: S = s(&[F(ALL, Str), F(ALL, Str), F(ALL, I8), F(ALL, I8)]);
static ACL_RESOURCE: S = s(&[
    F(ALL, I8),
    F(ALL, Str),
    F(from(1), I8),
    F(ALL, Array(&ACL_DESCRIPTION)),
]);
static DESCRIBE_ACLS: S = s(&[
    F(ALL, I32),
    F(ALL, I16),
    F(ALL, Str),
    F(ALL, Array(&ACL_RESOURCE)),
]);
static MATCHING_ACL: S = s(&[
    F(ALL, I16),
    F(ALL, Str),
    F(ALL, I8),
    F(ALL, Str),
    F(from(1), I8),
    F(ALL, Str),
    F(ALL, Str),
    F(ALL, I8),
    F(ALL, I8),
]);
static DELETE_ACLS_FILTER_RESULT: S = s(&[F(ALL, I16), F(ALL, Str), F(ALL, Array(&MATCHING_ACL))]);
static DELETE_ACLS: S = s(&[F(ALL, I32), F(ALL, Array(&DELETE_ACLS_FILTER_RESULT))]);
static USER_RESULT: S = s(&[F(ALL, Str), F(ALL, I16), F(ALL, Str)]);
static ALTER_USER_SCRAM: S = s(&[F(ALL, I32), F(ALL, Array(&USER_RESULT))]);
static CREDENTIAL_INFO: S = s(&[F(ALL, I8), F(ALL, I32)]);
static DESCRIBED_USER: S = s(&[
    F(ALL, Str),
    F(ALL, I16),
    F(ALL, Str),
    F(ALL, Array(&CREDENTIAL_INFO)),
]);
static DESCRIBE_USER_SCRAM: S = s(&[
    F(ALL, I32),
    F(ALL, I16),
    F(ALL, Str),
    F(ALL, Array(&DESCRIBED_USER)),
]);
static WRITE_TXN_MARKERS: S = s(&[F(ALL, Array(&MARKER_RESULT))]);
// Client quotas: an entity is (type, nullable name) pairs; a value is a float64 (8 bytes, walked
// as an int64).
static QUOTA_ENTITY: S = s(&[F(ALL, Str), F(ALL, Str)]);
static QUOTA_VALUE: S = s(&[F(ALL, Str), F(ALL, I64)]);
static QUOTA_ENTRY: S = s(&[F(ALL, Array(&QUOTA_ENTITY)), F(ALL, Array(&QUOTA_VALUE))]);
static DESCRIBE_CLIENT_QUOTAS: S = s(&[
    F(ALL, I32),
    F(ALL, I16),
    F(ALL, Str),
    F(ALL, Array(&QUOTA_ENTRY)),
]);
static QUOTA_ALTER_RESULT: S = s(&[F(ALL, I16), F(ALL, Str), F(ALL, Array(&QUOTA_ENTITY))]);
static ALTER_CLIENT_QUOTAS: S = s(&[F(ALL, I32), F(ALL, Array(&QUOTA_ALTER_RESULT))]);
// Partition reassignments (KIP-455; flexible from v0)
static REASSIGNABLE_PARTITION_RESPONSE: S = s(&[F(ALL, I32), F(ALL, I16), F(ALL, Str)]);
static REASSIGNABLE_TOPIC_RESPONSE: S =
    s(&[F(ALL, Str), F(ALL, Array(&REASSIGNABLE_PARTITION_RESPONSE))]);
static ALTER_PARTITION_REASSIGNMENTS: S = s(&[
    F(ALL, I32),
    F(from(1), Bool),
    F(ALL, I16),
    F(ALL, Str),
    F(ALL, Array(&REASSIGNABLE_TOPIC_RESPONSE)),
]);
static ONGOING_PARTITION_REASSIGNMENT: S = s(&[
    F(ALL, I32),
    F(ALL, ArrayI32),
    F(ALL, ArrayI32),
    F(ALL, ArrayI32),
]);
static ONGOING_TOPIC_REASSIGNMENT: S =
    s(&[F(ALL, Str), F(ALL, Array(&ONGOING_PARTITION_REASSIGNMENT))]);
static LIST_PARTITION_REASSIGNMENTS: S = s(&[
    F(ALL, I32),
    F(ALL, I16),
    F(ALL, Str),
    F(ALL, Array(&ONGOING_TOPIC_REASSIGNMENT)),
]);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::Rpc;
    use bytes::{Bytes, BytesMut};
    use protocol::messages::*;
    use protocol::{Encode, StrBytes};

    fn st(s: &str) -> StrBytes {
        StrBytes::from_string(s.to_owned())
    }

    /// Encodes `value` at every version of `R` it encodes at; the walk must span exactly the
    /// encoded bytes, and every strict prefix must be rejected (not accepted short).
    fn check_all<R: Rpc>(value: &R::Response) -> usize {
        let mut ok = 0;
        for v in R::MIN..=R::MAX {
            let mut buf = BytesMut::new();
            if value.encode(&mut buf, v).is_err() {
                continue; // a field set that this version lacks
            }
            let n =
                walk_response(R::KEY, v, &buf).unwrap_or_else(|e| panic!("{:?} v{v}: {e}", R::KEY));
            assert_eq!(
                n,
                buf.len(),
                "{:?} v{v}: walked {n} of {} bytes",
                R::KEY,
                buf.len()
            );
            for cut in 0..buf.len() {
                if let Ok(m) = walk_response(R::KEY, v, &buf[..cut]) {
                    panic!("{:?} v{v}: prefix of {cut} bytes accepted as {m}", R::KEY);
                }
            }
            ok += 1;
        }
        ok
    }

    /// Every single-byte mutation (to 0x00, 0x7f, 0x80, 0xff) of `value`'s encoding at every
    /// version: the guard either rejects it or `kafka-protocol` decodes it to a `Result`; a
    /// claimed length that slipped past the guard would abort this test on allocation.
    fn mutate_all<R: Rpc>(value: &R::Response) -> usize {
        use protocol::Decode;
        let mut decoded = 0;
        for v in R::MIN..=R::MAX {
            let mut buf = BytesMut::new();
            if value.encode(&mut buf, v).is_err() {
                continue;
            }
            for i in 0..buf.len() {
                for b in [0x00, 0x7f, 0x80, 0xff] {
                    let mut m = buf.clone();
                    m[i] = b;
                    if check_response(R::KEY, v, &m).is_ok() {
                        let _ = R::Response::decode(&mut m.freeze(), v);
                        decoded += 1;
                    }
                }
            }
        }
        decoded
    }

    macro_rules! defaults {
        ($($req:ty),* $(,)?) => {$(
            assert!(check_all::<$req>(&Default::default()) > 0, stringify!($req));
        )*};
    }

    #[test]
    fn default_responses_walk_exactly_at_every_version() {
        defaults!(
            ProduceRequest,
            FetchRequest,
            ListOffsetsRequest,
            MetadataRequest,
            OffsetCommitRequest,
            OffsetFetchRequest,
            FindCoordinatorRequest,
            JoinGroupRequest,
            HeartbeatRequest,
            LeaveGroupRequest,
            SyncGroupRequest,
            DescribeGroupsRequest,
            ListGroupsRequest,
            ApiVersionsRequest,
            CreateTopicsRequest,
            DeleteTopicsRequest,
            DeleteRecordsRequest,
            DescribeConfigsRequest,
            CreatePartitionsRequest,
            DeleteGroupsRequest,
            IncrementalAlterConfigsRequest,
            OffsetDeleteRequest,
            DescribeClusterRequest,
            InitProducerIdRequest,
            ConsumerGroupHeartbeatRequest,
            ConsumerGroupDescribeRequest,
            AddPartitionsToTxnRequest,
            AddOffsetsToTxnRequest,
            EndTxnRequest,
            TxnOffsetCommitRequest,
            DescribeTransactionsRequest,
            ListTransactionsRequest,
            DescribeProducersRequest,
            WriteTxnMarkersRequest,
            DescribeQuorumRequest,
            BrokerRegistrationRequest,
            BrokerHeartbeatRequest,
            AllocateProducerIdsRequest,
            AlterPartitionRequest,
            EnvelopeRequest,
            SaslHandshakeRequest,
            SaslAuthenticateRequest,
        );
    }

    #[test]
    fn populated_transaction_responses_walk_exactly() {
        use add_partitions_to_txn_response::{
            AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult,
            AddPartitionsToTxnTopicResult,
        };
        let topic = AddPartitionsToTxnTopicResult::default()
            .with_name(TopicName(st("t")))
            .with_results_by_partition(vec![AddPartitionsToTxnPartitionResult::default()
                .with_partition_index(3)
                .with_partition_error_code(48)]);
        let v3 = AddPartitionsToTxnResponse::default()
            .with_results_by_topic_v3_and_below(vec![topic.clone()]);
        assert!(check_all::<AddPartitionsToTxnRequest>(&v3) > 0);
        let d = DescribeTransactionsResponse::default().with_transaction_states(vec![
            describe_transactions_response::TransactionState::default()
                .with_transactional_id(TransactionalId(st("tx")))
                .with_transaction_state(st("Ongoing"))
                .with_topics(vec![describe_transactions_response::TopicData::default()
                    .with_topic(TopicName(st("t")))
                    .with_partitions(vec![0, 1])]),
        ]);
        assert!(check_all::<DescribeTransactionsRequest>(&d) > 0);
        let l = ListTransactionsResponse::default()
            .with_unknown_state_filters(vec![st("Bogus")])
            .with_transaction_states(vec![list_transactions_response::TransactionState::default(
            )
            .with_transactional_id(TransactionalId(st("tx")))
            .with_transaction_state(st("Empty"))]);
        assert!(check_all::<ListTransactionsRequest>(&l) > 0);
        let p = DescribeProducersResponse::default().with_topics(vec![
            describe_producers_response::TopicResponse::default()
                .with_name(TopicName(st("t")))
                .with_partitions(vec![
                    describe_producers_response::PartitionResponse::default()
                        .with_error_message(Some(st("m")))
                        .with_active_producers(vec![
                            describe_producers_response::ProducerState::default(),
                        ]),
                ]),
        ]);
        assert!(check_all::<DescribeProducersRequest>(&p) > 0);
        let c = TxnOffsetCommitResponse::default().with_topics(vec![
            txn_offset_commit_response::TxnOffsetCommitResponseTopic::default()
                .with_name(TopicName(st("t")))
                .with_partitions(vec![
                    txn_offset_commit_response::TxnOffsetCommitResponsePartition::default(),
                ]),
        ]);
        assert!(check_all::<TxnOffsetCommitRequest>(&c) > 0);
        assert!(mutate_all::<DescribeTransactionsRequest>(&d) > 0);
        let _ = AddPartitionsToTxnResult::default();
    }

    #[test]
    fn acl_and_scram_responses_walk_exactly() {
        let c = CreateAclsResponse::default().with_results(vec![
            create_acls_response::AclCreationResult::default()
                .with_error_code(31)
                .with_error_message(Some(st("no"))),
        ]);
        assert!(check_all::<CreateAclsRequest>(&c) > 0);
        let d = DescribeAclsResponse::default()
            .with_error_message(Some(st("m")))
            .with_resources(vec![describe_acls_response::DescribeAclsResource::default(
            )
            .with_resource_type(2)
            .with_resource_name(st("t"))
            .with_pattern_type(3)
            .with_acls(vec![describe_acls_response::AclDescription::default()
                .with_principal(st("User:a"))
                .with_host(st("*"))
                .with_operation(3)
                .with_permission_type(3)])]);
        assert!(check_all::<DescribeAclsRequest>(&d) > 0);
        assert!(mutate_all::<DescribeAclsRequest>(&d) > 0);
        let x = DeleteAclsResponse::default().with_filter_results(vec![
            delete_acls_response::DeleteAclsFilterResult::default().with_matching_acls(vec![
                delete_acls_response::DeleteAclsMatchingAcl::default()
                    .with_resource_name(st("t"))
                    .with_principal(st("User:a"))
                    .with_host(st("*"))
                    .with_pattern_type(4),
            ]),
        ]);
        assert!(check_all::<DeleteAclsRequest>(&x) > 0);
        let a = AlterUserScramCredentialsResponse::default().with_results(vec![
            alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default()
                .with_user(st("u"))
                .with_error_message(Some(st("m"))),
        ]);
        assert!(check_all::<AlterUserScramCredentialsRequest>(&a) > 0);
        let u = DescribeUserScramCredentialsResponse::default().with_results(vec![
            describe_user_scram_credentials_response::DescribeUserScramCredentialsResult::default()
                .with_user(st("u"))
                .with_credential_infos(vec![
                    describe_user_scram_credentials_response::CredentialInfo::default()
                        .with_mechanism(1)
                        .with_iterations(4096),
                ]),
        ]);
        assert!(check_all::<DescribeUserScramCredentialsRequest>(&u) > 0);
        assert!(mutate_all::<DescribeUserScramCredentialsRequest>(&u) > 0);
        let q = DescribeClientQuotasResponse::default().with_entries(Some(vec![
            describe_client_quotas_response::EntryData::default()
                .with_entity(vec![
                    describe_client_quotas_response::EntityData::default()
                        .with_entity_type(st("user"))
                        .with_entity_name(Some(st("alice"))),
                    describe_client_quotas_response::EntityData::default()
                        .with_entity_type(st("client-id")),
                ])
                .with_values(vec![describe_client_quotas_response::ValueData::default()
                    .with_key(st("producer_byte_rate"))
                    .with_value(1024.0)]),
        ]));
        assert!(check_all::<DescribeClientQuotasRequest>(&q) > 0);
        assert!(mutate_all::<DescribeClientQuotasRequest>(&q) > 0);
        assert!(
            check_all::<DescribeClientQuotasRequest>(&DescribeClientQuotasResponse::default()) > 0
        );
        let a = AlterClientQuotasResponse::default().with_entries(vec![
            alter_client_quotas_response::EntryData::default()
                .with_error_code(42)
                .with_error_message(Some(st("m")))
                .with_entity(vec![alter_client_quotas_response::EntityData::default()
                    .with_entity_type(st("user"))]),
        ]);
        assert!(check_all::<AlterClientQuotasRequest>(&a) > 0);
        assert!(mutate_all::<AlterClientQuotasRequest>(&a) > 0);
    }

    #[test]
    fn reassignment_responses_walk_exactly() {
        use alter_partition_reassignments_response::{
            ReassignablePartitionResponse, ReassignableTopicResponse,
        };
        use list_partition_reassignments_response::{
            OngoingPartitionReassignment, OngoingTopicReassignment,
        };
        let a = AlterPartitionReassignmentsResponse::default()
            .with_error_message(Some(st("m")))
            .with_responses(vec![ReassignableTopicResponse::default()
                .with_name(TopicName(st("t")))
                .with_partitions(vec![ReassignablePartitionResponse::default()
                    .with_partition_index(3)
                    .with_error_code(85)
                    .with_error_message(Some(st("no")))])]);
        assert_eq!(check_all::<AlterPartitionReassignmentsRequest>(&a), 2);
        assert!(mutate_all::<AlterPartitionReassignmentsRequest>(&a) > 0);
        let l = ListPartitionReassignmentsResponse::default().with_topics(vec![
            OngoingTopicReassignment::default()
                .with_name(TopicName(st("t")))
                .with_partitions(vec![OngoingPartitionReassignment::default()
                    .with_partition_index(0)
                    .with_replicas(vec![BrokerId(1), BrokerId(3), BrokerId(2)])
                    .with_adding_replicas(vec![BrokerId(3)])
                    .with_removing_replicas(vec![BrokerId(2)])]),
        ]);
        assert_eq!(check_all::<ListPartitionReassignmentsRequest>(&l), 1);
        assert!(mutate_all::<ListPartitionReassignmentsRequest>(&l) > 0);
    }

    #[test]
    fn populated_responses_walk_exactly() {
        use fetch_response::{AbortedTransaction, FetchableTopicResponse, PartitionData};
        use metadata_response::{
            MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
        };
        use produce_response::{
            BatchIndexAndErrorMessage, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
        };

        let md = MetadataResponse::default()
            .with_brokers(vec![MetadataResponseBroker::default()
                .with_node_id(BrokerId(1))
                .with_host(st("h"))
                .with_port(9092)])
            .with_cluster_id(Some(st("c")))
            .with_topics(vec![MetadataResponseTopic::default()
                .with_name(Some(TopicName(st("t"))))
                .with_partitions(vec![MetadataResponsePartition::default()
                    .with_replica_nodes(vec![BrokerId(1), BrokerId(2)])
                    .with_isr_nodes(vec![BrokerId(1)])])]);
        assert!(check_all::<MetadataRequest>(&md) >= 10);
        let md_rack = md.clone().with_brokers(vec![
            MetadataResponseBroker::default().with_rack(Some(st("r")))
        ]);
        assert!(check_all::<MetadataRequest>(&md_rack) >= 10);

        let pd = PartitionData::default()
            .with_high_watermark(10)
            .with_aborted_transactions(Some(vec![
                AbortedTransaction::default().with_first_offset(3)
            ]))
            .with_records(Some(Bytes::from_static(b"0123456789")));
        let fetch = FetchResponse::default()
            .with_responses(vec![FetchableTopicResponse::default()
                .with_topic(TopicName(st("t")))
                .with_partitions(vec![pd.clone()])]);
        assert!(check_all::<FetchRequest>(&fetch) >= 9);
        let tagged = pd.with_current_leader(
            fetch_response::LeaderIdAndEpoch::default()
                .with_leader_id(BrokerId(1))
                .with_leader_epoch(2),
        );
        let fetch = FetchResponse::default()
            .with_responses(vec![FetchableTopicResponse::default()
                .with_topic(TopicName(st("t")))
                .with_partitions(vec![tagged])]);
        assert!(check_all::<FetchRequest>(&fetch) >= 1);

        let part = PartitionProduceResponse::default().with_base_offset(5);
        let produce =
            ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
                .with_name(TopicName(st("t")))
                .with_partition_responses(vec![part.clone()])]);
        assert!(check_all::<ProduceRequest>(&produce) >= 9);
        let full = ProduceResponse::default()
            .with_responses(vec![TopicProduceResponse::default()
                .with_name(TopicName(st("t")))
                .with_partition_responses(vec![part
                    .with_record_errors(vec![BatchIndexAndErrorMessage::default()
                        .with_batch_index_error_message(Some(st("e")))])
                    .with_error_message(Some(st("m")))
                    .with_current_leader(
                        produce_response::LeaderIdAndEpoch::default().with_leader_id(BrokerId(3)),
                    )])])
            .with_node_endpoints(vec![NodeEndpoint::default()
                .with_host(st("h"))
                .with_rack(Some(st("r")))]);
        assert!(check_all::<ProduceRequest>(&full) >= 1);

        use api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
        let av = ApiVersionsResponse::default()
            .with_api_keys(vec![ApiVersion::default().with_max_version(3)]);
        assert!(check_all::<ApiVersionsRequest>(&av) >= 1);
        let av = av
            .with_supported_features(vec![SupportedFeatureKey::default().with_name(st("f"))])
            .with_finalized_features_epoch(3)
            .with_finalized_features(vec![FinalizedFeatureKey::default().with_name(st("g"))])
            .with_zk_migration_ready(true);
        assert!(check_all::<ApiVersionsRequest>(&av) >= 1);

        use create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
        let ct = CreateTopicsResponse::default().with_topics(vec![CreatableTopicResult::default()
            .with_name(TopicName(st("t")))
            .with_error_message(Some(st("m")))
            .with_topic_config_error_code(5)
            .with_configs(Some(vec![CreatableTopicConfigs::default()
                .with_name(st("k"))
                .with_value(Some(st("v")))]))]);
        assert!(check_all::<CreateTopicsRequest>(&ct) >= 1);

        use describe_groups_response::{DescribedGroup, DescribedGroupMember};
        let dg = DescribeGroupsResponse::default().with_groups(vec![DescribedGroup::default()
            .with_group_id(GroupId(st("g")))
            .with_members(vec![DescribedGroupMember::default()
                .with_member_id(st("m"))
                .with_member_metadata(Bytes::from_static(b"md"))
                .with_member_assignment(Bytes::from_static(b"as"))])]);
        assert!(check_all::<DescribeGroupsRequest>(&dg) >= 1);

        use join_group_response::JoinGroupResponseMember;
        let jg = JoinGroupResponse::default()
            .with_protocol_name(Some(st("range")))
            .with_members(vec![JoinGroupResponseMember::default()
                .with_member_id(st("m"))
                .with_metadata(Bytes::from_static(b"x"))]);
        assert!(check_all::<JoinGroupRequest>(&jg) >= 1);

        use offset_fetch_response::{OffsetFetchResponsePartition, OffsetFetchResponseTopic};
        let of =
            OffsetFetchResponse::default().with_topics(vec![OffsetFetchResponseTopic::default()
                .with_name(TopicName(st("t")))
                .with_partitions(vec![OffsetFetchResponsePartition::default()
                    .with_committed_offset(7)
                    .with_metadata(Some(st("")))])]);
        assert!(check_all::<OffsetFetchRequest>(&of) >= 1);

        use describe_configs_response::{
            DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
        };
        let dc =
            DescribeConfigsResponse::default().with_results(vec![DescribeConfigsResult::default()
                .with_resource_name(st("t"))
                .with_configs(vec![DescribeConfigsResourceResult::default()
                    .with_name(st("k"))
                    .with_value(Some(st("v")))
                    .with_synonyms(vec![
                        DescribeConfigsSynonym::default().with_name(st("s"))
                    ])])]);
        assert!(check_all::<DescribeConfigsRequest>(&dc) >= 1);

        use describe_cluster_response::DescribeClusterBroker;
        let cl = DescribeClusterResponse::default()
            .with_cluster_id(st("c"))
            .with_brokers(vec![DescribeClusterBroker::default().with_host(st("h"))]);
        assert!(check_all::<DescribeClusterRequest>(&cl) >= 1);

        use consumer_group_heartbeat_response::{Assignment, TopicPartitions};
        let hb = ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(st("m")))
            .with_assignment(Some(Assignment::default().with_topic_partitions(vec![
                TopicPartitions::default().with_partitions(vec![0, 2]),
            ])));
        assert_eq!(check_all::<ConsumerGroupHeartbeatRequest>(&hb), 2);
        assert!(mutate_all::<ConsumerGroupHeartbeatRequest>(&hb) > 0);
        use consumer_group_describe_response as cgd;
        let d = ConsumerGroupDescribeResponse::default().with_groups(vec![
            cgd::DescribedGroup::default()
                .with_group_id(GroupId(st("g")))
                .with_members(vec![cgd::Member::default()
                    .with_member_id(st("m"))
                    .with_subscribed_topic_names(vec![TopicName(st("t"))])
                    .with_subscribed_topic_regex(Some(st("r.*")))
                    .with_assignment(cgd::Assignment::default().with_topic_partitions(
                        vec![
                    cgd::TopicPartitions::default()
                        .with_topic_name(TopicName(st("t")))
                        .with_partitions(vec![1]),
                ],
                    ))]),
        ]);
        assert_eq!(check_all::<ConsumerGroupDescribeRequest>(&d), 2);
        assert!(mutate_all::<ConsumerGroupDescribeRequest>(&d) > 0);
        use describe_quorum_response as dq;
        let voter = dq::ReplicaState::default().with_log_end_offset(7);
        let dq = DescribeQuorumResponse::default()
            .with_topics(vec![dq::TopicData::default()
                .with_topic_name(TopicName(st("__cluster_metadata")))
                .with_partitions(vec![dq::PartitionData::default()
                    .with_current_voters(vec![voter.clone(), voter.clone()])
                    .with_observers(vec![voter])])])
            .with_nodes(vec![dq::Node::default().with_listeners(vec![
                dq::Listener::default().with_name(st("CONTROLLER")),
            ])]);
        assert!(check_all::<DescribeQuorumRequest>(&dq) >= 1);
    }

    #[test]
    fn mutated_responses_are_rejected_or_decoded_never_fatal() {
        use metadata_response::{
            MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
        };
        let md = MetadataResponse::default()
            .with_brokers(vec![MetadataResponseBroker::default().with_host(st("h"))])
            .with_topics(vec![MetadataResponseTopic::default()
                .with_name(Some(TopicName(st("t"))))
                .with_partitions(vec![
                    MetadataResponsePartition::default().with_replica_nodes(vec![BrokerId(1)])
                ])]);
        assert!(mutate_all::<MetadataRequest>(&md) > 0);
        use fetch_response::{AbortedTransaction, FetchableTopicResponse, PartitionData};
        let fetch =
            FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
                .with_topic(TopicName(st("t")))
                .with_partitions(vec![PartitionData::default()
                    .with_aborted_transactions(Some(vec![AbortedTransaction::default()]))
                    .with_records(Some(Bytes::from_static(b"rec")))])]);
        assert!(mutate_all::<FetchRequest>(&fetch) > 0);
        use api_versions_response::{ApiVersion, SupportedFeatureKey};
        let av = ApiVersionsResponse::default()
            .with_api_keys(vec![ApiVersion::default()])
            .with_supported_features(vec![SupportedFeatureKey::default().with_name(st("f"))]);
        assert!(mutate_all::<ApiVersionsRequest>(&av) > 0);
        use describe_groups_response::{DescribedGroup, DescribedGroupMember};
        let dg = DescribeGroupsResponse::default().with_groups(vec![
            DescribedGroup::default().with_members(vec![DescribedGroupMember::default()])
        ]);
        assert!(mutate_all::<DescribeGroupsRequest>(&dg) > 0);
        use produce_response::{PartitionProduceResponse, TopicProduceResponse};
        let produce = ProduceResponse::default()
            .with_responses(vec![TopicProduceResponse::default()
                .with_partition_responses(vec![PartitionProduceResponse::default()])]);
        assert!(mutate_all::<ProduceRequest>(&produce) > 0);
    }

    #[test]
    fn huge_claimed_arrays_are_rejected() {
        // Metadata v1: throttle absent, brokers count i32::MAX.
        assert!(matches!(
            check_response(ApiKey::Metadata, 1, &[0x7f, 0xff, 0xff, 0xff]),
            Err(GuardError::BadLength { .. })
        ));
        // Metadata v12 (flexible): throttle, then a compact count of 2^32-2 brokers.
        assert!(matches!(
            check_response(
                ApiKey::Metadata,
                12,
                &[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f]
            ),
            Err(GuardError::BadLength { .. })
        ));
        // ApiVersions v3 with a tagged supported_features array claiming more than its size.
        let body = [0, 0, 1, 0, 0, 0, 0, 1, 0, 2, 0xff, 0x01];
        assert!(check_response(ApiKey::ApiVersions, 3, &body).is_err());
        assert!(matches!(
            check_response(ApiKey::AlterConfigs, 0, &[]),
            Err(GuardError::Unsupported(..))
        ));
    }
}
