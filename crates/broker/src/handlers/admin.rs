//! Topic administration (CreateTopics, DeleteTopics, CreatePartitions), DescribeLogDirs and
//! InitProducerId.
//!
//! The administration requests are decided by the active controller: these handlers turn the
//! Kafka request into controller requests, wait for the committed answers and build the Kafka
//! response; they return it with the highest metadata offset the change committed at, which
//! the caller waits for before answering (so a Metadata request right after sees the change).
//! CreateTopics, DeleteTopics and CreatePartitions from clients carry the client's controller
//! mutation quota (KIP-599), which the controller applies per topic.

use super::{code, from_uuid, str_bytes, to_uuid};
use crate::state::BrokerState;
use controller::{ControllerError, MutationQuotaRef, Origin, Reply, Request, TopicRef, TopicSpec};
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

/// Submits to the controller; a reply of another kind is a bug, reported as an error.
async fn submit(state: &BrokerState, request: Request) -> (Result<Reply, ControllerError>, i64) {
    let answer = state.controller.submit(request).await;
    (answer.result, answer.offset)
}

fn unexpected(reply: &Reply) -> ControllerError {
    ControllerError::new(
        ErrorCode::UnknownServerError,
        format!("unexpected controller reply {reply:?}"),
    )
}

pub async fn create_topics(
    state: Arc<BrokerState>,
    req: CreateTopicsRequest,
    version: i16,
    origin: Origin,
    quota: MutationQuotaRef,
) -> (CreateTopicsResponse, i64) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for t in &req.topics {
        *seen.entry(t.name.0.to_string()).or_default() += 1;
    }
    // The message as Kafka's `ApiError` carries it (none where it is the error's default).
    let fail = |name: &protocol::messages::TopicName, e: ErrorCode, msg: String| {
        let mut r = CreatableTopicResult::default()
            .with_name(name.clone())
            .with_error_code(code(e))
            .with_error_message(e.api_message(&msg).map(str_bytes));
        if version >= 5 {
            r = r.with_num_partitions(-1).with_replication_factor(-1);
        }
        r
    };
    // Per topic: either an immediate error, or the index of its spec in the controller call.
    let mut slots: Vec<Result<usize, CreatableTopicResult>> = Vec::with_capacity(req.topics.len());
    let mut specs = Vec::new();
    // Kafka answers a repeated name once.
    let mut answered = std::collections::HashSet::new();
    let topics: Vec<_> = req
        .topics
        .iter()
        .filter(|t| answered.insert(t.name.0.clone()))
        .collect();
    for t in &topics {
        let name = t.name.0.to_string();
        if seen.get(&name).copied().unwrap_or(0) > 1 {
            slots.push(Err(fail(
                &t.name,
                ErrorCode::InvalidRequest,
                format!(
                    "Create topics request from client contains multiple entries for topic {name}"
                ),
            )));
            continue;
        }
        // With its timeout already over (timeout_ms <= 0) the request reaches Kafka's
        // controller expired: every topic gets REQUEST_TIMED_OUT and nothing is created.
        if req.timeout_ms <= 0 {
            // Kafka's controller answers it without a message.
            let e = ErrorCode::RequestTimedOut;
            slots.push(Err(fail(&t.name, e, e.default_message().into())));
            continue;
        }
        // Kafka checks the name and the configs before the partitions and replicas.
        if let Err(msg) = model::ids::validate_topic_name(&name) {
            slots.push(Err(fail(&t.name, ErrorCode::InvalidTopicException, msg)));
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
            slots.push(Err(fail(
                &t.name,
                ErrorCode::InvalidConfig,
                format!("Null value not supported for topic configs: {k}"),
            )));
            continue;
        }
        if let Some(e) = configs
            .iter()
            .find_map(|(k, v)| model::TopicConfig::validate(k, v).err())
        {
            slots.push(Err(fail(&t.name, ErrorCode::InvalidConfig, e.to_string())));
            continue;
        }
        let mut assignment = Vec::new();
        if !t.assignments.is_empty() {
            if t.num_partitions != -1 || t.replication_factor != -1 {
                slots.push(Err(fail(
                    &t.name,
                    ErrorCode::InvalidRequest,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.".into(),
                )));
                continue;
            }
            let mut by_index: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
            for a in &t.assignments {
                by_index.insert(
                    a.partition_index,
                    a.broker_ids.iter().map(|b| b.0).collect(),
                );
            }
            if by_index.keys().copied().ne(0..by_index.len() as i32) {
                slots.push(Err(fail(
                    &t.name,
                    ErrorCode::InvalidReplicaAssignment,
                    "Partitions should be numbered consecutively starting at 0.".into(),
                )));
                continue;
            }
            assignment = by_index.into_values().collect();
        }
        slots.push(Ok(specs.len()));
        specs.push(TopicSpec {
            name,
            partitions: t.num_partitions,
            replication_factor: t.replication_factor,
            assignment,
            configs,
        });
    }
    let (results, offset) = if specs.is_empty() {
        (Vec::new(), -1)
    } else {
        let count = specs.len();
        let request = Request::CreateTopics {
            topics: specs,
            validate_only: req.validate_only,
            origin,
            quota,
        };
        match submit(&state, request).await {
            (Ok(Reply::CreateTopics(r)), offset) => (r, offset),
            (Ok(other), offset) => (vec![Err(unexpected(&other)); count], offset),
            (Err(e), offset) => (vec![Err(e); count], offset),
        }
    };
    let topics = topics
        .into_iter()
        .zip(slots)
        .map(|(t, slot)| match slot {
            Err(r) => r,
            Ok(i) => match results.get(i).cloned() {
                Some(Ok(created)) => {
                    // Kafka answers a null message on success (ApiError.NONE has none).
                    let mut r = CreatableTopicResult::default()
                        .with_name(t.name.clone())
                        .with_error_message(None);
                    if version >= 5 {
                        r = r
                            .with_num_partitions(created.partitions)
                            .with_replication_factor(created.replication_factor)
                            .with_configs(Some(topic_configs(&state, &created.configs)));
                    }
                    if version >= 7 {
                        r = r.with_topic_id(to_uuid(created.id));
                    }
                    r
                }
                Some(Err(e)) => fail(&t.name, e.code, e.message),
                None => fail(&t.name, ErrorCode::UnknownServerError, "no answer".into()),
            },
        })
        .collect();
    (CreateTopicsResponse::default().with_topics(topics), offset)
}

fn topic_configs(
    state: &BrokerState,
    overrides: &BTreeMap<String, String>,
) -> Vec<CreatableTopicConfigs> {
    let image = state.image();
    let layers = image.broker_layers(state.node_id, &state.config.props);
    model::config::TOPIC_CONFIGS
        .iter()
        .filter_map(|def| {
            let (value, source) = model::TopicConfig::lookup_created(def.name, &layers, overrides)?;
            Some(
                CreatableTopicConfigs::default()
                    .with_name(str_bytes(def.name))
                    .with_value(Some(str_bytes(value)))
                    .with_config_source(source as i8),
            )
        })
        .collect()
}

pub async fn delete_topics(
    state: Arc<BrokerState>,
    req: DeleteTopicsRequest,
    version: i16,
    quota: MutationQuotaRef,
) -> (DeleteTopicsResponse, i64) {
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
    let mut counts: HashMap<(Option<String>, uuid::Uuid), usize> = HashMap::new();
    for t in &targets {
        *counts.entry(t.clone()).or_default() += 1;
    }
    // Kafka answers a repeated topic once, entries naming nothing each, and sends the rest
    // to its controller. With its timeout already over (timeout_ms <= 0) that call fails and
    // every entry, repeated ones too, gets REQUEST_TIMED_OUT; when nothing is left for the
    // controller (only repeats and empty entries) there is no call to time out.
    let for_controller = |(name, id): &(Option<String>, uuid::Uuid)| {
        !(name.is_none() && id.is_nil()) && counts.get(&(name.clone(), *id)).copied() == Some(1)
    };
    let expired = req.timeout_ms <= 0 && targets.iter().any(for_controller);
    let mut answered = std::collections::HashSet::new();
    let targets: Vec<_> = targets
        .into_iter()
        .filter(|(name, id)| {
            expired || (name.is_none() && id.is_nil()) || answered.insert((name.clone(), *id))
        })
        .collect();
    // Per entry: an immediate error (Kafka's controller checks these first), or its index in
    // the controller call.
    let mut slots: Vec<Result<usize, ControllerError>> = Vec::with_capacity(targets.len());
    let mut refs: Vec<TopicRef> = Vec::new();
    for (name, id) in &targets {
        let early = if name.is_none() && id.is_nil() {
            Some((
                ErrorCode::InvalidRequest,
                "Neither topic name nor id were specified.",
            ))
        } else if expired {
            // The timeout already over: REQUEST_TIMED_OUT for every entry, nothing deleted
            // (no message, as Kafka's controller answers it).
            Some((ErrorCode::RequestTimedOut, ""))
        } else if counts.get(&(name.clone(), *id)).copied().unwrap_or(0) > 1 {
            Some((ErrorCode::InvalidRequest, "Duplicate topic in the request."))
        } else if !state.config.delete_topic_enable {
            Some((
                ErrorCode::TopicDeletionDisabled,
                "Topic deletion is disabled.",
            ))
        } else {
            None
        };
        match early {
            Some((e, msg)) => slots.push(Err(ControllerError::new(e, msg))),
            None => {
                slots.push(Ok(refs.len()));
                refs.push(match name {
                    Some(n) => TopicRef::Name(n.clone()),
                    None => TopicRef::Id(from_uuid(*id)),
                });
            }
        }
    }
    let (answers, offset) = if refs.is_empty() {
        (Vec::new(), -1)
    } else {
        let count = refs.len();
        match submit(
            &state,
            Request::DeleteTopics {
                topics: refs,
                quota,
            },
        )
        .await
        {
            (Ok(Reply::DeleteTopics(r)), offset) => (r, offset),
            (Ok(other), offset) => (vec![Err(unexpected(&other)); count], offset),
            (Err(e), offset) => (vec![Err(e); count], offset),
        }
    };
    let results: Vec<_> = slots
        .into_iter()
        .map(|slot| match slot {
            Err(e) => Err(e),
            Ok(i) => answers.get(i).cloned().unwrap_or_else(|| {
                Err(ControllerError::new(
                    ErrorCode::UnknownServerError,
                    "no answer",
                ))
            }),
        })
        .collect();
    let responses = targets
        .into_iter()
        .zip(results)
        .map(|((name, id), result)| {
            let shown = name
                .clone()
                .or_else(|| result.as_ref().ok().map(|(n, _)| n.clone()));
            let mut r =
                DeletableTopicResult::default().with_name(shown.as_deref().map(super::topic_name));
            if version >= 6 {
                r = r.with_topic_id(id);
            }
            match result {
                Ok((deleted, topic_id)) => {
                    tracing::info!(topic = %deleted, "deleted topic");
                    if version >= 6 {
                        r = r.with_topic_id(to_uuid(topic_id));
                    }
                }
                Err(e) => {
                    r = r.with_error_code(code(e.code));
                    if version >= 5 {
                        r = r.with_error_message(e.wire_message().map(str_bytes));
                    }
                }
            }
            r
        })
        .collect();
    (
        DeleteTopicsResponse::default().with_responses(responses),
        offset,
    )
}

pub async fn create_partitions(
    state: Arc<BrokerState>,
    req: CreatePartitionsRequest,
    quota: MutationQuotaRef,
) -> (CreatePartitionsResponse, i64) {
    let image = state.image();
    let mut counts: HashMap<String, usize> = HashMap::new();
    for t in &req.topics {
        *counts.entry(t.name.0.to_string()).or_default() += 1;
    }
    // Kafka answers a repeated topic once, with INVALID_REQUEST, and sends the rest to its
    // controller. With its timeout already over (timeout_ms <= 0) that call fails and every
    // entry, each copy of a repeated one too, gets REQUEST_TIMED_OUT; when nothing is left
    // for the controller (only repeats) there is no call to time out.
    let expired = req.timeout_ms <= 0 && counts.values().any(|n| *n == 1);
    let mut answered = std::collections::HashSet::new();
    let topics: Vec<_> = req
        .topics
        .into_iter()
        .filter(|t| expired || answered.insert(t.name.0.to_string()))
        .collect();
    // Per topic: an immediate error, or its index in the controller call.
    let mut slots: Vec<Result<usize, ControllerError>> = Vec::with_capacity(topics.len());
    let mut asks: Vec<(String, i32, Vec<Vec<i32>>)> = Vec::new();
    for t in &topics {
        let name = t.name.0.to_string();
        if expired {
            // Kafka's controller answers it without a message.
            slots.push(Err(ControllerError::bare(ErrorCode::RequestTimedOut)));
            continue;
        }
        if counts.get(&name).copied().unwrap_or(0) > 1 {
            slots.push(Err(ControllerError::new(
                ErrorCode::InvalidRequest,
                format!("Duplicate topic {name} in the request."),
            )));
            continue;
        }
        // An empty (not null) assignment list adds no partitions' replicas: Kafka refuses it.
        if let (Some(assignments), Some(topic)) = (&t.assignments, image.topic(&name)) {
            let added = usize::try_from(t.count)
                .unwrap_or(0)
                .saturating_sub(topic.partitions.len());
            if added > 0 && assignments.is_empty() {
                slots.push(Err(ControllerError::new(
                    ErrorCode::InvalidReplicaAssignment,
                    format!("Attempted to add {added} additional partition(s), but only 0 assignment(s) were specified."),
                )));
                continue;
            }
        }
        let assignment = t
            .assignments
            .as_ref()
            .map(|a| {
                a.iter()
                    .map(|x| x.broker_ids.iter().map(|b| b.0).collect())
                    .collect()
            })
            .unwrap_or_default();
        slots.push(Ok(asks.len()));
        asks.push((name, t.count, assignment));
    }
    let (results, offset) = if asks.is_empty() {
        (Vec::new(), -1)
    } else {
        let count = asks.len();
        let request = Request::CreatePartitions {
            topics: asks,
            validate_only: req.validate_only,
            origin: Origin::Client,
            quota,
        };
        match submit(&state, request).await {
            (Ok(Reply::CreatePartitions(r)), offset) => (r, offset),
            (Ok(other), offset) => (vec![Err(unexpected(&other)); count], offset),
            (Err(e), offset) => (vec![Err(e); count], offset),
        }
    };
    let results = topics
        .into_iter()
        .zip(slots)
        .map(|(t, slot)| {
            let r = CreatePartitionsTopicResult::default().with_name(t.name);
            let result = match slot {
                Err(e) => Err(e),
                Ok(i) => results.get(i).cloned().unwrap_or_else(|| {
                    Err(ControllerError::new(
                        ErrorCode::UnknownServerError,
                        "no answer",
                    ))
                }),
            };
            match result {
                Ok(()) => r,
                Err(e) => r
                    .with_error_code(code(e.code))
                    .with_error_message(e.wire_message().map(str_bytes)),
            }
        })
        .collect();
    (
        CreatePartitionsResponse::default().with_results(results),
        offset,
    )
}

pub fn describe_log_dirs(
    state: &Arc<BrokerState>,
    req: DescribeLogDirsRequest,
    version: i16,
) -> DescribeLogDirsResponse {
    // A topic named twice asks for the partitions of both entries.
    let wanted: Option<HashMap<String, Vec<i32>>> = req.topics.map(|ts| {
        let mut m: HashMap<String, Vec<i32>> = HashMap::new();
        for t in ts {
            m.entry(t.topic.0.to_string())
                .or_default()
                .extend(t.partitions);
        }
        m
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

pub async fn init_producer_id(
    state: Arc<BrokerState>,
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
    match state.allocate_producer_id().await {
        Ok(id) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(e) => fail(e),
    }
}
