//! The replication state machine of one partition replica (Kafka's `Partition` +
//! `ReplicaManager` + `ReplicaFetcherThread` decisions), sans-IO: committed metadata, log
//! progress, fetches, AlterPartition results and the current time go in; high-watermark
//! moves, completed acks=all waits, AlterPartition proposals, truncations, fetch requests
//! and fetch answers come out. The runtime (`broker`) does the sockets, the disk and the
//! timers.
//!
//! The protocol is Kafka's as fixed after the 2013 Jepsen analysis: leader epochs and
//! truncation by epoch lineage (KIP-101, KIP-279, the diverging epoch of Fetch v12+),
//! `current_leader_epoch` fencing (KIP-320), ISR changes proposed by the leader to the
//! controller with partition epochs and used only once committed (KIP-497), and no HW
//! advance on an ISR smaller than `min.insync.replicas` (KIP-966). One Moldau rule is
//! stronger than Kafka's: progress counts only once durable (the leader's own fsynced end,
//! and followers fetch on only after fsyncing what they appended), so the high watermark is
//! the smallest *durable* log end over the ISR and acks=all means "on disk on every ISR
//! member".
//!
//! *Invariant:* no I/O and no clock reads; the only time is the `now_ms` passed in.
//! *Invariant:* HW <= LEO; a leader's HW never goes back within its leader epoch; the leader
//! and partition epochs a replica acts on never go back; a follower truncates below its HW
//! only when the leader lacks records it saw committed (an unclean election, or a broken
//! peer): then it lowers its HW first and says so (`Action::TruncatingBelowHighWatermark`),
//! never panics.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod replica;
mod types;

pub use replica::{truncation_offset, Replica};
pub use types::*;
