//! The metadata quorum: the cluster metadata log replicated by Raft (raft-rs, driven sans-IO),
//! its on-disk form, and the node that applies it and hosts the controller.
//!
//! - [`node::MetadataNode`]: raft-rs `RawNode` + the controller + the committed image, as a
//!   sans-IO state machine (requests, messages and time in; messages, answers and published
//!   images out). The simulation test drives several of them through faults.
//! - [`store::RaftStore`]: raft-rs's `Storage` over a [`disk::Disk`]; [`disk::MemDisk`] for
//!   tests, [`file::FileDisk`] for `<data>/__cluster_metadata-0/`.
//! - [`codec`]: a bounded codec for raft messages exchanged between voters.
//! - [`runtime`]: one node on its own thread behind a [`QuorumHandle`]; [`transport`]: raft
//!   messages to the other voters over their CONTROLLER listeners; [`wire`]: the two private
//!   APIs (RaftMessages, MetadataFetch); [`observer`]: a broker-only node following the
//!   committed log.
//!
//! *Invariant:* a message is sent only after every write it depends on is synced; committed
//! batches are applied in log order, exactly once, on every node.

// raft-rs's protobuf types carry private bookkeeping fields; setting fields one by one on a
// default value is how they are built (as raft-rs itself does).
#![allow(clippy::field_reassign_with_default)]

pub mod codec;
pub mod disk;
pub mod file;
pub mod node;
pub mod observer;
pub mod runtime;
pub mod store;
pub mod transport;
pub mod wire;

pub use disk::{Disk, DiskError, MemDisk};
pub use file::FileDisk;
pub use node::{
    Answer, CommittedRead, MetadataNode, NodeConfig, NodeError, Output, Publication, QuorumStatus,
    Token, VoterProgress,
};
pub use runtime::{
    Leadership, NoPeers, ObserverProgress, QuorumHandle, QuorumRuntime, RuntimeConfig, Transport,
};

/// A slog logger for raft-rs that forwards to `tracing` (raft's chatty info lines at debug,
/// except elections, which an operator wants to see).
pub fn raft_logger(node_id: u64) -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!("raft_node" => node_id))
}

struct TracingDrain;

struct KvString(String);

impl slog::Serializer for KvString {
    fn emit_arguments(&mut self, key: slog::Key, val: &std::fmt::Arguments<'_>) -> slog::Result {
        use std::fmt::Write;
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &slog::Record<'_>, values: &slog::OwnedKVList) -> Result<(), Self::Err> {
        let mut kv = KvString(String::new());
        let _ = slog::KV::serialize(&record.kv(), record, &mut kv);
        let _ = slog::KV::serialize(values, record, &mut kv);
        let msg = record.msg().to_string();
        let election = msg.starts_with("became") || msg.contains("election");
        match record.level() {
            slog::Level::Critical | slog::Level::Error => tracing::error!("raft: {msg}{}", kv.0),
            slog::Level::Warning => tracing::warn!("raft: {msg}{}", kv.0),
            slog::Level::Info if election => tracing::info!("raft: {msg}{}", kv.0),
            slog::Level::Info | slog::Level::Debug => tracing::debug!("raft: {msg}{}", kv.0),
            slog::Level::Trace => tracing::trace!("raft: {msg}{}", kv.0),
        }
        Ok(())
    }
}
