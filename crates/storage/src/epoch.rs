//! The leader-epoch cache of one partition log (Kafka's `LeaderEpochFileCache`): which leader
//! epoch started at which offset, kept with the log as `leader-epoch-checkpoint` and answering
//! OffsetForLeaderEpoch (`end_offset_for`).
//!
//! Entries are strictly increasing in both epoch and start offset. They are added when a
//! batch with a new (higher) epoch is appended, or when a replica becomes leader (the new
//! epoch starts at its log end), and cut when the log is truncated at either end.
//!
//! The checkpoint file uses Kafka's text format, so a Kafka operator can read it:
//! ```text
//! 0          <- format version
//! 2          <- entry count
//! 0 0        <- epoch start_offset
//! 3 1200
//! ```

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

pub use model::{EpochEndOffset, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET};

use crate::error::StorageError;
use crate::index::{read_file_opt, write_file_atomic};
use crate::segment::Segment;

/// File name of the checkpoint in the partition directory (Kafka's).
pub const CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
const CHECKPOINT_VERSION: i64 = 0;
/// A checkpoint larger than this is treated as damaged (an entry is ~25 bytes; a partition
/// would need millions of leader changes to get there).
pub(crate) const CHECKPOINT_BYTES_MAX: u64 = 64 << 20;

/// One entry: leader epoch `epoch` wrote its first batch (or became leader) at `start_offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

/// The in-memory epoch cache; the log persists it (see `Log`). Not synchronised itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.latest().map(|e| e.epoch)
    }

    /// Records that `epoch` starts at `start_offset`. A no-op for the latest epoch at the
    /// same or a later offset, and for negative values (batches of old formats carry -1).
    /// Entries that would break monotonicity (epoch >= `epoch` or start >= `start_offset`)
    /// are removed first, as in Kafka. Returns whether the cache changed.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 || start_offset < 0 {
            return false;
        }
        if let Some(l) = self.latest() {
            if l.epoch == epoch && start_offset >= l.start_offset {
                return false;
            }
        }
        while self
            .entries
            .last()
            .is_some_and(|e| e.epoch >= epoch || e.start_offset >= start_offset)
        {
            self.entries.pop();
        }
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        self.check();
        true
    }

    /// Kafka's `endOffsetFor`: see `EpochEndOffset`. `log_end` is the log end offset, the end
    /// of the latest epoch.
    pub fn end_offset_for(&self, requested: i32, log_end: i64) -> EpochEndOffset {
        if requested == UNDEFINED_EPOCH {
            return EpochEndOffset::UNDEFINED;
        }
        if self.latest_epoch() == Some(requested) {
            return EpochEndOffset {
                epoch: requested,
                end_offset: log_end,
            };
        }
        // First entry with a higher epoch: it ends the requested one.
        let i = self.entries.partition_point(|e| e.epoch <= requested);
        let Some(higher) = self.entries.get(i) else {
            return EpochEndOffset::UNDEFINED;
        };
        match i.checked_sub(1).map(|j| self.entries[j]) {
            // Older than everything known (its data is gone below the log start): the
            // follower restarts at the first known epoch's start.
            None => EpochEndOffset {
                epoch: requested,
                end_offset: higher.start_offset,
            },
            Some(floor) => EpochEndOffset {
                epoch: floor.epoch,
                end_offset: higher.start_offset,
            },
        }
    }

    /// The log was truncated to `end_offset` (exclusive): drops epochs starting at or after
    /// it. Returns whether the cache changed.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < end_offset);
        before != self.entries.len()
    }

    /// The log start moved to `start_offset`: epochs that ended before it go; the one
    /// containing it now starts there. Returns whether the cache changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let i = self
            .entries
            .partition_point(|e| e.start_offset <= start_offset);
        if i == 0 {
            return false;
        }
        let keep = self.entries[i - 1];
        let changed = i > 1 || keep.start_offset != start_offset;
        self.entries.drain(..i - 1);
        self.entries[0].start_offset = start_offset;
        self.check();
        changed
    }

    pub fn clear(&mut self) -> bool {
        let changed = !self.entries.is_empty();
        self.entries.clear();
        changed
    }

    fn check(&self) {
        debug_assert!(
            self.entries
                .windows(2)
                .all(|w| w[0].epoch < w[1].epoch && w[0].start_offset < w[1].start_offset),
            "epoch cache not monotonic: {:?}",
            self.entries
        );
    }

    /// Kafka's checkpoint text.
    pub fn encode(&self) -> String {
        let mut s = format!("{CHECKPOINT_VERSION}\n{}\n", self.entries.len());
        for e in &self.entries {
            let _ = writeln!(s, "{} {}", e.epoch, e.start_offset);
        }
        s
    }

    /// Parses a checkpoint; None if it is damaged in any way (wrong version, count, a
    /// malformed or non-monotonic line). Bytes come from disk: nothing here panics.
    pub fn decode(bytes: &[u8]) -> Option<LeaderEpochCache> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut lines = text.lines();
        let version: i64 = lines.next()?.trim().parse().ok()?;
        if version != CHECKPOINT_VERSION {
            return None;
        }
        let count: usize = lines.next()?.trim().parse().ok()?;
        let mut cache = LeaderEpochCache::default();
        for line in lines.by_ref().take(count) {
            let mut parts = line.split_whitespace();
            let epoch: i32 = parts.next()?.parse().ok()?;
            let start_offset: i64 = parts.next()?.parse().ok()?;
            if parts.next().is_some() || epoch < 0 || start_offset < 0 {
                return None;
            }
            if cache
                .latest()
                .is_some_and(|l| l.epoch >= epoch || l.start_offset >= start_offset)
            {
                return None;
            }
            cache.entries.push(EpochEntry {
                epoch,
                start_offset,
            });
        }
        if cache.entries.len() != count || lines.any(|l| !l.trim().is_empty()) {
            return None;
        }
        Some(cache)
    }
}

/// Writes the checkpoint atomically and durably (temp file, fsync, rename, directory fsync):
/// it is written only when an epoch starts or the log is truncated, both rare.
pub(crate) fn persist(dir: &Path, cache: &LeaderEpochCache) -> Result<(), StorageError> {
    write_file_atomic(&dir.join(CHECKPOINT_FILE), cache.encode().as_bytes())?;
    crate::log::sync_dir(dir)
}

/// Loads the cache when a log opens and fits it to the recovered log `[log_start, leo)`.
/// A missing or damaged checkpoint (a log written before the cache existed, or a disk
/// fault) is rebuilt from the batch headers of every segment, once.
pub(crate) fn recover(
    dir: &Path,
    segments: &[Arc<Segment>],
    log_start: i64,
    leo: i64,
) -> Result<LeaderEpochCache, StorageError> {
    let path = dir.join(CHECKPOINT_FILE);
    let loaded = read_file_opt(&path, CHECKPOINT_BYTES_MAX)?;
    let (mut cache, mut dirty) = match loaded.as_deref().and_then(LeaderEpochCache::decode) {
        Some(c) => (c, false),
        None => {
            if loaded.is_some() {
                tracing::warn!(path = %path.display(), "damaged leader-epoch checkpoint; rebuilding it from the log");
            }
            let mut c = LeaderEpochCache::default();
            'scan: for seg in segments {
                let mut cursor = seg.headers_from(0);
                loop {
                    match cursor.next_header() {
                        Ok(Some((_, h))) => {
                            c.assign(h.partition_leader_epoch, h.base_offset);
                        }
                        Ok(None) => break,
                        // Recovery decides what damage means for the log. The cache stops
                        // here: only its tail is missing, so it understates the latest
                        // epoch and a follower truncates further, never less.
                        Err(e) => {
                            tracing::warn!(path = %path.display(), error = %e, "unreadable batch header while rebuilding the leader-epoch cache");
                            break 'scan;
                        }
                    }
                }
            }
            (c, leo > log_start || loaded.is_some())
        }
    };
    dirty |= cache.truncate_from_end(leo);
    dirty |= cache.truncate_from_start(log_start);
    if dirty {
        persist(dir, &cache)?;
    }
    Ok(cache)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cache(entries: &[(i32, i64)]) -> LeaderEpochCache {
        let mut c = LeaderEpochCache::default();
        for &(e, o) in entries {
            assert!(c.assign(e, o));
        }
        c
    }

    fn eo(epoch: i32, end_offset: i64) -> EpochEndOffset {
        EpochEndOffset { epoch, end_offset }
    }

    #[test]
    fn end_offset_follows_kafka() {
        let c = cache(&[(2, 10), (4, 20), (7, 35)]);
        assert_eq!(
            c.end_offset_for(UNDEFINED_EPOCH, 50),
            EpochEndOffset::UNDEFINED
        );
        assert_eq!(
            c.end_offset_for(7, 50),
            eo(7, 50),
            "latest epoch ends at the LEO"
        );
        assert_eq!(c.end_offset_for(4, 50), eo(4, 35));
        assert_eq!(
            c.end_offset_for(5, 50),
            eo(4, 35),
            "unknown epoch: the floor one"
        );
        assert_eq!(c.end_offset_for(2, 50), eo(2, 20));
        assert_eq!(c.end_offset_for(1, 50), eo(1, 10), "older than all known");
        assert_eq!(c.end_offset_for(8, 50), EpochEndOffset::UNDEFINED);
        let empty = LeaderEpochCache::default();
        assert_eq!(empty.end_offset_for(0, 5), EpochEndOffset::UNDEFINED);
    }

    #[test]
    fn assign_keeps_monotonicity() {
        let mut c = cache(&[(1, 0), (3, 10)]);
        assert!(!c.assign(3, 15), "same epoch later: no-op");
        assert!(!c.assign(-1, 15), "old-format batches carry no epoch");
        assert!(c.assign(3, 5), "same epoch earlier: moves it");
        assert_eq!(
            c.entries(),
            &[
                EpochEntry {
                    epoch: 1,
                    start_offset: 0
                },
                EpochEntry {
                    epoch: 3,
                    start_offset: 5
                }
            ]
        );
        assert!(c.assign(2, 7), "a lower epoch removes the higher ones");
        assert_eq!(c.latest_epoch(), Some(2));
        assert!(
            c.assign(9, 0),
            "an earlier offset removes everything after it"
        );
        assert_eq!(c.entries().len(), 1);
    }

    #[test]
    fn truncation_at_both_ends() {
        let mut c = cache(&[(1, 0), (3, 10), (5, 20)]);
        assert!(!c.truncate_from_end(25));
        assert!(c.truncate_from_end(20));
        assert_eq!(c.latest_epoch(), Some(3));
        assert!(c.truncate_from_start(12));
        assert_eq!(
            c.entries(),
            &[EpochEntry {
                epoch: 3,
                start_offset: 12
            }]
        );
        assert!(!c.truncate_from_start(12));
        assert!(
            !c.truncate_from_start(3),
            "before the first entry: nothing to do"
        );
    }

    #[test]
    fn checkpoint_text_is_kafkas() {
        let c = cache(&[(0, 0), (3, 1200)]);
        assert_eq!(c.encode(), "0\n2\n0 0\n3 1200\n");
        assert_eq!(LeaderEpochCache::decode(c.encode().as_bytes()), Some(c));
        assert_eq!(
            LeaderEpochCache::decode(b"0\n0\n"),
            Some(LeaderEpochCache::default())
        );
        for bad in [
            &b""[..],
            b"1\n0\n",
            b"0\n2\n0 0\n",
            b"0\n1\n0 x\n",
            b"0\n2\n3 5\n2 9\n",
            b"0\n1\n1 1 1\n",
            b"0\n1\n1 1\n9 9\n",
            b"\xff",
        ] {
            assert_eq!(LeaderEpochCache::decode(bad), None, "{bad:?}");
        }
    }

    /// The model: the epoch of every offset in [start, end), as a plain vector.
    #[derive(Debug, Clone)]
    enum Op {
        Append(i32, i64),
        BecomeLeader(i32),
        TruncateEnd(i64),
        TruncateStart(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..3i32, 1..5i64).prop_map(|(d, n)| Op::Append(d, n)),
            1 => (1..3i32).prop_map(Op::BecomeLeader),
            1 => (0..40i64).prop_map(Op::TruncateEnd),
            1 => (0..40i64).prop_map(Op::TruncateStart),
        ]
    }

    proptest! {
        /// Against a model log that remembers each offset's epoch: after any sequence of
        /// appends (epochs never decreasing), leadership changes and truncations, the cache
        /// answers `end_offset_for` exactly as a scan of the model does, and survives its
        /// checkpoint text.
        #[test]
        fn cache_matches_a_model_log(ops in proptest::collection::vec(op(), 1..60)) {
            let mut c = LeaderEpochCache::default();
            let mut start = 0i64;
            let mut epochs: Vec<i32> = Vec::new(); // epochs[o - start] for o in [start, end)
            let mut current = 0i32;
            // Leader-only epochs (became leader, wrote nothing yet) live only in the cache.
            let mut leader_epoch: Option<(i32, i64)> = None;
            for op in ops {
                let end = start + epochs.len() as i64;
                match op {
                    Op::Append(bump, n) => {
                        current += bump;
                        c.assign(current, end);
                        epochs.extend(std::iter::repeat_n(current, n as usize));
                        leader_epoch = None;
                    }
                    Op::BecomeLeader(bump) => {
                        current += bump;
                        c.assign(current, end);
                        leader_epoch = Some((current, end));
                    }
                    Op::TruncateEnd(o) => {
                        if o < end && o >= start {
                            epochs.truncate((o - start) as usize);
                            c.truncate_from_end(o);
                            if leader_epoch.is_some_and(|(_, s)| s >= o) { leader_epoch = None; }
                            current = c.latest_epoch().unwrap_or(current);
                        }
                    }
                    Op::TruncateStart(o) => {
                        if o > start && o < end {
                            epochs.drain(..(o - start) as usize);
                            start = o;
                            c.truncate_from_start(o);
                        }
                    }
                }
                let end = start + epochs.len() as i64;
                // Model answer by scanning.
                let mut model: Vec<(i32, i64)> = Vec::new(); // (epoch, first offset)
                for (i, &e) in epochs.iter().enumerate() {
                    if model.last().is_none_or(|l| l.0 != e) { model.push((e, start + i as i64)); }
                }
                if let Some((e, s)) = leader_epoch { if model.last().is_none_or(|l| l.0 != e) { model.push((e, s)); } }
                let got: Vec<(i32, i64)> = c.entries().iter().map(|e| (e.epoch, e.start_offset)).collect();
                // The cache's first entry may start before the first record's epoch change
                // only by being moved to the log start.
                prop_assert_eq!(&got, &model);
                for q in -1..(current + 2) {
                    let want = if q < 0 { EpochEndOffset::UNDEFINED } else if model.last().map(|l| l.0) == Some(q) {
                        eo(q, end)
                    } else {
                        match model.iter().position(|m| m.0 > q) {
                            None => EpochEndOffset::UNDEFINED,
                            Some(0) => eo(q, model[0].1),
                            Some(i) => eo(model[i - 1].0, model[i].1),
                        }
                    };
                    prop_assert_eq!(c.end_offset_for(q, end), want);
                }
                prop_assert_eq!(LeaderEpochCache::decode(c.encode().as_bytes()), Some(c.clone()));
            }
        }
    }
}
