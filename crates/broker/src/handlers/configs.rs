//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics, groups and brokers
//! (dynamic broker configs, per broker and cluster-wide), with Kafka's sources and synonyms.

use super::{code, str_bytes};
use crate::state::BrokerState;
use controller::{ConfigChange, ConfigResource, Origin, Reply, Request};
use model::config::{
    broker_config_def, is_dynamic_broker_config, BrokerLayers, ConfigDef, ConfigType,
    BROKER_CONFIGS, TOPIC_CONFIGS,
};
use model::group_config::{self, GROUP_CONFIGS};
use model::security::dynamic_tls_key;
use model::{ConfigSource, ErrorCode, TopicConfig};
use protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;
const GROUP: i8 = 32;
/// Client-metrics resources (KIP-714): Kafka knows the type, Moldau does not implement it.
const CLIENT_METRICS: i8 = 16;

struct Opts {
    synonyms: bool,
    documentation: bool,
    version: i16,
}

fn entry(
    def: &ConfigDef,
    name: &str,
    value: Option<String>,
    source: ConfigSource,
    read_only: bool,
    synonyms: Vec<DescribeConfigsSynonym>,
    opts: &Opts,
) -> DescribeConfigsResourceResult {
    let mut r = DescribeConfigsResourceResult::default()
        .with_name(str_bytes(name))
        .with_value(value.map(str_bytes))
        .with_read_only(read_only)
        .with_config_source(source as i8)
        .with_synonyms(if opts.synonyms { synonyms } else { Vec::new() });
    if opts.version >= 3 {
        // Kafka sends null documentation unless it was asked for (the schema's default is
        // an empty string).
        r = r
            .with_config_type(def.kind as i8)
            .with_documentation(opts.documentation.then(|| str_bytes(def.doc)));
    }
    r
}

fn synonym(name: &str, value: &str, source: ConfigSource) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(value)))
        .with_source(source as i8)
}

fn describe_topic(
    layers: &BrokerLayers<'_>,
    overrides: &BTreeMap<String, String>,
    keys: &Option<Vec<String>>,
    opts: &Opts,
) -> Vec<DescribeConfigsResourceResult> {
    TOPIC_CONFIGS
        .iter()
        .filter(|d| keys.as_ref().is_none_or(|k| k.iter().any(|k| k == d.name)))
        .filter_map(|def| {
            let (value, source) = TopicConfig::lookup_layered(def.name, layers, overrides)?;
            let mut synonyms = Vec::new();
            if let Some(v) = overrides.get(def.name) {
                synonyms.push(synonym(def.name, v, ConfigSource::Topic));
            }
            if let Some(s) = def.broker_synonym {
                synonyms.extend(
                    broker_synonyms(layers, s)
                        .into_iter()
                        .map(|(k, v, source)| synonym(&k, &v, source)),
                );
            }
            Some(entry(
                def,
                def.name,
                Some(value),
                source,
                false,
                synonyms,
                opts,
            ))
        })
        .collect()
}

/// The synonyms of a broker key as Kafka's `ConfigHelper.configSynonyms` lists them: every
/// key of its synonym group (`log.retention.ms`, `log.retention.minutes`,
/// `log.retention.hours`), layer by layer (dynamic per broker, dynamic cluster default,
/// static, default), starting at the first entry of the key itself (an hours key never
/// lists the `.ms` key that overrides it; a `.ms` key without a value of its own lists
/// nothing unless set).
fn broker_synonyms(layers: &BrokerLayers<'_>, name: &str) -> Vec<(String, String, ConfigSource)> {
    let group = model::config::broker_synonym_group(name);
    let mut all: Vec<(String, String, ConfigSource)> = Vec::new();
    for key in &group {
        all.extend(
            layers
                .sources(key)
                .into_iter()
                .map(|(v, source)| (key.to_string(), v.to_string(), source)),
        );
    }
    for key in &group {
        if let Some(def) = broker_config_def(key).filter(|_| model::config::has_own_default(key)) {
            all.push((
                key.to_string(),
                def.default.to_string(),
                ConfigSource::Default,
            ));
        }
    }
    // Layer by layer; within a layer the group's order (a stable sort keeps it).
    let rank = |s: ConfigSource| match s {
        ConfigSource::DynamicBroker => 0,
        ConfigSource::DynamicDefaultBroker => 1,
        ConfigSource::StaticBroker => 2,
        _ => 3,
    };
    all.sort_by_key(|(_, _, source)| rank(*source));
    let start = all
        .iter()
        .position(|(k, _, _)| k == name)
        .unwrap_or(all.len());
    all.split_off(start)
}

/// The configs of a group (listed whether or not the group exists, as Kafka does).
fn describe_group(
    state: &BrokerState,
    overrides: &BTreeMap<String, String>,
    keys: &Option<Vec<String>>,
    opts: &Opts,
) -> Vec<DescribeConfigsResourceResult> {
    let broker = &state.config.props;
    GROUP_CONFIGS
        .iter()
        .filter(|d| !d.internal)
        .filter(|d| {
            keys.as_ref()
                .is_none_or(|k| k.iter().any(|k| k == d.def.name))
        })
        .filter_map(|d| {
            let def = &d.def;
            let (value, source) = group_config::lookup(def.name, broker, overrides)?;
            let mut synonyms = Vec::new();
            if let Some(v) = overrides.get(def.name) {
                synonyms.push(synonym(def.name, v, ConfigSource::Group));
            }
            if let Some((s, v)) = def
                .broker_synonym
                .and_then(|s| broker.get(s).map(|v| (s, v)))
            {
                synonyms.push(synonym(s, v, ConfigSource::StaticBroker));
            }
            synonyms.push(synonym(
                def.broker_synonym.unwrap_or(def.name),
                def.default,
                ConfigSource::Default,
            ));
            Some(entry(
                def,
                def.name,
                Some(value),
                source,
                false,
                synonyms,
                opts,
            ))
        })
        .collect()
}

/// Every config of this broker with its effective value, source and synonyms (dynamic per
/// broker, dynamic cluster default, static, default); only dynamic keys are writable.
fn describe_broker(
    layers: &BrokerLayers<'_>,
    keys: &Option<Vec<String>>,
    opts: &Opts,
) -> Vec<DescribeConfigsResourceResult> {
    let defs = BROKER_CONFIGS.iter().map(|d| (d, d.name)).chain(
        TOPIC_CONFIGS
            .iter()
            .filter_map(|d| d.broker_synonym.map(|s| (d, s))),
    );
    let mut seen = std::collections::HashSet::new();
    defs.filter(|(_, name)| seen.insert(*name))
        .filter(|(_, name)| keys.as_ref().is_none_or(|k| k.iter().any(|k| k == name)))
        // The replication throttle rates are Kafka's dynamic-only broker quota configs (not
        // in its KafkaConfig): described only where some layer sets them.
        .filter(|(_, name)| {
            !model::config::REPLICATION_THROTTLED_RATE_CONFIGS.contains(name)
                || !layers.sources(name).is_empty()
        })
        .map(|(def, name)| {
            // Keys whose default comes from another key (log.retention.ms from
            // log.retention.hours...) have no value of their own unless set, as in Kafka; the
            // source is the first synonym's.
            let all = broker_synonyms(layers, name);
            let value = all.first().map(|(_, v, _)| v.clone());
            let source = all
                .first()
                .map_or(ConfigSource::Default, |(_, _, source)| *source);
            let synonyms = all
                .iter()
                .map(|(k, v, source)| synonym(k, v, *source))
                .collect();
            let read_only = !is_dynamic_broker_config(name);
            entry(def, name, value, source, read_only, synonyms, opts)
        })
        .chain(describe_listener_keys(layers, keys, opts))
        .collect()
}

/// `listener.name.<listener>.max.connections` (KIP-402).
static LISTENER_MAX_CONNECTIONS: ConfigDef = ConfigDef {
    name: "listener.name.<listener>.max.connections",
    broker_synonym: None,
    default: "",
    kind: ConfigType::Int,
    doc: "The maximum number of connections allowed on this listener at any time; new connections wait for a slot.",
    topic: false,
};

/// `listener.name.<listener>.max.connection.creation.rate` (KIP-612).
static LISTENER_MAX_CONNECTION_CREATION_RATE: ConfigDef = ConfigDef {
    name: "listener.name.<listener>.max.connection.creation.rate",
    broker_synonym: None,
    default: "",
    kind: ConfigType::Int,
    doc: "The maximum connection creation rate this listener accepts (connections/s); beyond it the listener's acceptor pauses.",
    topic: false,
};

/// `listener.name.<listener>.ssl.keystore.location` / `.ssl.truststore.location`.
static LISTENER_STORE: ConfigDef = ConfigDef {
    name: "listener.name.<listener>.ssl.<store>.location",
    broker_synonym: None,
    default: "",
    kind: ConfigType::String,
    doc: "The PEM store of this listener; a new path, or the same path once the file changed, is loaded without a restart.",
    topic: false,
};

/// The definition of a listener-prefixed key that can change at runtime.
fn listener_key_def(name: &str) -> Option<&'static ConfigDef> {
    if let Some((_, base)) = model::config::listener_connection_limit_key(name) {
        Some(if base == "max.connections" {
            &LISTENER_MAX_CONNECTIONS
        } else {
            &LISTENER_MAX_CONNECTION_CREATION_RATE
        })
    } else if dynamic_tls_key(name).is_some() {
        Some(&LISTENER_STORE)
    } else {
        None
    }
}

/// The listener-prefixed keys that can change at runtime, wherever they are set (this broker's
/// dynamic configs, the cluster default, the config file), as Kafka lists a broker's
/// listener overrides: writable, the highest layer's value, each layer as a synonym.
fn describe_listener_keys<'a>(
    layers: &'a BrokerLayers<'_>,
    keys: &'a Option<Vec<String>>,
    opts: &'a Opts,
) -> impl Iterator<Item = DescribeConfigsResourceResult> + 'a {
    let names: std::collections::BTreeSet<&str> = [
        layers.dynamic_broker,
        layers.dynamic_default,
        Some(layers.static_props),
    ]
    .into_iter()
    .flatten()
    .flat_map(|m| m.keys().map(String::as_str))
    .filter(|k| listener_key_def(k).is_some())
    .filter(|k| keys.as_ref().is_none_or(|ks| ks.iter().any(|x| x == k)))
    .collect();
    names.into_iter().filter_map(move |name| {
        let def = listener_key_def(name)?;
        let all = layers.sources(name);
        let (value, source) = *all.first()?;
        let synonyms = all.iter().map(|(v, s)| synonym(name, v, *s)).collect();
        Some(entry(
            def,
            name,
            Some(value.to_string()),
            source,
            false,
            synonyms,
            opts,
        ))
    })
}

/// The cluster-wide dynamic defaults (the BROKER resource named ""): only the keys set, as
/// Kafka lists them. Keys Moldau does not know are listed as Kafka lists them: sensitive,
/// without a value.
fn describe_broker_default(
    defaults: Option<&BTreeMap<String, String>>,
    keys: &Option<Vec<String>>,
    opts: &Opts,
) -> Vec<DescribeConfigsResourceResult> {
    let source = ConfigSource::DynamicDefaultBroker;
    defaults
        .into_iter()
        .flatten()
        .filter(|(name, _)| keys.as_ref().is_none_or(|k| k.iter().any(|k| k == *name)))
        .map(
            |(name, value)| match broker_config_def(name).or_else(|| listener_key_def(name)) {
                Some(def) => {
                    let synonyms = vec![synonym(name, value, source)];
                    entry(
                        def,
                        name,
                        Some(value.clone()),
                        source,
                        false,
                        synonyms,
                        opts,
                    )
                }
                None => DescribeConfigsResourceResult::default()
                    .with_name(str_bytes(name))
                    .with_value(None)
                    .with_read_only(false)
                    .with_is_sensitive(true)
                    .with_config_source(source as i8)
                    .with_synonyms(if opts.synonyms {
                        vec![DescribeConfigsSynonym::default()
                            .with_name(str_bytes(name))
                            .with_value(None)
                            .with_source(source as i8)]
                    } else {
                        Vec::new()
                    }),
            },
        )
        .collect()
}

/// Kafka's DYNAMIC_BROKER_LOGGER_CONFIG source.
const LOGGER_SOURCE: i8 = 6;

/// This broker's loggers and their levels (`loggers::describe`), as Kafka lists its log4j
/// loggers: source DYNAMIC_BROKER_LOGGER_CONFIG, writable, no synonyms.
fn describe_loggers(keys: &Option<Vec<String>>, opts: &Opts) -> Vec<DescribeConfigsResourceResult> {
    crate::loggers::describe()
        .unwrap_or_default()
        .into_iter()
        .filter(|(name, _)| keys.as_ref().is_none_or(|k| k.contains(name)))
        .map(|(name, level)| {
            let mut r = DescribeConfigsResourceResult::default()
                .with_name(str_bytes(name))
                .with_value(Some(str_bytes(level.to_string())))
                .with_read_only(false)
                .with_config_source(LOGGER_SOURCE);
            if opts.version >= 3 {
                r = r
                    .with_config_type(ConfigType::String as i8)
                    .with_documentation(None);
            }
            r
        })
        .collect()
}

/// Applies the BROKER_LOGGER resources of an IncrementalAlterConfigs request on this broker, as
/// Kafka does before forwarding the rest (they are not metadata: never persisted, lost on
/// restart). Returns the answer of each such resource by index.
pub fn alter_loggers(
    state: &BrokerState,
    req: &IncrementalAlterConfigsRequest,
) -> HashMap<usize, Result<(), (ErrorCode, String)>> {
    let mut out = HashMap::new();
    for (i, res) in req.resources.iter().enumerate() {
        if res.resource_type != BROKER_LOGGER {
            continue;
        }
        out.insert(i, alter_logger(state, res, req.validate_only));
    }
    out
}

fn alter_logger(
    state: &BrokerState,
    res: &protocol::messages::incremental_alter_configs_request::AlterConfigsResource,
    validate_only: bool,
) -> Result<(), (ErrorCode, String)> {
    let name = res.resource_name.as_str();
    if name.is_empty() {
        return Err((
            ErrorCode::InvalidRequest,
            "Broker id must not be empty".into(),
        ));
    }
    if name != state.node_id.to_string() {
        return Err((
            ErrorCode::InvalidRequest,
            format!(
                "Unexpected broker id, expected {}, but received {name}",
                state.node_id
            ),
        ));
    }
    null_list_value(&res.configs)?;
    let mut changes = Vec::new();
    for c in &res.configs {
        let op = match c.config_operation {
            SET => Some(c.value.as_ref().map(|v| v.to_string())),
            DELETE => Some(None),
            APPEND => None,
            SUBTRACT => None,
            op => {
                return Err((
                    ErrorCode::InvalidRequest,
                    format!("Unknown operation type {op}"),
                ))
            }
        };
        match op {
            Some(level) => changes.push((c.name.to_string(), level)),
            None => {
                let kind = if c.config_operation == APPEND {
                    "APPEND"
                } else {
                    "SUBTRACT"
                };
                return Err((
                    ErrorCode::InvalidRequest,
                    format!("{kind} operation is not allowed for the BROKER_LOGGER resource"),
                ));
            }
        }
    }
    crate::loggers::validate(&changes).map_err(|(invalid_config, msg)| {
        let e = if invalid_config {
            ErrorCode::InvalidConfig
        } else {
            ErrorCode::InvalidRequest
        };
        (e, msg)
    })?;
    if validate_only {
        return Ok(());
    }
    crate::loggers::apply(changes).map_err(|e| (ErrorCode::UnknownServerError, e))?;
    tracing::info!(broker = name, "log levels changed (BROKER_LOGGER)");
    Ok(())
}

pub fn describe_configs(
    state: &Arc<BrokerState>,
    req: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let opts = Opts {
        synonyms: req.include_synonyms,
        documentation: req.include_documentation,
        version,
    };
    let image = state.image();
    let layers = image.broker_layers(state.node_id, &state.config.props);
    // A resource type Kafka does not know (0 = UNKNOWN, or any other id) fails the whole
    // request in Kafka's handler: every resource is answered INVALID_REQUEST, none described.
    let unknown = |t: i8| ![TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP].contains(&t);
    if let Some(t) = req
        .resources
        .iter()
        .map(|r| r.resource_type)
        .find(|t| unknown(*t))
    {
        let results = req
            .resources
            .into_iter()
            .map(|res| {
                DescribeConfigsResult::default()
                    .with_resource_type(res.resource_type)
                    .with_resource_name(res.resource_name)
                    .with_error_code(code(ErrorCode::InvalidRequest))
                    .with_error_message(Some(str_bytes(format!("Unsupported resource type {t}"))))
            })
            .collect();
        return DescribeConfigsResponse::default().with_results(results);
    }
    let results = req
        .resources
        .into_iter()
        .map(|res| {
            // An empty key list asks for every config, as null does (Kafka).
            let keys: Option<Vec<String>> = res
                .configuration_keys
                .filter(|ks| !ks.is_empty())
                .map(|ks| ks.iter().map(|k| k.to_string()).collect());
            let name = res.resource_name.to_string();
            let base = DescribeConfigsResult::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name.clone());
            let fail = |e: ErrorCode, msg: String| {
                base.clone()
                    .with_error_code(code(e))
                    .with_error_message(Some(str_bytes(msg)))
            };
            match res.resource_type {
                TOPIC => match image.topic(&name) {
                    Some(t) => base.with_configs(describe_topic(&layers, &t.configs, &keys, &opts)),
                    None => match model::ids::validate_topic_name(&name) {
                        Err(msg) => fail(ErrorCode::InvalidTopicException, msg),
                        // Kafka answers a missing topic with an empty message ("").
                        Ok(()) => fail(ErrorCode::UnknownTopicOrPartition, String::new()),
                    },
                },
                BROKER if name.is_empty() => base.with_configs(describe_broker_default(
                    image.broker_configs.get(""),
                    &keys,
                    &opts,
                )),
                BROKER if name == state.node_id.to_string() => {
                    base.with_configs(describe_broker(&layers, &keys, &opts))
                }
                BROKER => fail(
                    ErrorCode::InvalidRequest,
                    format!(
                        "Unexpected broker id, expected {} or empty string, but received {name}",
                        state.node_id
                    ),
                ),
                BROKER_LOGGER if name == state.node_id.to_string() => {
                    base.with_configs(describe_loggers(&keys, &opts))
                }
                BROKER_LOGGER => fail(
                    ErrorCode::InvalidRequest,
                    format!(
                        "Unexpected broker id, expected {} but received {name}",
                        state.node_id
                    ),
                ),
                GROUP if name.is_empty() => fail(
                    ErrorCode::InvalidRequest,
                    "Group name must not be empty".into(),
                ),
                GROUP => base.with_configs(describe_group(
                    state,
                    image.group_configs.get(&name).unwrap_or(&BTreeMap::new()),
                    &keys,
                    &opts,
                )),
                other => fail(
                    ErrorCode::InvalidRequest,
                    format!("Unsupported resource type {other}"),
                ),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

/// Decides a batch of config changes on the controller: one result per change.
async fn alter(
    state: &BrokerState,
    changes: Vec<ConfigChange>,
    validate_only: bool,
) -> (Vec<Result<(), (ErrorCode, String)>>, i64) {
    if changes.is_empty() {
        return (Vec::new(), -1);
    }
    let count = changes.len();
    let answer = state
        .controller
        .submit(Request::AlterConfigs {
            changes,
            validate_only,
            origin: Origin::Client,
        })
        .await;
    let results = match answer.result {
        Ok(Reply::AlterConfigs(r)) => r
            .into_iter()
            .map(|r| r.map_err(|e| (e.code, e.message)))
            .collect(),
        Ok(other) => vec![
            Err((
                ErrorCode::UnknownServerError,
                format!("unexpected controller reply {other:?}")
            ));
            count
        ],
        Err(e) => vec![Err((e.code, e.message)); count],
    };
    (results, answer.offset)
}

/// Whether an IncrementalAlterConfigs resource APPENDs to or SUBTRACTs from a topic config that
/// is not a list.
fn appends_to_non_list(
    configs: &[protocol::messages::incremental_alter_configs_request::AlterableConfig],
    kind: impl Fn(&str) -> Option<ConfigType>,
) -> bool {
    configs.iter().any(|c| {
        (c.config_operation == APPEND || c.config_operation == SUBTRACT)
            && kind(&c.name) != Some(ConfigType::List)
    })
}

/// Kafka's first checks of every IncrementalAlterConfigs resource (INVALID_REQUEST): a config
/// named twice, then a SET, APPEND or SUBTRACT without a value.
fn null_list_value(
    configs: &[protocol::messages::incremental_alter_configs_request::AlterableConfig],
) -> Result<(), (ErrorCode, String)> {
    let mut names = std::collections::HashSet::new();
    if !configs.iter().all(|c| names.insert(c.name.as_str())) {
        return Err((
            ErrorCode::InvalidRequest,
            "Error due to duplicate config keys".into(),
        ));
    }
    // Kafka's `ConfigAdminManager.preprocess`: every entry but a DELETE (an unknown operation
    // too) with a null value, named together.
    let nulls: Vec<&str> = configs
        .iter()
        .filter(|c| c.config_operation != DELETE && c.value.is_none())
        .map(|c| c.name.as_str())
        .collect();
    if nulls.is_empty() {
        Ok(())
    } else {
        Err((
            ErrorCode::InvalidRequest,
            format!("Null value not supported for : {}", nulls.join(", ")),
        ))
    }
}

/// The resource-name checks of a topic config change: the empty name is the cluster default
/// (not alterable as a topic), an invalid name cannot exist.
fn topic_name_ok(name: &str) -> Result<(), (ErrorCode, String)> {
    if name.is_empty() {
        return Err((
            ErrorCode::InvalidRequest,
            "Default topic resources are not allowed.".into(),
        ));
    }
    model::ids::validate_topic_name(name).map_err(|m| (ErrorCode::InvalidTopicException, m))
}

/// Kafka checks the configs a request sets before it looks the topic up: an unknown name or
/// a bad value is INVALID_CONFIG even for a topic that does not exist.
fn unknown_topic_config<'a>(
    mut sets: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<(), (ErrorCode, String)> {
    match sets.find_map(|(n, v)| {
        if model::config::topic_config_def(n).is_none() {
            return Some(format!("Unknown topic config name: {n}"));
        }
        v.and_then(|v| TopicConfig::validate(n, v).err().map(|e| e.to_string()))
    }) {
        Some(msg) => Err((ErrorCode::InvalidConfig, msg)),
        None => Ok(()),
    }
}

/// Resolves each resource's outcome: a local error, or the controller's result for its change.
async fn decide(
    state: &BrokerState,
    outcomes: Vec<Result<Option<ConfigChange>, (ErrorCode, String)>>,
    validate_only: bool,
) -> (Vec<Result<(), (ErrorCode, String)>>, i64) {
    let changes: Vec<ConfigChange> = outcomes
        .iter()
        .filter_map(|o| o.as_ref().ok().cloned().flatten())
        .collect();
    let (mut results, offset) = alter(state, changes, validate_only).await;
    results.reverse();
    let merged = outcomes
        .into_iter()
        .map(|o| match o {
            // Decided on this broker (BROKER_LOGGER).
            Ok(None) => Ok(()),
            Ok(Some(_)) => results
                .pop()
                .unwrap_or(Err((ErrorCode::UnknownServerError, "no answer".into()))),
            Err(e) => Err(e),
        })
        .collect();
    (merged, offset)
}

/// The change a resource asks for, or why it cannot be made.
fn change_for(
    resource_type: i8,
    name: &str,
    changes: BTreeMap<String, Option<String>>,
    replace_all: bool,
) -> Result<ConfigChange, (ErrorCode, String)> {
    let resource = match resource_type {
        TOPIC => ConfigResource::Topic(name.to_string()),
        GROUP if name.is_empty() => {
            return Err((
                ErrorCode::InvalidRequest,
                "Group name must not be empty".into(),
            ))
        }
        GROUP => ConfigResource::Group(name.to_string()),
        BROKER => ConfigResource::Broker(name.to_string()),
        other => return Err(not_alterable(other)),
    };
    Ok(ConfigChange {
        resource,
        changes,
        replace_all,
    })
}

fn not_alterable(resource_type: i8) -> (ErrorCode, String) {
    if resource_type == BROKER_LOGGER {
        // Only IncrementalAlterConfigs changes log levels (Kafka's message).
        (
            ErrorCode::InvalidRequest,
            "AlterConfigs is deprecated and does not support the resource type BROKER_LOGGER"
                .into(),
        )
    } else {
        (
            ErrorCode::InvalidRequest,
            format!("Unsupported resource type {resource_type}"),
        )
    }
}

pub async fn alter_configs(
    state: Arc<BrokerState>,
    req: AlterConfigsRequest,
) -> (AlterConfigsResponse, i64) {
    let image = state.image();
    let outcomes = req
        .resources
        .iter()
        .map(|res| {
            let changes: BTreeMap<String, Option<String>> = res
                .configs
                .iter()
                .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                .collect();
            if res.resource_type == TOPIC {
                topic_name_ok(&res.resource_name)?;
                unknown_topic_config(changes.iter().map(|(k, v)| (k.as_str(), v.as_deref())))?;
            }
            if res.resource_type == BROKER {
                check_listener_limits(&state, &image, &res.resource_name, &changes, true)?;
                check_tls_changes(&state, &res.resource_name, &changes)?;
            }
            change_for(res.resource_type, &res.resource_name, changes, true).map(Some)
        })
        .collect();
    let (results, offset) = decide(&state, outcomes, req.validate_only).await;
    refresh_tls_after(
        &state,
        &req.resources,
        |r| r.resource_type,
        &results,
        offset,
        req.validate_only,
    )
    .await;
    let responses = req
        .resources
        .into_iter()
        .zip(results)
        .map(|(res, result)| {
            let r = alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name);
            match result {
                // Kafka answers a null message on success (ApiError.NONE has none), and an
                // error's message as its `ApiError.fromThrowable` carries it.
                Ok(()) => r.with_error_message(None),
                Err((e, msg)) => r
                    .with_error_code(code(e))
                    .with_error_message(e.api_message(&msg).map(str_bytes)),
            }
        })
        .collect();
    (
        AlterConfigsResponse::default().with_responses(responses),
        offset,
    )
}

/// The current value of a broker-level key of a BROKER resource (this broker's effective
/// value, or the cluster default's) for APPEND / SUBTRACT.
fn broker_value(
    image: &metadata::MetadataImage,
    layers: &BrokerLayers<'_>,
    resource: &str,
    key: &str,
) -> Option<String> {
    let set = if resource.is_empty() {
        image
            .broker_configs
            .get("")
            .and_then(|m| m.get(key))
            .cloned()
    } else {
        layers.sources(key).first().map(|(v, _)| v.to_string())
    };
    set.or_else(|| broker_config_def(key).map(|d| d.default.to_string()))
}

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

/// A change of this broker's dynamic TLS stores is loaded before it is accepted, as Kafka
/// validates a keystore reconfiguration: a store that cannot be used, or a listener that has
/// no TLS on this broker, is refused. (A change for another broker is checked by the
/// controller alone, and that broker keeps its certificate if the file does not load.)
fn check_tls_changes(
    state: &BrokerState,
    resource: &str,
    changes: &BTreeMap<String, Option<String>>,
) -> Result<(), (ErrorCode, String)> {
    let tls: Vec<(&String, (&str, &str))> = changes
        .keys()
        .filter_map(|k| dynamic_tls_key(k).map(|l| (k, l)))
        .collect();
    if tls.is_empty() || resource != state.node_id.to_string() {
        return Ok(());
    }
    // The broker's keys as the change would make them (a deleted dynamic key falls back to
    // the config file's).
    let mut props = (*state.broker_props()).clone();
    for (k, _) in &tls {
        match changes
            .get(*k)
            .cloned()
            .flatten()
            .or_else(|| state.config.props.get(*k).cloned())
        {
            Some(v) => props.insert((*k).clone(), v),
            None => props.remove(*k),
        };
    }
    for (key, (listener, _)) in tls {
        let Some(listener_tls) = state
            .tls
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(listener))
            .map(|(_, t)| t)
        else {
            return Err((
                ErrorCode::InvalidRequest,
                format!(
                    "{key}: listener {listener} of broker {} does not use TLS",
                    state.node_id
                ),
            ));
        };
        listener_tls
            .check(&props)
            .map_err(|e| (ErrorCode::InvalidRequest, e.client_message()))?;
    }
    Ok(())
}

/// A BROKER change for this broker or for the cluster default, checked against this broker's
/// listeners as Kafka's receiving broker checks it (`DynamicBrokerConfig.validate`): a
/// listener's connection limits, its own or the broker-wide ones it takes, stay above 0.
fn check_listener_limits(
    state: &BrokerState,
    image: &metadata::MetadataImage,
    resource: &str,
    changes: &BTreeMap<String, Option<String>>,
    replace_all: bool,
) -> Result<(), (ErrorCode, String)> {
    if !resource.is_empty() && resource != state.node_id.to_string() {
        return Ok(());
    }
    let layers = image.broker_layers(state.node_id, &state.config.props);
    let changed = |layer: Option<&BTreeMap<String, String>>| {
        let mut m = match layer {
            Some(m) if !replace_all => m.clone(),
            _ => BTreeMap::new(),
        };
        for (k, v) in changes {
            match v {
                Some(v) => m.insert(k.clone(), v.clone()),
                None => m.remove(k),
            };
        }
        m
    };
    let mut after = layers;
    let layer;
    if resource.is_empty() {
        layer = changed(layers.dynamic_default);
        after.dynamic_default = Some(&layer);
    } else {
        layer = changed(layers.dynamic_broker);
        after.dynamic_broker = Some(&layer);
    }
    let config = &state.config;
    let listeners: Vec<&str> = config
        .listeners
        .iter()
        .map(|l| l.name.as_str())
        .filter(|name| {
            !config
                .controller_listener_names
                .iter()
                .any(|c| c.eq_ignore_ascii_case(name))
        })
        .collect();
    model::config::check_listener_limits_change(&listeners, &layers.effective(), &after.effective())
        .map_err(|e| (ErrorCode::InvalidRequest, e))
}

/// After an alteration of BROKER resources: a keystore set again at the same path is no
/// metadata change, so the files are looked at here once the change is applied (a new path was
/// reloaded when this broker applied it).
async fn refresh_tls_after<R>(
    state: &BrokerState,
    resources: &[R],
    resource_type: impl Fn(&R) -> i8,
    results: &[Result<(), (ErrorCode, String)>],
    offset: i64,
    validate_only: bool,
) {
    let broker_changed = resources
        .iter()
        .zip(results)
        .any(|(res, result)| resource_type(res) == BROKER && result.is_ok());
    if broker_changed && !validate_only && !state.tls.is_empty() {
        state.wait_applied(offset).await;
        state.refresh_tls();
    }
}

/// The changes an IncrementalAlterConfigs resource asks for (SET, DELETE, and APPEND /
/// SUBTRACT on list configs), given each key's current value and type (`None`: unknown key).
/// `lists` says whether APPEND / SUBTRACT work at all for the resource: Kafka 4.x refuses
/// them on group configs ("its type is not LIST").
fn incremental_changes(
    configs: &[protocol::messages::incremental_alter_configs_request::AlterableConfig],
    current: impl Fn(&str) -> Option<String>,
    kind: impl Fn(&str) -> Option<ConfigType>,
    lists: bool,
) -> Result<BTreeMap<String, Option<String>>, (ErrorCode, String)> {
    let list = |s: Option<String>| -> Vec<String> {
        s.map(|s| {
            s.split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect()
        })
        .unwrap_or_default()
    };
    let mut changes: BTreeMap<String, Option<String>> = BTreeMap::new();
    for c in configs {
        let key = c.name.to_string();
        let value = c.value.as_ref().map(|v| v.to_string());
        match c.config_operation {
            SET => {
                changes.insert(key, value);
            }
            // Deleting a key that is not set is a no-op in Kafka, even an unknown key.
            DELETE if kind(&key).is_none() => {}
            DELETE => {
                changes.insert(key, None);
            }
            APPEND | SUBTRACT if lists && kind(&key) == Some(ConfigType::List) => {
                let now = changes
                    .get(&key)
                    .cloned()
                    .flatten()
                    .or_else(|| current(&key));
                let mut items = list(now);
                for v in list(value) {
                    if c.config_operation == APPEND {
                        if !items.contains(&v) {
                            items.push(v);
                        }
                    } else {
                        items.retain(|x| *x != v);
                    }
                }
                changes.insert(key, Some(items.join(",")));
            }
            APPEND | SUBTRACT => {
                return Err((
                    ErrorCode::InvalidConfig,
                    format!("Can't APPEND to key {key} because its type is not LIST."),
                ));
            }
            // No message: Kafka's handler fails here and answers UNKNOWN_SERVER_ERROR, which
            // carries none; Moldau names the problem by its code alone (a kept difference).
            _ => return Err((ErrorCode::InvalidRequest, String::new())),
        }
    }
    Ok(changes)
}

pub async fn incremental_alter_configs(
    state: Arc<BrokerState>,
    req: IncrementalAlterConfigsRequest,
    loggers: HashMap<usize, Result<(), (ErrorCode, String)>>,
) -> (IncrementalAlterConfigsResponse, i64) {
    let image = state.image();
    let broker = &state.config.props;
    let layers = image.broker_layers(state.node_id, broker);
    let effective = state.broker_props();
    let mut seen: HashMap<(i8, &str), usize> = HashMap::new();
    for res in &req.resources {
        *seen
            .entry((res.resource_type, res.resource_name.as_str()))
            .or_default() += 1;
    }
    let outcomes = req
        .resources
        .iter()
        .enumerate()
        .map(|(i, res)| {
            if let Some(done) = loggers.get(&i) {
                return done.clone().map(|()| None);
            }
            let name = res.resource_name.to_string();
            // Unknown operations are answered by `incremental_changes`.
            let ops_known = res
                .configs
                .iter()
                .all(|c| (SET..=SUBTRACT).contains(&c.config_operation));
            let names = unknown_topic_config(
                res.configs
                    .iter()
                    .filter(|c| ops_known && c.config_operation != DELETE)
                    // Kafka checks SET and APPEND values before the topic lookup; a SUBTRACT
                    // value is only removed from the list (a missing topic wins there).
                    .map(|c| {
                        let checked = c.config_operation != SUBTRACT;
                        (c.name.as_str(), c.value.as_deref().filter(|_| checked))
                    }),
            );
            // Kafka refuses every copy of a resource named twice, and changes none of them.
            if seen.get(&(res.resource_type, name.as_str())) > Some(&1) {
                return Err((
                    ErrorCode::InvalidRequest,
                    "Each resource must appear at most once.".into(),
                ));
            }
            null_list_value(&res.configs)?;
            let changes = match res.resource_type {
                // Operation checks come first in Kafka: null list values, unknown operations,
                // then APPEND / SUBTRACT on keys that are not lists (known or not); then the
                // resource name, then the config names and values, then the topic itself.
                TOPIC => {
                    let kind = |k: &str| model::config::topic_config_def(k).map(|d| d.kind);
                    if !ops_known || appends_to_non_list(&res.configs, kind) {
                        incremental_changes(
                            &res.configs,
                            |_| None,
                            |k| model::config::topic_config_def(k).map(|d| d.kind),
                            true,
                        )?;
                    }
                    topic_name_ok(&name)?;
                    names?;
                    match image.topic(&name) {
                        Some(topic) => incremental_changes(
                            &res.configs,
                            |k| TopicConfig::lookup(k, &effective, &topic.configs).map(|(v, _)| v),
                            |k| model::config::topic_config_def(k).map(|d| d.kind),
                            true,
                        )?,
                        None => {
                            return Err((
                                ErrorCode::UnknownTopicOrPartition,
                                format!("Topic '{name}' does not exist."),
                            ))
                        }
                    }
                }
                GROUP if name.is_empty() => {
                    let kind = |k: &str| group_config::group_config_def(k).map(|d| d.def.kind);
                    if !ops_known || appends_to_non_list(&res.configs, kind) {
                        incremental_changes(&res.configs, |_| None, kind, false)?;
                    }
                    return Err((
                        ErrorCode::InvalidRequest,
                        "Group name must not be empty".into(),
                    ));
                }
                GROUP => {
                    let empty = BTreeMap::new();
                    let overrides = image.group_configs.get(&name).unwrap_or(&empty);
                    incremental_changes(
                        &res.configs,
                        |k| group_config::lookup(k, broker, overrides).map(|(v, _)| v),
                        |k| group_config::group_config_def(k).map(|d| d.def.kind),
                        false,
                    )?
                }
                BROKER => {
                    let changes = incremental_changes(
                        &res.configs,
                        |k| broker_value(&image, &layers, &name, k),
                        |k| {
                            broker_config_def(k)
                                .map(|d| d.kind)
                                .or_else(|| dynamic_tls_key(k).map(|_| ConfigType::String))
                        },
                        true,
                    )?;
                    check_listener_limits(&state, &image, &name, &changes, false)?;
                    check_tls_changes(&state, &name, &changes)?;
                    changes
                }
                other => return Err(not_alterable(other)),
            };
            change_for(res.resource_type, &name, changes, false).map(Some)
        })
        .collect();
    let (results, offset) = decide(&state, outcomes, req.validate_only).await;
    refresh_tls_after(
        &state,
        &req.resources,
        |r| r.resource_type,
        &results,
        offset,
        req.validate_only,
    )
    .await;
    let responses = req
        .resources
        .into_iter()
        .zip(results)
        .map(|(res, result)| {
            let r = incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name);
            match result {
                // Kafka answers a null message on success (ApiError.NONE has none), and an
                // error's message as its `ApiError.fromThrowable` carries it.
                Ok(()) => r.with_error_message(None),
                Err((e, msg)) => r
                    .with_error_code(code(e))
                    .with_error_message(e.api_message(&msg).map(str_bytes)),
            }
        })
        .collect();
    (
        IncrementalAlterConfigsResponse::default().with_responses(responses),
        offset,
    )
}
