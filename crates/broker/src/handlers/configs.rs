//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and groups (and
//! describing the broker's static config), with Kafka's sources and synonyms.

use super::{code, str_bytes};
use crate::state::BrokerState;
use controller::{ConfigChange, ConfigResource, Origin, Reply, Request};
use model::config::{ConfigDef, ConfigType, BROKER_CONFIGS, TOPIC_CONFIGS};
use model::group_config::{self, GROUP_CONFIGS};
use model::{ConfigSource, ErrorCode, TopicConfig};
use protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use std::collections::BTreeMap;
use std::sync::Arc;

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;
const GROUP: i8 = 32;

struct Opts {
    synonyms: bool,
    documentation: bool,
    version: i16,
}

fn entry(
    def: &ConfigDef,
    name: &str,
    value: String,
    source: ConfigSource,
    read_only: bool,
    synonyms: Vec<DescribeConfigsSynonym>,
    opts: &Opts,
) -> DescribeConfigsResourceResult {
    let mut r = DescribeConfigsResourceResult::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(value)))
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
    state: &BrokerState,
    overrides: &BTreeMap<String, String>,
    keys: &Option<Vec<String>>,
    opts: &Opts,
) -> Vec<DescribeConfigsResourceResult> {
    let broker = &state.config.props;
    TOPIC_CONFIGS
        .iter()
        .filter(|d| keys.as_ref().is_none_or(|k| k.iter().any(|k| k == d.name)))
        .filter_map(|def| {
            let (value, source) = TopicConfig::lookup(def.name, broker, overrides)?;
            let mut synonyms = Vec::new();
            if let Some(v) = overrides.get(def.name) {
                synonyms.push(synonym(def.name, v, ConfigSource::Topic));
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
            Some(entry(def, def.name, value, source, false, synonyms, opts))
        })
        .collect()
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
            Some(entry(def, def.name, value, source, false, synonyms, opts))
        })
        .collect()
}

fn describe_broker(
    state: &BrokerState,
    keys: &Option<Vec<String>>,
    opts: &Opts,
) -> Vec<DescribeConfigsResourceResult> {
    let props = &state.config.props;
    let defs = BROKER_CONFIGS.iter().map(|d| (d, d.name)).chain(
        TOPIC_CONFIGS
            .iter()
            .filter_map(|d| d.broker_synonym.map(|s| (d, s))),
    );
    let mut seen = std::collections::HashSet::new();
    defs.filter(|(_, name)| seen.insert(*name))
        .filter(|(_, name)| keys.as_ref().is_none_or(|k| k.iter().any(|k| k == name)))
        .map(|(def, name)| {
            let (value, source) = match props.get(name) {
                Some(v) => (v.clone(), ConfigSource::StaticBroker),
                None => (def.default.to_string(), ConfigSource::Default),
            };
            let synonyms = vec![synonym(name, &value, source)];
            entry(def, name, value, source, true, synonyms, opts)
        })
        .collect()
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
    let results = req
        .resources
        .into_iter()
        .map(|res| {
            let keys: Option<Vec<String>> = res
                .configuration_keys
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
                    Some(t) => base.with_configs(describe_topic(state, &t.configs, &keys, &opts)),
                    None => fail(
                        ErrorCode::UnknownTopicOrPartition,
                        format!("Topic '{name}' does not exist."),
                    ),
                },
                BROKER => {
                    if name.is_empty() || name == state.node_id.to_string() {
                        base.with_configs(describe_broker(state, &keys, &opts))
                    } else {
                        fail(
                            ErrorCode::InvalidRequest,
                            format!(
                                "Unexpected broker id, expected {} but received {name}",
                                state.node_id
                            ),
                        )
                    }
                }
                BROKER_LOGGER => base,
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

/// Applies changes to one topic; returns the error for the response.
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

/// Resolves each resource's outcome: a local error, or the controller's result for its change.
async fn decide(
    state: &BrokerState,
    outcomes: Vec<Result<ConfigChange, (ErrorCode, String)>>,
    validate_only: bool,
) -> (Vec<Result<(), (ErrorCode, String)>>, i64) {
    let changes: Vec<ConfigChange> = outcomes
        .iter()
        .filter_map(|o| o.as_ref().ok().cloned())
        .collect();
    let (mut results, offset) = alter(state, changes, validate_only).await;
    results.reverse();
    let merged = outcomes
        .into_iter()
        .map(|o| match o {
            Ok(_) => results
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
        other => return Err(not_alterable(other)),
    };
    Ok(ConfigChange {
        resource,
        changes,
        replace_all,
    })
}

fn not_alterable(resource_type: i8) -> (ErrorCode, String) {
    if resource_type == BROKER || resource_type == BROKER_LOGGER {
        (
            ErrorCode::InvalidRequest,
            "Dynamic broker configs are not supported; set them in the broker's config file".into(),
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
    let outcomes = req
        .resources
        .iter()
        .map(|res| {
            let changes = res
                .configs
                .iter()
                .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                .collect();
            change_for(res.resource_type, &res.resource_name, changes, true)
        })
        .collect();
    let (results, offset) = decide(&state, outcomes, req.validate_only).await;
    let responses = req
        .resources
        .into_iter()
        .zip(results)
        .map(|(res, result)| {
            let r = alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name);
            match result {
                Ok(()) => r,
                Err((e, msg)) => r
                    .with_error_code(code(e))
                    .with_error_message(Some(str_bytes(msg))),
            }
        })
        .collect();
    (
        AlterConfigsResponse::default().with_responses(responses),
        offset,
    )
}

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

/// The changes an IncrementalAlterConfigs resource asks for (SET, DELETE, and APPEND /
/// SUBTRACT on list configs), given each key's current value and type.
fn incremental_changes(
    configs: &[protocol::messages::incremental_alter_configs_request::AlterableConfig],
    current: impl Fn(&str) -> Option<String>,
    kind: impl Fn(&str) -> Option<ConfigType>,
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
            DELETE => {
                changes.insert(key, None);
            }
            APPEND | SUBTRACT if kind(&key) == Some(ConfigType::List) => {
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
                    format!("Config value append is not allowed for config key: {key}"),
                ));
            }
            op => {
                return Err((
                    ErrorCode::InvalidRequest,
                    format!("Unknown config operation {op}"),
                ));
            }
        }
    }
    Ok(changes)
}

pub async fn incremental_alter_configs(
    state: Arc<BrokerState>,
    req: IncrementalAlterConfigsRequest,
) -> (IncrementalAlterConfigsResponse, i64) {
    let image = state.image();
    let broker = &state.config.props;
    let outcomes = req
        .resources
        .iter()
        .map(|res| {
            let name = res.resource_name.to_string();
            let changes = match res.resource_type {
                TOPIC => match image.topic(&name) {
                    Some(topic) => incremental_changes(
                        &res.configs,
                        |k| TopicConfig::lookup(k, broker, &topic.configs).map(|(v, _)| v),
                        |k| model::config::topic_config_def(k).map(|d| d.kind),
                    )?,
                    None => {
                        return Err((
                            ErrorCode::UnknownTopicOrPartition,
                            format!("Topic '{name}' does not exist."),
                        ))
                    }
                },
                GROUP => {
                    let empty = BTreeMap::new();
                    let overrides = image.group_configs.get(&name).unwrap_or(&empty);
                    incremental_changes(
                        &res.configs,
                        |k| group_config::lookup(k, broker, overrides).map(|(v, _)| v),
                        |k| group_config::group_config_def(k).map(|d| d.def.kind),
                    )?
                }
                other => return Err(not_alterable(other)),
            };
            change_for(res.resource_type, &name, changes, false)
        })
        .collect();
    let (results, offset) = decide(&state, outcomes, req.validate_only).await;
    let responses = req
        .resources
        .into_iter()
        .zip(results)
        .map(|(res, result)| {
            let r = incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name);
            match result {
                Ok(()) => r,
                Err((e, msg)) => r
                    .with_error_code(code(e))
                    .with_error_message(Some(str_bytes(msg))),
            }
        })
        .collect();
    (
        IncrementalAlterConfigsResponse::default().with_responses(responses),
        offset,
    )
}
