//! One-time import of a wave-1 single-node metadata log into the new metadata image.
//!
//! The legacy records are replayed into the legacy image (the exact wave-1 semantics), which is
//! then translated into new records: a snapshot the Raft log starts from.

use super::image::MetadataImage as LegacyImage;
use super::record::MetadataRecord as LegacyRecord;
use crate::image::{format_id, MetadataImage};
use crate::record::{Endpoint, MetadataRecord, PartitionRegistration};

/// The records of a snapshot equivalent to a legacy log. Brokers are imported fenced (they
/// register again when they start); partitions keep their replicas, leader, ISR and epoch.
pub fn import(legacy: &[LegacyRecord]) -> Vec<MetadataRecord> {
    let mut image = LegacyImage::empty();
    for (i, r) in legacy.iter().enumerate() {
        image.apply(i as i64, r);
    }
    let mut out = Vec::new();
    if !image.cluster_id.is_empty() {
        out.push(MetadataRecord::ClusterId {
            cluster_id: image.cluster_id.clone(),
        });
    }
    for (epoch, b) in image.brokers.values().enumerate() {
        out.push(MetadataRecord::RegisterBroker {
            node_id: b.node_id,
            incarnation_id: String::new(),
            broker_epoch: epoch as i64 + 1,
            endpoints: vec![Endpoint {
                name: "PLAINTEXT".into(),
                host: b.host.clone(),
                port: b.port,
                security_protocol: "PLAINTEXT".into(),
            }],
            rack: b.rack.clone(),
            fenced: true,
        });
    }
    for t in image.topics.values() {
        let topic_id = format_id(t.id);
        out.push(MetadataRecord::Topic {
            name: t.name.to_string(),
            topic_id: topic_id.clone(),
        });
        for (i, p) in t.partitions.iter().enumerate() {
            let mut registration = PartitionRegistration::new(p.replicas.clone(), p.leader);
            registration.isr = p.isr.clone();
            registration.leader_epoch = p.leader_epoch;
            out.push(MetadataRecord::Partition {
                topic_id: topic_id.clone(),
                partition: i as i32,
                registration,
            });
        }
        for (k, v) in &t.configs {
            out.push(MetadataRecord::TopicConfig {
                topic_id: topic_id.clone(),
                key: k.clone(),
                value: Some(v.clone()),
            });
        }
    }
    for (group, configs) in &image.group_configs {
        for (k, v) in configs {
            out.push(MetadataRecord::GroupConfig {
                group: group.clone(),
                key: k.clone(),
                value: Some(v.clone()),
            });
        }
    }
    if image.next_producer_id > 0 {
        out.push(MetadataRecord::ProducerIds {
            broker_id: -1,
            broker_epoch: -1,
            next_producer_id: image.next_producer_id,
        });
    }
    out
}

/// The image a legacy log describes (see [`import`]).
pub fn import_image(legacy: &[LegacyRecord], offset: i64) -> MetadataImage {
    MetadataImage::from_snapshot(offset, &import(legacy))
}
