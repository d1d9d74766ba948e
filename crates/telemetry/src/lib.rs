//! Metric primitives for Moldau's hot paths and their exposition in Prometheus text or
//! OpenMetrics format.
//!
//! Hot paths only touch atomics: a [`Histogram`] is a fixed array of `AtomicU64` buckets (no
//! lock, no allocation per observation), counters are plain `AtomicU64`s owned by whoever
//! counts. Labels and names are attached only at scrape time, by a [`Scrape`] walking those
//! atomics (and whatever state the caller reads then), encoded by `prometheus-client` into
//! the format the scraper asked for ([`Format::negotiate`]).

pub mod process;

pub use prometheus_client;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the latency histograms' buckets: 50 µs to 10 s, roughly
/// 1-2.5-5 per decade, plus the implicit `+Inf`.
pub const LATENCY_BOUNDS_S: [f64; 17] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];
const BUCKETS: usize = LATENCY_BOUNDS_S.len() + 1;
/// The bounds in nanoseconds, so an observation compares integers.
const BOUNDS_NS: [u64; LATENCY_BOUNDS_S.len()] = {
    let mut out = [0u64; LATENCY_BOUNDS_S.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = (LATENCY_BOUNDS_S[i] * 1e9) as u64;
        i += 1;
    }
    out
};

/// A latency histogram with the fixed [`LATENCY_BOUNDS_S`] buckets. `observe` is three
/// relaxed atomic adds; usable in a `static` (its constructor is `const`).
#[derive(Debug)]
pub struct Histogram {
    /// Non-cumulative counts; the last one is `+Inf`.
    buckets: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    pub const fn new() -> Histogram {
        Histogram {
            buckets: [const { AtomicU64::new(0) }; BUCKETS],
            sum_ns: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, d: Duration) {
        self.observe_ns(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    pub fn observe_ns(&self, ns: u64) {
        let i = BOUNDS_NS
            .iter()
            .position(|&b| ns <= b)
            .unwrap_or(BUCKETS - 1);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Number of observations so far.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// A consistent-enough copy for exposition: per-bucket counts (the encoder makes them
    /// cumulative), count and sum (seconds). Concurrent observations may land between loads;
    /// the count is derived from the buckets so `+Inf` always equals it.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut buckets = [(0.0, 0u64); BUCKETS];
        let mut count = 0u64;
        for (i, b) in self.buckets.iter().enumerate() {
            let n = b.load(Ordering::Relaxed);
            count += n;
            let bound = LATENCY_BOUNDS_S.get(i).copied().unwrap_or(f64::INFINITY);
            buckets[i] = (bound, n);
        }
        HistogramSnapshot {
            buckets,
            count,
            sum_s: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

/// A [`Histogram`] read at scrape time: (upper bound, observations in that bucket alone).
#[derive(Debug, Clone, Copy)]
pub struct HistogramSnapshot {
    pub buckets: [(f64, u64); BUCKETS],
    pub count: u64,
    pub sum_s: f64,
}

/// The exposition format a scraper gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4 (`text/plain`), the default.
    Prometheus,
    /// OpenMetrics 1.0 text, for scrapers whose `Accept` header asks for it (Prometheus
    /// itself does, first).
    OpenMetrics,
}

impl Format {
    /// Picks the format from an HTTP `Accept` header: OpenMetrics when it is listed with a
    /// quality above zero, Prometheus text otherwise.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Prometheus;
        };
        for item in accept.split(',') {
            let mut parts = item.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            if !media.eq_ignore_ascii_case("application/openmetrics-text") {
                continue;
            }
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            if !refused {
                return Format::OpenMetrics;
            }
        }
        Format::Prometheus
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Something that writes metric families at scrape time.
pub trait Source: Send + Sync + 'static {
    fn collect(&self, out: &mut Scrape<'_>) -> fmt::Result;
}

struct SourceCollector<S>(S);

impl<S> fmt::Debug for SourceCollector<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SourceCollector")
    }
}

impl<S: Source> Collector for SourceCollector<S> {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        self.0.collect(&mut Scrape { enc: encoder })
    }
}

/// Encodes everything `source` writes in `format`.
pub fn render(format: Format, source: impl Source) -> Result<String, fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SourceCollector(source)));
    let mut out = String::with_capacity(64 * 1024);
    match format {
        Format::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)?
        }
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry)?,
    }
    Ok(out)
}

/// The writer a [`Source`] gets: one call per metric family, samples as (labels, value).
/// Names are given without unit or `_total` suffix; the encoder appends them
/// (`moldau_request_latency` + seconds -> `moldau_request_latency_seconds`).
pub struct Scrape<'a> {
    enc: DescriptorEncoder<'a>,
}

impl fmt::Debug for Scrape<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Scrape")
    }
}

impl Scrape<'_> {
    /// A counter family (exported with a `_total` suffix).
    pub fn counter<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        samples: impl IntoIterator<Item = (L, u64)>,
    ) -> fmt::Result {
        let mut m = self
            .enc
            .encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
        for (labels, v) in samples {
            m.encode_family(&labels)?
                .encode_counter::<NoLabelSet, u64, u64>(&v, None)?;
        }
        Ok(())
    }

    /// A counter family with floating-point values (CPU seconds).
    pub fn counter_f64<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        samples: impl IntoIterator<Item = (L, f64)>,
    ) -> fmt::Result {
        let mut m = self
            .enc
            .encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
        for (labels, v) in samples {
            m.encode_family(&labels)?
                .encode_counter::<NoLabelSet, f64, u64>(&v, None)?;
        }
        Ok(())
    }

    /// A gauge family with integer values.
    pub fn gauge<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        samples: impl IntoIterator<Item = (L, i64)>,
    ) -> fmt::Result {
        let mut m = self
            .enc
            .encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
        for (labels, v) in samples {
            m.encode_family(&labels)?.encode_gauge(&v)?;
        }
        Ok(())
    }

    /// A gauge family with floating-point values.
    pub fn gauge_f64<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        samples: impl IntoIterator<Item = (L, f64)>,
    ) -> fmt::Result {
        let mut m = self
            .enc
            .encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
        for (labels, v) in samples {
            m.encode_family(&labels)?.encode_gauge(&v)?;
        }
        Ok(())
    }

    /// A histogram family (seconds).
    pub fn histogram<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (L, HistogramSnapshot)>,
    ) -> fmt::Result {
        let unit = Unit::Seconds;
        let mut m = self
            .enc
            .encode_descriptor(name, help, Some(&unit), MetricType::Histogram)?;
        for (labels, h) in samples {
            m.encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(h.sum_s, h.count, &h.buckets, None)?;
        }
        Ok(())
    }
}

/// No labels: for single-series families.
pub const NO_LABELS: [(&str, &str); 0] = [];

#[cfg(test)]
mod tests {
    use super::*;

    struct Demo(Histogram, AtomicU64);
    impl Source for std::sync::Arc<Demo> {
        fn collect(&self, out: &mut Scrape<'_>) -> fmt::Result {
            out.counter(
                "demo_requests",
                "Requests.",
                None,
                [([("api", "Produce")], self.1.load(Ordering::Relaxed))],
            )?;
            out.histogram(
                "demo_latency",
                "Latency.",
                [([("api", "Produce")], self.0.snapshot())],
            )
        }
    }

    #[test]
    fn buckets_are_cumulative_and_bounded() {
        let h = Histogram::new();
        h.observe(Duration::from_micros(10));
        h.observe(Duration::from_micros(300));
        h.observe(Duration::from_secs(60));
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.buckets[0], (0.00005, 1));
        assert_eq!(s.buckets[3], (0.0005, 1));
        assert_eq!(s.buckets.iter().map(|b| b.1).sum::<u64>(), 3);
        assert_eq!(s.buckets[BUCKETS - 1], (f64::INFINITY, 1));
        assert!((s.sum_s - 60.00031).abs() < 1e-9, "{}", s.sum_s);
    }

    #[test]
    fn both_formats_name_units_and_totals() {
        let d = std::sync::Arc::new(Demo(Histogram::new(), AtomicU64::new(7)));
        d.0.observe(Duration::from_millis(2));
        d.0.observe(Duration::from_millis(20));
        let text = render(Format::Prometheus, d.clone()).unwrap();
        assert!(
            text.contains("demo_requests_total{api=\"Produce\"} 7\n"),
            "{text}"
        );
        assert!(
            text.contains("demo_latency_seconds_bucket{le=\"0.0025\",api=\"Produce\"} 1")
                || text.contains("demo_latency_seconds_bucket{api=\"Produce\",le=\"0.0025\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("demo_latency_seconds_bucket{api=\"Produce\",le=\"0.025\"} 2")
                || text.contains("demo_latency_seconds_bucket{le=\"0.025\",api=\"Produce\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("demo_latency_seconds_count{api=\"Produce\"} 2"),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
        let om = render(Format::OpenMetrics, d).unwrap();
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(om.contains("# TYPE demo_latency_seconds histogram"), "{om}");
    }

    #[test]
    fn negotiation() {
        assert_eq!(Format::negotiate(None), Format::Prometheus);
        assert_eq!(Format::negotiate(Some("text/plain")), Format::Prometheus);
        // What Prometheus 2.x/3.x sends.
        assert_eq!(
            Format::negotiate(Some(
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
            )),
            Format::OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text; q=0")),
            Format::Prometheus
        );
    }
}
