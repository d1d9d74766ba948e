//! Topic administration (CreateTopics, DeleteTopics, CreatePartitions), DescribeLogDirs and
//! InitProducerId.

use super::{code, from_uuid, str_bytes, to_uuid};
use crate::state::BrokerState;
use metadata::NewTopic;
use model::ErrorCode;
use protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use protocol::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use protocol::messages::delete_topics_response::DeletableTopicResult;
use protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, DescribeLogDirsRequest, DescribeLogDirsResponse,
    InitProducerIdRequest, InitProducerIdResponse, ProducerId,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub fn create_topics(
    state: &Arc<BrokerState>,
    req: CreateTopicsRequest,
    version: i16,
) -> (CreateTopicsResponse, bool) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for t in &req.topics {
        *seen.entry(t.name.0.to_string()).or_default() += 1;
    }
    let mut results = Vec::with_capacity(req.topics.len());
    let mut created_any = false;
    for t in req.topics {
        let name = t.name.0.to_string();
        let fail = |e: ErrorCode, msg: String| {
            let mut r = CreatableTopicResult::default()
                .with_name(t.name.clone())
                .with_error_code(code(e))
                .with_error_message(Some(str_bytes(msg)));
            if version >= 5 {
                r = r.with_num_partitions(-1).with_replication_factor(-1);
            }
            r
        };
        if seen.get(&name).copied().unwrap_or(0) > 1 {
            results.push(fail(
                ErrorCode::InvalidRequest,
                format!(
                    "Create topics request from client contains multiple entries for topic {name}"
                ),
            ));
            continue;
        }
        let mut configs = BTreeMap::new();
        let mut null_config = None;
        for c in &t.configs {
            match &c.value {
                Some(v) => {
                    configs.insert(c.name.to_string(), v.to_string());
                }
                None => null_config = Some(c.name.to_string()),
            }
        }
        if let Some(k) = null_config {
            results.push(fail(
                ErrorCode::InvalidConfig,
                format!("Null value not supported for topic configs: {k}"),
            ));
            continue;
        }
        let (partitions, rf) = if t.assignments.is_empty() {
            (t.num_partitions, t.replication_factor)
        } else {
            if t.num_partitions != -1 || t.replication_factor != -1 {
                results.push(fail(
                    ErrorCode::InvalidRequest,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.".into(),
                ));
                continue;
            }
            let image = state.image();
            let bad = t
                .assignments
                .iter()
                .flat_map(|a| a.broker_ids.iter())
                .any(|b| !image.brokers.contains_key(&b.0));
            if bad {
                results.push(fail(
                    ErrorCode::InvalidReplicaAssignment,
                    "Replica assignment names an unknown broker.".into(),
                ));
                continue;
            }
            let rf = t.assignments[0].broker_ids.len() as i16;
            (t.assignments.len() as i32, rf)
        };
        let created = state.metadata.create_topic(
            NewTopic {
                name: name.clone(),
                partitions,
                replication_factor: rf,
                configs,
            },
            state.config.num_partitions,
            state.config.default_replication_factor,
            req.validate_only,
        );
        match created {
            Ok(topic) => {
                created_any |= !req.validate_only;
                let mut r = CreatableTopicResult::default().with_name(t.name.clone());
                if version >= 5 {
                    let rf = topic.partitions.first().map_or(1, |p| p.replicas.len()) as i16;
                    r = r
                        .with_num_partitions(topic.partitions.len() as i32)
                        .with_replication_factor(rf)
                        .with_configs(Some(topic_configs(state, &topic.configs)));
                }
                if version >= 7 {
                    r = r.with_topic_id(to_uuid(topic.id));
                }
                results.push(r);
            }
            Err(e) => results.push(fail(e.code, e.message)),
        }
    }
    // The new partitions' logs are opened by the caller (`handlers::after_reconcile`), off
    // the connection's task.
    (
        CreateTopicsResponse::default().with_topics(results),
        created_any,
    )
}

fn topic_configs(
    state: &BrokerState,
    overrides: &BTreeMap<String, String>,
) -> Vec<CreatableTopicConfigs> {
    model::config::TOPIC_CONFIGS
        .iter()
        .filter_map(|def| {
            let (value, source) =
                model::TopicConfig::lookup(def.name, &state.config.props, overrides)?;
            Some(
                CreatableTopicConfigs::default()
                    .with_name(str_bytes(def.name))
                    .with_value(Some(str_bytes(value)))
                    .with_config_source(source as i8),
            )
        })
        .collect()
}

pub fn delete_topics(
    state: &Arc<BrokerState>,
    req: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let image = state.image();
    // v6 names topics by name or id; earlier versions by name only.
    let targets: Vec<(Option<String>, uuid::Uuid)> = if version >= 6 {
        req.topics
            .into_iter()
            .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .into_iter()
            .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
            .collect()
    };
    let mut responses = Vec::with_capacity(targets.len());
    let mut deleted: Vec<String> = Vec::new();
    for (name, id) in targets {
        let name = name.or_else(|| image.topic_by_id(from_uuid(id)).map(|t| t.name.to_string()));
        let mut r =
            DeletableTopicResult::default().with_name(name.as_deref().map(super::topic_name));
        if version >= 6 {
            r = r.with_topic_id(id);
        }
        let result = match &name {
            None => Err((ErrorCode::UnknownTopicId, "Topic id not found.".to_string())),
            Some(_) if !state.config.delete_topic_enable => Err((
                ErrorCode::TopicDeletionDisabled,
                "Topic deletion is disabled.".to_string(),
            )),
            Some(n) => state
                .metadata
                .delete_topic(n)
                .map_err(|e| (e.code, e.message)),
        };
        match result {
            Ok(topic) => {
                deleted.push(topic.name.to_string());
                if version >= 6 {
                    r = r.with_topic_id(to_uuid(topic.id));
                }
                tracing::info!(topic = %topic.name, "deleted topic");
            }
            Err((e, msg)) => {
                r = r.with_error_code(code(e));
                if version >= 5 {
                    r = r.with_error_message(Some(str_bytes(msg)));
                }
            }
        }
        responses.push(r);
    }
    if !deleted.is_empty() {
        state.reconcile_or_log();
        let names: Vec<&str> = deleted.iter().map(String::as_str).collect();
        state.groups.topics_deleted(state, &names);
    }
    DeleteTopicsResponse::default().with_responses(responses)
}

pub fn create_partitions(
    state: &Arc<BrokerState>,
    req: CreatePartitionsRequest,
) -> (CreatePartitionsResponse, bool) {
    let mut grew = false;
    let results = req
        .topics
        .into_iter()
        .map(|t| {
            let r = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            match state
                .metadata
                .create_partitions(&t.name.0, t.count, req.validate_only)
            {
                Ok(()) => {
                    grew |= !req.validate_only;
                    r
                }
                Err(e) => r
                    .with_error_code(code(e.code))
                    .with_error_message(Some(str_bytes(e.message))),
            }
        })
        .collect();
    (
        CreatePartitionsResponse::default().with_results(results),
        grew,
    )
}

pub fn describe_log_dirs(
    state: &Arc<BrokerState>,
    req: DescribeLogDirsRequest,
    version: i16,
) -> DescribeLogDirsResponse {
    let wanted: Option<HashMap<String, Vec<i32>>> = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.topic.0.to_string(), t.partitions))
            .collect()
    });
    let mut by_topic: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
    for p in state.replicas.all() {
        let include = match &wanted {
            None => true,
            Some(w) => w
                .get(&*p.tp.topic)
                .is_some_and(|ps| ps.contains(&p.tp.partition)),
        };
        if include {
            by_topic.entry(p.tp.topic.to_string()).or_default().push(
                DescribeLogDirsPartition::default()
                    .with_partition_index(p.tp.partition)
                    .with_partition_size(p.log.size_bytes() as i64)
                    .with_offset_lag(0),
            );
        }
    }
    let topics = by_topic
        .into_iter()
        .map(|(name, mut partitions)| {
            partitions.sort_by_key(|p| p.partition_index);
            DescribeLogDirsTopic::default()
                .with_name(super::topic_name(&name))
                .with_partitions(partitions)
        })
        .collect();
    let dir =
        std::fs::canonicalize(state.data_dir()).unwrap_or_else(|_| state.data_dir().to_path_buf());
    let mut result = DescribeLogDirsResult::default()
        .with_log_dir(str_bytes(dir.display().to_string()))
        .with_topics(topics);
    if version >= 4 {
        // Kafka reports the file store's total and usable space (v4+, KIP-827); -1 when unknown.
        if let Some((total, usable)) = disk_space(&dir) {
            result = result.with_total_bytes(total).with_usable_bytes(usable);
        }
    }
    DescribeLogDirsResponse::default().with_results(vec![result])
}

/// (total, usable) bytes of the file system holding `dir`, as Java's `FileStore` reports them:
/// all blocks, and the blocks available to an unprivileged user.
fn disk_space(dir: &std::path::Path) -> Option<(i64, i64)> {
    let st = rustix::fs::statvfs(dir).ok()?;
    let total = st.f_blocks.checked_mul(st.f_frsize)?;
    let usable = st.f_bavail.checked_mul(st.f_frsize)?;
    Some((i64::try_from(total).ok()?, i64::try_from(usable).ok()?))
}

pub fn init_producer_id(
    state: &Arc<BrokerState>,
    req: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let fail = |e: ErrorCode| {
        InitProducerIdResponse::default()
            .with_error_code(code(e))
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    if req.transactional_id.is_some() {
        // Routed to the transaction coordinator by the dispatcher.
        return fail(ErrorCode::InvalidRequest);
    }
    // An idempotent producer (re)initialising always gets a fresh id with epoch 0, as Kafka
    // does without a transactional id; its old sequences can't collide with the new id.
    match state.metadata.allocate_producer_id() {
        Ok(id) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(e) => fail(e.code),
    }
}
