//! `moldau cluster info` (and `moldau cluster start`, in `cluster_start`).

use anyhow::Context;
use clap::Subcommand;
use serde_json::json;

use super::output::{print_json, Table};
use super::Common;

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Start a local cluster for development: N child `moldau server` processes (each a broker
    /// and a controller voter) with data and logs under one folder; prints the bootstrap list
    /// once every node sees the whole cluster; Ctrl-C stops them all.
    Start(super::cluster_start::StartArgs),
    /// Cluster id, active controller, brokers, topic count and the metadata quorum (each
    /// voter's log end and lag).
    Info {
        #[command(flatten)]
        common: Common,
    },
}

pub async fn run(cmd: ClusterCommand) -> anyhow::Result<()> {
    let common = match cmd {
        ClusterCommand::Start(args) => return super::cluster_start::run(args).await,
        ClusterCommand::Info { common } => common,
    };
    let admin = common.admin().await?;
    let info = admin.describe_cluster().await.context("describe cluster")?;
    // The active controller comes from the quorum: Metadata names the answering broker as the
    // controller (any broker forwards admin requests). Without an answer (an election is
    // running), the controller is shown as unknown (-1).
    let quorum = admin.describe_quorum().await;
    let controller_id = quorum.as_ref().map_or(-1, |q| q.leader_id);
    let user_topics = info.topics.values().filter(|t| !t.internal).count();
    let partitions: usize = info.topics.values().map(|t| t.partitions.len()).sum();
    if common.json {
        let brokers: Vec<_> = info
            .brokers
            .values()
            .map(|b| json!({"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}))
            .collect();
        print_json(&json!({
            "cluster_id": info.cluster_id,
            "controller_id": controller_id,
            "brokers": brokers,
            "quorum": match &quorum {
                Ok(q) => json!({
                    "leader_id": q.leader_id,
                    "leader_epoch": q.leader_epoch,
                    "high_watermark": q.high_watermark,
                    "voters": q.voters.iter().map(|v| json!({
                        "node_id": v.node_id,
                        "log_end_offset": v.log_end_offset,
                        "lag": v.lag,
                    })).collect::<Vec<_>>(),
                }),
                Err(e) => json!({"error": e.to_string()}),
            },
            "topics": user_topics,
            "partitions": partitions,
        }))?;
        return Ok(());
    }
    println!(
        "CLUSTER     {}",
        info.cluster_id.as_deref().unwrap_or("(unknown)")
    );
    println!("CONTROLLER  {controller_id}");
    println!("TOPICS      {user_topics} ({partitions} partitions)");
    println!();
    let mut table = Table::new(&["ID", "HOST", "PORT", "RACK"]);
    for b in info.brokers.values() {
        let id = if b.node_id == controller_id {
            format!("{}*", b.node_id)
        } else {
            b.node_id.to_string()
        };
        table.row(vec![
            id,
            b.host.clone(),
            b.port.to_string(),
            b.rack.clone().unwrap_or_default(),
        ]);
    }
    table.print()?;
    println!();
    match quorum {
        Ok(q) => {
            println!(
                "QUORUM      leader {} epoch {} high watermark {}",
                q.leader_id, q.leader_epoch, q.high_watermark
            );
            let mut table = Table::new(&["VOTER", "LOG END", "LAG"]);
            for v in &q.voters {
                table.row(vec![
                    v.node_id.to_string(),
                    v.log_end_offset.to_string(),
                    v.lag.to_string(),
                ]);
            }
            table.print()
        }
        Err(e) => {
            println!("QUORUM      unavailable: {e}");
            Ok(())
        }
    }
}
