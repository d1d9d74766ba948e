//! The controller's side of metadata: validated changes written to the log, then applied.

use crate::image::{format_id, is_internal_topic, MetadataImage, TopicImage};
use crate::log::MetadataLog;
use crate::policy;
use crate::record::MetadataRecord;
use crate::MetadataError;
use model::{ErrorCode, NodeId, TopicConfig, TopicId};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

/// Producer ids are reserved from the log in blocks, so InitProducerId rarely writes.
const PRODUCER_ID_BLOCK: i64 = 1000;

/// A rejected controller operation: the Kafka error code and a message for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ControllerError {
    pub code: ErrorCode,
    pub message: String,
}

impl ControllerError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ControllerError {
        ControllerError {
            code,
            message: message.into(),
        }
    }
}

impl From<MetadataError> for ControllerError {
    fn from(e: MetadataError) -> Self {
        tracing::error!(error = %e, "metadata log write failed");
        ControllerError::new(ErrorCode::KafkaStorageError, e.to_string())
    }
}

/// A topic to create. `partitions` / `replication_factor` of -1 mean the broker default.
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

struct Writer {
    log: Box<dyn MetadataLog>,
    /// Producer ids reserved in the log but not yet handed out: `next..limit`.
    producer_ids: (i64, i64),
}

/// Owns the metadata log and the current image. Readers call [`MetadataStore::image`];
/// writers are serialised by an internal lock, and each write is durable before the new image
/// becomes visible.
pub struct MetadataStore {
    node_id: NodeId,
    /// Broker-level config keys, for validating topic overrides against synonyms.
    broker_props: BTreeMap<String, String>,
    writer: Mutex<Writer>,
    image: RwLock<Arc<MetadataImage>>,
    /// `max.broker.partitions`: checked before any topic or partition is created.
    max_broker_partitions: i64,
    /// Why the cap is what it is, when not simply the configured value (for the error).
    partition_cap_note: Option<String>,
}

impl std::fmt::Debug for MetadataStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataStore")
            .field("node_id", &self.node_id)
            .finish()
    }
}

impl MetadataStore {
    /// Replays the log into an image.
    pub fn open(
        mut log: Box<dyn MetadataLog>,
        node_id: NodeId,
        broker_props: BTreeMap<String, String>,
    ) -> Result<MetadataStore, MetadataError> {
        let mut image = MetadataImage::empty();
        for (i, r) in log.replay()?.iter().enumerate() {
            image.apply(i as i64, r);
        }
        let next = image.next_producer_id;
        Ok(MetadataStore {
            node_id,
            broker_props,
            writer: Mutex::new(Writer {
                log,
                producer_ids: (next, next),
            }),
            image: RwLock::new(Arc::new(image)),
            max_broker_partitions: i64::from(i32::MAX),
            partition_cap_note: None,
        })
    }

    /// Sets the partition cap (`max.broker.partitions`) enforced at creation.
    pub fn with_max_broker_partitions(mut self, max: i64) -> MetadataStore {
        self.max_broker_partitions = max.max(1);
        self
    }

    /// Sets the partition cap with the reason it is lower than configured (e.g. the
    /// open-file limit), which the refusal then names.
    pub fn with_partition_cap(mut self, max: i64, note: Option<String>) -> MetadataStore {
        self.max_broker_partitions = max.max(1);
        self.partition_cap_note = note;
        self
    }

    /// The current image.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn commit(
        &self,
        writer: &mut Writer,
        records: Vec<MetadataRecord>,
    ) -> Result<Arc<MetadataImage>, MetadataError> {
        if records.is_empty() {
            return Ok(self.image());
        }
        let last = writer.log.append(&records)?;
        let mut image = (*self.image()).clone();
        let first = last + 1 - records.len() as i64;
        for (i, r) in records.iter().enumerate() {
            image.apply(first + i as i64, r);
        }
        let image = Arc::new(image);
        *self.image.write().unwrap_or_else(|e| e.into_inner()) = image.clone();
        Ok(image)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the cluster id (if none yet) and this broker's registration (if changed).
    pub fn register(
        &self,
        cluster_id: Option<String>,
        host: &str,
        port: i32,
    ) -> Result<Arc<MetadataImage>, MetadataError> {
        let mut w = self.lock();
        let image = self.image();
        let mut records = Vec::new();
        if image.cluster_id.is_empty() {
            let id = cluster_id.unwrap_or_else(|| {
                // Kafka cluster ids are 22-character URL-safe base64 UUIDs; any unique string
                // works for clients, so a hex UUID prefix keeps it readable.
                uuid::Uuid::new_v4().simple().to_string()[..22].to_string()
            });
            records.push(MetadataRecord::ClusterId { cluster_id: id });
        }
        let registered = image.brokers.get(&self.node_id);
        if registered.map(|b| (b.host.as_str(), b.port)) != Some((host, port)) {
            records.push(MetadataRecord::RegisterBroker {
                node_id: self.node_id,
                host: host.to_string(),
                port,
                rack: None,
            });
        }
        self.commit(&mut w, records)
    }

    /// Creates a topic for a client (or only validates the request). Defaults for -1 come from
    /// the broker. Internal topic names are refused (see [`policy`]).
    pub fn create_topic(
        &self,
        topic: NewTopic,
        default_partitions: i32,
        default_replication_factor: i16,
        validate_only: bool,
    ) -> Result<Arc<TopicImage>, ControllerError> {
        policy::check_client_create(&topic.name)?;
        self.create_topic_inner(
            topic,
            default_partitions,
            default_replication_factor,
            validate_only,
        )
    }

    /// Creates an internal topic (`__consumer_offsets`...) with the settings the broker
    /// chose; only the broker calls this.
    pub fn create_internal_topic(
        &self,
        topic: NewTopic,
    ) -> Result<Arc<TopicImage>, ControllerError> {
        if !is_internal_topic(&topic.name) {
            return Err(ControllerError::new(
                ErrorCode::InvalidRequest,
                format!("{} is not an internal topic", topic.name),
            ));
        }
        self.create_topic_inner(topic, 1, 1, false)
    }

    /// Sets an internal topic's config overrides to exactly `configs` (the broker's startup
    /// check of internal topics); returns the overrides that were replaced or removed.
    pub fn reset_internal_topic_configs(
        &self,
        name: &str,
        configs: &BTreeMap<String, String>,
    ) -> Result<Vec<(String, Option<String>)>, ControllerError> {
        let mut w = self.lock();
        let image = self.image();
        let topic = existing_topic(&image, name)?;
        if !topic.is_internal() {
            return Err(ControllerError::new(
                ErrorCode::InvalidRequest,
                format!("{name} is not an internal topic"),
            ));
        }
        let id = format_id(topic.id);
        let mut records = Vec::new();
        let mut replaced = Vec::new();
        for (k, v) in configs {
            if topic.configs.get(k) != Some(v) {
                replaced.push((k.clone(), topic.configs.get(k).cloned()));
                records.push(MetadataRecord::SetTopicConfig {
                    topic_id: id.clone(),
                    key: k.clone(),
                    value: Some(v.clone()),
                });
            }
        }
        for (k, v) in &topic.configs {
            if !configs.contains_key(k) {
                replaced.push((k.clone(), Some(v.clone())));
                records.push(MetadataRecord::SetTopicConfig {
                    topic_id: id.clone(),
                    key: k.clone(),
                    value: None,
                });
            }
        }
        self.commit(&mut w, records)?;
        Ok(replaced)
    }

    fn create_topic_inner(
        &self,
        topic: NewTopic,
        default_partitions: i32,
        default_replication_factor: i16,
        validate_only: bool,
    ) -> Result<Arc<TopicImage>, ControllerError> {
        let mut w = self.lock();
        let image = self.image();
        model::ids::validate_topic_name(&topic.name)
            .map_err(|m| ControllerError::new(ErrorCode::InvalidTopicException, m))?;
        // The metadata log lives in `<data>/__cluster_metadata-0`, as in KRaft: a topic of
        // that name would share its directory.
        if topic.name == "__cluster_metadata" {
            return Err(ControllerError::new(
                ErrorCode::InvalidTopicException,
                "__cluster_metadata is reserved for the cluster metadata log",
            ));
        }
        if image.topics.contains_key(topic.name.as_str()) {
            return Err(ControllerError::new(
                ErrorCode::TopicAlreadyExists,
                format!("Topic '{}' already exists.", topic.name),
            ));
        }
        let partitions = if topic.partitions == -1 {
            default_partitions
        } else {
            topic.partitions
        };
        if partitions < 1 {
            return Err(ControllerError::new(
                ErrorCode::InvalidPartitions,
                "Number of partitions must be larger than 0.",
            ));
        }
        let rf = if topic.replication_factor == -1 {
            default_replication_factor
        } else {
            topic.replication_factor
        };
        let brokers = image.brokers.len().max(1) as i16;
        if rf < 1 || rf > brokers {
            return Err(ControllerError::new(
                ErrorCode::InvalidReplicationFactor,
                format!("Replication factor: {rf} larger than available brokers: {brokers}."),
            ));
        }
        for (k, v) in &topic.configs {
            TopicConfig::validate(k, v)
                .map_err(|e| ControllerError::new(ErrorCode::InvalidConfig, e.to_string()))?;
        }
        policy::check_partition_cap(
            &image,
            self.node_id,
            // Every partition gets a replica on this node (single node placement).
            i64::from(partitions),
            self.max_broker_partitions,
            self.partition_cap_note.as_deref(),
        )?;
        let topic_id = TopicId::random();
        let record = MetadataRecord::CreateTopic {
            name: topic.name.clone(),
            topic_id: format_id(topic_id),
            partitions,
            replicas: vec![self.node_id],
            configs: topic.configs.clone(),
        };
        if validate_only {
            let mut preview = MetadataImage::empty();
            preview.apply(0, &record);
            return preview
                .topic(&topic.name)
                .cloned()
                .ok_or_else(|| ControllerError::new(ErrorCode::UnknownServerError, "preview"));
        }
        let image = self.commit(&mut w, vec![record])?;
        image
            .topic(&topic.name)
            .cloned()
            .ok_or_else(|| ControllerError::new(ErrorCode::UnknownServerError, "topic vanished"))
    }

    /// Deletes a topic by name.
    pub fn delete_topic(&self, name: &str) -> Result<Arc<TopicImage>, ControllerError> {
        let mut w = self.lock();
        let image = self.image();
        let topic = existing_topic(&image, name)?;
        if is_internal_topic(name) {
            return Err(ControllerError::new(
                ErrorCode::InvalidTopicException,
                format!("Topic '{name}' is internal and cannot be deleted."),
            ));
        }
        self.commit(
            &mut w,
            vec![MetadataRecord::DeleteTopic {
                topic_id: format_id(topic.id),
            }],
        )?;
        Ok(topic)
    }

    /// Grows a topic to `count` partitions.
    pub fn create_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let mut w = self.lock();
        let image = self.image();
        let topic = existing_topic(&image, name)?;
        policy::check_client_alter(name, "partition count")?;
        let current = topic.partitions.len() as i32;
        if count < current {
            return Err(ControllerError::new(
                ErrorCode::InvalidPartitions,
                format!("The topic {name} currently has {current} partition(s); {count} would not be an increase."),
            ));
        }
        if count == current {
            return Err(ControllerError::new(
                ErrorCode::InvalidPartitions,
                format!("Topic already has {current} partition(s)."),
            ));
        }
        policy::check_partition_cap(
            &image,
            self.node_id,
            i64::from(count) - i64::from(current),
            self.max_broker_partitions,
            self.partition_cap_note.as_deref(),
        )?;
        if !validate_only {
            self.commit(
                &mut w,
                vec![MetadataRecord::CreatePartitions {
                    topic_id: format_id(topic.id),
                    partitions: count,
                }],
            )?;
        }
        Ok(())
    }

    /// Changes a topic's config overrides: `changes` maps keys to a new value or `None` to
    /// remove the override. With `replace_all`, overrides not named are removed (the legacy
    /// AlterConfigs semantics).
    pub fn alter_topic_configs(
        &self,
        name: &str,
        changes: &BTreeMap<String, Option<String>>,
        replace_all: bool,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let mut w = self.lock();
        let image = self.image();
        let topic = existing_topic(&image, name)?;
        policy::check_client_alter(name, "configs")?;
        let mut next = if replace_all {
            BTreeMap::new()
        } else {
            topic.configs.clone()
        };
        for (k, v) in changes {
            match v {
                Some(v) => {
                    TopicConfig::validate(k, v).map_err(|e| {
                        ControllerError::new(ErrorCode::InvalidConfig, e.to_string())
                    })?;
                    next.insert(k.clone(), v.clone());
                }
                None => {
                    if model::config::topic_config_def(k).is_none() {
                        return Err(ControllerError::new(
                            ErrorCode::InvalidConfig,
                            format!("Unknown topic config name: {k}"),
                        ));
                    }
                    next.remove(k);
                }
            }
        }
        TopicConfig::resolve(&self.broker_props, &next)
            .map_err(|e| ControllerError::new(ErrorCode::InvalidConfig, e.to_string()))?;
        if validate_only {
            return Ok(());
        }
        let id = format_id(topic.id);
        let mut records = Vec::new();
        for (k, v) in &next {
            if topic.configs.get(k) != Some(v) {
                records.push(MetadataRecord::SetTopicConfig {
                    topic_id: id.clone(),
                    key: k.clone(),
                    value: Some(v.clone()),
                });
            }
        }
        for k in topic.configs.keys() {
            if !next.contains_key(k) {
                records.push(MetadataRecord::SetTopicConfig {
                    topic_id: id.clone(),
                    key: k.clone(),
                    value: None,
                });
            }
        }
        self.commit(&mut w, records)?;
        Ok(())
    }

    /// Sets, removes (`None`) or, with `replace_all`, replaces the config overrides of a group
    /// (resource type GROUP). The group need not exist. The result is validated as a whole
    /// against the broker's `group.*` bounds (INVALID_CONFIG otherwise).
    pub fn alter_group_configs(
        &self,
        group: &str,
        changes: &BTreeMap<String, Option<String>>,
        replace_all: bool,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let mut w = self.lock();
        let image = self.image();
        let current = image.group_configs.get(group).cloned().unwrap_or_default();
        let mut next = if replace_all {
            BTreeMap::new()
        } else {
            current.clone()
        };
        for (k, v) in changes {
            if model::group_config::group_config_def(k).is_none() {
                return Err(ControllerError::new(
                    ErrorCode::InvalidConfig,
                    format!("Unknown group config name: {k}"),
                ));
            }
            match v {
                Some(v) => next.insert(k.clone(), v.clone()),
                None => next.remove(k),
            };
        }
        model::group_config::validate(&next, &self.broker_props)
            .map_err(|e| ControllerError::new(ErrorCode::InvalidConfig, e.to_string()))?;
        if validate_only {
            return Ok(());
        }
        let mut records = Vec::new();
        for (k, v) in &next {
            if current.get(k) != Some(v) {
                records.push(MetadataRecord::SetGroupConfig {
                    group: group.to_string(),
                    key: k.clone(),
                    value: Some(v.clone()),
                });
            }
        }
        for k in current.keys().filter(|k| !next.contains_key(*k)) {
            records.push(MetadataRecord::SetGroupConfig {
                group: group.to_string(),
                key: k.clone(),
                value: None,
            });
        }
        self.commit(&mut w, records)?;
        Ok(())
    }

    /// Hands out a new producer id; ids are reserved durably in blocks and never reused.
    pub fn allocate_producer_id(&self) -> Result<i64, ControllerError> {
        let mut w = self.lock();
        if w.producer_ids.0 >= w.producer_ids.1 {
            let start = self.image().next_producer_id.max(w.producer_ids.1);
            let limit = start + PRODUCER_ID_BLOCK;
            self.commit(
                &mut w,
                vec![MetadataRecord::ProducerIds {
                    next_producer_id: limit,
                }],
            )?;
            w.producer_ids = (start, limit);
        }
        let id = w.producer_ids.0;
        w.producer_ids.0 += 1;
        Ok(id)
    }
}

/// The named topic, or Kafka's UNKNOWN_TOPIC_OR_PARTITION.
fn existing_topic(image: &MetadataImage, name: &str) -> Result<Arc<TopicImage>, ControllerError> {
    image.topic(name).cloned().ok_or_else(|| {
        ControllerError::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("Topic '{name}' does not exist."),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::FileMetadataLog;

    fn open(dir: &std::path::Path) -> MetadataStore {
        let log = FileMetadataLog::open(dir).unwrap();
        MetadataStore::open(Box::new(log), 1, BTreeMap::new()).unwrap()
    }

    fn new_topic(name: &str, partitions: i32) -> NewTopic {
        NewTopic {
            name: name.into(),
            partitions,
            replication_factor: -1,
            configs: BTreeMap::new(),
        }
    }

    #[test]
    fn restart_restores_topics_configs_and_producer_ids() {
        let dir = tempfile::tempdir().unwrap();
        let (id, pid) = {
            let s = open(dir.path());
            s.register(None, "127.0.0.1", 9092).unwrap();
            let t = s.create_topic(new_topic("a", 3), 1, 1, false).unwrap();
            let mut c = BTreeMap::new();
            c.insert("retention.ms".to_string(), Some("1000".to_string()));
            s.alter_topic_configs("a", &c, false, false).unwrap();
            s.create_partitions("a", 5, false).unwrap();
            s.create_topic(new_topic("b", 1), 1, 1, false).unwrap();
            s.delete_topic("b").unwrap();
            (t.id, s.allocate_producer_id().unwrap())
        };
        let s = open(dir.path());
        let img = s.image();
        let a = img.topic("a").unwrap();
        assert_eq!(a.id, id);
        assert_eq!(a.partitions.len(), 5);
        assert_eq!(
            a.configs.get("retention.ms").map(String::as_str),
            Some("1000")
        );
        assert!(img.topic("b").is_none());
        assert_eq!(img.brokers[&1].port, 9092);
        assert!(!img.cluster_id.is_empty());
        assert!(s.allocate_producer_id().unwrap() > pid);
    }

    #[test]
    fn group_configs_are_validated_and_survive_restart() {
        let dir = tempfile::tempdir().unwrap();
        let set = |k: &str, v: Option<&str>| -> BTreeMap<String, Option<String>> {
            [(k.to_string(), v.map(str::to_string))]
                .into_iter()
                .collect()
        };
        {
            let s = open(dir.path());
            s.register(None, "h", 1).unwrap();
            s.alter_group_configs(
                "g",
                &set("consumer.session.timeout.ms", Some("50000")),
                false,
                false,
            )
            .unwrap();
            s.alter_group_configs(
                "g",
                &set("share.isolation.level", Some("read_committed")),
                false,
                false,
            )
            .unwrap();
            s.alter_group_configs("g", &set("share.isolation.level", None), false, false)
                .unwrap();
            let bad = |k: &str, v: &str| {
                s.alter_group_configs("g", &set(k, Some(v)), false, false)
                    .unwrap_err()
                    .code
            };
            assert_eq!(
                bad("consumer.session.timeout.ms", "1"),
                ErrorCode::InvalidConfig
            );
            assert_eq!(bad("no.such.config", "1"), ErrorCode::InvalidConfig);
            s.alter_group_configs(
                "h",
                &set("consumer.heartbeat.interval.ms", Some("6000")),
                true,
                true,
            )
            .unwrap();
        }
        let s = open(dir.path());
        let img = s.image();
        let g = &img.group_configs["g"];
        assert_eq!(g.len(), 1);
        assert_eq!(g["consumer.session.timeout.ms"], "50000");
        assert!(
            !img.group_configs.contains_key("h"),
            "validate_only wrote nothing"
        );
    }

    #[test]
    fn controller_validates_like_kafka() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path());
        s.register(None, "h", 1).unwrap();
        s.create_topic(new_topic("a", 1), 1, 1, false).unwrap();
        let code = |r: Result<Arc<TopicImage>, ControllerError>| r.unwrap_err().code;
        assert_eq!(
            code(s.create_topic(new_topic("a", 1), 1, 1, false)),
            ErrorCode::TopicAlreadyExists
        );
        assert_eq!(
            code(s.create_topic(new_topic("x", 0), 1, 1, false)),
            ErrorCode::InvalidPartitions
        );
        assert_eq!(
            code(s.create_topic(new_topic("a/b", 1), 1, 1, false)),
            ErrorCode::InvalidTopicException
        );
        let mut t = new_topic("y", 1);
        t.replication_factor = 3;
        assert_eq!(
            code(s.create_topic(t, 1, 1, false)),
            ErrorCode::InvalidReplicationFactor
        );
        let mut t = new_topic("z", 1);
        t.configs.insert("cleanup.policy".into(), "bogus".into());
        assert_eq!(
            code(s.create_topic(t, 1, 1, false)),
            ErrorCode::InvalidConfig
        );
        assert!(s.create_topic(new_topic("v", 2), 1, 1, true).is_ok());
        assert!(s.image().topic("v").is_none());
        assert_eq!(
            s.create_partitions("a", 1, false).unwrap_err().code,
            ErrorCode::InvalidPartitions
        );
    }

    #[test]
    fn internal_topics_belong_to_the_broker() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path());
        s.register(None, "h", 1).unwrap();
        let err = s
            .create_topic(new_topic("__consumer_offsets", 1), 1, 1, false)
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidRequest);
        assert_eq!(
            s.create_topic(new_topic("__transaction_state", 1), 1, 1, true)
                .unwrap_err()
                .code,
            ErrorCode::InvalidRequest
        );
        let mut t = new_topic("__consumer_offsets", 3);
        t.configs.insert("cleanup.policy".into(), "compact".into());
        s.create_internal_topic(t).unwrap();
        assert!(s.create_internal_topic(new_topic("user", 1)).is_err());
        let mut c = BTreeMap::new();
        c.insert("cleanup.policy".to_string(), Some("delete".to_string()));
        for replace_all in [false, true] {
            assert_eq!(
                s.alter_topic_configs("__consumer_offsets", &c, replace_all, false)
                    .unwrap_err()
                    .code,
                ErrorCode::PolicyViolation
            );
        }
        assert_eq!(
            s.create_partitions("__consumer_offsets", 5, false)
                .unwrap_err()
                .code,
            ErrorCode::PolicyViolation
        );
        let img = s.image();
        let t = img.topic("__consumer_offsets").unwrap();
        assert_eq!(t.partitions.len(), 3);
        assert_eq!(t.configs.get("cleanup.policy").unwrap(), "compact");
        // The startup check puts the broker's settings back.
        let mut want = BTreeMap::new();
        want.insert("cleanup.policy".to_string(), "compact".to_string());
        want.insert("segment.bytes".to_string(), "104857600".to_string());
        let replaced = s
            .reset_internal_topic_configs("__consumer_offsets", &want)
            .unwrap();
        assert_eq!(replaced, vec![("segment.bytes".to_string(), None)]);
        assert_eq!(s.image().topic("__consumer_offsets").unwrap().configs, want);
    }

    #[test]
    fn partition_cap_is_checked_before_anything_is_allocated() {
        let dir = tempfile::tempdir().unwrap();
        let log = FileMetadataLog::open(dir.path()).unwrap();
        let s = MetadataStore::open(Box::new(log), 1, BTreeMap::new())
            .unwrap()
            .with_max_broker_partitions(10);
        s.register(None, "h", 1).unwrap();
        s.create_topic(new_topic("a", 6), 1, 1, false).unwrap();
        let code = |r: Result<Arc<TopicImage>, ControllerError>| r.unwrap_err().code;
        assert_eq!(
            code(s.create_topic(new_topic("big", i32::MAX), 1, 1, true)),
            ErrorCode::PolicyViolation
        );
        assert_eq!(
            code(s.create_topic(new_topic("b", 5), 1, 1, false)),
            ErrorCode::PolicyViolation
        );
        // Defaults count too (auto-creation is no back door).
        assert_eq!(
            code(s.create_topic(new_topic("c", -1), 5, 1, false)),
            ErrorCode::PolicyViolation
        );
        assert_eq!(
            s.create_partitions("a", 11, false).unwrap_err().code,
            ErrorCode::PolicyViolation
        );
        s.create_partitions("a", 7, false).unwrap();
        s.create_topic(new_topic("b", 3), 1, 1, false).unwrap();
        assert_eq!(policy::partitions_on(&s.image(), 1), 10);
        assert_eq!(
            code(s.create_topic(new_topic("d", 1), 1, 1, false)),
            ErrorCode::PolicyViolation
        );
    }

    #[test]
    fn torn_tail_is_cut_and_prefix_kept() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = open(dir.path());
            s.register(None, "h", 1).unwrap();
            s.create_topic(new_topic("a", 1), 1, 1, false).unwrap();
        }
        let path = dir.path().join("metadata.log");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&[0, 0, 0, 50, 1, 2, 3]);
        std::fs::write(&path, &bytes).unwrap();
        let s = open(dir.path());
        assert!(s.image().topic("a").is_some());
        s.create_topic(new_topic("b", 1), 1, 1, false).unwrap();
        let s = open(dir.path());
        assert!(s.image().topic("b").is_some());
    }
}
