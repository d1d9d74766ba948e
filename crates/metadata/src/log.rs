//! The durable metadata log. Single node: an append-only local file of checksummed records.

use crate::record::MetadataRecord;
use crate::MetadataError;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Largest record accepted when reading the log back; anything claiming more is corruption.
const RECORD_BYTES_MAX: usize = 16 * 1024 * 1024;

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
/// `[u32 length][u32 crc32c][json]`, fsynced on every append. A torn tail is cut on open.
pub struct FileMetadataLog {
    path: PathBuf,
    file: File,
    next_offset: i64,
}

impl std::fmt::Debug for FileMetadataLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileMetadataLog")
            .field("path", &self.path)
            .field("next_offset", &self.next_offset)
            .finish()
    }
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
        })
    }

    fn io_err(&self, source: std::io::Error) -> MetadataError {
        MetadataError::Io {
            path: self.path.display().to_string(),
            source,
        }
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
        while data.len() - pos >= 8 {
            let len = u32::from_be_bytes([data[pos], data[pos + 1], data[pos + 2], data[pos + 3]])
                as usize;
            let crc =
                u32::from_be_bytes([data[pos + 4], data[pos + 5], data[pos + 6], data[pos + 7]]);
            if len > RECORD_BYTES_MAX || data.len() - pos - 8 < len {
                break;
            }
            let body = &data[pos + 8..pos + 8 + len];
            if crc32c::crc32c(body) != crc {
                break;
            }
            match serde_json::from_slice::<MetadataRecord>(body) {
                Ok(r) => records.push(r),
                Err(_) => break,
            }
            pos += 8 + len;
        }
        if pos < data.len() {
            tracing::warn!(
                path = %self.path.display(),
                valid_bytes = pos,
                file_bytes = data.len(),
                "metadata log has a torn or corrupt tail; truncating it"
            );
            self.file.set_len(pos as u64).map_err(|e| self.io_err(e))?;
            self.file.sync_all().map_err(|e| self.io_err(e))?;
        }
        self.next_offset = records.len() as i64;
        Ok(records)
    }

    fn append(&mut self, records: &[MetadataRecord]) -> Result<i64, MetadataError> {
        let mut buf = Vec::new();
        for r in records {
            let body = serde_json::to_vec(r).map_err(|e| MetadataError::Encode(e.to_string()))?;
            buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
            buf.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
            buf.extend_from_slice(&body);
        }
        self.file.write_all(&buf).map_err(|e| self.io_err(e))?;
        self.file.sync_data().map_err(|e| self.io_err(e))?;
        self.next_offset += records.len() as i64;
        Ok(self.next_offset - 1)
    }
}
