//! Connection limits as Kafka's `ConnectionQuotas`: `max.connections` (broker-wide: the
//! acceptors wait for a slot), `listener.name.<listener>.max.connections` (KIP-402: that
//! listener's acceptor waits for a slot of its own), `max.connections.per.ip` with `max.connections.per.ip.overrides`
//! (a connection over its address's limit is closed at once) and
//! `max.connection.creation.rate` (the acceptors pause once new connections come faster). All
//! are read from the effective broker configs at each connection, so a dynamic change
//! (IncrementalAlterConfigs on a BROKER resource) applies to the next connection.

use auth::quota::{RateConfig, SampledRate};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The limits in force, from the effective broker configs.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub max_connections: usize,
    /// `listener.name.<listener>.max.connections`, by listener name in lower case.
    pub per_listener: HashMap<String, usize>,
    pub per_ip: usize,
    pub overrides: HashMap<IpAddr, usize>,
    pub creation_rate: f64,
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
        let per_listener = props
            .iter()
            .filter_map(|(k, v)| {
                let listener = model::config::listener_max_connections_key(k)?;
                let n = v.trim().parse::<i64>().ok()?;
                Some((listener.to_ascii_lowercase(), n.max(0) as usize))
            })
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
        }
    }

    fn for_ip(&self, ip: IpAddr) -> usize {
        self.overrides.get(&ip).copied().unwrap_or(self.per_ip)
    }

    /// A listener's own limit (Kafka falls back to the broker-wide one, which is checked
    /// anyway).
    fn for_listener(&self, listener: &str) -> usize {
        self.per_listener
            .get(&listener.to_ascii_lowercase())
            .copied()
            .unwrap_or(usize::MAX)
    }
}

/// An override's host: an address, or a name resolved once (Kafka resolves it too).
fn resolve(host: &str) -> Option<IpAddr> {
    if let Ok(ip) = host.parse() {
        return Some(ip);
    }
    use std::net::ToSocketAddrs;
    (host, 0).to_socket_addrs().ok()?.next().map(|a| a.ip())
}

/// The broker's open connections (client listeners), per address, per listener and in total.
#[derive(Debug)]
pub struct ConnectionCounts {
    per_ip: Mutex<HashMap<IpAddr, usize>>,
    per_listener: Mutex<HashMap<Arc<str>, usize>>,
    total: AtomicUsize,
    closed: tokio::sync::Notify,
    start: Instant,
    creation: Mutex<SampledRate>,
}

impl Default for ConnectionCounts {
    fn default() -> Self {
        ConnectionCounts {
            per_ip: Mutex::new(HashMap::new()),
            per_listener: Mutex::new(HashMap::new()),
            total: AtomicUsize::new(0),
            closed: tokio::sync::Notify::new(),
            start: Instant::now(),
            creation: Mutex::new(SampledRate::new()),
        }
    }
}

/// One counted connection; dropping it gives its slot back.
#[derive(Debug)]
pub struct Slot {
    counts: Arc<ConnectionCounts>,
    ip: IpAddr,
    listener: Arc<str>,
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
        self.counts.total.fetch_sub(1, Ordering::Relaxed);
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

    /// Waits until the broker is under `max.connections` and `listener` under its own
    /// `listener.name.<listener>.max.connections` (re-read every 100 ms, so a raised limit
    /// applies), as Kafka's acceptor waits for a slot. Returns whether it had to wait.
    pub async fn wait_for_slot(&self, listener: &str, limits: impl Fn() -> Limits) -> bool {
        let mut waited = false;
        loop {
            let now = limits();
            if self.total.load(Ordering::Relaxed) < now.max_connections
                && self.listener_count(listener) < now.for_listener(listener)
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
    /// at its limit.
    pub fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        listener: &Arc<str>,
        limits: &Limits,
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
        self.total.fetch_add(1, Ordering::Relaxed);
        Some(Slot {
            counts: self.clone(),
            ip,
            listener: listener.clone(),
        })
    }

    /// Records an accepted connection against `max.connection.creation.rate`; returns how
    /// long to pause accepting (ms) to bring the rate back to it, as Kafka's acceptor throttle.
    pub fn record_creation(&self, limits: &Limits, rate: RateConfig) -> u64 {
        if limits.creation_rate == f64::MAX || limits.creation_rate <= 0.0 {
            return 0;
        }
        let now = self.start.elapsed().as_millis() as i64;
        let mut s = self.creation.lock().unwrap_or_else(|e| e.into_inner());
        s.record(&rate, 1.0, now);
        // Bounded by one window, as Kafka's acceptor throttle.
        let throttle =
            auth::quota::throttle_ms(&rate, rate.window_ms, &mut s, limits.creation_rate, now);
        throttle.max(0) as u64
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
        let one = counts.admit(a, &l0, &l).unwrap();
        let _two = counts.admit(a, &l0, &l).unwrap();
        assert!(counts.admit(a, &l0, &l).is_none());
        drop(one);
        assert!(counts.admit(a, &l0, &l).is_some());
        assert!(counts
            .admit("127.0.0.2".parse().unwrap(), &l0, &l)
            .is_none());
        let c: IpAddr = "127.0.0.3".parse().unwrap();
        let held: Vec<_> = (0..3).map(|_| counts.admit(c, &l0, &l).unwrap()).collect();
        assert!(counts.admit(c, &l0, &l).is_none());
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
        let held = counts.admit(ip, &internal, &l).unwrap();
        // Another listener has no limit of its own: a slot at once, and more.
        assert!(!counts.wait_for_slot(&external, || l.clone()).await);
        let others: Vec<_> = (0..3)
            .map(|_| counts.admit(ip, &external, &l).unwrap())
            .collect();
        assert_eq!(counts.listener_count(&external), 3);
        // The limited listener waits until its own connection closes.
        let waiting = counts.wait_for_slot(&internal, || l.clone());
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
        let _a = counts.admit(ip, &external, &l).unwrap();
        let _b = counts.admit(ip, &external, &l).unwrap();
        let full = counts.wait_for_slot(&internal, || l.clone());
        tokio::pin!(full);
        tokio::select! {
            biased;
            _ = &mut full => panic!("a slot over max.connections"),
            _ = std::future::ready(()) => {}
        }
    }

    #[test]
    fn unlimited_without_settings_and_creation_rate_throttles() {
        let l = limits(&[]);
        assert_eq!(l.per_ip, usize::MAX);
        let counts = ConnectionCounts::default();
        assert_eq!(counts.record_creation(&l, RateConfig::default()), 0);
        let l = limits(&[("max.connection.creation.rate", "1")]);
        let throttles: Vec<u64> = (0..30)
            .map(|_| counts.record_creation(&l, RateConfig::default()))
            .collect();
        assert!(throttles.iter().any(|t| *t > 0), "{throttles:?}");
    }
}
