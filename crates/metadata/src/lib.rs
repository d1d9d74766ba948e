//! Cluster metadata: a log of `MetadataRecord`s applied to an immutable `MetadataImage`.
//!
//! Handlers read the current image without locks beyond an `Arc` clone; every change goes
//! through the controller methods of [`MetadataStore`], which validate it, make its records
//! durable in the [`MetadataLog`], apply them to a new image and swap it in. On a single node the
//! log is a local file ([`FileMetadataLog`]); a Raft-replicated log can implement the same trait
//! later without touching handlers.

pub mod image;
pub mod log;
pub mod policy;
pub mod record;
pub mod store;

pub use image::{BrokerImage, MetadataImage, PartitionImage, TopicImage};
pub use log::{FileMetadataLog, MetadataLog};
pub use record::MetadataRecord;
pub use store::{ControllerError, MetadataStore, NewTopic};

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
