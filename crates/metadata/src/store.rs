//! The controller's side of metadata: validated changes written to the log, then applied.

use crate::image::{format_id, is_internal_topic, MetadataImage, TopicImage};
use crate::log::MetadataLog;
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
        })
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

    /// Creates a topic (or only validates the request). Defaults for -1 come from the broker.
    pub fn create_topic(
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
