//! What a node checks and prepares in its data dir before it starts: `meta.properties` (which
//! node and cluster the dir belongs to) and the one-time import of a wave-1 single-node
//! metadata log into the Raft log.

use crate::BrokerError;
use metadata::legacy::{FileMetadataLog, MetadataLog};
use quorum::disk::Disk;
use quorum::FileDisk;
use raft::eraftpb::{HardState, Snapshot};
use std::collections::BTreeMap;
use std::path::Path;

/// The directory (inside the data dir) of the metadata log, named as KRaft names it.
pub const METADATA_DIR: &str = "__cluster_metadata-0";
const META_PROPERTIES: &str = "meta.properties";
const LEGACY_LOG: &str = "metadata.log";

fn data_dir_err(path: &Path, source: std::io::Error) -> BrokerError {
    BrokerError::DataDir {
        path: path.display().to_string(),
        source,
    }
}

/// The identity recorded in `<data>/meta.properties`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaProperties {
    pub node_id: Option<i32>,
    pub cluster_id: Option<String>,
}

/// Reads `meta.properties` (absent: an empty identity).
pub fn read_meta(data_dir: &Path) -> Result<MetaProperties, BrokerError> {
    let path = data_dir.join(META_PROPERTIES);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(MetaProperties::default()),
        Err(e) => return Err(data_dir_err(&path, e)),
    };
    let props: BTreeMap<&str, &str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    Ok(MetaProperties {
        node_id: props.get("node.id").and_then(|v| v.parse().ok()),
        cluster_id: props
            .get("cluster.id")
            .map(|s| s.to_string())
            .filter(|s| !s.is_empty()),
    })
}

/// Writes `meta.properties` (atomically).
pub fn write_meta(data_dir: &Path, node_id: i32, cluster_id: &str) -> Result<(), BrokerError> {
    let path = data_dir.join(META_PROPERTIES);
    let tmp = data_dir.join(format!("{META_PROPERTIES}.tmp"));
    let text = format!(
        "# Written by moldau: the node and cluster this data directory belongs to.\nversion=1\nnode.id={node_id}\ncluster.id={cluster_id}\n"
    );
    std::fs::write(&tmp, text).map_err(|e| data_dir_err(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| data_dir_err(&path, e))?;
    Ok(())
}

/// Checks the data dir belongs to this node (and cluster, when one is configured).
pub fn check_identity(
    data_dir: &Path,
    node_id: i32,
    cluster_id: Option<&str>,
) -> Result<MetaProperties, BrokerError> {
    let meta = read_meta(data_dir)?;
    if let Some(stored) = meta.node_id {
        if stored != node_id {
            return Err(BrokerError::Identity(format!(
                "node.id is {node_id} but the data dir {} belongs to node {stored} (its meta.properties says so)",
                data_dir.display()
            )));
        }
    }
    if let (Some(stored), Some(configured)) = (&meta.cluster_id, cluster_id) {
        if stored != configured {
            return Err(BrokerError::Identity(format!(
                "cluster.id is {configured} but the data dir {} belongs to cluster {stored}",
                data_dir.display()
            )));
        }
    }
    Ok(meta)
}

/// Imports a wave-1 `metadata.log` into a new Raft log once: its image becomes the log's first
/// snapshot (index 1, term 1) and the old file is kept as `metadata.log.imported`. Only a
/// one-voter quorum may import (the other voters would not have the snapshot).
pub fn import_legacy(
    metadata_dir: &Path,
    node_id: u64,
    voters: &[u64],
) -> Result<bool, BrokerError> {
    let legacy = metadata_dir.join(LEGACY_LOG);
    if !legacy.exists() || FileDisk::exists(metadata_dir) {
        return Ok(false);
    }
    if voters != [node_id] {
        return Err(BrokerError::Identity(format!(
            "{} holds single-node metadata from an older moldau; start this node once as a one-voter quorum (no controller.quorum.voters) to import it, then grow the cluster",
            legacy.display()
        )));
    }
    let mut log = FileMetadataLog::open(metadata_dir)?;
    let records = log.replay()?;
    let snapshot_records = metadata::legacy::import::import(&records);
    let mut snap = Snapshot {
        data: metadata::encode_batch(&snapshot_records).into(),
        ..Default::default()
    };
    let meta = snap.mut_metadata();
    meta.index = 1;
    meta.term = 1;
    meta.mut_conf_state().voters = voters.to_vec();
    let mut disk = FileDisk::new(metadata_dir);
    let quorum_err = |e: quorum::DiskError| BrokerError::Quorum(e.to_string());
    disk.save_voters(voters).map_err(quorum_err)?;
    disk.save_hard_state(&HardState {
        term: 1,
        vote: 0,
        commit: 1,
        ..Default::default()
    })
    .map_err(quorum_err)?;
    disk.save_snapshot(&snap).map_err(quorum_err)?;
    disk.sync().map_err(quorum_err)?;
    let done = metadata_dir.join(format!("{LEGACY_LOG}.imported"));
    std::fs::rename(&legacy, &done).map_err(|e| data_dir_err(&legacy, e))?;
    tracing::info!(
        records = records.len(),
        from = %legacy.display(),
        kept_as = %done.display(),
        "imported single-node metadata into the metadata quorum's log"
    );
    Ok(true)
}
