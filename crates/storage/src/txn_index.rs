//! The aborted-transaction index: Kafka's `.txnindex` file per segment, and the in-memory list
//! read_committed fetches consult.
//!
//! Each entry is one aborted transaction on this partition: its producer, the offset of its
//! first batch, the offset of its ABORT marker, and the last stable offset right after the
//! marker was written. An entry belongs to the segment that holds its marker. On disk
//! (Kafka's layout, big-endian, 34 bytes per entry, no header):
//! `version i16 (0), producer_id i64, first_offset i64, last_offset i64, last_stable_offset i64`.
//!
//! The log keeps every entry of the partition in memory in marker order ([`AbortedTxns`]),
//! writes a segment's file when the segment is rolled (and the active one at close), loads
//! the files at open, and rebuilds entries for the part of the log it replays.

use std::path::{Path, PathBuf};

use crate::error::StorageError;
use crate::index::{read_file_opt, write_file_atomic};
use crate::segment::file_name;

/// Bytes per `.txnindex` entry.
pub const TXN_INDEX_ENTRY_BYTES: usize = 34;
/// The only entry version Kafka writes.
const ENTRY_VERSION: i16 = 0;
/// A segment's index is never larger than this (the file is read whole).
const TXN_INDEX_FILE_MAX_BYTES: u64 = 256 << 20;

/// An aborted transaction: its producer and its offset range, up to its abort marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// Offset of the abort marker.
    pub last_offset: i64,
    /// The partition's last stable offset once the marker was written. A search for aborted
    /// transactions starting below some bound `u` is complete at the first entry whose
    /// `last_stable_offset >= u`: every transaction that started below `u` had ended by then.
    pub last_stable_offset: i64,
}

pub(crate) fn txn_index_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(file_name(base, "txnindex"))
}

/// Encodes entries in the `.txnindex` layout.
pub(crate) fn encode(entries: &[AbortedTxn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * TXN_INDEX_ENTRY_BYTES);
    for e in entries {
        out.extend_from_slice(&ENTRY_VERSION.to_be_bytes());
        out.extend_from_slice(&e.producer_id.to_be_bytes());
        out.extend_from_slice(&e.first_offset.to_be_bytes());
        out.extend_from_slice(&e.last_offset.to_be_bytes());
        out.extend_from_slice(&e.last_stable_offset.to_be_bytes());
    }
    out
}

/// Decodes a `.txnindex` body. Whole entries of a known version are kept; a torn tail or an
/// entry of an unknown version ends the list (reported as `false`).
pub(crate) fn decode(bytes: &[u8]) -> (Vec<AbortedTxn>, bool) {
    let mut out = Vec::with_capacity(bytes.len() / TXN_INDEX_ENTRY_BYTES);
    let mut chunks = bytes.chunks_exact(TXN_INDEX_ENTRY_BYTES);
    for c in chunks.by_ref() {
        let i64_at = |at: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&c[at..at + 8]);
            i64::from_be_bytes(a)
        };
        if i16::from_be_bytes([c[0], c[1]]) != ENTRY_VERSION {
            return (out, false);
        }
        out.push(AbortedTxn {
            producer_id: i64_at(2),
            first_offset: i64_at(10),
            last_offset: i64_at(18),
            last_stable_offset: i64_at(26),
        });
    }
    let whole = chunks.remainder().is_empty();
    (out, whole)
}

/// Reads a segment's `.txnindex`; a missing file is an empty index.
pub(crate) fn load(dir: &Path, base: i64) -> Result<Vec<AbortedTxn>, StorageError> {
    let path = txn_index_path(dir, base);
    let Some(bytes) = read_file_opt(&path, TXN_INDEX_FILE_MAX_BYTES)? else {
        return Ok(Vec::new());
    };
    let (entries, whole) = decode(&bytes);
    if !whole {
        tracing::warn!(path = %path.display(), kept = entries.len(),
            "transaction index has a torn or unknown tail; keeping the whole entries before it");
    }
    Ok(entries)
}

/// Writes (atomically) the index of the segment `[base, next)` from the entries whose marker
/// lies in it, or removes the file when there are none.
pub(crate) fn store(
    dir: &Path,
    base: i64,
    next: i64,
    all: &AbortedTxns,
) -> Result<(), StorageError> {
    let entries = all.in_range(base, next);
    let path = txn_index_path(dir, base);
    if entries.is_empty() {
        return match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StorageError::io("remove", &path, e)),
        };
    }
    write_file_atomic(&path, &encode(entries))
}

/// Every aborted transaction of a partition, ordered by marker offset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AbortedTxns {
    entries: Vec<AbortedTxn>,
}

impl AbortedTxns {
    /// Adds an entry; entries arrive in marker order. A duplicate (same marker offset, as
    /// when a replay re-finds a marker already loaded from a file) is ignored.
    pub fn push(&mut self, a: AbortedTxn) {
        match self.entries.last() {
            Some(last) if last.last_offset >= a.last_offset => {
                debug_assert!(self.entries.iter().any(|e| e.last_offset == a.last_offset));
            }
            _ => self.entries.push(a),
        }
    }

    /// Adds entries loaded from one segment file (segments are loaded in order).
    pub fn extend(&mut self, entries: Vec<AbortedTxn>) {
        for e in entries {
            self.push(e);
        }
    }

    /// Drops entries whose marker is at or after `offset` (truncation, or before a replay
    /// that will find those markers again).
    pub fn truncate_from(&mut self, offset: i64) {
        let keep = self.entries.partition_point(|a| a.last_offset < offset);
        self.entries.truncate(keep);
    }

    /// Drops entries whose marker is below the log start (retention); true if any went.
    pub fn prune_below(&mut self, log_start: i64) -> bool {
        let n = self.entries.partition_point(|a| a.last_offset < log_start);
        self.entries.drain(..n);
        n > 0
    }

    /// Drops the entry of the marker at `marker_offset` (the cleaner removed the marker,
    /// after every batch of its transaction); true if there was one.
    pub fn remove(&mut self, marker_offset: i64) -> bool {
        match self
            .entries
            .binary_search_by_key(&marker_offset, |a| a.last_offset)
        {
            Ok(i) => {
                self.entries.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    /// Entries whose marker lies in `[from, to)`.
    pub fn in_range(&self, from: i64, to: i64) -> &[AbortedTxn] {
        let a = self.entries.partition_point(|e| e.last_offset < from);
        let b = self.entries.partition_point(|e| e.last_offset < to);
        &self.entries[a..b.max(a)]
    }

    /// The aborted transactions a read of `[from, upper)` must report: those that end at or
    /// after `from` and start below `upper`, oldest first. Stops at the first entry whose
    /// last stable offset reaches `upper` (no later marker can belong to a transaction that
    /// started below it).
    pub fn overlapping(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        let i = self.entries.partition_point(|a| a.last_offset < from);
        let mut out = Vec::new();
        for a in &self.entries[i..] {
            if a.first_offset < upper {
                out.push(*a);
            }
            if a.last_stable_offset >= upper {
                break;
            }
        }
        out
    }

    pub fn all(&self) -> &[AbortedTxn] {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    #[test]
    fn kafka_layout_golden_bytes() {
        let b = encode(&[a(1, 2, 3, 4)]);
        let mut want = vec![0u8, 0];
        for v in [1i64, 2, 3, 4] {
            want.extend_from_slice(&v.to_be_bytes());
        }
        assert_eq!(b, want);
        assert_eq!(decode(&b), (vec![a(1, 2, 3, 4)], true));
        let (torn, whole) = decode(&b[..20]);
        assert!(torn.is_empty() && !whole);
        let mut bad = b.clone();
        bad[1] = 9;
        assert_eq!(decode(&bad), (vec![], false));
    }

    #[test]
    fn overlapping_stops_at_a_complete_entry() {
        let mut all = AbortedTxns::default();
        all.push(a(1, 0, 5, 3)); // txn 3.. still open after this marker
        all.push(a(2, 3, 8, 9));
        all.push(a(3, 10, 12, 13));
        all.push(a(3, 10, 12, 13)); // duplicate ignored
        assert_eq!(all.all().len(), 3);
        assert_eq!(all.overlapping(0, 4).len(), 2);
        // The entry with lso 9 >= upper 9 completes the search.
        assert_eq!(all.overlapping(0, 9).len(), 2);
        assert_eq!(all.overlapping(6, 20).len(), 2);
        assert_eq!(all.overlapping(13, 20).len(), 0);
        assert_eq!(all.in_range(5, 9).len(), 2);
        all.truncate_from(8);
        assert_eq!(all.all().len(), 1);
        assert!(all.prune_below(6));
        assert!(all.all().is_empty());
    }
}
