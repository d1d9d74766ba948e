//! The Raft log as raft-rs reads it ([`raft::Storage`]): the latest snapshot, the entries after
//! it and the hard state, held in memory and mirrored to a [`Disk`].
//!
//! The metadata log is small (snapshots bound it), so every entry since the last snapshot stays
//! in memory; the disk is written through and read only at start. A failed disk write fences
//! the store: it refuses every later write, so nothing can ever be acknowledged on top of a
//! write that may be partial.

use crate::disk::{voters_of, Disk, DiskError};
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

/// raft-rs's storage over a [`Disk`].
pub struct RaftStore<D: Disk> {
    disk: D,
    hard_state: HardState,
    conf_state: ConfState,
    /// The latest snapshot (empty metadata index 0 when there is none).
    snapshot: Snapshot,
    /// Entries after the snapshot, contiguous.
    entries: Vec<Entry>,
    /// The hard state last written to disk (term and vote changes are written at once; a
    /// commit-only change waits for the next write, a restart relearns it).
    saved_hard_state: HardState,
    fenced: Option<String>,
}

impl<D: Disk> std::fmt::Debug for RaftStore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftStore")
            .field("hard_state", &self.hard_state)
            .field("snapshot_index", &self.snapshot_index())
            .field("entries", &self.entries.len())
            .finish()
    }
}

/// Why a store could not open.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Disk(#[from] DiskError),
    /// The stored voter set is not the configured one.
    #[error("controller.quorum.voters lists {configured:?} but this node's metadata log was written by a quorum of {stored:?}")]
    Voters {
        configured: Vec<u64>,
        stored: Vec<u64>,
    },
    /// The stored state breaks Raft's rules (a gap, a commit past the log end...).
    #[error("the metadata log is inconsistent: {0}")]
    Inconsistent(String),
}

impl<D: Disk> RaftStore<D> {
    /// Opens the disk. A fresh disk starts with `voters` as its configuration; a used one must
    /// have been written by the same voter set.
    pub fn open(mut disk: D, voters: &[u64]) -> Result<RaftStore<D>, StoreError> {
        let p = disk.load()?;
        let mut configured = voters.to_vec();
        configured.sort_unstable();
        let snapshot = p.snapshot.unwrap_or_default();
        let stored = if snapshot.get_metadata().index > 0 {
            voters_of(snapshot.get_metadata().get_conf_state())
        } else if !p.voters.is_empty() {
            let mut v = p.voters.clone();
            v.sort_unstable();
            v
        } else {
            disk.save_voters(&configured)?;
            configured.clone()
        };
        if stored != configured {
            return Err(StoreError::Voters { configured, stored });
        }
        let conf_state = ConfState {
            voters: configured.clone(),
            ..Default::default()
        };
        let snap_index = snapshot.get_metadata().index;
        for (i, e) in p.entries.iter().enumerate() {
            if e.index != snap_index + 1 + i as u64 {
                return Err(StoreError::Inconsistent(format!(
                    "entry {} follows index {}",
                    e.index,
                    snap_index + i as u64
                )));
            }
        }
        let mut hard_state = p.hard_state;
        let last = p.entries.last().map_or(snap_index, |e| e.index);
        // The commit index is written lazily: it may trail, never pass, what is stored... except
        // that a snapshot is committed by definition.
        hard_state.commit = hard_state.commit.clamp(snap_index, last);
        hard_state.term = hard_state.term.max(snapshot.get_metadata().term);
        Ok(RaftStore {
            disk,
            saved_hard_state: hard_state.clone(),
            hard_state,
            conf_state,
            snapshot,
            entries: p.entries,
            fenced: None,
        })
    }

    pub fn snapshot_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    pub fn last_index_now(&self) -> u64 {
        self.entries
            .last()
            .map_or(self.snapshot_index(), |e| e.index)
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn latest_snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    pub fn is_fenced(&self) -> Option<&str> {
        self.fenced.as_deref()
    }

    /// The stored entries in `[low, high)` (for replay at start and for observers).
    pub fn entries_between(&self, low: u64, high: u64, max_bytes: u64) -> Vec<Entry> {
        let first = self.snapshot_index() + 1;
        if low < first || low >= high {
            return Vec::new();
        }
        let start = (low - first) as usize;
        let end = ((high - first) as usize).min(self.entries.len());
        let mut out = Vec::new();
        let mut bytes = 0u64;
        for e in self.entries.get(start..end).unwrap_or_default() {
            bytes += e.data.len() as u64 + 32;
            if !out.is_empty() && bytes > max_bytes {
                break;
            }
            out.push(e.clone());
        }
        out
    }

    fn guard(&mut self, r: Result<(), DiskError>) -> Result<(), DiskError> {
        if let Some(reason) = &self.fenced {
            return Err(DiskError::Fenced(reason.clone()));
        }
        if let Err(e) = r {
            tracing::error!(error = %e, "metadata log write failed; fencing it until restart");
            self.fenced = Some(e.to_string());
            return Err(e);
        }
        Ok(())
    }

    fn check_fence(&self) -> Result<(), DiskError> {
        match &self.fenced {
            Some(reason) => Err(DiskError::Fenced(reason.clone())),
            None => Ok(()),
        }
    }

    /// Appends entries (replacing a conflicting suffix), in memory and on disk (not synced).
    pub fn append(&mut self, entries: &[Entry]) -> Result<(), DiskError> {
        self.check_fence()?;
        let Some(first) = entries.first() else {
            return Ok(());
        };
        let snap = self.snapshot_index();
        assert!(
            first.index > snap,
            "raft appended entry {} at or below the snapshot {snap}",
            first.index
        );
        assert!(
            first.index <= self.last_index_now() + 1,
            "raft appended entry {} after a gap (last {})",
            first.index,
            self.last_index_now()
        );
        let r = self.disk.append(entries);
        self.guard(r)?;
        let keep = (first.index - snap - 1) as usize;
        self.entries.truncate(keep);
        self.entries.extend_from_slice(entries);
        Ok(())
    }

    /// Records a new hard state; term or vote changes are written at once (not synced).
    pub fn set_hard_state(&mut self, hs: &HardState) -> Result<(), DiskError> {
        self.check_fence()?;
        self.hard_state = hs.clone();
        if hs.term != self.saved_hard_state.term || hs.vote != self.saved_hard_state.vote {
            let r = self.disk.save_hard_state(hs);
            self.guard(r)?;
            self.saved_hard_state = hs.clone();
        }
        Ok(())
    }

    /// Records the commit index in memory (written with the next hard-state write).
    pub fn set_commit(&mut self, commit: u64) {
        self.hard_state.commit = commit;
    }

    /// Installs a snapshot received from the leader: it replaces the log it covers.
    pub fn apply_snapshot(&mut self, snapshot: Snapshot) -> Result<(), DiskError> {
        self.check_fence()?;
        let meta = snapshot.get_metadata();
        let index = meta.index;
        if index <= self.snapshot_index() {
            return Ok(());
        }
        // Entries past the snapshot could be from a stale term; raft-rs expects a clean slate
        // (as MemStorage does), and the leader resends what follows. Cut them durably before
        // the snapshot lands, so no crash can leave them behind a newer snapshot.
        let r = self.disk.truncate_after(index);
        self.guard(r)?;
        let r = self.disk.sync();
        self.guard(r)?;
        let r = self.disk.save_snapshot(&snapshot);
        self.guard(r)?;
        self.entries.clear();
        self.hard_state.term = self.hard_state.term.max(meta.term);
        self.hard_state.commit = index;
        self.conf_state = meta.get_conf_state().clone();
        self.snapshot = snapshot;
        let hs = self.hard_state.clone();
        let r = self.disk.save_hard_state(&hs);
        self.guard(r)?;
        self.saved_hard_state = hs;
        Ok(())
    }

    /// Takes a snapshot of the state at `index` (applied locally) and drops the log it covers.
    pub fn create_snapshot(&mut self, index: u64, data: bytes::Bytes) -> Result<(), DiskError> {
        self.check_fence()?;
        if index <= self.snapshot_index() || index > self.last_index_now() {
            return Ok(());
        }
        let term = self.term_of(index).unwrap_or(0);
        let mut snapshot = Snapshot::default();
        snapshot.data = data;
        let meta = snapshot.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(self.conf_state.clone());
        // Everything up to `index` is committed; write the commit index with it.
        let mut hs = self.hard_state.clone();
        hs.commit = hs.commit.max(index);
        let r = self.disk.save_hard_state(&hs);
        self.guard(r)?;
        self.saved_hard_state = hs;
        let r = self.disk.save_snapshot(&snapshot);
        self.guard(r)?;
        let drop = (index - self.snapshot_index()) as usize;
        self.entries.drain(..drop.min(self.entries.len()));
        self.snapshot = snapshot;
        Ok(())
    }

    /// Makes every write so far durable.
    pub fn sync(&mut self) -> Result<(), DiskError> {
        self.check_fence()?;
        let r = self.disk.sync();
        self.guard(r)
    }

    fn term_of(&self, idx: u64) -> Option<u64> {
        let snap = self.snapshot_index();
        if idx == snap {
            return Some(self.snapshot.get_metadata().term);
        }
        if idx < snap {
            return None;
        }
        self.entries.get((idx - snap - 1) as usize).map(|e| e.term)
    }
}

impl<D: Disk> raft::Storage for RaftStore<D> {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low <= self.snapshot_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last_index_now() + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let max = max_size.into().unwrap_or(u64::MAX);
        let first = self.snapshot_index() + 1;
        let slice = &self.entries[(low - first) as usize..(high - first) as usize];
        let mut out = Vec::with_capacity(slice.len());
        let mut size = 0u64;
        for e in slice {
            size += protobuf::Message::compute_size(e) as u64;
            if !out.is_empty() && size > max {
                break;
            }
            out.push(e.clone());
        }
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx < self.snapshot_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        self.term_of(idx)
            .ok_or(raft::Error::Store(StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.snapshot_index() + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last_index_now())
    }

    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if self.snapshot_index() == 0 {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(self.snapshot.clone())
    }
}
