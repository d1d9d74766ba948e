//! Sparse per-segment indexes, kept in memory and written to `.index` / `.timeindex` files.
//!
//! `.index`: 8-byte entries (relative base offset of a batch u32, file position u32), both
//! increasing. `.timeindex`: 12-byte entries (max timestamp so far i64, relative offset u32),
//! both increasing. Both are rebuildable from the `.log`, so loading is strict: any
//! inconsistency makes the caller rebuild instead of trusting the file.

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::error::StorageError;

const OFFSET_ENTRY: usize = 8;
const TIME_ENTRY: usize = 12;

/// Sparse map from (relative) batch base offset to file position.
#[derive(Debug, Default, Clone)]
pub(crate) struct OffsetIndex {
    entries: Vec<(u32, u32)>,
}

impl OffsetIndex {
    pub fn push(&mut self, rel_offset: u32, position: u32) {
        if let Some(&(o, p)) = self.entries.last() {
            if rel_offset <= o || position <= p {
                return;
            }
        }
        self.entries.push((rel_offset, position));
    }

    /// The position of the last indexed batch whose base offset is <= `rel_offset`, or 0.
    pub fn lookup(&self, rel_offset: u32) -> u32 {
        let i = self.entries.partition_point(|&(o, _)| o <= rel_offset);
        if i == 0 {
            0
        } else {
            self.entries[i - 1].1
        }
    }

    pub fn last(&self) -> Option<(u32, u32)> {
        self.entries.last().copied()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * OFFSET_ENTRY);
        for &(o, p) in &self.entries {
            out.extend_from_slice(&o.to_be_bytes());
            out.extend_from_slice(&p.to_be_bytes());
        }
        out
    }

    /// Decodes an index file, checking that entries increase and point inside the log.
    pub fn decode(bytes: &[u8], log_size: u64) -> Option<OffsetIndex> {
        if !bytes.chunks_exact(OFFSET_ENTRY).remainder().is_empty() {
            return None;
        }
        let mut idx = OffsetIndex {
            entries: Vec::with_capacity(bytes.len() / OFFSET_ENTRY),
        };
        for e in bytes.chunks_exact(OFFSET_ENTRY) {
            let o = u32::from_be_bytes([e[0], e[1], e[2], e[3]]);
            let p = u32::from_be_bytes([e[4], e[5], e[6], e[7]]);
            if u64::from(p) >= log_size {
                return None;
            }
            if let Some(&(lo, lp)) = idx.entries.last() {
                if o <= lo || p <= lp {
                    return None;
                }
            }
            idx.entries.push((o, p));
        }
        Some(idx)
    }
}

/// Sparse map from the running max timestamp to the (relative) offset of the batch at which
/// it was reached; both columns increase.
#[derive(Debug, Default, Clone)]
pub(crate) struct TimeIndex {
    entries: Vec<(i64, u32)>,
}

impl TimeIndex {
    pub fn push(&mut self, timestamp: i64, rel_offset: u32) {
        if let Some(&(t, o)) = self.entries.last() {
            if timestamp <= t || rel_offset <= o {
                return;
            }
        }
        self.entries.push((timestamp, rel_offset));
    }

    /// The relative offset of the last entry whose timestamp is < `ts`: every batch before
    /// it has max timestamp < `ts`, so a search for `ts` may start there.
    pub fn lookup_before(&self, ts: i64) -> u32 {
        let i = self.entries.partition_point(|&(t, _)| t < ts);
        if i == 0 {
            0
        } else {
            self.entries[i - 1].1
        }
    }

    pub fn last(&self) -> Option<(i64, u32)> {
        self.entries.last().copied()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * TIME_ENTRY);
        for &(t, o) in &self.entries {
            out.extend_from_slice(&t.to_be_bytes());
            out.extend_from_slice(&o.to_be_bytes());
        }
        out
    }

    pub fn decode(bytes: &[u8], max_rel_offset: u32) -> Option<TimeIndex> {
        if !bytes.chunks_exact(TIME_ENTRY).remainder().is_empty() {
            return None;
        }
        let mut idx = TimeIndex {
            entries: Vec::with_capacity(bytes.len() / TIME_ENTRY),
        };
        for e in bytes.chunks_exact(TIME_ENTRY) {
            let mut t = [0u8; 8];
            t.copy_from_slice(&e[..8]);
            let t = i64::from_be_bytes(t);
            let o = u32::from_be_bytes([e[8], e[9], e[10], e[11]]);
            if o > max_rel_offset {
                return None;
            }
            if let Some(&(lt, lo)) = idx.entries.last() {
                if t <= lt || o <= lo {
                    return None;
                }
            }
            idx.entries.push((t, o));
        }
        Some(idx)
    }
}

/// Writes `bytes` to `path` atomically: temp file, fsync, rename. The directory is synced by
/// the caller when it matters.
pub(crate) fn write_file_atomic(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ));
    let mut f = fs::File::create(&tmp).map_err(|e| StorageError::io("create", &tmp, e))?;
    f.write_all(bytes)
        .map_err(|e| StorageError::io("write", &tmp, e))?;
    f.sync_all()
        .map_err(|e| StorageError::io("fsync", &tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| StorageError::io("rename", &tmp, e))?;
    Ok(())
}

/// Reads a whole small file; None when it does not exist.
pub(crate) fn read_file_opt(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, StorageError> {
    match fs::metadata(path) {
        Ok(m) if m.len() > limit => Ok(None),
        Ok(_) => fs::read(path)
            .map(Some)
            .map_err(|e| StorageError::io("read", path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StorageError::io("stat", path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_index_lookup_and_round_trip() {
        let mut idx = OffsetIndex::default();
        idx.push(0, 0);
        idx.push(10, 4000);
        idx.push(20, 8000);
        idx.push(15, 9000); // out of order: ignored
        assert_eq!(idx.lookup(0), 0);
        assert_eq!(idx.lookup(9), 0);
        assert_eq!(idx.lookup(10), 4000);
        assert_eq!(idx.lookup(1000), 8000);
        let enc = idx.encode();
        let back = OffsetIndex::decode(&enc, 9000).unwrap();
        assert_eq!(back.len(), 3);
        assert!(OffsetIndex::decode(&enc, 8000).is_none());
        assert!(OffsetIndex::decode(&enc[..7], 9000).is_none());
    }

    #[test]
    fn time_index_lookup() {
        let mut idx = TimeIndex::default();
        idx.push(100, 0);
        idx.push(200, 5);
        idx.push(300, 9);
        assert_eq!(idx.lookup_before(50), 0);
        assert_eq!(idx.lookup_before(200), 0);
        assert_eq!(idx.lookup_before(201), 5);
        assert_eq!(idx.lookup_before(1000), 9);
        let back = TimeIndex::decode(&idx.encode(), 9).unwrap();
        assert_eq!(back.last(), Some((300, 9)));
        assert!(TimeIndex::decode(&idx.encode(), 8).is_none());
    }
}
