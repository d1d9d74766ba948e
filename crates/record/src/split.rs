//! Walks a buffer of concatenated batches (a Produce request's `records`, a log segment).

use bytes::Bytes;

use crate::error::RecordError;
use crate::header::{HEADER_LEN, LENGTH_OFFSET, LOG_OVERHEAD};

/// Iterates over the batches in a buffer by their length fields, without checking CRCs.
/// A tail too short for its claimed length, or with an impossible length, yields one
/// `Corrupt` error and ends the iteration.
#[derive(Debug, Clone)]
pub struct BatchSplitter<'a> {
    buf: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> BatchSplitter<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        BatchSplitter {
            buf,
            pos: 0,
            done: false,
        }
    }

    /// Position of the next batch within the buffer.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for BatchSplitter<'a> {
    /// The batch's position in the buffer and its bytes.
    type Item = Result<(usize, &'a [u8]), RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.buf.len() {
            return None;
        }
        let rest = &self.buf[self.pos..];
        if rest.len() < LOG_OVERHEAD {
            self.done = true;
            return Some(Err(RecordError::corrupt(format!(
                "{} trailing bytes are too short for a batch",
                rest.len()
            ))));
        }
        let len = i32::from_be_bytes([
            rest[LENGTH_OFFSET],
            rest[LENGTH_OFFSET + 1],
            rest[LENGTH_OFFSET + 2],
            rest[LENGTH_OFFSET + 3],
        ]);
        if len < (HEADER_LEN - LOG_OVERHEAD) as i32 {
            self.done = true;
            return Some(Err(RecordError::corrupt(format!(
                "batch length {len} is below the header size"
            ))));
        }
        let total = len as usize + LOG_OVERHEAD;
        if total > rest.len() {
            self.done = true;
            return Some(Err(RecordError::corrupt(format!(
                "batch of {total} bytes is truncated to {}",
                rest.len()
            ))));
        }
        let at = self.pos;
        self.pos += total;
        Some(Ok((at, &rest[..total])))
    }
}

/// Splits `buf` into zero-copy batch slices, failing if any part of it is not a whole batch.
pub fn split_batches(buf: &Bytes) -> Result<Vec<Bytes>, RecordError> {
    let mut out = Vec::new();
    for item in BatchSplitter::new(buf) {
        let (at, b) = item?;
        out.push(buf.slice(at..at + b.len()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BatchBuilder, Compression, NewRecord};

    fn batch(n: usize) -> Bytes {
        let mut b = BatchBuilder::new(Compression::None);
        for i in 0..n {
            b.push(NewRecord::value(format!("r{i}")));
        }
        b.build().unwrap()
    }

    #[test]
    fn splits_concatenated_batches() {
        let (a, b) = (batch(1), batch(3));
        let mut all = a.to_vec();
        all.extend_from_slice(&b);
        let parts = split_batches(&Bytes::from(all.clone())).unwrap();
        assert_eq!(parts, vec![a.clone(), b]);
        for cut in 1..all.len() {
            if cut == a.len() {
                continue;
            }
            assert!(split_batches(&Bytes::copy_from_slice(&all[..cut])).is_err());
        }
        assert!(split_batches(&Bytes::new()).unwrap().is_empty());
    }
}
