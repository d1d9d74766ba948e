//! The metadata log on disk, in `<data>/__cluster_metadata-0/`:
//!
//! - `raft-<first index, 20 digits>.log`: segments of entry frames
//!   `[u32 length][u32 crc32c][entry]` (the entry encoded by [`crate::codec::put_entry`]);
//!   a new segment starts when the active one passes its size limit or the log was cut by a
//!   snapshot.
//! - `<index, 20 digits>-<term, 20 digits>.checkpoint`: the latest snapshot,
//!   `["MOLDSNAP"][u32 crc32c][snapshot]`, written to a temporary file, synced and renamed.
//! - `raft-state`: the hard state (term, vote, commit) in two checksummed slots written
//!   alternately, so a torn write always leaves the previous one readable.
//!
//! Issue 8's rules hold here as in the legacy log: a bad frame is a *torn tail* (and cut) only
//! in the last segment with no valid frame after it; anything else refuses to open, naming the
//! file, the byte offset and how to recover. Nothing here deletes what it cannot prove is
//! covered by a snapshot.

use crate::codec::{put_entry, put_snapshot, Reader};
use crate::disk::{Disk, DiskError, Persisted};
use bytes::{Bytes, BytesMut};
use raft::eraftpb::{Entry, HardState, Snapshot};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const SEGMENT_PREFIX: &str = "raft-";
const SEGMENT_SUFFIX: &str = ".log";
const SNAPSHOT_SUFFIX: &str = ".checkpoint";
const STATE_FILE: &str = "raft-state";
const VOTERS_FILE: &str = "quorum-voters";
const SNAPSHOT_MAGIC: &[u8; 8] = b"MOLDSNAP";
const FRAME_HEADER: usize = 8;
/// Largest entry frame read back; anything claiming more is corruption.
const FRAME_BYTES_MAX: usize = 256 << 20;
/// Hard-state slot: seq, term, vote, commit (u64 each), crc (u32), 4 bytes padding.
const SLOT_BYTES: u64 = 40;

struct Segment {
    first_index: u64,
    path: PathBuf,
    file: File,
    /// `ends[i]`: byte end of entry `first_index + i`.
    ends: Vec<u64>,
}

impl Segment {
    fn last_index(&self) -> Option<u64> {
        (!self.ends.is_empty()).then(|| self.first_index + self.ends.len() as u64 - 1)
    }

    fn len(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }
}

/// The on-disk [`Disk`] (see the module docs).
pub struct FileDisk {
    dir: PathBuf,
    segments: Vec<Segment>,
    state: Option<File>,
    state_seq: u64,
    segment_bytes_max: u64,
    /// What `sync` must flush.
    dirty_segment: bool,
    dirty_state: bool,
    dirty_dir: bool,
    /// Whether this process has made (or found) the directory: it is made once, so a
    /// directory that disappears later fails the next write instead of being silently
    /// recreated empty (without the hard state and log the node has acknowledged from).
    dir_made: bool,
}

impl std::fmt::Debug for FileDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileDisk").field("dir", &self.dir).finish()
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DiskError + '_ {
    move |source| DiskError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> DiskError {
    DiskError::Corrupt {
        path: path.display().to_string(),
        offset,
        reason: reason.into(),
        recovery: format!(
            "To recover: restore {} from a backup. A voter must not come back with less than \
             it acknowledged (Raft's safety rests on it): started with an emptied metadata \
             directory, it is refused as long as the leader knows what it acknowledged",
            path.display(),
        ),
    }
}

fn segment_name(first_index: u64) -> String {
    format!("{SEGMENT_PREFIX}{first_index:020}{SEGMENT_SUFFIX}")
}

/// Parses one frame at `pos`: the entry and where the next frame starts.
fn read_frame(data: &[u8], pos: usize) -> Result<(Entry, usize), &'static str> {
    let rest = data.get(pos..).ok_or("past the end")?;
    if rest.len() < FRAME_HEADER {
        return Err("truncated frame header");
    }
    let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    let crc = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
    if len > FRAME_BYTES_MAX {
        return Err("frame length beyond the limit");
    }
    if rest.len() - FRAME_HEADER < len {
        return Err("frame extends past the end of the file");
    }
    let body = &rest[FRAME_HEADER..FRAME_HEADER + len];
    if crc32c::crc32c(body) != crc {
        return Err("checksum mismatch");
    }
    let mut r = Reader::new(Bytes::copy_from_slice(body));
    let entry = r.entry().map_err(|_| "undecodable entry")?;
    if r.remaining() != 0 {
        return Err("trailing bytes in an entry frame");
    }
    Ok((entry, pos + FRAME_HEADER + len))
}

fn encode_frame(out: &mut BytesMut, e: &Entry) {
    let mut body = BytesMut::with_capacity(e.data.len() + 48);
    put_entry(&mut body, e);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
    out.extend_from_slice(&body);
}

fn read_all(path: &Path) -> Result<Vec<u8>, DiskError> {
    let mut data = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut data))
        .map_err(io(path))?;
    Ok(data)
}

fn fsync_dir(dir: &Path) -> Result<(), DiskError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

fn decode_snapshot(path: &Path, data: &[u8]) -> Result<Snapshot, DiskError> {
    if data.len() < 12 || &data[..8] != SNAPSHOT_MAGIC {
        return Err(corrupt(path, 0, "not a snapshot file"));
    }
    let crc = u32::from_be_bytes([data[8], data[9], data[10], data[11]]);
    if crc32c::crc32c(&data[12..]) != crc {
        return Err(corrupt(path, 8, "snapshot checksum mismatch"));
    }
    let mut r = Reader::new(Bytes::copy_from_slice(&data[12..]));
    let snap = r
        .snapshot()
        .map_err(|e| corrupt(path, 12, format!("undecodable snapshot: {e}")))?;
    if r.remaining() != 0 {
        return Err(corrupt(path, 12, "trailing bytes after the snapshot"));
    }
    Ok(snap)
}

fn read_slot(data: &[u8]) -> Option<(u64, HardState)> {
    if data.len() < SLOT_BYTES as usize {
        return None;
    }
    let u = |i: usize| u64::from_be_bytes(data[i * 8..i * 8 + 8].try_into().unwrap_or_default());
    let crc = u32::from_be_bytes(data[32..36].try_into().unwrap_or_default());
    if crc32c::crc32c(&data[..32]) != crc || u(0) == 0 {
        return None;
    }
    let hs = HardState {
        term: u(1),
        vote: u(2),
        commit: u(3),
        ..Default::default()
    };
    Some((u(0), hs))
}

impl FileDisk {
    /// A disk in `dir` (created on first write); nothing is read until [`Disk::load`].
    pub fn new(dir: &Path) -> FileDisk {
        FileDisk {
            dir: dir.to_path_buf(),
            segments: Vec::new(),
            state: None,
            state_seq: 0,
            segment_bytes_max: 64 << 20,
            dirty_segment: false,
            dirty_state: false,
            dirty_dir: false,
            dir_made: false,
        }
    }

    /// Whether `dir` holds a Raft log (a segment, a snapshot or a hard state).
    pub fn exists(dir: &Path) -> bool {
        std::fs::read_dir(dir).is_ok_and(|entries| {
            entries.flatten().any(|e| {
                let n = e.file_name().to_string_lossy().to_string();
                n == STATE_FILE
                    || n == VOTERS_FILE
                    || n.ends_with(SNAPSHOT_SUFFIX)
                    || (n.starts_with(SEGMENT_PREFIX) && n.ends_with(SEGMENT_SUFFIX))
            })
        })
    }

    fn make_dir(&mut self) -> Result<(), DiskError> {
        if !self.dir_made {
            std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
            self.dir_made = true;
        }
        Ok(())
    }

    /// Sets the segment size after which a new segment starts.
    pub fn with_segment_bytes(mut self, bytes: u64) -> FileDisk {
        self.segment_bytes_max = bytes.max(1024);
        self
    }

    fn load_hard_state(&mut self) -> Result<HardState, DiskError> {
        let path = self.dir.join(STATE_FILE);
        if !path.exists() {
            return Ok(HardState::default());
        }
        let data = read_all(&path)?;
        let a = read_slot(&data);
        let b = data.get(SLOT_BYTES as usize..).and_then(read_slot);
        let best = match (a, b) {
            (Some(a), Some(b)) => Some(if a.0 >= b.0 { a } else { b }),
            (a, b) => a.or(b),
        };
        match best {
            Some((seq, hs)) => {
                self.state_seq = seq;
                Ok(hs)
            }
            None if data.iter().all(|&b| b == 0) => Ok(HardState::default()),
            None => Err(corrupt(
                &path,
                0,
                "no readable hard-state slot (term and vote)",
            )),
        }
    }

    fn load_voters(&mut self) -> Result<Vec<u64>, DiskError> {
        let path = self.dir.join(VOTERS_FILE);
        if !path.exists() {
            return Ok(Vec::new());
        }
        let text =
            String::from_utf8(read_all(&path)?).map_err(|_| corrupt(&path, 0, "not text"))?;
        let mut lines = text.lines();
        let body = lines.next().unwrap_or_default();
        let crc = lines.next().and_then(|c| u32::from_str_radix(c, 16).ok());
        if crc != Some(crc32c::crc32c(body.as_bytes())) {
            return Err(corrupt(&path, 0, "voter set checksum mismatch"));
        }
        body.split(',')
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<u64>()
                    .map_err(|_| corrupt(&path, 0, "not a voter id"))
            })
            .collect()
    }

    fn load_snapshot(&mut self) -> Result<Option<Snapshot>, DiskError> {
        let mut snaps: Vec<(u64, PathBuf)> = Vec::new();
        for e in std::fs::read_dir(&self.dir)
            .map_err(io(&self.dir))?
            .flatten()
        {
            let name = e.file_name().to_string_lossy().to_string();
            if name.ends_with(".tmp") {
                // An unfinished snapshot write: never renamed, so never relied on.
                let _ = std::fs::remove_file(e.path());
                continue;
            }
            if let Some(stem) = name.strip_suffix(SNAPSHOT_SUFFIX) {
                if let Some(index) = stem.split('-').next().and_then(|i| i.parse::<u64>().ok()) {
                    snaps.push((index, e.path()));
                }
            }
        }
        snaps.sort();
        let Some((_, path)) = snaps.last() else {
            return Ok(None);
        };
        // Only the latest snapshot counts: the log before it may be gone.
        let data = read_all(path)?;
        decode_snapshot(path, &data).map(Some)
    }

    fn load_segments(&mut self) -> Result<Vec<Entry>, DiskError> {
        let mut found: Vec<(u64, PathBuf)> = Vec::new();
        for e in std::fs::read_dir(&self.dir)
            .map_err(io(&self.dir))?
            .flatten()
        {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(n) = name
                .strip_prefix(SEGMENT_PREFIX)
                .and_then(|n| n.strip_suffix(SEGMENT_SUFFIX))
            {
                match n.parse::<u64>() {
                    Ok(first) => found.push((first, e.path())),
                    Err(_) => return Err(corrupt(&e.path(), 0, "segment name is not an index")),
                }
            }
        }
        found.sort();
        let mut entries: Vec<Entry> = Vec::new();
        let count = found.len();
        for (k, (first_index, path)) in found.into_iter().enumerate() {
            let data = read_all(&path)?;
            let last_segment = k + 1 == count;
            if let Some(prev) = entries.last() {
                if prev.index + 1 != first_index {
                    return Err(corrupt(
                        &path,
                        0,
                        format!("segment starts at index {first_index} but the log before it ends at {}", prev.index),
                    ));
                }
            }
            let mut ends = Vec::new();
            let mut pos = 0usize;
            let mut expected = first_index;
            while pos < data.len() {
                let bad = match read_frame(&data, pos) {
                    Ok((e, _)) if e.index != expected => Some(format!(
                        "entry index {} where {expected} was expected",
                        e.index
                    )),
                    Ok((e, _)) if entries.last().is_some_and(|p| p.term > e.term) => {
                        Some("entry term goes back".to_string())
                    }
                    Ok((e, next)) => {
                        entries.push(e);
                        ends.push(next as u64);
                        pos = next;
                        expected += 1;
                        None
                    }
                    Err(reason) => Some(reason.to_string()),
                };
                if let Some(reason) = bad {
                    let valid_follows = (pos + 1..data.len()).any(|p| read_frame(&data, p).is_ok());
                    if !last_segment || valid_follows {
                        return Err(corrupt(&path, pos as u64, reason));
                    }
                    tracing::warn!(
                        path = %path.display(),
                        valid_bytes = pos,
                        file_bytes = data.len(),
                        "metadata log has a torn tail (no valid entry follows it); cutting it"
                    );
                    let f = OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .map_err(io(&path))?;
                    f.set_len(pos as u64).map_err(io(&path))?;
                    f.sync_all().map_err(io(&path))?;
                    break;
                }
            }
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(io(&path))?;
            self.segments.push(Segment {
                first_index,
                path,
                file,
                ends,
            });
        }
        Ok(entries)
    }

    /// Removes every entry from `index` on: later segments first, so a crash in between
    /// leaves a log that is a prefix-consistent older state, never a gap.
    fn truncate_from(&mut self, index: u64) -> Result<(), DiskError> {
        while let Some(seg) = self.segments.last() {
            if seg.first_index < index {
                break;
            }
            let path = seg.path.clone();
            std::fs::remove_file(&path).map_err(io(&path))?;
            self.segments.pop();
            self.dirty_dir = true;
        }
        if let Some(seg) = self.segments.last_mut() {
            if seg.last_index().is_some_and(|l| l >= index) {
                let keep = (index - seg.first_index) as usize;
                let len = if keep == 0 { 0 } else { seg.ends[keep - 1] };
                seg.file.set_len(len).map_err(io(&seg.path))?;
                seg.ends.truncate(keep);
                self.dirty_segment = true;
            }
        }
        Ok(())
    }

    fn new_segment(&mut self, first_index: u64) -> Result<(), DiskError> {
        self.make_dir()?;
        let path = self.dir.join(segment_name(first_index));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(io(&path))?;
        self.segments.push(Segment {
            first_index,
            path,
            file,
            ends: Vec::new(),
        });
        self.dirty_dir = true;
        Ok(())
    }

    fn last_index(&self) -> Option<u64> {
        self.segments.iter().rev().find_map(Segment::last_index)
    }
}

impl Disk for FileDisk {
    fn load(&mut self) -> Result<Persisted, DiskError> {
        self.segments.clear();
        if !self.dir.exists() {
            return Ok(Persisted::default());
        }
        self.dir_made = true;
        let hard_state = self.load_hard_state()?;
        let voters = self.load_voters()?;
        let snapshot = self.load_snapshot()?;
        let mut entries = self.load_segments()?;
        let snap_index = snapshot.as_ref().map_or(0, |s| s.get_metadata().index);
        entries.retain(|e| e.index > snap_index);
        if let Some(first) = entries.first() {
            if first.index != snap_index + 1 {
                let path = self
                    .segments
                    .first()
                    .map_or(self.dir.clone(), |s| s.path.clone());
                return Err(corrupt(
                    &path,
                    0,
                    format!(
                        "the log resumes at index {} but the snapshot ends at {snap_index}",
                        first.index
                    ),
                ));
            }
        }
        Ok(Persisted {
            hard_state,
            snapshot,
            entries,
            voters,
        })
    }

    fn append(&mut self, entries: &[Entry]) -> Result<(), DiskError> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        if self.last_index().is_some_and(|l| l >= first.index) {
            self.truncate_from(first.index)?;
        }
        let needs_segment = match self.segments.last() {
            None => true,
            Some(s) => {
                s.len() >= self.segment_bytes_max
                    || s.last_index().map_or(s.first_index, |l| l + 1) != first.index
            }
        };
        if needs_segment {
            self.new_segment(first.index)?;
        }
        let mut buf = BytesMut::new();
        let seg = self
            .segments
            .last_mut()
            .ok_or_else(|| DiskError::Fenced("no segment".into()))?;
        let mut ends = Vec::with_capacity(entries.len());
        let base = seg.len();
        for e in entries {
            encode_frame(&mut buf, e);
            ends.push(base + buf.len() as u64);
        }
        seg.file.write_all_at(&buf, base).map_err(io(&seg.path))?;
        seg.ends.extend(ends);
        self.dirty_segment = true;
        Ok(())
    }

    fn save_voters(&mut self, voters: &[u64]) -> Result<(), DiskError> {
        self.make_dir()?;
        let text: Vec<String> = voters.iter().map(u64::to_string).collect();
        let body = text.join(",");
        let content = format!("{body}\n{:08x}\n", crc32c::crc32c(body.as_bytes()));
        let path = self.dir.join(VOTERS_FILE);
        let tmp = self.dir.join(format!("{VOTERS_FILE}.tmp"));
        let mut f = File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(content.as_bytes()).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        fsync_dir(&self.dir)
    }

    fn save_hard_state(&mut self, hs: &HardState) -> Result<(), DiskError> {
        let path = self.dir.join(STATE_FILE);
        if self.state.is_none() {
            self.make_dir()?;
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(io(&path))?;
            self.state = Some(f);
            self.dirty_dir = true;
        }
        self.state_seq += 1;
        let mut slot = Vec::with_capacity(SLOT_BYTES as usize);
        for v in [self.state_seq, hs.term, hs.vote, hs.commit] {
            slot.extend_from_slice(&v.to_be_bytes());
        }
        let crc = crc32c::crc32c(&slot);
        slot.extend_from_slice(&crc.to_be_bytes());
        slot.extend_from_slice(&[0; 4]);
        let at = (self.state_seq % 2) * SLOT_BYTES;
        if let Some(f) = &self.state {
            f.write_all_at(&slot, at).map_err(io(&path))?;
        }
        self.dirty_state = true;
        Ok(())
    }

    fn save_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), DiskError> {
        // Everything written before the snapshot is durable before it is.
        self.sync()?;
        self.make_dir()?;
        let meta = snapshot.get_metadata();
        let name = format!("{:020}-{:020}{SNAPSHOT_SUFFIX}", meta.index, meta.term);
        let path = self.dir.join(&name);
        let tmp = self.dir.join(format!("{name}.tmp"));
        let mut body = BytesMut::with_capacity(snapshot.data.len() + 128);
        put_snapshot(&mut body, snapshot);
        let mut f = File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(SNAPSHOT_MAGIC).map_err(io(&tmp))?;
        f.write_all(&crc32c::crc32c(&body).to_be_bytes())
            .map_err(io(&tmp))?;
        f.write_all(&body).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        fsync_dir(&self.dir)?;
        // The new snapshot is durable: older snapshots and the segments it covers may go.
        for e in std::fs::read_dir(&self.dir)
            .map_err(io(&self.dir))?
            .flatten()
        {
            let n = e.file_name().to_string_lossy().to_string();
            if n.ends_with(SNAPSHOT_SUFFIX) && n != name {
                let _ = std::fs::remove_file(e.path());
            }
        }
        // A segment is covered when the next one starts at or before index + 1 (or, for the
        // last one, when all its entries are at or below the index).
        let index = meta.index;
        let mut keep_from = 0;
        for k in 0..self.segments.len() {
            let covered = match self.segments.get(k + 1) {
                Some(next) => next.first_index <= index + 1,
                None => self.segments[k].last_index().is_none_or(|l| l <= index),
            };
            if !covered {
                break;
            }
            keep_from = k + 1;
        }
        for seg in self.segments.drain(..keep_from) {
            let _ = std::fs::remove_file(&seg.path);
        }
        fsync_dir(&self.dir)?;
        Ok(())
    }

    fn truncate_after(&mut self, index: u64) -> Result<(), DiskError> {
        if self.last_index().is_some_and(|l| l > index) {
            self.truncate_from(index + 1)?;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), DiskError> {
        if self.dirty_segment {
            if let Some(seg) = self.segments.last() {
                seg.file.sync_data().map_err(io(&seg.path))?;
            }
            self.dirty_segment = false;
        }
        if self.dirty_state {
            if let Some(f) = &self.state {
                f.sync_data().map_err(io(&self.dir.join(STATE_FILE)))?;
            }
            self.dirty_state = false;
        }
        if self.dirty_dir {
            fsync_dir(&self.dir)?;
            self.dirty_dir = false;
        }
        Ok(())
    }
}
