//! One log segment: a `.log` file of batches plus its in-memory (and on-disk) indexes.
//!
//! Ownership and concurrency: the `Log` holds segments as `Arc<Segment>`. Only the appender
//! (under the log's append lock) writes to the file and to `meta`; readers use positional
//! reads and never look past `size`, which the appender publishes after the bytes and the
//! index entries are in place. A reader holding an `Arc` to a segment that retention or
//! compaction has replaced keeps reading the old file through its open descriptor.

use std::fs::{self, File, OpenOptions};
use std::io::{IoSlice, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;
use record::{validate_batch_structure, BatchHeader, HEADER_LEN, LENGTH_OFFSET, LOG_OVERHEAD};

use crate::error::StorageError;
use crate::index::{read_file_opt, write_file_atomic, OffsetIndex, TimeIndex};

pub(crate) fn file_name(base: i64, ext: &str) -> String {
    format!("{base:020}.{ext}")
}

/// Statistics and indexes of a segment, updated by the appender under a short write lock.
#[derive(Debug, Clone)]
pub(crate) struct SegmentMeta {
    pub offset_index: OffsetIndex,
    pub time_index: TimeIndex,
    /// Offset after the last batch (the segment's base offset when empty).
    pub next_offset: i64,
    /// Largest batch max timestamp, -1 when empty.
    pub max_timestamp: i64,
    /// Base offset of the batch holding `max_timestamp`.
    pub offset_of_max_timestamp: i64,
    /// Max timestamp of the first batch: `segment.ms` counts from it, as in Kafka.
    pub first_batch_timestamp: Option<i64>,
    /// When this segment was created or loaded, by the log's clock.
    pub created_ms: i64,
    pub bytes_since_index: u64,
    pub index_dirty: bool,
}

impl SegmentMeta {
    fn new(base: i64, now_ms: i64) -> SegmentMeta {
        SegmentMeta {
            offset_index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            next_offset: base,
            max_timestamp: -1,
            offset_of_max_timestamp: base,
            first_batch_timestamp: None,
            created_ms: now_ms,
            bytes_since_index: 0,
            index_dirty: true,
        }
    }

    /// Accounts for a batch written at `pos`: statistics and sparse index entries.
    pub fn on_batch(&mut self, base: i64, h: &BatchHeader, pos: u64, interval: u64) {
        let rel = (h.base_offset - base) as u32;
        if h.max_timestamp > self.max_timestamp {
            self.max_timestamp = h.max_timestamp;
            self.offset_of_max_timestamp = h.base_offset;
        }
        if self.first_batch_timestamp.is_none() {
            self.first_batch_timestamp = Some(h.max_timestamp);
        }
        if self.bytes_since_index >= interval {
            self.offset_index.push(rel, pos as u32);
            self.time_index.push(
                self.max_timestamp,
                (self.offset_of_max_timestamp - base) as u32,
            );
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += h.total_size() as u64;
        self.next_offset = h.next_offset();
        self.index_dirty = true;
    }
}

/// A failed append write: the error, and whether the file was cut back to its size before
/// the write (then it holds exactly what it held, and only the write is lost).
#[derive(Debug)]
pub(crate) struct WriteError {
    pub error: StorageError,
    pub cut_back: bool,
}

/// Bytes at the end of a segment file that are not valid batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Damage {
    /// Where the valid batches end (the readable size).
    pub valid_bytes: u64,
    pub file_bytes: u64,
    /// The offset the first invalid batch should have started at.
    pub next_offset: i64,
}

#[derive(Debug)]
pub(crate) struct Segment {
    pub base_offset: i64,
    dir: PathBuf,
    file: File,
    size: AtomicU64,
    meta: RwLock<SegmentMeta>,
}

/// Sequential reader over a file by positional reads, with a reusable window buffer.
struct Window<'a> {
    file: &'a File,
    file_len: u64,
    buf: Vec<u8>,
    start: u64,
}

const WINDOW: usize = 1 << 20;
/// Header scans read this much per syscall: one read usually covers an index interval.
const SCAN_BUF: usize = 8192;

/// Iterator-like walk over batch headers, reading `SCAN_BUF` bytes per positional read
/// instead of one read per header (lookups scan up to `index.interval.bytes` of batches).
pub(crate) struct HeaderCursor<'a> {
    seg: &'a Segment,
    pos: u64,
    limit: u64,
    buf: [u8; SCAN_BUF],
    buf_start: u64,
    buf_len: usize,
}

impl HeaderCursor<'_> {
    /// The next header and its position, or None at the end.
    pub fn next_header(&mut self) -> Result<Option<(u64, BatchHeader)>, StorageError> {
        let pos = self.pos;
        if pos + HEADER_LEN as u64 > self.limit {
            return Ok(None);
        }
        let cached = pos >= self.buf_start
            && pos + HEADER_LEN as u64 <= self.buf_start + self.buf_len as u64;
        if !cached {
            let n = (SCAN_BUF as u64).min(self.limit - pos) as usize;
            self.seg
                .file
                .read_exact_at(&mut self.buf[..n], pos)
                .map_err(|e| StorageError::io("read segment", self.seg.log_path(), e))?;
            self.buf_start = pos;
            self.buf_len = n;
        }
        let off = (pos - self.buf_start) as usize;
        let h = BatchHeader::parse(&self.buf[off..off + HEADER_LEN])
            .map_err(|e| self.seg.corrupt(e.to_string()))?;
        if h.batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32
            || pos + h.total_size() as u64 > self.limit
        {
            return Err(self
                .seg
                .corrupt(format!("bad batch length at position {pos}")));
        }
        self.pos = pos + h.total_size() as u64;
        Ok(Some((pos, h)))
    }
}

impl<'a> Window<'a> {
    fn new(file: &'a File, file_len: u64) -> Self {
        Window {
            file,
            file_len,
            buf: Vec::new(),
            start: 0,
        }
    }

    /// Bytes [pos, pos+len), or None if the file ends first. `len` is bounded by the file.
    fn get(&mut self, pos: u64, len: usize) -> std::io::Result<Option<&[u8]>> {
        let end = pos.saturating_add(len as u64);
        if end > self.file_len {
            return Ok(None);
        }
        let have = pos >= self.start && end <= self.start + self.buf.len() as u64;
        if !have {
            let want = (len.max(WINDOW) as u64).min(self.file_len - pos) as usize;
            self.buf.resize(want, 0);
            self.file.read_exact_at(&mut self.buf, pos)?;
            self.start = pos;
        }
        let off = (pos - self.start) as usize;
        Ok(Some(&self.buf[off..off + len]))
    }
}

impl Segment {
    pub fn log_path(&self) -> PathBuf {
        self.dir.join(file_name(self.base_offset, "log"))
    }

    fn index_path(&self) -> PathBuf {
        self.dir.join(file_name(self.base_offset, "index"))
    }

    fn time_index_path(&self) -> PathBuf {
        self.dir.join(file_name(self.base_offset, "timeindex"))
    }

    /// Creates a new empty segment (replacing any stale file of the same name).
    pub fn create(dir: &Path, base: i64, now_ms: i64) -> Result<Segment, StorageError> {
        let path = dir.join(file_name(base, "log"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| StorageError::io("create segment", &path, e))?;
        for ext in ["index", "timeindex", "txnindex"] {
            let p = dir.join(file_name(base, ext));
            let _ = fs::remove_file(p);
        }
        Ok(Segment {
            base_offset: base,
            dir: dir.to_path_buf(),
            file,
            size: AtomicU64::new(0),
            meta: RwLock::new(SegmentMeta::new(base, now_ms)),
        })
    }

    /// Opens an existing segment. With `trust_index`, index files are used when they are
    /// consistent and only the tail after the last index entry is scanned; otherwise the
    /// whole file is scanned. Every scanned batch is fully validated (CRC included). The file
    /// is never changed here: bytes after the first invalid batch are reported as `Damage`
    /// (readers never see them) and the caller decides whether they are a torn tail to cut
    /// ([`Segment::cut_damage`]) or damage that takes the partition offline.
    pub fn open(
        dir: &Path,
        base: i64,
        trust_index: bool,
        index_interval: u64,
        now_ms: i64,
    ) -> Result<(Segment, Option<Damage>), StorageError> {
        let path = dir.join(file_name(base, "log"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| StorageError::io("open segment", &path, e))?;
        let len = file
            .metadata()
            .map_err(|e| StorageError::io("stat segment", &path, e))?
            .len();
        let seg = Segment {
            base_offset: base,
            dir: dir.to_path_buf(),
            file,
            size: AtomicU64::new(len),
            meta: RwLock::new(SegmentMeta::new(base, now_ms)),
        };
        let mut meta = SegmentMeta::new(base, now_ms);
        let mut from = 0u64;
        if trust_index && len > 0 {
            if let Some((oi, ti)) = seg.load_indexes(len)? {
                from = u64::from(oi.last().map(|(_, p)| p).unwrap_or(0));
                if let Some((t, o)) = ti.last() {
                    meta.max_timestamp = t;
                    meta.offset_of_max_timestamp = base + i64::from(o);
                }
                meta.offset_index = oi;
                meta.time_index = ti;
                meta.index_dirty = false;
            }
        }
        let mut end = seg.scan(&mut meta, from, len, index_interval)?;
        if from > 0 && meta.next_offset == base {
            // The index pointed at something that is not a batch: distrust it entirely.
            meta = SegmentMeta::new(base, now_ms);
            end = seg.scan(&mut meta, 0, len, index_interval)?;
        }
        if meta.first_batch_timestamp.is_none() || from > 0 {
            meta.first_batch_timestamp = seg.read_header(0, end)?.map(|h| h.max_timestamp);
        }
        let damage = (end < len).then_some(Damage {
            valid_bytes: end,
            file_bytes: len,
            next_offset: meta.next_offset,
        });
        seg.size.store(end, Ordering::Release);
        (&seg.file)
            .seek(SeekFrom::Start(end))
            .map_err(|e| StorageError::io("seek segment", &path, e))?;
        *seg.meta.write() = meta;
        Ok((seg, damage))
    }

    /// Cuts the file at the end of its valid batches (a torn tail after a crash).
    pub fn cut_damage(&self, damage: &Damage) -> Result<(), StorageError> {
        let path = self.log_path();
        tracing::warn!(
            path = %path.display(),
            valid_bytes = damage.valid_bytes,
            file_bytes = damage.file_bytes,
            "truncating the unflushed tail of the active segment at the first torn or corrupt batch"
        );
        self.file
            .set_len(damage.valid_bytes)
            .map_err(|e| StorageError::io("truncate segment", &path, e))?;
        self.meta.write().index_dirty = true;
        Ok(())
    }

    fn load_indexes(&self, log_len: u64) -> Result<Option<(OffsetIndex, TimeIndex)>, StorageError> {
        // An index can't legitimately be larger than one entry per batch header.
        let limit = log_len / HEADER_LEN as u64 * 12 + 12;
        let Some(ob) = read_file_opt(&self.index_path(), limit)? else {
            return Ok(None);
        };
        let Some(tb) = read_file_opt(&self.time_index_path(), limit)? else {
            return Ok(None);
        };
        let Some(oi) = OffsetIndex::decode(&ob, log_len) else {
            return Ok(None);
        };
        let Some(ti) = TimeIndex::decode(&tb, u32::MAX) else {
            return Ok(None);
        };
        // The last entry must point at a batch with exactly that base offset.
        if let Some((o, p)) = oi.last() {
            match self.read_header(u64::from(p), log_len) {
                Ok(Some(h)) if h.base_offset == self.base_offset + i64::from(o) => {}
                _ => return Ok(None),
            }
        }
        Ok(Some((oi, ti)))
    }

    /// Validates batches from `from` on, feeding them to `meta`; returns the end of the
    /// last valid batch.
    fn scan(
        &self,
        meta: &mut SegmentMeta,
        from: u64,
        len: u64,
        interval: u64,
    ) -> Result<u64, StorageError> {
        let path = self.log_path();
        let mut w = Window::new(&self.file, len);
        let mut pos = from;
        let mut expected_min = meta.next_offset;
        loop {
            let prefix = match w.get(pos, LOG_OVERHEAD) {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => return Err(StorageError::io("read segment", &path, e)),
            };
            let blen = i32::from_be_bytes([
                prefix[LENGTH_OFFSET],
                prefix[LENGTH_OFFSET + 1],
                prefix[LENGTH_OFFSET + 2],
                prefix[LENGTH_OFFSET + 3],
            ]);
            if blen < (HEADER_LEN - LOG_OVERHEAD) as i32 {
                break;
            }
            let total = blen as usize + LOG_OVERHEAD;
            let bytes = match w.get(pos, total) {
                Ok(Some(b)) => b,
                Ok(None) => break,
                Err(e) => return Err(StorageError::io("read segment", &path, e)),
            };
            let Ok(h) = validate_batch_structure(bytes) else {
                break;
            };
            let rel = h.last_offset() - self.base_offset;
            if h.base_offset < expected_min || rel < 0 || rel > i64::from(u32::MAX) {
                break;
            }
            meta.on_batch(self.base_offset, &h, pos, interval);
            expected_min = h.next_offset();
            pos += total as u64;
        }
        Ok(pos)
    }

    /// Calls `f(position, header, batch bytes)` for each batch, validating each one.
    pub fn for_each_batch(
        &self,
        mut f: impl FnMut(u64, &BatchHeader, &[u8]) -> Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        let limit = self.size();
        let mut w = Window::new(&self.file, limit);
        let mut pos = 0u64;
        while pos < limit {
            let h = self
                .read_header(pos, limit)?
                .ok_or_else(|| self.corrupt(format!("truncated batch at {pos}")))?;
            let bytes = w
                .get(pos, h.total_size())
                .map_err(|e| StorageError::io("read segment", self.log_path(), e))?
                .ok_or_else(|| self.corrupt(format!("truncated batch at {pos}")))?;
            validate_batch_structure(bytes).map_err(|e| self.corrupt(e.to_string()))?;
            f(pos, &h, bytes)?;
            pos += h.total_size() as u64;
        }
        Ok(())
    }

    /// Bytes readable by readers (complete batches only).
    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    pub fn meta(&self) -> parking_lot::RwLockReadGuard<'_, SegmentMeta> {
        self.meta.read()
    }

    pub fn meta_mut(&self) -> parking_lot::RwLockWriteGuard<'_, SegmentMeta> {
        self.meta.write()
    }

    pub fn next_offset(&self) -> i64 {
        self.meta.read().next_offset
    }

    /// Writes all slices at the end of the file. On error the file is cut back to its
    /// previous size so nothing partial stays; the error says whether that worked (if not,
    /// the file's tail is unknown).
    pub fn write_all(&self, slices: &mut [IoSlice<'_>]) -> Result<(), WriteError> {
        let mut slices = slices;
        let mut f = &self.file;
        while !slices.is_empty() {
            match f.write_vectored(slices) {
                Ok(0) => {
                    return Err(self.undo_partial(std::io::Error::new(
                        std::io::ErrorKind::WriteZero,
                        "write returned 0",
                    )))
                }
                Ok(n) => IoSlice::advance_slices(&mut slices, n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.undo_partial(e)),
            }
        }
        Ok(())
    }

    fn undo_partial(&self, e: std::io::Error) -> WriteError {
        let size = self.size();
        let cut_back =
            self.file.set_len(size).is_ok() && (&self.file).seek(SeekFrom::Start(size)).is_ok();
        WriteError {
            error: StorageError::io("append to segment", self.log_path(), e),
            cut_back,
        }
    }

    /// Publishes `new_size` bytes to readers (after the bytes are written and indexed).
    pub fn publish(&self, new_size: u64) {
        self.size.store(new_size, Ordering::Release);
    }

    pub fn read_at(&self, pos: u64, len: usize) -> Result<Vec<u8>, StorageError> {
        let mut buf = vec![0u8; len];
        self.file
            .read_exact_at(&mut buf, pos)
            .map_err(|e| StorageError::io("read segment", self.log_path(), e))?;
        Ok(buf)
    }

    /// Fills `buf` from position `pos`.
    pub fn read_into(&self, pos: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        self.file
            .read_exact_at(buf, pos)
            .map_err(|e| StorageError::io("read segment", self.log_path(), e))
    }

    /// The header of the batch at `pos`, or None at/after `limit`.
    pub fn read_header(&self, pos: u64, limit: u64) -> Result<Option<BatchHeader>, StorageError> {
        if pos + HEADER_LEN as u64 > limit {
            return Ok(None);
        }
        let mut buf = [0u8; HEADER_LEN];
        self.file
            .read_exact_at(&mut buf, pos)
            .map_err(|e| StorageError::io("read segment", self.log_path(), e))?;
        let h = BatchHeader::parse(&buf).map_err(|e| self.corrupt(e.to_string()))?;
        if h.batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32
            || pos + h.total_size() as u64 > limit
        {
            return Err(self.corrupt(format!("bad batch length at position {pos}")));
        }
        Ok(Some(h))
    }

    fn corrupt(&self, reason: String) -> StorageError {
        StorageError::Corrupt {
            path: self.log_path(),
            reason,
        }
    }

    /// The first batch whose last offset is >= `offset`, with its position.
    pub fn find_batch(&self, offset: i64) -> Result<Option<(u64, BatchHeader)>, StorageError> {
        let rel = (offset - self.base_offset).clamp(0, i64::from(u32::MAX)) as u32;
        let pos = u64::from(self.meta.read().offset_index.lookup(rel));
        let mut cur = self.headers_from(pos);
        while let Some((pos, h)) = cur.next_header()? {
            if h.last_offset() >= offset {
                return Ok(Some((pos, h)));
            }
        }
        Ok(None)
    }

    /// Walks batch headers from `pos` (a batch boundary) to the published end.
    pub fn headers_from(&self, pos: u64) -> HeaderCursor<'_> {
        HeaderCursor {
            seg: self,
            pos,
            limit: self.size(),
            buf: [0; SCAN_BUF],
            buf_start: 0,
            buf_len: 0,
        }
    }

    /// Position from which to scan for the first batch with timestamp >= `ts`.
    pub fn time_lookup_position(&self, ts: i64) -> Result<u64, StorageError> {
        let rel = self.meta.read().time_index.lookup_before(ts);
        Ok(self
            .find_batch(self.base_offset + i64::from(rel))?
            .map(|(p, _)| p)
            .unwrap_or(0))
    }

    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    /// Writes the index files (atomically, fsynced) if they changed.
    pub fn write_indexes(&self) -> Result<(), StorageError> {
        let (oi, ti) = {
            let mut m = self.meta.write();
            if !m.index_dirty {
                return Ok(());
            }
            // Close the time index with the segment's final max timestamp, as Kafka does at
            // roll, so a reopened segment knows it without scanning.
            let (t, o) = (m.max_timestamp, m.offset_of_max_timestamp);
            if t >= 0 {
                let rel = (o - self.base_offset) as u32;
                m.time_index.push(t, rel);
            }
            m.index_dirty = false;
            (m.offset_index.encode(), m.time_index.encode())
        };
        write_file_atomic(&self.index_path(), &oi)?;
        write_file_atomic(&self.time_index_path(), &ti)?;
        Ok(())
    }

    /// Removes every batch at or after the batch containing `offset`; returns the new next
    /// offset. Only the appender may call this.
    pub fn truncate_to(&self, offset: i64, interval: u64) -> Result<i64, StorageError> {
        let Some((pos, _)) = self.find_batch(offset)? else {
            return Ok(self.next_offset());
        };
        let path = self.log_path();
        self.size.store(pos, Ordering::Release);
        self.file
            .set_len(pos)
            .map_err(|e| StorageError::io("truncate segment", &path, e))?;
        (&self.file)
            .seek(SeekFrom::Start(pos))
            .map_err(|e| StorageError::io("seek segment", &path, e))?;
        // Rebuild statistics from what is left: cheap compared to how rare truncation is.
        let created = self.meta.read().created_ms;
        let mut meta = SegmentMeta::new(self.base_offset, created);
        let end = self.scan(&mut meta, 0, pos, interval)?;
        debug_assert_eq!(end, pos);
        let next = meta.next_offset;
        *self.meta.write() = meta;
        let _ = fs::remove_file(self.index_path());
        let _ = fs::remove_file(self.time_index_path());
        Ok(next)
    }

    /// Deletes the segment's files. Open descriptors (readers) stay valid.
    pub fn delete_files(&self) -> Result<(), StorageError> {
        let txn_index = crate::txn_index::txn_index_path(&self.dir, self.base_offset);
        for p in [
            self.log_path(),
            self.index_path(),
            self.time_index_path(),
            txn_index,
        ] {
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StorageError::io("delete", &p, e)),
            }
        }
        Ok(())
    }

    /// Removes the index files (before the log file is replaced by compaction).
    pub fn remove_index_files(&self) {
        let _ = fs::remove_file(self.index_path());
        let _ = fs::remove_file(self.time_index_path());
    }
}
