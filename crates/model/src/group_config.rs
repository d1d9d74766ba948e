//! Group configs (config resource type GROUP, KIP-848): per-group overrides of the broker's
//! `group.*` settings, with Kafka 4.x's names, defaults, broker synonyms and validation.
//!
//! A group's effective value comes from, in order: the group's own override, the broker's
//! synonym (`consumer.session.timeout.ms` <- `group.consumer.session.timeout.ms`), Kafka's
//! default. Values are checked against the broker's bounds (`group.consumer.min.session.
//! timeout.ms`...) as Kafka's `GroupConfig.validate` does.
//!
//! Kafka applies these settings to consumer (KIP-848), share and streams groups only; classic
//! groups take their timeouts from JoinGroup.

use crate::config::{ConfigDef, ConfigError, ConfigSource, ConfigType};
use std::collections::BTreeMap;

/// How a group config value is checked beyond its type.
#[derive(Clone, Copy, Debug)]
pub enum Check {
    /// An int within the broker's `[min key, max key]` bounds.
    Range(&'static str, &'static str),
    /// An int at least this.
    AtLeast(i64),
    /// An int at least 0 and at most the broker key's value.
    AtMost(&'static str),
    /// An int at least the broker key's value.
    AtLeastKey(&'static str),
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// `earliest`, `latest` or `by_duration:<ISO-8601 duration>`.
    AutoOffsetReset,
    /// A topic name that does not start with `__` (or empty).
    DlqTopic,
    /// A comma-separated list without duplicates.
    DistinctList,
    /// One of the assignor names the broker's `group.streams.assignors` lists.
    StreamsAssignor,
    /// Anything of the right type.
    Any,
}

/// One group config key.
#[derive(Debug)]
pub struct GroupConfigDef {
    pub def: ConfigDef,
    /// Internal keys can be set but are not listed by DescribeConfigs.
    pub internal: bool,
    pub check: Check,
}

const fn group(
    name: &'static str,
    synonym: Option<&'static str>,
    default: &'static str,
    kind: ConfigType,
    check: Check,
    doc: &'static str,
) -> GroupConfigDef {
    GroupConfigDef {
        def: ConfigDef {
            name,
            broker_synonym: synonym,
            default,
            kind,
            doc,
            topic: false,
        },
        internal: false,
        check,
    }
}

const fn internal(mut d: GroupConfigDef) -> GroupConfigDef {
    d.internal = true;
    d
}

use Check::*;
use ConfigType::{Boolean, Int, List, Long, String as Str};

/// Every group config of Kafka 4.4, in Kafka's order of DescribeConfigs (by name).
pub static GROUP_CONFIGS: &[GroupConfigDef] = &[
    group(
        "consumer.assignment.interval.ms",
        Some("group.consumer.assignment.interval.ms"),
        "1000",
        Int,
        Range(
            "group.consumer.min.assignment.interval.ms",
            "group.consumer.max.assignment.interval.ms",
        ),
        "The minimum time between assignments of a consumer group",
    ),
    internal(group(
        "consumer.assignor.offload.enable",
        Some("group.consumer.assignor.offload.enable"),
        "true",
        Boolean,
        Any,
        "Whether consumer group assignments run off the coordinator thread",
    )),
    group(
        "consumer.heartbeat.interval.ms",
        Some("group.consumer.heartbeat.interval.ms"),
        "5000",
        Int,
        Range(
            "group.consumer.min.heartbeat.interval.ms",
            "group.consumer.max.heartbeat.interval.ms",
        ),
        "The heartbeat interval given to the members of a consumer group",
    ),
    group(
        "consumer.session.timeout.ms",
        Some("group.consumer.session.timeout.ms"),
        "45000",
        Int,
        Range(
            "group.consumer.min.session.timeout.ms",
            "group.consumer.max.session.timeout.ms",
        ),
        "The timeout to detect client failures when using the consumer group protocol",
    ),
    group(
        "errors.deadletterqueue.copy.record.enable",
        None,
        "false",
        Boolean,
        Any,
        "Whether records written to the share group's dead-letter queue copy the original record",
    ),
    group(
        "errors.deadletterqueue.topic.name",
        None,
        "",
        Str,
        DlqTopic,
        "The share group's dead-letter queue topic; blank for none",
    ),
    group(
        "share.assignment.interval.ms",
        Some("group.share.assignment.interval.ms"),
        "1000",
        Int,
        Range(
            "group.share.min.assignment.interval.ms",
            "group.share.max.assignment.interval.ms",
        ),
        "The minimum time between assignments of a share group",
    ),
    internal(group(
        "share.assignor.offload.enable",
        Some("group.share.assignor.offload.enable"),
        "true",
        Boolean,
        Any,
        "Whether share group assignments run off the coordinator thread",
    )),
    group(
        "share.auto.offset.reset",
        None,
        "latest",
        Str,
        AutoOffsetReset,
        "How a share-partition's start offset is initialised",
    ),
    group(
        "share.delivery.count.limit",
        Some("group.share.delivery.count.limit"),
        "5",
        Int,
        Range(
            "group.share.min.delivery.count.limit",
            "group.share.max.delivery.count.limit",
        ),
        "The maximum number of delivery attempts for a record delivered to a share group",
    ),
    group(
        "share.heartbeat.interval.ms",
        Some("group.share.heartbeat.interval.ms"),
        "5000",
        Int,
        Range(
            "group.share.min.heartbeat.interval.ms",
            "group.share.max.heartbeat.interval.ms",
        ),
        "The heartbeat interval given to the members of a share group",
    ),
    group(
        "share.isolation.level",
        None,
        "read_uncommitted",
        Str,
        OneOf(&["read_committed", "read_uncommitted"]),
        "How a share group reads records written transactionally",
    ),
    group(
        "share.partition.max.record.locks",
        Some("group.share.partition.max.record.locks"),
        "2000",
        Int,
        Range(
            "group.share.min.partition.max.record.locks",
            "group.share.max.partition.max.record.locks",
        ),
        "Share-group record locks per share-partition",
    ),
    group(
        "share.record.lock.duration.ms",
        Some("group.share.record.lock.duration.ms"),
        "30000",
        Int,
        Range(
            "group.share.min.record.lock.duration.ms",
            "group.share.max.record.lock.duration.ms",
        ),
        "The record acquisition lock duration of a share group",
    ),
    group(
        "share.renew.acknowledge.enable",
        None,
        "true",
        Boolean,
        Any,
        "Whether the renew acknowledge type is enabled for the share group",
    ),
    group(
        "share.session.timeout.ms",
        Some("group.share.session.timeout.ms"),
        "45000",
        Int,
        Range(
            "group.share.min.session.timeout.ms",
            "group.share.max.session.timeout.ms",
        ),
        "The timeout to detect client failures when using the share group protocol",
    ),
    internal(group(
        "streams.acceptable.recovery.lag",
        Some("group.streams.acceptable.recovery.lag"),
        "10000",
        Long,
        AtLeast(0),
        "The lag below which a streams task counts as caught up",
    )),
    group(
        "streams.assignment.interval.ms",
        Some("group.streams.assignment.interval.ms"),
        "1000",
        Int,
        Range(
            "group.streams.min.assignment.interval.ms",
            "group.streams.max.assignment.interval.ms",
        ),
        "The minimum time between assignments of a streams group",
    ),
    group(
        "streams.assignor.name",
        Some("group.streams.assignors"),
        "sticky",
        Str,
        StreamsAssignor,
        "The task assignor of a streams group, by name",
    ),
    internal(group(
        "streams.assignor.offload.enable",
        Some("group.streams.assignor.offload.enable"),
        "true",
        Boolean,
        Any,
        "Whether streams group assignments run off the coordinator thread",
    )),
    group(
        "streams.heartbeat.interval.ms",
        Some("group.streams.heartbeat.interval.ms"),
        "5000",
        Int,
        Range(
            "group.streams.min.heartbeat.interval.ms",
            "group.streams.max.heartbeat.interval.ms",
        ),
        "The heartbeat interval given to the members of a streams group",
    ),
    group(
        "streams.initial.rebalance.delay.ms",
        Some("group.streams.initial.rebalance.delay.ms"),
        "3000",
        Int,
        AtLeast(0),
        "How long a new streams group waits for members before its first assignment",
    ),
    group(
        "streams.num.standby.replicas",
        Some("group.streams.num.standby.replicas"),
        "0",
        Int,
        AtMost("group.streams.max.standby.replicas"),
        "The number of standby replicas of each streams task",
    ),
    internal(group(
        "streams.num.warmup.replicas",
        Some("group.streams.num.warmup.replicas"),
        "2",
        Int,
        AtMost("group.streams.max.warmup.replicas"),
        "The number of warm-up replicas of each streams task",
    )),
    group(
        "streams.rack.aware.assignment.tags",
        Some("group.streams.rack.aware.assignment.tags"),
        "",
        List,
        DistinctList,
        "Client tag keys the streams assignor spreads standby replicas over",
    ),
    group(
        "streams.session.timeout.ms",
        Some("group.streams.session.timeout.ms"),
        "45000",
        Int,
        Range(
            "group.streams.min.session.timeout.ms",
            "group.streams.max.session.timeout.ms",
        ),
        "The timeout to detect client failures when using the streams group protocol",
    ),
    internal(group(
        "streams.task.offset.interval.ms",
        Some("group.streams.task.offset.interval.ms"),
        "60000",
        Int,
        AtLeastKey("group.streams.min.task.offset.interval.ms"),
        "How often streams members report task offsets",
    )),
];

/// Broker keys that bound or default group configs (with Kafka 4.4's defaults), beyond the
/// synonyms named in [`GROUP_CONFIGS`].
pub static GROUP_BROKER_CONFIGS: &[(&str, &str)] = &[
    ("group.consumer.min.session.timeout.ms", "45000"),
    ("group.consumer.max.session.timeout.ms", "60000"),
    ("group.consumer.min.heartbeat.interval.ms", "5000"),
    ("group.consumer.max.heartbeat.interval.ms", "15000"),
    ("group.consumer.min.assignment.interval.ms", "0"),
    ("group.consumer.max.assignment.interval.ms", "15000"),
    ("group.share.min.session.timeout.ms", "45000"),
    ("group.share.max.session.timeout.ms", "60000"),
    ("group.share.min.heartbeat.interval.ms", "5000"),
    ("group.share.max.heartbeat.interval.ms", "15000"),
    ("group.share.min.assignment.interval.ms", "0"),
    ("group.share.max.assignment.interval.ms", "15000"),
    ("group.share.min.delivery.count.limit", "2"),
    ("group.share.max.delivery.count.limit", "10"),
    ("group.share.min.partition.max.record.locks", "100"),
    ("group.share.max.partition.max.record.locks", "4000"),
    ("group.share.min.record.lock.duration.ms", "15000"),
    ("group.share.max.record.lock.duration.ms", "60000"),
    ("group.streams.min.session.timeout.ms", "45000"),
    ("group.streams.max.session.timeout.ms", "60000"),
    ("group.streams.min.heartbeat.interval.ms", "5000"),
    ("group.streams.max.heartbeat.interval.ms", "15000"),
    ("group.streams.min.assignment.interval.ms", "0"),
    ("group.streams.max.assignment.interval.ms", "15000"),
    ("group.streams.max.standby.replicas", "2"),
    ("group.streams.max.warmup.replicas", "20"),
    ("group.streams.min.task.offset.interval.ms", "15000"),
];

/// Session timeout / heartbeat interval pairs: the timeout must exceed the interval.
const SESSION_PAIRS: &[(&str, &str)] = &[
    (
        "consumer.session.timeout.ms",
        "consumer.heartbeat.interval.ms",
    ),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
    (
        "streams.session.timeout.ms",
        "streams.heartbeat.interval.ms",
    ),
];

/// The definition of a group config key (internal keys included).
pub fn group_config_def(name: &str) -> Option<&'static GroupConfigDef> {
    GROUP_CONFIGS.iter().find(|d| d.def.name == name)
}

/// The default of a broker key that sets or bounds a group config, if it is one.
pub fn group_broker_default(name: &str) -> Option<&'static str> {
    GROUP_BROKER_CONFIGS
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| *v)
        .or_else(|| {
            GROUP_CONFIGS
                .iter()
                .find(|d| d.def.broker_synonym == Some(name))
                .map(|d| d.def.default)
        })
}

/// The effective value of group config `name` and where it came from.
pub fn lookup(
    name: &str,
    broker: &BTreeMap<String, String>,
    group: &BTreeMap<String, String>,
) -> Option<(String, ConfigSource)> {
    let d = group_config_def(name)?;
    if let Some(v) = group.get(name) {
        return Some((v.clone(), ConfigSource::Group));
    }
    if let Some(v) = d.def.broker_synonym.and_then(|s| broker.get(s)) {
        // The group default is the first of the broker's assignors.
        let v = v.split(',').next().unwrap_or_default().trim().to_string();
        return Some((v, ConfigSource::StaticBroker));
    }
    Some((d.def.default.to_string(), ConfigSource::Default))
}

fn broker_int(broker: &BTreeMap<String, String>, key: &str) -> i64 {
    broker
        .get(key)
        .map(String::as_str)
        .or_else(|| group_broker_default(key))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Checks a group's overrides (the full set it would have after a change) as Kafka's
/// `GroupConfig.validate` does: known names, typed values, broker bounds, and each session
/// timeout above its heartbeat interval.
pub fn validate(
    group: &BTreeMap<String, String>,
    broker: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    for (k, v) in group {
        let d = group_config_def(k)
            .ok_or_else(|| ConfigError::new(k, v, format!("Unknown group config name: {k}")))?;
        check_value(d, k, v, broker)?;
    }
    for (session, heartbeat) in SESSION_PAIRS {
        let value = |n: &str| -> i64 {
            lookup(n, broker, group)
                .and_then(|(v, _)| v.trim().parse().ok())
                .unwrap_or(0)
        };
        if value(session) <= value(heartbeat) {
            return Err(ConfigError::new(
                session,
                &value(session).to_string(),
                format!("{session} must be greater than {heartbeat}"),
            ));
        }
    }
    Ok(())
}

fn check_value(
    d: &GroupConfigDef,
    k: &str,
    v: &str,
    broker: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    let t = v.trim();
    let int = |lo: i64, hi: i64| -> Result<i64, ConfigError> {
        let n: i64 = t
            .parse()
            .map_err(|_| ConfigError::new(k, v, "expected an integer"))?;
        if d.def.kind == Int && i32::try_from(n).is_err() {
            return Err(ConfigError::new(k, v, "expected a 32-bit integer"));
        }
        if n < lo || n > hi {
            return Err(ConfigError::new(
                k,
                v,
                format!("must be between {lo} and {hi}"),
            ));
        }
        Ok(n)
    };
    match d.def.kind {
        Boolean if !matches!(t.to_ascii_lowercase().as_str(), "true" | "false") => {
            return Err(ConfigError::new(k, v, "expected true or false"))
        }
        Int | Long if !matches!(d.check, Range(..) | AtLeast(_) | AtMost(_) | AtLeastKey(_)) => {
            int(i64::MIN, i64::MAX)?;
        }
        _ => {}
    }
    match d.check {
        Range(lo, hi) => {
            int(broker_int(broker, lo), broker_int(broker, hi))?;
        }
        AtLeast(min) => {
            int(min, i64::MAX)?;
        }
        AtMost(key) => {
            int(0, broker_int(broker, key))?;
        }
        AtLeastKey(key) => {
            int(broker_int(broker, key), i64::MAX)?;
        }
        OneOf(allowed) => {
            if !allowed.contains(&t) {
                return Err(ConfigError::new(
                    k,
                    v,
                    format!("expected one of {}", allowed.join(", ")),
                ));
            }
        }
        AutoOffsetReset => {
            let ok = t == "earliest"
                || t == "latest"
                || t.strip_prefix("by_duration:").is_some_and(iso_duration);
            if !ok {
                return Err(ConfigError::new(
                    k,
                    v,
                    "expected earliest, latest or by_duration:<ISO-8601 duration>",
                ));
            }
        }
        DlqTopic => {
            if t.starts_with("__") {
                return Err(ConfigError::new(
                    k,
                    v,
                    "DLQ topic name must not start with '__'",
                ));
            }
        }
        DistinctList => {
            let items: Vec<&str> = t
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            let mut sorted = items.clone();
            sorted.sort_unstable();
            sorted.dedup();
            if sorted.len() != items.len() {
                return Err(ConfigError::new(k, v, "must not contain duplicates"));
            }
        }
        StreamsAssignor => {
            let names = broker
                .get("group.streams.assignors")
                .map(String::as_str)
                .unwrap_or("sticky");
            if !names.split(',').map(str::trim).any(|n| n == t) {
                return Err(ConfigError::new(
                    k,
                    v,
                    format!("expected one of the broker's assignors: {names}"),
                ));
            }
        }
        Any => {}
    }
    Ok(())
}

/// Checks the broker's own `group.*` settings: bounds are integers, and the defaults they set
/// are valid group values (a broker default outside the broker's bounds is an error).
pub fn validate_broker(broker: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    for (k, _) in GROUP_BROKER_CONFIGS {
        if let Some(v) = broker.get(*k) {
            v.trim()
                .parse::<i32>()
                .map_err(|_| ConfigError::new(k, v, "expected a 32-bit integer"))?;
        }
    }
    for d in GROUP_CONFIGS {
        if let Some((key, v)) = d
            .def
            .broker_synonym
            .and_then(|s| broker.get(s).map(|v| (s, v)))
        {
            // The assignor synonym is the broker's list of assignors, not one name.
            if d.def.kind != List && !matches!(d.check, StreamsAssignor) {
                check_value(d, key, v, broker)?;
            }
        }
    }
    validate(&BTreeMap::new(), broker)
}

/// Whether `s` is a non-negative ISO-8601 duration as Java's `Duration.parse` reads it
/// (`PnDTnHnMn.nS`).
fn iso_duration(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('P').or_else(|| s.strip_prefix('p')) else {
        return false;
    };
    let (days, time) = match rest.split_once(['T', 't']) {
        Some((d, t)) => (d, Some(t)),
        None => (rest, None),
    };
    let units = |part: &str, allowed: &[char]| -> Option<usize> {
        let mut count = 0;
        let mut num = String::new();
        let mut next = 0;
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                num.push(c);
            } else {
                let pos = allowed
                    .iter()
                    .position(|a| a.eq_ignore_ascii_case(&c))
                    .filter(|&p| p >= next)?;
                if num.is_empty() || num.parse::<f64>().is_err() {
                    return None;
                }
                num.clear();
                next = pos + 1;
                count += 1;
            }
        }
        num.is_empty().then_some(count)
    };
    let Some(d) = units(days, &['D']) else {
        return false;
    };
    match time {
        Some(t) => units(t, &['H', 'M', 'S']).is_some_and(|n| n > 0),
        None => d > 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_and_sources() {
        let none = BTreeMap::new();
        assert_eq!(
            lookup("consumer.session.timeout.ms", &none, &none),
            Some(("45000".into(), ConfigSource::Default))
        );
        let broker = map(&[("group.consumer.session.timeout.ms", "50000")]);
        assert_eq!(
            lookup("consumer.session.timeout.ms", &broker, &none),
            Some(("50000".into(), ConfigSource::StaticBroker))
        );
        let g = map(&[("consumer.session.timeout.ms", "55000")]);
        assert_eq!(
            lookup("consumer.session.timeout.ms", &broker, &g),
            Some(("55000".into(), ConfigSource::Group))
        );
        assert_eq!(
            GROUP_CONFIGS.iter().filter(|d| !d.internal).count(),
            21,
            "Kafka 4.4 lists 21 group configs"
        );
        let names: Vec<&str> = GROUP_CONFIGS.iter().map(|d| d.def.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
    }

    #[test]
    fn validation_follows_kafka() {
        let b = BTreeMap::new();
        assert!(validate(&map(&[("consumer.session.timeout.ms", "50000")]), &b).is_ok());
        // Below group.consumer.min.session.timeout.ms.
        assert!(validate(&map(&[("consumer.session.timeout.ms", "1")]), &b).is_err());
        assert!(validate(&map(&[("nosuch", "1")]), &b).is_err());
        // Session must exceed heartbeat; the bounds allow 15000 for heartbeats.
        assert!(validate(&map(&[("consumer.heartbeat.interval.ms", "15000")]), &b).is_ok());
        let bounds = map(&[("group.consumer.min.session.timeout.ms", "1000")]);
        assert!(validate(
            &map(&[
                ("consumer.session.timeout.ms", "6000"),
                ("consumer.heartbeat.interval.ms", "6000")
            ]),
            &bounds
        )
        .is_err());
        assert!(validate(&map(&[("share.isolation.level", "read_committed")]), &b).is_ok());
        assert!(validate(&map(&[("share.isolation.level", "x")]), &b).is_err());
        assert!(validate(&map(&[("share.auto.offset.reset", "by_duration:PT1H")]), &b).is_ok());
        assert!(validate(
            &map(&[("share.auto.offset.reset", "by_duration:P1DT2H3.5S")]),
            &b
        )
        .is_ok());
        assert!(validate(&map(&[("share.auto.offset.reset", "by_duration:1h")]), &b).is_err());
        assert!(validate(&map(&[("errors.deadletterqueue.topic.name", "__x")]), &b).is_err());
        assert!(validate(&map(&[("streams.num.standby.replicas", "3")]), &b).is_err());
        assert!(validate(&map(&[("streams.assignor.name", "sticky")]), &b).is_ok());
        assert!(validate(&map(&[("streams.assignor.name", "other")]), &b).is_err());
        assert!(validate(&map(&[("streams.rack.aware.assignment.tags", "a,b,a")]), &b).is_err());
        assert!(validate(&map(&[("share.renew.acknowledge.enable", "yes")]), &b).is_err());
    }
}
