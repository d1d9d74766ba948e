//! The record crate's error type and its mapping to Kafka error codes.

use model::ErrorCode;

/// Why a batch or record could not be decoded, validated or built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Bytes that are not a well-formed batch: truncated, bad length, bad CRC, bad varint.
    #[error("corrupt record batch: {0}")]
    Corrupt(String),
    /// A batch larger than `max.message.bytes` (or a decompression limit).
    #[error("record batch of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge { size: usize, max: usize },
    /// Well-formed bytes that break a rule (count/offset mismatch, negative count...).
    #[error("invalid record batch: {0}")]
    InvalidRecord(String),
    /// Magic 0 or 1: message formats this broker does not accept.
    #[error("unsupported record batch magic {0}")]
    UnsupportedMagic(i8),
    /// A compression codec id outside 0..=4.
    #[error("unknown compression codec id {0}")]
    UnknownCompression(u8),
    /// The codec failed to encode (an I/O error inside the encoder).
    #[error("compression failed: {0}")]
    Compress(String),
}

impl RecordError {
    /// The Kafka error a producer should receive for this failure.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            RecordError::Corrupt(_) | RecordError::UnknownCompression(_) => {
                ErrorCode::CorruptMessage
            }
            RecordError::TooLarge { .. } => ErrorCode::MessageTooLarge,
            RecordError::InvalidRecord(_) => ErrorCode::InvalidRecord,
            RecordError::UnsupportedMagic(_) => ErrorCode::UnsupportedForMessageFormat,
            RecordError::Compress(_) => ErrorCode::UnknownServerError,
        }
    }

    pub(crate) fn corrupt(msg: impl Into<String>) -> RecordError {
        RecordError::Corrupt(msg.into())
    }
}
