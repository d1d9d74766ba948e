//! A read-ahead buffer for the byte stream under a TLS session: rustls asks its transport for
//! at most 4 KiB per read, so a TLS connection receiving a large response (or a broker a large
//! produce) made a system call per 4 KiB; this adapter reads up to its capacity at once and
//! hands rustls the bytes from memory.
//!
//! Unlike `tokio::io::BufReader` it holds no memory until it is enabled and while the peer is
//! quiet: the buffer is allocated at the first read after [`ReadAhead::enable`] and released
//! once it is drained and the transport has nothing more (an idle or unauthenticated
//! connection costs nothing). Writes pass straight through.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A transport with an optional read-ahead buffer; see the module documentation.
#[derive(Debug)]
pub struct ReadAhead<T> {
    inner: T,
    /// Bytes read ahead; empty (no allocation) while disabled or drained and idle.
    buf: Vec<u8>,
    /// The unread bytes are `buf[pos..end]`.
    pos: usize,
    end: usize,
    /// Bytes read from the transport at once; 0 reads straight through.
    capacity: usize,
}

impl<T> ReadAhead<T> {
    /// A transport read straight through until [`ReadAhead::enable`] is called.
    pub fn new(inner: T) -> ReadAhead<T> {
        ReadAhead {
            inner,
            buf: Vec::new(),
            pos: 0,
            end: 0,
            capacity: 0,
        }
    }

    /// Reads up to `capacity` bytes from the transport at once from now on (0 turns the
    /// read-ahead off once what it holds is read).
    pub fn enable(&mut self, capacity: usize) {
        self.capacity = capacity;
    }

    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    pub fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// Bytes held for a reader (capacity of the buffer, 0 when released).
    pub fn held(&self) -> usize {
        self.buf.capacity()
    }

    fn release(&mut self) {
        self.pos = 0;
        self.end = 0;
        self.buf = Vec::new();
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ReadAhead<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pos == this.end {
            // Nothing held: read straight into the caller's buffer when the read-ahead is
            // off or the caller asks for at least as much.
            if this.capacity == 0 || out.remaining() >= this.capacity {
                if !this.buf.is_empty() {
                    this.release();
                }
                return Pin::new(&mut this.inner).poll_read(cx, out);
            }
            if this.buf.len() != this.capacity {
                this.buf = vec![0; this.capacity];
            }
            let mut ahead = ReadBuf::new(&mut this.buf);
            match Pin::new(&mut this.inner).poll_read(cx, &mut ahead) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    // The peer is quiet: hold no memory while waiting.
                    this.release();
                    return Poll::Pending;
                }
            }
            let n = ahead.filled().len();
            if n == 0 {
                // End of stream.
                this.release();
                return Poll::Ready(Ok(()));
            }
            this.pos = 0;
            this.end = n;
        }
        let n = (this.end - this.pos).min(out.remaining());
        out.put_slice(&this.buf[this.pos..this.pos + n]);
        this.pos += n;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ReadAhead<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Counts the reads that reach the transport and the most bytes asked for in one.
    struct Counting<T> {
        inner: T,
        reads: usize,
    }

    impl<T: AsyncRead + Unpin> AsyncRead for Counting<T> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            out: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let before = out.filled().len();
            let r = Pin::new(&mut self.inner).poll_read(cx, out);
            if matches!(r, Poll::Ready(Ok(()))) && out.filled().len() > before {
                self.reads += 1;
            }
            r
        }
    }

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8).collect()
    }

    #[tokio::test]
    async fn small_reads_are_served_from_one_large_read() {
        let sent = data(256 * 1024);
        let mut r = ReadAhead::new(Counting {
            inner: &sent[..],
            reads: 0,
        });
        r.enable(64 * 1024);
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = r.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(got, sent);
        // 4 reads of 64 KiB reached the transport, not 64 of 4 KiB.
        assert_eq!(r.get_ref().reads, 4);
        assert_eq!(r.held(), 0, "released at the end of the stream");
    }

    #[tokio::test]
    async fn disabled_or_large_reads_go_straight_through() {
        let sent = data(100_000);
        let mut r = ReadAhead::new(Counting {
            inner: &sent[..],
            reads: 0,
        });
        let mut chunk = [0u8; 4096];
        let n = r.read(&mut chunk).await.unwrap();
        assert_eq!(&chunk[..n], &sent[..n]);
        assert_eq!(r.held(), 0, "nothing allocated before enable");
        r.enable(16 * 1024);
        let mut big = vec![0u8; 32 * 1024];
        let m = r.read(&mut big).await.unwrap();
        assert_eq!(&big[..m], &sent[n..n + m]);
        assert_eq!(
            r.held(),
            0,
            "a read as large as the capacity is not buffered"
        );
    }

    #[tokio::test]
    async fn the_buffer_is_released_while_the_peer_is_quiet() {
        let (mut peer, ours) = tokio::io::duplex(1 << 20);
        let mut r = ReadAhead::new(ours);
        r.enable(64 * 1024);
        peer.write_all(&data(10_000)).await.unwrap();
        let mut chunk = [0u8; 4096];
        let mut got = 0;
        while got < 10_000 {
            got += r.read(&mut chunk).await.unwrap();
        }
        assert!(r.held() > 0);
        // Drained: the next read finds nothing and gives the buffer back.
        let mut out = ReadBuf::new(&mut chunk);
        let polled =
            std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut r).poll_read(cx, &mut out))).await;
        assert!(polled.is_pending());
        assert_eq!(r.held(), 0);
        // Writes pass through to the transport.
        r.write_all(b"pong").await.unwrap();
        let mut back = [0u8; 4];
        peer.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"pong");
    }
}
