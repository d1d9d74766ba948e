//! The durable metadata log. Single node: an append-only local file of checksummed records.
//!
//! Two safety rules (issue 8) decide what happens to damaged bytes:
//! - On open, a bad frame is a *torn tail* only when no valid frame follows it anywhere in the
//!   file; only then is it cut. Anything else is corruption in the middle of committed history:
//!   the log refuses to open with an error naming the file, the byte offset and how to recover,
//!   because cutting there would forget committed topics (and, before, delete their data).
//! - A failed write or fsync fences the log for the life of the process: later appends fail, so
//!   no record can ever land after a partial frame and nothing acknowledged depends on the
//!   failed write.

use crate::legacy::record::MetadataRecord;
use crate::MetadataError;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Largest record accepted when reading the log back; anything claiming more is corruption.
const RECORD_BYTES_MAX: usize = 16 * 1024 * 1024;
/// `[u32 length][u32 crc32c]` before each record's JSON body.
const FRAME_HEADER_BYTES: usize = 8;

/// Where metadata records become durable. `append` returns only once the records survive a
/// crash; a replicated implementation returns once a quorum has them.
pub trait MetadataLog: Send {
    /// Every record in the log, in order (used once, at start).
    fn replay(&mut self) -> Result<Vec<MetadataRecord>, MetadataError>;
    /// Appends records atomically with respect to a crash (all or a prefix that replay
    /// treats as absent) and makes them durable. Returns the offset of the last one.
    fn append(&mut self, records: &[MetadataRecord]) -> Result<i64, MetadataError>;
}

/// The single-node metadata log: `<dir>/metadata.log`, frames of
/// `[u32 length][u32 crc32c][json]`, fsynced on every append. A torn tail is cut on open;
/// corruption followed by valid frames refuses to open.
pub struct FileMetadataLog {
    path: PathBuf,
    file: File,
    next_offset: i64,
    /// Bytes of whole, valid frames: where the next append starts.
    valid_bytes: u64,
    /// Set by a failed write or fsync; every later append fails with it.
    fenced: Option<String>,
    /// Test hook: the next append writes only this many bytes, then fails as a full disk does.
    #[cfg(test)]
    fail_next_write_after: Option<usize>,
}

impl std::fmt::Debug for FileMetadataLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileMetadataLog")
            .field("path", &self.path)
            .field("next_offset", &self.next_offset)
            .field("fenced", &self.fenced)
            .finish()
    }
}

/// Why a frame could not be read.
fn read_frame(data: &[u8], pos: usize) -> Result<(MetadataRecord, usize), &'static str> {
    let rest = &data[pos..];
    if rest.len() < FRAME_HEADER_BYTES {
        return Err("truncated frame header");
    }
    let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    let crc = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
    if len > RECORD_BYTES_MAX {
        return Err("frame length beyond the record limit");
    }
    if rest.len() - FRAME_HEADER_BYTES < len {
        return Err("frame extends past the end of the file");
    }
    let body = &rest[FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + len];
    if crc32c::crc32c(body) != crc {
        return Err("checksum mismatch");
    }
    let record =
        serde_json::from_slice::<MetadataRecord>(body).map_err(|_| "undecodable record")?;
    Ok((record, pos + FRAME_HEADER_BYTES + len))
}

/// The first position after `bad` where a whole valid frame starts, if any.
fn next_valid_frame(data: &[u8], bad: usize) -> Option<usize> {
    (bad + 1..data.len().saturating_sub(FRAME_HEADER_BYTES - 1))
        .find(|&p| read_frame(data, p).is_ok())
}

impl FileMetadataLog {
    pub fn open(dir: &Path) -> Result<FileMetadataLog, MetadataError> {
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| MetadataError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let path = dir.join("metadata.log");
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(io(&path))?;
        Ok(FileMetadataLog {
            path,
            file,
            next_offset: 0,
            valid_bytes: 0,
            fenced: None,
            #[cfg(test)]
            fail_next_write_after: None,
        })
    }

    /// The file this log lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io_err(&self, source: std::io::Error) -> MetadataError {
        MetadataError::Io {
            path: self.path.display().to_string(),
            source,
        }
    }

    /// Fences the log after a failed write or fsync. The partial bytes are cut back to the last
    /// whole frame if the file system still lets us (best effort: the fence holds either way,
    /// and a restart treats leftovers as a torn tail because nothing valid can follow them).
    fn fence(&mut self, what: &str, source: std::io::Error) -> MetadataError {
        let reason = format!("{what} failed: {source}");
        tracing::error!(
            path = %self.path.display(),
            error = %source,
            "metadata log {what} failed; fencing the metadata log until restart"
        );
        if let Err(e) = self.file.set_len(self.valid_bytes) {
            tracing::warn!(path = %self.path.display(), error = %e, "could not cut the partial metadata frame; the next start will");
        }
        self.fenced = Some(reason);
        self.io_err(source)
    }

    fn write(&mut self, buf: &[u8]) -> std::io::Result<()> {
        #[cfg(test)]
        if let Some(n) = self.fail_next_write_after.take() {
            self.file.write_all(&buf[..n.min(buf.len())])?;
            return Err(std::io::Error::from_raw_os_error(28)); // ENOSPC
        }
        self.file.write_all(buf)
    }
}

impl MetadataLog for FileMetadataLog {
    fn replay(&mut self) -> Result<Vec<MetadataRecord>, MetadataError> {
        let mut data = Vec::new();
        self.file
            .seek(SeekFrom::Start(0))
            .map_err(|e| self.io_err(e))?;
        self.file
            .read_to_end(&mut data)
            .map_err(|e| self.io_err(e))?;
        let mut records = Vec::new();
        let mut pos = 0usize;
        while pos < data.len() {
            match read_frame(&data, pos) {
                Ok((record, next)) => {
                    records.push(record);
                    pos = next;
                }
                Err(reason) => {
                    if let Some(next_valid) = next_valid_frame(&data, pos) {
                        return Err(MetadataError::Corrupt {
                            path: self.path.display().to_string(),
                            offset: pos as u64,
                            record: records.len() as u64,
                            reason,
                            next_valid: next_valid as u64,
                        });
                    }
                    break;
                }
            }
        }
        if pos < data.len() {
            tracing::warn!(
                path = %self.path.display(),
                valid_bytes = pos,
                file_bytes = data.len(),
                "metadata log has a torn tail (no valid record follows it); cutting it"
            );
            self.file.set_len(pos as u64).map_err(|e| self.io_err(e))?;
            self.file.sync_all().map_err(|e| self.io_err(e))?;
        }
        self.valid_bytes = pos as u64;
        self.next_offset = records.len() as i64;
        Ok(records)
    }

    fn append(&mut self, records: &[MetadataRecord]) -> Result<i64, MetadataError> {
        if let Some(reason) = &self.fenced {
            return Err(MetadataError::Fenced {
                path: self.path.display().to_string(),
                reason: reason.clone(),
            });
        }
        let mut buf = Vec::new();
        for r in records {
            let body = serde_json::to_vec(r).map_err(|e| MetadataError::Encode(e.to_string()))?;
            buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
            buf.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
            buf.extend_from_slice(&body);
        }
        if let Err(e) = self.write(&buf) {
            return Err(self.fence("write", e));
        }
        if let Err(e) = self.file.sync_data() {
            return Err(self.fence("fsync", e));
        }
        self.valid_bytes += buf.len() as u64;
        self.next_offset += records.len() as i64;
        Ok(self.next_offset - 1)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cluster(n: usize) -> Vec<MetadataRecord> {
        (0..n)
            .map(|i| MetadataRecord::ClusterId {
                cluster_id: format!("c{i}"),
            })
            .collect()
    }

    fn write_log(dir: &Path, records: &[MetadataRecord]) -> Vec<u64> {
        let mut log = FileMetadataLog::open(dir).unwrap();
        log.replay().unwrap();
        let mut ends = Vec::new();
        for r in records {
            log.append(std::slice::from_ref(r)).unwrap();
            ends.push(log.valid_bytes);
        }
        ends
    }

    #[test]
    fn corruption_followed_by_valid_frames_refuses_to_open() {
        for victim in [0usize, 2, 4] {
            let dir = tempfile::tempdir().unwrap();
            let ends = write_log(dir.path(), &cluster(6));
            let path = dir.path().join("metadata.log");
            let before = std::fs::read(&path).unwrap();
            let start = if victim == 0 {
                0
            } else {
                ends[victim - 1] as usize
            };
            let mut bytes = before.clone();
            bytes[start + 12] ^= 0x40; // a byte inside the record's JSON body
            std::fs::write(&path, &bytes).unwrap();
            let err = FileMetadataLog::open(dir.path())
                .unwrap()
                .replay()
                .unwrap_err();
            let msg = err.to_string();
            assert!(
                matches!(err, MetadataError::Corrupt { offset, record, .. } if offset == start as u64 && record == victim as u64),
                "{msg}"
            );
            assert!(
                msg.contains("metadata.log") && msg.contains(&format!("byte {start}")),
                "{msg}"
            );
            // Nothing was cut.
            assert_eq!(std::fs::read(&path).unwrap(), bytes);
        }
    }

    #[test]
    fn a_damaged_length_in_the_middle_is_not_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let ends = write_log(dir.path(), &cluster(4));
        let path = dir.path().join("metadata.log");
        let mut bytes = std::fs::read(&path).unwrap();
        let start = ends[0] as usize;
        bytes[start] = 0x7f; // claims far more than the file holds
        std::fs::write(&path, &bytes).unwrap();
        let err = FileMetadataLog::open(dir.path())
            .unwrap()
            .replay()
            .unwrap_err();
        assert!(matches!(err, MetadataError::Corrupt { .. }), "{err}");
    }

    #[test]
    fn torn_tail_is_cut_when_nothing_valid_follows() {
        let dir = tempfile::tempdir().unwrap();
        let ends = write_log(dir.path(), &cluster(3));
        let path = dir.path().join("metadata.log");
        let mut bytes = std::fs::read(&path).unwrap();
        // A partial frame, then zeros (a file extended before its data reached the disk).
        let frame = bytes[ends[1] as usize..].to_vec();
        bytes.extend_from_slice(&frame[..frame.len() / 2]);
        bytes.extend_from_slice(&[0u8; 64]);
        std::fs::write(&path, &bytes).unwrap();
        let mut log = FileMetadataLog::open(dir.path()).unwrap();
        assert_eq!(log.replay().unwrap(), cluster(3));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), ends[2]);
    }

    #[test]
    fn a_failed_write_fences_the_log_and_nothing_lands_after_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = FileMetadataLog::open(dir.path()).unwrap();
        log.replay().unwrap();
        log.append(&cluster(1)).unwrap();
        log.fail_next_write_after = Some(5);
        assert!(log.append(&cluster(2)).is_err());
        // Space is back, but the log stays fenced for the life of the process.
        let err = log.append(&cluster(1)).unwrap_err();
        assert!(matches!(err, MetadataError::Fenced { .. }), "{err}");
        drop(log);
        let mut log = FileMetadataLog::open(dir.path()).unwrap();
        assert_eq!(log.replay().unwrap(), cluster(1));
        log.append(&cluster(2)).unwrap();
        let mut log = FileMetadataLog::open(dir.path()).unwrap();
        assert_eq!(log.replay().unwrap().len(), 3);
    }
}
