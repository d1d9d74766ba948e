//! Runtime log levels: Kafka's BROKER_LOGGER config resource over `tracing` targets.
//!
//! A logger is a `tracing` target (a module path such as `broker::connection`, a crate such as
//! `storage`) or `root`, the level of every target without one of its own. Loggers are named
//! with dots as Kafka's are (`broker.connection`): Kafka's kafka-configs refuses `:` in a name,
//! and a Rust module path has no dots, so the two spellings map one to one. The process's log
//! filter is installed once by the binary ([`install`]) with a function that replaces it; every
//! change rebuilds the filter from the levels set here (`root,target=level,...`). As in Kafka,
//! levels set at runtime are not persisted: a restart starts again from `RUST_LOG`.
//!
//! The loggers listed are `root`, the targets named by `RUST_LOG` or set at runtime, and every
//! target (dependencies included) whose log statements the process reached so far, at any
//! level ([`saw_target`]), with their prefixes (`broker` for `broker::connection`): as Kafka
//! lists the log4j loggers of the classes loaded so far.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// The logger that sets the level of every target without one.
pub const ROOT: &str = "root";

/// Kafka's valid log levels (`LogLevelConfig.VALID_LOG_LEVELS`), most severe first.
pub const LEVELS: [&str; 6] = ["FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"];

type Apply = std::sync::Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

struct Loggers {
    root: &'static str,
    levels: BTreeMap<String, &'static str>,
    /// `RUST_LOG` directives that are not a plain `target=level` (span or field filters): kept
    /// in the filter, not listed.
    extra: Vec<String>,
    seen: BTreeSet<String>,
    apply: Option<Apply>,
}

static LOGGERS: Mutex<Loggers> = Mutex::new(Loggers {
    root: "INFO",
    levels: BTreeMap::new(),
    extra: Vec::new(),
    seen: BTreeSet::new(),
    apply: None,
});

fn lock() -> std::sync::MutexGuard<'static, Loggers> {
    LOGGERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Kafka's name of a level (`info` -> `INFO`), or `None` when it is not one.
fn kafka_level(s: &str) -> Option<&'static str> {
    let upper = s.trim().to_ascii_uppercase();
    LEVELS.into_iter().find(|l| *l == upper)
}

/// The `tracing` directive level of a Kafka level (`tracing` has no FATAL: it is ERROR).
fn directive_level(level: &str) -> &'static str {
    match level {
        "FATAL" | "ERROR" => "error",
        "WARN" => "warn",
        "INFO" => "info",
        "DEBUG" => "debug",
        _ => "trace",
    }
}

impl Loggers {
    fn directives(&self) -> String {
        let mut parts = vec![directive_level(self.root).to_string()];
        parts.extend(
            self.levels
                .iter()
                .map(|(t, l)| format!("{t}={}", directive_level(l))),
        );
        parts.extend(self.extra.iter().cloned());
        parts.join(",")
    }

    fn effective(&self, target: &str) -> &'static str {
        let mut t = target;
        loop {
            if let Some(l) = self.levels.get(t) {
                return l;
            }
            match t.rfind("::") {
                Some(i) => t = &t[..i],
                None => return self.root,
            }
        }
    }
}

/// Takes the process's starting directives (`RUST_LOG`, or `info`) and the function that
/// replaces the process's log filter; [`apply`] with no change then installs the first filter.
pub fn install(base: &str, apply: Apply) {
    let mut l = lock();
    for d in base.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if let Some(level) = kafka_level(d) {
            l.root = level;
            continue;
        }
        match d.split_once('=') {
            Some((t, v)) if !t.contains(['[', '{']) && kafka_level(v).is_some() => {
                let level = kafka_level(v).unwrap_or("INFO");
                l.levels.insert(t.to_string(), level);
            }
            _ => l.extra.push(d.to_string()),
        }
    }
    l.apply = Some(apply);
}

/// Records a target whose log statement the process reached (called once per call site).
pub fn saw_target(target: &str) {
    let mut l = lock();
    if !l.seen.contains(target) {
        see(&mut l.seen, target);
    }
}

fn see(seen: &mut BTreeSet<String>, target: &str) {
    let mut t = target;
    loop {
        seen.insert(t.to_string());
        match t.rfind("::") {
            Some(i) => t = &t[..i],
            None => break,
        }
    }
}

/// Every logger (dotted name) with its level (`root` first), or `None` when no filter was installed (a
/// broker inside a test process).
pub fn describe() -> Option<Vec<(String, &'static str)>> {
    let l = lock();
    l.apply.as_ref()?;
    let mut names: BTreeSet<&str> = l.seen.iter().map(String::as_str).collect();
    names.extend(l.levels.keys().map(String::as_str));
    names.remove(ROOT);
    let mut out = vec![(ROOT.to_string(), l.root)];
    out.extend(
        names
            .into_iter()
            .map(|n| (n.replace("::", "."), l.effective(n))),
    );
    Some(out)
}

/// One requested change of a logger (dotted name): a level to set, or `None` to delete the
/// logger's own level.
pub type Change = (String, Option<String>);

/// Checks a BROKER_LOGGER change as Kafka does (`ConfigAdminManager.validateLogLevelConfigs`):
/// `Err((invalid_config, message))`, where `invalid_config` false means INVALID_REQUEST.
pub fn validate(changes: &[Change]) -> Result<(), (bool, String)> {
    let listed = describe().ok_or((
        false,
        "This process has no runtime log levels (no log filter installed)".to_string(),
    ))?;
    for (name, level) in changes {
        if !listed.iter().any(|(n, _)| n == name) {
            return Err((true, format!("Logger {name} does not exist!")));
        }
        match level {
            Some(v) if kafka_level(v).is_none() || v.trim() != v.to_ascii_uppercase() => {
                return Err((
                    true,
                    format!(
                        "Cannot set the log level of {name} to {v} as it is not a supported log level. Valid log levels are {}",
                        LEVELS.join(", ")
                    ),
                ))
            }
            None if name == ROOT => {
                return Err((
                    false,
                    format!("Removing the log level of the {ROOT} logger is not allowed"),
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Applies validated changes to the process's log filter, at once.
pub fn apply(changes: Vec<Change>) -> Result<(), String> {
    // One change at a time, so filters are installed in the order their levels were set.
    static APPLYING: Mutex<()> = Mutex::new(());
    let _one = APPLYING.lock().unwrap_or_else(|e| e.into_inner());
    let mut l = lock();
    for (name, level) in changes {
        let level = level.as_deref().and_then(kafka_level);
        let target = name.replace('.', "::");
        match (name.as_str(), level) {
            (ROOT, Some(v)) => l.root = v,
            (_, Some(v)) => {
                l.levels.insert(target, v);
            }
            (_, None) => {
                l.levels.remove(&target);
            }
        }
    }
    let directives = l.directives();
    let f = l.apply.clone().ok_or("no log filter installed")?;
    // Outside the lock: a new filter registers every call site again (`saw_target`).
    drop(l);
    f(&directives)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_the_longest_prefix_and_rebuild_the_filter() {
        let mut l = Loggers {
            root: "WARN",
            levels: BTreeMap::new(),
            extra: vec!["[span]=trace".into()],
            seen: BTreeSet::new(),
            apply: None,
        };
        l.levels.insert("broker".into(), "DEBUG");
        l.levels.insert("broker::connection".into(), "FATAL");
        assert_eq!(l.effective("broker::connection::x"), "FATAL");
        assert_eq!(l.effective("broker::state"), "DEBUG");
        assert_eq!(l.effective("storage::log"), "WARN");
        assert_eq!(
            l.directives(),
            "warn,broker=debug,broker::connection=error,[span]=trace"
        );
        assert_eq!(kafka_level("debug"), Some("DEBUG"));
        assert_eq!(kafka_level("ALL"), None);
    }
}
