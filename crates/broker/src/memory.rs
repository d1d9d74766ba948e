//! Memory budgets that keep a hostile or slow client from growing the broker: the broker-wide
//! budget for request bytes (`queued.max.request.bytes`), with its default derived from the
//! machine's memory, and each connection's bound on unwritten response bytes.

use std::sync::atomic::{AtomicUsize, Ordering};

use model::BrokerConfig;
use tokio::sync::Notify;

/// The default request budget is this fraction of the memory the broker may use.
const REQUEST_BUDGET_MEMORY_DIVISOR: u64 = 8;
/// Used when the machine's memory cannot be read.
const REQUEST_BUDGET_FALLBACK_BYTES: u64 = 512 << 20;

/// The memory this process may use: `MemTotal`, capped by a cgroup limit (v2 `memory.max`,
/// v1 `memory.limit_in_bytes`) when one is set. None when neither can be read.
pub fn usable_memory_bytes() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
    });
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .filter_map(|p| std::fs::read_to_string(p).ok())
    .find_map(|s| s.trim().parse::<u64>().ok());
    match (total, cgroup) {
        (Some(t), Some(c)) => Some(t.min(c)),
        (t, c) => t.or(c),
    }
}

/// The broker-wide budget for bytes of requests being read or handled. Set explicitly by
/// `queued.max.request.bytes` (Kafka's name); when it is unset or -1 (Kafka: unbounded) Moldau
/// takes an eighth of the usable memory. Never below `socket.request.max.bytes`, so a request
/// of the largest allowed size can always be read.
pub fn request_budget_bytes(config: &BrokerConfig) -> usize {
    let frame_max = config.socket_request_max_bytes.max(0) as u64;
    let budget = if config.queued_max_request_bytes > 0 {
        config.queued_max_request_bytes as u64
    } else {
        usable_memory_bytes()
            .map(|m| m / REQUEST_BUDGET_MEMORY_DIVISOR)
            .unwrap_or(REQUEST_BUDGET_FALLBACK_BYTES)
    };
    // tokio semaphores hold at most usize::MAX >> 3 permits.
    budget.max(frame_max).min((usize::MAX >> 3) as u64) as usize
}

/// Bytes of one connection's responses that are queued or being written, and a wake-up for
/// the connection's reader when they drop. The reader processes no further request while
/// the bytes are over the connection's bound, so a client that does not read its responses
/// stops being served (and read) instead of growing the broker.
#[derive(Debug, Default)]
pub struct ResponseBytes {
    queued: AtomicUsize,
    drained: Notify,
}

impl ResponseBytes {
    pub fn add(&self, n: usize) {
        self.queued.fetch_add(n, Ordering::AcqRel);
    }

    pub fn remove(&self, n: usize) {
        self.queued.fetch_sub(n, Ordering::AcqRel);
        self.drained.notify_one();
    }

    /// Waits until at most `bound` bytes are queued. Cancel-safe.
    pub async fn wait_at_most(&self, bound: usize) {
        loop {
            let notified = self.drained.notified();
            if self.queued.load(Ordering::Acquire) <= bound {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_budget_comes_from_memory_and_admits_the_largest_request() {
        let mut c = BrokerConfig::default();
        let auto = request_budget_bytes(&c);
        assert!(auto >= c.socket_request_max_bytes as usize);
        if let Some(m) = usable_memory_bytes() {
            assert!(auto as u64 <= (m / REQUEST_BUDGET_MEMORY_DIVISOR).max(100 << 20));
        }
        c.queued_max_request_bytes = 1 << 20;
        assert_eq!(
            request_budget_bytes(&c),
            c.socket_request_max_bytes as usize
        );
        c.queued_max_request_bytes = 1 << 30;
        assert_eq!(request_budget_bytes(&c), 1 << 30);
    }

    #[tokio::test]
    async fn waiting_for_drained_responses() {
        let r = std::sync::Arc::new(ResponseBytes::default());
        r.add(100);
        r.wait_at_most(100).await;
        let r2 = r.clone();
        let waiter = tokio::spawn(async move { r2.wait_at_most(10).await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        r.remove(95);
        waiter.await.unwrap();
    }
}
