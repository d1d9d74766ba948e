//! Cluster metadata: a log of [`MetadataRecord`]s applied, in order, to an immutable
//! [`MetadataImage`], and the [`MetadataDelta`] each batch makes.
//!
//! The log itself is replicated by the Raft quorum (crate `quorum`); the records are decided
//! by the controller (crate `controller`). Every node applies the same committed records to its
//! own image, and handlers read the current image without locks beyond an `Arc` clone.
//! [`legacy`] holds the wave-1 single-node log, kept to import existing data dirs.

pub mod image;
pub mod legacy;
pub mod record;

pub use image::{
    is_internal_topic, BrokerRegistration, MetadataDelta, MetadataImage, TopicImage, OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
};
pub use record::{
    decode_batch, encode_batch, AclEntry, Endpoint, MetadataRecord, PartitionRegistration,
    QuotaEntityKey,
};

/// Errors of the metadata log itself (I/O and corruption).
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("metadata log {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("metadata record: {0}")]
    Encode(String),
    /// Damage that is not a torn tail: valid records follow it, so cutting the log there would
    /// forget committed metadata. The node must not start on it.
    #[error(
        "metadata log {path} is corrupt at byte {offset} (record {record}: {reason}) and a valid \
         record follows at byte {next_valid}, so this is not a torn write; refusing to start \
         rather than forget committed metadata. To recover: restore {path} from a backup; or, \
         accepting the loss of every metadata change after byte {offset}, cut the file there \
         (`truncate -s {offset} {path}`): partition directories of topics it then no longer \
         knows are renamed aside with a -stray suffix, never deleted"
    )]
    Corrupt {
        path: String,
        offset: u64,
        record: u64,
        reason: &'static str,
        next_valid: u64,
    },
    /// An earlier write or fsync failed; no metadata change is accepted until restart.
    #[error("metadata log {path} is fenced after an earlier failure ({reason}); restart the node once the cause is fixed")]
    Fenced { path: String, reason: String },
}
