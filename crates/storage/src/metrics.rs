//! Process-wide storage metrics, exported by the broker: fsync latency and failures, log
//! flush latency. Plain atomics (`telemetry::Histogram` is a fixed array of them), so the
//! write path takes no lock and allocates nothing to count.

use std::sync::atomic::AtomicU64;
use std::time::Instant;
use telemetry::Histogram;

/// Time of each segment fsync (`fdatasync`), successful or not.
pub static FSYNC_LATENCY: Histogram = Histogram::new();
/// Segment fsyncs that failed (each takes its log offline).
pub static FSYNC_FAILURES: AtomicU64 = AtomicU64::new(0);
/// Time of each log flush: the segment fsync plus the directory fsync when files were added.
pub static FLUSH_LATENCY: Histogram = Histogram::new();

/// Observes the time until it is dropped.
pub(crate) struct Timed(&'static Histogram, Instant);

impl Timed {
    pub(crate) fn start(h: &'static Histogram) -> Timed {
        Timed(h, Instant::now())
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        self.0.observe(self.1.elapsed());
    }
}
