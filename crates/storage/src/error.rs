//! Storage errors, and their mapping to the Kafka error a client should see.

use std::path::PathBuf;

use model::ErrorCode;
use record::RecordError;

/// A failure of the log itself: I/O, an offline log, bad arguments.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A previous fsync or write failed; the log refuses all further work (never retried).
    #[error("log {0} is offline after a failed write or fsync")]
    Offline(PathBuf),
    #[error("offset {offset} is outside the log [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    /// Bytes on disk that do not decode; the log is not changed by the call that saw them.
    #[error("corrupt data in {path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

impl StorageError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StorageError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub fn error_code(&self) -> ErrorCode {
        match self {
            StorageError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            StorageError::Corrupt { .. } => ErrorCode::CorruptMessage,
            StorageError::Io { .. } | StorageError::Offline(_) => ErrorCode::KafkaStorageError,
        }
    }
}

/// Why an append was refused. Nothing of a refused request reaches the log.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("request of {size} bytes exceeds segment.bytes {max}")]
    RecordListTooLarge { size: usize, max: usize },
    #[error("timestamp {timestamp} is outside the allowed range around {now}")]
    InvalidTimestamp { timestamp: i64, now: i64 },
    #[error("producer {producer_id}: epoch {epoch} is older than the current epoch {current}")]
    InvalidProducerEpoch {
        producer_id: i64,
        epoch: i16,
        current: i16,
    },
    #[error("producer {producer_id}: sequence {got} is out of order, expected {expected}")]
    OutOfOrderSequence {
        producer_id: i64,
        expected: i32,
        got: i32,
    },
    #[error("producer {producer_id}: transaction marker from coordinator epoch {coordinator_epoch} is older than {current}")]
    CoordinatorFenced {
        producer_id: i64,
        coordinator_epoch: i32,
        current: i32,
    },
    #[error("producer {producer_id} has an open transaction: only transactional writes until its marker")]
    InvalidTxnState { producer_id: i64 },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl AppendError {
    pub fn error_code(&self) -> ErrorCode {
        match self {
            AppendError::Record(e) => e.error_code(),
            AppendError::RecordListTooLarge { .. } => ErrorCode::RecordListTooLarge,
            AppendError::InvalidTimestamp { .. } => ErrorCode::InvalidTimestamp,
            AppendError::InvalidProducerEpoch { .. } => ErrorCode::InvalidProducerEpoch,
            AppendError::OutOfOrderSequence { .. } => ErrorCode::OutOfOrderSequenceNumber,
            AppendError::CoordinatorFenced { .. } => ErrorCode::TransactionCoordinatorFenced,
            AppendError::InvalidTxnState { .. } => ErrorCode::InvalidTxnState,
            AppendError::Storage(e) => e.error_code(),
        }
    }
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("offset {offset} is outside the log [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl ReadError {
    pub fn error_code(&self) -> ErrorCode {
        match self {
            ReadError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            ReadError::Storage(e) => e.error_code(),
        }
    }
}
