//! Transaction administration (what `kafka-transactions.sh` does): list transactions on every
//! broker, describe transactional ids at their coordinator, describe the producers a
//! partition knows, and abort a hanging transaction by writing its ABORT marker on the
//! partition's leader.

use protocol::messages::describe_producers_request::TopicRequest;
use protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use protocol::messages::{
    DescribeProducersRequest, DescribeTransactionsRequest, ListTransactionsRequest, ProducerId,
    TransactionalId, WriteTxnMarkersRequest,
};
use protocol::StrBytes;

use crate::admin::Admin;
use crate::cluster::topic_name;
use crate::error::{Error, Result};
use crate::group::find_coordinator_of;

/// A transactional id as ListTransactions shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionListing {
    pub transactional_id: String,
    pub producer_id: i64,
    /// Kafka's state name: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
    /// CompleteAbort, ...
    pub state: String,
    /// The coordinator that reported it.
    pub coordinator: i32,
}

/// A transactional id's state at its coordinator (DescribeTransactions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionDescription {
    pub transactional_id: String,
    pub coordinator: i32,
    pub state: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    /// When the open transaction started (ms since the epoch), -1 when none.
    pub start_time_ms: i64,
    /// The partitions of the open transaction (while preparing: those still without their
    /// marker).
    pub partitions: Vec<(String, i32)>,
}

/// A producer a partition knows (DescribeProducers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerDescription {
    pub producer_id: i64,
    pub producer_epoch: i32,
    pub last_sequence: i32,
    pub last_timestamp: i64,
    pub coordinator_epoch: i32,
    /// First offset of its open transaction on this partition, -1 when none.
    pub current_transaction_start_offset: i64,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

impl Admin {
    /// Every transactional id of every broker, optionally only those in `states`.
    pub async fn list_transactions(&self, states: &[String]) -> Result<Vec<TransactionListing>> {
        let client = self.client();
        client.refresh_metadata(Some(&[]), false).await?;
        let mut out = Vec::new();
        for id in client.brokers().keys() {
            let req = ListTransactionsRequest::default()
                .with_state_filters(states.iter().map(|x| s(x)).collect())
                .with_duration_filter(-1);
            let resp = client.send_to(*id, &req).await?;
            Error::check(resp.error_code)?;
            out.extend(resp.transaction_states.iter().map(|t| TransactionListing {
                transactional_id: t.transactional_id.0.to_string(),
                producer_id: t.producer_id.0,
                state: t.transaction_state.to_string(),
                coordinator: *id,
            }));
        }
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        Ok(out)
    }

    /// The state of transactional ids, each asked of its coordinator.
    pub async fn describe_transactions(
        &self,
        ids: &[String],
    ) -> Result<Vec<TransactionDescription>> {
        let client = self.client();
        let mut out = Vec::new();
        for id in ids {
            let node = find_coordinator_of(client, id, 1).await?;
            let req = DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![TransactionalId(s(id))]);
            let resp = client.send_to(node, &req).await?;
            for t in &resp.transaction_states {
                Error::check(t.error_code)?;
                out.push(TransactionDescription {
                    transactional_id: t.transactional_id.0.to_string(),
                    coordinator: node,
                    state: t.transaction_state.to_string(),
                    producer_id: t.producer_id.0,
                    producer_epoch: t.producer_epoch,
                    timeout_ms: t.transaction_timeout_ms,
                    start_time_ms: t.transaction_start_time_ms,
                    partitions: t
                        .topics
                        .iter()
                        .flat_map(|td| td.partitions.iter().map(|p| (td.topic.0.to_string(), *p)))
                        .collect(),
                });
            }
        }
        Ok(out)
    }

    /// The producers the leader of `topic`-`partition` knows, with their open transactions.
    pub async fn describe_producers(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Vec<ProducerDescription>> {
        let client = self.client();
        let leader = client.leader_for(topic, partition).await?;
        let req = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
            .with_name(topic_name(topic))
            .with_partition_indexes(vec![partition])]);
        let resp = client.send_to(leader, &req).await?;
        let mut out = Vec::new();
        for t in &resp.topics {
            for p in &t.partitions {
                Error::check_msg(p.error_code, p.error_message.as_deref())?;
                out.extend(p.active_producers.iter().map(|a| ProducerDescription {
                    producer_id: a.producer_id.0,
                    producer_epoch: a.producer_epoch,
                    last_sequence: a.last_sequence,
                    last_timestamp: a.last_timestamp,
                    coordinator_epoch: a.coordinator_epoch,
                    current_transaction_start_offset: a.current_txn_start_offset,
                }));
            }
        }
        Ok(out)
    }

    /// Aborts a hanging transaction on one partition (Kafka's `Admin.abortTransaction`): writes
    /// an ABORT marker for the producer on the partition's leader, so the last stable offset
    /// moves past it. Use the epochs DescribeProducers reports.
    pub async fn abort_transaction(
        &self,
        topic: &str,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<()> {
        let client = self.client();
        let leader = client.leader_for(topic, partition).await?;
        let req =
            WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
                .with_producer_id(ProducerId(producer_id))
                .with_producer_epoch(producer_epoch)
                .with_transaction_result(false)
                .with_coordinator_epoch(coordinator_epoch)
                .with_topics(vec![WritableTxnMarkerTopic::default()
                    .with_name(topic_name(topic))
                    .with_partition_indexes(vec![partition])])]);
        let resp = client.send_to(leader, &req).await?;
        for m in &resp.markers {
            for t in &m.topics {
                for p in &t.partitions {
                    Error::check(p.error_code)?;
                }
            }
        }
        Ok(())
    }
}
