//! Where the Raft log, hard state and snapshots become durable: the [`Disk`] trait, and
//! [`MemDisk`], an in-memory disk with real sync semantics for tests and the simulation.
//!
//! Writes are not durable until [`Disk::sync`] returns; a crash loses what was written since
//! the last sync (and may keep any prefix of it). The driver syncs before it sends a message
//! that depends on a write, so Raft's persistence requirements hold on every disk.

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use std::sync::{Arc, Mutex};

/// What a disk held when it was opened.
#[derive(Clone, Debug, Default)]
pub struct Persisted {
    pub hard_state: HardState,
    /// The latest snapshot, if any (its metadata carries the voters at its index).
    pub snapshot: Option<Snapshot>,
    /// Entries after the snapshot, contiguous.
    pub entries: Vec<Entry>,
    /// The voter set the log was started with (empty for a new disk).
    pub voters: Vec<u64>,
}

/// Errors of a disk: I/O (which fences it) and damage found when opening it.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Damage that is not a torn tail; the node must not start on it.
    #[error("{path} is corrupt at byte {offset} ({reason}); refusing to start rather than lose committed metadata. {recovery}")]
    Corrupt {
        path: String,
        offset: u64,
        reason: String,
        recovery: String,
    },
    /// An earlier write or fsync failed; nothing more is written until restart.
    #[error("the metadata log is fenced after an earlier failure ({0}); restart the node once the cause is fixed")]
    Fenced(String),
}

/// Durable storage of one node's Raft state.
pub trait Disk: Send {
    /// Reads everything back (once, at start), cutting a torn tail.
    fn load(&mut self) -> Result<Persisted, DiskError>;
    /// Appends entries; when the first one's index is not after the last stored entry, the
    /// stored suffix from that index is replaced (Raft's log truncation).
    fn append(&mut self, entries: &[Entry]) -> Result<(), DiskError>;
    /// Records the voter set a new log starts with (durable on return).
    fn save_voters(&mut self, voters: &[u64]) -> Result<(), DiskError>;
    /// Records term, vote and commit.
    fn save_hard_state(&mut self, hs: &HardState) -> Result<(), DiskError>;
    /// Stores a snapshot durably (this call syncs it) and drops every entry it covers.
    fn save_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), DiskError>;
    /// Drops every entry after `index` (not synced; a snapshot received from the leader
    /// replaces the whole log, not only the part it covers).
    fn truncate_after(&mut self, index: u64) -> Result<(), DiskError>;
    /// Makes every earlier write durable.
    fn sync(&mut self) -> Result<(), DiskError>;
}

/// The state of a [`MemDisk`].
#[derive(Clone, Debug, Default)]
pub struct MemState {
    pub voters: Vec<u64>,
    pub hard_state: HardState,
    pub snapshot: Option<Snapshot>,
    pub entries: Vec<Entry>,
}

impl MemState {
    fn append(&mut self, entries: &[Entry]) {
        let Some(first) = entries.first() else {
            return;
        };
        self.entries.retain(|e| e.index < first.index);
        self.entries.extend_from_slice(entries);
    }

    fn save_snapshot(&mut self, snapshot: &Snapshot) {
        let index = snapshot.get_metadata().index;
        self.entries.retain(|e| e.index > index);
        self.snapshot = Some(snapshot.clone());
    }
}

/// A write not yet synced.
#[derive(Clone, Debug)]
enum Op {
    Append(Vec<Entry>),
    HardState(HardState),
    TruncateAfter(u64),
}

/// Both states of a [`MemDisk`]: what survives a crash, and what a process would read.
#[derive(Debug, Default)]
pub struct MemDiskState {
    pub durable: MemState,
    pub written: MemState,
    unsynced: Vec<Op>,
}

impl MemDiskState {
    fn flush(&mut self) {
        for op in self.unsynced.drain(..) {
            match op {
                Op::Append(entries) => self.durable.append(&entries),
                Op::HardState(hs) => self.durable.hard_state = hs,
                Op::TruncateAfter(index) => self.durable.entries.retain(|e| e.index <= index),
            }
        }
    }
}

/// An in-memory disk shared with whoever simulates crashes: [`MemDisk::crash`] decides what
/// survives. Writes fail once [`MemDisk::fail_writes`] is set (a failed disk).
#[derive(Clone, Debug, Default)]
pub struct MemDisk {
    state: Arc<Mutex<MemDiskState>>,
    fail: Arc<Mutex<bool>>,
}

impl MemDisk {
    pub fn new() -> MemDisk {
        MemDisk::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemDiskState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The process died. With `lose_unsynced`, everything written since the last sync is
    /// gone (a power loss); otherwise it survives (the OS flushed it).
    pub fn crash(&self, lose_unsynced: bool) {
        let mut s = self.lock();
        if lose_unsynced {
            s.unsynced.clear();
            s.written = s.durable.clone();
        } else {
            s.flush();
        }
    }

    /// From now on every write and sync fails.
    pub fn fail_writes(&self, fail: bool) {
        *self.fail.lock().unwrap_or_else(|e| e.into_inner()) = fail;
    }

    fn check(&self) -> Result<(), DiskError> {
        if *self.fail.lock().unwrap_or_else(|e| e.into_inner()) {
            return Err(DiskError::Io {
                path: "memdisk".into(),
                source: std::io::Error::from_raw_os_error(28),
            });
        }
        Ok(())
    }
}

impl Disk for MemDisk {
    fn load(&mut self) -> Result<Persisted, DiskError> {
        let s = self.lock();
        Ok(Persisted {
            voters: s.written.voters.clone(),
            hard_state: s.written.hard_state.clone(),
            snapshot: s.written.snapshot.clone(),
            entries: s.written.entries.clone(),
        })
    }

    fn append(&mut self, entries: &[Entry]) -> Result<(), DiskError> {
        self.check()?;
        let mut s = self.lock();
        s.written.append(entries);
        s.unsynced.push(Op::Append(entries.to_vec()));
        Ok(())
    }

    fn save_voters(&mut self, voters: &[u64]) -> Result<(), DiskError> {
        self.check()?;
        let mut s = self.lock();
        s.written.voters = voters.to_vec();
        s.durable.voters = voters.to_vec();
        Ok(())
    }

    fn save_hard_state(&mut self, hs: &HardState) -> Result<(), DiskError> {
        self.check()?;
        let mut s = self.lock();
        s.written.hard_state = hs.clone();
        s.unsynced.push(Op::HardState(hs.clone()));
        Ok(())
    }

    fn save_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), DiskError> {
        self.check()?;
        let mut s = self.lock();
        s.written.save_snapshot(snapshot);
        // A snapshot is written to a temporary file, synced and renamed: durable on return
        // (the file system keeps earlier writes before a later fsync'd rename only if they
        // were synced, so flush them first). Entries it covers go from the durable state too.
        s.flush();
        s.durable.save_snapshot(snapshot);
        Ok(())
    }

    fn truncate_after(&mut self, index: u64) -> Result<(), DiskError> {
        self.check()?;
        let mut s = self.lock();
        s.written.entries.retain(|e| e.index <= index);
        s.unsynced.push(Op::TruncateAfter(index));
        Ok(())
    }

    fn sync(&mut self) -> Result<(), DiskError> {
        self.check()?;
        self.lock().flush();
        Ok(())
    }
}

/// The voters a conf state lists, sorted.
pub fn voters_of(cs: &ConfState) -> Vec<u64> {
    let mut v = cs.voters.clone();
    v.sort_unstable();
    v
}
