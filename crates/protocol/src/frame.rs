//! Frame codec: a 4-byte big-endian size prefix, then that many bytes. The size is checked
//! against the limit before any memory is reserved for the frame, and the caller can reserve
//! the frame's bytes from a budget between reading the size and reading the body
//! ([`FrameReader::next_size`], then [`FrameReader::next_body`]).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Bytes read from the socket per read while looking for a size prefix (pipelined small
/// requests are picked up together).
const READ_CHUNK_BYTES: usize = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame size {size} outside 0..={max}")]
    BadSize { size: i64, max: usize },
    #[error("connection closed mid-frame")]
    Truncated,
    #[error("read: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads frames from one connection, keeping leftover bytes between calls. Between frames it
/// holds at most one read chunk; a frame's body gets a buffer of exactly its size, filled as
/// bytes arrive and handed out whole, so nothing of a finished frame stays behind.
#[derive(Debug)]
pub struct FrameReader {
    buf: BytesMut,
    frame_bytes_max: usize,
    /// The size of the frame whose body is next, once its prefix has been read.
    pending: Option<usize>,
}

impl FrameReader {
    pub fn new(frame_bytes_max: usize) -> FrameReader {
        FrameReader {
            buf: BytesMut::new(),
            frame_bytes_max,
            pending: None,
        }
    }

    /// Waits for the next frame's size prefix (checked against the limit) and returns the
    /// size; None on a clean close between frames. Cancel-safe: bytes read stay buffered.
    pub async fn next_size<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut R,
    ) -> Result<Option<usize>, FrameError> {
        if let Some(size) = self.pending {
            return Ok(Some(size));
        }
        while self.buf.len() < 4 {
            if self.buf.capacity() - self.buf.len() < READ_CHUNK_BYTES / 2 {
                self.buf.reserve(READ_CHUNK_BYTES);
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
        let size = i32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        if size < 0 || size as usize > self.frame_bytes_max {
            return Err(FrameError::BadSize {
                size: i64::from(size),
                max: self.frame_bytes_max,
            });
        }
        self.buf.advance(4);
        self.pending = Some(size as usize);
        Ok(Some(size as usize))
    }

    /// Reads the body of the frame whose size [`FrameReader::next_size`] returned. Not
    /// cancel-safe: a body partly read when the future is dropped is lost (callers close
    /// the connection then).
    pub async fn next_body<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut R,
    ) -> Result<Bytes, FrameError> {
        let size = self.pending.take().ok_or(FrameError::Truncated)?;
        if self.buf.len() >= size {
            let frame = self.buf.split_to(size).freeze();
            self.compact();
            return Ok(frame);
        }
        let mut frame = BytesMut::with_capacity(size);
        frame.put(self.buf.split());
        self.compact();
        while frame.len() < size {
            let want = (size - frame.len()) as u64;
            let n = (&mut *reader).take(want).read_buf(&mut frame).await?;
            if n == 0 {
                return Err(FrameError::Truncated);
            }
        }
        Ok(frame.freeze())
    }

    /// The next frame (without its prefix), or None on a clean close between frames.
    pub async fn next<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut R,
    ) -> Result<Option<Bytes>, FrameError> {
        if self.next_size(reader).await?.is_none() {
            return Ok(None);
        }
        self.next_body(reader).await.map(Some)
    }

    /// Drops a read buffer grown for pipelined bytes once they are consumed, so an idle
    /// connection holds nothing.
    fn compact(&mut self) {
        if self.buf.is_empty() {
            self.buf = BytesMut::new();
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
