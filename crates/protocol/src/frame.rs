//! Frame codec: a 4-byte big-endian size prefix, then that many bytes. The size is checked
//! against the limit before any memory is reserved for the frame.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Most bytes reserved ahead of data actually received, so a client that announces a large
/// frame and then stalls can't make us hold the whole frame's memory.
const RESERVE_AHEAD_BYTES_MAX: usize = 256 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame size {size} outside 0..={max}")]
    BadSize { size: i64, max: usize },
    #[error("connection closed mid-frame")]
    Truncated,
    #[error("read: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads frames from one connection, keeping leftover bytes between calls.
#[derive(Debug)]
pub struct FrameReader {
    buf: BytesMut,
    frame_bytes_max: usize,
}

impl FrameReader {
    pub fn new(frame_bytes_max: usize) -> FrameReader {
        FrameReader {
            buf: BytesMut::with_capacity(64 * 1024),
            frame_bytes_max,
        }
    }

    /// The next frame (without its prefix), or None on a clean close between frames.
    /// Not cancel-safe with respect to partially read frames only in that the bytes stay
    /// buffered; calling it again resumes.
    pub async fn next<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut R,
    ) -> Result<Option<Bytes>, FrameError> {
        loop {
            if self.buf.len() >= 4 {
                let size = i32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
                if size < 0 || size as usize > self.frame_bytes_max {
                    return Err(FrameError::BadSize {
                        size: size as i64,
                        max: self.frame_bytes_max,
                    });
                }
                let size = size as usize;
                if self.buf.len() >= 4 + size {
                    self.buf.advance(4);
                    return Ok(Some(self.buf.split_to(size).freeze()));
                }
                let missing = 4 + size - self.buf.len();
                self.buf.reserve(missing.min(RESERVE_AHEAD_BYTES_MAX));
            } else {
                self.buf.reserve(64 * 1024);
            }
            let n = reader.read_buf(&mut self.buf).await?;
            if n == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(FrameError::Truncated)
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn splits_frames_and_detects_truncation() {
        let mut data: &[u8] = &[0, 0, 0, 2, 1, 2, 0, 0, 0, 0, 0, 0, 0, 3, 9];
        let mut r = FrameReader::new(100);
        assert_eq!(r.next(&mut data).await.unwrap().unwrap().as_ref(), &[1, 2]);
        assert!(r.next(&mut data).await.unwrap().unwrap().is_empty());
        assert!(matches!(
            r.next(&mut data).await,
            Err(FrameError::Truncated)
        ));
    }

    #[tokio::test]
    async fn rejects_negative_and_oversized_prefixes() {
        let mut data: &[u8] = &[0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            FrameReader::new(100).next(&mut data).await,
            Err(FrameError::BadSize { .. })
        ));
        let mut data: &[u8] = &[0, 0, 0, 101];
        assert!(matches!(
            FrameReader::new(100).next(&mut data).await,
            Err(FrameError::BadSize { .. })
        ));
        let mut empty: &[u8] = &[];
        assert!(FrameReader::new(100)
            .next(&mut empty)
            .await
            .unwrap()
            .is_none());
    }
}
