//! Decoding the records inside a batch, bounded by the bytes actually present.

use bytes::Bytes;

use crate::codec::{decompress, Compression};
use crate::error::RecordError;
use crate::header::{validate_batch_structure, BatchHeader, TimestampKind, HEADER_LEN};
use crate::varint::{read_varint, read_varlong};

/// One record header: a key (UTF-8 by convention, kept as bytes) and an optional value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    pub key: Bytes,
    pub value: Option<Bytes>,
}

/// A decoded record with its absolute offset and timestamp. Key, value and header bytes
/// share the (decompressed) batch buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub offset: i64,
    pub timestamp: i64,
    pub attributes: i8,
    pub offset_delta: i32,
    pub timestamp_delta: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<RecordHeader>,
}

/// Iterator over the records of one batch. Yields at most `records_count` records; after
/// the last one, leftover bytes are reported as an error. The claimed count is never used
/// to pre-allocate, so a batch claiming `i32::MAX` records just fails when bytes run out.
#[derive(Debug, Clone)]
pub struct RecordIter {
    buf: Bytes,
    pos: usize,
    remaining: i32,
    base_offset: i64,
    base_timestamp: i64,
    log_append_time: Option<i64>,
    failed: bool,
}

/// Smallest possible encoded record: length, attributes, 3 one-byte varints, header count.
const MIN_RECORD_LEN: usize = 7;

/// Validates `batch` structurally, decompresses its records (output capped at
/// `decompressed_max_bytes`) and returns an iterator over them.
pub fn decode_records(
    batch: &Bytes,
    decompressed_max_bytes: usize,
) -> Result<(BatchHeader, RecordIter), RecordError> {
    let h = validate_batch_structure(batch)?;
    let body = batch.slice(HEADER_LEN..);
    let buf = match h.compression()? {
        Compression::None => body,
        c => Bytes::from(decompress(c, &body, decompressed_max_bytes)?),
    };
    // Each record takes at least MIN_RECORD_LEN bytes, so a count the bytes can't hold is
    // rejected up front.
    if (h.records_count as u64) * (MIN_RECORD_LEN as u64) > buf.len() as u64 {
        return Err(RecordError::InvalidRecord(format!(
            "{} records cannot fit in {} bytes",
            h.records_count,
            buf.len()
        )));
    }
    let log_append_time =
        (h.timestamp_type() == TimestampKind::LogAppendTime).then_some(h.max_timestamp);
    Ok((
        h,
        RecordIter {
            buf,
            pos: 0,
            remaining: h.records_count,
            base_offset: h.base_offset,
            base_timestamp: h.base_timestamp,
            log_append_time,
            failed: false,
        },
    ))
}

fn read_bytes(buf: &Bytes, end: usize, pos: &mut usize) -> Result<Option<Bytes>, RecordError> {
    let len = read_varint(&buf[..end], pos)?;
    if len < 0 {
        if len != -1 {
            return Err(RecordError::corrupt(format!("negative length {len}")));
        }
        return Ok(None);
    }
    let len = len as usize;
    if len > end - *pos {
        return Err(RecordError::corrupt("field longer than its record"));
    }
    let b = buf.slice(*pos..*pos + len);
    *pos += len;
    Ok(Some(b))
}

impl RecordIter {
    fn decode_one(&mut self) -> Result<Record, RecordError> {
        let buf = &self.buf;
        let mut pos = self.pos;
        let len = read_varint(buf, &mut pos)?;
        if len < 0 || len as usize > buf.len() - pos {
            return Err(RecordError::corrupt(format!(
                "record length {len} exceeds the batch"
            )));
        }
        let end = pos + len as usize;
        let attributes = *buf
            .get(pos)
            .filter(|_| pos < end)
            .ok_or_else(|| RecordError::corrupt("empty record"))? as i8;
        pos += 1;
        let timestamp_delta = read_varlong(&buf[..end], &mut pos)?;
        let offset_delta = read_varint(&buf[..end], &mut pos)?;
        let key = read_bytes(buf, end, &mut pos)?;
        let value = read_bytes(buf, end, &mut pos)?;
        let header_count = read_varint(&buf[..end], &mut pos)?;
        if header_count < 0 || header_count as usize > (end - pos) / 2 {
            return Err(RecordError::corrupt(format!(
                "header count {header_count} exceeds the record"
            )));
        }
        let mut headers = Vec::with_capacity(header_count as usize);
        for _ in 0..header_count {
            let key = read_bytes(buf, end, &mut pos)?
                .ok_or_else(|| RecordError::corrupt("null header key"))?;
            let value = read_bytes(buf, end, &mut pos)?;
            headers.push(RecordHeader { key, value });
        }
        if pos != end {
            return Err(RecordError::corrupt(
                "record length does not match its fields",
            ));
        }
        self.pos = end;
        Ok(Record {
            offset: self.base_offset.wrapping_add(i64::from(offset_delta)),
            timestamp: self
                .log_append_time
                .unwrap_or_else(|| self.base_timestamp.wrapping_add(timestamp_delta)),
            attributes,
            offset_delta,
            timestamp_delta,
            key,
            value,
            headers,
        })
    }
}

impl Iterator for RecordIter {
    type Item = Result<Record, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.remaining <= 0 {
            if self.pos != self.buf.len() {
                self.failed = true;
                return Some(Err(RecordError::corrupt(format!(
                    "{} bytes after the last record",
                    self.buf.len() - self.pos
                ))));
            }
            return None;
        }
        self.remaining -= 1;
        match self.decode_one() {
            Ok(r) => Some(Ok(r)),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::recompute_crc;
    use crate::{BatchBuilder, NewRecord};
    use proptest::prelude::*;

    #[test]
    fn huge_claimed_count_fails_cleanly() {
        let mut b = BatchBuilder::new(Compression::None);
        b.push(NewRecord::value("x"));
        let mut buf = b.build().unwrap().to_vec();
        buf[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
        buf[23..27].copy_from_slice(&(i32::MAX - 1).to_be_bytes());
        recompute_crc(&mut buf).unwrap();
        assert!(decode_records(&Bytes::from(buf), 1 << 20).is_err());
    }

    proptest! {
        #[test]
        fn garbage_records_never_panic(body in proptest::collection::vec(any::<u8>(), 0..200), count in 0i32..20) {
            let mut b = BatchBuilder::new(Compression::None);
            b.push(NewRecord::value("x"));
            let mut buf = b.build().unwrap()[..HEADER_LEN].to_vec();
            buf.extend_from_slice(&body);
            let len = (buf.len() - 12) as i32;
            buf[8..12].copy_from_slice(&len.to_be_bytes());
            buf[57..61].copy_from_slice(&count.to_be_bytes());
            buf[23..27].copy_from_slice(&(count.max(1) - 1).to_be_bytes());
            recompute_crc(&mut buf).unwrap();
            if let Ok((_, it)) = decode_records(&Bytes::from(buf), 1 << 16) {
                for r in it { let _ = r; }
            }
        }
    }
}
