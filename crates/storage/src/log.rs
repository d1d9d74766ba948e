//! `Log`: one partition's log — append, read, lookups, roll, retention, truncation,
//! recovery and durability (flush policies and group commit).
//!
//! Concurrency: appends (and everything that changes the log's shape: roll, truncation,
//! segment deletion) are serialised by `append`; `maintenance` serialises retention,
//! DeleteRecords, truncation and compaction's final swap with each other. Reads take the
//! segment-list read lock only long enough to clone an `Arc<Segment>`, then use positional
//! reads, so they run concurrently with appends. Offsets become visible to readers only
//! after their bytes and index entries are in place (`Segment::publish`, then `leo`).
//!
//! Group commit: a thread of the shared flusher pool (`flusher`) performs fsyncs. Callers of
//! `wait_durable` raise the requested offset, queue the log in the pool and wait on a watch
//! channel; while one fsync
//! runs, all appends that land meanwhile are covered by the next one, so any number of
//! concurrent waiters share one fsync per round. A failed fsync takes the log offline for
//! good (never retried: the kernel may have dropped the dirty pages).

use std::collections::hash_map::Entry;
use std::fs;
use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use model::{TimestampType, TopicConfig};
use parking_lot::{Mutex, RwLock};
use record::{
    decode_records, parse_end_txn_marker, set_base_offset, set_log_append_time_split,
    set_partition_leader_epoch, split_batches, validate_batch, validate_batch_structure,
    validate_records, BatchHeader, EndTxnMarker, RecordError, RecordRules, TimestampKind,
    DECOMPRESSED_BATCH_BYTES_MAX, HEADER_LEN, LENGTH_OFFSET, LOG_OVERHEAD,
};

use crate::clock::Clock;
use crate::epoch::{EpochEndOffset, EpochEntry, LeaderEpochCache};
use crate::error::{AppendError, ReadError, StorageError};
use crate::flusher::{FlushQueue, Flusher};
use crate::index::{read_file_opt, write_file_atomic};
use crate::producer::{Check, ProducerSnapshot, ProducerStateMap};
use crate::segment::{file_name, Segment};
use crate::txn_index::{self, AbortedTxn, AbortedTxns};

const CLEAN_SHUTDOWN_FILE: &str = ".clean-shutdown";
const LOG_START_FILE: &str = "log-start-offset";
pub(crate) const CLEANER_CHECKPOINT_FILE: &str = "cleaner-offset";
/// Cap on the decompressed size of one batch when a lookup or the cleaner looks inside it:
/// the same bound produce enforces, so every accepted batch can be read back.
pub(crate) const DECOMPRESS_MAX_BYTES: usize = DECOMPRESSED_BATCH_BYTES_MAX;
/// Kafka's default `producer.id.expiration.ms`: idle producers are forgotten by retention.
pub const PRODUCER_ID_EXPIRATION_MS: i64 = 86_400_000;
/// Producer-state snapshots kept on disk (older ones are deleted at each roll).
const SNAPSHOTS_KEPT: usize = 2;

/// Who appends (Kafka's `AppendOrigin`): what a batch is checked for depends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// A producer (Produce): fully validated, sequences checked.
    Client,
    /// A coordinator on this broker: structure checked; producer batches may lack sequences.
    Coordinator,
    /// A copy from the leader: structure checked, offsets kept, no producer checks.
    Replication,
}

/// Why a log went offline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OfflineCause {
    /// Append writes failed (a full disk, typically) and were cut back: the files hold
    /// exactly what was acknowledged before, so opening the log again from them is safe once
    /// writes succeed again.
    Write,
    /// A failed fsync, a write that could not be cut back, or another failure after which
    /// the files may not hold what the log believed. Never retried in this process: after a
    /// failed fsync the kernel may have dropped the unwritten pages while still serving them
    /// from its cache as clean, so neither this log nor a re-opened one could tell what is
    /// really on disk (PostgreSQL's "fsyncgate"). A restart recovers the log as after a crash.
    Other,
}

/// How [`Log::open_with`] opens a log.
#[derive(Clone, Debug, Default)]
pub struct LogOptions {
    /// The log's entry in its data directory's recovery-point checkpoint.
    pub recovery_point: Option<i64>,
    /// The pool that runs its group-commit fsyncs (default: the process-wide one).
    pub flusher: Option<Arc<Flusher>>,
}

/// The outcome of a successful append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The broker time stamped on the batches, or -1 under CreateTime.
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
    /// A retry of a batch already in the log: nothing was written and the offsets are the
    /// original ones.
    pub duplicate: bool,
}

/// Whole batches read from the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadResult {
    /// Whole batches, possibly empty.
    pub data: Bytes,
    /// Base offset of the first batch returned, -1 when empty.
    pub first_offset: i64,
    /// The offset after the last batch returned (the requested offset when empty).
    pub next_offset: i64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetentionStats {
    pub segments_deleted: usize,
    pub bytes_deleted: u64,
    pub log_start_offset: i64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactionStats {
    /// False when there was nothing (or not enough) to clean.
    pub ran: bool,
    pub segments_cleaned: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub records_removed: u64,
    /// Batches that did not decode and were kept as they are.
    pub batches_skipped: u64,
}

pub(crate) struct AppendState {
    pub producers: ProducerStateMap,
}

struct FlushRequest {
    requested: i64,
    shutdown: bool,
}

pub(crate) struct Shared {
    pub dir: PathBuf,
    pub clock: Arc<dyn Clock>,
    pub config: RwLock<Arc<TopicConfig>>,
    pub segments: RwLock<Vec<Arc<Segment>>>,
    pub append: Mutex<AppendState>,
    pub maintenance: Mutex<()>,
    /// Leader epoch -> start offset (`leader-epoch-checkpoint`). Changed under the append
    /// lock (appends, truncation) or `maintenance` (log start moves).
    epochs: Mutex<LeaderEpochCache>,
    flush_lock: Mutex<()>,
    leo: AtomicI64,
    log_start: AtomicI64,
    durable: AtomicI64,
    offline: AtomicBool,
    /// Whether every failure that took the log offline left its files intact (see
    /// `Log::offline_cause`).
    offline_reopenable: AtomicBool,
    closed: AtomicBool,
    unflushed_messages: AtomicI64,
    last_flush_ms: AtomicI64,
    dir_dirty: AtomicBool,
    pub cleaner_checkpoint: AtomicI64,
    /// First offset of the oldest open transaction, i64::MAX when none (lock-free for
    /// fetches; the truth lives in the producer state under the append lock).
    first_unstable: AtomicI64,
    /// Every aborted transaction of the partition in marker order (persisted per segment in
    /// `.txnindex` files). Written under the append lock; read by fetches.
    pub aborted: RwLock<AbortedTxns>,
    /// Test seam: makes the next segment fsync fail, to exercise the offline path.
    fail_next_sync: AtomicBool,
    flush_req: Mutex<FlushRequest>,
    /// Set while the log waits in the flusher pool's queue (queued at most once).
    pub(crate) flush_queued: AtomicBool,
    flusher: Arc<FlushQueue>,
    durable_tx: tokio::sync::watch::Sender<i64>,
}

/// One partition's log. `Send + Sync`; share it as `Arc<Log>`. Dropping it without
/// `close` is a crash as far as the files are concerned (the next open recovers).
pub struct Log {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.shared.dir)
            .field("log_start", &self.log_start_offset())
            .field("log_end", &self.log_end_offset())
            .finish()
    }
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::io("fsync directory", dir, e))
}

fn parse_base(name: &str, ext: &str) -> Option<i64> {
    let stem = name.strip_suffix(ext)?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

fn read_i64_file(path: &Path) -> Result<Option<i64>, StorageError> {
    Ok(read_file_opt(path, 64)?
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.trim().parse().ok()))
}

impl Shared {
    /// Adds epoch entries (epoch, start offset) and persists the cache if one was new.
    /// Called under the append lock before the batches are written.
    fn assign_epochs(
        &self,
        entries: impl IntoIterator<Item = (i32, i64)>,
    ) -> Result<(), StorageError> {
        let mut c = self.epochs.lock();
        let mut changed = false;
        for (epoch, start) in entries {
            changed |= c.assign(epoch, start);
        }
        if changed {
            crate::epoch::persist(&self.dir, &c).map_err(|e| self.go_offline(e))?;
        }
        Ok(())
    }

    /// Applies a truncation to the epoch cache and persists it if it changed. Called after
    /// the log itself changed (a crash in between is repaired by the next open).
    fn update_epochs(
        &self,
        f: impl FnOnce(&mut LeaderEpochCache) -> bool,
    ) -> Result<(), StorageError> {
        let mut c = self.epochs.lock();
        if f(&mut c) {
            crate::epoch::persist(&self.dir, &c).map_err(|e| self.go_offline(e))?;
        }
        Ok(())
    }

    pub fn offline(&self) -> bool {
        self.offline.load(Ordering::Acquire)
    }

    pub fn check_online(&self) -> Result<(), StorageError> {
        if self.offline() || self.closed.load(Ordering::Acquire) {
            Err(StorageError::Offline(self.dir.clone()))
        } else {
            Ok(())
        }
    }

    /// Takes the log offline after an I/O failure; loud, and permanent for this instance.
    /// The files may no longer match what the log believed (a failed fsync, a failed
    /// truncation): re-opening is not safe without an operator.
    pub fn go_offline(&self, err: StorageError) -> StorageError {
        self.offline_reopenable.store(false, Ordering::Release);
        self.set_offline(err)
    }

    /// Takes the log offline after an append write that failed and was cut back: the files
    /// hold exactly what they held before it, so the log can be opened again from them.
    pub(crate) fn go_offline_after_write(&self, err: StorageError) -> StorageError {
        if !self.offline() {
            self.offline_reopenable.store(true, Ordering::Release);
        }
        self.set_offline(err)
    }

    fn set_offline(&self, err: StorageError) -> StorageError {
        if !self.offline.swap(true, Ordering::AcqRel) {
            tracing::error!(dir = %self.dir.display(), error = %err,
                "log is going offline after a failed write or fsync; it will not be retried");
        }
        self.durable_tx.send_modify(|_| {});
        err
    }

    pub fn active(&self) -> Arc<Segment> {
        let segs = self.segments.read();
        Arc::clone(&segs[segs.len() - 1])
    }

    /// The segment that would contain `offset` (the last one with base <= offset, or the
    /// first).
    pub fn segment_for(&self, offset: i64) -> Arc<Segment> {
        let segs = self.segments.read();
        let i = segs
            .partition_point(|sg| sg.base_offset <= offset)
            .saturating_sub(1);
        Arc::clone(&segs[i])
    }

    pub fn leo(&self) -> i64 {
        self.leo.load(Ordering::Acquire)
    }

    pub fn log_start(&self) -> i64 {
        self.log_start.load(Ordering::Acquire)
    }

    fn sync_segment(&self, seg: &Segment) -> Result<(), StorageError> {
        let started = std::time::Instant::now();
        let r = if self.fail_next_sync.swap(false, Ordering::AcqRel) {
            Err(std::io::Error::other("injected fsync failure"))
        } else {
            seg.sync()
        };
        crate::metrics::FSYNC_LATENCY.observe(started.elapsed());
        if r.is_err() {
            crate::metrics::FSYNC_FAILURES.fetch_add(1, Ordering::Relaxed);
        }
        r.map_err(|e| self.go_offline(StorageError::io("fsync", seg.log_path(), e)))
    }

    /// fsyncs the active segment (rolled segments were synced at roll) and publishes the
    /// new durable offset.
    fn flush_inner(&self) -> Result<(), StorageError> {
        let _f = self.flush_lock.lock();
        let _timed = crate::metrics::Timed::start(&crate::metrics::FLUSH_LATENCY);
        self.check_online()?;
        let target = self.leo();
        let active = self.active();
        self.sync_segment(&active)?;
        if self.dir_dirty.swap(false, Ordering::AcqRel) {
            if let Err(e) = sync_dir(&self.dir) {
                return Err(self.go_offline(e));
            }
        }
        self.unflushed_messages.store(0, Ordering::Release);
        self.last_flush_ms
            .store(self.clock.now_ms(), Ordering::Release);
        let prev = self.durable.fetch_max(target, Ordering::AcqRel);
        if target > prev {
            self.durable_tx.send_replace(target);
        }
        Ok(())
    }

    /// Whether a waiter asked for an fsync the log still needs.
    fn flush_wanted(&self) -> bool {
        let r = self.flush_req.lock();
        let durable = self.durable.load(Ordering::Acquire);
        !r.shutdown && !self.offline() && r.requested > durable && self.leo() > durable
    }

    /// Runs the fsync waiters asked for, if still needed (called by the flusher pool);
    /// returns whether more was asked for meanwhile. Errors are published through
    /// `offline`, where waiters see them.
    pub(crate) fn flush_if_requested(&self) -> bool {
        if !self.flush_wanted() {
            return false;
        }
        let _ = self.flush_inner();
        self.flush_wanted()
    }

    pub fn config(&self) -> Arc<TopicConfig> {
        Arc::clone(&self.config.read())
    }

    /// Publishes the first unstable offset readers need (after appends of transactional or
    /// control batches, recovery and truncation).
    fn publish_txn_state(&self, producers: &ProducerStateMap) {
        self.first_unstable.store(
            producers.first_unstable_offset().unwrap_or(i64::MAX),
            Ordering::Release,
        );
    }

    fn snapshot_path(&self, offset: i64) -> PathBuf {
        self.dir.join(file_name(offset, "snapshot"))
    }

    fn snapshot_offsets(&self) -> Result<Vec<i64>, StorageError> {
        let mut out = Vec::new();
        let rd = fs::read_dir(&self.dir).map_err(|e| StorageError::io("list", &self.dir, e))?;
        for e in rd.flatten() {
            if let Some(o) = e
                .file_name()
                .to_str()
                .and_then(|n| parse_base(n, ".snapshot"))
            {
                out.push(o);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Writes a producer-state snapshot at `offset` and prunes old ones.
    fn write_snapshot(
        &self,
        producers: &ProducerStateMap,
        offset: i64,
    ) -> Result<(), StorageError> {
        write_file_atomic(&self.snapshot_path(offset), &producers.encode())?;
        let snaps = self.snapshot_offsets()?;
        if snaps.len() > SNAPSHOTS_KEPT {
            for o in &snaps[..snaps.len() - SNAPSHOTS_KEPT] {
                let _ = fs::remove_file(self.snapshot_path(*o));
            }
        }
        Ok(())
    }

    /// Rebuilds producer state and the aborted-transaction index: the newest valid snapshot
    /// at or below the log end and the segments' `.txnindex` files, then the batch headers
    /// after the snapshot (markers found there re-create their index entries). Snapshots past
    /// the log end (after truncation) are removed.
    fn load_producer_state(&self) -> Result<ProducerStateMap, StorageError> {
        let leo = self.leo();
        let mut map = ProducerStateMap::default();
        let mut legacy_aborted = Vec::new();
        let mut from = self.log_start();
        for o in self.snapshot_offsets()?.into_iter().rev() {
            if o > leo {
                let _ = fs::remove_file(self.snapshot_path(o));
                continue;
            }
            if let Some(bytes) = read_file_opt(&self.snapshot_path(o), 64 << 20)? {
                if let Some((m, legacy)) = ProducerStateMap::decode(&bytes) {
                    map = m;
                    legacy_aborted = legacy;
                    from = from.max(o);
                    break;
                }
            }
        }
        let segs = self.segments.read().clone();
        let mut aborted = AbortedTxns::default();
        let mut loaded = legacy_aborted;
        for seg in &segs {
            loaded.extend(txn_index::load(&self.dir, seg.base_offset)?);
        }
        loaded.sort_by_key(|a| a.last_offset);
        aborted.extend(loaded);
        // The replay below finds these markers again.
        aborted.truncate_from(from);
        for seg in segs {
            if seg.next_offset() <= from {
                continue;
            }
            let Some((pos, _)) = seg.find_batch(from)? else {
                continue;
            };
            let mut cur = seg.headers_from(pos);
            while let Some((pos, h)) = cur.next_header()? {
                map.update(&h);
                if h.is_control() && h.producer_id >= 0 {
                    let bytes = seg.read_at(pos, h.total_size())?;
                    if let Some(marker) = parse_end_txn_marker(&bytes) {
                        if let Some(a) = map.complete_txn(&h, marker) {
                            aborted.push(a);
                        }
                    }
                }
            }
        }
        aborted.prune_below(self.log_start());
        *self.aborted.write() = aborted;
        Ok(map)
    }

    /// Writes the `.txnindex` of a segment (or removes it when it has no entries).
    pub(crate) fn write_txn_index(&self, seg: &Segment) -> Result<(), StorageError> {
        txn_index::store(
            &self.dir,
            seg.base_offset,
            seg.next_offset(),
            &self.aborted.read(),
        )
    }

    /// Finishes the active segment (fsync, index files) and starts a new one at `base`
    /// (the log end, or the first offset of a replicated batch after a gap). Called with
    /// the append lock held.
    fn roll(&self, st: &AppendState, base: i64) -> Result<Arc<Segment>, StorageError> {
        debug_assert!(base >= self.leo());
        let old = self.active();
        if old.size() == 0 {
            return Ok(old);
        }
        // Rolled segments are made durable here, so recovery only has to scan the last one.
        self.sync_segment(&old)?;
        old.write_indexes()?;
        self.write_txn_index(&old)?;
        let seg = Arc::new(Segment::create(&self.dir, base, self.clock.now_ms())?);
        if let Err(e) = sync_dir(&self.dir) {
            return Err(self.go_offline(e));
        }
        self.segments.write().push(Arc::clone(&seg));
        self.write_snapshot(&st.producers, base)?;
        Ok(seg)
    }

    /// Removes the oldest segments selected by `pick` (never the active one) and advances
    /// the log start to the new first segment. Called with `maintenance` held.
    fn delete_oldest_segments(
        &self,
        mut pick: impl FnMut(&Segment, u64) -> bool,
    ) -> Result<RetentionStats, StorageError> {
        let mut stats = RetentionStats::default();
        let doomed: Vec<Arc<Segment>> = {
            let mut segs = self.segments.write();
            let total: u64 = segs.iter().map(|s| s.size()).sum();
            let mut remaining = total;
            let mut n = 0;
            while n + 1 < segs.len() && pick(&segs[n], remaining) {
                remaining -= segs[n].size();
                n += 1;
            }
            if n == 0 {
                stats.log_start_offset = self.log_start();
                return Ok(stats);
            }
            let doomed: Vec<_> = segs.drain(..n).collect();
            let new_start = segs[0].base_offset;
            self.log_start.fetch_max(new_start, Ordering::AcqRel);
            doomed
        };
        for seg in &doomed {
            stats.segments_deleted += 1;
            stats.bytes_deleted += seg.size();
            seg.delete_files()?;
        }
        let start = self.log_start();
        self.update_epochs(|c| c.truncate_from_start(start))?;
        for o in self.snapshot_offsets()? {
            // Keep the newest snapshot at or below the start; replay needs one base.
            if o < start
                && self
                    .snapshot_offsets()?
                    .iter()
                    .any(|&x| x > o && x <= start)
            {
                let _ = fs::remove_file(self.snapshot_path(o));
            }
        }
        stats.log_start_offset = start;
        Ok(stats)
    }
}

impl Log {
    /// Opens (recovering if needed) or creates the partition log in `dir`, without a
    /// recovery point: see [`Log::open_recovering`].
    pub fn open(
        dir: &Path,
        config: TopicConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Log, StorageError> {
        Log::open_with(dir, config, clock, LogOptions::default())
    }

    /// Opens (recovering if needed) or creates the partition log in `dir`. After a crash,
    /// only bytes at or after `options.recovery_point` (the log's entry in the data
    /// directory's recovery-point checkpoint; at least the last segment's base offset) may be
    /// cut as a torn tail; damage anywhere else fails the open with `StorageError::Corrupt`
    /// and changes nothing on disk (see `recovery`). Group-commit fsyncs run on
    /// `options.flusher` (default: the process-wide pool).
    pub fn open_with(
        dir: &Path,
        config: TopicConfig,
        clock: Arc<dyn Clock>,
        options: LogOptions,
    ) -> Result<Log, StorageError> {
        let recovery_point = options.recovery_point;
        let flusher = options
            .flusher
            .unwrap_or_else(Flusher::shared_default)
            .queue();
        fs::create_dir_all(dir).map_err(|e| StorageError::io("create log dir", dir, e))?;
        let marker = dir.join(CLEAN_SHUTDOWN_FILE);
        let clean = marker.exists();
        let interval = config.index_interval_bytes.max(0) as u64;
        let now = clock.now_ms();

        let mut bases = Vec::new();
        let rd = fs::read_dir(dir).map_err(|e| StorageError::io("list", dir, e))?;
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(".tmp") || name.ends_with(".cleaned") {
                // Leftovers of an interrupted atomic write or compaction.
                let _ = fs::remove_file(e.path());
            } else if let Some(b) = parse_base(name, ".log") {
                bases.push(b);
            }
        }
        bases.sort_unstable();
        let checkpoint_start = read_i64_file(&dir.join(LOG_START_FILE))?.unwrap_or(0);

        let mut segments =
            crate::recovery::load_segments(dir, &bases, clean, recovery_point, interval, now)?;
        if segments.is_empty() {
            segments.push(Arc::new(Segment::create(
                dir,
                checkpoint_start.max(0),
                now,
            )?));
        }
        let leo = segments[segments.len() - 1].next_offset();
        let log_start = checkpoint_start.max(segments[0].base_offset).min(leo);
        let cleaner_checkpoint = read_i64_file(&dir.join(CLEANER_CHECKPOINT_FILE))?
            .unwrap_or(0)
            .clamp(log_start, leo);

        let epochs = crate::epoch::recover(dir, &segments, log_start, leo)?;

        let (durable_tx, _) = tokio::sync::watch::channel(leo);
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            clock,
            config: RwLock::new(Arc::new(config)),
            segments: RwLock::new(segments),
            append: Mutex::new(AppendState {
                producers: ProducerStateMap::default(),
            }),
            maintenance: Mutex::new(()),
            epochs: Mutex::new(epochs),
            flush_lock: Mutex::new(()),
            leo: AtomicI64::new(leo),
            log_start: AtomicI64::new(log_start),
            durable: AtomicI64::new(leo),
            offline: AtomicBool::new(false),
            offline_reopenable: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            unflushed_messages: AtomicI64::new(0),
            last_flush_ms: AtomicI64::new(now),
            dir_dirty: AtomicBool::new(false),
            cleaner_checkpoint: AtomicI64::new(cleaner_checkpoint),
            fail_next_sync: AtomicBool::new(false),
            first_unstable: AtomicI64::new(i64::MAX),
            aborted: RwLock::new(AbortedTxns::default()),
            flush_req: Mutex::new(FlushRequest {
                requested: 0,
                shutdown: false,
            }),
            flush_queued: AtomicBool::new(false),
            flusher,
            durable_tx,
        });
        {
            let mut st = shared.append.lock();
            st.producers = shared.load_producer_state()?;
            shared.publish_txn_state(&st.producers);
        }
        if clean {
            // The marker must be gone (durably) before anything new is written, or a crash
            // later would skip the recovery scan.
            fs::remove_file(&marker).map_err(|e| StorageError::io("remove", &marker, e))?;
        } else if !bases.is_empty() {
            // What recovery kept may still be only in the page cache (process crash). A brand
            // new log has nothing to make durable but its directory.
            let active = shared.active();
            active
                .sync()
                .map_err(|e| StorageError::io("fsync", active.log_path(), e))?;
        }
        sync_dir(dir)?;
        Ok(Log { shared })
    }

    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The leader-epoch cache entries (epoch -> start offset), oldest first.
    pub fn leader_epochs(&self) -> Vec<EpochEntry> {
        self.shared.epochs.lock().entries().to_vec()
    }

    /// The latest leader epoch this log knows (of its last batch, or of a leadership it
    /// started with `assign_leader_epoch`).
    pub fn latest_epoch(&self) -> Option<i32> {
        self.shared.epochs.lock().latest_epoch()
    }

    /// OffsetForLeaderEpoch on this log (Kafka's semantics, see `EpochEndOffset`): the
    /// largest epoch <= `epoch` and where it ends; the latest epoch ends at the log end.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> EpochEndOffset {
        let c = self.shared.epochs.lock();
        // The LEO is read under the epochs lock: an append assigns its epoch (under this
        // lock) before it publishes the new end, so the pair is consistent.
        c.end_offset_for(epoch, self.shared.leo())
    }

    /// A replica became leader in `epoch`: the epoch starts at the current log end, even
    /// before its first batch (Kafka does the same, so followers of an older epoch learn
    /// where it ended).
    pub fn assign_leader_epoch(&self, epoch: i32) -> Result<(), StorageError> {
        let s = &*self.shared;
        let _st = s.append.lock();
        s.check_online()?;
        s.assign_epochs([(epoch, s.leo())])
    }

    /// Appends one or more v2 batches (a Produce request's records) as one unit: every
    /// batch is validated first and nothing is written unless all pass.
    pub fn append(&self, batches: Bytes, leader_epoch: i32) -> Result<AppendInfo, AppendError> {
        self.append_inner(batches, Some(leader_epoch), Origin::Client)
    }

    /// Appends batches written by a coordinator on this broker (transaction markers,
    /// transactional offset commits): as [`Log::append`], but a producer's batch may carry
    /// no sequence (Kafka's `AppendOrigin.COORDINATOR`); such batches are only fenced by
    /// the producer epoch.
    pub fn append_as_coordinator(
        &self,
        batches: Bytes,
        leader_epoch: i32,
    ) -> Result<AppendInfo, AppendError> {
        self.append_inner(batches, Some(leader_epoch), Origin::Coordinator)
    }

    /// Appends batches copied from a leader (replication): offsets, leader epochs and
    /// timestamps are kept as they are. Batches must be structurally valid (CRC included)
    /// and their offsets must not go below the log end or backwards (gaps, as compaction
    /// leaves them, are fine). No producer checks (the leader did them), but producer
    /// state is updated so this replica can take over as leader.
    pub fn append_replicated(&self, batches: Bytes) -> Result<AppendInfo, AppendError> {
        self.append_inner(batches, None, Origin::Replication)
    }

    /// `leader_epoch` is Some for a leader append (offsets assigned here), None for a
    /// replicated one.
    fn append_inner(
        &self,
        batches: Bytes,
        leader_epoch: Option<i32>,
        origin: Origin,
    ) -> Result<AppendInfo, AppendError> {
        let s = &*self.shared;
        s.check_online()?;
        let config = s.config();
        let parts = split_batches(&batches)?;
        if parts.is_empty() {
            return Err(RecordError::InvalidRecord("no record batches".into()).into());
        }
        let segment_bytes = config.segment_bytes.max(0) as usize;
        if batches.len() > segment_bytes {
            return Err(AppendError::RecordListTooLarge {
                size: batches.len(),
                max: segment_bytes,
            });
        }
        // Validation (CRC over every byte, then every record walked, decompressing if needed)
        // runs before the lock: it is the costly part.
        let max_msg = config.max_message_bytes.max(0) as usize;
        let rules = RecordRules {
            key_required: config.cleanup_policy.compact,
            decompressed_max_bytes: DECOMPRESSED_BATCH_BYTES_MAX,
        };
        let mut headers = Vec::with_capacity(parts.len());
        // Smallest and largest record timestamp of the request (CreateTime records).
        let mut record_times: Option<(i64, i64)> = None;
        for p in &parts {
            headers.push(match origin {
                Origin::Client => {
                    let h = validate_batch(p, max_msg)?;
                    let summary = validate_records(p, &h, &rules)?;
                    let times = match h.timestamp_type() {
                        TimestampKind::CreateTime => summary.timestamps,
                        // What Kafka checks for a producer's LogAppendTime batch.
                        TimestampKind::LogAppendTime => Some((h.max_timestamp, h.max_timestamp)),
                    };
                    if let Some((lo, hi)) = times {
                        record_times = Some(match record_times {
                            None => (lo, hi),
                            Some((a, b)) => (a.min(lo), b.max(hi)),
                        });
                    }
                    h
                }
                // A coordinator's own records (markers, offsets, transaction state) and copies
                // from the leader were validated by whoever made them.
                Origin::Coordinator | Origin::Replication => validate_batch_structure(p)?,
            });
        }
        // Transaction markers are decoded before the lock (one small record each): their
        // coordinator epoch is checked, and they close transactions.
        let markers: Vec<Option<EndTxnMarker>> = parts
            .iter()
            .zip(&headers)
            .map(|(p, h)| {
                (h.is_control() && h.producer_id >= 0)
                    .then(|| parse_end_txn_marker(p))
                    .flatten()
            })
            .collect();
        let leader = leader_epoch.is_some();
        let log_append = leader && config.message_timestamp_type == TimestampType::LogAppendTime;

        let mut st = s.append.lock();
        s.check_online()?;
        let now = s.clock.now_ms();
        if leader && !log_append {
            // Every record's timestamp, as Kafka checks them (the walk above found the range).
            if let Some((lo, hi)) = record_times {
                for ts in [lo, hi] {
                    if ts != record::NO_TIMESTAMP
                        && (now.saturating_sub(ts) > config.message_timestamp_before_max_ms
                            || ts.saturating_sub(now) > config.message_timestamp_after_max_ms)
                    {
                        return Err(AppendError::InvalidTimestamp { timestamp: ts, now });
                    }
                }
            }
        }

        // Assign offsets and run producer checks against a scratch copy of the touched
        // producers, so later batches of the request see earlier ones, and a failure
        // leaves the real state untouched.
        let leo = s.leo();
        let mut next = leo;
        let mut scratch = ProducerStateMap::default();
        for (h, marker) in headers.iter_mut().zip(&markers) {
            if leader {
                h.base_offset = next;
            } else if h.base_offset < next {
                return Err(RecordError::InvalidRecord(format!(
                    "replicated batch at offset {} is below the log end {next}",
                    h.base_offset
                ))
                .into());
            }
            if log_append {
                h.max_timestamp = now;
            }
            // Replicated batches were checked by the leader; state is updated after the write.
            if leader && h.producer_id >= 0 {
                if let Entry::Vacant(v) = scratch.producers.entry(h.producer_id) {
                    if let Some(e) = st.producers.producers.get(&h.producer_id) {
                        v.insert(e.clone());
                    }
                    if let Some(&first) = st.producers.ongoing.get(&h.producer_id) {
                        scratch.ongoing.insert(h.producer_id, first);
                    }
                }
                match scratch.check(h, *marker)? {
                    Check::Duplicate(b) => {
                        return Ok(AppendInfo {
                            base_offset: b.base_offset,
                            last_offset: b.last_offset,
                            log_append_time_ms: if log_append { b.max_timestamp } else { -1 },
                            log_start_offset: s.log_start(),
                            duplicate: true,
                        });
                    }
                    Check::Append => scratch.update(h),
                }
            }
            next = h.next_offset();
        }

        let base = headers.first().map_or(leo, |h| h.base_offset);
        let mut seg = s.active();
        if self.should_roll(&seg, batches.len() as u64, next - 1, &config, now) {
            seg = s.roll(&st, base)?;
        }

        // Patch copies of the headers only; the record bytes are written from the caller's
        // buffer as they are (one vectored write for the whole request).
        let mut patched: Vec<[u8; HEADER_LEN]> = Vec::with_capacity(parts.len());
        for (p, h) in parts.iter().zip(&headers) {
            let mut hdr = [0u8; HEADER_LEN];
            hdr.copy_from_slice(&p[..HEADER_LEN]);
            set_base_offset(&mut hdr, h.base_offset)?;
            if let Some(epoch) = leader_epoch {
                set_partition_leader_epoch(&mut hdr, epoch)?;
            }
            if log_append {
                set_log_append_time_split(&mut hdr, &p[HEADER_LEN..], now)?;
            }
            patched.push(hdr);
        }
        // A new epoch reaches the checkpoint before its first batch reaches the log, so every
        // epoch in the log is in the checkpoint (recovery only has to cut entries).
        s.assign_epochs(headers.iter().map(|h| {
            (
                leader_epoch.unwrap_or(h.partition_leader_epoch),
                h.base_offset,
            )
        }))?;
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(parts.len() * 2);
        for (p, hdr) in parts.iter().zip(&patched) {
            slices.push(IoSlice::new(hdr));
            slices.push(IoSlice::new(&p[HEADER_LEN..]));
        }
        if let Err(w) = seg.write_all(&mut slices) {
            // A write that failed and was cut back (disk full) leaves the files as they were:
            // the log may be opened again once writes succeed (`offline_cause`).
            return Err(if w.cut_back {
                s.go_offline_after_write(w.error)
            } else {
                s.go_offline(w.error)
            }
            .into());
        }

        let interval = config.index_interval_bytes.max(0) as u64;
        let mut pos = seg.size();
        let mut records = 0i64;
        {
            let mut meta = seg.meta_mut();
            for h in &headers {
                meta.on_batch(seg.base_offset, h, pos, interval);
                pos += h.total_size() as u64;
                records += i64::from(h.records_count);
            }
        }
        seg.publish(pos);
        let mut txn_change = false;
        for (h, marker) in headers.iter().zip(&markers) {
            st.producers.update(h);
            if let Some(m) = marker {
                if let Some(a) = st.producers.complete_txn(h, *m) {
                    s.aborted.write().push(a);
                }
            }
            txn_change |= h.is_transactional() || h.is_control();
        }
        if txn_change {
            s.publish_txn_state(&st.producers);
        }
        s.leo.store(next, Ordering::Release);
        drop(st);

        let unflushed = s.unflushed_messages.fetch_add(records, Ordering::AcqRel) + records;
        if unflushed >= config.flush_messages {
            s.flush_inner()?;
        }
        Ok(AppendInfo {
            base_offset: base,
            last_offset: next - 1,
            log_append_time_ms: if log_append { now } else { -1 },
            log_start_offset: s.log_start(),
            duplicate: false,
        })
    }

    fn should_roll(
        &self,
        seg: &Segment,
        incoming: u64,
        last_offset: i64,
        config: &TopicConfig,
        now: i64,
    ) -> bool {
        let size = seg.size();
        if size == 0 {
            return false;
        }
        let meta = seg.meta();
        let max_index_entries = (config.segment_index_bytes.max(8) / 8) as usize;
        // segment.ms counts from the segment's creation by the log's clock (Kafka uses the
        // first batch's timestamp, which producers control; the clock is not theirs).
        size + incoming > config.segment_bytes.max(0) as u64
            || now.saturating_sub(meta.created_ms)
                > config.segment_ms.saturating_sub(config.segment_jitter_ms)
            || meta.offset_index.len() >= max_index_entries
            || last_offset - seg.base_offset > i64::from(u32::MAX)
            || size + incoming > u64::from(u32::MAX)
    }

    /// Reads whole batches starting with the one containing `offset`: up to `max_bytes`
    /// (but the first batch whole if `min_one_batch`), never including a batch that
    /// reaches `upper_bound` (exclusive, e.g. the high watermark). Data comes from one
    /// segment per call.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        upper_bound: i64,
        min_one_batch: bool,
    ) -> Result<ReadResult, ReadError> {
        let s = &*self.shared;
        let leo = s.leo();
        let log_start = s.log_start();
        if offset < log_start || offset > leo {
            return Err(ReadError::OffsetOutOfRange {
                offset,
                log_start,
                log_end: leo,
            });
        }
        let empty = ReadResult {
            data: Bytes::new(),
            first_offset: -1,
            next_offset: offset,
            log_start_offset: log_start,
            log_end_offset: leo,
        };
        let bound = upper_bound.min(leo);
        if offset >= bound {
            return Ok(empty);
        }
        let mut seg = s.segment_for(offset);
        loop {
            let Some((pos, h)) = seg.find_batch(offset)? else {
                // Past this segment's end (or in a segment compaction emptied): the next one.
                // Found by base offset, not index, since retention may shift the list.
                let next = s
                    .segments
                    .read()
                    .iter()
                    .find(|g| g.base_offset > seg.base_offset)
                    .cloned();
                match next {
                    Some(n) => seg = n,
                    None => return Ok(empty),
                }
                continue;
            };
            if h.last_offset() >= bound {
                return Ok(empty);
            }
            let seg_size = seg.size();
            let end_pos = if bound >= seg.next_offset() {
                seg_size
            } else {
                seg.find_batch(bound)?.map(|(p, _)| p).unwrap_or(seg_size)
            };
            let first = h.total_size();
            let want = if first > max_bytes {
                if !min_one_batch {
                    return Ok(empty);
                }
                first
            } else {
                (max_bytes as u64).min(end_pos - pos) as usize
            };
            let mut buf = PooledBuf::take(want);
            seg.read_into(pos, &mut buf.buf[..want])?;
            let (cut, next_offset) = whole_batches(&buf.buf[..want], bound);
            if cut == 0 {
                return Ok(empty);
            }
            buf.len = cut;
            return Ok(ReadResult {
                data: Bytes::from_owner(buf),
                first_offset: h.base_offset,
                next_offset,
                log_start_offset: log_start,
                log_end_offset: leo,
            });
        }
    }

    pub fn log_start_offset(&self) -> i64 {
        self.shared.log_start()
    }

    pub fn log_end_offset(&self) -> i64 {
        self.shared.leo()
    }

    /// Everything below this offset is fsynced: the log's recovery point, for the data
    /// directory's checkpoint.
    pub fn durable_offset(&self) -> i64 {
        self.shared.durable.load(Ordering::Acquire)
    }

    pub fn size_bytes(&self) -> u64 {
        self.shared.segments.read().iter().map(|s| s.size()).sum()
    }

    pub fn segment_count(&self) -> usize {
        self.shared.segments.read().len()
    }

    /// Base offsets of the segments, oldest first.
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.shared
            .segments
            .read()
            .iter()
            .map(|s| s.base_offset)
            .collect()
    }

    /// The first record (offset, timestamp) with timestamp >= `ts` at or after the log
    /// start, as ListOffsets wants it.
    pub fn offset_for_timestamp(&self, ts: i64) -> Option<(i64, i64)> {
        let s = &*self.shared;
        let start = s.log_start();
        let segs = s.segments.read().clone();
        for seg in segs {
            if seg.meta().max_timestamp < ts || seg.next_offset() <= start {
                continue;
            }
            let Ok(pos) = seg.time_lookup_position(ts) else {
                continue;
            };
            let mut cur = seg.headers_from(pos);
            while let Ok(Some((pos, h))) = cur.next_header() {
                // A batch straddling the log start may hold the only late-enough records
                // below it: then the answer is in a later batch.
                if h.max_timestamp >= ts && h.last_offset() >= start {
                    if let Some(found) = self.first_record_at_or_after(&seg, pos, &h, start, ts) {
                        return Some(found);
                    }
                }
            }
        }
        None
    }

    /// Decodes the batch at `pos` for the first record with offset >= `min_offset` and
    /// timestamp >= `ts`.
    fn first_record_at_or_after(
        &self,
        seg: &Segment,
        pos: u64,
        h: &BatchHeader,
        min_offset: i64,
        ts: i64,
    ) -> Option<(i64, i64)> {
        let bytes = Bytes::from(seg.read_at(pos, h.total_size()).ok()?);
        let (_, records) = decode_records(&bytes, DECOMPRESS_MAX_BYTES).ok()?;
        for r in records {
            let r = r.ok()?;
            if r.offset >= min_offset && r.timestamp >= ts {
                return Some((r.offset, r.timestamp));
            }
        }
        None
    }

    /// The record with the largest timestamp (the first such record), for ListOffsets
    /// MAX_TIMESTAMP.
    /// The timestamp of the batch holding `offset`: the broker's append time under
    /// LogAppendTime, else the batch's first record's. One batch header read, found through
    /// the offset index (consumer lag in seconds); `None` outside the log or on a read error.
    pub fn batch_timestamp(&self, offset: i64) -> Option<i64> {
        let s = &*self.shared;
        if offset < s.log_start() || offset >= s.leo() {
            return None;
        }
        let (_, h) = s.segment_for(offset).find_batch(offset).ok()??;
        Some(match h.timestamp_type() {
            TimestampKind::LogAppendTime => h.max_timestamp,
            TimestampKind::CreateTime => h.base_timestamp,
        })
    }

    pub fn max_timestamp(&self) -> Option<(i64, i64)> {
        let s = &*self.shared;
        let segs = s.segments.read().clone();
        let mut best: Option<(i64, i64, Arc<Segment>)> = None;
        for seg in segs {
            let (t, o) = {
                let m = seg.meta();
                (m.max_timestamp, m.offset_of_max_timestamp)
            };
            if t >= 0 && best.as_ref().is_none_or(|b| t > b.0) {
                best = Some((t, o, seg));
            }
        }
        let (t, o, seg) = best?;
        // As Kafka 4.4 does: the first record with the largest timestamp of the segments on
        // disk, even where DeleteRecords moved the log start past it (Kafka answers from its
        // segments, which DeleteRecords does not rewrite; checked by crates/conformance).
        let found = seg
            .find_batch(o)
            .ok()
            .flatten()
            .and_then(|(pos, h)| self.first_record_at_or_after(&seg, pos, &h, i64::MIN, t));
        Some(found.unwrap_or((o, t)))
    }

    /// DeleteRecords: advances the log start to `offset` (persisted) and deletes segments
    /// wholly below it.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64, StorageError> {
        let s = &*self.shared;
        let _m = s.maintenance.lock();
        s.check_online()?;
        let leo = s.leo();
        let start = s.log_start();
        if offset > leo || offset < 0 {
            return Err(StorageError::OffsetOutOfRange {
                offset,
                log_start: start,
                log_end: leo,
            });
        }
        if offset <= start {
            return Ok(start);
        }
        write_file_atomic(&s.dir.join(LOG_START_FILE), offset.to_string().as_bytes())?;
        s.log_start.fetch_max(offset, Ordering::AcqRel);
        let start = s.log_start();
        s.update_epochs(|c| c.truncate_from_start(start))?;
        let segs_next: Vec<i64> = s
            .segments
            .read()
            .iter()
            .skip(1)
            .map(|sg| sg.base_offset)
            .collect();
        let mut k = 0;
        s.delete_oldest_segments(|_, _| {
            let ok = segs_next
                .get(k)
                .is_some_and(|&next_base| next_base <= offset);
            k += 1;
            ok
        })?;
        Ok(s.log_start())
    }

    /// Removes everything at or after `offset` (followers truncating to the leader). If
    /// `offset` falls inside a batch, that batch goes too. Below the log start, the log is
    /// emptied and restarts at `offset`. At or past the log end, only leader-epoch entries
    /// starting at the log end are removed.
    pub fn truncate_to(&self, offset: i64) -> Result<(), StorageError> {
        self.truncate_inner(offset, false)
    }

    /// Empties the log and restarts it at `offset`, which may be past the log end: a
    /// follower behind its leader's log start restarts there (Kafka's
    /// truncateFullyAndStartAt). The epoch cache is emptied too.
    pub fn truncate_fully_and_start_at(&self, offset: i64) -> Result<(), StorageError> {
        self.truncate_inner(offset, true)
    }

    fn truncate_inner(&self, offset: i64, fully: bool) -> Result<(), StorageError> {
        let s = &*self.shared;
        let _m = s.maintenance.lock();
        let mut st = s.append.lock();
        let _f = s.flush_lock.lock();
        s.check_online()?;
        if !fully && offset >= s.leo() {
            // Nothing to cut from the log, but an epoch that starts at its end (a leadership
            // that wrote nothing) goes, as in Kafka: the follower's lineage must end here.
            let leo = s.leo();
            return s.update_epochs(|c| c.truncate_from_end(leo));
        }
        let interval = s.config().index_interval_bytes.max(0) as u64;
        let now = s.clock.now_ms();
        let offset = offset.max(0);
        // Cutting the batch that straddles the log start would leave the end below the
        // start: restart the log at `offset` instead, as for a target below the start.
        let restart = fully
            || offset < s.log_start()
            || s.segment_for(offset)
                .find_batch(offset)?
                .is_some_and(|(_, h)| h.base_offset < s.log_start());
        if restart {
            // The list is never empty for readers: old files go first (open descriptors
            // keep working), then the new segment replaces the list in one step.
            let old: Vec<_> = s.segments.read().clone();
            for seg in &old {
                seg.delete_files()?;
            }
            let seg = Arc::new(Segment::create(&s.dir, offset, now)?);
            *s.segments.write() = vec![seg];
            write_file_atomic(&s.dir.join(LOG_START_FILE), offset.to_string().as_bytes())?;
            s.log_start.store(offset, Ordering::Release);
            s.leo.store(offset, Ordering::Release);
            s.update_epochs(|c| c.clear())?;
        } else {
            let doomed: Vec<_> = {
                let mut segs = s.segments.write();
                let keep = segs.partition_point(|sg| sg.base_offset <= offset).max(1);
                segs.drain(keep..).collect()
            };
            for seg in &doomed {
                seg.delete_files()?;
            }
            let active = s.active();
            let new_leo = match active.truncate_to(offset, interval) {
                Ok(n) => n,
                Err(e) => return Err(s.go_offline(e)),
            };
            s.leo.store(new_leo, Ordering::Release);
            s.update_epochs(|c| c.truncate_from_end(new_leo))?;
        }
        let leo = s.leo();
        s.durable.fetch_min(leo, Ordering::AcqRel);
        s.cleaner_checkpoint.fetch_min(leo, Ordering::AcqRel);
        s.dir_dirty.store(true, Ordering::Release);
        sync_dir(&s.dir).map_err(|e| s.go_offline(e))?;
        st.producers = s.load_producer_state()?;
        s.publish_txn_state(&st.producers);
        Ok(())
    }

    pub fn update_config(&self, config: TopicConfig) {
        *self.shared.config.write() = Arc::new(config);
    }

    pub fn config(&self) -> Arc<TopicConfig> {
        self.shared.config()
    }

    /// Deletes old segments by `retention.ms` (a segment's newest timestamp) and
    /// `retention.bytes` when the policy includes delete, and segments wholly below the
    /// log start in any case. An expired active segment is rolled first so it can go.
    pub fn run_retention(&self) -> Result<RetentionStats, StorageError> {
        let s = &*self.shared;
        let _m = s.maintenance.lock();
        s.check_online()?;
        let config = s.config();
        let now = s.clock.now_ms();
        let start = s.log_start();
        let delete = config.cleanup_policy.delete;
        let expired = |seg: &Segment| {
            delete && config.retention_ms >= 0 && {
                // An inactive segment left empty by compaction has no timestamp; it goes.
                let t = seg.meta().max_timestamp;
                t < 0 || now.saturating_sub(t) > config.retention_ms
            }
        };
        {
            let active = s.active();
            if active.size() > 0 && expired(&active) {
                let st = s.append.lock();
                s.roll(&st, s.leo())?;
            }
        }
        let next_bases: Vec<i64> = s
            .segments
            .read()
            .iter()
            .skip(1)
            .map(|sg| sg.base_offset)
            .collect();
        let mut k = 0;
        let mut by_time = true;
        let stats = s.delete_oldest_segments(|seg, total| {
            let below_start = next_bases.get(k).is_some_and(|&nb| nb <= start);
            k += 1;
            by_time = by_time && expired(seg);
            let by_size = delete
                && config.retention_bytes >= 0
                && total.saturating_sub(seg.size()) >= config.retention_bytes as u64;
            below_start || by_time || by_size
        })?;
        self.expire_producers(PRODUCER_ID_EXPIRATION_MS);
        {
            let _st = s.append.lock();
            s.aborted.write().prune_below(s.log_start());
        }
        Ok(stats)
    }

    /// Forgets idempotent producers whose newest batch is older than `expiration_ms`
    /// (`run_retention` does this with [`PRODUCER_ID_EXPIRATION_MS`]); returns how many.
    pub fn expire_producers(&self, expiration_ms: i64) -> usize {
        let now = self.shared.clock.now_ms();
        self.shared
            .append
            .lock()
            .producers
            .remove_expired(now, expiration_ms)
    }

    /// Runs one compaction pass if the policy includes compact and enough is dirty.
    pub fn run_compaction(&self) -> Result<CompactionStats, StorageError> {
        crate::cleaner::compact(&self.shared)
    }

    /// fsyncs everything appended so far.
    pub fn flush(&self) -> Result<(), StorageError> {
        self.shared.flush_inner()
    }

    /// Applies `flush.ms`: flushes if that long has passed since the last flush and
    /// there is unflushed data.
    pub fn maybe_flush(&self) -> Result<(), StorageError> {
        let s = &*self.shared;
        let config = s.config();
        let now = s.clock.now_ms();
        let last = s.last_flush_ms.load(Ordering::Acquire);
        if s.leo() > s.durable.load(Ordering::Acquire)
            && now.saturating_sub(last) >= config.flush_ms
        {
            s.flush_inner()?;
        }
        Ok(())
    }

    /// Group commit: resolves once every offset <= `offset` is fsynced. `offset` must be
    /// below the log end. Concurrent callers share fsyncs (see the module docs). Cancel-safe:
    /// dropping the future only stops waiting.
    pub async fn wait_durable(&self, offset: i64) -> Result<(), StorageError> {
        let s = &*self.shared;
        let mut rx = s.durable_tx.subscribe();
        loop {
            s.check_online()?;
            if s.durable.load(Ordering::Acquire) > offset {
                return Ok(());
            }
            let leo = s.leo();
            if offset >= leo {
                return Err(StorageError::OffsetOutOfRange {
                    offset,
                    log_start: s.log_start(),
                    log_end: leo,
                });
            }
            {
                let mut r = s.flush_req.lock();
                r.requested = r.requested.max(offset + 1);
            }
            s.flusher.request(&self.shared);
            if rx.changed().await.is_err() {
                return Err(StorageError::Offline(s.dir.clone()));
            }
        }
    }

    /// The first offset of the oldest open transaction, if any: the last stable offset is
    /// the smaller of this and the high watermark.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        let v = self.shared.first_unstable.load(Ordering::Acquire);
        (v != i64::MAX).then_some(v)
    }

    /// Aborted transactions overlapping [`from`, `upper`) (what a read_committed fetch from
    /// `from` bounded by `upper` must report), oldest first.
    pub fn aborted_transactions(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        self.shared.aborted.read().overlapping(from, upper)
    }

    /// Appends a transaction marker (COMMIT or ABORT control batch) for `producer_id`, as
    /// the partition leader does for WriteTxnMarkers. Fenced by an older producer epoch
    /// (INVALID_PRODUCER_EPOCH) or an older coordinator epoch (TRANSACTION_COORDINATOR_FENCED);
    /// closes the producer's open transaction here, if any.
    pub fn append_txn_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        marker: EndTxnMarker,
        leader_epoch: i32,
    ) -> Result<AppendInfo, AppendError> {
        let batch = record::build_end_txn_marker(
            producer_id,
            producer_epoch,
            marker,
            self.shared.clock.now_ms(),
        )?;
        self.append_as_coordinator(batch, leader_epoch)
    }

    /// Whether `producer_id` has an open transaction on this partition (its first
    /// transactional batch is here and no marker has closed it yet).
    pub fn has_ongoing_transaction(&self, producer_id: i64) -> bool {
        self.shared.append.lock().producers.has_ongoing(producer_id)
    }

    /// Whether the producer has an open transaction here written with `producer_epoch`. A
    /// producer that bumped its epoch since (transaction version 2 bumps it per transaction)
    /// starts a new transaction, which its coordinator has to confirm, even while the marker
    /// of its previous one is still on the way.
    pub fn has_ongoing_transaction_at(&self, producer_id: i64, producer_epoch: i16) -> bool {
        let g = self.shared.append.lock();
        g.producers.has_ongoing(producer_id)
            && g.producers
                .producers
                .get(&producer_id)
                .is_some_and(|e| e.epoch == producer_epoch)
    }

    /// The producers this partition knows (DescribeProducers), ordered by id.
    pub fn producers(&self) -> Vec<ProducerSnapshot> {
        self.shared.append.lock().producers.snapshots()
    }

    /// The epoch and last sequence of a producer, if the log has state for it.
    pub fn producer_state(&self, producer_id: i64) -> Option<(i16, i32)> {
        self.shared.append.lock().producers.get(producer_id)
    }

    /// The flusher pool does nothing more for this log (queued requests find `shutdown`).
    fn stop_flusher(&self) {
        self.shared.flush_req.lock().shutdown = true;
    }

    /// Flushes, writes indexes and a producer snapshot, then the clean-shutdown marker so
    /// the next open skips recovery. The log accepts nothing afterwards.
    pub fn close(&self) -> Result<(), StorageError> {
        let s = &*self.shared;
        let _m = s.maintenance.lock();
        let st = s.append.lock();
        if s.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        s.flush_inner()?;
        s.closed.store(true, Ordering::Release);
        let active = s.active();
        active.write_indexes()?;
        s.write_txn_index(&active)?;
        s.write_snapshot(&st.producers, s.leo())?;
        write_file_atomic(&s.dir.join(CLEAN_SHUTDOWN_FILE), b"")?;
        sync_dir(&s.dir)?;
        drop(st);
        self.stop_flusher();
        s.durable_tx.send_modify(|_| {});
        Ok(())
    }

    /// Removes the partition directory (topic deletion). The log is unusable afterwards.
    pub fn delete_dir(&self) -> Result<(), StorageError> {
        let s = &*self.shared;
        let _m = s.maintenance.lock();
        let _st = s.append.lock();
        s.closed.store(true, Ordering::Release);
        self.stop_flusher();
        s.durable_tx.send_modify(|_| {});
        fs::remove_dir_all(&s.dir).map_err(|e| StorageError::io("remove log dir", &s.dir, e))
    }

    /// Test seam: the next segment fsync fails as if the disk had reported an error.
    #[doc(hidden)]
    pub fn inject_fsync_failure(&self) {
        self.shared.fail_next_sync.store(true, Ordering::Release);
    }

    /// Whether a failed write or fsync took this log offline.
    pub fn is_offline(&self) -> bool {
        self.shared.offline()
    }

    /// Why the log is offline, if it is. Only [`OfflineCause::Write`] may be brought back by
    /// opening the log again from its files.
    pub fn offline_cause(&self) -> Option<OfflineCause> {
        let s = &*self.shared;
        s.offline().then(|| {
            if s.offline_reopenable.load(Ordering::Acquire) {
                OfflineCause::Write
            } else {
                OfflineCause::Other
            }
        })
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        self.stop_flusher();
    }
}

/// Read buffers recycled across reads of all logs. A fresh multi-megabyte allocation per
/// fetch costs page faults (and zeroing) comparable to the copy itself; a recycled buffer
/// costs neither. Only bytes just read are ever exposed, so reuse leaks nothing.
static READ_POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
const READ_POOL_BUFS: usize = 32;
const READ_POOL_BUF_MAX_BYTES: usize = 4 << 20;

/// A read buffer that returns to `READ_POOL` when the last `Bytes` over it is dropped.
struct PooledBuf {
    buf: Vec<u8>,
    len: usize,
}

impl PooledBuf {
    fn take(want: usize) -> PooledBuf {
        let mut buf = {
            let mut pool = READ_POOL.lock();
            match pool.iter().position(|b| b.capacity() >= want) {
                Some(i) => pool.swap_remove(i),
                None => Vec::new(),
            }
        };
        buf.resize(want, 0);
        PooledBuf { buf, len: 0 }
    }
}

impl AsRef<[u8]> for PooledBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        if buf.capacity() <= READ_POOL_BUF_MAX_BYTES {
            let mut pool = READ_POOL.lock();
            if pool.len() < READ_POOL_BUFS {
                pool.push(buf);
            }
        }
    }
}

/// Length of the longest prefix of `buf` made of whole batches that end below `bound`, and
/// the offset after the last of them. Checking the bound here, on the bytes actually read,
/// keeps a read exact even when an append lands between computing positions and reading.
pub(crate) fn whole_batches(buf: &[u8], bound: i64) -> (usize, i64) {
    let mut cut = 0usize;
    let mut next = -1;
    while buf.len() - cut >= HEADER_LEN {
        let l = &buf[cut + LENGTH_OFFSET..cut + LENGTH_OFFSET + 4];
        let len = i32::from_be_bytes([l[0], l[1], l[2], l[3]]);
        if len < (HEADER_LEN - LOG_OVERHEAD) as i32 {
            break;
        }
        let total = len as usize + LOG_OVERHEAD;
        if total > buf.len() - cut {
            break;
        }
        match BatchHeader::parse(&buf[cut..cut + HEADER_LEN]) {
            Ok(h) if h.last_offset() < bound => next = h.next_offset(),
            _ => break,
        }
        cut += total;
    }
    (cut, next)
}
