//! Cluster metadata: a log of `MetadataRecord`s applied to an immutable `MetadataImage`.
//!
//! Handlers read the current image without locks beyond an `Arc` clone; every change goes
//! through the controller methods of [`MetadataStore`], which validate it, make its records
//! durable in the [`MetadataLog`], apply them to a new image and swap it in. On a single node the
//! log is a local file ([`FileMetadataLog`]); a Raft-replicated log can implement the same trait
//! later without touching handlers.

pub mod image;
pub mod log;
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
}
