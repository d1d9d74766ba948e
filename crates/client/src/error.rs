//! The client's error type: Kafka error codes are kept, and each error says if it is retriable.

use model::ErrorCode;

/// Everything a client call can fail with.
///
/// ```
/// use client::{Error, ErrorCode};
/// let e = Error::broker(ErrorCode::NotLeaderOrFollower, None);
/// assert!(e.is_retriable());
/// assert_eq!(e.code(), Some(ErrorCode::NotLeaderOrFollower));
/// ```
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The broker answered with a Kafka error code; shown with the broker's message, or the
    /// error's default text where it sent none (as Kafka often does).
    #[error("{code}: {}", code.message_or_default(message.as_deref().unwrap_or_default()))]
    Broker {
        code: ErrorCode,
        message: Option<String>,
    },
    /// A TCP connection could not be opened.
    #[error("connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    /// An open connection failed; requests in flight on it failed with it.
    #[error("connection to {addr} lost: {reason}")]
    Disconnected { addr: String, reason: String },
    /// No response within the request timeout, or a delivery timeout expired.
    #[error("timed out after {0} ms")]
    Timeout(u64),
    /// A response could not be decoded (or was too large, or for the wrong request).
    #[error("malformed response: {0}")]
    Protocol(String),
    /// The broker speaks no version of this API that the client fills correctly.
    #[error("broker supports no usable version of {0}")]
    UnsupportedVersion(String),
    /// A configuration value or argument is invalid.
    #[error("invalid argument: {0}")]
    Config(String),
    /// Record batch encoding or decoding failed.
    #[error("records: {0}")]
    Record(#[from] record::RecordError),
    /// The producer, consumer or client was closed.
    #[error("client closed")]
    Closed,
}

impl Error {
    pub fn broker(code: ErrorCode, message: Option<String>) -> Error {
        Error::Broker { code, message }
    }

    /// `Ok(())` for `ErrorCode::None`, else the error.
    pub fn check(code: i16) -> Result<(), Error> {
        let code = ErrorCode::from_code(code);
        if code.is_ok() {
            Ok(())
        } else {
            Err(Error::broker(code, None))
        }
    }

    /// Like [`Error::check`], with the broker's error message.
    pub fn check_msg(code: i16, message: Option<&str>) -> Result<(), Error> {
        let code = ErrorCode::from_code(code);
        if code.is_ok() {
            Ok(())
        } else {
            Err(Error::broker(code, message.map(str::to_owned)))
        }
    }

    /// The Kafka error code, when the broker sent one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Broker { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether retrying the same call may succeed (after a metadata refresh or a backoff).
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Broker { code, .. } => code.is_retriable(),
            Error::Connect { .. } | Error::Disconnected { .. } | Error::Timeout(_) => true,
            _ => false,
        }
    }

    /// Whether the error means our view of partition leadership is stale.
    pub fn needs_metadata_refresh(&self) -> bool {
        matches!(
            self.code(),
            Some(
                ErrorCode::NotLeaderOrFollower
                    | ErrorCode::UnknownTopicOrPartition
                    | ErrorCode::LeaderNotAvailable
                    | ErrorCode::FencedLeaderEpoch
                    | ErrorCode::UnknownLeaderEpoch
                    | ErrorCode::UnknownTopicId
            )
        ) || matches!(self, Error::Connect { .. } | Error::Disconnected { .. })
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_error_shows_its_message_or_the_default_text() {
        let e = Error::broker(ErrorCode::UnknownTopicOrPartition, Some("Topic t?".into()));
        assert_eq!(e.to_string(), "UNKNOWN_TOPIC_OR_PARTITION (3): Topic t?");
        // Kafka often sends no message (null, or ""): the error's own text stands in.
        for message in [None, Some(String::new())] {
            let e = Error::broker(ErrorCode::NoReassignmentInProgress, message);
            assert_eq!(
                e.to_string(),
                "NO_REASSIGNMENT_IN_PROGRESS (85): No partition reassignment is in progress."
            );
        }
    }
}
