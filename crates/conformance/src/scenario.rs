//! Scenarios as data: named sequences of requests, read from JSON files.
//!
//! A scenario file is a JSON array of scenarios:
//!
//! ```json
//! [{"name": "commit to an unknown topic",
//!   "doc": "Kafka answers UNKNOWN_TOPIC_OR_PARTITION per partition",
//!   "steps": [
//!     {"api": "OffsetCommit", "req": {"group_id": "@g", "generation_id_or_member_epoch": -1,
//!       "topics": [{"name": "@nosuch", "partitions": [{"partition_index": 0}]}]}}]}]
//! ```
//!
//! Requests are written with `kafka-protocol`'s field names; fields left out keep the
//! message's defaults. In request strings, `@name` is a name private to one run of the
//! scenario (a run prefix is put in front, so runs never see each other's topics and groups;
//! `@@` escapes a literal `@`), and `$var` is a value saved from an earlier response of the
//! same run (`save`). Each step runs at every version both brokers advertise for its API
//! (one run of the scenario per version, newest first), or at the versions it pins.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// One scenario: its steps run in order on named connections.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub doc: String,
    /// Which versions to run: every common version (default) or only the newest.
    #[serde(default, skip_serializing_if = "is_default")]
    pub versions: VersionPolicy,
    /// Whether the generator may derive cases from it (default true; off for scenarios whose
    /// outcome depends on timing).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub generate: bool,
    pub steps: Vec<Step>,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum VersionPolicy {
    /// One run per version, so every step's API is sent at each version both advertise.
    #[default]
    All,
    /// One run at the newest common versions.
    Latest,
}

/// How a step uses its connection.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Send the request and wait for its response.
    #[default]
    Call,
    /// Send without waiting (a later `recv` step on the same connection takes the response),
    /// so requests that block (JoinGroup) can overlap on several connections.
    Send,
    /// Take the response to the oldest request `send` left on this connection.
    Recv,
}

/// One request (or the receipt of one).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// The API by Kafka's name (`CreateTopics`); absent for `recv` steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// The request body as JSON.
    #[serde(default = "empty_object", skip_serializing_if = "is_empty_object")]
    pub req: Value,
    /// Connection name (default "main"); each name is its own TCP connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conn: Option<String>,
    /// The SASL/PLAIN user the step acts as (default: the harness's default user, or no
    /// authentication on a PLAINTEXT listener). Each user has its own connections: `conn`
    /// names a connection of this user.
    #[serde(rename = "as", default, skip_serializing_if = "Option::is_none")]
    pub as_user: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub mode: Mode,
    /// Pins the versions: a number or `[min, max]` (intersected with what both advertise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<VersionPin>,
    /// Claims this version in the request header while encoding the body at the chosen one
    /// (unknown versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_version: Option<i16>,
    /// Sends these bytes (`hex:...`) as the body instead of encoding `req` (malformed bodies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_body: Option<String>,
    /// The header's client id (default "conformance").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Variables to take from the response: name -> dotted path (`members.0.member_id`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub save: BTreeMap<String, String>,
    /// Whether the response is compared (default true); setup steps may opt out.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub compare: bool,
    /// Repeats the request until its response satisfies this (at most `timeout_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Until>,
    /// How long to wait for the response (default 30 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// A condition on a response: the value at `path` equals `equals`, or (with `error_free`) no
/// error code anywhere in the response is non-zero.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Until {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<Value>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub error_free: bool,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum VersionPin {
    One(i16),
    Range([i16; 2]),
}

impl VersionPin {
    pub fn range(self) -> (i16, i16) {
        match self {
            VersionPin::One(v) => (v, v),
            VersionPin::Range([a, b]) => (a, b),
        }
    }
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

fn is_empty_object(v: &Value) -> bool {
    v.as_object().is_some_and(|o| o.is_empty())
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_default<T: Default + PartialEq>(t: &T) -> bool {
    *t == T::default()
}

impl Step {
    pub fn conn_name(&self) -> &str {
        self.conn.as_deref().unwrap_or("main")
    }

    /// The connection a step uses: its name, and its user when it names one.
    pub fn conn_key(&self) -> String {
        match &self.as_user {
            Some(u) => format!("{}@{u}", self.conn_name()),
            None => self.conn_name().to_string(),
        }
    }
}

/// Reads every `*.json` scenario file in `dir` (sorted by file name); scenario names must be
/// unique.
pub fn load_dir(dir: &Path) -> anyhow::Result<Vec<Scenario>> {
    use anyhow::Context;
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("read scenario dir {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut all: Vec<Scenario> = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).with_context(|| format!("read {}", f.display()))?;
        let list: Vec<Scenario> =
            serde_json::from_str(&text).with_context(|| format!("parse {}", f.display()))?;
        for s in list {
            if all.iter().any(|o| o.name == s.name) {
                anyhow::bail!("{}: scenario name '{}' used twice", f.display(), s.name);
            }
            all.push(s);
        }
    }
    Ok(all)
}

/// The API a step names, by Kafka's name.
pub fn api_by_name(name: &str) -> Option<protocol::ApiKey> {
    protocol::ApiKey::iter().find(|k| format!("{k:?}") == name)
}
