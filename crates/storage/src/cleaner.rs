//! Log compaction: keep the newest record per key in the cleanable part of the log.
//!
//! The cleanable part is the inactive segments whose newest record is older than
//! `min.compaction.lag.ms`; a pass runs when the bytes past the cleaner checkpoint make up
//! at least `min.cleanable.dirty.ratio` of it. Pass 1 maps each key to its newest offset;
//! pass 2 rewrites each segment to `<base>.log.cleaned` keeping a record only if it is the
//! newest for its key (tombstones also go once their batch is older than
//! `delete.retention.ms`), with offsets and order preserved. Appends are never blocked:
//! cleaning reads immutable segments, and only the final swap of each segment takes the
//! maintenance lock and, briefly, the segment-list write lock. Keyless records are
//! dropped (Kafka rejects them on compacted topics), as are records of aborted
//! transactions; nothing at or past the first open transaction is cleaned.
//! A batch emptied of records (or an aborted one) is kept (empty) if it is its producer's
//! newest batch, so idempotent producer state survives.
//!
//! Transaction markers go as in Kafka's cleaner (`CleanedTransactionMetadata`): a COMMIT or
//! ABORT marker is removed only once no batch with records of its transaction is left
//! before it (a pass that meets such a batch keeps the marker; an aborted batch is removed
//! in that pass, so its marker can go in a later one), and, like a tombstone, only once it
//! is older than `delete.retention.ms` (consumers that read the data must get to see the
//! marker). A removed ABORT marker's entry leaves the aborted-transaction index (memory and
//! the segment's `.txnindex`): none of its records remains for a read_committed fetch to
//! skip.
//!
//! A batch the cleaner cannot decode (corrupt records, or more than the decompression bound;
//! produce refuses both now, but older logs or replicas may hold them) is kept verbatim and
//! counted in `CompactionStats::batches_skipped`, with a warning: it never stalls compaction
//! of the rest of the partition.
//!
//! Crash safety: the old index files are removed before the cleaned file is renamed over
//! the segment, so a crash leaves either the old log with its index, or a log without index
//! files (rebuilt on open).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{BufWriter, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use record::{decode_records, parse_end_txn_marker, BatchBuilder, NewRecord};

use crate::error::StorageError;
use crate::index::write_file_atomic;
use crate::log::{
    sync_dir, CompactionStats, Shared, CLEANER_CHECKPOINT_FILE, DECOMPRESS_MAX_BYTES,
};
use crate::segment::{file_name, Segment};

/// Memory budget of the key map of one pass (Kafka's `log.cleaner.dedupe.buffer.size`).
const KEY_MAP_MAX_BYTES: usize = 128 << 20;
/// Rough per-key cost of a map entry beyond the key bytes (hash slot, Vec header, offset).
const KEY_ENTRY_OVERHEAD_BYTES: usize = 48;

pub(crate) fn compact(s: &Shared) -> Result<CompactionStats, StorageError> {
    let config = s.config();
    let mut stats = CompactionStats::default();
    if !config.cleanup_policy.compact {
        return Ok(stats);
    }
    s.check_online()?;
    let now = s.clock.now_ms();
    let (producers, first_unstable, aborted_txns) = {
        let st = s.append.lock();
        (
            st.producers.clone(),
            st.producers.first_unstable_offset(),
            s.aborted.read().all().to_vec(),
        )
    };
    // Aborted transactions by producer, to drop their records (Kafka's cleaner does too;
    // otherwise an aborted write could shadow the committed value of its key).
    let mut aborted: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
    for a in &aborted_txns {
        aborted
            .entry(a.producer_id)
            .or_default()
            .push((a.first_offset, a.last_offset));
    }
    let is_aborted = |h: &record::BatchHeader| {
        h.is_transactional()
            && !h.is_control()
            && aborted.get(&h.producer_id).is_some_and(|ranges| {
                ranges
                    .iter()
                    .any(|&(f, l)| f <= h.base_offset && h.base_offset <= l)
            })
    };
    let segs = s.segments.read().clone();
    let mut cleanable: Vec<Arc<Segment>> = Vec::new();
    for seg in &segs[..segs.len() - 1] {
        // Never clean at or past the first open transaction: its outcome is unknown.
        if first_unstable.is_some_and(|f| seg.next_offset() > f) {
            break;
        }
        let t = seg.meta().max_timestamp;
        if config.min_compaction_lag_ms > 0 && now.saturating_sub(t) < config.min_compaction_lag_ms
        {
            break;
        }
        cleanable.push(Arc::clone(seg));
    }
    let checkpoint = s.cleaner_checkpoint.load(Ordering::Acquire);
    let total: u64 = cleanable.iter().map(|g| g.size()).sum();
    let dirty: u64 = cleanable
        .iter()
        .filter(|g| g.next_offset() > checkpoint)
        .map(|g| g.size())
        .sum();
    if dirty == 0 || (dirty as f64) < config.min_cleanable_dirty_ratio * total as f64 {
        return Ok(stats);
    }
    let Some(end_offset) = cleanable.last().map(|g| g.next_offset()) else {
        return Ok(stats);
    };
    stats.ran = true;

    // Pass 1: newest offset of every key in the cleanable range. The map is bounded (like
    // Kafka's dedupe buffer): once full, this pass cleans only the segments mapped so far.
    let mut latest: HashMap<Vec<u8>, i64> = HashMap::new();
    // (segment base, position) of batches that did not decode: kept verbatim and counted,
    // so one bad batch never stalls compaction of the rest of the partition.
    let mut unreadable: HashSet<(i64, u64)> = HashSet::new();
    let mut map_bytes = 0usize;
    let mut mapped = 0usize;
    for seg in &cleanable {
        if mapped > 0 && map_bytes >= KEY_MAP_MAX_BYTES {
            break;
        }
        mapped += 1;
        seg.for_each_batch(|pos, h, bytes| {
            if h.is_control() || is_aborted(h) {
                return Ok(());
            }
            let bytes = Bytes::copy_from_slice(bytes);
            // A batch that does not decode is left as it is (pass 2 keeps it verbatim):
            // keys mapped from its readable prefix only make older copies go, never newer.
            let records = match decode_records(&bytes, DECOMPRESS_MAX_BYTES) {
                Ok((_, records)) => records,
                Err(e) => {
                    unreadable.insert((seg.base_offset, pos));
                    tracing::warn!(path = %seg.log_path().display(), position = pos, error = %e,
                        "cleaner cannot read a batch; keeping it as it is");
                    return Ok(());
                }
            };
            for r in records {
                let r = match r {
                    Ok(r) => r,
                    Err(e) => {
                        unreadable.insert((seg.base_offset, pos));
                        tracing::warn!(path = %seg.log_path().display(), position = pos, error = %e,
                            "cleaner cannot read a batch; keeping it as it is");
                        return Ok(());
                    }
                };
                if let Some(k) = r.key {
                    match latest.get_mut(k.as_ref()) {
                        Some(o) => *o = (*o).max(r.offset),
                        None => {
                            map_bytes += k.len() + KEY_ENTRY_OVERHEAD_BYTES;
                            latest.insert(k.to_vec(), r.offset);
                        }
                    }
                }
            }
            Ok(())
        })?;
    }

    cleanable.truncate(mapped);
    let end_offset = cleanable.last().map_or(end_offset, |g| g.next_offset());

    // Pass 2: rewrite segment by segment.
    let interval = config.index_interval_bytes.max(0) as u64;
    let tombstone_horizon = now.saturating_sub(config.delete_retention_ms);
    // Producers with a transactional batch (with records) seen since their last marker: the
    // marker that ends that transaction stays (Kafka's ongoing committed/aborted txns).
    let mut txn_data_seen: HashSet<i64> = HashSet::new();
    for seg in &cleanable {
        // Offsets of the ABORT markers removed from this segment.
        let mut dropped_aborts: Vec<i64> = Vec::new();
        let start = s.log_start();
        let size_at_start = seg.size();
        let cleaned_path = s
            .dir
            .join(format!("{}.cleaned", file_name(seg.base_offset, "log")));
        let file = fs::File::create(&cleaned_path)
            .map_err(|e| StorageError::io("create", &cleaned_path, e))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let mut changed = false;
        let mut removed = 0u64;
        let mut skipped = 0u64;
        seg.for_each_batch(|pos, h, bytes| {
            let write = |out: &mut BufWriter<fs::File>, b: &[u8]| {
                out.write_all(b)
                    .map_err(|e| StorageError::io("write", &cleaned_path, e))
            };
            if h.last_offset() < start {
                changed = true;
                removed += h.records_count.max(0) as u64;
                return Ok(());
            }
            if h.is_control() {
                let data_left = txn_data_seen.remove(&h.producer_id);
                let marker = parse_end_txn_marker(bytes);
                if let Some(m) =
                    marker.filter(|_| !data_left && h.max_timestamp < tombstone_horizon)
                {
                    changed = true;
                    removed += h.records_count.max(0) as u64;
                    if !m.commit {
                        dropped_aborts.push(h.last_offset());
                    }
                    return Ok(());
                }
                return write(&mut out, bytes);
            }
            if h.is_transactional() && h.records_count > 0 {
                txn_data_seen.insert(h.producer_id);
            }
            if is_aborted(h) {
                changed = true;
                removed += h.records_count.max(0) as u64;
                if h.records_count > 0 && producers.is_last_batch(h.producer_id, h.last_offset()) {
                    return write(&mut out, &rebuild(seg, h, &[])?);
                }
                return Ok(());
            }
            if unreadable.contains(&(seg.base_offset, pos)) {
                skipped += 1;
                return write(&mut out, bytes);
            }
            let owned = Bytes::copy_from_slice(bytes);
            let Ok((_, records)) = decode_records(&owned, DECOMPRESS_MAX_BYTES) else {
                skipped += 1;
                return write(&mut out, bytes);
            };
            let mut kept = Vec::new();
            let mut count = 0usize;
            for r in records {
                let Ok(r) = r else {
                    skipped += 1;
                    return write(&mut out, bytes);
                };
                count += 1;
                let newest = r
                    .key
                    .as_ref()
                    .is_some_and(|k| latest.get(k.as_ref()) == Some(&r.offset));
                let expired_tombstone = r.value.is_none() && h.max_timestamp < tombstone_horizon;
                if newest && !expired_tombstone && r.offset >= start {
                    kept.push(r);
                }
            }
            if kept.len() == count {
                return write(&mut out, bytes);
            }
            changed = true;
            removed += (count - kept.len()) as u64;
            if kept.is_empty()
                && !(h.has_producer_id() && producers.is_last_batch(h.producer_id, h.last_offset()))
            {
                return Ok(());
            }
            write(&mut out, &rebuild(seg, h, &kept)?)
        })?;
        let file = out
            .into_inner()
            .map_err(|e| StorageError::io("write", &cleaned_path, e.into_error()))?;
        stats.batches_skipped += skipped;
        if !changed {
            drop(file);
            let _ = fs::remove_file(&cleaned_path);
            continue;
        }
        file.sync_all()
            .map_err(|e| StorageError::io("fsync", &cleaned_path, e))?;
        drop(file);

        let _m = s.maintenance.lock();
        let still_there = {
            let list = s.segments.read();
            let pos = list.iter().position(|g| Arc::ptr_eq(g, seg));
            pos.is_some_and(|p| p + 1 < list.len())
        };
        if !still_there || seg.size() != size_at_start {
            // Retention removed it, or truncation cut it (possibly making it active) while
            // it was being cleaned: the cleaned copy is stale.
            let _ = fs::remove_file(&cleaned_path);
            continue;
        }
        seg.remove_index_files();
        sync_dir(&s.dir)?;
        let log_path = seg.log_path();
        fs::rename(&cleaned_path, &log_path)
            .map_err(|e| StorageError::io("rename", &cleaned_path, e))?;
        sync_dir(&s.dir)?;
        let (new_seg, damage) = Segment::open(&s.dir, seg.base_offset, false, interval, now)?;
        if let Some(d) = damage {
            return Err(corrupt(
                seg,
                format!(
                    "the cleaned segment has invalid bytes from {}",
                    d.valid_bytes
                ),
            ));
        }
        new_seg.write_indexes()?;
        if !dropped_aborts.is_empty() {
            {
                let mut aborted = s.aborted.write();
                for &offset in &dropped_aborts {
                    aborted.remove(offset);
                }
            }
            s.write_txn_index(&new_seg)?;
        }
        let new_seg = Arc::new(new_seg);
        {
            let mut list = s.segments.write();
            if let Some(slot) = list.iter_mut().find(|g| Arc::ptr_eq(g, seg)) {
                *slot = Arc::clone(&new_seg);
            }
        }
        stats.segments_cleaned += 1;
        stats.bytes_before += seg.size();
        stats.bytes_after += new_seg.size();
        stats.records_removed += removed;
    }
    s.cleaner_checkpoint.fetch_max(end_offset, Ordering::AcqRel);
    write_file_atomic(
        &s.dir.join(CLEANER_CHECKPOINT_FILE),
        end_offset.to_string().as_bytes(),
    )?;
    Ok(stats)
}

/// A batch like `h` (same offsets, producer, attributes) holding only `kept` of its records.
fn rebuild(
    seg: &Segment,
    h: &record::BatchHeader,
    kept: &[record::Record],
) -> Result<Bytes, StorageError> {
    let mut b = BatchBuilder::new(h.compression().map_err(|e| corrupt(seg, e.to_string()))?)
        .base_offset(h.base_offset)
        .partition_leader_epoch(h.partition_leader_epoch)
        .producer(h.producer_id, h.producer_epoch, h.base_sequence)
        .transactional(h.is_transactional())
        .timestamp_type(h.timestamp_type())
        .base_timestamp(h.base_timestamp)
        .last_offset_delta(h.last_offset_delta);
    for r in kept {
        b.push_at(
            r.offset_delta,
            &NewRecord {
                key: r.key.clone(),
                value: r.value.clone(),
                headers: r.headers.clone(),
                timestamp: r.timestamp,
            },
        );
    }
    b.build().map_err(|e| corrupt(seg, e.to_string()))
}

fn corrupt(seg: &Segment, reason: String) -> StorageError {
    StorageError::Corrupt {
        path: seg.log_path(),
        reason,
    }
}
