//! Process metrics with the standard Prometheus names (`process_*`), read from `/proc/self`
//! at scrape time. On a system without `/proc` the families are written without samples.

use crate::{Scrape, NO_LABELS};
use prometheus_client::registry::Unit;
use std::fmt;

/// Linux reports CPU times in USER_HZ clock ticks, which the kernel fixes at 100 for
/// userspace on every architecture it supports.
const USER_HZ: f64 = 100.0;

/// What `/proc/self` says about this process.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<i64>,
    pub virtual_bytes: Option<i64>,
    pub threads: Option<i64>,
    pub open_fds: Option<i64>,
    pub max_fds: Option<i64>,
}

impl ProcessStats {
    pub fn read() -> ProcessStats {
        let mut s = ProcessStats::default();
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            // The command name (field 2) may hold spaces: fields are counted after its ')'.
            if let Some((_, rest)) = stat.rsplit_once(')') {
                let f: Vec<&str> = rest.split_whitespace().collect();
                // rest[0] is field 3 (state); utime and stime are fields 14 and 15.
                if let (Some(u), Some(st)) = (
                    f.get(11).and_then(|v| v.parse::<f64>().ok()),
                    f.get(12).and_then(|v| v.parse::<f64>().ok()),
                ) {
                    s.cpu_seconds = Some((u + st) / USER_HZ);
                }
            }
        }
        if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
            for line in status.lines() {
                let kib = |l: &str| -> Option<i64> {
                    l.split_whitespace()
                        .nth(1)?
                        .parse::<i64>()
                        .ok()
                        .map(|k| k * 1024)
                };
                if line.starts_with("VmRSS:") {
                    s.resident_bytes = kib(line);
                } else if line.starts_with("VmSize:") {
                    s.virtual_bytes = kib(line);
                } else if let Some(v) = line.strip_prefix("Threads:") {
                    s.threads = v.trim().parse().ok();
                }
            }
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            s.open_fds = Some(dir.count() as i64);
        }
        if let Ok(limits) = std::fs::read_to_string("/proc/self/limits") {
            s.max_fds = limits
                .lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|v| v.parse().ok());
        }
        s
    }

    pub fn collect(&self, out: &mut Scrape<'_>) -> fmt::Result {
        let one = |v: Option<i64>| v.map(|v| (NO_LABELS, v));
        out.counter_f64(
            "process_cpu",
            "Total user and system CPU time spent.",
            Some(Unit::Seconds),
            self.cpu_seconds.map(|v| (NO_LABELS, v)),
        )?;
        out.gauge(
            "process_resident_memory",
            "Resident memory size.",
            Some(Unit::Bytes),
            one(self.resident_bytes),
        )?;
        out.gauge(
            "process_virtual_memory",
            "Virtual memory size.",
            Some(Unit::Bytes),
            one(self.virtual_bytes),
        )?;
        out.gauge("process_threads", "OS threads.", None, one(self.threads))?;
        out.gauge(
            "process_open_fds",
            "Open file descriptors.",
            None,
            one(self.open_fds),
        )?;
        out.gauge(
            "process_max_fds",
            "The open-file limit.",
            None,
            one(self.max_fds),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let s = ProcessStats::read();
        if std::path::Path::new("/proc/self/stat").exists() {
            assert!(s.resident_bytes.unwrap_or(0) > 0, "{s:?}");
            assert!(s.threads.unwrap_or(0) >= 1, "{s:?}");
            assert!(s.open_fds.unwrap_or(0) >= 3, "{s:?}");
            assert!(s.cpu_seconds.is_some(), "{s:?}");
        }
    }
}
