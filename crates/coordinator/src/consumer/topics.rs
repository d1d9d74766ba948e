//! The coordinator's view of the cluster's topics (id, partition count, racks of each
//! partition's replicas), handed in by the runtime whenever the metadata image changes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use model::TopicId;

/// One topic as consumer groups see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicInfo {
    pub id: TopicId,
    pub name: String,
    pub partitions: i32,
    /// The racks of the brokers holding each partition's replicas, sorted (empty when the
    /// brokers have no `broker.rack`). Indexed by partition; may be shorter than `partitions`.
    pub racks: Vec<Vec<String>>,
    /// Internal topics (`__consumer_offsets`...); informational (as in Kafka, a subscription
    /// regex that matches one gets it).
    pub internal: bool,
}

impl TopicInfo {
    /// The racks of one partition (empty when unknown).
    pub fn racks_of(&self, partition: i32) -> &[String] {
        usize::try_from(partition)
            .ok()
            .and_then(|p| self.racks.get(p))
            .map_or(&[], Vec::as_slice)
    }
}

/// Every topic of the cluster, by name and by id. Cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct TopicsImage {
    by_name: Arc<BTreeMap<String, Arc<TopicInfo>>>,
    by_id: Arc<HashMap<TopicId, Arc<TopicInfo>>>,
}

impl TopicsImage {
    pub fn new(topics: impl IntoIterator<Item = TopicInfo>) -> Self {
        let mut by_name = BTreeMap::new();
        let mut by_id = HashMap::new();
        for t in topics {
            let t = Arc::new(t);
            by_id.insert(t.id, t.clone());
            by_name.insert(t.name.clone(), t);
        }
        TopicsImage {
            by_name: Arc::new(by_name),
            by_id: Arc::new(by_id),
        }
    }

    pub fn by_name(&self, name: &str) -> Option<&TopicInfo> {
        self.by_name.get(name).map(|t| &**t)
    }

    pub fn by_id(&self, id: &TopicId) -> Option<&TopicInfo> {
        self.by_id.get(id).map(|t| &**t)
    }

    /// Every topic, ordered by name.
    pub fn iter(&self) -> impl Iterator<Item = &TopicInfo> {
        self.by_name.values().map(|t| &**t)
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The names of the topics that differ between two images (added, removed, or with a
    /// new id, partition count or racks).
    pub fn changed_names(&self, other: &TopicsImage) -> Vec<String> {
        let mut changed = Vec::new();
        for (name, t) in self.by_name.iter() {
            if other.by_name.get(name).is_none_or(|o| o != t) {
                changed.push(name.clone());
            }
        }
        for name in other.by_name.keys() {
            if !self.by_name.contains_key(name) {
                changed.push(name.clone());
            }
        }
        changed
    }
}
