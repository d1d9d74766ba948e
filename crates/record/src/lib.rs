//! Kafka record batch v2 (magic 2): header view, validation, splitting, codecs, records, building.
//!
//! Everything here decodes untrusted bytes (from the network or the disk) into `Result`s:
//! lengths are checked against the buffer and against caller limits before anything is
//! allocated, and decompression output is capped.

// Tests may unwrap: a panic there is a test failure, which is the point.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod builder;
mod codec;
mod control;
mod error;
mod header;
mod records;
mod split;
mod validate;
mod varint;

pub use builder::{BatchBuilder, NewRecord};
pub use codec::{compress, decompress, Compression};
pub use control::{
    build_end_txn_marker, control_key, parse_end_txn_marker, EndTxnMarker, CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
};
pub use error::RecordError;
pub use header::{
    first_batch_unreadable, recompute_crc, set_base_offset, set_log_append_time,
    set_log_append_time_split, set_partition_leader_epoch, validate_batch,
    validate_batch_structure, BatchHeader, TimestampKind, BATCH_OVERHEAD, CRC_OFFSET, HEADER_LEN,
    LENGTH_OFFSET, LOG_OVERHEAD, MAGIC_V2, NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP,
};
pub use records::{decode_records, Record, RecordHeader, RecordIter};
pub use split::{split_batches, BatchSplitter};
pub use validate::{validate_records, RecordRules, RecordsSummary, DECOMPRESSED_BATCH_BYTES_MAX};
pub use varint::{read_varint, read_varlong, varint_len, varlong_len, write_varint, write_varlong};
