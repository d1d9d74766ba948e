//! Client quota enforcement on this broker, as Kafka's `ClientQuotaManager`s: the produce,
//! fetch and request quotas of the committed metadata image (`auth::quota` computes rates
//! and throttle times), and each connection's mute (Kafka's throttled channel: nothing more
//! is read from a connection until its throttle time has passed). Also the replication
//! throttles (KIP-73, Kafka's `ReplicationQuotaManager`s `leader` and `follower`).

use auth::quota::{
    MutationQuotaManager, QuotaEntity, QuotaKind, QuotaManager, RateConfig, ReplicationQuota,
};
use metadata::MetadataImage;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The three client quota managers of a broker.
#[derive(Debug)]
pub struct ClientQuotas {
    start: Instant,
    managers: [Mutex<QuotaManager>; 3],
    /// Whether any quota of each kind is configured: the hot path takes no lock otherwise.
    enabled: [std::sync::atomic::AtomicBool; 3],
    /// `controller_mutation_rate` (KIP-599), used on the active controller.
    mutation: Arc<Mutex<MutationQuotaManager>>,
    mutation_enabled: std::sync::atomic::AtomicBool,
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
            mutation: Arc::new(Mutex::new(MutationQuotaManager::new(RateConfig {
                samples: config.controller_quota_window_num.max(1) as usize,
                window_ms: i64::from(config.controller_quota_window_size_seconds.max(1)) * 1000,
            }))),
            mutation_enabled: Default::default(),
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
        let mut m = self.mutation.lock().unwrap_or_else(|e| e.into_inner());
        m.set_quotas(&all);
        self.mutation_enabled
            .store(m.enabled(), std::sync::atomic::Ordering::Relaxed);
    }

    /// The controller mutation quota of one CreateTopics, CreatePartitions or DeleteTopics
    /// from `user` / `client_id` (Kafka's `newQuotaFor`): strict for request versions that
    /// can carry THROTTLING_QUOTA_EXCEEDED, permissive for older ones; `None` while no
    /// `controller_mutation_rate` is configured.
    pub fn mutation_quota(
        &self,
        user: &str,
        client_id: &str,
        strict: bool,
    ) -> Option<Arc<RequestMutationQuota>> {
        if !self.mutation_enabled() {
            return None;
        }
        Some(Arc::new(RequestMutationQuota {
            manager: self.mutation.clone(),
            start: self.start,
            user: user.to_string(),
            client_id: client_id.to_string(),
            strict,
            last_throttle: Mutex::new(None),
        }))
    }

    /// Whether any `controller_mutation_rate` is configured.
    pub fn mutation_enabled(&self) -> bool {
        self.mutation_enabled
            .load(std::sync::atomic::Ordering::Relaxed)
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
        let mut m = self.managers[slot(kind)]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let throttle = m.record(user, client_id, value, now);
        if tracing::enabled!(tracing::Level::TRACE) {
            let (rate, window_ms) = m.measured(user, client_id, now).unwrap_or_default();
            tracing::trace!(
                ?kind,
                user,
                client_id,
                value,
                now,
                rate,
                window_ms,
                throttle,
                "quota recorded"
            );
        }
        drop(m);
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

/// Which side of replication a throttle holds back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicationSide {
    /// What this broker sends, as a leader, to followers of throttled replicas.
    Leader,
    /// What this broker fetches, as a follower, for its throttled replicas.
    Follower,
}

impl ReplicationSide {
    pub fn label(self) -> &'static str {
        match self {
            ReplicationSide::Leader => "leader",
            ReplicationSide::Follower => "follower",
        }
    }
}

/// The broker's two replication throttles (KIP-73): bounds from the effective broker
/// configs `leader.replication.throttled.rate` / `follower.replication.throttled.rate`,
/// rates of the bytes replicated for the replicas the topics' throttled replica lists name.
/// Shared by the Fetch handler (leader side) and the replica fetchers (follower side).
#[derive(Debug)]
pub struct ReplicationQuotas {
    start: Instant,
    quotas: [Mutex<ReplicationQuota>; 2],
}

impl ReplicationQuotas {
    pub fn new(config: &model::BrokerConfig) -> ReplicationQuotas {
        let rate = RateConfig {
            samples: config.replication_quota_window_num.max(1) as usize,
            window_ms: i64::from(config.replication_quota_window_size_seconds.max(1)) * 1000,
        };
        let q = ReplicationQuotas {
            start: Instant::now(),
            quotas: [
                Mutex::new(ReplicationQuota::new(rate)),
                Mutex::new(ReplicationQuota::new(rate)),
            ],
        };
        q.update(&config.props);
        q
    }

    fn quota(&self, side: ReplicationSide) -> std::sync::MutexGuard<'_, ReplicationQuota> {
        let i = match side {
            ReplicationSide::Leader => 0,
            ReplicationSide::Follower => 1,
        };
        self.quotas[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_ms(&self) -> i64 {
        self.start.elapsed().as_millis() as i64
    }

    /// Takes the bounds of the effective broker configs (a value that does not parse, which
    /// the controller's checks keep out, is unlimited).
    pub fn update(&self, props: &BTreeMap<String, String>) {
        for (side, key) in [
            (
                ReplicationSide::Leader,
                model::config::LEADER_REPLICATION_THROTTLED_RATE,
            ),
            (
                ReplicationSide::Follower,
                model::config::FOLLOWER_REPLICATION_THROTTLED_RATE,
            ),
        ] {
            let bound = props.get(key).and_then(|v| v.trim().parse::<i64>().ok());
            self.quota(side).set_bound(bound);
        }
    }

    /// Whether this side's rate is over its bound now (never without one).
    pub fn is_exceeded(&self, side: ReplicationSide) -> bool {
        let now = self.now_ms();
        let mut q = self.quota(side);
        q.bound().is_some() && q.is_exceeded(now)
    }

    /// Records bytes replicated for throttled replicas.
    pub fn record(&self, side: ReplicationSide, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let now = self.now_ms();
        self.quota(side).record(bytes as f64, now);
        crate::metrics::METRICS.replication_throttled_bytes(side, bytes);
    }

    /// The bound (bytes/s, `None`: unlimited) and the measured rate, for `/metrics`.
    pub fn snapshot(&self, side: ReplicationSide) -> (Option<f64>, f64) {
        let now = self.now_ms();
        let mut q = self.quota(side);
        (q.bound(), q.rate(now))
    }
}

/// One request's controller mutation quota, as Kafka's `StrictControllerMutationQuota` /
/// `PermissiveControllerMutationQuota`: the controller applies it per topic; it remembers the
/// last throttle time it computed, for the response.
#[derive(Debug)]
pub struct RequestMutationQuota {
    manager: Arc<Mutex<MutationQuotaManager>>,
    start: Instant,
    user: String,
    client_id: String,
    strict: bool,
    /// The last throttle time and when it was computed.
    last_throttle: Mutex<Option<(i64, Instant)>>,
}

impl RequestMutationQuota {
    /// The throttle time to announce: the last one computed, less the time since (the
    /// controller's answer may come a while after the quota was applied).
    pub fn throttle_time_ms(&self) -> i64 {
        match *self.last_throttle.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((ms, at)) => (ms - at.elapsed().as_millis() as i64).max(0),
            None => 0,
        }
    }
}

impl controller::MutationQuota for RequestMutationQuota {
    fn apply(&self, partitions: u32) -> Result<(), controller::ControllerError> {
        let now = Instant::now();
        let now_ms = now.duration_since(self.start).as_millis() as i64;
        let mut m = self.manager.lock().unwrap_or_else(|e| e.into_inner());
        let (user, client_id) = (&self.user, &self.client_id);
        let throttle = if self.strict {
            match m.record_strict(user, client_id, f64::from(partitions), now_ms) {
                Ok(()) => return Ok(()),
                Err(ms) => Err(ms),
            }
        } else {
            Ok(m.record_permissive(user, client_id, f64::from(partitions), now_ms))
        };
        drop(m);
        let ms = match throttle {
            Ok(ms) | Err(ms) => ms,
        };
        if ms > 0 || throttle.is_err() {
            *self.last_throttle.lock().unwrap_or_else(|e| e.into_inner()) = Some((ms, now));
        }
        match throttle {
            Ok(_) => Ok(()),
            // No message: Kafka's `ApiError.fromThrowable` drops the exception's, which is
            // the error's default text.
            Err(_) => Err(controller::ControllerError::bare(
                model::ErrorCode::ThrottlingQuotaExceeded,
            )),
        }
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
