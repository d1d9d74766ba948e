//! Typed broker and topic configuration with Kafka's names, defaults and units.
//!
//! Every topic config has a broker-level synonym (`segment.bytes` <- `log.segment.bytes`), so a
//! topic's effective value comes from, in order: the topic's own override, the broker's setting,
//! Kafka's default. `ConfigSource` records which, as DescribeConfigs reports it.

use crate::cluster::{self, Listener, Roles, SecurityProtocol, Voter};
use std::collections::BTreeMap;

/// A config value that failed to parse or validate; names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value {value:?} for config '{key}': {reason}")]
pub struct ConfigError {
    pub key: String,
    pub value: String,
    pub reason: String,
}

impl ConfigError {
    pub fn new(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            key: key.to_string(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// Where an effective config value came from (Kafka's DescribeConfigs `config_source`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigSource {
    /// Set on the topic itself (DYNAMIC_TOPIC_CONFIG = 1).
    Topic = 1,
    /// Set dynamically for this broker (DYNAMIC_BROKER_CONFIG = 2).
    DynamicBroker = 2,
    /// Set dynamically as the cluster-wide broker default (DYNAMIC_DEFAULT_BROKER_CONFIG = 3).
    DynamicDefaultBroker = 3,
    /// Set in the broker's static config (STATIC_BROKER_CONFIG = 4).
    StaticBroker = 4,
    /// Kafka's default (DEFAULT_CONFIG = 5).
    Default = 5,
    /// Set on the group itself (GROUP_CONFIG = 8).
    Group = 8,
}

/// The type of a config value, as DescribeConfigs v3+ reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Short = 4,
    Long = 5,
    Double = 6,
    List = 7,
    Class = 8,
    Password = 9,
}

/// The definition of one config key.
#[derive(Debug)]
pub struct ConfigDef {
    pub name: &'static str,
    /// The broker-level key that sets this topic config's default, if any.
    pub broker_synonym: Option<&'static str>,
    pub default: &'static str,
    pub kind: ConfigType,
    pub doc: &'static str,
    /// Whether a topic may override it (topic configs); false for broker-only keys.
    pub topic: bool,
}

const fn topic(
    name: &'static str,
    synonym: &'static str,
    default: &'static str,
    kind: ConfigType,
    doc: &'static str,
) -> ConfigDef {
    ConfigDef {
        name,
        broker_synonym: Some(synonym),
        default,
        kind,
        doc,
        topic: true,
    }
}

/// A topic config without a broker-level synonym.
const fn own(
    name: &'static str,
    default: &'static str,
    kind: ConfigType,
    doc: &'static str,
) -> ConfigDef {
    ConfigDef {
        name,
        broker_synonym: None,
        default,
        kind,
        doc,
        topic: true,
    }
}

const fn broker(
    name: &'static str,
    default: &'static str,
    kind: ConfigType,
    doc: &'static str,
) -> ConfigDef {
    ConfigDef {
        name,
        broker_synonym: None,
        default,
        kind,
        doc,
        topic: false,
    }
}

const I64_MAX: &str = "9223372036854775807";

/// Every topic-level config Moldau understands, with Kafka's defaults.
pub static TOPIC_CONFIGS: &[ConfigDef] = &[
    topic(
        "cleanup.policy",
        "log.cleanup.policy",
        "delete",
        ConfigType::List,
        "delete, compact, or compact,delete",
    ),
    topic(
        "compression.type",
        "compression.type",
        "producer",
        ConfigType::String,
        "producer keeps the producer's codec",
    ),
    topic(
        "delete.retention.ms",
        "log.cleaner.delete.retention.ms",
        "86400000",
        ConfigType::Long,
        "how long tombstones survive compaction",
    ),
    topic(
        "file.delete.delay.ms",
        "log.segment.delete.delay.ms",
        "60000",
        ConfigType::Long,
        "delay before a deleted segment's files are removed",
    ),
    topic(
        "flush.messages",
        "log.flush.interval.messages",
        I64_MAX,
        ConfigType::Long,
        "fsync after this many messages",
    ),
    topic(
        "flush.ms",
        "log.flush.interval.ms",
        I64_MAX,
        ConfigType::Long,
        "fsync after this many milliseconds",
    ),
    topic(
        "index.interval.bytes",
        "log.index.interval.bytes",
        "4096",
        ConfigType::Int,
        "bytes between offset index entries",
    ),
    topic(
        "max.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        I64_MAX,
        ConfigType::Long,
        "max time a record stays uncompacted",
    ),
    topic(
        "max.message.bytes",
        "message.max.bytes",
        "1048588",
        ConfigType::Int,
        "largest record batch accepted",
    ),
    topic(
        "message.timestamp.after.max.ms",
        "log.message.timestamp.after.max.ms",
        "3600000",
        ConfigType::Long,
        "how far in the future a CreateTime may be",
    ),
    topic(
        "message.timestamp.before.max.ms",
        "log.message.timestamp.before.max.ms",
        I64_MAX,
        ConfigType::Long,
        "how far in the past a CreateTime may be",
    ),
    topic(
        "message.timestamp.type",
        "log.message.timestamp.type",
        "CreateTime",
        ConfigType::String,
        "CreateTime or LogAppendTime",
    ),
    topic(
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
        "0.5",
        ConfigType::Double,
        "dirty ratio that triggers compaction",
    ),
    topic(
        "min.compaction.lag.ms",
        "log.cleaner.min.compaction.lag.ms",
        "0",
        ConfigType::Long,
        "min time a record stays uncompacted",
    ),
    topic(
        "min.insync.replicas",
        "min.insync.replicas",
        "1",
        ConfigType::Int,
        "replicas that must ack an acks=all write",
    ),
    topic(
        "preallocate",
        "log.preallocate",
        "false",
        ConfigType::Boolean,
        "preallocate segment files",
    ),
    topic(
        "retention.bytes",
        "log.retention.bytes",
        "-1",
        ConfigType::Long,
        "max partition size before old segments are deleted; -1 = unlimited",
    ),
    topic(
        "retention.ms",
        "log.retention.ms",
        "604800000",
        ConfigType::Long,
        "max age of a segment's newest record; -1 = unlimited",
    ),
    topic(
        "segment.bytes",
        "log.segment.bytes",
        "1073741824",
        ConfigType::Int,
        "segment file size",
    ),
    topic(
        "segment.index.bytes",
        "log.index.size.max.bytes",
        "10485760",
        ConfigType::Int,
        "max size of an offset index",
    ),
    topic(
        "segment.jitter.ms",
        "log.roll.jitter.ms",
        "0",
        ConfigType::Long,
        "random jitter subtracted from segment.ms",
    ),
    topic(
        "segment.ms",
        "log.roll.ms",
        "604800000",
        ConfigType::Long,
        "roll a segment after this long",
    ),
    topic(
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
        "false",
        ConfigType::Boolean,
        "allow out-of-ISR leaders",
    ),
    // Kafka 4.x keys that Moldau accepts, validates and describes with Kafka's defaults, so
    // tools that read or copy a topic's whole config work; what the codec levels (the broker
    // never recompresses) and the tiered-storage keys (`remote.storage.enable=true` is
    // refused, as by a Kafka broker without tiered storage) control is not implemented; the
    // replication throttle lists are (KIP-73, with the brokers' throttled rates).
    topic(
        "compression.gzip.level",
        "compression.gzip.level",
        "-1",
        ConfigType::Int,
        "gzip level when the broker compresses (-1 or 1-9)",
    ),
    topic(
        "compression.lz4.level",
        "compression.lz4.level",
        "9",
        ConfigType::Int,
        "lz4 level when the broker compresses (1-17)",
    ),
    topic(
        "compression.zstd.level",
        "compression.zstd.level",
        "3",
        ConfigType::Int,
        "zstd level when the broker compresses (-131072-22)",
    ),
    own(
        "errors.deadletterqueue.group.enable",
        "false",
        ConfigType::Boolean,
        "whether share groups may use this topic as their dead-letter queue",
    ),
    own(
        "follower.replication.throttled.replicas",
        "",
        ConfigType::List,
        "replicas throttled on followers (partition:broker list or *)",
    ),
    own(
        "leader.replication.throttled.replicas",
        "",
        ConfigType::List,
        "replicas throttled on leaders (partition:broker list or *)",
    ),
    topic(
        "local.retention.bytes",
        "log.local.retention.bytes",
        "-2",
        ConfigType::Long,
        "local retention by size with tiered storage (-2: retention.bytes)",
    ),
    topic(
        "local.retention.ms",
        "log.local.retention.ms",
        "-2",
        ConfigType::Long,
        "local retention by time with tiered storage (-2: retention.ms)",
    ),
    topic(
        "max.decompressed.message.bytes",
        "max.decompressed.message.bytes",
        "2147483639",
        ConfigType::Int,
        "largest decompressed record batch accepted",
    ),
    topic(
        "remote.copy.lag.bytes",
        "log.remote.copy.lag.bytes",
        "-1",
        ConfigType::Long,
        "bytes a tiered-storage copy may lag",
    ),
    topic(
        "remote.copy.lag.ms",
        "log.remote.copy.lag.ms",
        "0",
        ConfigType::Long,
        "time a tiered-storage copy may lag",
    ),
    own(
        "remote.log.copy.disable",
        "false",
        ConfigType::Boolean,
        "stop copying segments to tiered storage",
    ),
    own(
        "remote.log.delete.on.disable",
        "false",
        ConfigType::Boolean,
        "delete tiered data when tiered storage is disabled",
    ),
    own(
        "remote.storage.enable",
        "false",
        ConfigType::Boolean,
        "tiered storage for this topic (not supported: must stay false)",
    ),
];

/// Broker keys that have no default of their own in Kafka (the default comes from another
/// key of their synonym group): DescribeConfigs shows no value for them unless set.
const SYNONYMS_WITHOUT_DEFAULT: &[&str] = &[
    "log.retention.ms",
    "log.retention.minutes",
    "log.roll.ms",
    "log.roll.jitter.ms",
    "log.flush.interval.ms",
];

/// Broker keys that set the same topic default in other units (Kafka's
/// `DynamicBrokerConfig.brokerConfigSynonyms`): the topic default's broker key first, then
/// its alternatives in precedence order, each with its unit in milliseconds. The first one set
/// wins; a negative result means unlimited (-1), as in Kafka's `LogConfig`.
const UNIT_SYNONYMS: &[(&str, &[(&str, i64)])] = &[
    (
        "log.retention.ms",
        &[
            ("log.retention.minutes", 60_000),
            ("log.retention.hours", 3_600_000),
        ],
    ),
    ("log.roll.ms", &[("log.roll.hours", 3_600_000)]),
    (
        "log.roll.jitter.ms",
        &[("log.roll.jitter.hours", 3_600_000)],
    ),
];

/// The synonym group of a broker key in Kafka's precedence order (DescribeConfigs lists a
/// key's synonyms from this group, layer by layer); a key outside any group is its own.
pub fn broker_synonym_group(name: &str) -> Vec<&str> {
    UNIT_SYNONYMS
        .iter()
        .find(|(ms, alts)| *ms == name || alts.iter().any(|(k, _)| *k == name))
        .map(|(ms, alts)| {
            std::iter::once(*ms)
                .chain(alts.iter().map(|(k, _)| *k))
                .collect()
        })
        .unwrap_or_else(|| vec![name])
}

/// The value a topic default's broker key takes from one of its alternatives when it is not
/// set itself (`log.retention.ms` from `log.retention.minutes` or `log.retention.hours`),
/// in milliseconds, as Kafka derives it; None when the key has no alternatives. The
/// alternatives are static keys, read from the broker's static config.
pub fn derived_broker_value(key: &str, static_props: &BTreeMap<String, String>) -> Option<String> {
    let (_, alts) = UNIT_SYNONYMS.iter().find(|(ms, _)| *ms == key)?;
    alts.iter().find_map(|(alt, unit)| {
        let v = static_props.get(*alt)?.trim().parse::<i64>().ok()?;
        let ms = v.saturating_mul(*unit);
        Some(if ms < 0 { -1 } else { ms }.to_string())
    })
}

/// Whether a broker key has a default of its own (DescribeConfigs shows no value for one that
/// does not, unless it is set).
pub fn has_own_default(broker_key: &str) -> bool {
    !SYNONYMS_WITHOUT_DEFAULT.contains(&broker_key)
}

/// Broker-only keys (topic defaults are set through the synonyms in `TOPIC_CONFIGS`).
pub static BROKER_CONFIGS: &[ConfigDef] = &[
    broker("node.id", "1", ConfigType::Int, "this broker's id"),
    broker(
        "listeners",
        "PLAINTEXT://127.0.0.1:9092",
        ConfigType::List,
        "where the broker listens",
    ),
    broker(
        "advertised.listeners",
        "",
        ConfigType::List,
        "the address clients are told to use (default: the bound address)",
    ),
    broker(
        "log.dirs",
        "./moldau-data",
        ConfigType::String,
        "data directory",
    ),
    broker(
        "num.partitions",
        "1",
        ConfigType::Int,
        "partitions of an auto-created topic",
    ),
    broker(
        "default.replication.factor",
        "1",
        ConfigType::Short,
        "replication factor of an auto-created topic",
    ),
    broker(
        "auto.create.topics.enable",
        "true",
        ConfigType::Boolean,
        "create topics on first use",
    ),
    broker(
        "delete.topic.enable",
        "true",
        ConfigType::Boolean,
        "allow DeleteTopics",
    ),
    broker(
        "socket.request.max.bytes",
        "104857600",
        ConfigType::Int,
        "largest request frame accepted",
    ),
    broker(
        "max.connections",
        "2147483647",
        ConfigType::Int,
        "connections accepted at once",
    ),
    broker(
        "max.connections.per.ip",
        "2147483647",
        ConfigType::Int,
        "connections accepted at once from one address",
    ),
    broker(
        "max.connections.per.ip.overrides",
        "",
        ConfigType::String,
        "per-address limits, `host:count` comma separated",
    ),
    broker(
        "max.connection.creation.rate",
        "2147483647",
        ConfigType::Int,
        "connections accepted per second (new ones wait beyond it)",
    ),
    broker(
        "leader.replication.throttled.rate",
        "9223372036854775807",
        ConfigType::Long,
        "bytes/s this broker sends to followers of the replicas its topics name in leader.replication.throttled.replicas (KIP-73; dynamic)",
    ),
    broker(
        "follower.replication.throttled.rate",
        "9223372036854775807",
        ConfigType::Long,
        "bytes/s this broker fetches for the replicas its topics name in follower.replication.throttled.replicas (KIP-73; dynamic)",
    ),
    broker(
        "replication.quota.window.num",
        "11",
        ConfigType::Int,
        "samples kept for the replication throttle rates",
    ),
    broker(
        "replication.quota.window.size.seconds",
        "1",
        ConfigType::Int,
        "the time span of each replication throttle rate sample",
    ),
    broker(
        "quota.window.num",
        "11",
        ConfigType::Int,
        "samples kept for client quota rates",
    ),
    broker(
        "quota.window.size.seconds",
        "1",
        ConfigType::Int,
        "the time span of each client quota rate sample",
    ),
    broker(
        "controller.quota.window.num",
        "11",
        ConfigType::Int,
        "samples of the controller mutation quota (its token bucket holds quota x samples x window)",
    ),
    broker(
        "controller.quota.window.size.seconds",
        "1",
        ConfigType::Int,
        "the time span of each controller mutation quota sample",
    ),
    broker(
        "sasl.enabled.mechanisms",
        "GSSAPI",
        ConfigType::List,
        "SASL mechanisms of SASL listeners (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512); per listener as listener.name.<listener>.sasl.enabled.mechanisms",
    ),
    broker(
        "sasl.mechanism.inter.broker.protocol",
        "GSSAPI",
        ConfigType::String,
        "the SASL mechanism brokers use on the inter-broker listener (default: its first enabled mechanism); the user is the username/password of listener.name.<listener>.<mechanism>.sasl.jaas.config",
    ),
    broker(
        "sasl.mechanism.controller.protocol",
        "GSSAPI",
        ConfigType::String,
        "the SASL mechanism nodes use on a SASL controller listener (default: its first enabled mechanism); the user is the username/password of listener.name.<controller listener>.<mechanism>.sasl.jaas.config",
    ),
    broker(
        "security.inter.broker.protocol",
        "",
        ConfigType::String,
        "the inter-broker listener by security protocol (the listener of that name); set this or inter.broker.listener.name, not both",
    ),
    broker(
        "ssl.endpoint.identification.algorithm",
        "https",
        ConfigType::String,
        "https: a broker dialling another over TLS checks that the certificate names the host; empty turns the check off",
    ),
    broker(
        "ssl.keystore.type",
        "JKS",
        ConfigType::String,
        "PEM (the only type served): ssl.keystore.location is one PEM file with the certificate chain and the private key",
    ),
    broker(
        "ssl.keystore.location",
        "",
        ConfigType::String,
        "the TLS listeners' certificate chain and private key (PEM)",
    ),
    broker(
        "ssl.key.password",
        "",
        ConfigType::Password,
        "not supported: keys are stored unencrypted (PKCS#8 or PKCS#1/SEC1 PEM)",
    ),
    broker(
        "ssl.truststore.type",
        "JKS",
        ConfigType::String,
        "PEM (the only type served)",
    ),
    broker(
        "ssl.truststore.location",
        "",
        ConfigType::String,
        "CA certificates (PEM) client certificates are verified against",
    ),
    broker(
        "ssl.client.auth",
        "none",
        ConfigType::String,
        "required, requested or none: whether TLS clients must present a certificate",
    ),
    broker(
        "ssl.principal.mapping.rules",
        "DEFAULT",
        ConfigType::String,
        "rules mapping a client certificate's subject to the principal name (Kafka's syntax)",
    ),
    broker(
        "ssl.enabled.protocols",
        "TLSv1.2,TLSv1.3",
        ConfigType::List,
        "TLS versions served (1.2 and 1.3 only)",
    ),
    broker(
        "ssl.allow.dn.changes",
        "false",
        ConfigType::Boolean,
        "whether a keystore reloaded at runtime may have a certificate with another subject",
    ),
    broker(
        "ssl.allow.san.changes",
        "false",
        ConfigType::Boolean,
        "whether a keystore reloaded at runtime may have a certificate without one of the current SubjectAltNames",
    ),
    broker(
        "connections.max.reauth.ms",
        "0",
        ConfigType::Long,
        "SASL session lifetime; clients re-authenticate before it ends (0: sessions never expire)",
    ),
    broker(
        "sasl.server.max.receive.size",
        "524288",
        ConfigType::Int,
        "largest frame accepted from a client that has not authenticated",
    ),
    broker(
        "authorizer.class.name",
        "",
        ConfigType::String,
        "ACL enforcement: org.apache.kafka.metadata.authorizer.StandardAuthorizer switches it on (empty: every request is allowed)",
    ),
    broker(
        "super.users",
        "",
        ConfigType::String,
        "principals allowed everything by the authorizer, separated by ';' (User:admin;User:CN=broker)",
    ),
    broker(
        "allow.everyone.if.no.acl.found",
        "false",
        ConfigType::Boolean,
        "with the authorizer on, allow access to resources no ACL pattern matches",
    ),
    broker(
        "connections.max.idle.ms",
        "600000",
        ConfigType::Long,
        "close connections idle (no request) this long",
    ),
    broker(
        "fetch.max.bytes",
        "57671680",
        ConfigType::Int,
        "largest Fetch response the broker builds",
    ),
    broker(
        "queued.max.requests",
        "500",
        ConfigType::Int,
        "in-flight requests per connection",
    ),
    broker(
        "queued.max.request.bytes",
        "-1",
        ConfigType::Long,
        "bytes of requests being read or handled at once, broker-wide; when spent the broker stops reading sockets (-1: an eighth of the memory, at least socket.request.max.bytes)",
    ),
    broker(
        "queued.max.response.bytes",
        "16777216",
        ConfigType::Long,
        "unwritten response bytes per connection past which its next request waits (Moldau)",
    ),
    broker(
        "log.retention.minutes",
        "",
        ConfigType::Int,
        "retention of a topic without retention.ms, in minutes, when log.retention.ms is not set",
    ),
    broker(
        "log.retention.hours",
        "168",
        ConfigType::Int,
        "retention of a topic without retention.ms, in hours, when neither log.retention.ms nor log.retention.minutes is set",
    ),
    broker(
        "log.roll.hours",
        "168",
        ConfigType::Int,
        "segment.ms of a topic without one, in hours, when log.roll.ms is not set",
    ),
    broker(
        "log.roll.jitter.hours",
        "0",
        ConfigType::Int,
        "segment.jitter.ms of a topic without one, in hours, when log.roll.jitter.ms is not set",
    ),
    broker(
        "log.retention.check.interval.ms",
        "300000",
        ConfigType::Long,
        "how often retention runs",
    ),
    broker(
        "log.cleaner.backoff.ms",
        "15000",
        ConfigType::Long,
        "how often the cleaner looks for work",
    ),
    broker(
        "log.flush.scheduler.interval.ms",
        "1000",
        ConfigType::Long,
        "how often flush.ms is checked",
    ),
    broker(
        "max.broker.partitions",
        "10000",
        ConfigType::Int,
        "partitions this broker may host (KIP-578's name); CreateTopics and CreatePartitions past it fail with POLICY_VIOLATION",
    ),
    broker(
        "log.io.threads",
        "2",
        ConfigType::Int,
        "threads of the log I/O pool: the group-committed fsyncs of every log, and opening or closing logs in bulk (Moldau; not one per partition)",
    ),
    broker(
        "log.offline.retry.interval.ms",
        "10000",
        ConfigType::Long,
        "how often partitions offline after failed writes (a full disk) or a failed open are tried again (Moldau)",
    ),
    broker(
        "log.flush.offset.checkpoint.interval.ms",
        "60000",
        ConfigType::Int,
        "how often the recovery points of the logs are written to recovery-point-offset-checkpoint",
    ),
    broker(
        "offsets.topic.num.partitions",
        "50",
        ConfigType::Int,
        "partitions of __consumer_offsets",
    ),
    broker(
        "offsets.retention.minutes",
        "10080",
        ConfigType::Int,
        "how long committed offsets of empty groups are kept",
    ),
    broker(
        "group.consumer.max.size",
        "2147483647",
        ConfigType::Int,
        "members a consumer-protocol group may have (GROUP_MAX_SIZE_REACHED past it)",
    ),
    broker(
        "group.consumer.assignors",
        "uniform,range",
        ConfigType::List,
        "server-side assignors of consumer-protocol groups; the first is the default",
    ),
    broker(
        "group.consumer.migration.policy",
        "bidirectional",
        ConfigType::String,
        "online conversion of non-empty groups: disabled, upgrade, downgrade or bidirectional",
    ),
    broker(
        "group.min.session.timeout.ms",
        "6000",
        ConfigType::Int,
        "smallest session timeout a member may ask for",
    ),
    broker(
        "group.max.session.timeout.ms",
        "1800000",
        ConfigType::Int,
        "largest session timeout a member may ask for",
    ),
    broker(
        "group.initial.rebalance.delay.ms",
        "3000",
        ConfigType::Int,
        "wait for more members before the first rebalance",
    ),
    broker(
        "transaction.state.log.num.partitions",
        "50",
        ConfigType::Int,
        "partitions of __transaction_state",
    ),
    broker(
        "transaction.state.log.replication.factor",
        "3",
        ConfigType::Short,
        "replicas of __transaction_state (capped at the live brokers when it is created)",
    ),
    broker(
        "transaction.state.log.segment.bytes",
        "104857600",
        ConfigType::Int,
        "segment size of __transaction_state",
    ),
    broker(
        "transaction.max.timeout.ms",
        "900000",
        ConfigType::Int,
        "largest transaction.timeout.ms a producer may ask for",
    ),
    broker(
        "transactional.id.expiration.ms",
        "604800000",
        ConfigType::Int,
        "forget a transactional id idle (no transaction) this long",
    ),
    broker(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "10000",
        ConfigType::Int,
        "how often timed-out transactions are looked for and aborted",
    ),
    broker(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "3600000",
        ConfigType::Int,
        "how often expired transactional ids are removed",
    ),
    broker(
        "cluster.id",
        "",
        ConfigType::String,
        "cluster id (generated on first start when empty)",
    ),
    broker(
        "admin.listener",
        "",
        ConfigType::String,
        "HOST:PORT of the admin HTTP listener (/metrics, /health/*); unset: the client listener's host on a free port; empty: off",
    ),
    broker(
        "log.format",
        "human",
        ConfigType::String,
        "how the server logs to stderr: human (one readable line per event) or json (one JSON object per line)",
    ),
    broker(
        "metrics.partition.series",
        "true",
        ConfigType::Boolean,
        "export per-partition series (log offsets and sizes, consumer lag per partition); false keeps only per-topic series",
    ),
    broker(
        "process.roles",
        "broker,controller",
        ConfigType::List,
        "broker, controller, or both (combined, the default)",
    ),
    broker(
        "controller.quorum.voters",
        "",
        ConfigType::List,
        "the controller voters, id@host:port,...; empty: this node alone is the quorum",
    ),
    broker(
        "controller.listener.names",
        "CONTROLLER",
        ConfigType::List,
        "listener names the controller serves on (the first is the one voters dial)",
    ),
    broker(
        "listener.security.protocol.map",
        crate::cluster::DEFAULT_PROTOCOL_MAP,
        ConfigType::List,
        "listener name to security protocol",
    ),
    broker(
        "inter.broker.listener.name",
        "",
        ConfigType::String,
        "the listener brokers use to reach each other (default: the first broker listener)",
    ),
    broker(
        "broker.rack",
        "",
        ConfigType::String,
        "the rack of this broker, for rack-aware replica placement",
    ),
    broker(
        "broker.session.timeout.ms",
        "9000",
        ConfigType::Int,
        "a broker without a heartbeat for this long is fenced",
    ),
    broker(
        "auto.leader.rebalance.enable",
        "true",
        ConfigType::Boolean,
        "the active controller moves leadership back to each partition's preferred (first) replica every leader.imbalance.check.interval.seconds",
    ),
    broker(
        "leader.imbalance.check.interval.seconds",
        "300",
        ConfigType::Long,
        "how often automatic preferred-leader balancing runs",
    ),
    broker(
        "replica.lag.time.max.ms",
        "30000",
        ConfigType::Long,
        "a follower that has not caught up with the leader for this long leaves the ISR",
    ),
    broker(
        "replica.high.watermark.checkpoint.interval.ms",
        "5000",
        ConfigType::Long,
        "how often the high watermarks are written to replication-offset-checkpoint",
    ),
    broker(
        "replica.fetch.wait.max.ms",
        "500",
        ConfigType::Int,
        "how long a follower's fetch waits at the leader for new records",
    ),
    broker(
        "replica.fetch.backoff.ms",
        "1000",
        ConfigType::Int,
        "a follower's pause after a failed fetch",
    ),
    broker(
        "broker.heartbeat.interval.ms",
        "2000",
        ConfigType::Int,
        "how often a broker heartbeats to the active controller",
    ),
    broker(
        "controller.quorum.election.timeout.ms",
        "1000",
        ConfigType::Int,
        "how long a voter waits for the leader before it starts an election",
    ),
    broker(
        "metadata.log.max.record.bytes.between.snapshots",
        "20971520",
        ConfigType::Long,
        "bytes of metadata records after which the image is snapshotted and the log cut",
    ),
    broker(
        "offsets.topic.replication.factor",
        "3",
        ConfigType::Short,
        "replication factor of __consumer_offsets; when left unset, capped at the number of controller voters",
    ),
];

/// The definition of a topic config key.
pub fn topic_config_def(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// The definition of a broker config key, including topic-default synonyms.
pub fn broker_config_def(name: &str) -> Option<&'static ConfigDef> {
    BROKER_CONFIGS.iter().find(|d| d.name == name).or_else(|| {
        TOPIC_CONFIGS
            .iter()
            .find(|d| d.broker_synonym == Some(name))
    })
}

/// Whether a broker-level key may be changed at runtime (DescribeConfigs `read_only` false),
/// per broker or cluster-wide: the topic defaults, as Kafka's `DynamicLogConfig` allows. They
/// take effect on every hosted partition as soon as the change is committed; the connection
/// limits; the cleaner's `log.cleaner.backoff.ms`. Kafka also makes thread pools, listeners
/// and the cleaner's pool keys dynamic; Moldau's equivalents are static or absent, so they are
/// refused rather than stored and silently ignored.
pub fn is_dynamic_broker_config(name: &str) -> bool {
    TOPIC_CONFIGS.iter().any(|d| d.broker_synonym == Some(name))
        || CONNECTION_LIMIT_CONFIGS.contains(&name)
        || name == CLEANER_BACKOFF_MS
        || REPLICATION_THROTTLED_RATE_CONFIGS.contains(&name)
        || crate::security::dynamic_tls_key(name).is_some()
        || listener_max_connections_key(name).is_some()
}

/// A listener's own connection limit, Kafka's `listener.name.<listener>.max.connections`
/// (KIP-402) or `listener.name.<listener>.max.connection.creation.rate` (KIP-612; both static
/// or dynamic, per broker or cluster-wide): the listener it names (as written), `None` for
/// any other key.
pub fn listener_max_connections_key(key: &str) -> Option<&str> {
    listener_connection_limit_key(key).map(|(listener, _)| listener)
}

/// The broker-wide keys a listener may override with its own value (Kafka's
/// `ListenerReconfigurableConfigs`); a listener without its own value takes the broker-wide
/// one, as Kafka's `valuesWithPrefixOverride` gives it.
pub const LISTENER_CONNECTION_LIMIT_CONFIGS: &[&str] =
    &["max.connections", "max.connection.creation.rate"];

/// A listener's own connection limit key: the listener it names (as written) and the
/// broker-wide key it overrides (`max.connections` or `max.connection.creation.rate`).
pub fn listener_connection_limit_key(key: &str) -> Option<(&str, &'static str)> {
    let rest = key.strip_prefix("listener.name.")?;
    LISTENER_CONNECTION_LIMIT_CONFIGS.iter().find_map(|base| {
        let listener = rest.strip_suffix(base)?.strip_suffix('.')?;
        (!listener.is_empty() && !listener.contains('.')).then_some((listener, *base))
    })
}

/// A listener's connection limit in `props`: its own `listener.name.<listener>.<base>` (the
/// listener named in any case, as Kafka's lower-case `configPrefix`), else the broker-wide
/// `base`.
fn listener_limit<'a>(
    props: &'a BTreeMap<String, String>,
    listener: &str,
    base: &str,
) -> Option<&'a str> {
    props
        .iter()
        .find(|(k, _)| {
            listener_connection_limit_key(k)
                .is_some_and(|(l, b)| b == base && l.eq_ignore_ascii_case(listener))
        })
        .or_else(|| props.get_key_value(base))
        .map(|(_, v)| v.as_str())
}

/// Checks a dynamic BROKER change against the broker's own listeners, as Kafka's
/// `DynamicBrokerConfig.validate` runs each listener's `ListenerConnectionQuota
/// .validateReconfiguration` on the broker that receives the change (per broker or
/// cluster-wide): a listener whose limit the change alters (its own value, else the
/// broker-wide one, `valuesWithPrefixOverride`) must keep it above 0. So a broker-wide
/// `max.connections` or `max.connection.creation.rate` of 0 set at runtime is refused while a
/// listener takes the broker-wide value (a static 0 is not checked: Kafka only `configure`s
/// the listener quotas at startup). `before` and `after` are the broker's effective keys; the
/// error is Kafka's message (its `ConfigException("Invalid dynamic configuration", e)` takes
/// the constructor for a name and a value).
pub fn check_listener_limits_change(
    listeners: &[&str],
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Result<(), String> {
    for listener in listeners {
        for base in LISTENER_CONNECTION_LIMIT_CONFIGS {
            let new = listener_limit(after, listener, base);
            if new == listener_limit(before, listener, base) {
                continue;
            }
            let Some(n) = new.and_then(|v| v.trim().parse::<i64>().ok()) else {
                continue;
            };
            if n <= 0 {
                return Err(format!(
                    "Invalid value org.apache.kafka.common.config.ConfigException: Invalid {base} {n} for configuration Invalid dynamic configuration"
                ));
            }
        }
    }
    Ok(())
}

/// Whether a dynamic broker key may only be set for one broker, not as the cluster-wide
/// default (Kafka's per-broker security configs: a keystore is a broker's own).
pub fn is_per_broker_config(name: &str) -> bool {
    crate::security::dynamic_tls_key(name).is_some()
}

/// How long the cleaner pauses between passes, dynamic as in Kafka (`LogCleaner`'s
/// reconfigurable keys): the compaction task reads it from the effective broker configs
/// before each pause and starts a pass at once when a committed change alters it.
pub const CLEANER_BACKOFF_MS: &str = "log.cleaner.backoff.ms";

/// The replication throttles (KIP-73), dynamic as in Kafka (`QuotaConfig`'s broker quota
/// configs): bytes/s, this broker's value, else the cluster-wide default, else unlimited.
pub const LEADER_REPLICATION_THROTTLED_RATE: &str = "leader.replication.throttled.rate";
pub const FOLLOWER_REPLICATION_THROTTLED_RATE: &str = "follower.replication.throttled.rate";
pub const REPLICATION_THROTTLED_RATE_CONFIGS: &[&str] = &[
    LEADER_REPLICATION_THROTTLED_RATE,
    FOLLOWER_REPLICATION_THROTTLED_RATE,
];

/// The connection limits, dynamic as in Kafka (`DynamicConnectionQuota`): the accept loop
/// reads them from the effective broker configs at each connection.
pub const CONNECTION_LIMIT_CONFIGS: &[&str] = &[
    "max.connections",
    "max.connections.per.ip",
    "max.connections.per.ip.overrides",
    "max.connection.creation.rate",
];

/// Parses `max.connections.per.ip.overrides` (`host:count,host:count`; hosts are addresses
/// or names, counts >= 0).
pub fn parse_connection_overrides(value: &str) -> Result<Vec<(String, i32)>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (host, count) = e
                .rsplit_once(':')
                .ok_or_else(|| format!("{e} is not host:count"))?;
            let count: i32 = count
                .trim()
                .parse()
                .map_err(|_| format!("{count} is not a connection count"))?;
            if count < 0 || host.trim().is_empty() {
                return Err(format!("{e} is not host:count with a count >= 0"));
            }
            Ok((host.trim().to_string(), count))
        })
        .collect()
}

/// Checks a connection-limit value (static or dynamic) as Kafka's `ConfigDef` does.
fn validate_connection_limit(key: &str, value: &str) -> Result<(), ConfigError> {
    if key == "max.connections.per.ip.overrides" {
        return parse_connection_overrides(value)
            .map(|_| ())
            .map_err(|e| ConfigError::new(key, value, &e));
    }
    at_least(key, value, parse_i32(key, value)?, 0).map(|_| ())
}

/// Checks a dynamic broker config value on its own (type and range), as Kafka checks an
/// IncrementalAlterConfigs on a BROKER resource before it is written. Keys this broker does
/// not know are accepted (Kafka keeps them for plugins); known keys that are not dynamic are
/// refused.
pub fn validate_dynamic_broker_config(key: &str, value: &str) -> Result<(), ConfigError> {
    if CONNECTION_LIMIT_CONFIGS.contains(&key) {
        return validate_connection_limit(key, value);
    }
    if let Some((_, base)) = listener_connection_limit_key(key) {
        // Kafka's `ListenerConnectionQuota.validateReconfiguration`: a listener's own limit
        // changed at runtime must be positive ("Invalid max.connections 0").
        let n = parse_i32(key, value)?;
        if n <= 0 {
            return Err(ConfigError::new(key, value, format!("Invalid {base} {n}")));
        }
        return Ok(());
    }
    if key == CLEANER_BACKOFF_MS || REPLICATION_THROTTLED_RATE_CONFIGS.contains(&key) {
        return at_least(key, value, parse_i64(key, value)?, 0).map(|_| ());
    }
    if crate::security::dynamic_tls_key(key).is_some() {
        // The broker the key is set for loads the file before the change is accepted.
        if value.trim().is_empty() {
            return Err(ConfigError::new(
                key,
                value,
                "expected the path of a PEM file",
            ));
        }
        return Ok(());
    }
    if key.starts_with("listener.name.") {
        return Err(ConfigError::new(
            key,
            value,
            "cannot be updated dynamically (of the listener keys only listener.name.<listener>.max.connections, .max.connection.creation.rate, .ssl.keystore.location and .ssl.truststore.location can); set it in the broker's config file",
        ));
    }
    if let Some(def) = TOPIC_CONFIGS.iter().find(|d| d.broker_synonym == Some(key)) {
        return TopicConfig::validate(def.name, value)
            .map_err(|e| ConfigError::new(key, value, e.reason));
    }
    if broker_config_def(key).is_some() {
        return Err(ConfigError::new(
            key,
            value,
            "cannot be updated dynamically; set it in the broker's config file",
        ));
    }
    Ok(())
}

/// Where a broker-level value can come from, highest precedence first, as in Kafka: this
/// broker's dynamic config, the cluster-wide dynamic default, the static config file. Only
/// dynamic keys ([`is_dynamic_broker_config`]) are read from the dynamic layers.
#[derive(Clone, Copy, Debug)]
pub struct BrokerLayers<'a> {
    pub dynamic_broker: Option<&'a BTreeMap<String, String>>,
    pub dynamic_default: Option<&'a BTreeMap<String, String>>,
    pub static_props: &'a BTreeMap<String, String>,
}

impl<'a> BrokerLayers<'a> {
    /// Every layer that sets `name`, highest precedence first (DescribeConfigs synonyms).
    pub fn sources(&self, name: &str) -> Vec<(&'a str, ConfigSource)> {
        let mut out = Vec::new();
        if is_dynamic_broker_config(name) {
            if let Some(v) = self.dynamic_broker.and_then(|m| m.get(name)) {
                out.push((v.as_str(), ConfigSource::DynamicBroker));
            }
            if let Some(v) = self.dynamic_default.and_then(|m| m.get(name)) {
                out.push((v.as_str(), ConfigSource::DynamicDefaultBroker));
            }
        }
        if let Some(v) = self.static_props.get(name) {
            out.push((v.as_str(), ConfigSource::StaticBroker));
        }
        out
    }

    /// The effective broker-level keys: the static config overlaid by the dynamic layers.
    pub fn effective(&self) -> BTreeMap<String, String> {
        let mut out = self.static_props.clone();
        for layer in [self.dynamic_default, self.dynamic_broker]
            .into_iter()
            .flatten()
        {
            for (k, v) in layer {
                if is_dynamic_broker_config(k) {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
        out
    }
}

fn parse_i64(key: &str, v: &str) -> Result<i64, ConfigError> {
    v.trim()
        .parse::<i64>()
        .map_err(|_| ConfigError::new(key, v, "expected an integer"))
}

fn parse_i32(key: &str, v: &str) -> Result<i32, ConfigError> {
    v.trim()
        .parse::<i32>()
        .map_err(|_| ConfigError::new(key, v, "expected a 32-bit integer"))
}

fn parse_bool(key: &str, v: &str) -> Result<bool, ConfigError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ConfigError::new(key, v, "expected true or false")),
    }
}

fn at_least<T: PartialOrd + std::fmt::Display + Copy>(
    key: &str,
    v: &str,
    x: T,
    min: T,
) -> Result<T, ConfigError> {
    if x < min {
        Err(ConfigError::new(key, v, format!("must be at least {min}")))
    } else {
        Ok(x)
    }
}

/// How a topic's old data is cleaned up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

impl CleanupPolicy {
    pub fn parse(key: &str, v: &str) -> Result<CleanupPolicy, ConfigError> {
        let mut p = CleanupPolicy::default();
        for part in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match part {
                "delete" => p.delete = true,
                "compact" => p.compact = true,
                _ => return Err(ConfigError::new(key, v, "expected delete, compact or both")),
            }
        }
        Ok(p)
    }
}

/// Which timestamp a batch carries: the producer's, or the broker's at append.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TimestampType {
    #[default]
    CreateTime,
    LogAppendTime,
}

/// The effective configuration of one topic's logs (Kafka's `LogConfig`).
#[derive(Clone, Debug, PartialEq)]
pub struct TopicConfig {
    pub cleanup_policy: CleanupPolicy,
    /// `producer`, `uncompressed`, `gzip`, `snappy`, `lz4` or `zstd`.
    pub compression_type: String,
    pub delete_retention_ms: i64,
    pub file_delete_delay_ms: i64,
    pub flush_messages: i64,
    pub flush_ms: i64,
    pub index_interval_bytes: i32,
    pub max_compaction_lag_ms: i64,
    pub max_message_bytes: i32,
    pub message_timestamp_after_max_ms: i64,
    pub message_timestamp_before_max_ms: i64,
    pub message_timestamp_type: TimestampType,
    pub min_cleanable_dirty_ratio: f64,
    pub min_compaction_lag_ms: i64,
    pub min_insync_replicas: i32,
    pub preallocate: bool,
    pub retention_bytes: i64,
    pub retention_ms: i64,
    pub segment_bytes: i32,
    pub segment_index_bytes: i32,
    pub segment_jitter_ms: i64,
    pub segment_ms: i64,
    pub unclean_leader_election_enable: bool,
    /// `leader.replication.throttled.replicas`: the replicas whose leader-side sends count
    /// against (and are held by) their broker's `leader.replication.throttled.rate`.
    pub leader_replication_throttled_replicas: ThrottledReplicas,
    /// `follower.replication.throttled.replicas`: the replicas whose fetches count against
    /// (and are held by) their broker's `follower.replication.throttled.rate`.
    pub follower_replication_throttled_replicas: ThrottledReplicas,
}

/// A topic's `leader.replication.throttled.replicas` or
/// `follower.replication.throttled.replicas` (KIP-73): `*` (every replica of the topic on
/// every broker) or `partition:broker` pairs, as Kafka's `ThrottledReplicaListValidator`
/// accepts them (blank elements are allowed, as by its `([0-9]+:[0-9]+)?`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ThrottledReplicas {
    #[default]
    None,
    All,
    Some(Vec<(i32, i32)>),
}

impl ThrottledReplicas {
    /// Parses a value; `None` when Kafka would refuse it.
    pub fn parse(value: &str) -> Option<ThrottledReplicas> {
        let elements: Vec<&str> = value.split(',').map(str::trim).collect();
        if elements.concat() == "*" {
            return Some(ThrottledReplicas::All);
        }
        let mut pairs = Vec::new();
        for e in elements.into_iter().filter(|e| !e.is_empty()) {
            let (p, b) = e.split_once(':')?;
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
            if !digits(p) || !digits(b) {
                return None;
            }
            pairs.push((p.parse().ok()?, b.parse().ok()?));
        }
        Some(if pairs.is_empty() {
            ThrottledReplicas::None
        } else {
            ThrottledReplicas::Some(pairs)
        })
    }

    /// Whether the replica of `partition` on `broker` is throttled (Kafka's
    /// `ReplicationQuotaManager.isThrottled` on that broker).
    pub fn contains(&self, partition: i32, broker: i32) -> bool {
        match self {
            ThrottledReplicas::None => false,
            ThrottledReplicas::All => true,
            ThrottledReplicas::Some(pairs) => pairs.contains(&(partition, broker)),
        }
    }
}

/// A partition's effective `min.insync.replicas`: the setting (at least 1), never more than
/// the partition's replica count, as Kafka applies it on both sides (the controller's
/// `getTopicEffectiveMinIsr` for the ELR, the broker's `Partition.effectiveMinIsr` for acks=all,
/// the HW and the UnderMinIsr count). A setting above the replica count would make acks=all
/// impossible, not safer. Kafka's controller takes the replica count of the topic's partition 0
/// for every partition; Moldau each partition's own, as its replicas do.
pub fn effective_min_isr(min_insync_replicas: usize, replicas: usize) -> usize {
    min_insync_replicas.max(1).min(replicas)
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig::resolve(&BTreeMap::new(), &BTreeMap::new())
            .expect("Kafka's defaults are valid")
    }
}

impl TopicConfig {
    /// Validates one topic-level key and value.
    pub fn validate(key: &str, value: &str) -> Result<(), ConfigError> {
        if topic_config_def(key).is_none() {
            return Err(ConfigError::new(key, value, "unknown topic config"));
        }
        let mut t = BTreeMap::new();
        t.insert(key.to_string(), value.to_string());
        TopicConfig::resolve(&BTreeMap::new(), &t).map(|_| ())
    }

    /// The effective value of `name` and where it came from, given the same inputs as `resolve`.
    pub fn lookup(
        name: &str,
        broker: &BTreeMap<String, String>,
        topic: &BTreeMap<String, String>,
    ) -> Option<(String, ConfigSource)> {
        let def = topic_config_def(name)?;
        if let Some(v) = topic.get(name) {
            return Some((v.clone(), ConfigSource::Topic));
        }
        if let Some(v) = def.broker_synonym.and_then(|s| broker.get(s)) {
            return Some((v.clone(), ConfigSource::StaticBroker));
        }
        Some((Self::broker_default(def, broker), ConfigSource::Default))
    }

    /// As [`TopicConfig::lookup_layered`], as Kafka's controller reports a new topic's configs
    /// in a CreateTopics answer: a value derived from a static key in other units
    /// (`log.roll.hours`...) comes from STATIC_BROKER_CONFIG there (DescribeConfigs says
    /// DEFAULT_CONFIG for the same value).
    pub fn lookup_created(
        name: &str,
        layers: &BrokerLayers<'_>,
        topic: &BTreeMap<String, String>,
    ) -> Option<(String, ConfigSource)> {
        let (value, source) = Self::lookup_layered(name, layers, topic)?;
        let derived = topic_config_def(name)
            .and_then(|d| d.broker_synonym)
            .is_some_and(|s| derived_broker_value(s, layers.static_props).is_some());
        if source == ConfigSource::Default && derived {
            Some((value, ConfigSource::StaticBroker))
        } else {
            Some((value, source))
        }
    }

    /// The default of a topic key no layer sets: from an alternative broker key in other
    /// units (`log.retention.hours`...) when one is set (Kafka still reports it as
    /// DEFAULT_CONFIG), else Kafka's default.
    fn broker_default(def: &ConfigDef, static_props: &BTreeMap<String, String>) -> String {
        def.broker_synonym
            .and_then(|s| derived_broker_value(s, static_props))
            .unwrap_or_else(|| def.default.to_string())
    }

    /// As [`TopicConfig::lookup`], telling the broker-level layers apart (a value inherited
    /// from a dynamic broker config reports that source, as Kafka does).
    pub fn lookup_layered(
        name: &str,
        layers: &BrokerLayers<'_>,
        topic: &BTreeMap<String, String>,
    ) -> Option<(String, ConfigSource)> {
        let def = topic_config_def(name)?;
        if let Some(v) = topic.get(name) {
            return Some((v.clone(), ConfigSource::Topic));
        }
        if let Some((v, source)) = def
            .broker_synonym
            .and_then(|s| layers.sources(s).into_iter().next())
        {
            return Some((v.to_string(), source));
        }
        Some((
            Self::broker_default(def, layers.static_props),
            ConfigSource::Default,
        ))
    }

    /// Resolves a topic's effective config from its overrides and the broker's settings
    /// (both keyed by Kafka names: topic keys in `topic`, broker keys in `broker`).
    pub fn resolve(
        broker: &BTreeMap<String, String>,
        topic: &BTreeMap<String, String>,
    ) -> Result<TopicConfig, ConfigError> {
        let get = |name: &'static str| -> (&'static str, String) {
            let v = TopicConfig::lookup(name, broker, topic)
                .map(|(v, _)| v)
                .unwrap_or_default();
            (name, v)
        };
        let long = |name: &'static str, min: i64| -> Result<i64, ConfigError> {
            let (k, v) = get(name);
            at_least(k, &v, parse_i64(k, &v)?, min)
        };
        let int = |name: &'static str, min: i32| -> Result<i32, ConfigError> {
            let (k, v) = get(name);
            at_least(k, &v, parse_i32(k, &v)?, min)
        };
        let boolean = |name: &'static str| -> Result<bool, ConfigError> {
            let (k, v) = get(name);
            parse_bool(k, &v)
        };
        let (k, v) = get("cleanup.policy");
        let cleanup_policy = CleanupPolicy::parse(k, &v)?;
        let (k, compression_type) = get("compression.type");
        if !matches!(
            compression_type.as_str(),
            "producer" | "uncompressed" | "gzip" | "snappy" | "lz4" | "zstd"
        ) {
            return Err(ConfigError::new(
                k,
                &compression_type,
                "expected producer, uncompressed, gzip, snappy, lz4 or zstd",
            ));
        }
        let (k, v) = get("message.timestamp.type");
        let message_timestamp_type = match v.as_str() {
            "CreateTime" => TimestampType::CreateTime,
            "LogAppendTime" => TimestampType::LogAppendTime,
            _ => {
                return Err(ConfigError::new(
                    k,
                    &v,
                    "expected CreateTime or LogAppendTime",
                ))
            }
        };
        let (k, v) = get("min.cleanable.dirty.ratio");
        let min_cleanable_dirty_ratio: f64 = v
            .trim()
            .parse()
            .map_err(|_| ConfigError::new(k, &v, "expected a number"))?;
        if !(0.0..=1.0).contains(&min_cleanable_dirty_ratio) {
            return Err(ConfigError::new(k, &v, "must be between 0 and 1"));
        }
        let ranged = |name: &'static str, lo: i64, hi: i64| -> Result<(), ConfigError> {
            let (k, v) = get(name);
            let n = parse_i64(k, &v)?;
            if n < lo || n > hi {
                return Err(ConfigError::new(
                    k,
                    &v,
                    format!("must be between {lo} and {hi}"),
                ));
            }
            Ok(())
        };
        let (k, v) = get("compression.gzip.level");
        if parse_i32(k, &v)? != -1 {
            ranged("compression.gzip.level", 1, 9)?;
        }
        ranged("compression.lz4.level", 1, 17)?;
        ranged("compression.zstd.level", -131072, 22)?;
        ranged("local.retention.bytes", -2, i64::MAX)?;
        ranged("local.retention.ms", -2, i64::MAX)?;
        ranged("max.decompressed.message.bytes", 0, i64::from(i32::MAX))?;
        long("remote.copy.lag.bytes", -1)?;
        long("remote.copy.lag.ms", 0)?;
        for flag in [
            "errors.deadletterqueue.group.enable",
            "remote.log.copy.disable",
            "remote.log.delete.on.disable",
        ] {
            boolean(flag)?;
        }
        if boolean("remote.storage.enable")? {
            let (k, v) = get("remote.storage.enable");
            return Err(ConfigError::new(
                k,
                &v,
                "Tiered Storage functionality is disabled in the broker",
            ));
        }
        let throttled = |name: &'static str| -> Result<ThrottledReplicas, ConfigError> {
            let (k, v) = get(name);
            ThrottledReplicas::parse(&v).ok_or_else(|| {
                ConfigError::new(
                    k,
                    &v,
                    "must be the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...",
                )
            })
        };
        let follower_replication_throttled_replicas =
            throttled("follower.replication.throttled.replicas")?;
        let leader_replication_throttled_replicas =
            throttled("leader.replication.throttled.replicas")?;
        Ok(TopicConfig {
            cleanup_policy,
            compression_type,
            delete_retention_ms: long("delete.retention.ms", 0)?,
            file_delete_delay_ms: long("file.delete.delay.ms", 0)?,
            flush_messages: long("flush.messages", 1)?,
            flush_ms: long("flush.ms", 0)?,
            index_interval_bytes: int("index.interval.bytes", 0)?,
            max_compaction_lag_ms: long("max.compaction.lag.ms", 1)?,
            max_message_bytes: int("max.message.bytes", 0)?,
            message_timestamp_after_max_ms: long("message.timestamp.after.max.ms", 0)?,
            message_timestamp_before_max_ms: long("message.timestamp.before.max.ms", 0)?,
            message_timestamp_type,
            min_cleanable_dirty_ratio,
            min_compaction_lag_ms: long("min.compaction.lag.ms", 0)?,
            min_insync_replicas: int("min.insync.replicas", 1)?,
            preallocate: boolean("preallocate")?,
            retention_bytes: long("retention.bytes", -1)?,
            retention_ms: long("retention.ms", -1)?,
            segment_bytes: int("segment.bytes", 14)?,
            segment_index_bytes: int("segment.index.bytes", 4)?,
            segment_jitter_ms: long("segment.jitter.ms", 0)?,
            segment_ms: long("segment.ms", 1)?,
            unclean_leader_election_enable: boolean("unclean.leader.election.enable")?,
            leader_replication_throttled_replicas,
            follower_replication_throttled_replicas,
        })
    }
}

/// The broker's own configuration. `props` keeps every explicitly set key (Kafka names) so
/// DescribeConfigs can report sources and topic defaults can be resolved from synonyms.
#[derive(Clone, Debug)]
pub struct BrokerConfig {
    pub node_id: i32,
    /// `host:port` the client listener binds (the first broker listener); port 0 picks a free
    /// port. Empty for a controller-only node.
    pub listen: String,
    /// `host:port` clients are told to connect to; None = the bound address.
    pub advertise: Option<String>,
    /// Every listener to bind, in `listeners` order.
    pub listeners: Vec<Listener>,
    /// `advertised.listeners` by name (a broker listener not named there advertises its bound
    /// address).
    pub advertised_listeners: Vec<Listener>,
    pub roles: Roles,
    /// `controller.quorum.voters`; empty means this node alone (a one-voter quorum).
    pub voters: Vec<Voter>,
    pub controller_listener_names: Vec<String>,
    pub inter_broker_listener_name: String,
    pub broker_rack: Option<String>,
    pub broker_session_timeout_ms: i64,
    pub broker_heartbeat_interval_ms: i64,
    /// `auto.leader.rebalance.enable`: preferred-leader balancing by the active controller.
    pub auto_leader_rebalance_enable: bool,
    /// `leader.imbalance.check.interval.seconds`.
    pub leader_imbalance_check_interval_seconds: i64,
    /// `replica.lag.time.max.ms`: a follower behind for this long leaves the ISR.
    pub replica_lag_time_max_ms: i64,
    /// `replica.fetch.wait.max.ms`: a follower fetch's long-poll at the leader.
    pub replica_fetch_wait_max_ms: i64,
    /// `replica.fetch.backoff.ms`: a follower's pause after a failed fetch.
    pub replica_fetch_backoff_ms: i64,
    /// `replica.high.watermark.checkpoint.interval.ms`: how often the HWs are checkpointed.
    pub replica_high_watermark_checkpoint_interval_ms: i64,
    pub election_timeout_ms: i64,
    pub metadata_snapshot_bytes: i64,
    /// `offsets.topic.replication.factor`, and whether it was set explicitly.
    pub offsets_topic_replication_factor: i16,
    pub offsets_topic_replication_factor_set: bool,
    pub data_dir: String,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics_enable: bool,
    pub delete_topic_enable: bool,
    pub socket_request_max_bytes: i32,
    pub max_connections: i32,
    /// `quota.window.num`: samples of each client quota rate.
    pub quota_window_num: i32,
    /// `quota.window.size.seconds`: each sample's span.
    pub quota_window_size_seconds: i32,
    /// `replication.quota.window.num`: samples of each replication throttle rate.
    pub replication_quota_window_num: i32,
    /// `replication.quota.window.size.seconds`: each sample's span.
    pub replication_quota_window_size_seconds: i32,
    /// `controller.quota.window.num` / `.size.seconds`: the controller mutation quota's
    /// samples and their span (KIP-599: its token bucket's burst is quota x samples x span).
    pub controller_quota_window_num: i32,
    pub controller_quota_window_size_seconds: i32,
    /// `connections.max.idle.ms`: a connection with no request for this long is closed.
    pub connections_max_idle_ms: i64,
    /// `fetch.max.bytes`: caps every Fetch response.
    pub fetch_max_bytes: usize,
    pub queued_max_requests: i32,
    /// `queued.max.request.bytes`: the broker-wide budget of request bytes; -1 = derived from
    /// the machine's memory by the broker.
    pub queued_max_request_bytes: i64,
    /// `queued.max.response.bytes`: per connection, unwritten response bytes past which the
    /// next request waits.
    pub queued_max_response_bytes: i64,
    pub log_retention_check_interval_ms: i64,
    pub log_cleaner_backoff_ms: i64,
    pub log_flush_scheduler_interval_ms: i64,
    /// `log.offline.retry.interval.ms`: how often offline partitions are tried again.
    pub log_offline_retry_interval_ms: i64,
    /// `log.io.threads`: the log I/O pool's threads (Moldau's key): fsyncs, bulk opens/closes.
    pub log_io_threads: i32,
    /// `log.flush.offset.checkpoint.interval.ms`: how often recovery points are checkpointed.
    pub log_flush_offset_checkpoint_interval_ms: i64,
    pub offsets_topic_num_partitions: i32,
    /// `max.broker.partitions` (KIP-578): partitions this broker may host, internal ones
    /// included; checked when topics or partitions are created.
    pub max_broker_partitions: i32,
    pub offsets_retention_minutes: i32,
    /// The consumer-protocol (KIP-848) group settings (`group.consumer.*`).
    pub consumer_groups: ConsumerGroupSettings,
    pub group_min_session_timeout_ms: i32,
    pub group_max_session_timeout_ms: i32,
    pub group_initial_rebalance_delay_ms: i32,
    /// The transaction coordinator's settings (Kafka's `transaction.*` keys).
    pub transactions: TransactionSettings,
    pub cluster_id: Option<String>,
    /// SASL per listener (`crate::security`).
    pub security: crate::security::SecurityConfig,
    /// Every key that was set explicitly, validated.
    pub props: BTreeMap<String, String>,
}

/// The transaction coordinator's settings, with Kafka's names and defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionSettings {
    /// `transaction.state.log.num.partitions`.
    pub state_log_num_partitions: i32,
    /// `transaction.state.log.replication.factor`.
    pub state_log_replication_factor: i16,
    /// `transaction.state.log.segment.bytes`.
    pub state_log_segment_bytes: i32,
    /// `transaction.max.timeout.ms`: InitProducerId with a larger timeout gets
    /// INVALID_TRANSACTION_TIMEOUT.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`.
    pub transactional_id_expiration_ms: i32,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`.
    pub abort_timed_out_interval_ms: i32,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`.
    pub remove_expired_interval_ms: i32,
}

/// How a non-empty group may convert between the classic and the consumer protocol
/// (`group.consumer.migration.policy`); empty groups always convert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationPolicy {
    Disabled,
    Upgrade,
    Downgrade,
    Bidirectional,
}

impl MigrationPolicy {
    pub fn upgrade_enabled(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Upgrade | MigrationPolicy::Bidirectional
        )
    }

    pub fn downgrade_enabled(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Downgrade | MigrationPolicy::Bidirectional
        )
    }
}

/// The settings of consumer-protocol (KIP-848) groups, with Kafka's names and defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerGroupSettings {
    /// `group.consumer.session.timeout.ms`.
    pub session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`.
    pub heartbeat_interval_ms: i32,
    /// `group.consumer.max.size`.
    pub max_size: i32,
    /// `group.consumer.assignors`, lower-case short names (`uniform`, `range`); the first is
    /// the default.
    pub assignors: Vec<String>,
    /// `group.consumer.migration.policy`.
    pub migration_policy: MigrationPolicy,
}

impl Default for ConsumerGroupSettings {
    fn default() -> Self {
        ConsumerGroupSettings {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            max_size: i32::MAX,
            assignors: vec!["uniform".to_string(), "range".to_string()],
            migration_policy: MigrationPolicy::Bidirectional,
        }
    }
}

impl ConsumerGroupSettings {
    /// Reads the `group.consumer.*` keys. The session timeout and heartbeat interval (and
    /// their bounds) are group config synonyms, checked by `group_config::validate_broker`;
    /// the assignors and migration policy are checked here.
    fn from_props(get: &dyn Fn(&str) -> String) -> Result<Self, ConfigError> {
        let get = |name: &str| -> String {
            let v = get(name);
            if v.is_empty() {
                crate::group_config::group_broker_default(name)
                    .unwrap_or_default()
                    .to_string()
            } else {
                v
            }
        };
        let int = |name: &str, min: i32| -> Result<i32, ConfigError> {
            let v = get(name);
            at_least(name, &v, parse_i32(name, &v)?, min)
        };
        let session_timeout_ms = int("group.consumer.session.timeout.ms", 1)?;
        let heartbeat_interval_ms = int("group.consumer.heartbeat.interval.ms", 1)?;
        let raw = get("group.consumer.assignors");
        let mut assignors = Vec::new();
        for name in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            // Kafka also takes the assignors' class names.
            let short = match name {
                "org.apache.kafka.coordinator.group.assignor.UniformAssignor" => "uniform",
                "org.apache.kafka.coordinator.group.assignor.RangeAssignor" => "range",
                other => other,
            };
            if short != "uniform" && short != "range" {
                return Err(ConfigError::new(
                    "group.consumer.assignors",
                    &raw,
                    format!("unknown assignor {name} (known: uniform, range)"),
                ));
            }
            if !assignors.iter().any(|a| a == short) {
                assignors.push(short.to_string());
            }
        }
        if assignors.is_empty() {
            return Err(ConfigError::new(
                "group.consumer.assignors",
                &raw,
                "needs at least one assignor",
            ));
        }
        let policy = get("group.consumer.migration.policy");
        let migration_policy = match policy.trim().to_ascii_lowercase().as_str() {
            "disabled" => MigrationPolicy::Disabled,
            "upgrade" => MigrationPolicy::Upgrade,
            "downgrade" => MigrationPolicy::Downgrade,
            "bidirectional" => MigrationPolicy::Bidirectional,
            _ => {
                return Err(ConfigError::new(
                    "group.consumer.migration.policy",
                    &policy,
                    "expected disabled, upgrade, downgrade or bidirectional",
                ))
            }
        };
        Ok(ConsumerGroupSettings {
            session_timeout_ms,
            heartbeat_interval_ms,
            max_size: int("group.consumer.max.size", 1)?,
            assignors,
            migration_policy,
        })
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig::from_props(BTreeMap::new()).expect("defaults are valid")
    }
}

impl BrokerConfig {
    /// Builds the broker config from explicitly set keys (Kafka names). Unknown keys and bad
    /// values are errors naming the key.
    pub fn from_props(props: BTreeMap<String, String>) -> Result<BrokerConfig, ConfigError> {
        for (k, v) in &props {
            if broker_config_def(k).is_none()
                && crate::group_config::group_broker_default(k).is_none()
                && !crate::security::is_listener_key(k)
                && listener_max_connections_key(k).is_none()
            {
                return Err(ConfigError::new(k, v, "unknown broker config"));
            }
        }
        for key in CONNECTION_LIMIT_CONFIGS {
            if let Some(v) = props.get(*key) {
                validate_connection_limit(key, v)?;
            }
        }
        for (k, v) in &props {
            if listener_max_connections_key(k).is_some() {
                validate_connection_limit(k, v)?;
            }
        }
        // The hours and minutes variants of the topic time defaults, with Kafka's types and
        // ranges (they only feed `derived_broker_value`).
        for (key, min) in [
            ("log.retention.minutes", i32::MIN),
            ("log.retention.hours", i32::MIN),
            ("log.roll.hours", 1),
            ("log.roll.jitter.hours", 0),
        ] {
            if let Some(v) = props.get(key) {
                at_least(key, v, parse_i32(key, v)?, min)?;
            }
        }
        let get = |name: &str| -> String {
            props
                .get(name)
                .cloned()
                .or_else(|| broker_config_def(name).map(|d| d.default.to_string()))
                .unwrap_or_default()
        };
        let int = |name: &str, min: i32| -> Result<i32, ConfigError> {
            let v = get(name);
            at_least(name, &v, parse_i32(name, &v)?, min)
        };
        let long = |name: &str, min: i64| -> Result<i64, ConfigError> {
            let v = get(name);
            at_least(name, &v, parse_i64(name, &v)?, min)
        };
        let boolean = |name: &str| -> Result<bool, ConfigError> { parse_bool(name, &get(name)) };
        let cluster = ClusterShape::parse(&get, &props)?;
        let security = crate::security::parse(
            &props,
            &cluster.listeners,
            &cluster.inter_broker,
            cluster.controller.as_ref(),
        )?;
        let rf = int("default.replication.factor", 1)?;
        let cluster_id = Some(get("cluster.id")).filter(|s| !s.is_empty());
        let offsets_rf = int("offsets.topic.replication.factor", 1)?;
        let config = BrokerConfig {
            node_id: int("node.id", 0)?,
            listen: cluster.listen,
            advertise: cluster.advertise,
            listeners: cluster.listeners,
            advertised_listeners: cluster.advertised,
            roles: cluster.roles,
            voters: cluster.voters,
            controller_listener_names: cluster.controller_names,
            inter_broker_listener_name: cluster.inter_broker,
            broker_rack: Some(get("broker.rack")).filter(|s| !s.trim().is_empty()),
            broker_session_timeout_ms: long("broker.session.timeout.ms", 1)?,
            auto_leader_rebalance_enable: boolean("auto.leader.rebalance.enable")?,
            leader_imbalance_check_interval_seconds: long(
                "leader.imbalance.check.interval.seconds",
                1,
            )?,
            broker_heartbeat_interval_ms: long("broker.heartbeat.interval.ms", 1)?,
            replica_lag_time_max_ms: long("replica.lag.time.max.ms", 1)?,
            replica_fetch_wait_max_ms: long("replica.fetch.wait.max.ms", 0)?,
            replica_fetch_backoff_ms: long("replica.fetch.backoff.ms", 0)?,
            replica_high_watermark_checkpoint_interval_ms: long(
                "replica.high.watermark.checkpoint.interval.ms",
                1,
            )?,
            election_timeout_ms: long("controller.quorum.election.timeout.ms", 10)?,
            metadata_snapshot_bytes: long("metadata.log.max.record.bytes.between.snapshots", 1)?,
            offsets_topic_replication_factor: i16::try_from(offsets_rf).map_err(|_| {
                ConfigError::new(
                    "offsets.topic.replication.factor",
                    &offsets_rf.to_string(),
                    "too large",
                )
            })?,
            offsets_topic_replication_factor_set: props
                .contains_key("offsets.topic.replication.factor"),
            data_dir: get("log.dirs"),
            num_partitions: int("num.partitions", 1)?,
            default_replication_factor: i16::try_from(rf).map_err(|_| {
                ConfigError::new("default.replication.factor", &rf.to_string(), "too large")
            })?,
            auto_create_topics_enable: boolean("auto.create.topics.enable")?,
            delete_topic_enable: boolean("delete.topic.enable")?,
            socket_request_max_bytes: int("socket.request.max.bytes", 1024)?,
            max_connections: int("max.connections", 1)?,
            quota_window_num: int("quota.window.num", 1)?,
            quota_window_size_seconds: int("quota.window.size.seconds", 1)?,
            replication_quota_window_num: int("replication.quota.window.num", 1)?,
            replication_quota_window_size_seconds: int("replication.quota.window.size.seconds", 1)?,
            controller_quota_window_num: int("controller.quota.window.num", 1)?,
            controller_quota_window_size_seconds: int("controller.quota.window.size.seconds", 1)?,
            fetch_max_bytes: int("fetch.max.bytes", 1024)? as usize,
            connections_max_idle_ms: long("connections.max.idle.ms", 1)?,
            queued_max_requests: int("queued.max.requests", 1)?,
            queued_max_request_bytes: long("queued.max.request.bytes", -1)?,
            queued_max_response_bytes: long("queued.max.response.bytes", 0)?,
            log_retention_check_interval_ms: long("log.retention.check.interval.ms", 1)?,
            log_cleaner_backoff_ms: long(CLEANER_BACKOFF_MS, 0)?,
            log_flush_scheduler_interval_ms: long("log.flush.scheduler.interval.ms", 1)?,
            log_io_threads: int("log.io.threads", 1)?,
            log_offline_retry_interval_ms: long("log.offline.retry.interval.ms", 1)?,
            log_flush_offset_checkpoint_interval_ms: long(
                "log.flush.offset.checkpoint.interval.ms",
                1,
            )?,
            offsets_topic_num_partitions: int("offsets.topic.num.partitions", 1)?,
            max_broker_partitions: int("max.broker.partitions", 1)?,
            offsets_retention_minutes: int("offsets.retention.minutes", 1)?,
            consumer_groups: ConsumerGroupSettings::from_props(&get)?,
            group_min_session_timeout_ms: int("group.min.session.timeout.ms", 0)?,
            group_max_session_timeout_ms: int("group.max.session.timeout.ms", 0)?,
            group_initial_rebalance_delay_ms: int("group.initial.rebalance.delay.ms", 0)?,
            transactions: TransactionSettings {
                state_log_num_partitions: int("transaction.state.log.num.partitions", 1)?,
                state_log_replication_factor: i16::try_from(int(
                    "transaction.state.log.replication.factor",
                    1,
                )?)
                .map_err(|_| {
                    ConfigError::new(
                        "transaction.state.log.replication.factor",
                        &get("transaction.state.log.replication.factor"),
                        "too large",
                    )
                })?,
                state_log_segment_bytes: int("transaction.state.log.segment.bytes", 1)?,
                max_timeout_ms: int("transaction.max.timeout.ms", 1)?,
                transactional_id_expiration_ms: int("transactional.id.expiration.ms", 1)?,
                abort_timed_out_interval_ms: int(
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                    1,
                )?,
                remove_expired_interval_ms: int(
                    "transaction.remove.expired.transaction.cleanup.interval.ms",
                    1,
                )?,
            },
            cluster_id,
            security,
            props,
        };
        // Topic and group defaults set at broker level must be valid values too.
        TopicConfig::resolve(&config.props, &BTreeMap::new())?;
        crate::group_config::validate_broker(&config.props)?;
        config.check_quorum()?;
        Ok(config)
    }

    /// The effective topic config for a topic with these overrides.
    pub fn topic_config(
        &self,
        overrides: &BTreeMap<String, String>,
    ) -> Result<TopicConfig, ConfigError> {
        TopicConfig::resolve(&self.props, overrides)
    }
}

/// The listener, role and quorum keys, parsed and checked against each other.
struct ClusterShape {
    listen: String,
    advertise: Option<String>,
    listeners: Vec<Listener>,
    advertised: Vec<Listener>,
    roles: Roles,
    voters: Vec<Voter>,
    controller_names: Vec<String>,
    inter_broker: String,
    /// The controller listener this node dials (the first of `controller.listener.names`),
    /// with its protocol from the map; also on broker-only nodes, which do not bind it.
    controller: Option<Listener>,
}

impl ClusterShape {
    fn parse(
        get: &dyn Fn(&str) -> String,
        props: &BTreeMap<String, String>,
    ) -> Result<ClusterShape, ConfigError> {
        let protocols = cluster::parse_protocol_map(&get("listener.security.protocol.map"))?;
        let listeners = cluster::parse_listeners("listeners", &get("listeners"), &protocols)?;
        let advertised = cluster::parse_listeners(
            "advertised.listeners",
            &get("advertised.listeners"),
            &protocols,
        )?;
        let roles = cluster::parse_roles(&get("process.roles"))?;
        let voters = cluster::parse_voters(&get("controller.quorum.voters"))?;
        let controller_names: Vec<String> = get("controller.listener.names")
            .split(',')
            .map(|s| s.trim().to_ascii_uppercase())
            .filter(|s| !s.is_empty())
            .collect();
        for a in &advertised {
            if !listeners.iter().any(|l| l.name == a.name) {
                return Err(ConfigError::new(
                    "advertised.listeners",
                    &a.name,
                    "names a listener that is not in listeners",
                ));
            }
            if controller_names.contains(&a.name) {
                return Err(ConfigError::new(
                    "advertised.listeners",
                    &a.name,
                    "must not include a controller listener",
                ));
            }
        }
        let broker_listeners: Vec<&Listener> = listeners
            .iter()
            .filter(|l| !controller_names.contains(&l.name))
            .collect();
        if roles.broker && broker_listeners.is_empty() {
            return Err(ConfigError::new(
                "listeners",
                &get("listeners"),
                "a broker needs a listener that is not a controller listener",
            ));
        }
        if !roles.broker && !broker_listeners.is_empty() && props.contains_key("listeners") {
            return Err(ConfigError::new(
                "listeners",
                &get("listeners"),
                "a controller-only node serves only controller listeners",
            ));
        }
        let by_protocol = get("security.inter.broker.protocol")
            .trim()
            .to_ascii_uppercase();
        if !by_protocol.is_empty() {
            if props.contains_key("inter.broker.listener.name") {
                return Err(ConfigError::new(
                    "security.inter.broker.protocol",
                    &by_protocol,
                    "only one of inter.broker.listener.name and security.inter.broker.protocol may be set",
                ));
            }
            if SecurityProtocol::parse(&by_protocol).is_none() {
                return Err(ConfigError::new(
                    "security.inter.broker.protocol",
                    &by_protocol,
                    "expected PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
                ));
            }
        }
        let inter_broker_name = if by_protocol.is_empty() {
            get("inter.broker.listener.name")
        } else {
            by_protocol
        };
        let inter_broker = match inter_broker_name.trim() {
            "" => broker_listeners
                .first()
                .map(|l| l.name.clone())
                .unwrap_or_default(),
            name => {
                let name = name.to_ascii_uppercase();
                if roles.broker && !broker_listeners.iter().any(|l| l.name == name) {
                    return Err(ConfigError::new(
                        "inter.broker.listener.name",
                        &name,
                        "is not one of the broker listeners",
                    ));
                }
                name
            }
        };
        let controller = controller_names.first().map(|name| {
            listeners
                .iter()
                .find(|l| &l.name == name)
                .cloned()
                .unwrap_or_else(|| Listener {
                    name: name.clone(),
                    host: String::new(),
                    port: 0,
                    security_protocol: protocols
                        .get(name)
                        .copied()
                        .unwrap_or(SecurityProtocol::Plaintext),
                })
        });
        let client = broker_listeners.first();
        let listen = client.map(|l| l.address()).unwrap_or_default();
        let advertise = client
            .and_then(|c| advertised.iter().find(|a| a.name == c.name))
            .map(Listener::address);
        Ok(ClusterShape {
            listen,
            advertise,
            listeners,
            advertised,
            roles,
            voters,
            controller_names,
            inter_broker,
            controller,
        })
    }
}

impl BrokerConfig {
    /// The controller listeners this node binds.
    pub fn controller_listeners(&self) -> impl Iterator<Item = &Listener> {
        self.listeners
            .iter()
            .filter(|l| self.controller_listener_names.contains(&l.name))
    }

    /// The broker (client-facing) listeners this node binds.
    pub fn broker_listeners(&self) -> impl Iterator<Item = &Listener> {
        self.listeners
            .iter()
            .filter(|l| !self.controller_listener_names.contains(&l.name))
    }

    /// Whether this node is the only controller voter (no `controller.quorum.voters`, or
    /// only itself).
    pub fn is_standalone(&self) -> bool {
        self.voters.is_empty() || (self.voters.len() == 1 && self.voters[0].id == self.node_id)
    }

    /// The replication factor of an internal topic: an explicit setting is Kafka's (creation
    /// waits until that many brokers are up); the default (3) is capped at the number of
    /// controller voters, so a one-node cluster works with zero configuration.
    pub fn internal_topic_replication_factor(&self, configured: i16, explicit: bool) -> i16 {
        if explicit {
            configured
        } else {
            configured.min(self.voters.len().max(1) as i16)
        }
    }

    /// Checks the roles, listeners and voters against each other.
    fn check_quorum(&self) -> Result<(), ConfigError> {
        let voters = self
            .voters
            .iter()
            .map(|v| format!("{}@{}", v.id, v.address()))
            .collect::<Vec<_>>()
            .join(",");
        let me = self.voters.iter().find(|v| v.id == self.node_id);
        if self.roles.controller && !self.voters.is_empty() && me.is_none() {
            return Err(ConfigError::new(
                "controller.quorum.voters",
                &voters,
                format!(
                    "node.id {} runs a controller but is not one of the voters",
                    self.node_id
                ),
            ));
        }
        if !self.roles.controller && me.is_some() {
            return Err(ConfigError::new(
                "controller.quorum.voters",
                &voters,
                format!(
                    "node.id {} is a voter but process.roles has no controller",
                    self.node_id
                ),
            ));
        }
        if !self.roles.controller && self.voters.is_empty() {
            return Err(ConfigError::new(
                "controller.quorum.voters",
                "",
                "a node without the controller role needs the controller voters",
            ));
        }
        if self.roles.controller && !self.voters.is_empty() {
            // The voter's own address may differ from what its listener binds (a proxy,
            // port forwarding, a container's published port): Kafka does not compare them.
            if self.controller_listeners().next().is_none() {
                return Err(ConfigError::new(
                    "listeners",
                    &self.listeners.iter().map(|l| format!("{}://{}", l.name, l.address())).collect::<Vec<_>>().join(","),
                    format!(
                        "a controller voter needs a listener named in controller.listener.names ({})",
                        self.controller_listener_names.join(",")
                    ),
                ));
            }
        }
        Ok(())
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
    fn throttled_replica_lists_parse_as_kafka_validates_them() {
        use ThrottledReplicas as T;
        assert_eq!(T::parse(""), Some(T::None));
        assert_eq!(T::parse(" * "), Some(T::All));
        assert_eq!(T::parse("0:1, 1:2,"), Some(T::Some(vec![(0, 1), (1, 2)])));
        for bad in ["0", "0:", ":1", "a:1", "0:1,*", "0-1", "-1:2", "0:1:2"] {
            assert_eq!(T::parse(bad), None, "{bad}");
        }
        let t = TopicConfig::resolve(
            &BTreeMap::new(),
            &map(&[
                ("leader.replication.throttled.replicas", "0:1,0:2"),
                ("follower.replication.throttled.replicas", "*"),
            ]),
        )
        .unwrap();
        assert!(t.leader_replication_throttled_replicas.contains(0, 2));
        assert!(!t.leader_replication_throttled_replicas.contains(1, 2));
        assert!(t.follower_replication_throttled_replicas.contains(7, 3));
        assert!(TopicConfig::validate("leader.replication.throttled.replicas", "1:x").is_err());
        // The rates are dynamic broker configs, non-negative longs.
        assert!(is_dynamic_broker_config(
            "leader.replication.throttled.rate"
        ));
        assert!(
            validate_dynamic_broker_config("follower.replication.throttled.rate", "1000").is_ok()
        );
        assert!(
            validate_dynamic_broker_config("follower.replication.throttled.rate", "-1").is_err()
        );
        assert!(validate_dynamic_broker_config("leader.replication.throttled.rate", "x").is_err());
    }

    #[test]
    fn defaults_are_kafkas() {
        let t = TopicConfig::default();
        assert_eq!(t.segment_bytes, 1 << 30);
        assert_eq!(t.retention_ms, 7 * 24 * 3600 * 1000);
        assert_eq!(t.index_interval_bytes, 4096);
        assert_eq!(t.max_message_bytes, 1048588);
        assert!(t.cleanup_policy.delete && !t.cleanup_policy.compact);
        let b = BrokerConfig::default();
        assert_eq!(b.listen, "127.0.0.1:9092");
        assert_eq!(b.socket_request_max_bytes, 100 * 1024 * 1024);
        assert_eq!(b.fetch_max_bytes, 55 * 1024 * 1024);
        // Kafka's default: no broker-wide connection limit unless configured.
        assert_eq!(b.max_connections, i32::MAX);
    }

    #[test]
    fn a_listeners_own_connection_limit_is_a_known_dynamic_key() {
        let key = "listener.name.plaintext.max.connections";
        assert_eq!(listener_max_connections_key(key), Some("plaintext"));
        assert_eq!(listener_max_connections_key("max.connections"), None);
        assert_eq!(
            listener_max_connections_key("listener.name.max.connections"),
            None
        );
        assert_eq!(
            listener_max_connections_key("listener.name.a.b.max.connections"),
            None
        );
        assert!(is_dynamic_broker_config(key) && !is_per_broker_config(key));
        assert!(validate_dynamic_broker_config(key, "10").is_ok());
        assert!(validate_dynamic_broker_config(key, "-1").is_err());
        assert!(validate_dynamic_broker_config(key, "x").is_err());
        // Static: checked as max.connections, and the listener must exist.
        assert!(BrokerConfig::from_props(map(&[(key, "10")])).is_ok());
        let e = BrokerConfig::from_props(map(&[(key, "-1")])).unwrap_err();
        assert!(e.to_string().contains(key), "{e}");
        let nope = "listener.name.nope.max.connections";
        let e = BrokerConfig::from_props(map(&[(nope, "1")])).unwrap_err();
        assert!(e.to_string().contains(nope), "{e}");
        // Changed at runtime, a listener's own limit must be positive, as Kafka's
        // ListenerConnectionQuota.validateReconfiguration.
        let e = validate_dynamic_broker_config(key, "0").unwrap_err();
        assert!(e.to_string().contains("Invalid max.connections 0"), "{e}");
    }

    #[test]
    fn a_listeners_own_connection_creation_rate_is_a_known_dynamic_key() {
        let key = "listener.name.external.max.connection.creation.rate";
        assert_eq!(
            listener_connection_limit_key(key),
            Some(("external", "max.connection.creation.rate"))
        );
        assert_eq!(listener_max_connections_key(key), Some("external"));
        assert_eq!(
            listener_connection_limit_key("listener.name.max.connection.creation.rate"),
            None
        );
        assert_eq!(
            listener_connection_limit_key("listener.name.x.y.max.connection.creation.rate"),
            None
        );
        assert!(is_dynamic_broker_config(key) && !is_per_broker_config(key));
        assert!(validate_dynamic_broker_config(key, "10").is_ok());
        for bad in ["0", "-1", "fast", "1.5"] {
            assert!(validate_dynamic_broker_config(key, bad).is_err(), "{bad}");
        }
        let e = validate_dynamic_broker_config(key, "0").unwrap_err();
        assert!(
            e.to_string()
                .contains("Invalid max.connection.creation.rate 0"),
            "{e}"
        );
        // Static: an int >= 0, on a listener that exists.
        let listeners = [
            ("listeners", "EXTERNAL://127.0.0.1:0,INTERNAL://127.0.0.1:0"),
            (
                "listener.security.protocol.map",
                "EXTERNAL:PLAINTEXT,INTERNAL:PLAINTEXT",
            ),
            ("inter.broker.listener.name", "INTERNAL"),
        ];
        let with = |v: &str| {
            let mut m = map(&listeners);
            m.insert(key.to_string(), v.to_string());
            BrokerConfig::from_props(m)
        };
        assert!(with("5").is_ok());
        let e = with("-1").unwrap_err();
        assert!(e.to_string().contains(key), "{e}");
        let nope = "listener.name.nope.max.connection.creation.rate";
        let mut m = map(&listeners);
        m.insert(nope.to_string(), "1".to_string());
        let e = BrokerConfig::from_props(m).unwrap_err();
        assert!(e.to_string().contains(nope), "{e}");
    }

    #[test]
    fn a_broker_wide_zero_set_at_runtime_is_refused_while_a_listener_takes_it() {
        let before = map(&[("listener.name.internal.max.connection.creation.rate", "5")]);
        let with = |k: &str, v: &str| {
            let mut m = before.clone();
            m.insert(k.to_string(), v.to_string());
            m
        };
        let both = ["EXTERNAL", "INTERNAL"];
        // EXTERNAL has no rate of its own: a broker-wide 0 would be its rate.
        let e = check_listener_limits_change(
            &both,
            &before,
            &with("max.connection.creation.rate", "0"),
        )
        .unwrap_err();
        assert_eq!(
            e,
            "Invalid value org.apache.kafka.common.config.ConfigException: Invalid max.connection.creation.rate 0 for configuration Invalid dynamic configuration"
        );
        let e = check_listener_limits_change(&both, &before, &with("max.connections", "0"))
            .unwrap_err();
        assert!(e.contains("Invalid max.connections 0"), "{e}");
        // Every listener with a rate of its own: the broker-wide 0 changes none of them.
        assert!(check_listener_limits_change(
            &["INTERNAL"],
            &before,
            &with("max.connection.creation.rate", "0")
        )
        .is_ok());
        assert!(check_listener_limits_change(
            &both,
            &before,
            &with("max.connection.creation.rate", "10")
        )
        .is_ok());
        // An unchanged static 0 is not judged again.
        let zero = with("max.connection.creation.rate", "0");
        assert!(check_listener_limits_change(&both, &zero, &with("max.connections", "7")).is_ok());
        // A listener's own value named in another case is still its own.
        let e = check_listener_limits_change(
            &both,
            &before,
            &with("listener.name.INTERNAL.max.connection.creation.rate", "0"),
        );
        assert!(e.is_err());
    }

    #[test]
    fn consumer_group_settings_are_kafkas_and_checked() {
        let c = BrokerConfig::default().consumer_groups;
        assert_eq!(c, ConsumerGroupSettings::default());
        let ok = BrokerConfig::from_props(map(&[
            ("group.consumer.min.session.timeout.ms", "1000"),
            ("group.consumer.session.timeout.ms", "2000"),
            ("group.consumer.min.heartbeat.interval.ms", "50"),
            ("group.consumer.heartbeat.interval.ms", "100"),
            (
                "group.consumer.assignors",
                "range, org.apache.kafka.coordinator.group.assignor.UniformAssignor",
            ),
            ("group.consumer.migration.policy", "Upgrade"),
        ]))
        .unwrap()
        .consumer_groups;
        assert_eq!(
            (ok.session_timeout_ms, ok.heartbeat_interval_ms),
            (2000, 100)
        );
        assert_eq!(ok.assignors, vec!["range", "uniform"]);
        assert_eq!(ok.migration_policy, MigrationPolicy::Upgrade);
        for bad in [
            &[("group.consumer.session.timeout.ms", "1000")][..],
            &[("group.consumer.heartbeat.interval.ms", "20000")][..],
            &[("group.consumer.assignors", "sticky")][..],
            &[("group.consumer.assignors", "")][..],
            &[("group.consumer.migration.policy", "sometimes")][..],
            &[
                ("group.consumer.min.session.timeout.ms", "100"),
                ("group.consumer.session.timeout.ms", "100"),
                ("group.consumer.min.heartbeat.interval.ms", "100"),
                ("group.consumer.heartbeat.interval.ms", "100"),
            ][..],
        ] {
            assert!(BrokerConfig::from_props(map(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn topic_overrides_beat_broker_synonyms() {
        let broker = map(&[
            ("log.segment.bytes", "1048576"),
            ("log.retention.ms", "1000"),
        ]);
        let topic = map(&[("retention.ms", "5")]);
        let t = TopicConfig::resolve(&broker, &topic).unwrap();
        assert_eq!(t.segment_bytes, 1048576);
        assert_eq!(t.retention_ms, 5);
        assert_eq!(
            TopicConfig::lookup("segment.bytes", &broker, &topic),
            Some(("1048576".into(), ConfigSource::StaticBroker))
        );
    }

    #[test]
    fn hours_and_minutes_keys_set_topic_time_defaults_as_kafka() {
        // log.retention.ms beats log.retention.minutes beats log.retention.hours.
        let broker = map(&[
            ("log.retention.hours", "24"),
            ("log.retention.minutes", "90"),
            ("log.roll.hours", "2"),
            ("log.roll.jitter.hours", "1"),
        ]);
        BrokerConfig::from_props(broker.clone()).unwrap();
        let t = TopicConfig::resolve(&broker, &BTreeMap::new()).unwrap();
        assert_eq!(t.retention_ms, 90 * 60_000);
        assert_eq!(t.segment_ms, 2 * 3_600_000);
        assert_eq!(t.segment_jitter_ms, 3_600_000);
        // Kafka reports a value derived from another unit as DEFAULT_CONFIG.
        assert_eq!(
            TopicConfig::lookup("retention.ms", &broker, &BTreeMap::new()),
            Some(("5400000".into(), ConfigSource::Default))
        );
        let only_hours = map(&[("log.retention.hours", "-1")]);
        let t = TopicConfig::resolve(&only_hours, &BTreeMap::new()).unwrap();
        assert_eq!(t.retention_ms, -1);
        let mut with_ms = broker.clone();
        with_ms.insert("log.retention.ms".into(), "1000".into());
        let t = TopicConfig::resolve(&with_ms, &BTreeMap::new()).unwrap();
        assert_eq!(t.retention_ms, 1000);
        assert_eq!(
            broker_synonym_group("log.retention.hours"),
            [
                "log.retention.ms",
                "log.retention.minutes",
                "log.retention.hours"
            ]
        );
        assert_eq!(
            broker_synonym_group("log.segment.bytes"),
            ["log.segment.bytes"]
        );
        // Kafka's types and ranges.
        for (k, v) in [
            ("log.roll.hours", "0"),
            ("log.roll.jitter.hours", "-1"),
            ("log.retention.hours", "x"),
        ] {
            let e = BrokerConfig::from_props(map(&[(k, v)])).unwrap_err();
            assert_eq!(e.key, k);
        }
    }

    #[test]
    fn bad_values_name_the_key() {
        let e = TopicConfig::validate("cleanup.policy", "shred").unwrap_err();
        assert_eq!(e.key, "cleanup.policy");
        let e = BrokerConfig::from_props(map(&[("num.partitions", "x")])).unwrap_err();
        assert_eq!(e.key, "num.partitions");
        let e = BrokerConfig::from_props(map(&[("no.such.key", "1")])).unwrap_err();
        assert_eq!(e.key, "no.such.key");
        let e = BrokerConfig::from_props(map(&[("log.segment.bytes", "-3")])).unwrap_err();
        assert_eq!(e.key, "segment.bytes");
        assert!(TopicConfig::validate("cleanup.policy", "compact,delete").is_ok());
    }

    #[test]
    fn cluster_keys_contradicting_each_other_name_the_key() {
        let err = |kv: &[(&str, &str)]| BrokerConfig::from_props(map(kv)).unwrap_err();
        // Kafka's default store type is JKS, which Moldau does not read.
        let e = err(&[("listeners", "SSL://127.0.0.1:9093")]);
        assert_eq!(e.key, "ssl.keystore.type", "{e}");
        let e = err(&[
            ("listeners", "SASL_SSL://127.0.0.1:9093"),
            ("ssl.keystore.type", "PEM"),
            ("ssl.truststore.type", "PEM"),
        ]);
        assert_eq!(e.key, "ssl.keystore.location", "{e}");
        // SASL_PLAINTEXT is served, but never with Kafka's default mechanism (GSSAPI).
        let e = err(&[("listeners", "SASL_PLAINTEXT://127.0.0.1:9093")]);
        assert_eq!(e.key, "sasl.enabled.mechanisms", "{e}");
        // A SASL controller listener: nodes dial it with sasl.mechanism.controller.protocol.
        let b = BrokerConfig::from_props(map(&[
            ("listeners", "PLAINTEXT://h:1,CONTROLLER://h:2"),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
            ),
            ("sasl.enabled.mechanisms", "PLAIN"),
        ]))
        .unwrap();
        let c = b.security.controller.unwrap();
        assert_eq!(c.protocol, SecurityProtocol::SaslPlaintext);
        assert_eq!(c.sasl.unwrap().mechanism, "PLAIN");
        // A broker-only node dials the controller listener it does not bind.
        let b = BrokerConfig::from_props(map(&[
            ("process.roles", "broker"),
            ("listeners", "PLAINTEXT://h:1"),
            ("node.id", "2"),
            ("controller.quorum.voters", "1@h:2"),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
            ),
            ("listener.name.controller.sasl.enabled.mechanisms", "SCRAM-SHA-256"),
            (
                "listener.name.controller.scram-sha-256.sasl.jaas.config",
                r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="b" password="p";"#,
            ),
        ]))
        .unwrap();
        let sasl = b.security.controller.unwrap().sasl.unwrap();
        assert_eq!(sasl.username.as_deref(), Some("b"));
        let ok = BrokerConfig::from_props(map(&[
            ("listeners", "SASL_PLAINTEXT://127.0.0.1:9093"),
            ("sasl.enabled.mechanisms", "SCRAM-SHA-512"),
        ]))
        .unwrap();
        assert_eq!(
            ok.security
                .sasl_listener("SASL_PLAINTEXT")
                .unwrap()
                .mechanisms,
            ["SCRAM-SHA-512"]
        );
        let e = err(&[("controller.quorum.voters", "2@h:1,3@h:2")]);
        assert_eq!(e.key, "controller.quorum.voters");
        let e = err(&[("process.roles", "broker")]);
        assert_eq!(e.key, "controller.quorum.voters");
        let e = err(&[("controller.quorum.voters", "1@h:9093")]);
        assert_eq!(e.key, "listeners", "{e}");
        // A voter may be reached at another port than its listener binds (a proxy, port
        // forwarding), as in Kafka.
        assert!(BrokerConfig::from_props(map(&[
            ("controller.quorum.voters", "1@h:9093"),
            ("listeners", "PLAINTEXT://h:9092,CONTROLLER://h:9094"),
        ]))
        .is_ok());
        let e = err(&[("inter.broker.listener.name", "NOPE")]);
        assert_eq!(e.key, "inter.broker.listener.name");
        let ok = BrokerConfig::from_props(map(&[
            ("node.id", "2"),
            ("controller.quorum.voters", "1@h:9093,2@h:9095"),
            ("listeners", "PLAINTEXT://h:9092,CONTROLLER://h:9095"),
            ("advertised.listeners", "PLAINTEXT://public:19092"),
        ]))
        .unwrap();
        assert_eq!(ok.listen, "h:9092");
        assert_eq!(ok.advertise.as_deref(), Some("public:19092"));
        assert_eq!(ok.controller_listeners().next().unwrap().port, 9095);
        assert!(!ok.is_standalone());
        assert_eq!(ok.internal_topic_replication_factor(3, false), 2);
        assert!(BrokerConfig::default().is_standalone());
        assert_eq!(
            BrokerConfig::default().internal_topic_replication_factor(3, false),
            1
        );
    }

    #[test]
    fn listeners_accept_kafka_syntax() {
        let b =
            BrokerConfig::from_props(map(&[("listeners", "PLAINTEXT://0.0.0.0:9093")])).unwrap();
        assert_eq!(b.listen, "0.0.0.0:9093");
    }

    #[test]
    fn inter_broker_security_follows_kafkas_keys() {
        let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="pw" user_broker="pw";"#;
        let base = [
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            ),
            ("sasl.enabled.mechanisms", "SCRAM-SHA-256,PLAIN"),
            ("listener.name.sasl_plaintext.plain.sasl.jaas.config", jaas),
        ];
        let with = |extra: &[(&str, &str)]| {
            let mut kv = base.to_vec();
            kv.extend_from_slice(extra);
            BrokerConfig::from_props(map(&kv))
        };
        // By protocol: the listener named like it.
        let b = with(&[
            ("security.inter.broker.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism.inter.broker.protocol", "PLAIN"),
        ])
        .unwrap();
        assert_eq!(b.inter_broker_listener_name, "SASL_PLAINTEXT");
        let peer = b.security.inter_broker.unwrap();
        let sasl = peer.sasl.unwrap();
        assert_eq!(
            (
                sasl.mechanism.as_str(),
                sasl.username.as_deref(),
                sasl.password.as_str()
            ),
            ("PLAIN", Some("broker"), "pw")
        );
        // Default mechanism: the listener's first; no JAAS for it, so no user.
        let b = with(&[("inter.broker.listener.name", "SASL_PLAINTEXT")]).unwrap();
        let sasl = b.security.inter_broker.unwrap().sasl.unwrap();
        assert_eq!(
            (sasl.mechanism.as_str(), sasl.username),
            ("SCRAM-SHA-256", None)
        );
        // The first listener (PLAINTEXT) by default: no SASL.
        assert!(with(&[])
            .unwrap()
            .security
            .inter_broker
            .unwrap()
            .sasl
            .is_none());
        for (extra, key) in [
            (
                vec![
                    ("security.inter.broker.protocol", "SASL_PLAINTEXT"),
                    ("inter.broker.listener.name", "SASL_PLAINTEXT"),
                ],
                "security.inter.broker.protocol",
            ),
            (
                vec![
                    ("inter.broker.listener.name", "SASL_PLAINTEXT"),
                    ("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512"),
                ],
                "sasl.mechanism.inter.broker.protocol",
            ),
            (
                vec![("security.inter.broker.protocol", "SSL")],
                "inter.broker.listener.name",
            ),
        ] {
            let e = with(&extra).unwrap_err();
            assert_eq!(e.key, key, "{extra:?}: {e}");
        }
    }
}
