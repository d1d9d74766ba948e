//! Normalisation: rewrites a response's JSON so that what legitimately differs between two
//! brokers compares equal, and nothing else does. Each rule, and why it is legitimate:
//!
//! - `throttle_time_ms` -> 0: quota throttling depends on load, not on semantics.
//! - `error_message` (and `batch_index_error_message`) -> `"<message>"` when it has text:
//!   messages are free text (clients show them, none branch on them). Null and `""` are kept:
//!   whether a message is there at all is the broker's answer (Kafka answers null on success
//!   where its `ApiError` carries none, `""` where the schema default stands).
//! - `documentation` -> `"<doc>"` when present: config docs are prose.
//! - `cluster_id` -> `"$cluster"`; node ids equal to the broker's own id (`node_id`,
//!   `leader_id`, `controller_id`, `broker_id`, replica/ISR lists) -> `"$node"`; `host` and
//!   `port` equal to its advertised address -> `"$host"` / `"$port"`: identities of two
//!   different clusters.
//! - Server-generated identifiers are replaced by aliases in order of first appearance in the
//!   run (`#member1`, `#producer1`), and topic ids by the name of their topic
//!   (`$id(@name)`), so the same sequence of events yields the same aliases on both sides:
//!   `member_id` / `leader` strings, `producer_id` >= 0, `topic_id`.
//! - Fetch session ids (non-zero) are aliased the same way (`#session1`): they are random.
//! - Listings of the whole cluster (Metadata for all topics, ListGroups, DescribeLogDirs for
//!   all topics) keep only the run's own entries: other runs, tests and tools share the
//!   brokers, and internal topics exist once something made them.
//! - Wall-clock timestamps (fields named `*timestamp*` or `*_time_ms`, values after 2001)
//!   -> `"$time"`: the two brokers' clocks. Scenarios use small fixed timestamps where the
//!   value matters, and those are kept.
//! - `log_dir` -> `"$dir"`; `total_bytes` / `usable_bytes` -> `"$bytes"`: the machine's disks.
//! - The run's name prefix is replaced by `@` again, and list entries named with another
//!   run's prefix are dropped: concurrent runs share the brokers.
//! - A partial record batch at the end of a Fetch answer is dropped: Kafka sends a raw slice
//!   of the log file that may end inside a batch (clients discard the fragment); Moldau sends
//!   whole batches.
//! - Arrays of objects are sorted by their identity fields (name, partition, group, member,
//!   node...), because Kafka's responses are built from hash maps in many places and no
//!   client depends on their order; arrays whose order means something (config synonyms,
//!   records, record headers) keep it.
//! - ApiVersions: the API table and feature lists are not compared (each broker advertises
//!   what it implements; the harness itself intersects the tables); the error code is.

use serde_json::{Map, Value};
use std::cmp::Ordering;
use std::collections::HashMap;

/// The identities of one broker that its responses may contain.
#[derive(Clone, Debug)]
pub struct Identity {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// Timestamps above this (2001-09-09) are wall-clock readings.
const WALL_CLOCK_MS: i64 = 1_000_000_000_000;

/// Fields whose value is a node id or a list of them.
const NODE_FIELDS: &[&str] = &[
    "node_id",
    "leader_id",
    "controller_id",
    "broker_id",
    "replica_nodes",
    "isr_nodes",
    "offline_replicas",
    "eligible_leader_replicas",
    "last_known_elr",
];

/// Arrays kept in their order.
const ORDERED_FIELDS: &[&str] = &["synonyms", "records", "headers"];

/// Fields that identify a list entry, in sort priority.
const IDENTITY_FIELDS: &[&str] = &[
    "name",
    "topic",
    "topic_name",
    "topic_id",
    "partition_index",
    "partition",
    "index",
    "group_id",
    "transactional_id",
    "resource_type",
    "resource_name",
    "node_id",
    "broker_id",
    "member_id",
    "api_key",
    "config_name",
];

/// Normalises the responses of one run on one broker. Keeps the alias tables, so aliases
/// stay consistent across the run's steps.
#[derive(Debug)]
pub struct Normalizer {
    identity: Identity,
    prefix: String,
    aliases: HashMap<(&'static str, String), String>,
    counters: HashMap<&'static str, usize>,
    topic_names: HashMap<String, String>,
}

/// Whether `s` starts like a run prefix (see [`crate::runner::run_prefix`]).
pub fn looks_like_run_name(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() > crate::runner::PREFIX_LEN
        && b.starts_with(b"cf")
        && b[2..6].iter().all(u8::is_ascii_hexdigit)
        && b[6..11].iter().all(u8::is_ascii_digit)
        && b[11] == b'-'
}

impl Normalizer {
    pub fn new(identity: Identity, prefix: String) -> Normalizer {
        Normalizer {
            identity,
            prefix,
            aliases: HashMap::new(),
            counters: HashMap::new(),
            topic_names: HashMap::new(),
        }
    }

    /// The normalised form of a response of `api` (by Kafka's name) to `request` (its JSON as
    /// sent) at `version`.
    pub fn response(&mut self, api: &str, request: &Value, version: i16, mut v: Value) -> Value {
        v = self.response_body(api, v);
        // Listings of the whole cluster keep only the run's own entries: other runs, other
        // tests and tools share the brokers, and internal topics exist when something made
        // them (both are covered by scenarios that name them).
        let all_topics = match request.get("topics") {
            None | Some(Value::Null) => true,
            Some(Value::Array(a)) => a.is_empty() && version == 0,
            _ => false,
        };
        let own = |x: &Value, key: &str| {
            x.get(key)
                .and_then(Value::as_str)
                .is_some_and(|n| n.starts_with('@'))
        };
        match api {
            "Metadata" if all_topics => {
                if let Some(Value::Array(a)) = v.get_mut("topics") {
                    a.retain(|t| own(t, "name"));
                }
            }
            "ListGroups" => {
                if let Some(Value::Array(a)) = v.get_mut("groups") {
                    a.retain(|g| own(g, "group_id"));
                }
            }
            "DescribeLogDirs" if all_topics => {
                if let Some(Value::Array(dirs)) = v.get_mut("results") {
                    for d in dirs {
                        if let Some(Value::Array(a)) = d.get_mut("topics") {
                            a.retain(|t| own(t, "name"));
                        }
                    }
                }
            }
            _ => {}
        }
        v
    }

    fn response_body(&mut self, api: &str, mut v: Value) -> Value {
        if api == "ApiVersions" {
            if let Some(o) = v.as_object_mut() {
                o.insert("api_keys".into(), Value::String("<api table>".into()));
                for f in [
                    "supported_features",
                    "finalized_features",
                    "finalized_features_epoch",
                    "zk_migration_ready",
                ] {
                    o.remove(f);
                }
            }
        }
        self.value(None, v)
    }

    fn alias(&mut self, class: &'static str, raw: String) -> Value {
        let key = (class, raw);
        if let Some(a) = self.aliases.get(&key) {
            return Value::String(a.clone());
        }
        let n = self.counters.entry(class).or_insert(0);
        *n += 1;
        let a = format!("#{class}{n}");
        self.aliases.insert(key, a.clone());
        Value::String(a)
    }

    fn string(&self, s: String) -> Value {
        match s.strip_prefix(&self.prefix) {
            Some(rest) => Value::String(format!("@{rest}")),
            None => Value::String(s),
        }
    }

    fn node(&self, v: Value) -> Value {
        match v.as_i64() {
            Some(n) if n == i64::from(self.identity.node_id) => Value::String("$node".into()),
            _ => v,
        }
    }

    fn value(&mut self, key: Option<&str>, v: Value) -> Value {
        match v {
            Value::Object(o) => Value::Object(self.object(o)),
            Value::Array(items) => self.array(key, items),
            Value::String(s) => self.string(s),
            other => other,
        }
    }

    fn array(&mut self, key: Option<&str>, items: Vec<Value>) -> Value {
        if key.is_some_and(|k| NODE_FIELDS.contains(&k)) {
            return Value::Array(items.into_iter().map(|x| self.node(x)).collect());
        }
        let mut out: Vec<Value> = items
            .into_iter()
            .map(|x| self.value(None, x))
            .filter(|x| !is_foreign(x))
            // A partial batch at the end of a Fetch answer is an artifact of Kafka sending a
            // raw slice of the log file; clients discard it.
            .filter(|x| !(key == Some("records") && x.get("partial_bytes").is_some()))
            .collect();
        if !key.is_some_and(|k| ORDERED_FIELDS.contains(&k)) && out.iter().all(Value::is_object) {
            out.sort_by(compare_entries);
        }
        Value::Array(out)
    }

    /// Scalars first, in key order, then nested values: identifiers get their aliases in an
    /// order that depends only on the response's content (a JoinGroup's leader and own member
    /// id before its member list, whatever order the broker lists members in).
    fn object(&mut self, o: Map<String, Value>) -> Map<String, Value> {
        let name = ["name", "topic", "topic_name"]
            .iter()
            .find_map(|k| o.get(*k).and_then(Value::as_str))
            .filter(|n| !n.is_empty())
            .map(|n| match self.string(n.to_string()) {
                Value::String(s) => s,
                _ => n.to_string(),
            });
        let mut out = Map::new();
        let mut nested = Vec::new();
        for (k, v) in o {
            if v.is_object() || v.is_array() {
                nested.push((k, v));
                continue;
            }
            let nv = self.scalar(&k, v, name.as_deref());
            out.insert(k, nv);
        }
        for (k, v) in nested {
            let nv = self.value(Some(&k), v);
            out.insert(k, nv);
        }
        out
    }

    fn scalar(&mut self, key: &str, v: Value, name: Option<&str>) -> Value {
        match key {
            "throttle_time_ms" => Value::from(0),
            // The text is free, but whether there is one is not: Kafka answers null on
            // success where its ApiError has no message, "" where the schema default stands.
            "error_message" | "batch_index_error_message" => match v {
                Value::String(s) if !s.is_empty() => Value::String("<message>".into()),
                other => other,
            },
            "documentation" if !v.is_null() => Value::String("<doc>".into()),
            "cluster_id" if v.as_str().is_some_and(|c| !c.is_empty()) => {
                Value::String("$cluster".into())
            }
            // Fetch session ids are random.
            "session_id" if v.as_i64().is_some_and(|n| n != 0) => {
                let s = v.to_string();
                self.alias("session", s)
            }
            "log_dir" if v.is_string() => Value::String("$dir".into()),
            "total_bytes" | "usable_bytes" if v.as_i64().is_some_and(|n| n >= 0) => {
                Value::String("$bytes".into())
            }
            "host" if v.as_str() == Some(self.identity.host.as_str()) => {
                Value::String("$host".into())
            }
            "port" if v.as_i64() == Some(i64::from(self.identity.port)) => {
                Value::String("$port".into())
            }
            "topic_id" => match v.as_str() {
                Some(id) if id != uuid::Uuid::nil().to_string() => {
                    let id = id.to_string();
                    if let Some(n) = name {
                        self.topic_names.insert(id.clone(), n.to_string());
                    }
                    match self.topic_names.get(&id) {
                        Some(n) => Value::String(format!("$id({n})")),
                        None => self.alias("topic_id", id),
                    }
                }
                _ => v,
            },
            "member_id" | "leader" if v.as_str().is_some_and(|s| !s.is_empty()) => {
                let s = v.as_str().unwrap_or_default().to_string();
                self.alias("member", s)
            }
            "producer_id" if v.as_i64().is_some_and(|n| n >= 0) => {
                let s = v.to_string();
                self.alias("producer", s)
            }
            k if NODE_FIELDS.contains(&k) => self.node(v),
            k if (k.contains("timestamp") || k.ends_with("_time_ms"))
                && v.as_i64().is_some_and(|n| n > WALL_CLOCK_MS) =>
            {
                Value::String("$time".into())
            }
            _ => self.value(Some(key), v),
        }
    }
}

/// A list entry that belongs to another run (its name still carries a run prefix).
fn is_foreign(v: &Value) -> bool {
    let Some(o) = v.as_object() else { return false };
    [
        "name",
        "topic",
        "group_id",
        "resource_name",
        "transactional_id",
    ]
    .iter()
    .filter_map(|k| o.get(*k).and_then(Value::as_str))
    .any(looks_like_run_name)
}

fn compare_values(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x
            .as_f64()
            .partial_cmp(&y.as_f64())
            .unwrap_or(Ordering::Equal),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        _ => a.to_string().cmp(&b.to_string()),
    }
}

fn compare_entries(a: &Value, b: &Value) -> Ordering {
    for k in IDENTITY_FIELDS {
        let o = compare_values(
            a.get(*k).unwrap_or(&Value::Null),
            b.get(*k).unwrap_or(&Value::Null),
        );
        if o != Ordering::Equal {
            return o;
        }
    }
    a.to_string().cmp(&b.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn n() -> Normalizer {
        Normalizer::new(
            Identity {
                node_id: 7,
                host: "127.0.0.1".into(),
                port: 9999,
            },
            "cfabcd00001-".into(),
        )
    }

    #[test]
    fn an_error_messages_text_is_hidden_but_not_whether_there_is_one() {
        let v = n().response(
            "IncrementalAlterConfigs",
            &json!({}),
            1,
            json!({"responses": [
                {"resource_name": "a", "error_code": 0, "error_message": null},
                {"resource_name": "b", "error_code": 0, "error_message": ""},
                {"resource_name": "c", "error_code": 42, "error_message": "Unknown operation 9"}]}),
        );
        assert_eq!(
            v,
            json!({"responses": [
                {"resource_name": "a", "error_code": 0, "error_message": null},
                {"resource_name": "b", "error_code": 0, "error_message": ""},
                {"resource_name": "c", "error_code": 42, "error_message": "<message>"}]})
        );
    }

    #[test]
    fn identities_and_names() {
        let v = n().response(
            "Metadata",
            &json!({"topics": [{"name": "cfabcd00001-t"}]}),
            12,
            json!({"throttle_time_ms": 5, "cluster_id": "xyz", "controller_id": 7,
                   "brokers": [{"node_id": 7, "host": "127.0.0.1", "port": 9999, "rack": null}],
                   "topics": [
                     {"name": "cfabcd00001-t", "topic_id": "0b2f1c2e-0000-0000-0000-000000000001",
                      "partitions": [{"partition_index": 1, "leader_id": 7, "isr_nodes": [7]},
                                     {"partition_index": 0, "leader_id": 7, "isr_nodes": [7]}]},
                     {"name": "cfffff00009-other", "partitions": []}]}),
        );
        assert_eq!(
            v,
            json!({"throttle_time_ms": 0, "cluster_id": "$cluster", "controller_id": "$node",
                   "brokers": [{"node_id": "$node", "host": "$host", "port": "$port", "rack": null}],
                   "topics": [{"name": "@t", "topic_id": "$id(@t)",
                     "partitions": [{"partition_index": 0, "leader_id": "$node", "isr_nodes": ["$node"]},
                                    {"partition_index": 1, "leader_id": "$node", "isr_nodes": ["$node"]}]}]})
        );
    }

    #[test]
    fn aliases_follow_first_appearance() {
        let mut a = n();
        let v = a.response(
            "JoinGroup",
            &json!({}),
            9,
            json!({"member_id": "c-zzz", "leader": "c-aaa",
                   "members": [{"member_id": "c-aaa"}, {"member_id": "c-zzz"}]}),
        );
        // Scalars in key order (leader, then member_id), before lists.
        assert_eq!(v["leader"], "#member1");
        assert_eq!(v["member_id"], "#member2");
        assert_eq!(
            v["members"],
            json!([{"member_id": "#member1"}, {"member_id": "#member2"}])
        );
        let v = a.response(
            "Heartbeat",
            &json!({}),
            4,
            json!({"member_id": "", "x_timestamp": 1_700_000_000_000i64, "timestamp": 5}),
        );
        assert_eq!(
            v,
            json!({"member_id": "", "x_timestamp": "$time", "timestamp": 5})
        );
    }

    #[test]
    fn ordered_arrays_keep_order() {
        let v = n().response(
            "DescribeConfigs",
            &json!({}),
            4,
            json!({"results": [{"configs": [{"name": "b", "synonyms": [{"name": "z"}, {"name": "a"}]}, {"name": "a", "synonyms": []}]}]}),
        );
        assert_eq!(v["results"][0]["configs"][0]["name"], "a");
        assert_eq!(v["results"][0]["configs"][1]["synonyms"][0]["name"], "z");
    }

    #[test]
    fn listings_keep_the_runs_own_entries() {
        let v = n().response(
            "Metadata",
            &json!({"topics": null}),
            12,
            json!({"topics": [{"name": "cfabcd00001-t"}, {"name": "__consumer_offsets"}, {"name": "other"}]}),
        );
        assert_eq!(v["topics"], json!([{"name": "@t"}]));
        let v = n().response(
            "Metadata",
            &json!({"topics": [{"name": "other"}]}),
            12,
            json!({"topics": [{"name": "other"}]}),
        );
        assert_eq!(v["topics"], json!([{"name": "other"}]));
    }

    #[test]
    fn run_names() {
        assert!(looks_like_run_name("cf12ab00042-topic"));
        assert!(!looks_like_run_name("cf12ab00042-"));
        assert!(!looks_like_run_name("orders"));
    }
}
