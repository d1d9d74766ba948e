//! Compression codecs as Kafka uses them, with bounded decompression.
//!
//! Every decoder is capped at a caller-given output size, so a small compressed batch that
//! expands to gigabytes (a "zip bomb") fails with `TooLarge` instead of exhausting memory.

use std::io::{Read, Write};

use crate::error::RecordError;

/// A record batch compression codec (attribute bits 0-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    pub fn from_id(id: u8) -> Result<Compression, RecordError> {
        Ok(match id {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            _ => return Err(RecordError::UnknownCompression(id)),
        })
    }

    pub fn id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// Parses Kafka's `compression.type` names (`none`/`uncompressed`, `gzip`, ...).
    pub fn from_name(name: &str) -> Option<Compression> {
        Some(match name {
            "none" | "uncompressed" => Compression::None,
            "gzip" => Compression::Gzip,
            "snappy" => Compression::Snappy,
            "lz4" => Compression::Lz4,
            "zstd" => Compression::Zstd,
            _ => return None,
        })
    }
}

/// The header snappy-java's `SnappyOutputStream` writes (Kafka's Java producer and
/// kafka-python use it): magic, then version and minimum compatible version.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER_LEN: usize = 16;
/// snappy-java's default block size; matching it keeps our output familiar to Java readers.
const XERIAL_BLOCK: usize = 32 * 1024;

fn io_corrupt(codec: &str, e: std::io::Error) -> RecordError {
    RecordError::corrupt(format!("{codec} decompression failed: {e}"))
}

/// Compresses `data` with `codec`, appending to `out`.
pub fn compress(codec: Compression, data: &[u8], out: &mut Vec<u8>) -> Result<(), RecordError> {
    let enc_err = |e: std::io::Error| RecordError::Compress(e.to_string());
    match codec {
        Compression::None => out.extend_from_slice(data),
        Compression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
            enc.write_all(data).map_err(enc_err)?;
            enc.finish().map_err(enc_err)?;
        }
        Compression::Snappy => {
            out.extend_from_slice(&XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            let mut enc = snap::raw::Encoder::new();
            for chunk in data.chunks(XERIAL_BLOCK) {
                let c = enc
                    .compress_vec(chunk)
                    .map_err(|e| RecordError::Compress(e.to_string()))?;
                out.extend_from_slice(&(c.len() as i32).to_be_bytes());
                out.extend_from_slice(&c);
            }
        }
        Compression::Lz4 => {
            // Kafka's producer writes independent 64 KiB blocks without block checksums.
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, out);
            enc.write_all(data).map_err(enc_err)?;
            enc.finish()
                .map_err(|e| RecordError::Compress(e.to_string()))?;
        }
        Compression::Zstd => {
            let mut enc = zstd::stream::write::Encoder::new(out, 3).map_err(enc_err)?;
            enc.write_all(data).map_err(enc_err)?;
            enc.finish().map_err(enc_err)?;
        }
    }
    Ok(())
}

/// Reads all of `r` into a vector, failing once more than `limit` bytes come out.
fn read_bounded(mut r: impl Read, limit: usize, codec: &str) -> Result<Vec<u8>, RecordError> {
    let mut out = Vec::new();
    let cap = (limit as u64).saturating_add(1);
    (&mut r)
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|e| io_corrupt(codec, e))?;
    if out.len() > limit {
        return Err(RecordError::TooLarge {
            size: out.len(),
            max: limit,
        });
    }
    Ok(out)
}

fn snappy_raw(data: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), RecordError> {
    let n = snap::raw::decompress_len(data)
        .map_err(|e| RecordError::corrupt(format!("snappy: {e}")))?;
    // The claimed length is checked before anything is allocated for it.
    if n > limit.saturating_sub(out.len()) {
        return Err(RecordError::TooLarge {
            size: out.len().saturating_add(n),
            max: limit,
        });
    }
    let start = out.len();
    out.resize(start + n, 0);
    snap::raw::Decoder::new()
        .decompress(data, &mut out[start..])
        .map_err(|e| RecordError::corrupt(format!("snappy: {e}")))?;
    Ok(())
}

fn snappy_decompress(data: &[u8], limit: usize) -> Result<Vec<u8>, RecordError> {
    let mut out = Vec::new();
    if data.len() >= XERIAL_HEADER_LEN && data[..8] == XERIAL_MAGIC {
        let mut pos = XERIAL_HEADER_LEN;
        while pos < data.len() {
            let len_bytes = data
                .get(pos..pos + 4)
                .ok_or_else(|| RecordError::corrupt("snappy: truncated xerial block length"))?;
            let len = i32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
            pos += 4;
            let len = usize::try_from(len)
                .map_err(|_| RecordError::corrupt("snappy: negative xerial block length"))?;
            let block = data
                .get(pos..pos.saturating_add(len))
                .ok_or_else(|| RecordError::corrupt("snappy: truncated xerial block"))?;
            pos += len;
            snappy_raw(block, limit, &mut out)?;
        }
    } else {
        snappy_raw(data, limit, &mut out)?;
    }
    Ok(out)
}

/// The error a bounded decoder returns (inside an `io::Error`) when its output would pass its
/// limit, so callers can answer MESSAGE_TOO_LARGE rather than CORRUPT_MESSAGE.
#[derive(Debug)]
pub(crate) struct LimitExceeded {
    pub size: usize,
    pub max: usize,
}

impl std::fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bytes exceed the decompression limit {}",
            self.size, self.max
        )
    }
}

impl std::error::Error for LimitExceeded {}

/// Snappy as a `Read` stream: xerial-framed input (Kafka's Java producer, kafka-python) is
/// decoded one block at a time into a reused buffer; raw snappy (librdkafka) is one block and
/// is decoded whole. Block sizes are checked against what is left of `limit` before anything
/// is allocated for them.
pub(crate) struct SnappyReader<'a> {
    data: &'a [u8],
    pos: usize,
    framed: bool,
    block: Vec<u8>,
    block_pos: usize,
    limit: usize,
    produced: usize,
}

impl<'a> SnappyReader<'a> {
    pub(crate) fn new(data: &'a [u8], limit: usize) -> SnappyReader<'a> {
        let framed = data.len() >= XERIAL_HEADER_LEN && data[..8] == XERIAL_MAGIC;
        SnappyReader {
            data,
            pos: if framed { XERIAL_HEADER_LEN } else { 0 },
            framed,
            block: Vec::new(),
            block_pos: 0,
            limit,
            produced: 0,
        }
    }

    /// Decodes the next block into `block`; false when the input is exhausted.
    fn next_block(&mut self) -> std::io::Result<bool> {
        let bad = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
        if self.pos >= self.data.len() {
            return Ok(false);
        }
        let compressed = if self.framed {
            let len_bytes = self
                .data
                .get(self.pos..self.pos + 4)
                .ok_or_else(|| bad("truncated xerial block length".into()))?;
            let len = i32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
            let len =
                usize::try_from(len).map_err(|_| bad("negative xerial block length".into()))?;
            let start = self.pos + 4;
            let block = self
                .data
                .get(start..start.saturating_add(len))
                .ok_or_else(|| bad("truncated xerial block".into()))?;
            self.pos = start + len;
            block
        } else {
            let all = &self.data[self.pos..];
            self.pos = self.data.len();
            all
        };
        let n = snap::raw::decompress_len(compressed).map_err(|e| bad(e.to_string()))?;
        if n > self.limit.saturating_sub(self.produced) {
            return Err(std::io::Error::other(LimitExceeded {
                size: self.produced.saturating_add(n),
                max: self.limit,
            }));
        }
        self.block.clear();
        self.block.resize(n, 0);
        snap::raw::Decoder::new()
            .decompress(compressed, &mut self.block)
            .map_err(|e| bad(e.to_string()))?;
        self.produced += n;
        self.block_pos = 0;
        Ok(true)
    }
}

impl Read for SnappyReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.block_pos >= self.block.len() {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let n = out.len().min(self.block.len() - self.block_pos);
        out[..n].copy_from_slice(&self.block[self.block_pos..self.block_pos + n]);
        self.block_pos += n;
        Ok(n)
    }
}

/// Decompresses `data`, failing with `TooLarge` once the output would exceed `limit` bytes
/// and with `Corrupt` on malformed input.
pub fn decompress(codec: Compression, data: &[u8], limit: usize) -> Result<Vec<u8>, RecordError> {
    match codec {
        Compression::None => {
            if data.len() > limit {
                return Err(RecordError::TooLarge {
                    size: data.len(),
                    max: limit,
                });
            }
            Ok(data.to_vec())
        }
        Compression::Gzip => read_bounded(flate2::read::GzDecoder::new(data), limit, "gzip"),
        Compression::Snappy => snappy_decompress(data, limit),
        Compression::Lz4 => read_bounded(lz4_flex::frame::FrameDecoder::new(data), limit, "lz4"),
        Compression::Zstd => {
            let dec = zstd::stream::read::Decoder::new(data).map_err(|e| io_corrupt("zstd", e))?;
            read_bounded(dec, limit, "zstd")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bombs_are_capped() {
        let zeros = vec![0u8; 1 << 20];
        for codec in Compression::ALL {
            let mut c = Vec::new();
            compress(codec, &zeros, &mut c).unwrap();
            let err = decompress(codec, &c, 1000).unwrap_err();
            assert!(
                matches!(err, RecordError::TooLarge { .. }),
                "{codec:?}: {err:?}"
            );
            assert_eq!(decompress(codec, &c, 1 << 20).unwrap().len(), 1 << 20);
        }
    }

    #[test]
    fn raw_snappy_is_accepted() {
        let data = b"hello hello hello hello".repeat(10);
        let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        assert_eq!(
            decompress(Compression::Snappy, &raw, 1 << 20).unwrap(),
            data
        );
    }

    #[test]
    fn unknown_ids_are_errors() {
        assert!(Compression::from_id(5).is_err());
        assert_eq!(Compression::from_id(3).unwrap(), Compression::Lz4);
    }

    proptest! {
        #[test]
        fn round_trip(data in proptest::collection::vec(any::<u8>(), 0..70_000), id in 0u8..5) {
            let codec = Compression::from_id(id).unwrap();
            let mut c = Vec::new();
            compress(codec, &data, &mut c).unwrap();
            prop_assert_eq!(decompress(codec, &c, data.len()).unwrap(), data);
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300), id in 0u8..5) {
            let codec = Compression::from_id(id).unwrap();
            let _ = decompress(codec, &data, 1 << 16);
        }
    }
}
