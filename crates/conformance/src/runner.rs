//! Runs scenarios against one broker: plans the version of every step from what both brokers
//! advertise, sends the requests, and records a transcript of normalised outcomes.

use crate::json::Json;
use crate::messages::{request_from_json, response_to_json};
use crate::normalize::{Identity, Normalizer};
use crate::scenario::{api_by_name, Mode, Scenario, Step, Until, VersionPolicy};
use crate::wire::{encode_body, Conn, Credentials, Outcome, Outgoing};
use anyhow::{bail, Context};
use protocol::messages::{
    list_offsets_request, metadata_request, ApiVersionsRequest, DescribeGroupsRequest,
    FindCoordinatorRequest, GroupId, ListOffsetsRequest, MetadataRequest, TopicName,
};
use protocol::{ApiKey, RequestKind, ResponseKind, StrBytes};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Length of a run prefix: `cf` + 4 hex digits (the harness process) + 5 digits (the run) +
/// `-`.
pub const PREFIX_LEN: usize = 12;
/// How long a step waits for its response unless it says otherwise.
const STEP_TIMEOUT_MS: u64 = 30_000;
/// How long the harness waits for the cluster to settle after a topic change.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);
const POLL_INTERVAL: Duration = Duration::from_millis(100);
const CLIENT_ID: &str = "conformance";

/// A config resource: (resource type, name).
type ConfigResource = (i8, String);
/// A config key and the value a change set (None: deleted).
type ExpectedConfig = (String, Option<String>);

/// The name prefix of run `counter` of the harness process `token`.
pub fn run_prefix(token: u16, counter: u32) -> String {
    format!("cf{token:04x}{:05}-", counter % 100_000)
}

/// The SASL/PLAIN users a run may act as (a step's `as`), and the one steps without `as`
/// (and the harness's own requests: probing, warming up, settling) use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Auth {
    /// User -> password.
    pub users: BTreeMap<String, String>,
    pub default_user: String,
}

impl Auth {
    /// From `user:password` pairs; the default user is `default_user`, or the first pair's.
    pub fn parse(pairs: &[String], default_user: Option<&str>) -> anyhow::Result<Auth> {
        let mut users = BTreeMap::new();
        let mut first = None;
        for p in pairs {
            let (u, pw) = p
                .split_once(':')
                .with_context(|| format!("SASL user {p:?}: expected USER:PASSWORD"))?;
            first.get_or_insert_with(|| u.to_string());
            users.insert(u.to_string(), pw.to_string());
        }
        let default_user = default_user
            .map(str::to_string)
            .or(first)
            .context("no SASL users")?;
        if !users.contains_key(&default_user) {
            bail!("the default SASL user {default_user} has no password");
        }
        Ok(Auth {
            users,
            default_user,
        })
    }
}

/// One ACL, as CreateAcls makes it and DescribeAcls / DeleteAcls answer it.
#[derive(Clone, Debug)]
struct AclBinding {
    resource_type: i8,
    resource_name: String,
    pattern_type: i8,
    principal: String,
    host: String,
    operation: i8,
    permission_type: i8,
}

impl AclBinding {
    /// From a CreateAcls creation as sent (JSON).
    fn from_creation(c: &Value) -> AclBinding {
        let int = |k: &str| c.get(k).and_then(Value::as_i64).unwrap_or(0) as i8;
        let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        AclBinding {
            resource_type: int("resource_type"),
            resource_name: text("resource_name"),
            pattern_type: int("resource_pattern_type"),
            principal: text("principal"),
            host: text("host"),
            operation: int("operation"),
            permission_type: int("permission_type"),
        }
    }
}

/// One broker under test: its address, identity and advertised versions.
#[derive(Clone, Debug)]
pub struct Target {
    pub label: String,
    pub addr: SocketAddr,
    pub identity: Identity,
    /// Api key -> (min, max) version advertised.
    pub versions: BTreeMap<i16, (i16, i16)>,
    /// SASL/PLAIN users, when the listener is SASL_PLAINTEXT.
    pub auth: Option<Auth>,
}

fn call(
    conn: &mut Conn,
    api: ApiKey,
    version: i16,
    body: RequestKind,
) -> anyhow::Result<ResponseKind> {
    let out = Outgoing {
        api,
        header_version: version,
        body: encode_body(&body, version).map_err(anyhow::Error::msg)?,
        client_id: Some(CLIENT_ID.into()),
        expects_response: true,
    };
    let failed = |conn: &Conn, o: Outcome| match conn.auth_error() {
        Some(e) => anyhow::anyhow!("{api:?} v{version}: {o:?}: {e}"),
        None => anyhow::anyhow!("{api:?} v{version}: {o:?}"),
    };
    if let Err(o) = conn.send(&out) {
        return Err(failed(conn, o));
    }
    match conn.recv(Instant::now() + Duration::from_millis(STEP_TIMEOUT_MS)) {
        Outcome::Response(r) => Ok(*r),
        o => Err(failed(conn, o)),
    }
}

/// Kafka's partition of `__consumer_offsets` for a group id (`Utils.abs(hashCode) % n`).
pub fn coordinator_partition(group_id: &str, partitions: i32) -> i32 {
    let h = group_id
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1)
}

impl Target {
    /// Connects (authenticating as the default user when `auth` is given) and learns the
    /// broker's versions and identity.
    pub fn probe(label: &str, addr: SocketAddr, auth: Option<Auth>) -> anyhow::Result<Target> {
        let credentials = auth.as_ref().map(|a| Credentials {
            user: a.default_user.clone(),
            password: a.users.get(&a.default_user).cloned().unwrap_or_default(),
        });
        let mut conn = Conn::with_credentials(addr, credentials);
        let ResponseKind::ApiVersions(v) = call(
            &mut conn,
            ApiKey::ApiVersions,
            3,
            RequestKind::ApiVersions(
                ApiVersionsRequest::default()
                    .with_client_software_name(StrBytes::from_static_str("moldau-conformance"))
                    .with_client_software_version(StrBytes::from_static_str("1")),
            ),
        )
        .with_context(|| format!("ApiVersions to {label} at {addr}"))?
        else {
            bail!("{label}: not an ApiVersions response");
        };
        let versions = v
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        let ResponseKind::Metadata(m) = call(
            &mut conn,
            ApiKey::Metadata,
            12,
            RequestKind::Metadata(MetadataRequest::default().with_topics(Some(Vec::new()))),
        )
        .with_context(|| format!("Metadata to {label} at {addr}"))?
        else {
            bail!("{label}: not a Metadata response");
        };
        let broker = m
            .brokers
            .iter()
            .find(|b| i64::from(b.port) == i64::from(addr.port()))
            .or_else(|| m.brokers.first())
            .with_context(|| format!("{label}: Metadata lists no broker"))?;
        Ok(Target {
            label: label.to_string(),
            addr,
            identity: Identity {
                node_id: broker.node_id.0,
                host: broker.host.to_string(),
                port: broker.port,
            },
            versions,
            auth,
        })
    }

    /// The credentials of `user` (the default user when none; none at all without SASL).
    /// Err: the step names a user the harness has no password for, or the brokers have no
    /// SASL listener.
    pub fn credentials(&self, user: Option<&str>) -> Result<Option<Credentials>, String> {
        let Some(auth) = &self.auth else {
            return match user {
                None => Ok(None),
                Some(u) => Err(format!(
                    "the step runs as {u}, but the harness was started without SASL users \
                     (--sasl-user)"
                )),
            };
        };
        let user = user.unwrap_or(&auth.default_user);
        let password = auth
            .users
            .get(user)
            .ok_or_else(|| format!("no password for SASL user {user} (--sasl-user)"))?;
        Ok(Some(Credentials {
            user: user.to_string(),
            password: password.clone(),
        }))
    }

    /// A connection acting as `user` (see [`Target::credentials`]).
    pub fn connect(&self, user: Option<&str>) -> Result<Conn, String> {
        Ok(Conn::with_credentials(self.addr, self.credentials(user)?))
    }

    /// Makes the coordinators ready everywhere before scenarios run: creates
    /// `__consumer_offsets` and `__transaction_state` (FindCoordinator) and waits until every
    /// partition of `__consumer_offsets` is loaded, so no scenario sees the transient COORDINATOR_LOAD_IN_PROGRESS of a fresh
    /// cluster.
    pub fn warm_up(&self) -> anyhow::Result<()> {
        let mut conn = self.connect(None).map_err(anyhow::Error::msg)?;
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        // Both internal topics exist before any scenario runs: Kafka creates them asynchronously
        // on first use and answers COORDINATOR_NOT_AVAILABLE meanwhile, Moldau creates them in
        // the same request, so a scenario's answer would otherwise depend on the order scenarios
        // run in. Group (0) and transaction (1) coordinators.
        for key_type in [0, 1] {
            self.warm_up_coordinator(&mut conn, key_type, deadline)?;
        }
        self.warm_up_groups(&mut conn, deadline)
    }

    fn warm_up_coordinator(
        &self,
        conn: &mut Conn,
        key_type: i8,
        deadline: Instant,
    ) -> anyhow::Result<()> {
        loop {
            let req = FindCoordinatorRequest::default()
                .with_key_type(key_type)
                .with_coordinator_keys(vec![StrBytes::from_static_str("conformance-warmup")]);
            let r = call(
                conn,
                ApiKey::FindCoordinator,
                4,
                RequestKind::FindCoordinator(req),
            )?;
            let ResponseKind::FindCoordinator(r) = r else {
                bail!("not FindCoordinator")
            };
            if !r.coordinators.is_empty() && r.coordinators.iter().all(|c| c.error_code == 0) {
                break;
            }
            if Instant::now() > deadline {
                bail!("{}: FindCoordinator still failing: {r:?}", self.label);
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        Ok(())
    }

    fn warm_up_groups(&self, conn: &mut Conn, deadline: Instant) -> anyhow::Result<()> {
        let partitions = loop {
            let req = MetadataRequest::default().with_topics(Some(vec![
                metadata_request::MetadataRequestTopic::default().with_name(Some(TopicName(
                    StrBytes::from_static_str("__consumer_offsets"),
                ))),
            ]));
            let ResponseKind::Metadata(m) =
                call(conn, ApiKey::Metadata, 12, RequestKind::Metadata(req))?
            else {
                bail!("not Metadata")
            };
            let t = m.topics.first();
            if let Some(t) =
                t.filter(|t| t.error_code == 0 && t.partitions.iter().all(|p| p.leader_id.0 >= 0))
            {
                break t.partitions.len() as i32;
            }
            if Instant::now() > deadline {
                bail!("{}: __consumer_offsets has no leaders", self.label);
            }
            std::thread::sleep(POLL_INTERVAL);
        };
        // One group id per coordinator partition.
        let mut groups: BTreeMap<i32, String> = BTreeMap::new();
        let mut i = 0;
        while (groups.len() as i32) < partitions && i < 100_000 {
            let g = format!("conformance-warmup-{i}");
            groups
                .entry(coordinator_partition(&g, partitions))
                .or_insert(g);
            i += 1;
        }
        loop {
            let req = DescribeGroupsRequest::default().with_groups(
                groups
                    .values()
                    .map(|g| GroupId(StrBytes::from_string(g.clone())))
                    .collect(),
            );
            let ResponseKind::DescribeGroups(d) = call(
                conn,
                ApiKey::DescribeGroups,
                5,
                RequestKind::DescribeGroups(req),
            )?
            else {
                bail!("not DescribeGroups")
            };
            if d.groups.iter().all(|g| g.error_code == 0) {
                break;
            }
            if Instant::now() > deadline {
                bail!("{}: group coordinator not loaded: {d:?}", self.label);
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        // Kafka hands out producer ids in blocks it asks the controller for; until the first
        // block arrives InitProducerId answers COORDINATOR_LOAD_IN_PROGRESS.
        if self.versions.contains_key(&(ApiKey::InitProducerId as i16)) {
            loop {
                let req = protocol::messages::InitProducerIdRequest::default()
                    .with_transactional_id(None)
                    .with_transaction_timeout_ms(60_000);
                let ResponseKind::InitProducerId(r) = call(
                    conn,
                    ApiKey::InitProducerId,
                    4,
                    RequestKind::InitProducerId(req),
                )?
                else {
                    bail!("not InitProducerId")
                };
                if r.error_code == 0 {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("{}: InitProducerId still failing: {r:?}", self.label);
                }
                std::thread::sleep(POLL_INTERVAL);
            }
        }
        Ok(())
    }
}

/// The versions both brokers advertise, by api key.
pub fn common_versions(a: &Target, b: &Target) -> BTreeMap<i16, (i16, i16)> {
    let mut out = BTreeMap::new();
    for (k, &(amin, amax)) in &a.versions {
        if let Some(&(bmin, bmax)) = b.versions.get(k) {
            let (lo, hi) = (amin.max(bmin), amax.min(bmax));
            // The codec must know the version too.
            let codec = ApiKey::try_from(*k).map(|api| api.valid_versions());
            if let Ok(c) = codec {
                let (lo, hi) = (lo.max(c.min), hi.min(c.max));
                if lo <= hi {
                    out.insert(*k, (lo, hi));
                }
            }
        }
    }
    out
}

/// The version a step runs at in one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum At {
    Version(i16),
    /// Not both brokers advertise the API (or the pinned versions): the step is skipped.
    Unsupported,
}

/// For each run of `s`, the version of each step. Every run uses the same step versions on
/// both brokers; together the runs cover every common version of every step's API.
pub fn plan(s: &Scenario, common: &BTreeMap<i16, (i16, i16)>) -> anyhow::Result<Vec<Vec<At>>> {
    let mut ranges: Vec<Option<(i16, i16)>> = Vec::new();
    let mut sent: HashMap<String, VecDeque<usize>> = HashMap::new();
    for (i, step) in s.steps.iter().enumerate() {
        if step.mode == Mode::Recv {
            let from = sent
                .get_mut(&step.conn_key())
                .and_then(VecDeque::pop_front)
                .with_context(|| {
                    format!(
                        "{}: step {i} receives on '{}' with nothing sent",
                        s.name,
                        step.conn_key()
                    )
                })?;
            ranges.push(ranges[from]);
            continue;
        }
        let name = step
            .api
            .as_deref()
            .with_context(|| format!("{}: step {i} has no api", s.name))?;
        let api = api_by_name(name)
            .with_context(|| format!("{}: step {i}: unknown api {name}", s.name))?;
        if step.mode == Mode::Send {
            sent.entry(step.conn_key()).or_default().push_back(i);
        }
        let range = common.get(&(api as i16)).and_then(|&(lo, hi)| {
            let (plo, phi) = step.version.map_or((lo, hi), |p| p.range());
            let (lo, hi) = (lo.max(plo), hi.min(phi));
            (lo <= hi).then_some((lo, hi))
        });
        ranges.push(range);
    }
    let runs = match s.versions {
        VersionPolicy::Latest => 1,
        VersionPolicy::All => ranges
            .iter()
            .flatten()
            .map(|(lo, hi)| (hi - lo + 1) as usize)
            .max()
            .unwrap_or(1),
    };
    Ok((0..runs)
        .map(|r| {
            ranges
                .iter()
                .map(|range| match range {
                    Some((lo, hi)) => {
                        let len = (hi - lo + 1) as usize;
                        At::Version(hi - (r % len) as i16)
                    }
                    None => At::Unsupported,
                })
                .collect()
        })
        .collect())
}

/// What one step produced on one broker.
#[derive(Clone, Debug)]
pub struct Entry {
    pub step: usize,
    pub api: String,
    pub version: Option<i16>,
    /// The request as sent (names resolved, variables substituted), for reports.
    pub request: Value,
    /// The normalised outcome that is compared.
    pub outcome: Value,
    /// The outcome before normalisation, for reports.
    pub raw: Value,
    pub compare: bool,
}

impl Entry {
    /// A fault of the scenario or the harness rather than of a broker.
    pub fn harness_error(&self) -> Option<&str> {
        self.outcome.get("harness_error").and_then(Value::as_str)
    }
}

struct Sent {
    step: usize,
    api: ApiKey,
    version: i16,
    request: Value,
    /// Set when sending already failed.
    failed: Option<Outcome>,
}

/// One run of a scenario on one broker.
pub struct Run<'a> {
    target: &'a Target,
    prefix: String,
    conns: HashMap<String, Conn>,
    sent: HashMap<String, VecDeque<Sent>>,
    vars: HashMap<String, Value>,
    norm: Normalizer,
}

fn outcome_json(o: &Outcome) -> Value {
    match o {
        Outcome::Response(r) => json!({ "response": response_to_json(r) }),
        Outcome::Closed => json!({"closed": true}),
        Outcome::Timeout => json!({"timeout": true}),
        Outcome::Undecodable(e) => json!({ "undecodable": e }),
    }
}

/// The value at a dotted path (`topics.0.name`).
pub fn lookup<'v>(v: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(v, |cur, seg| match cur {
        Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
        Value::Object(o) => o.get(seg),
        _ => None,
    })
}

/// Whether any `error_code` in `v` is non-zero.
pub fn has_error(v: &Value) -> bool {
    match v {
        Value::Object(o) => o.iter().any(|(k, x)| {
            (k == "error_code" && x.as_i64().is_some_and(|c| c != 0)) || has_error(x)
        }),
        Value::Array(a) => a.iter().any(has_error),
        _ => false,
    }
}

fn satisfied(until: &Until, response: &Value) -> bool {
    let path_ok = match (&until.path, &until.equals) {
        (Some(p), Some(want)) => lookup(response, p) == Some(want),
        (Some(p), None) => lookup(response, p).is_some(),
        _ => true,
    };
    path_ok && (!until.error_free || !has_error(response))
}

impl<'a> Run<'a> {
    pub fn new(target: &'a Target, prefix: String) -> Run<'a> {
        Run {
            target,
            norm: Normalizer::new(target.identity.clone(), prefix.clone()),
            prefix,
            conns: HashMap::new(),
            sent: HashMap::new(),
            vars: HashMap::new(),
        }
    }

    /// The harness's own connection `name` (settling), as the default user.
    fn conn(&mut self, name: &str) -> &mut Conn {
        let target = self.target;
        self.conns.entry(name.to_string()).or_insert_with(|| {
            Conn::with_credentials(target.addr, target.credentials(None).ok().flatten())
        })
    }

    /// The connection of a step: its name, as its user.
    fn step_conn(&mut self, step: &Step) -> Result<&mut Conn, String> {
        let key = step.conn_key();
        if !self.conns.contains_key(&key) {
            let conn = self.target.connect(step.as_user.as_deref())?;
            self.conns.insert(key.clone(), conn);
        }
        self.conns
            .get_mut(&key)
            .ok_or_else(|| format!("no connection {key}"))
    }

    /// Resolves `@names` and `$variables` in a request.
    fn resolve(&self, v: &Value) -> Result<Value, String> {
        Ok(match v {
            Value::String(s) => {
                if let Some(rest) = s.strip_prefix("@@") {
                    Value::String(format!("@{rest}"))
                } else if let Some(rest) = s.strip_prefix('@') {
                    Value::String(format!("{}{rest}", self.prefix))
                } else if let Some(var) = s.strip_prefix('$') {
                    self.vars
                        .get(var)
                        .cloned()
                        .ok_or_else(|| format!("undefined variable ${var}"))?
                } else {
                    v.clone()
                }
            }
            Value::Array(a) => Value::Array(
                a.iter()
                    .map(|x| self.resolve(x))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, x)| Ok((k.clone(), self.resolve(x)?)))
                    .collect::<Result<_, String>>()?,
            ),
            other => other.clone(),
        })
    }

    /// The shared resource a request would change, if any: a topic, group or config that
    /// is not this run's own (`@name`). The brokers outlive the run (and the reference is
    /// shared by every run), so such requests are skipped unless they only validate. Names
    /// that cannot exist (empty, invalid characters, too long) change nothing and are allowed.
    fn shared_target(&self, api: ApiKey, request: &Value) -> Option<String> {
        if request.get("validate_only").and_then(Value::as_bool) == Some(true) {
            return None;
        }
        let owned = |v: &Value| -> bool {
            match v.as_str() {
                None => true,
                Some(n) => {
                    n.starts_with(&self.prefix)
                        || n.is_empty()
                        || n.len() > 249
                        || !n.bytes().all(|b| {
                            b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-'
                        })
                }
            }
        };
        let items = |key: &str| -> Vec<&Value> {
            request
                .get(key)
                .and_then(Value::as_array)
                .map(|a| a.iter().collect())
                .unwrap_or_default()
        };
        let names: Vec<&Value> = match api {
            ApiKey::CreateTopics | ApiKey::CreatePartitions | ApiKey::DeleteRecords => {
                items("topics")
                    .into_iter()
                    .filter_map(|t| t.get("name"))
                    .collect()
            }
            ApiKey::DeleteTopics => items("topic_names")
                .into_iter()
                .chain(items("topics").into_iter().filter_map(|t| t.get("name")))
                .collect(),
            ApiKey::DeleteGroups => items("groups_names"),
            // Offsets of a group that is not the run's own (the empty group id included, which
            // Kafka accepts) would be shared with every other run.
            ApiKey::OffsetCommit | ApiKey::OffsetDelete | ApiKey::TxnOffsetCommit => {
                // A missing group id is the empty one.
                let g = request
                    .get("group_id")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if !g.starts_with(&self.prefix) {
                    return Some(format!("the offsets of group {g:?}"));
                }
                Vec::new()
            }
            ApiKey::AlterConfigs | ApiKey::IncrementalAlterConfigs => {
                for r in items("resources") {
                    // Broker, broker-logger and client-metrics configs are the cluster's own.
                    if !matches!(
                        r.get("resource_type").and_then(Value::as_i64),
                        Some(2) | Some(32)
                    ) {
                        return Some(format!("config resource {r}"));
                    }
                }
                items("resources")
                    .into_iter()
                    .filter_map(|r| r.get("resource_name"))
                    .collect()
            }
            // Internal topics' data changes with everything else on the broker.
            ApiKey::Fetch | ApiKey::ListOffsets => {
                let key = if api == ApiKey::Fetch {
                    "topic"
                } else {
                    "name"
                };
                if let Some(t) = items("topics")
                    .into_iter()
                    .filter_map(|t| t.get(key).and_then(Value::as_str))
                    .find(|n| n.starts_with("__"))
                {
                    return Some(format!("the data of {t}"));
                }
                Vec::new()
            }
            _ => Vec::new(),
        };
        names
            .into_iter()
            .find(|n| !owned(n))
            .map(|n| format!("{n}"))
    }

    /// Builds the request of a step at `version`. The error is the step's outcome: a
    /// harness error (a bad scenario), or a skip when the request can't be expressed at that
    /// version (it sets a field the version lacks).
    fn build(&self, step: &Step, api: ApiKey, version: i16) -> Result<(Outgoing, Value), Value> {
        let request = self
            .resolve(&step.req)
            .map_err(|e| json!({ "harness_error": e }))?;
        if let Some(what) = self.shared_target(api, &request) {
            return Err(
                json!({ "skipped": format!("would change {what}, shared beyond this run") }),
            );
        }
        let mut sent = request.clone();
        let body = match &step.raw_body {
            Some(raw) => {
                let hex = raw.strip_prefix("hex:").unwrap_or(raw);
                bytes::Bytes::from(
                    crate::json::unhex(hex)
                        .map_err(|e| json!({ "harness_error": e.to_string() }))?,
                )
            }
            None => {
                let kind = request_from_json(api, &request, version)
                    .map_err(|e| json!({ "harness_error": format!("request: {e}") }))?;
                let body = encode_body(&kind, version).map_err(
                    |e| json!({ "skipped": format!("not expressible at v{version}: {e}") }),
                )?;
                // The request as sent, defaults included: reports show it, and intentional
                // differences match on it.
                sent = crate::messages::request_to_json(&kind);
                body
            }
        };
        let acks_zero =
            api == ApiKey::Produce && request.get("acks").and_then(Value::as_i64) == Some(0);
        Ok((
            Outgoing {
                api,
                header_version: step.claim_version.unwrap_or(version),
                body,
                client_id: Some(step.client_id.clone().unwrap_or_else(|| CLIENT_ID.into())),
                expects_response: !acks_zero,
            },
            sent,
        ))
    }

    /// Runs every step of `s` at the given versions.
    pub fn execute(&mut self, s: &Scenario, versions: &[At]) -> Vec<Entry> {
        let mut entries = Vec::new();
        for (i, (step, at)) in s.steps.iter().zip(versions).enumerate() {
            if let Some(e) = self.step(i, step, *at) {
                let stop = e.harness_error().is_some();
                entries.push(e);
                if stop {
                    break;
                }
            }
        }
        entries
    }

    fn step(&mut self, i: usize, step: &Step, at: At) -> Option<Entry> {
        let timeout = Duration::from_millis(step.timeout_ms.unwrap_or(STEP_TIMEOUT_MS));
        let conn_name = step.conn_key();
        if step.mode == Mode::Recv {
            let sent = self
                .sent
                .get_mut(&conn_name)
                .and_then(VecDeque::pop_front)?;
            let outcome = match sent.failed {
                Some(o) => o,
                None => match self.step_conn(step) {
                    Ok(conn) => conn.recv(Instant::now() + timeout),
                    Err(e) => return Some(self.fail(i, &format!("{:?}", sent.api), e)),
                },
            };
            return Some(self.record(
                step,
                sent.step,
                sent.api,
                Some(sent.version),
                sent.request,
                outcome,
            ));
        }
        let name = step.api.clone().unwrap_or_default();
        let Some(api) = api_by_name(&name) else {
            return Some(self.fail(i, &name, format!("unknown api {name}")));
        };
        let version = match at {
            At::Version(v) => v,
            At::Unsupported => {
                return Some(Entry {
                    step: i,
                    api: name,
                    version: None,
                    request: step.req.clone(),
                    outcome: json!({"skipped": "not advertised by both brokers"}),
                    raw: Value::Null,
                    compare: step.compare,
                });
            }
        };
        let deadline = Instant::now() + timeout;
        loop {
            let (out, request) = match self.build(step, api, version) {
                Ok(x) => x,
                Err(outcome) => {
                    return Some(Entry {
                        step: i,
                        api: name,
                        version: Some(version),
                        request: step.req.clone(),
                        raw: outcome.clone(),
                        outcome,
                        compare: step.compare,
                    })
                }
            };
            let conn = match self.step_conn(step) {
                Ok(conn) => conn,
                Err(e) => return Some(self.fail(i, &name, e)),
            };
            let sent = conn.send(&out);
            // A connection that could not authenticate is the setup's fault, not an answer.
            if let Some(e) = conn.auth_error().filter(|_| sent.is_err()) {
                let e = format!("authenticate: {e}");
                return Some(self.fail(i, &name, e));
            }
            if step.mode == Mode::Send {
                self.sent.entry(conn_name).or_default().push_back(Sent {
                    step: i,
                    api,
                    version,
                    request,
                    failed: sent.err(),
                });
                return None;
            }
            let outcome = match sent {
                Err(o) => o,
                Ok(()) if !out.expects_response => {
                    return Some(Entry {
                        step: i,
                        api: name,
                        version: Some(version),
                        request,
                        outcome: json!({"no_response": true}),
                        raw: json!({"no_response": true}),
                        compare: step.compare,
                    });
                }
                Ok(()) => conn.recv(deadline),
            };
            if let (Some(until), Outcome::Response(r)) = (&step.until, &outcome) {
                if !satisfied(until, &response_to_json(r)) && Instant::now() < deadline {
                    std::thread::sleep(POLL_INTERVAL);
                    continue;
                }
            }
            return Some(self.record(step, i, api, Some(version), request, outcome));
        }
    }

    fn fail(&self, i: usize, api: &str, e: String) -> Entry {
        Entry {
            step: i,
            api: api.to_string(),
            version: None,
            request: Value::Null,
            outcome: json!({ "harness_error": e }),
            raw: Value::Null,
            compare: true,
        }
    }

    /// Saves variables, settles topic changes, normalises: the entry of a finished request.
    fn record(
        &mut self,
        step: &Step,
        i: usize,
        api: ApiKey,
        version: Option<i16>,
        request: Value,
        outcome: Outcome,
    ) -> Entry {
        let name = format!("{api:?}");
        let raw = outcome_json(&outcome);
        if let Outcome::Response(r) = &outcome {
            let rj = &raw["response"];
            for (var, path) in &step.save {
                let v = lookup(rj, path).cloned().unwrap_or(Value::Null);
                self.vars.insert(var.clone(), v);
            }
            let v = version.unwrap_or(0);
            let auto = if api == ApiKey::Metadata {
                self.settle_auto_created(v, &request, rj)
            } else {
                Ok(())
            };
            if let Err(e) = auto
                .and_then(|()| self.settle(&request, r))
                .and_then(|()| self.settle_configs(api, &request, r))
                .and_then(|()| self.settle_acls(&request, r))
            {
                return self.fail(i, &name, format!("settle after {name}: {e:#}"));
            }
        }
        let outcome = match &outcome {
            Outcome::Response(_) => {
                let v = version.unwrap_or(0);
                json!({ "response": self.norm.response(&name, &request, v, raw["response"].clone()) })
            }
            _ => raw.clone(),
        };
        Entry {
            step: i,
            api: name,
            version,
            request,
            outcome,
            raw,
            compare: step.compare,
        }
    }

    /// After CreateAcls / DeleteAcls, waits until DescribeAcls (as the default user) shows
    /// each binding created and none deleted: Kafka's brokers apply ACL changes from the
    /// controller asynchronously, after answering, and a later step acting as another user
    /// must see them in force.
    fn settle_acls(&mut self, request: &Value, r: &ResponseKind) -> anyhow::Result<()> {
        let (created, deleted): (Vec<AclBinding>, Vec<AclBinding>) = match r {
            ResponseKind::CreateAcls(c) => (
                request
                    .get("creations")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(AclBinding::from_creation)
                    .zip(&c.results)
                    .filter(|(_, r)| r.error_code == 0)
                    .map(|(b, _)| b.clone())
                    .collect(),
                Vec::new(),
            ),
            ResponseKind::DeleteAcls(d) => (
                Vec::new(),
                d.filter_results
                    .iter()
                    .filter(|f| f.error_code == 0)
                    .flat_map(|f| &f.matching_acls)
                    .filter(|m| m.error_code == 0)
                    .map(|m| AclBinding {
                        resource_type: m.resource_type,
                        resource_name: m.resource_name.to_string(),
                        pattern_type: m.pattern_type,
                        principal: m.principal.to_string(),
                        host: m.host.to_string(),
                        operation: m.operation,
                        permission_type: m.permission_type,
                    })
                    .collect(),
            ),
            _ => return Ok(()),
        };
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        for (b, present) in created
            .iter()
            .map(|b| (b, true))
            .chain(deleted.iter().map(|b| (b, false)))
        {
            loop {
                let req = protocol::messages::DescribeAclsRequest::default()
                    .with_resource_type_filter(b.resource_type)
                    .with_resource_name_filter(Some(StrBytes::from_string(b.resource_name.clone())))
                    .with_pattern_type_filter(b.pattern_type)
                    .with_principal_filter(Some(StrBytes::from_string(b.principal.clone())))
                    .with_host_filter(Some(StrBytes::from_string(b.host.clone())))
                    .with_operation(b.operation)
                    .with_permission_type(b.permission_type);
                let conn = self.conn("__settle");
                let ResponseKind::DescribeAcls(d) = call(
                    conn,
                    ApiKey::DescribeAcls,
                    3,
                    RequestKind::DescribeAcls(req),
                )?
                else {
                    bail!("not DescribeAcls");
                };
                let found = d.error_code == 0 && d.resources.iter().any(|r| !r.acls.is_empty());
                if found == present {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "ACL {b:?} not {}",
                        if present { "created" } else { "deleted" }
                    );
                }
                std::thread::sleep(POLL_INTERVAL);
            }
        }
        Ok(())
    }

    /// After a successful AlterConfigs / IncrementalAlterConfigs, waits until DescribeConfigs
    /// shows the values set (and deleted keys back to a non-dynamic source): Kafka's broker
    /// applies config changes from the controller asynchronously.
    fn settle_configs(
        &mut self,
        api: ApiKey,
        request: &Value,
        r: &ResponseKind,
    ) -> anyhow::Result<()> {
        let ok: Vec<(i8, String)> = match r {
            ResponseKind::AlterConfigs(a) => a
                .responses
                .iter()
                .filter(|x| x.error_code == 0)
                .map(|x| (x.resource_type, x.resource_name.to_string()))
                .collect(),
            ResponseKind::IncrementalAlterConfigs(a) => a
                .responses
                .iter()
                .filter(|x| x.error_code == 0)
                .map(|x| (x.resource_type, x.resource_name.to_string()))
                .collect(),
            _ => return Ok(()),
        };
        if ok.is_empty() || request.get("validate_only").and_then(Value::as_bool) == Some(true) {
            return Ok(());
        }
        // (type, name) -> [(key, Some(value) for a set, None for a delete)]
        let mut expect: Vec<(ConfigResource, Vec<ExpectedConfig>)> = Vec::new();
        for res in request
            .get("resources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let ty = res
                .get("resource_type")
                .and_then(Value::as_i64)
                .unwrap_or(0) as i8;
            let name = res
                .get("resource_name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if !ok.contains(&(ty, name.clone())) {
                continue;
            }
            let mut keys = Vec::new();
            for c in res
                .get("configs")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let key = c
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let value = c.get("value").and_then(Value::as_str).map(str::to_string);
                let op = c.get("config_operation").and_then(Value::as_i64);
                match (api, op) {
                    (ApiKey::AlterConfigs, _) | (_, Some(0)) => keys.push((key, value)),
                    (_, Some(1)) => keys.push((key, None)),
                    _ => {}
                }
            }
            if !keys.is_empty() {
                expect.push(((ty, name), keys));
            }
        }
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        for ((ty, name), keys) in expect {
            loop {
                let req =
                    protocol::messages::DescribeConfigsRequest::default().with_resources(vec![
                    protocol::messages::describe_configs_request::DescribeConfigsResource::default()
                        .with_resource_type(ty)
                        .with_resource_name(StrBytes::from_string(name.clone()))
                        .with_configuration_keys(Some(
                            keys.iter().map(|(k, _)| StrBytes::from_string(k.clone())).collect(),
                        )),
                ]);
                let conn = self.conn("__settle");
                let ResponseKind::DescribeConfigs(d) = call(
                    conn,
                    ApiKey::DescribeConfigs,
                    4,
                    RequestKind::DescribeConfigs(req),
                )?
                else {
                    bail!("not DescribeConfigs");
                };
                let configs: Vec<_> = d.results.iter().flat_map(|r| r.configs.iter()).collect();
                let applied = keys.iter().all(|(k, want)| {
                    let got = configs.iter().find(|c| c.name.as_str() == k);
                    match (want, got) {
                        (Some(v), Some(c)) => c.value.as_deref() == Some(v.as_str()),
                        // Unknown or invalid keys are not described at all.
                        (_, None) => true,
                        // Deleted: no longer a topic or group override.
                        (None, Some(c)) => c.config_source != 1 && c.config_source != 8,
                    }
                });
                if applied {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("config change of {name} not applied: {d:?}");
                }
                std::thread::sleep(POLL_INTERVAL);
            }
        }
        Ok(())
    }

    /// Waits until the broker serves what a successful topic change made: created topics
    /// (and new partitions) have leaders that answer ListOffsets; deleted topics are gone.
    /// Kafka applies controller changes asynchronously; without this a scenario would race
    /// its own setup.
    fn settle(&mut self, request: &Value, r: &ResponseKind) -> anyhow::Result<()> {
        if request.get("validate_only").and_then(Value::as_bool) == Some(true) {
            return Ok(());
        }
        let (created, deleted): (Vec<String>, Vec<String>) = match r {
            ResponseKind::CreateTopics(c) => (
                c.topics
                    .iter()
                    .filter(|t| t.error_code == 0)
                    .map(|t| t.name.0.to_string())
                    .collect(),
                Vec::new(),
            ),
            ResponseKind::CreatePartitions(c) => (
                c.results
                    .iter()
                    .filter(|t| t.error_code == 0)
                    .map(|t| t.name.0.to_string())
                    .collect(),
                Vec::new(),
            ),
            ResponseKind::DeleteTopics(d) => (
                Vec::new(),
                d.responses
                    .iter()
                    .filter(|t| t.error_code == 0)
                    .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
                    .collect(),
            ),
            _ => return Ok(()),
        };
        if created.is_empty() && deleted.is_empty() {
            return Ok(());
        }
        self.wait_for_topics(request, r, &created, &deleted)
    }

    /// After a Metadata request that may auto-create topics: waits (a bounded while) until
    /// the run's valid topic names it asked for exist. Kafka creates them asynchronously, so
    /// without this the next step would race the creation.
    fn settle_auto_created(
        &mut self,
        version: i16,
        request: &Value,
        response: &Value,
    ) -> anyhow::Result<()> {
        let auto = version < 4
            || request
                .get("allow_auto_topic_creation")
                .and_then(Value::as_bool)
                == Some(true);
        if !auto {
            return Ok(());
        }
        // A topic the answer refused (TOPIC_AUTHORIZATION_FAILED: no CREATE) is not coming.
        let refused = |name: &str| {
            response
                .get("topics")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|t| t.get("name").and_then(Value::as_str) == Some(name))
                .any(|t| t.get("error_code").and_then(Value::as_i64) == Some(29))
        };
        let names: Vec<String> = request
            .get("topics")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| t.get("name").and_then(Value::as_str))
            .filter(|n| n.starts_with(&self.prefix) && model::ids::validate_topic_name(n).is_ok())
            .filter(|n| !refused(n))
            .map(str::to_string)
            .collect();
        if names.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let req = MetadataRequest::default()
                .with_allow_auto_topic_creation(false)
                .with_topics(Some(
                    names
                        .iter()
                        .map(|n| {
                            metadata_request::MetadataRequestTopic::default()
                                .with_name(Some(TopicName(StrBytes::from_string(n.clone()))))
                        })
                        .collect(),
                ));
            let conn = self.conn("__settle");
            let ResponseKind::Metadata(m) =
                call(conn, ApiKey::Metadata, 12, RequestKind::Metadata(req))?
            else {
                bail!("not Metadata");
            };
            let live = m
                .topics
                .iter()
                .all(|t| t.error_code == 0 && t.partitions.iter().all(|p| p.leader_id.0 >= 0));
            if live || Instant::now() > deadline {
                return Ok(());
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    fn wait_for_topics(
        &mut self,
        request: &Value,
        r: &ResponseKind,
        created: &[String],
        deleted: &[String],
    ) -> anyhow::Result<()> {
        // CreatePartitions: the new partition count must be visible, not just the old ones.
        let expected_count = |name: &str| -> usize {
            request
                .get("topics")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|t| t.get("name").and_then(Value::as_str) == Some(name))
                .filter_map(|t| t.get("count").and_then(Value::as_u64))
                .max()
                .unwrap_or(0) as usize
        };
        let is_create_partitions = matches!(r, ResponseKind::CreatePartitions(_));
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        let names: Vec<String> = created.iter().chain(deleted).cloned().collect();
        loop {
            let req = MetadataRequest::default()
                .with_allow_auto_topic_creation(false)
                .with_topics(Some(
                    names
                        .iter()
                        .map(|n| {
                            metadata_request::MetadataRequestTopic::default()
                                .with_name(Some(TopicName(StrBytes::from_string(n.clone()))))
                        })
                        .collect(),
                ));
            let conn = self.conn("__settle");
            let ResponseKind::Metadata(m) =
                call(conn, ApiKey::Metadata, 12, RequestKind::Metadata(req))?
            else {
                bail!("not Metadata");
            };
            let ready = m.topics.iter().all(|t| {
                let n = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
                if deleted.contains(&n) {
                    t.error_code == 3
                } else {
                    t.error_code == 0
                        && t.partitions.iter().all(|p| p.leader_id.0 >= 0)
                        && (!is_create_partitions || t.partitions.len() >= expected_count(&n))
                }
            });
            let ready = ready && self.leaders_answer(&m)?;
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("topics {names:?} did not settle: {m:?}");
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Whether every partition of the existing topics in `m` answers ListOffsets.
    fn leaders_answer(&mut self, m: &protocol::messages::MetadataResponse) -> anyhow::Result<bool> {
        let topics: Vec<_> = m
            .topics
            .iter()
            .filter(|t| t.error_code == 0)
            .map(|t| {
                list_offsets_request::ListOffsetsTopic::default()
                    .with_name(t.name.clone().unwrap_or_default())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                list_offsets_request::ListOffsetsPartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_timestamp(-1)
                            })
                            .collect(),
                    )
            })
            .collect();
        if topics.is_empty() {
            return Ok(true);
        }
        let req = ListOffsetsRequest::default()
            .with_replica_id(protocol::messages::BrokerId(-1))
            .with_topics(topics);
        let conn = self.conn("__settle");
        let ResponseKind::ListOffsets(l) =
            call(conn, ApiKey::ListOffsets, 7, RequestKind::ListOffsets(req))?
        else {
            bail!("not ListOffsets");
        };
        Ok(l.topics
            .iter()
            .all(|t| t.partitions.iter().all(|p| p.error_code == 0)))
    }
}

/// Runs one planned run of a scenario on one broker.
pub fn run_once(target: &Target, s: &Scenario, versions: &[At], prefix: &str) -> Vec<Entry> {
    Run::new(target, prefix.to_string()).execute(s, versions)
}

/// The JSON form of a request (for reports of requests built in code).
pub fn request_json<T: Json>(r: &T) -> Value {
    r.to_json()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

    #[test]
    fn coordinator_partition_matches_java_string_hash() {
        // "test".hashCode() == 3556498 in Java.
        assert_eq!(coordinator_partition("test", 50), 3556498 % 50);
        assert_eq!(coordinator_partition("", 50), 0);
    }

    #[test]
    fn plans_cover_every_common_version() {
        let s: Scenario = serde_json::from_value(json!({
            "name": "x",
            "steps": [
                {"api": "Metadata"},
                {"api": "CreateTopics", "version": [5, 99]},
                {"api": "JoinGroup", "conn": "a", "mode": "send"},
                {"conn": "a", "mode": "recv"},
                {"api": "DescribeAcls"}
            ]
        }))
        .unwrap();
        let mut common = BTreeMap::new();
        common.insert(ApiKey::Metadata as i16, (0, 12));
        common.insert(ApiKey::CreateTopics as i16, (2, 7));
        common.insert(ApiKey::JoinGroup as i16, (0, 9));
        let p = plan(&s, &common).unwrap();
        assert_eq!(p.len(), 13);
        assert_eq!(
            p[0],
            vec![
                At::Version(12),
                At::Version(7),
                At::Version(9),
                At::Version(9),
                At::Unsupported
            ]
        );
        assert_eq!(p[1][1], At::Version(6));
        assert_eq!(p[3][1], At::Version(7));
        assert_eq!(p[12][0], At::Version(0));
        let mut seen: Vec<i16> = p
            .iter()
            .map(|r| match r[1] {
                At::Version(v) => v,
                At::Unsupported => -1,
            })
            .collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen, vec![5, 6, 7]);
    }

    #[test]
    fn lookups_and_errors() {
        let v = json!({"topics": [{"name": "a", "partitions": [{"error_code": 3}]}]});
        assert_eq!(lookup(&v, "topics.0.name"), Some(&json!("a")));
        assert!(has_error(&v));
        assert!(!has_error(&json!({"error_code": 0})));
    }
}
