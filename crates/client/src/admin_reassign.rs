//! Partition reassignment administration (what `kafka-reassign-partitions.sh` sends):
//! AlterPartitionReassignments / ListPartitionReassignments (APIs 45/46, KIP-455).

use std::collections::BTreeMap;

use protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, ListPartitionReassignmentsRequest,
};

use crate::admin::Admin;
use crate::cluster::topic_name;
use crate::consumer::TopicPartition;
use crate::error::{Error, Result};

/// A reassignment in progress, as ListPartitionReassignments describes it: the replica set
/// (target + the replicas being removed), the replicas being added and being removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OngoingReassignment {
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

/// Groups partitions by topic, in order.
fn by_topic<T: Clone>(items: &[(TopicPartition, T)]) -> BTreeMap<String, Vec<(i32, T)>> {
    let mut out: BTreeMap<String, Vec<(i32, T)>> = BTreeMap::new();
    for (tp, v) in items {
        out.entry(tp.topic.to_string())
            .or_default()
            .push((tp.partition, v.clone()));
    }
    out
}

impl Admin {
    /// Starts (a replica list) or cancels (`None`) reassignments; one result per partition.
    /// The broker's own refusal of the whole request (NOT_CONTROLLER, a timeout) is the
    /// error of every partition.
    pub async fn alter_partition_reassignments(
        &self,
        targets: &[(TopicPartition, Option<Vec<i32>>)],
    ) -> Result<Vec<(TopicPartition, Result<()>)>> {
        let topics = by_topic(targets)
            .into_iter()
            .map(|(name, parts)| {
                ReassignableTopic::default()
                    .with_name(topic_name(&name))
                    .with_partitions(
                        parts
                            .into_iter()
                            .map(|(p, r)| {
                                ReassignablePartition::default()
                                    .with_partition_index(p)
                                    .with_replicas(r.map(|r| r.into_iter().map(BrokerId).collect()))
                            })
                            .collect(),
                    )
            })
            .collect();
        let req = AlterPartitionReassignmentsRequest::default()
            .with_timeout_ms(self.broker_timeout_ms())
            .with_allow_replication_factor_change(true)
            .with_topics(topics);
        let resp = self.client().send_controller(&req).await?;
        let mut out = Vec::new();
        for t in &resp.responses {
            for p in &t.partitions {
                let tp = TopicPartition::new(t.name.0.as_str(), p.partition_index);
                let r = Error::check_msg(resp.error_code, resp.error_message.as_deref())
                    .and_then(|()| Error::check_msg(p.error_code, p.error_message.as_deref()));
                out.push((tp, r));
            }
        }
        Ok(out)
    }

    /// The reassignments in progress: all of them (`None`), or those of these partitions.
    pub async fn list_partition_reassignments(
        &self,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<BTreeMap<TopicPartition, OngoingReassignment>> {
        let topics = partitions.map(|ps| {
            let items: Vec<(TopicPartition, ())> = ps.iter().map(|tp| (tp.clone(), ())).collect();
            by_topic(&items)
                .into_iter()
                .map(|(name, parts)| {
                    ListPartitionReassignmentsTopics::default()
                        .with_name(topic_name(&name))
                        .with_partition_indexes(parts.into_iter().map(|(p, ())| p).collect())
                })
                .collect()
        });
        let req = ListPartitionReassignmentsRequest::default()
            .with_timeout_ms(self.broker_timeout_ms())
            .with_topics(topics);
        let resp = self.client().send_controller(&req).await?;
        Error::check_msg(resp.error_code, resp.error_message.as_deref())?;
        let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
        let mut out = BTreeMap::new();
        for t in &resp.topics {
            for p in &t.partitions {
                out.insert(
                    TopicPartition::new(t.name.0.as_str(), p.partition_index),
                    OngoingReassignment {
                        replicas: ids(&p.replicas),
                        adding: ids(&p.adding_replicas),
                        removing: ids(&p.removing_replicas),
                    },
                );
            }
        }
        Ok(out)
    }
}
