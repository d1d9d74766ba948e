//! The 61-byte record batch v2 header: decoding, validation, and in-place patching.
//!
//! Layout (big-endian): base_offset i64 @0, batch_length i32 @8, partition_leader_epoch i32
//! @12, magic i8 @16, crc u32 @17, attributes i16 @21, last_offset_delta i32 @23,
//! base_timestamp i64 @27, max_timestamp i64 @35, producer_id i64 @43, producer_epoch i16
//! @51, base_sequence i32 @53, records_count i32 @57, records @61. The CRC (CRC32C) covers
//! attributes..end, so the base offset and leader epoch can be patched without recomputing it.

use crate::codec::Compression;
use crate::error::RecordError;

/// Size of the batch header, up to the first record.
pub const HEADER_LEN: usize = 61;
/// Bytes before `batch_length` counts: base offset + the length field itself.
pub const LOG_OVERHEAD: usize = 12;
/// Alias kept for readers who know Kafka's `RECORD_BATCH_OVERHEAD`.
pub const BATCH_OVERHEAD: usize = HEADER_LEN;
/// Position of `batch_length`.
pub const LENGTH_OFFSET: usize = 8;
/// Position of the CRC field; the checksummed bytes start 4 bytes later.
pub const CRC_OFFSET: usize = 17;
/// The only batch format accepted.
pub const MAGIC_V2: i8 = 2;
/// `producer_id` of a batch from a non-idempotent producer.
pub const NO_PRODUCER_ID: i64 = -1;
/// A record or batch without a timestamp.
pub const NO_TIMESTAMP: i64 = -1;
/// `base_sequence` of a batch without sequence numbers.
pub const NO_SEQUENCE: i32 = -1;

const EPOCH_OFFSET: usize = 12;
const MAGIC_OFFSET: usize = 16;
const ATTRIBUTES_OFFSET: usize = 21;
const LAST_OFFSET_DELTA_OFFSET: usize = 23;
const BASE_TIMESTAMP_OFFSET: usize = 27;
const MAX_TIMESTAMP_OFFSET: usize = 35;
const PRODUCER_ID_OFFSET: usize = 43;
const PRODUCER_EPOCH_OFFSET: usize = 51;
const BASE_SEQUENCE_OFFSET: usize = 53;
const RECORDS_COUNT_OFFSET: usize = 57;

const TIMESTAMP_TYPE_BIT: i16 = 1 << 3;
const TRANSACTIONAL_BIT: i16 = 1 << 4;
const CONTROL_BIT: i16 = 1 << 5;
const DELETE_HORIZON_BIT: i16 = 1 << 6;

/// Which clock a batch's timestamps come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampKind {
    CreateTime,
    LogAppendTime,
}

/// The decoded fields of a v2 batch header. Decoding reads the 61 header bytes in place
/// (no copy of the batch, no allocation); the struct itself is a small `Copy` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    /// Kafka's "first timestamp" (or the delete horizon when that attribute bit is set).
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a)
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

impl BatchHeader {
    /// Decodes the header fields of `buf` without checking the CRC or the length.
    /// Fails only when fewer than 61 bytes are present.
    pub fn parse(buf: &[u8]) -> Result<BatchHeader, RecordError> {
        if buf.len() < HEADER_LEN {
            return Err(RecordError::corrupt(format!(
                "batch of {} bytes is shorter than the {HEADER_LEN}-byte header",
                buf.len()
            )));
        }
        Ok(BatchHeader {
            base_offset: be_i64(buf, 0),
            batch_length: be_i32(buf, LENGTH_OFFSET),
            partition_leader_epoch: be_i32(buf, EPOCH_OFFSET),
            magic: buf[MAGIC_OFFSET] as i8,
            crc: be_i32(buf, CRC_OFFSET) as u32,
            attributes: be_i16(buf, ATTRIBUTES_OFFSET),
            last_offset_delta: be_i32(buf, LAST_OFFSET_DELTA_OFFSET),
            base_timestamp: be_i64(buf, BASE_TIMESTAMP_OFFSET),
            max_timestamp: be_i64(buf, MAX_TIMESTAMP_OFFSET),
            producer_id: be_i64(buf, PRODUCER_ID_OFFSET),
            producer_epoch: be_i16(buf, PRODUCER_EPOCH_OFFSET),
            base_sequence: be_i32(buf, BASE_SEQUENCE_OFFSET),
            records_count: be_i32(buf, RECORDS_COUNT_OFFSET),
        })
    }

    /// Total size of the batch in bytes, including base offset and length fields.
    pub fn total_size(&self) -> usize {
        (self.batch_length.max(0) as usize) + LOG_OVERHEAD
    }

    /// The offset of the last record (base offset + last offset delta).
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
    }

    /// The offset right after this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }

    /// The compression codec id (attribute bits 0-2), which may be an unknown id.
    pub fn compression_id(&self) -> u8 {
        (self.attributes & 0x07) as u8
    }

    /// The compression codec, or an error for an unknown id.
    pub fn compression(&self) -> Result<Compression, RecordError> {
        Compression::from_id(self.compression_id())
    }

    pub fn timestamp_type(&self) -> TimestampKind {
        if self.attributes & TIMESTAMP_TYPE_BIT != 0 {
            TimestampKind::LogAppendTime
        } else {
            TimestampKind::CreateTime
        }
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }

    /// Whether `base_timestamp` holds a compaction delete horizon (KIP-534).
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes & DELETE_HORIZON_BIT != 0
    }

    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }

    /// The sequence number of the last record, wrapping at i32::MAX as Kafka does.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return NO_SEQUENCE;
        }
        let last = i64::from(self.base_sequence) + i64::from(self.last_offset_delta);
        if last > i64::from(i32::MAX) {
            (last - i64::from(i32::MAX) - 1) as i32
        } else {
            last as i32
        }
    }
}

/// Builds attribute bits; used by the builder.
pub(crate) fn attributes(
    compression: Compression,
    ts: TimestampKind,
    transactional: bool,
    control: bool,
) -> i16 {
    let mut a = compression.id() as i16;
    if ts == TimestampKind::LogAppendTime {
        a |= TIMESTAMP_TYPE_BIT;
    }
    if transactional {
        a |= TRANSACTIONAL_BIT;
    }
    if control {
        a |= CONTROL_BIT;
    }
    a
}

fn check_len(buf: &[u8]) -> Result<(), RecordError> {
    if buf.len() < HEADER_LEN {
        Err(RecordError::corrupt("buffer shorter than a batch header"))
    } else {
        Ok(())
    }
}

/// Writes `base_offset` into the batch header (not covered by the CRC).
pub fn set_base_offset(buf: &mut [u8], base_offset: i64) -> Result<(), RecordError> {
    check_len(buf)?;
    buf[0..8].copy_from_slice(&base_offset.to_be_bytes());
    Ok(())
}

/// Writes `partition_leader_epoch` into the batch header (not covered by the CRC).
pub fn set_partition_leader_epoch(buf: &mut [u8], epoch: i32) -> Result<(), RecordError> {
    check_len(buf)?;
    buf[EPOCH_OFFSET..EPOCH_OFFSET + 4].copy_from_slice(&epoch.to_be_bytes());
    Ok(())
}

/// Marks the batch LogAppendTime with `max_timestamp = now_ms` and recomputes the CRC,
/// since both fields are covered by it.
pub fn set_log_append_time(buf: &mut [u8], now_ms: i64) -> Result<(), RecordError> {
    check_len(buf)?;
    let attrs = be_i16(buf, ATTRIBUTES_OFFSET) | TIMESTAMP_TYPE_BIT;
    buf[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attrs.to_be_bytes());
    buf[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8].copy_from_slice(&now_ms.to_be_bytes());
    recompute_crc(buf)
}

/// Like [`set_log_append_time`] for a batch held as its 61-byte header plus the record bytes
/// that follow, so the broker can patch a batch without copying it: only `header` changes,
/// and its CRC is computed over header attributes..end followed by `records`.
pub fn set_log_append_time_split(
    header: &mut [u8],
    records: &[u8],
    now_ms: i64,
) -> Result<(), RecordError> {
    if header.len() != HEADER_LEN {
        return Err(RecordError::corrupt("header slice is not 61 bytes"));
    }
    let attrs = be_i16(header, ATTRIBUTES_OFFSET) | TIMESTAMP_TYPE_BIT;
    header[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attrs.to_be_bytes());
    header[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&header[ATTRIBUTES_OFFSET..]), records);
    header[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// Recomputes the CRC32C over attributes..end and stores it.
pub fn recompute_crc(buf: &mut [u8]) -> Result<(), RecordError> {
    check_len(buf)?;
    let crc = crc32c::crc32c(&buf[ATTRIBUTES_OFFSET..]);
    buf[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// Why Kafka's batch reader (`ByteBufferLogInputStream.nextBatchSize`) throws on the first
/// batch of `buf`, in its words (a Produce answer carries them): a batch length below the
/// smallest record overhead of any magic (14, magic 0's) or a magic byte outside 0..=2.
/// Bytes too short to hold the length or the magic are no batch at all there, not an error
/// (`None`). Kafka's Produce handler reads every partition's first batch this way before any
/// other check.
pub fn first_batch_unreadable(buf: &[u8]) -> Option<String> {
    const SMALLEST_RECORD_OVERHEAD: i32 = 14;
    let len = buf.get(LENGTH_OFFSET..LENGTH_OFFSET + 4)?;
    let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
    if len < SMALLEST_RECORD_OVERHEAD {
        return Some(format!(
            "Record size {len} is less than the minimum record overhead ({SMALLEST_RECORD_OVERHEAD})"
        ));
    }
    let magic = i8::from_be_bytes([*buf.get(MAGIC_OFFSET)?]);
    (!(0..=MAGIC_V2).contains(&magic)).then(|| format!("Invalid magic found in record: {magic}"))
}

/// Checks everything that makes `buf` one well-formed v2 batch, as stored in a log: magic,
/// length equal to the buffer, CRC, non-negative record count and a last offset delta that
/// is not below `count - 1`. Compaction may leave fewer records than the offset span, so
/// this does not demand equality. No decompression.
pub fn validate_batch_structure(buf: &[u8]) -> Result<BatchHeader, RecordError> {
    if buf.len() > MAGIC_OFFSET {
        let magic = buf[MAGIC_OFFSET] as i8;
        if (0..MAGIC_V2).contains(&magic) {
            return Err(RecordError::UnsupportedMagic(magic));
        }
        if magic != MAGIC_V2 {
            return Err(RecordError::corrupt(format!("unknown magic {magic}")));
        }
    }
    let h = BatchHeader::parse(buf)?;
    if h.batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32 {
        return Err(RecordError::corrupt(format!(
            "batch length {} is below the header size",
            h.batch_length
        )));
    }
    if h.total_size() != buf.len() {
        return Err(RecordError::corrupt(format!(
            "batch length {} does not match the {} bytes present",
            h.batch_length,
            buf.len()
        )));
    }
    let crc = crc32c::crc32c(&buf[ATTRIBUTES_OFFSET..]);
    if crc != h.crc {
        return Err(RecordError::corrupt(format!(
            "CRC mismatch: stored {:#010x}, computed {crc:#010x}",
            h.crc
        )));
    }
    if h.records_count < 0 {
        return Err(RecordError::InvalidRecord(format!(
            "negative record count {}",
            h.records_count
        )));
    }
    if h.last_offset_delta < 0 || i64::from(h.last_offset_delta) < i64::from(h.records_count) - 1 {
        return Err(RecordError::InvalidRecord(format!(
            "last offset delta {} cannot hold {} records",
            h.last_offset_delta, h.records_count
        )));
    }
    h.compression()?;
    Ok(h)
}

/// Validates one batch as a producer sent it: the structural checks of
/// [`validate_batch_structure`], the size limit `max_message_bytes`, and Kafka's produce
/// rules (at least one record, `last_offset_delta == records_count - 1`, a sequence number
/// when a producer id is set, except on control batches). No decompression.
pub fn validate_batch(buf: &[u8], max_message_bytes: usize) -> Result<BatchHeader, RecordError> {
    // Size first, as Kafka does, so a huge batch is MESSAGE_TOO_LARGE even if also corrupt.
    if buf.len() > max_message_bytes {
        return Err(RecordError::TooLarge {
            size: buf.len(),
            max: max_message_bytes,
        });
    }
    let h = validate_batch_structure(buf)?;
    if h.records_count == 0 {
        return Err(RecordError::InvalidRecord("batch has no records".into()));
    }
    if i64::from(h.last_offset_delta) != i64::from(h.records_count) - 1 {
        return Err(RecordError::InvalidRecord(format!(
            "last offset delta {} does not match record count {}",
            h.last_offset_delta, h.records_count
        )));
    }
    // Control batches (transaction markers) carry a producer id but no sequence.
    if h.has_producer_id() && h.base_sequence < 0 && !h.is_control() {
        return Err(RecordError::InvalidRecord(
            "idempotent batch without a base sequence".into(),
        ));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{BatchBuilder, NewRecord};
    use model::ErrorCode;

    fn sample() -> Vec<u8> {
        let mut b = BatchBuilder::new(Compression::None);
        for i in 0..3 {
            b.push(NewRecord::value(format!("v{i}")).timestamp(1000 + i));
        }
        b.build().unwrap().to_vec()
    }

    #[test]
    fn kafkas_batch_reader_refuses_an_unknown_magic_or_a_tiny_length() {
        let good = sample();
        assert_eq!(first_batch_unreadable(&good), None);
        // Too short to hold a length or a magic: no batch at all, not an error.
        assert_eq!(first_batch_unreadable(&good[..11]), None);
        assert_eq!(first_batch_unreadable(&good[..16]), None);
        for (magic, unreadable) in [(0, false), (1, false), (2, false), (3, true), (-1, true)] {
            let mut b = good.clone();
            b[MAGIC_OFFSET] = magic as u8;
            let why = first_batch_unreadable(&b);
            assert_eq!(why.is_some(), unreadable, "magic {magic}");
            if unreadable {
                let expected = format!("Invalid magic found in record: {magic}");
                assert_eq!(why.as_deref(), Some(expected.as_str()));
            }
        }
        for (len, unreadable) in [(13, true), (14, false), (-1, true)] {
            let mut b = good.clone();
            b[LENGTH_OFFSET..LENGTH_OFFSET + 4].copy_from_slice(&i32::to_be_bytes(len));
            let why = first_batch_unreadable(&b);
            assert_eq!(why.is_some(), unreadable, "length {len}");
            if unreadable {
                let expected =
                    format!("Record size {len} is less than the minimum record overhead (14)");
                assert_eq!(why.as_deref(), Some(expected.as_str()));
            }
        }
    }

    #[test]
    fn valid_batch_passes_and_decodes() {
        let buf = sample();
        let h = validate_batch(&buf, 1 << 20).unwrap();
        assert_eq!(h.records_count, 3);
        assert_eq!(h.last_offset_delta, 2);
        assert_eq!(h.base_timestamp, 1000);
        assert_eq!(h.max_timestamp, 1002);
        assert_eq!(h.magic, 2);
        assert_eq!(h.total_size(), buf.len());
    }

    #[test]
    fn every_failure_has_its_kafka_code() {
        let buf = sample();
        assert_eq!(
            validate_batch(&buf, 10).unwrap_err().error_code(),
            ErrorCode::MessageTooLarge
        );
        let mut bad = buf.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(
            validate_batch(&bad, 1 << 20).unwrap_err().error_code(),
            ErrorCode::CorruptMessage
        );
        let mut old = buf.clone();
        old[MAGIC_OFFSET] = 1;
        assert_eq!(
            validate_batch(&old, 1 << 20).unwrap_err().error_code(),
            ErrorCode::UnsupportedForMessageFormat
        );
        assert_eq!(
            validate_batch(&buf[..buf.len() - 1], 1 << 20)
                .unwrap_err()
                .error_code(),
            ErrorCode::CorruptMessage
        );
        let mut count = buf.clone();
        count[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4]
            .copy_from_slice(&i32::MAX.to_be_bytes());
        recompute_crc(&mut count).unwrap();
        assert_eq!(
            validate_batch(&count, 1 << 20).unwrap_err().error_code(),
            ErrorCode::InvalidRecord
        );
        let mut neg = buf.clone();
        neg[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&(-1i32).to_be_bytes());
        recompute_crc(&mut neg).unwrap();
        assert_eq!(
            validate_batch(&neg, 1 << 20).unwrap_err().error_code(),
            ErrorCode::InvalidRecord
        );
    }

    #[test]
    fn patches_keep_the_batch_valid() {
        let mut buf = sample();
        set_base_offset(&mut buf, 42).unwrap();
        set_partition_leader_epoch(&mut buf, 7).unwrap();
        set_log_append_time(&mut buf, 99_999).unwrap();
        let h = validate_batch(&buf, 1 << 20).unwrap();
        assert_eq!(h.base_offset, 42);
        assert_eq!(h.last_offset(), 44);
        assert_eq!(h.partition_leader_epoch, 7);
        assert_eq!(h.max_timestamp, 99_999);
        assert_eq!(h.timestamp_type(), TimestampKind::LogAppendTime);
        let mut split = sample();
        let (head, body) = split.split_at_mut(HEADER_LEN);
        set_log_append_time_split(head, body, 99_999).unwrap();
        set_base_offset(&mut split, 42).unwrap();
        set_partition_leader_epoch(&mut split, 7).unwrap();
        assert_eq!(split, buf);
    }

    #[test]
    fn last_sequence_wraps() {
        let mut buf = sample();
        buf[BASE_SEQUENCE_OFFSET..BASE_SEQUENCE_OFFSET + 4]
            .copy_from_slice(&(i32::MAX - 1).to_be_bytes());
        let h = BatchHeader::parse(&buf).unwrap();
        assert_eq!(h.last_sequence(), 0);
    }
}
