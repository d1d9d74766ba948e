//! Recovery at open: which bytes may be cut, and Kafka's recovery-point checkpoint.
//!
//! The recovery point of a log is the offset below which everything is known to be fsynced.
//! Kafka keeps it per data directory in `recovery-point-offset-checkpoint` (written
//! periodically and at shutdown) and Moldau does the same, in Kafka's format. At open:
//! - bytes at or after the recovery point that do not form valid batches are a torn tail
//!   left by a crash: the active segment is cut there (nothing acknowledged as durable is
//!   lost);
//! - invalid bytes below the recovery point, in a sealed segment (every rolled segment was
//!   fsynced before the next one was created, so the last segment's base offset is a
//!   recovery point even without a checkpoint), after a clean shutdown, or segments that
//!   overlap are damage: the open fails with a loud error naming the file, the position and
//!   how to recover, and *nothing is truncated or deleted*; the broker keeps the partition
//!   offline (KAFKA_STORAGE_ERROR) and serves the others.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::error::StorageError;
use crate::index::{read_file_opt, write_file_atomic};
use crate::segment::{file_name, Segment};

/// Kafka's file name for the recovery points of a data directory.
pub const RECOVERY_POINT_FILE: &str = "recovery-point-offset-checkpoint";
/// Kafka's file name for the high watermarks of a data directory's partitions (written by the
/// broker; the HW a replica starts from after a restart).
pub const HIGH_WATERMARK_FILE: &str = "replication-offset-checkpoint";
/// Kafka's checkpoint format version.
const CHECKPOINT_VERSION: &str = "0";
/// A checkpoint larger than this is not one (a million partitions take ~40 MiB).
const CHECKPOINT_BYTES_MAX: u64 = 256 << 20;

/// Reads `<data_dir>/recovery-point-offset-checkpoint`: partition directory name
/// (`<topic>-<partition>`) -> recovery point. A missing file is empty; an unreadable one is
/// reported and treated as empty, which is safe: recovery then trusts only what the segment
/// layout proves durable (every segment but the last).
pub fn read_recovery_points(data_dir: &Path) -> Result<BTreeMap<String, i64>, StorageError> {
    read_offset_checkpoint(data_dir, RECOVERY_POINT_FILE)
}

/// Reads one of Kafka's per-directory offset checkpoints (`file` in `data_dir`, e.g.
/// [`RECOVERY_POINT_FILE`] or [`HIGH_WATERMARK_FILE`]): partition directory name -> offset.
/// A missing file is empty; a malformed one is reported and read as empty.
pub fn read_offset_checkpoint(
    data_dir: &Path,
    file: &str,
) -> Result<BTreeMap<String, i64>, StorageError> {
    let path = data_dir.join(file);
    let Some(bytes) = read_file_opt(&path, CHECKPOINT_BYTES_MAX)? else {
        return Ok(BTreeMap::new());
    };
    match parse_checkpoint(&bytes) {
        Some(points) => Ok(points),
        None => {
            tracing::warn!(path = %path.display(), "malformed offset checkpoint; ignoring it");
            Ok(BTreeMap::new())
        }
    }
}

fn parse_checkpoint(bytes: &[u8]) -> Option<BTreeMap<String, i64>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    if lines.next()?.trim() != CHECKPOINT_VERSION {
        return None;
    }
    let count: usize = lines.next()?.trim().parse().ok()?;
    let mut out = BTreeMap::new();
    for line in lines.by_ref().take(count) {
        let mut f = line.split(' ');
        let (topic, partition, offset) = (f.next()?, f.next()?, f.next()?);
        let partition: u32 = partition.parse().ok()?;
        let offset: i64 = offset.parse().ok()?;
        if topic.is_empty() || f.next().is_some() {
            return None;
        }
        out.insert(format!("{topic}-{partition}"), offset);
    }
    (out.len() == count && lines.all(|l| l.trim().is_empty())).then_some(out)
}

/// Writes the recovery-point checkpoint (see [`write_offset_checkpoint`]).
pub fn write_recovery_points(
    data_dir: &Path,
    points: &BTreeMap<String, i64>,
) -> Result<(), StorageError> {
    write_offset_checkpoint(data_dir, RECOVERY_POINT_FILE, points)
}

/// Writes an offset checkpoint atomically (temp file, fsync, rename, directory fsync), in
/// Kafka's format: version, count, then `topic partition offset` per line. Keys are
/// partition directory names; a name that is not `<topic>-<partition>` is skipped.
pub fn write_offset_checkpoint(
    data_dir: &Path,
    file: &str,
    points: &BTreeMap<String, i64>,
) -> Result<(), StorageError> {
    let mut lines = Vec::with_capacity(points.len());
    for (dir, offset) in points {
        if let Some((topic, partition)) = dir.rsplit_once('-') {
            if !topic.is_empty() && partition.parse::<u32>().is_ok() {
                lines.push(format!("{topic} {partition} {offset}\n"));
            }
        }
    }
    let mut text = format!("{CHECKPOINT_VERSION}\n{}\n", lines.len());
    for l in lines {
        text.push_str(&l);
    }
    write_file_atomic(&data_dir.join(file), text.as_bytes())
}

fn damaged(dir: &Path, base: i64, reason: String) -> StorageError {
    let path = dir.join(file_name(base, "log"));
    tracing::error!(path = %path.display(), %reason,
        "partition log is damaged below its recovery point; keeping it offline, nothing was deleted");
    StorageError::Corrupt {
        path,
        reason: format!(
            "{reason}. Nothing was truncated or deleted. To recover: restore the file from a \
             replica or backup; or, to accept losing the records from the damaged batch on, \
             stop the broker, truncate the file at that position and remove the later segments \
             of this partition"
        ),
    }
}

/// Loads the segments with base offsets `bases` (sorted) by the rules of the module docs.
/// `clean`: the log was closed cleanly (everything flushed). `recovery_point`: from the
/// checkpoint, if any.
pub(crate) fn load_segments(
    dir: &Path,
    bases: &[i64],
    clean: bool,
    recovery_point: Option<i64>,
    index_interval: u64,
    now_ms: i64,
) -> Result<Vec<Arc<Segment>>, StorageError> {
    let mut segments: Vec<Arc<Segment>> = Vec::with_capacity(bases.len());
    for (i, &base) in bases.iter().enumerate() {
        let last = i + 1 == bases.len();
        if let Some(prev) = segments.last() {
            if base < prev.next_offset() {
                return Err(damaged(
                    dir,
                    base,
                    format!(
                        "segment starting at offset {base} overlaps its predecessor, which ends at {}",
                        prev.next_offset()
                    ),
                ));
            }
        }
        let (seg, damage) = Segment::open(dir, base, clean || !last, index_interval, now_ms)?;
        if let Some(d) = damage {
            // Every segment but the last was fsynced when it was rolled.
            let durable_from = recovery_point.unwrap_or(base).max(base);
            let where_ = format!(
                "invalid batch at byte {} of {} (offset {})",
                d.valid_bytes, d.file_bytes, d.next_offset
            );
            if !last {
                return Err(damaged(dir, base, format!("{where_} in a sealed segment")));
            }
            if clean {
                return Err(damaged(
                    dir,
                    base,
                    format!("{where_} although the log was shut down cleanly"),
                ));
            }
            if d.next_offset < durable_from {
                return Err(damaged(
                    dir,
                    base,
                    format!("{where_}, below the recovery point {durable_from}"),
                ));
            }
            seg.cut_damage(&d)?;
        }
        segments.push(Arc::new(seg));
    }
    if let (Some(rp), Some(seg)) = (recovery_point, segments.last()) {
        let end = seg.next_offset();
        if end < rp {
            // Nothing invalid, only less than the checkpoint promised: a truncation (follower)
            // that crashed before the next checkpoint, or lost data. Loud, but nothing to cut.
            tracing::error!(dir = %dir.display(), log_end = end, recovery_point = rp,
                "log ends below its recovery point");
        }
    }
    Ok(segments)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_round_trips_in_kafkas_format() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_recovery_points(dir.path()).unwrap().is_empty());
        let mut points = BTreeMap::new();
        points.insert("orders-0".to_string(), 42);
        points.insert("my-topic-12".to_string(), 7);
        points.insert("not a partition".to_string(), 1);
        write_recovery_points(dir.path(), &points).unwrap();
        let text = std::fs::read_to_string(dir.path().join(RECOVERY_POINT_FILE)).unwrap();
        assert_eq!(text, "0\n2\nmy-topic 12 7\norders 0 42\n");
        points.remove("not a partition");
        assert_eq!(read_recovery_points(dir.path()).unwrap(), points);
        for bad in [
            "1\n0\n",
            "0\n2\norders 0 42\n",
            "0\n1\norders x 1\n",
            "garbage",
        ] {
            std::fs::write(dir.path().join(RECOVERY_POINT_FILE), bad).unwrap();
            assert!(
                read_recovery_points(dir.path()).unwrap().is_empty(),
                "{bad:?}"
            );
        }
    }
}
