//! Client quota enforcement on this broker, as Kafka's `ClientQuotaManager`s: the produce,
//! fetch and request quotas of the committed metadata image (`auth::quota` computes rates
//! and throttle times), and each connection's mute (Kafka's throttled channel: nothing more
//! is read from a connection until its throttle time has passed).

use auth::quota::{QuotaEntity, QuotaKind, QuotaManager, RateConfig};
use metadata::MetadataImage;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The three client quota managers of a broker.
#[derive(Debug)]
pub struct ClientQuotas {
    start: Instant,
    managers: [Mutex<QuotaManager>; 3],
    /// Whether any quota of each kind is configured: the hot path takes no lock otherwise.
    enabled: [std::sync::atomic::AtomicBool; 3],
}

fn slot(kind: QuotaKind) -> usize {
    match kind {
        QuotaKind::Produce => 0,
        QuotaKind::Fetch => 1,
        QuotaKind::Request => 2,
    }
}

impl ClientQuotas {
    pub fn new(config: &model::BrokerConfig) -> ClientQuotas {
        let rate = RateConfig {
            samples: config.quota_window_num.max(1) as usize,
            window_ms: i64::from(config.quota_window_size_seconds.max(1)) * 1000,
        };
        ClientQuotas {
            start: Instant::now(),
            managers: [QuotaKind::Produce, QuotaKind::Fetch, QuotaKind::Request]
                .map(|k| Mutex::new(QuotaManager::new(k, rate))),
            enabled: Default::default(),
        }
    }

    /// Takes the quotas of a newly applied image.
    pub fn update(&self, image: &MetadataImage) {
        let mut all: BTreeMap<QuotaEntity, BTreeMap<String, f64>> = BTreeMap::new();
        for (entity, values) in &image.client_quotas {
            let pairs = entity.iter().map(|(t, n)| (t.as_str(), n.as_deref()));
            // Stored entities were validated by the controller; skip any this build cannot read.
            if let Ok(e) = QuotaEntity::from_pairs(pairs) {
                all.insert(e, values.clone());
            }
        }
        for m in &self.managers {
            let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
            m.set_quotas(&all);
            self.enabled[slot(m.kind())].store(m.enabled(), std::sync::atomic::Ordering::Relaxed);
        }
    }

    pub fn enabled(&self, kind: QuotaKind) -> bool {
        self.enabled[slot(kind)].load(std::sync::atomic::Ordering::Relaxed)
    }

    fn now_ms(&self) -> i64 {
        self.start.elapsed().as_millis() as i64
    }

    /// Records `value` (bytes, or request-handler percentage-seconds) for the client and
    /// returns the throttle time in ms, 0 when within its quota or without one.
    pub fn record(&self, kind: QuotaKind, user: &str, client_id: &str, value: f64) -> i64 {
        if !self.enabled(kind) {
            return 0;
        }
        let now = self.now_ms();
        let throttle = self.managers[slot(kind)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(user, client_id, value, now);
        if throttle > 0 {
            crate::metrics::METRICS.throttled(kind, throttle);
        }
        throttle
    }

    /// Takes back a recorded value (Kafka's `unrecordQuotaSensor`: a throttled Fetch is
    /// answered without its records, so they do not count).
    pub fn unrecord(&self, kind: QuotaKind, user: &str, client_id: &str, value: f64) {
        if self.enabled(kind) {
            let now = self.now_ms();
            self.managers[slot(kind)]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .record(user, client_id, -value, now);
        }
    }

    /// The largest fetch response the client's consumer byte rate allows at once (Kafka's
    /// `maxValueInQuotaWindow`), `None` without a fetch quota for it.
    pub fn max_fetch_bytes(&self, user: &str, client_id: &str) -> Option<usize> {
        let kind = QuotaKind::Fetch;
        if !self.enabled(kind) {
            return None;
        }
        let max = self.managers[slot(kind)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .max_value_in_window(user, client_id)?;
        Some(max.clamp(1.0, usize::MAX as f64) as usize)
    }

    /// The throttle time the client's current rate calls for, recording nothing (the
    /// request quota is recorded after the handler ran, but announced in its response).
    pub fn pending(&self, kind: QuotaKind, user: &str, client_id: &str) -> i64 {
        if !self.enabled(kind) {
            return 0;
        }
        let now = self.now_ms();
        self.managers[slot(kind)]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .throttle_time(user, client_id, now)
    }
}

/// Kafka's request-time unit: handler nanoseconds as percentage-seconds of one thread.
pub fn nanos_to_percentage(nanos: u128) -> f64 {
    nanos as f64 * 100.0 / 1e9
}

/// One connection's mute: the time until which nothing more is read from it.
#[derive(Debug, Default)]
pub struct ConnThrottle {
    until: Mutex<Option<Instant>>,
}

impl ConnThrottle {
    /// Mutes the connection for `ms` from now (or longer, if already muted longer).
    pub fn mute_for(&self, ms: i64) {
        if ms <= 0 {
            return;
        }
        let t = Instant::now() + Duration::from_millis(ms as u64);
        let mut u = self.until.lock().unwrap_or_else(|e| e.into_inner());
        if u.is_none_or(|old| old < t) {
            *u = Some(t);
        }
    }

    /// When the mute ends, if muted now.
    pub fn muted_until(&self) -> Option<Instant> {
        let u = *self.until.lock().unwrap_or_else(|e| e.into_inner());
        u.filter(|t| *t > Instant::now())
    }
}
