//! The single-node metadata of wave 1: JSON records in `<data>/__cluster_metadata-0/metadata.log`
//! ([`FileMetadataLog`]) and their image, kept to import an existing single-node data dir into
//! the Raft log once ([`import`]). The log keeps issue 8's rules (a damaged log is never
//! imported).

pub mod image;
pub mod import;
pub mod log;
pub mod record;

pub use image::{BrokerImage, MetadataImage, PartitionImage, TopicImage};
pub use log::{FileMetadataLog, MetadataLog};
pub use record::MetadataRecord;
