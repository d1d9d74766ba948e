//! Connection limits as Kafka's `ConnectionQuotas`: `max.connections` (broker-wide: the
//! acceptors wait for a slot), `listener.name.<listener>.max.connections` (KIP-402: that
//! listener's acceptor waits for a slot of its own), `max.connections.per.ip` with `max.connections.per.ip.overrides`
//! (a connection over its address's limit is closed at once),
//! `max.connection.creation.rate` (the acceptors pause once new connections come faster) and
//! `listener.name.<listener>.max.connection.creation.rate` (KIP-612: that listener's acceptor
//! pauses once its own connections come faster). All are read from the effective broker
//! configs at each connection, so a dynamic change (IncrementalAlterConfigs on a BROKER
//! resource) applies to the next connection. And the per-address `connection_creation_rate`
//! client quota (KIP-612, `ip` entities of the metadata image): a connection from an address
//! over its rate is not served and closed once the throttle time has passed.
//!
//! As Kafka's, a listener without a limit of its own takes the broker-wide value for itself
//! (`valuesWithPrefixOverride`), and the inter-broker listener of a broker with more than one
//! listener is *protected*: its acceptor waits for neither the broker-wide `max.connections`
//! nor `max.connection.creation.rate`, and its connections are not counted in the broker-wide
//! rate (they are in the broker-wide total, as in Kafka); only its own listener limits hold it
//! (so clients cannot starve replication of connections). When its connections take the total
//! over `max.connections` (or a lowered `max.connections` leaves more open than it allows), the
//! least recently active connections of the other listeners are told to close until the total
//! is back at the limit, as Kafka's `Processor.closeExcessConnections` closes its selector's
//! least recently used channel while `maxConnectionsExceeded`: each connection's [`Activity`]
//! (its last request read or response written, by a broker-wide sequence, so the order is
//! strict; a new connection counts as active when admitted, as Kafka registers a channel) is
//! registered here, and [`ConnectionCounts::close_excess`] picks them.

use auth::quota::{RateConfig, SampledRate};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// The limits in force, from the effective broker configs.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub max_connections: usize,
    /// `listener.name.<listener>.max.connections`, by listener name in lower case.
    pub per_listener: HashMap<String, usize>,
    pub per_ip: usize,
    pub overrides: HashMap<IpAddr, usize>,
    /// `max.connection.creation.rate` (connections/s; `f64::MAX`: none).
    pub creation_rate: f64,
    /// `listener.name.<listener>.max.connection.creation.rate`, by listener name in lower case.
    pub per_listener_rate: HashMap<String, f64>,
}

impl Limits {
    pub fn from_props(props: &BTreeMap<String, String>) -> Limits {
        let int = |k: &str| {
            props
                .get(k)
                .and_then(|v| v.trim().parse::<i64>().ok())
                .map_or(usize::MAX, |v| v.max(0) as usize)
        };
        let overrides = props
            .get("max.connections.per.ip.overrides")
            .and_then(|v| model::config::parse_connection_overrides(v).ok())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(host, n)| Some((resolve(&host)?, n.max(0) as usize)))
            .collect();
        let per_listener_value = |key: &'static str| {
            props.iter().filter_map(move |(k, v)| {
                let (listener, base) = model::config::listener_connection_limit_key(k)?;
                let n = v.trim().parse::<i64>().ok()?;
                (base == key).then(|| (listener.to_ascii_lowercase(), n.max(0)))
            })
        };
        let per_listener = per_listener_value("max.connections")
            .map(|(l, n)| (l, n as usize))
            .collect();
        let per_listener_rate = per_listener_value("max.connection.creation.rate")
            .map(|(l, n)| (l, n as f64))
            .collect();
        Limits {
            max_connections: int("max.connections"),
            per_listener,
            per_ip: int("max.connections.per.ip"),
            overrides,
            creation_rate: props
                .get("max.connection.creation.rate")
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(f64::MAX),
            per_listener_rate,
        }
    }

    fn for_ip(&self, ip: IpAddr) -> usize {
        self.overrides.get(&ip).copied().unwrap_or(self.per_ip)
    }

    /// A listener's own `max.connections`, else the broker-wide one (Kafka's listener
    /// quota is configured with `valuesWithPrefixOverride`).
    fn for_listener(&self, listener: &str) -> usize {
        self.per_listener
            .get(&listener.to_ascii_lowercase())
            .copied()
            .unwrap_or(self.max_connections)
    }

    /// A listener's own `max.connection.creation.rate`, else the broker-wide one, as
    /// `for_listener`.
    fn rate_for_listener(&self, listener: &str) -> f64 {
        self.per_listener_rate
            .get(&listener.to_ascii_lowercase())
            .copied()
            .unwrap_or(self.creation_rate)
    }
}

/// A connection creation rate limit: none when unset (`f64::MAX`). A limit of 0 is one, as in
/// Kafka: every connection exceeds it and waits one quota window (Kafka's throttle time for a
/// quota of 0 is infinite, capped at the window), so the listener accepts one connection a
/// window. Kafka accepts a 0 in the config file only; at runtime `check_listener_limits_change`
/// refuses it.
fn rate_limit(rate: f64) -> Option<f64> {
    (rate != f64::MAX).then_some(rate.max(0.0))
}

/// An override's host: an address, or a name resolved once (Kafka resolves it too).
fn resolve(host: &str) -> Option<IpAddr> {
    if let Ok(ip) = host.parse() {
        return Some(ip);
    }
    use std::net::ToSocketAddrs;
    (host, 0).to_socket_addrs().ok()?.next().map(|a| a.ip())
}

/// A connection's last activity and its close signal. The serve loop calls [`Activity::touch`]
/// when it reads a request or writes a response (two relaxed atomics, no lock) and watches
/// [`Activity::close_token`]; [`ConnectionCounts::close_excess`] cancels it.
#[derive(Debug)]
pub struct Activity {
    /// The broker-wide activity sequence ([`ConnectionCounts`]'s).
    clock: Arc<AtomicU64>,
    /// The sequence number of this connection's last activity.
    last: AtomicU64,
    /// Cancelled to close the connection: a child of the broker's shutdown token.
    close: CancellationToken,
    /// Told to close over `max.connections` (set before `close` is cancelled).
    over_max: AtomicBool,
}

impl Activity {
    fn new(clock: Arc<AtomicU64>, parent: &CancellationToken) -> Activity {
        let last = clock.fetch_add(1, Ordering::Relaxed);
        Activity {
            clock,
            last: AtomicU64::new(last),
            close: parent.child_token(),
            over_max: AtomicBool::new(false),
        }
    }

    /// Records activity now: a request read or a response written.
    pub fn touch(&self) {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        // The reader and the writer both touch: keep the later of the two.
        self.last.fetch_max(now, Ordering::Relaxed);
    }

    fn last(&self) -> u64 {
        self.last.load(Ordering::Relaxed)
    }

    /// The connection's token: cancelled when the broker shuts down or when the connection is
    /// closed over `max.connections`.
    pub fn close_token(&self) -> &CancellationToken {
        &self.close
    }

    /// Whether the connection was told to close over `max.connections`.
    pub fn closed_over_max(&self) -> bool {
        self.over_max.load(Ordering::Acquire)
    }

    /// Resolves once the connection is told to close over `max.connections` (never for a
    /// broker shutdown, where the writer drains its queued answers): the writer then drops
    /// what is queued, as Kafka closes the channel with its responses pending.
    pub async fn told_to_close(&self) {
        self.close.cancelled().await;
        if !self.closed_over_max() {
            std::future::pending::<()>().await;
        }
    }
}

/// The connections [`ConnectionCounts::close_excess`] may close: those of the listeners that are
/// not protected.
#[derive(Debug, Default)]
struct Closable {
    next_id: u64,
    conns: HashMap<u64, Arc<Activity>>,
    /// Of those, told to close and not closed yet (their slots still count).
    closing: usize,
}

/// The broker's open connections (client listeners), per address, per listener and in total.
#[derive(Debug)]
pub struct ConnectionCounts {
    per_ip: Mutex<HashMap<IpAddr, usize>>,
    per_listener: Mutex<HashMap<Arc<str>, usize>>,
    /// Changed under the `closable` lock, so `close_excess` sees it and the registry agree.
    total: AtomicUsize,
    closable: Mutex<Closable>,
    /// The activity sequence.
    clock: Arc<AtomicU64>,
    closed: tokio::sync::Notify,
    start: Instant,
    /// The broker-wide connection creation rate (every listener but a protected one).
    creation: Mutex<SampledRate>,
    /// Each listener's own connection creation rate.
    listener_creation: Mutex<HashMap<Arc<str>, SampledRate>>,
    /// `connection_creation_rate` quotas by address and the default (`ip` entities).
    ip_quotas: Mutex<IpQuotas>,
    /// Connection creation rates of the addresses with a quota.
    ip_creation: Mutex<HashMap<IpAddr, SampledRate>>,
}

/// The `connection_creation_rate` quotas of `ip` entities.
#[derive(Debug, Default)]
struct IpQuotas {
    by_ip: HashMap<IpAddr, f64>,
    default: Option<f64>,
    last_purge_ms: i64,
}

/// A rate sensor unused this long is dropped (Kafka's inactive sensor expiry, one hour).
const IP_SENSOR_EXPIRY_MS: i64 = 3_600_000;

impl Default for ConnectionCounts {
    fn default() -> Self {
        ConnectionCounts {
            per_ip: Mutex::new(HashMap::new()),
            per_listener: Mutex::new(HashMap::new()),
            total: AtomicUsize::new(0),
            closable: Mutex::new(Closable::default()),
            clock: Arc::new(AtomicU64::new(0)),
            closed: tokio::sync::Notify::new(),
            start: Instant::now(),
            creation: Mutex::new(SampledRate::new()),
            listener_creation: Mutex::new(HashMap::new()),
            ip_quotas: Mutex::new(IpQuotas::default()),
            ip_creation: Mutex::new(HashMap::new()),
        }
    }
}

/// One counted connection; dropping it gives its slot back.
#[derive(Debug)]
pub struct Slot {
    counts: Arc<ConnectionCounts>,
    ip: IpAddr,
    listener: Arc<str>,
    activity: Arc<Activity>,
    /// Its key among the closable connections (none on a protected listener).
    closable: Option<u64>,
}

impl Slot {
    /// The connection's activity record and close signal.
    pub fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut m = self.counts.per_ip.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
        drop(m);
        let mut l = self
            .counts
            .per_listener
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = l.get_mut(&self.listener) {
            *n = n.saturating_sub(1);
        }
        drop(l);
        let mut c = self
            .counts
            .closable
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(gone) = self.closable.and_then(|id| c.conns.remove(&id)) {
            if gone.closed_over_max() {
                c.closing = c.closing.saturating_sub(1);
            }
        }
        self.counts.total.fetch_sub(1, Ordering::Relaxed);
        drop(c);
        self.counts.closed.notify_waiters();
    }
}

impl ConnectionCounts {
    /// Open connections of a listener.
    pub fn listener_count(&self, listener: &str) -> usize {
        self.per_listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(listener)
            .copied()
            .unwrap_or(0)
    }

    /// Waits until `listener` is under its own `listener.name.<listener>.max.connections`
    /// (else `max.connections`) and, unless it is `protected` (the inter-broker listener of a
    /// broker with several), the broker under `max.connections` (re-read every 100 ms, so a
    /// raised limit applies), as Kafka's acceptor waits for a slot
    /// (`connectionSlotAvailable`). Returns whether it had to wait.
    pub async fn wait_for_slot(
        &self,
        listener: &str,
        protected: bool,
        limits: impl Fn() -> Limits,
    ) -> bool {
        let mut waited = false;
        loop {
            let now = limits();
            if self.listener_count(listener) < now.for_listener(listener)
                && (protected || self.total.load(Ordering::Relaxed) < now.max_connections)
            {
                return waited;
            }
            waited = true;
            let closed = self.closed.notified();
            tokio::select! {
                _ = closed => {}
                _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
            }
        }
    }

    /// Counts a new connection from `ip` on `listener`; `None` (close it) when its address is
    /// at its limit. Unless the listener is `protected`, the connection may be closed later
    /// to bring the broker back under `max.connections` (`close_excess`); its close token is
    /// a child of `parent` (the broker's shutdown token).
    pub fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        listener: &Arc<str>,
        limits: &Limits,
        protected: bool,
        parent: &CancellationToken,
    ) -> Option<Slot> {
        let mut m = self.per_ip.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n >= limits.for_ip(ip) {
            if *n == 0 {
                m.remove(&ip);
            }
            return None;
        }
        *n += 1;
        drop(m);
        *self
            .per_listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(listener.clone())
            .or_insert(0) += 1;
        let activity = Arc::new(Activity::new(self.clock.clone(), parent));
        let mut c = self.closable.lock().unwrap_or_else(|e| e.into_inner());
        let closable = (!protected).then(|| {
            let id = c.next_id;
            c.next_id += 1;
            c.conns.insert(id, activity.clone());
            id
        });
        self.total.fetch_add(1, Ordering::Relaxed);
        drop(c);
        Some(Slot {
            counts: self.clone(),
            ip,
            listener: listener.clone(),
            activity,
            closable,
        })
    }

    /// While the broker has more connections open than `max_connections` (the protected
    /// inter-broker listener passed it, or it was lowered), tells the least recently active
    /// connections of the other listeners to close, as many as the excess beyond those already
    /// told and not closed yet (Kafka's `closeExcessConnections`, one selector's
    /// `lowestPriorityChannel` at a time). Returns how many it told.
    pub fn close_excess(&self, max_connections: usize) -> usize {
        if self.total.load(Ordering::Relaxed) <= max_connections {
            return 0;
        }
        let victims: Vec<Arc<Activity>> = {
            let mut c = self.closable.lock().unwrap_or_else(|e| e.into_inner());
            let need = self
                .total
                .load(Ordering::Relaxed)
                .saturating_sub(max_connections)
                .saturating_sub(c.closing);
            if need == 0 {
                return 0;
            }
            let mut open: Vec<&Arc<Activity>> =
                c.conns.values().filter(|a| !a.closed_over_max()).collect();
            if need < open.len() {
                open.select_nth_unstable_by_key(need, |a| a.last());
                open.truncate(need);
            }
            let victims: Vec<Arc<Activity>> = open.into_iter().cloned().collect();
            for v in &victims {
                v.over_max.store(true, Ordering::Release);
            }
            c.closing += victims.len();
            victims
        };
        for v in &victims {
            v.close.cancel();
        }
        victims.len()
    }

    /// Takes the `connection_creation_rate` quotas of the `ip` entities of a newly applied
    /// image (an address's own, else the default's).
    pub fn set_ip_quotas(&self, image: &metadata::MetadataImage) {
        let mut q = self.ip_quotas.lock().unwrap_or_else(|e| e.into_inner());
        q.by_ip.clear();
        q.default = None;
        for (entity, values) in &image.client_quotas {
            let Some(rate) = values.get(auth::quota::CONNECTION_CREATION_RATE) else {
                continue;
            };
            match entity.as_slice() {
                [(ty, None)] if ty == auth::quota::ENTITY_IP => q.default = Some(*rate),
                [(ty, Some(ip))] if ty == auth::quota::ENTITY_IP => {
                    if let Ok(ip) = ip.parse() {
                        q.by_ip.insert(ip, *rate);
                    }
                }
                _ => {}
            }
        }
    }

    /// Records a new connection from `ip` against its `connection_creation_rate` quota, as
    /// Kafka's `ConnectionQuotas.recordIpConnectionMaybeThrottle`: over it, the connection is
    /// taken back out of the rate and the time (at most one quota window) after which the
    /// caller closes it, unserved, is returned; 0 within the quota or without one.
    pub fn record_ip_creation(&self, ip: IpAddr, rate: RateConfig) -> u64 {
        let now = self.start.elapsed().as_millis() as i64;
        let quota = {
            let mut q = self.ip_quotas.lock().unwrap_or_else(|e| e.into_inner());
            let quota = q.by_ip.get(&ip).copied().or(q.default);
            if now - q.last_purge_ms >= 60_000 {
                q.last_purge_ms = now;
                self.ip_creation
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .retain(|_, s| {
                        s.last_record_ms()
                            .is_some_and(|t| now - t < IP_SENSOR_EXPIRY_MS)
                    });
            }
            quota
        };
        let Some(quota) = quota else {
            return 0;
        };
        let mut rates = self.ip_creation.lock().unwrap_or_else(|e| e.into_inner());
        let sensor = rates.entry(ip).or_default();
        sensor.record(&rate, 1.0, now);
        let throttle = auth::quota::throttle_ms(&rate, rate.window_ms, sensor, quota, now);
        if throttle > 0 {
            sensor.record(&rate, -1.0, now);
        }
        throttle.max(0) as u64
    }

    /// Records a connection accepted on `listener` against `max.connection.creation.rate`
    /// (unless the listener is `protected`) and the listener's own rate (its
    /// `listener.name.<listener>.max.connection.creation.rate`, else the broker-wide one);
    /// returns how long to pause accepting on that listener (ms) to bring both rates back to
    /// their limits: the longer of the two, bounded by one window, as Kafka's
    /// `recordConnectionAndGetThrottleTimeMs`. Rates are recorded without a limit too, so a
    /// limit set later judges the connections made before it, as Kafka's sensors do.
    pub fn record_creation(
        &self,
        listener: &Arc<str>,
        protected: bool,
        limits: &Limits,
        rate: RateConfig,
    ) -> u64 {
        let now = self.start.elapsed().as_millis() as i64;
        let throttle = |sensor: &mut SampledRate, limit: f64| {
            sensor.record(&rate, 1.0, now);
            rate_limit(limit).map_or(0, |limit| {
                auth::quota::throttle_ms(&rate, rate.window_ms, sensor, limit, now).max(0)
            })
        };
        let broker = if protected {
            0
        } else {
            let mut s = self.creation.lock().unwrap_or_else(|e| e.into_inner());
            throttle(&mut s, limits.creation_rate)
        };
        let mut by_listener = self
            .listener_creation
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let own = throttle(
            by_listener.entry(listener.clone()).or_default(),
            limits.rate_for_listener(listener),
        );
        broker.max(own) as u64
    }

    /// Takes a connection `record_creation` counted back out of the broker-wide and
    /// listener rates: its address's `connection_creation_rate` refused it (Kafka's
    /// `updateListenerMetrics`, so a throttled address does not slow everyone's accepts).
    pub fn unrecord_creation(&self, listener: &Arc<str>, protected: bool, rate: RateConfig) {
        let now = self.start.elapsed().as_millis() as i64;
        if !protected {
            self.creation
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .record(&rate, -1.0, now);
        }
        if let Some(s) = self
            .listener_creation
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(listener)
        {
            s.record(&rate, -1.0, now);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn limits(pairs: &[(&str, &str)]) -> Limits {
        Limits::from_props(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn per_ip_limits_and_overrides() {
        let counts = Arc::new(ConnectionCounts::default());
        let l = limits(&[
            ("max.connections.per.ip", "2"),
            (
                "max.connections.per.ip.overrides",
                "127.0.0.2:0,127.0.0.3:3",
            ),
        ]);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let l0: Arc<str> = "PLAINTEXT".into();
        let one = counts
            .admit(a, &l0, &l, false, &CancellationToken::new())
            .unwrap();
        let _two = counts
            .admit(a, &l0, &l, false, &CancellationToken::new())
            .unwrap();
        assert!(counts
            .admit(a, &l0, &l, false, &CancellationToken::new())
            .is_none());
        drop(one);
        assert!(counts
            .admit(a, &l0, &l, false, &CancellationToken::new())
            .is_some());
        assert!(counts
            .admit(
                "127.0.0.2".parse().unwrap(),
                &l0,
                &l,
                false,
                &CancellationToken::new()
            )
            .is_none());
        let c: IpAddr = "127.0.0.3".parse().unwrap();
        let held: Vec<_> = (0..3)
            .map(|_| {
                counts
                    .admit(c, &l0, &l, false, &CancellationToken::new())
                    .unwrap()
            })
            .collect();
        assert!(counts
            .admit(c, &l0, &l, false, &CancellationToken::new())
            .is_none());
        assert_eq!(held.len(), 3);
    }

    #[tokio::test]
    async fn a_listener_at_its_own_limit_waits_and_the_others_do_not() {
        let counts = Arc::new(ConnectionCounts::default());
        let l = limits(&[("listener.name.internal.max.connections", "1")]);
        assert_eq!(l.for_listener("INTERNAL"), 1);
        assert_eq!(l.for_listener("EXTERNAL"), usize::MAX);
        let internal: Arc<str> = "INTERNAL".into();
        let external: Arc<str> = "EXTERNAL".into();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let held = counts
            .admit(ip, &internal, &l, false, &CancellationToken::new())
            .unwrap();
        // Another listener has no limit of its own: a slot at once, and more.
        assert!(!counts.wait_for_slot(&external, false, || l.clone()).await);
        let others: Vec<_> = (0..3)
            .map(|_| {
                counts
                    .admit(ip, &external, &l, false, &CancellationToken::new())
                    .unwrap()
            })
            .collect();
        assert_eq!(counts.listener_count(&external), 3);
        // The limited listener waits until its own connection closes.
        let waiting = counts.wait_for_slot(&internal, false, || l.clone());
        tokio::pin!(waiting);
        tokio::select! {
            biased;
            _ = &mut waiting => panic!("a slot on a full listener"),
            _ = std::future::ready(()) => {}
        }
        drop(others);
        assert_eq!(counts.listener_count(&external), 0);
        tokio::select! {
            biased;
            _ = &mut waiting => panic!("a slot on a full listener"),
            _ = std::future::ready(()) => {}
        }
        drop(held);
        assert!(waiting.await, "it waited");
        assert_eq!(counts.listener_count(&internal), 0);
        // Broker-wide max.connections still counts every listener.
        let l = limits(&[
            ("max.connections", "2"),
            ("listener.name.internal.max.connections", "5"),
        ]);
        let _a = counts
            .admit(ip, &external, &l, false, &CancellationToken::new())
            .unwrap();
        let _b = counts
            .admit(ip, &external, &l, false, &CancellationToken::new())
            .unwrap();
        let full = counts.wait_for_slot(&internal, false, || l.clone());
        tokio::pin!(full);
        tokio::select! {
            biased;
            _ = &mut full => panic!("a slot over max.connections"),
            _ = std::future::ready(()) => {}
        }
    }

    #[test]
    fn ip_connection_creation_rates_throttle_per_address() {
        let counts = ConnectionCounts::default();
        let mut image = metadata::MetadataImage::empty();
        let quota =
            |rate: f64| BTreeMap::from([(auth::quota::CONNECTION_CREATION_RATE.to_string(), rate)]);
        image.client_quotas.insert(
            vec![("ip".to_string(), Some("127.0.0.2".to_string()))],
            quota(1.0),
        );
        counts.set_ip_quotas(&image);
        let rate = RateConfig::default();
        let limited: IpAddr = "127.0.0.2".parse().unwrap();
        let other: IpAddr = "127.0.0.3".parse().unwrap();
        // 1/s, measured over at least 10 s at first: 10 connections at once are within it,
        // the 11th is not (and is not counted: the next is throttled for the same time, at
        // most one window).
        let throttles: Vec<u64> = (0..13)
            .map(|_| counts.record_ip_creation(limited, rate))
            .collect();
        assert!(throttles[..10].iter().all(|t| *t == 0), "{throttles:?}");
        assert!(throttles[10] > 0 && throttles[10] <= 1000, "{throttles:?}");
        assert_eq!(throttles[10], throttles[11]);
        // No quota for another address, until a default is set.
        assert!((0..50).all(|_| counts.record_ip_creation(other, rate) == 0));
        image
            .client_quotas
            .insert(vec![("ip".to_string(), None)], quota(1.0));
        counts.set_ip_quotas(&image);
        assert!((0..50).any(|_| counts.record_ip_creation(other, rate) > 0));
    }

    #[test]
    fn unlimited_without_settings_and_creation_rate_throttles() {
        let l = limits(&[]);
        assert_eq!(l.per_ip, usize::MAX);
        let counts = ConnectionCounts::default();
        let plain: Arc<str> = "PLAINTEXT".into();
        assert_eq!(
            counts.record_creation(&plain, false, &l, RateConfig::default()),
            0
        );
        let l = limits(&[("max.connection.creation.rate", "1")]);
        let throttles: Vec<u64> = (0..30)
            .map(|_| counts.record_creation(&plain, false, &l, RateConfig::default()))
            .collect();
        assert!(throttles.iter().any(|t| *t > 0), "{throttles:?}");
    }

    #[test]
    fn a_static_creation_rate_of_zero_throttles_every_connection_one_window() {
        // Kafka: a quota of 0 is violated by every connection, and the throttle time, infinite,
        // is capped at one quota window (1 s by default), the first connection's too.
        let l = limits(&[("max.connection.creation.rate", "0")]);
        let counts = ConnectionCounts::default();
        let plain = burst(&counts, "PLAINTEXT", false, &l, 5);
        assert_eq!(plain, vec![1000; 5]);
        // The protected inter-broker listener is out of the broker-wide rate, but takes it for
        // its own when it has none.
        assert_eq!(burst(&counts, "INTERNAL", true, &l, 2), vec![1000; 2]);
        // A listener's own static 0 holds that listener only.
        let l = limits(&[("listener.name.external.max.connection.creation.rate", "0")]);
        let counts = ConnectionCounts::default();
        assert_eq!(burst(&counts, "EXTERNAL", false, &l, 3), vec![1000; 3]);
        assert!(burst(&counts, "INTERNAL", false, &l, 50)
            .iter()
            .all(|t| *t == 0));
        // A listener's own rate overrides a broker-wide 0 for itself, but the broker-wide 0
        // still holds the listener's connections (the longer throttle wins), unless the
        // listener is protected.
        let l = limits(&[
            ("max.connection.creation.rate", "0"),
            ("listener.name.internal.max.connection.creation.rate", "100"),
        ]);
        let counts = ConnectionCounts::default();
        assert_eq!(burst(&counts, "INTERNAL", false, &l, 1), vec![1000]);
        assert_eq!(burst(&counts, "INTERNAL", true, &l, 3), vec![0; 3]);
    }

    /// The throttles of `n` connections accepted at once on `listener`.
    fn burst(
        counts: &ConnectionCounts,
        listener: &str,
        protected: bool,
        l: &Limits,
        n: usize,
    ) -> Vec<u64> {
        let listener: Arc<str> = listener.into();
        (0..n)
            .map(|_| counts.record_creation(&listener, protected, l, RateConfig::default()))
            .collect()
    }

    #[test]
    fn a_listeners_own_creation_rate_throttles_that_listener_only() {
        let l = limits(&[("listener.name.external.max.connection.creation.rate", "1")]);
        assert_eq!(l.rate_for_listener("EXTERNAL"), 1.0);
        assert_eq!(l.rate_for_listener("INTERNAL"), f64::MAX);
        let counts = ConnectionCounts::default();
        // 1/s measured over at least 10 s at first (11 one-second samples): 10 at once are
        // within it, the 11th waits, at most one window.
        let external = burst(&counts, "EXTERNAL", false, &l, 12);
        assert!(external[..10].iter().all(|t| *t == 0), "{external:?}");
        assert!(external[10] > 0 && external[10] <= 1000, "{external:?}");
        // Another listener has no rate of its own and the broker none: never throttled.
        assert!(burst(&counts, "INTERNAL", false, &l, 50)
            .iter()
            .all(|t| *t == 0));
        // The broker-wide rate counts every listener; a listener's throttle is the longer of
        // its own and the broker's.
        let counts = ConnectionCounts::default();
        let l = limits(&[
            ("max.connection.creation.rate", "3"),
            ("listener.name.external.max.connection.creation.rate", "1"),
        ]);
        assert!(burst(&counts, "INTERNAL", false, &l, 30)
            .iter()
            .all(|t| *t == 0));
        let internal = burst(&counts, "INTERNAL", false, &l, 5);
        assert!(internal.iter().all(|t| *t > 0), "{internal:?}");
        let external = burst(&counts, "EXTERNAL", false, &l, 1);
        assert!(external[0] >= internal[4], "{external:?} {internal:?}");
    }

    #[test]
    fn the_protected_inter_broker_listener_is_out_of_the_broker_wide_limits() {
        // Kafka's protected listener: the broker-wide rate neither counts nor throttles it,
        // but it takes that value for its own rate when it has none.
        let l = limits(&[("max.connection.creation.rate", "10")]);
        let counts = ConnectionCounts::default();
        assert!(burst(&counts, "PLAINTEXT", false, &l, 100)
            .iter()
            .all(|t| *t == 0));
        let clients = burst(&counts, "PLAINTEXT", false, &l, 1);
        assert!(clients[0] > 0, "{clients:?}");
        // The inter-broker listener: only its own connections count for it (100 within 10/s).
        let replication = burst(&counts, "INTERNAL", true, &l, 101);
        assert!(
            replication[..100].iter().all(|t| *t == 0),
            "{replication:?}"
        );
        assert!(replication[100] > 0, "{replication:?}");
        // And they did not count broker-wide: the client listener's next one waits a little
        // longer (one more connection), not the whole window 101 more would bring.
        let again = burst(&counts, "PLAINTEXT", false, &l, 1);
        assert!(
            again[0] > clients[0] && again[0] < 1000,
            "{again:?} {clients:?}"
        );
        // Its own value, when set, is its limit.
        let l = limits(&[
            ("max.connection.creation.rate", "10"),
            ("listener.name.internal.max.connection.creation.rate", "100"),
        ]);
        let counts = ConnectionCounts::default();
        assert!(burst(&counts, "INTERNAL", true, &l, 500)
            .iter()
            .all(|t| *t == 0));
        assert_eq!(burst(&counts, "PLAINTEXT", false, &l, 1), vec![0]);
    }

    #[tokio::test]
    async fn the_protected_listener_does_not_wait_for_a_broker_wide_slot() {
        let counts = Arc::new(ConnectionCounts::default());
        let l = limits(&[("max.connections", "2")]);
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let (clients, internal): (Arc<str>, Arc<str>) = ("PLAINTEXT".into(), "INTERNAL".into());
        let _held: Vec<_> = (0..2)
            .map(|_| {
                counts
                    .admit(ip, &clients, &l, false, &CancellationToken::new())
                    .unwrap()
            })
            .collect();
        // Full broker-wide: a client listener waits, the protected listener does not...
        let waiting = counts.wait_for_slot(&clients, false, || l.clone());
        tokio::pin!(waiting);
        tokio::select! {
            biased;
            _ = &mut waiting => panic!("a slot over max.connections"),
            _ = std::future::ready(()) => {}
        }
        assert!(!counts.wait_for_slot(&internal, true, || l.clone()).await);
        // ...up to its own max.connections, which falls back to the broker-wide value.
        let _own: Vec<_> = (0..2)
            .map(|_| {
                counts
                    .admit(ip, &internal, &l, true, &CancellationToken::new())
                    .unwrap()
            })
            .collect();
        let full = counts.wait_for_slot(&internal, true, || l.clone());
        tokio::pin!(full);
        tokio::select! {
            biased;
            _ = &mut full => panic!("a slot over the listener's max.connections"),
            _ = std::future::ready(()) => {}
        }
    }

    #[test]
    fn a_connection_refused_by_its_address_quota_is_taken_out_of_the_listener_rates() {
        let l = limits(&[
            ("max.connection.creation.rate", "1"),
            ("listener.name.external.max.connection.creation.rate", "1"),
        ]);
        let counts = ConnectionCounts::default();
        let external: Arc<str> = "EXTERNAL".into();
        let rate = RateConfig::default();
        for _ in 0..100 {
            assert_eq!(counts.record_creation(&external, false, &l, rate), 0);
            counts.unrecord_creation(&external, false, rate);
        }
        assert_eq!(counts.record_creation(&external, false, &l, rate), 0);
    }

    #[test]
    fn over_max_connections_the_least_recently_active_other_connections_close() {
        // Kafka's closeExcessConnections: the protected listener passes max.connections, and
        // the other listeners' least recently used channels close until the total is back.
        let counts = Arc::new(ConnectionCounts::default());
        let l = limits(&[("max.connections", "3")]);
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let (clients, internal): (Arc<str>, Arc<str>) = ("PLAINTEXT".into(), "INTERNAL".into());
        let broker = CancellationToken::new();
        let admit = |listener: &Arc<str>, protected: bool| {
            counts.admit(ip, listener, &l, protected, &broker).unwrap()
        };
        let (a, b, c) = (
            admit(&clients, false),
            admit(&clients, false),
            admit(&clients, false),
        );
        // At the limit: nothing to close.
        assert_eq!(counts.close_excess(3), 0);
        // All as idle as when admitted: the oldest goes first (Kafka's LRU order counts a new
        // channel's registration as its first use).
        let p1 = admit(&internal, true);
        assert_eq!(counts.close_excess(3), 1);
        assert!(a.activity().closed_over_max() && a.activity().close_token().is_cancelled());
        assert!(![&b, &c, &p1]
            .iter()
            .any(|s| s.activity().close_token().is_cancelled()));
        // Told and not closed yet: its slot still counts, but no second one is told.
        assert_eq!(counts.close_excess(3), 0);
        drop(a);
        assert_eq!(counts.close_excess(3), 0);
        // b is used (a request read): c is now the least recently active.
        b.activity().touch();
        let p2 = admit(&internal, true);
        assert_eq!(counts.close_excess(3), 1);
        assert!(c.activity().closed_over_max());
        assert!(!b.activity().closed_over_max());
        // Protected connections are never closed: with only b left to close, a third one
        // over the limit closes b, and a fourth finds nothing.
        drop(c);
        let p3 = admit(&internal, true);
        assert_eq!(counts.close_excess(3), 1);
        assert!(b.activity().closed_over_max());
        drop(b);
        let p4 = admit(&internal, true);
        assert_eq!(counts.close_excess(3), 0);
        for p in [&p1, &p2, &p3, &p4] {
            assert!(!p.activity().close_token().is_cancelled());
        }
        drop((p1, p2, p3, p4));
        // A lowered max.connections closes as many as it takes, least recently active first;
        // a broker shutdown cancels every token but is not a close over the limit.
        let conns: Vec<Slot> = (0..5).map(|_| admit(&clients, false)).collect();
        conns[0].activity().touch();
        conns[3].activity().touch();
        assert_eq!(counts.close_excess(2), 3);
        let told: Vec<bool> = conns
            .iter()
            .map(|s| s.activity().closed_over_max())
            .collect();
        assert_eq!(told, vec![false, true, true, false, true]);
        broker.cancel();
        assert!(conns[0].activity().close_token().is_cancelled());
        assert!(!conns[0].activity().closed_over_max());
    }

    #[tokio::test]
    async fn the_writer_stops_only_when_told_to_close_over_the_limit() {
        let counts = Arc::new(ConnectionCounts::default());
        let l = limits(&[("max.connections", "1")]);
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let clients: Arc<str> = "PLAINTEXT".into();
        let broker = CancellationToken::new();
        let shut = counts.admit(ip, &clients, &l, false, &broker).unwrap();
        broker.cancel();
        {
            let told = shut.activity().told_to_close();
            tokio::pin!(told);
            tokio::select! {
                biased;
                _ = &mut told => panic!("a shutdown is not a close over max.connections"),
                _ = std::future::ready(()) => {}
            }
        }
        drop(shut);
        let other = CancellationToken::new();
        let first = counts.admit(ip, &clients, &l, false, &other).unwrap();
        let _second = counts.admit(ip, &clients, &l, true, &other).unwrap();
        assert_eq!(counts.close_excess(1), 1);
        first.activity().told_to_close().await;
    }
}
