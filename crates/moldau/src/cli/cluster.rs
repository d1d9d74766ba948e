//! `moldau cluster info`.

use anyhow::Context;
use clap::Subcommand;
use serde_json::json;

use super::output::{print_json, Table};
use super::Common;

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Cluster id, controller, brokers and topic count.
    Info {
        #[command(flatten)]
        common: Common,
    },
}

pub async fn run(cmd: ClusterCommand) -> anyhow::Result<()> {
    let ClusterCommand::Info { common } = cmd;
    let admin = common.admin().await?;
    let info = admin.describe_cluster().await.context("describe cluster")?;
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
            "controller_id": info.controller_id,
            "brokers": brokers,
            "topics": user_topics,
            "partitions": partitions,
        }))?;
        return Ok(());
    }
    println!(
        "CLUSTER     {}",
        info.cluster_id.as_deref().unwrap_or("(unknown)")
    );
    println!("CONTROLLER  {}", info.controller_id);
    println!("TOPICS      {user_topics} ({partitions} partitions)");
    println!();
    let mut table = Table::new(&["ID", "HOST", "PORT", "RACK"]);
    for b in info.brokers.values() {
        let id = if b.node_id == info.controller_id {
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
    table.print()
}
