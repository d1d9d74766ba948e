//! Full validation of the records inside a batch, as Kafka's `LogValidator` does at produce:
//! every record of every batch is walked, so a batch whose CRC is valid but whose records are
//! garbage is refused before it is acknowledged (a consumer would otherwise stop at it for
//! ever).
//!
//! Cost model: uncompressed records are walked in place (varints are read, keys, values and
//! headers are skipped by length); compressed records are stream-decompressed through a
//! fixed 16 KiB stack buffer and walked the same way, so the batch is never materialised
//! (raw, unframed snappy is the exception: its single block must be decoded whole, within the
//! same bound). Nothing is allocated per record and no record byte is copied out.
//!
//! Which error is which follows Kafka: a record whose structure does not add up (a length
//! that disagrees with its fields, a negative header count, records missing or left over, an
//! offset delta out of sequence) is INVALID_RECORD, like Kafka's `InvalidRecordException`;
//! so is a null key on a compacted topic. A compressed payload that does not decompress is
//! CORRUPT_MESSAGE (Kafka answers UNKNOWN_SERVER_ERROR there, from a generic
//! `KafkaException`; CORRUPT_MESSAGE is its code for bytes that do not decode). More than
//! `decompressed_max_bytes` of records is MESSAGE_TOO_LARGE.
//!
//! Stricter than Kafka in one place: record offset deltas must count 0, 1, 2... (Kafka
//! rewrites a compressed batch whose inner offsets are off, and does not look at them in an
//! uncompressed one); consumers compute offsets from them.

use std::io::Read;

use crate::codec::Compression;
use crate::error::RecordError;
use crate::header::{BatchHeader, TimestampKind, HEADER_LEN};

/// Largest decompressed size of one batch accepted at produce, and the most the cleaner and
/// lookups decompress: anything accepted can later be compacted.
pub const DECOMPRESSED_BATCH_BYTES_MAX: usize = 64 << 20;

/// zstd frames may not ask for a window larger than the decompressed bound (2^26 = 64 MiB):
/// a hostile frame header can't make the decoder reserve more.
const ZSTD_WINDOW_LOG_MAX: u32 = 26;

/// Bytes decompressed per read while walking a compressed batch.
const STREAM_BUF_BYTES: usize = 16 * 1024;

/// What the records of a batch must satisfy beyond their structure.
#[derive(Clone, Copy, Debug)]
pub struct RecordRules {
    /// Compacted topics: every record needs a key (Kafka: INVALID_RECORD).
    pub key_required: bool,
    /// Most bytes the records may take once decompressed.
    pub decompressed_max_bytes: usize,
}

impl Default for RecordRules {
    fn default() -> Self {
        RecordRules {
            key_required: false,
            decompressed_max_bytes: DECOMPRESSED_BATCH_BYTES_MAX,
        }
    }
}

/// What the walk learnt about a valid batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordsSummary {
    /// Smallest and largest record timestamp (CreateTime batches; records with timestamp -1
    /// are not counted, as in Kafka). `None` when no record has one.
    pub timestamps: Option<(i64, i64)>,
    /// Size of the records section once decompressed.
    pub records_bytes: usize,
}

/// Walks every record of `batch` (whose header `h` passed [`crate::validate_batch`]) and
/// checks it as Kafka's log validator does. See the module docs for the errors.
pub fn validate_records(
    batch: &[u8],
    h: &BatchHeader,
    rules: &RecordRules,
) -> Result<RecordsSummary, RecordError> {
    let body = batch
        .get(HEADER_LEN..)
        .ok_or_else(|| RecordError::corrupt("batch shorter than its header"))?;
    let codec = h.compression()?;
    if codec == Compression::None {
        if body.len() > rules.decompressed_max_bytes {
            return Err(RecordError::TooLarge {
                size: body.len(),
                max: rules.decompressed_max_bytes,
            });
        }
        // The fast walk only says yes or no; the detailed one explains a no.
        if let Some(summary) = walk_slice(body, h, rules) {
            return Ok(summary);
        }
        return walk(&mut SliceSource { buf: body, pos: 0 }, h, rules);
    }
    let mut buf = [0u8; STREAM_BUF_BYTES];
    let limit = rules.decompressed_max_bytes;
    let codec_err = |e: std::io::Error| RecordError::corrupt(format!("{codec:?}: {e}"));
    match codec {
        Compression::None => unreachable!("handled above"),
        Compression::Gzip => {
            let r = flate2::bufread::GzDecoder::new(body);
            walk(&mut StreamSource::new(r, &mut buf, limit), h, rules)
        }
        Compression::Lz4 => {
            let r = lz4_flex::frame::FrameDecoder::new(body);
            walk(&mut StreamSource::new(r, &mut buf, limit), h, rules)
        }
        Compression::Zstd => {
            let mut r = zstd::stream::read::Decoder::with_buffer(body).map_err(codec_err)?;
            r.window_log_max(ZSTD_WINDOW_LOG_MAX).map_err(codec_err)?;
            walk(&mut StreamSource::new(r, &mut buf, limit), h, rules)
        }
        Compression::Snappy => {
            let r = crate::codec::SnappyReader::new(body, limit);
            walk(&mut StreamSource::new(r, &mut buf, limit), h, rules)
        }
    }
}

/// Where the walker reads decompressed record bytes from.
trait Source {
    /// The next byte, or None at the end of the records.
    fn byte(&mut self) -> Result<Option<u8>, RecordError>;
    /// Skips `n` bytes; false if the records end first.
    fn skip(&mut self, n: usize) -> Result<bool, RecordError>;
    /// Bytes consumed so far.
    fn pos(&self) -> usize;
    /// Whether every byte has been consumed.
    fn at_end(&mut self) -> Result<bool, RecordError>;
    /// The bytes available without reading more, for decoding a varint in place.
    fn peek(&self) -> &[u8];
    /// Consumes `n` bytes of what `peek` returned.
    fn consume(&mut self, n: usize);
}

/// Decodes an unsigned LEB128 value of at most `max_bytes` bytes from the start of `buf`:
/// Some((value, length)), or None when `buf` ends first.
#[inline(always)]
fn decode_uvarint(buf: &[u8], max_bytes: usize) -> Option<Result<(u64, usize), RecordError>> {
    let n = buf.len().min(max_bytes);
    let mut value = 0u64;
    let mut i = 0;
    while i < n {
        let b = buf[i];
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(Ok((value, i + 1)));
        }
        i += 1;
    }
    if buf.len() >= max_bytes {
        return Some(Err(invalid(
            "Found invalid record structure: varint too long",
        )));
    }
    None
}

struct SliceSource<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Source for SliceSource<'_> {
    #[inline]
    fn byte(&mut self) -> Result<Option<u8>, RecordError> {
        let b = self.buf.get(self.pos).copied();
        self.pos += usize::from(b.is_some());
        Ok(b)
    }

    #[inline]
    fn skip(&mut self, n: usize) -> Result<bool, RecordError> {
        if n > self.buf.len() - self.pos {
            self.pos = self.buf.len();
            return Ok(false);
        }
        self.pos += n;
        Ok(true)
    }

    fn pos(&self) -> usize {
        self.pos
    }

    fn at_end(&mut self) -> Result<bool, RecordError> {
        Ok(self.pos == self.buf.len())
    }

    #[inline(always)]
    fn peek(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    #[inline]
    fn consume(&mut self, n: usize) {
        self.pos += n;
    }
}

/// Decompressed bytes through a fixed window; fails once more than `limit` bytes come out.
struct StreamSource<'b, R> {
    reader: R,
    buf: &'b mut [u8],
    start: usize,
    end: usize,
    /// Bytes handed out (consumed) before `buf[start]`.
    consumed: usize,
    /// Bytes read from the decoder so far.
    produced: usize,
    limit: usize,
    eof: bool,
}

impl<'b, R: Read> StreamSource<'b, R> {
    fn new(reader: R, buf: &'b mut [u8], limit: usize) -> Self {
        StreamSource {
            reader,
            buf,
            start: 0,
            end: 0,
            consumed: 0,
            produced: 0,
            limit,
            eof: false,
        }
    }

    /// Refills the window when it is empty; false at the end of the stream.
    fn fill(&mut self) -> Result<bool, RecordError> {
        if self.start < self.end {
            return Ok(true);
        }
        if self.eof {
            return Ok(false);
        }
        let n = loop {
            match self.reader.read(self.buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if let Some(l) = e
                        .get_ref()
                        .and_then(|x| x.downcast_ref::<crate::codec::LimitExceeded>())
                    {
                        return Err(RecordError::TooLarge {
                            size: l.size,
                            max: l.max,
                        });
                    }
                    return Err(RecordError::corrupt(format!("decompression failed: {e}")));
                }
            }
        };
        if n == 0 {
            self.eof = true;
            return Ok(false);
        }
        self.produced = self.produced.saturating_add(n);
        if self.produced > self.limit {
            return Err(RecordError::TooLarge {
                size: self.produced,
                max: self.limit,
            });
        }
        self.start = 0;
        self.end = n;
        Ok(true)
    }
}

impl<R: Read> Source for StreamSource<'_, R> {
    #[inline]
    fn byte(&mut self) -> Result<Option<u8>, RecordError> {
        if !self.fill()? {
            return Ok(None);
        }
        let b = self.buf[self.start];
        self.start += 1;
        self.consumed += 1;
        Ok(Some(b))
    }

    fn skip(&mut self, mut n: usize) -> Result<bool, RecordError> {
        while n > 0 {
            if !self.fill()? {
                return Ok(false);
            }
            let take = n.min(self.end - self.start);
            self.start += take;
            self.consumed += take;
            n -= take;
        }
        Ok(true)
    }

    fn pos(&self) -> usize {
        self.consumed
    }

    fn at_end(&mut self) -> Result<bool, RecordError> {
        Ok(!self.fill()?)
    }

    #[inline(always)]
    fn peek(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    #[inline]
    fn consume(&mut self, n: usize) {
        self.start += n;
        self.consumed += n;
    }
}

fn invalid(msg: impl Into<String>) -> RecordError {
    RecordError::InvalidRecord(msg.into())
}

#[inline(always)]
fn varint<S: Source>(src: &mut S) -> Result<i32, RecordError> {
    // Fastest path: a one-byte varint (lengths and deltas of small records).
    if let Some(&b) = src.peek().first() {
        if b < 0x80 {
            src.consume(1);
            return Ok(i32::from(b >> 1) ^ -i32::from(b & 1));
        }
    }
    // Fast path: the whole varint is in the buffer.
    if let Some(r) = decode_uvarint(src.peek(), 5) {
        let (v, n) = r?;
        if n == 5 && v >> 32 != 0 {
            return Err(invalid("Found invalid record structure: varint too long"));
        }
        src.consume(n);
        let v = v as u32;
        return Ok(((v >> 1) as i32) ^ -((v & 1) as i32));
    }
    let mut value: u32 = 0;
    for i in 0..5 {
        let b = src
            .byte()?
            .ok_or_else(|| invalid("Found invalid record structure: truncated varint"))?;
        if i == 4 && b & 0xf0 != 0 {
            return Err(invalid("Found invalid record structure: varint too long"));
        }
        value |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(((value >> 1) as i32) ^ -((value & 1) as i32));
        }
    }
    Err(invalid("Found invalid record structure: varint too long"))
}

#[inline(always)]
fn varlong<S: Source>(src: &mut S) -> Result<i64, RecordError> {
    if let Some(&b) = src.peek().first() {
        if b < 0x80 {
            src.consume(1);
            return Ok(i64::from(b >> 1) ^ -i64::from(b & 1));
        }
    }
    if let Some(r) = decode_uvarint(src.peek(), 10) {
        let (v, n) = r?;
        if n == 10 && src.peek()[9] & 0xfe != 0 {
            return Err(invalid("Found invalid record structure: varlong too long"));
        }
        src.consume(n);
        return Ok(((v >> 1) as i64) ^ -((v & 1) as i64));
    }
    let mut value: u64 = 0;
    for i in 0..10 {
        let b = src
            .byte()?
            .ok_or_else(|| invalid("Found invalid record structure: truncated varlong"))?;
        if i == 9 && b & 0xfe != 0 {
            return Err(invalid("Found invalid record structure: varlong too long"));
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    Err(invalid("Found invalid record structure: varlong too long"))
}

/// Skips a length-prefixed field of one record; returns whether it was null.
#[inline(always)]
fn field<S: Source>(
    src: &mut S,
    record_end: usize,
    what: &str,
    nullable: bool,
) -> Result<bool, RecordError> {
    let len = varint(src)?;
    if len < 0 {
        if len == -1 && nullable {
            return Ok(true);
        }
        return Err(invalid(format!("Invalid negative {what} size {len}")));
    }
    let len = len as usize;
    if len > record_end.saturating_sub(src.pos()) {
        return Err(invalid(format!(
            "Invalid record size: {what} of {len} bytes runs past the record"
        )));
    }
    if !src.skip(len)? {
        return Err(invalid(
            "Incorrect declared batch size, premature EOF reached",
        ));
    }
    Ok(false)
}

/// One unsigned varint of at most `max_bytes` bytes at `*pos`, advancing it.
#[inline(always)]
fn uvarint_at(buf: &[u8], pos: &mut usize, max_bytes: usize) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..max_bytes {
        let b = *buf.get(*pos)?;
        *pos += 1;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[inline(always)]
fn varint_at(buf: &[u8], pos: &mut usize) -> Option<i32> {
    let v = uvarint_at(buf, pos, 5)?;
    let v = u32::try_from(v).ok()?;
    Some(((v >> 1) as i32) ^ -((v & 1) as i32))
}

#[inline(always)]
fn varlong_at(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let v = uvarint_at(buf, pos, 10)?;
    Some(((v >> 1) as i64) ^ -((v & 1) as i64))
}

/// Skips a length-prefixed field inside a record ending at `end` (`rec` is the buffer up
/// to it); returns whether it was null (-1, allowed when `nullable`).
#[inline(always)]
fn field_at(rec: &[u8], pos: &mut usize, nullable: bool) -> Option<bool> {
    let len = varint_at(rec, pos)?;
    if len < 0 {
        return (len == -1 && nullable).then_some(true);
    }
    let len = len as usize;
    if len > rec.len() - *pos {
        return None;
    }
    *pos += len;
    Some(false)
}

/// The same checks as [`walk`] over an uncompressed records section, without error details:
/// None on any failure (the caller re-runs `walk` for the message). This is the hot path of
/// every produce, so it reads varints in place and carries no error values.
fn walk_slice(buf: &[u8], h: &BatchHeader, rules: &RecordRules) -> Option<RecordsSummary> {
    let create_time = h.timestamp_type() == TimestampKind::CreateTime;
    let mut lo = i64::MAX;
    let mut hi = i64::MIN;
    let mut pos = 0usize;
    for index in 0..h.records_count {
        let len = varint_at(buf, &mut pos)?;
        if len <= 0 || len as usize > buf.len() - pos {
            return None;
        }
        let end = pos + len as usize;
        let rec = &buf[..end];
        pos += 1; // attributes
        let timestamp_delta = varlong_at(rec, &mut pos)?;
        if varint_at(rec, &mut pos)? != index {
            return None;
        }
        let null_key = field_at(rec, &mut pos, true)?;
        if null_key && rules.key_required {
            return None;
        }
        field_at(rec, &mut pos, true)?;
        let headers = varint_at(rec, &mut pos)?;
        if headers < 0 || headers as usize > (end - pos) / 2 {
            return None;
        }
        for _ in 0..headers {
            field_at(rec, &mut pos, false)?;
            field_at(rec, &mut pos, true)?;
        }
        if pos != end {
            return None;
        }
        if create_time {
            let ts = h.base_timestamp.wrapping_add(timestamp_delta);
            if ts != crate::header::NO_TIMESTAMP {
                lo = lo.min(ts);
                hi = hi.max(ts);
            }
        }
    }
    (pos == buf.len()).then_some(RecordsSummary {
        timestamps: (lo <= hi).then_some((lo, hi)),
        records_bytes: pos,
    })
}

fn walk<S: Source>(
    src: &mut S,
    h: &BatchHeader,
    rules: &RecordRules,
) -> Result<RecordsSummary, RecordError> {
    let create_time = h.timestamp_type() == TimestampKind::CreateTime;
    let mut timestamps: Option<(i64, i64)> = None;
    for index in 0..h.records_count {
        if src.at_end()? {
            return Err(invalid(format!(
                "Incorrect declared batch size: {} records declared, {index} found",
                h.records_count
            )));
        }
        let len = varint(src)?;
        if len <= 0 {
            return Err(invalid(format!("Invalid record size {len}")));
        }
        let start = src.pos();
        let end = start.saturating_add(len as usize);
        // attributes (unused in v2, as in Kafka)
        src.byte()?
            .ok_or_else(|| invalid("Incorrect declared batch size, premature EOF reached"))?;
        let timestamp_delta = varlong(src)?;
        let offset_delta = varint(src)?;
        if offset_delta != index {
            return Err(invalid(format!(
                "Record {index} has offset delta {offset_delta}"
            )));
        }
        let null_key = field(src, end, "key", true)?;
        if null_key && rules.key_required {
            return Err(invalid("Compacted topic cannot accept message without key"));
        }
        field(src, end, "value", true)?;
        let headers = varint(src)?;
        if headers < 0 {
            return Err(invalid(format!(
                "Found invalid number of record headers {headers}"
            )));
        }
        if headers as usize > end.saturating_sub(src.pos()) / 2 {
            return Err(invalid(format!(
                "Found invalid number of record headers. {headers} is larger than the remaining size of the record"
            )));
        }
        for _ in 0..headers {
            field(src, end, "header key", false)?;
            field(src, end, "header value", true)?;
        }
        if src.pos() != end {
            return Err(invalid(format!(
                "Invalid record size: expected to read {len} bytes in record payload, but instead read {}",
                src.pos() - start
            )));
        }
        if create_time {
            let ts = h.base_timestamp.wrapping_add(timestamp_delta);
            if ts != crate::header::NO_TIMESTAMP {
                timestamps = Some(match timestamps {
                    None => (ts, ts),
                    Some((lo, hi)) => (lo.min(ts), hi.max(ts)),
                });
            }
        }
    }
    if !src.at_end()? {
        return Err(invalid(
            "Incorrect declared batch size, records still remaining in file",
        ));
    }
    Ok(RecordsSummary {
        timestamps,
        records_bytes: src.pos(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{BatchBuilder, NewRecord};
    use crate::header::{recompute_crc, validate_batch};
    use crate::varint::{write_varint, write_varlong};
    use model::ErrorCode;
    use proptest::prelude::*;

    fn build(codec: Compression, records: &[NewRecord]) -> Vec<u8> {
        let mut b = BatchBuilder::new(codec);
        for r in records {
            b.push(r.clone());
        }
        b.build().unwrap().to_vec()
    }

    fn check(batch: &[u8], rules: &RecordRules) -> Result<RecordsSummary, RecordError> {
        let h = validate_batch(batch, usize::MAX)?;
        validate_records(batch, &h, rules)
    }

    fn sample(n: usize) -> Vec<NewRecord> {
        (0..n)
            .map(|i| {
                let mut r = NewRecord::new(
                    Some(bytes::Bytes::from(format!("k{i}"))),
                    Some(bytes::Bytes::from(vec![b'v'; i * 7])),
                    1_000 + i as i64,
                );
                if i % 3 == 0 {
                    r.headers.push(crate::RecordHeader {
                        key: bytes::Bytes::from_static(b"h"),
                        value: None,
                    });
                }
                r
            })
            .collect()
    }

    /// A batch with `body` as its (uncompressed) records section and the given count.
    fn with_body(codec: Compression, body: &[u8], count: i32) -> Vec<u8> {
        let mut buf = build(Compression::None, &sample(1))[..HEADER_LEN].to_vec();
        let mut c = Vec::new();
        crate::compress(codec, body, &mut c).unwrap();
        buf.extend_from_slice(&c);
        let len = (buf.len() - 12) as i32;
        buf[8..12].copy_from_slice(&len.to_be_bytes());
        buf[21..23].copy_from_slice(&i16::from(codec.id()).to_be_bytes());
        buf[23..27].copy_from_slice(&(count - 1).to_be_bytes());
        buf[57..61].copy_from_slice(&count.to_be_bytes());
        recompute_crc(&mut buf).unwrap();
        buf
    }

    /// One record: length, attributes, deltas, key, value, `headers` count then raw bytes.
    fn record(offset_delta: i32, key: Option<&[u8]>, headers: i32, extra: &[u8]) -> Vec<u8> {
        let mut body = vec![0u8];
        write_varlong(&mut body, 0);
        write_varint(&mut body, offset_delta);
        match key {
            None => write_varint(&mut body, -1),
            Some(k) => {
                write_varint(&mut body, k.len() as i32);
                body.extend_from_slice(k);
            }
        }
        write_varint(&mut body, 1);
        body.push(b'v');
        write_varint(&mut body, headers);
        body.extend_from_slice(extra);
        let mut out = Vec::new();
        write_varint(&mut out, body.len() as i32);
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn valid_batches_pass_with_every_codec() {
        for codec in Compression::ALL {
            let batch = build(codec, &sample(50));
            let s = check(&batch, &RecordRules::default()).unwrap();
            assert_eq!(s.timestamps, Some((1_000, 1_049)), "{codec:?}");
            let key_required = RecordRules {
                key_required: true,
                ..RecordRules::default()
            };
            check(&batch, &key_required).unwrap();
        }
    }

    #[test]
    fn hostile_records_are_invalid_record() {
        let good = record(0, Some(b"k"), 0, &[]);
        let cases: Vec<(&str, Vec<u8>, i32)> = vec![
            ("random records section", vec![0x5a; 40], 1),
            (
                "record length too long",
                {
                    let mut r = good.clone();
                    r[0] += 2;
                    r
                },
                1,
            ),
            (
                "record length too short",
                {
                    let mut r = good.clone();
                    r[0] -= 2;
                    r
                },
                1,
            ),
            ("header count -5", record(0, Some(b"k"), -5, &[]), 1),
            (
                "header count i32::MAX",
                record(0, Some(b"k"), i32::MAX, &[0; 8]),
                1,
            ),
            ("count larger than records", good.clone(), 2),
            (
                "bytes after the last record",
                [good.clone(), vec![0; 3]].concat(),
                1,
            ),
            (
                "offset delta out of sequence",
                [good.clone(), record(5, Some(b"k"), 0, &[])].concat(),
                2,
            ),
            (
                "negative key length",
                {
                    let mut r = record(0, Some(b"k"), 0, &[]);
                    // key length varint (1 -> zigzag 2) becomes -2 (zigzag 3)
                    r[4] = 3;
                    r
                },
                1,
            ),
        ];
        for codec in Compression::ALL {
            for (name, body, count) in &cases {
                let batch = with_body(codec, body, *count);
                let err = check(&batch, &RecordRules::default()).unwrap_err();
                assert_eq!(
                    err.error_code(),
                    ErrorCode::InvalidRecord,
                    "{codec:?} {name}: {err}"
                );
            }
            // The good record itself passes in every codec.
            check(&with_body(codec, &good, 1), &RecordRules::default()).unwrap();
        }
    }

    #[test]
    fn null_keys_are_refused_on_compacted_topics() {
        let body = [record(0, Some(b"k"), 0, &[]), record(1, None, 0, &[])].concat();
        let rules = RecordRules {
            key_required: true,
            ..RecordRules::default()
        };
        for codec in Compression::ALL {
            let batch = with_body(codec, &body, 2);
            check(&batch, &RecordRules::default()).unwrap();
            let err = check(&batch, &rules).unwrap_err();
            assert_eq!(err.error_code(), ErrorCode::InvalidRecord);
        }
    }

    #[test]
    fn codec_flag_on_other_data_is_corrupt() {
        let body = [record(0, Some(b"k"), 0, &[]), record(1, Some(b"j"), 0, &[])].concat();
        let plain = with_body(Compression::None, &body, 2);
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut b = plain.clone();
            b[21..23].copy_from_slice(&i16::from(codec.id()).to_be_bytes());
            recompute_crc(&mut b).unwrap();
            let err = check(&b, &RecordRules::default()).unwrap_err();
            // Raw snappy may happen to "decode" short garbage into garbage records.
            assert!(
                matches!(
                    err.error_code(),
                    ErrorCode::CorruptMessage | ErrorCode::InvalidRecord
                ),
                "{codec:?}: {err}"
            );
        }
    }

    #[test]
    fn decompressed_size_is_bounded() {
        let big = vec![NewRecord::new(
            Some(bytes::Bytes::from_static(b"k")),
            Some(bytes::Bytes::from(vec![0u8; 1 << 20])),
            1,
        )];
        let rules = RecordRules {
            key_required: false,
            decompressed_max_bytes: 64 << 10,
        };
        for codec in Compression::ALL {
            let batch = build(codec, &big);
            let err = check(&batch, &rules).unwrap_err();
            assert_eq!(err.error_code(), ErrorCode::MessageTooLarge, "{codec:?}");
            check(&batch, &RecordRules::default()).unwrap();
        }
    }

    proptest! {
        #[test]
        fn garbage_never_panics(body in proptest::collection::vec(any::<u8>(), 0..300), count in 1i32..20, id in 0u8..5) {
            let codec = Compression::from_id(id).unwrap();
            let mut batch = with_body(Compression::None, &body, count);
            batch[21..23].copy_from_slice(&i16::from(codec.id()).to_be_bytes());
            recompute_crc(&mut batch).unwrap();
            let _ = check(&batch, &RecordRules::default());
        }

        /// The fast walk of uncompressed records and the detailed one agree on every input.
        #[test]
        fn fast_and_detailed_walks_agree(
            records in proptest::collection::vec((any::<bool>(), 0i32..4, any::<i32>()), 0..6),
            noise in proptest::collection::vec(any::<u8>(), 0..4),
            at in any::<usize>(),
            count_delta in -1i32..2,
            key_required in any::<bool>(),
        ) {
            let mut body = Vec::new();
            for (i, (keyed, headers, delta)) in records.iter().enumerate() {
                let extra = vec![2u8; 2 * (*headers).max(0) as usize];
                let offset_delta = if *delta % 7 == 0 { *delta } else { i as i32 };
                body.extend(record(offset_delta, keyed.then_some(&b"k"[..]), *headers, &extra));
            }
            if !body.is_empty() && !noise.is_empty() {
                let i = at % body.len();
                body[i] = noise[0];
            }
            body.extend_from_slice(&noise[1.min(noise.len())..]);
            let count = (records.len() as i32 + count_delta).max(1);
            let batch = with_body(Compression::None, &body, count);
            let h = validate_batch(&batch, usize::MAX).unwrap();
            let rules = RecordRules { key_required, ..RecordRules::default() };
            let fast = walk_slice(&batch[HEADER_LEN..], &h, &rules);
            let slow = walk(&mut SliceSource { buf: &batch[HEADER_LEN..], pos: 0 }, &h, &rules);
            prop_assert_eq!(fast, slow.ok());
        }

        #[test]
        fn builder_batches_always_pass(n in 1usize..40, id in 0u8..5) {
            let codec = Compression::from_id(id).unwrap();
            let batch = build(codec, &sample(n));
            prop_assert!(check(&batch, &RecordRules::default()).is_ok());
        }
    }
}
