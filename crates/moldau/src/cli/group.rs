//! `moldau group list|describe|reset-offsets|delete`.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context};
use clap::Subcommand;
use client::TopicPartition;
use serde_json::json;

use super::output::{print_json, Table};
use super::Common;

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// List groups with their state and type (classic, or consumer for KIP-848 groups).
    List {
        #[command(flatten)]
        common: Common,
    },
    /// Show a group's state, members, assignments, committed offsets and lag; for
    /// consumer-protocol groups also the group epoch and each member's epoch and target.
    Describe {
        group: String,
        #[command(flatten)]
        common: Common,
    },
    /// Set a group's committed offsets (the group must have no active members).
    ResetOffsets {
        group: String,
        /// Topic to reset; repeatable. Default: every topic the group has offsets for.
        #[arg(long = "topic", short = 't')]
        topics: Vec<String>,
        #[arg(long, group = "to")]
        to_earliest: bool,
        #[arg(long, group = "to")]
        to_latest: bool,
        #[arg(long, group = "to", value_name = "OFFSET")]
        to_offset: Option<i64>,
        /// First offset at or after this timestamp (ms since the epoch).
        #[arg(long, group = "to", value_name = "MS")]
        to_timestamp: Option<i64>,
        /// Move every committed offset by N (negative: back).
        #[arg(long, group = "to", value_name = "N", allow_hyphen_values = true)]
        shift_by: Option<i64>,
        /// Show the new offsets without committing them.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Delete groups (they must be empty).
    Delete {
        #[arg(required = true)]
        groups: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
}

pub async fn run(cmd: GroupCommand) -> anyhow::Result<()> {
    match cmd {
        GroupCommand::List { common } => {
            let admin = common.admin().await?;
            let groups = admin.list_groups().await.context("list groups")?;
            if common.json {
                print_json(&json!(groups
                    .iter()
                    .map(|g| json!({"group": g.group_id, "state": g.state, "protocol_type": g.protocol_type,
                        "type": g.group_type}))
                    .collect::<Vec<_>>()))?;
            } else {
                let mut t = Table::new(&["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"]);
                for g in groups {
                    t.row(vec![g.group_id, g.group_type, g.state, g.protocol_type]);
                }
                t.print()?;
            }
        }
        GroupCommand::Describe { group, common } => describe(&common, &group).await?,
        GroupCommand::ResetOffsets {
            group,
            topics,
            to_earliest,
            to_latest,
            to_offset,
            to_timestamp,
            shift_by,
            dry_run,
            common,
        } => {
            let admin = common.admin().await?;
            let committed = admin
                .list_group_offsets(&group, None)
                .await
                .with_context(|| format!("fetch offsets of group {group}"))?;
            let mut tps: BTreeSet<TopicPartition> = BTreeSet::new();
            if topics.is_empty() {
                tps.extend(committed.keys().cloned());
                if tps.is_empty() {
                    bail!("group {group} has no committed offsets; name topics with --topic");
                }
            } else {
                let info = admin
                    .describe_topics(&topics)
                    .await
                    .context("describe topics")?;
                for t in info {
                    tps.extend(
                        t.partitions
                            .iter()
                            .map(|p| TopicPartition::new(&t.name, p.partition)),
                    );
                }
            }
            let tps: Vec<TopicPartition> = tps.into_iter().collect();
            let q = |ts: i64| tps.iter().map(|tp| (tp.clone(), ts)).collect::<Vec<_>>();
            let low = admin
                .list_offsets(&q(-2))
                .await
                .context("list start offsets")?;
            let high = admin
                .list_offsets(&q(-1))
                .await
                .context("list end offsets")?;
            let mut target: BTreeMap<TopicPartition, i64> = BTreeMap::new();
            if to_earliest {
                target = low.clone();
            } else if to_latest {
                target = high.clone();
            } else if let Some(o) = to_offset {
                target = tps.iter().map(|tp| (tp.clone(), o)).collect();
            } else if let Some(ts) = to_timestamp {
                let found = admin
                    .list_offsets(&q(ts))
                    .await
                    .context("look up offsets by time")?;
                for tp in &tps {
                    let o = found.get(tp).copied().filter(|o| *o >= 0);
                    target.insert(tp.clone(), o.or(high.get(tp).copied()).unwrap_or(0));
                }
            } else if let Some(n) = shift_by {
                for tp in &tps {
                    let base = committed
                        .get(tp)
                        .copied()
                        .or(low.get(tp).copied())
                        .unwrap_or(0);
                    target.insert(tp.clone(), base + n);
                }
            } else {
                bail!("say where to: --to-earliest, --to-latest, --to-offset N, --to-timestamp MS or --shift-by N");
            }
            // Clamp into each partition's [log start, end].
            for (tp, o) in target.iter_mut() {
                let lo = low.get(tp).copied().unwrap_or(0);
                let hi = high.get(tp).copied().unwrap_or(i64::MAX);
                *o = (*o).clamp(lo, hi.max(lo));
            }
            if !dry_run {
                admin
                    .alter_group_offsets(&group, &target)
                    .await
                    .with_context(|| format!("commit new offsets for group {group}"))?;
            }
            if common.json {
                print_json(&json!({
                    "group": group,
                    "applied": !dry_run,
                    "offsets": target.iter().map(|(tp, o)| json!({"topic": &*tp.topic, "partition": tp.partition,
                        "previous": committed.get(tp), "offset": o})).collect::<Vec<_>>(),
                }))?;
            } else {
                let mut t = Table::new(&["TOPIC", "PARTITION", "PREVIOUS", "NEW"]);
                for (tp, o) in &target {
                    t.row(vec![
                        tp.topic.to_string(),
                        tp.partition.to_string(),
                        committed.get(tp).map_or("-".into(), i64::to_string),
                        o.to_string(),
                    ]);
                }
                t.print()?;
                if dry_run {
                    println!("(dry run: nothing committed)");
                }
            }
        }
        GroupCommand::Delete { groups, common } => {
            let admin = common.admin().await?;
            let results = admin
                .delete_groups(&groups)
                .await
                .context("delete groups")?;
            let mut failed = Vec::new();
            for (g, r) in &results {
                match r {
                    Ok(()) if !common.json => println!("deleted group {g}"),
                    Ok(()) => {}
                    Err(e) => failed.push(format!("{g}: {e}")),
                }
            }
            if common.json {
                print_json(&json!(results
                    .iter()
                    .map(|(g, r)| json!({"group": g, "deleted": r.is_ok(), "error": r.as_ref().err().map(|e| e.to_string())}))
                    .collect::<Vec<_>>()))?;
            }
            if !failed.is_empty() {
                bail!("delete groups: {}", failed.join("; "));
            }
        }
    }
    Ok(())
}

async fn describe(common: &Common, group: &str) -> anyhow::Result<()> {
    let admin = common.admin().await?;
    let desc = admin
        .describe_groups(&[group.to_owned()])
        .await
        .with_context(|| format!("describe group {group}"))?;
    let Some(d) = desc.into_iter().next() else {
        bail!("group {group} not found");
    };
    let committed = admin
        .list_group_offsets(group, None)
        .await
        .with_context(|| format!("fetch offsets of group {group}"))?;
    let mut owner: BTreeMap<TopicPartition, usize> = BTreeMap::new();
    for (i, m) in d.members.iter().enumerate() {
        for tp in &m.assignment {
            owner.insert(tp.clone(), i);
        }
    }
    let tps: BTreeSet<TopicPartition> = committed.keys().chain(owner.keys()).cloned().collect();
    let q: Vec<_> = tps.iter().map(|tp| (tp.clone(), -1)).collect();
    let ends = admin.list_offsets(&q).await.unwrap_or_default();
    let rows: Vec<_> = tps
        .iter()
        .map(|tp| {
            let cur = committed.get(tp).copied();
            let end = ends.get(tp).copied();
            let lag = match (cur, end) {
                (Some(c), Some(e)) => Some((e - c).max(0)),
                (None, Some(e)) => Some(e),
                _ => None,
            };
            let m = owner.get(tp).map(|&i| &d.members[i]);
            (tp, cur, end, lag, m)
        })
        .collect();
    let total_lag: i64 = rows.iter().filter_map(|r| r.3).sum();
    let behind: Vec<(TopicPartition, i64)> = rows
        .iter()
        .filter(|r| r.3.is_some_and(|l| l > 0))
        .filter_map(|r| r.1.map(|c| (r.0.clone(), c)))
        .collect();
    let ages = lag_seconds(common, &behind).await;
    let age = |tp: &TopicPartition, lag: Option<i64>| -> Option<f64> {
        match lag {
            Some(0) => Some(0.0),
            _ => ages.get(tp).copied(),
        }
    };
    if common.json {
        print_json(&json!({
            "group": d.group_id,
            "type": d.group_type,
            "state": d.state,
            "protocol_type": d.protocol_type,
            "protocol": d.protocol,
            "group_epoch": d.group_epoch,
            "assignment_epoch": d.assignment_epoch,
            "members": d.members.iter().map(|m| json!({
                "member_id": m.member_id, "group_instance_id": m.group_instance_id,
                "client_id": m.client_id, "host": m.client_host,
                "member_epoch": m.member_epoch,
                "classic_protocol": m.classic,
                "subscribed_topics": m.subscribed_topics, "subscribed_regex": m.subscribed_regex,
                "assignment": m.assignment.iter().map(|tp| json!({"topic": &*tp.topic, "partition": tp.partition})).collect::<Vec<_>>(),
                "target_assignment": m.target_assignment.iter().map(|tp| json!({"topic": &*tp.topic, "partition": tp.partition})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "offsets": rows.iter().map(|(tp, cur, end, lag, m)| json!({
                "topic": &*tp.topic, "partition": tp.partition, "committed_offset": cur,
                "log_end_offset": end, "lag": lag, "lag_seconds": age(tp, *lag),
                "member_id": m.map(|m| m.member_id.clone()),
            })).collect::<Vec<_>>(),
            "total_lag": total_lag,
        }))?;
        return Ok(());
    }
    println!("GROUP        {}", d.group_id);
    println!("TYPE         {}", d.group_type);
    println!("STATE        {}", d.state);
    if d.group_type == "consumer" {
        println!("ASSIGNOR     {}", d.protocol);
        println!(
            "EPOCH        group {}, target assignment {}",
            d.group_epoch.unwrap_or(-1),
            d.assignment_epoch.unwrap_or(-1)
        );
    } else {
        println!("PROTOCOL     {} {}", d.protocol_type, d.protocol);
    }
    println!("MEMBERS      {}", d.members.len());
    println!("TOTAL-LAG    {total_lag}");
    println!();
    if d.group_type == "consumer" && !d.members.is_empty() {
        let list = |tps: &[TopicPartition]| {
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for tp in tps {
                by_topic.entry(&tp.topic).or_default().push(tp.partition);
            }
            let s: Vec<String> = by_topic
                .into_iter()
                .map(|(t, ps)| {
                    let ps: Vec<String> = ps.iter().map(i32::to_string).collect();
                    format!("{t}:{}", ps.join(","))
                })
                .collect();
            if s.is_empty() {
                "-".to_string()
            } else {
                s.join(" ")
            }
        };
        let mut t = Table::new(&[
            "MEMBER-ID",
            "EPOCH",
            "PROTOCOL",
            "CLIENT-ID",
            "ASSIGNMENT",
            "TARGET",
        ]);
        for m in &d.members {
            t.row(vec![
                m.member_id.clone(),
                m.member_epoch.map_or("-".into(), |e| e.to_string()),
                if m.classic { "classic" } else { "consumer" }.to_string(),
                m.client_id.clone(),
                list(&m.assignment),
                list(&m.target_assignment),
            ]);
        }
        t.print()?;
        println!();
    }
    let mut t = Table::new(&[
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "LAG-SECONDS",
        "MEMBER-ID",
        "CLIENT-ID",
        "HOST",
    ]);
    let show = |o: Option<i64>| o.map_or("-".to_owned(), |o| o.to_string());
    for (tp, cur, end, lag, m) in rows {
        t.row(vec![
            tp.topic.to_string(),
            tp.partition.to_string(),
            show(cur),
            show(end),
            show(lag),
            age(tp, lag).map_or("-".to_owned(), |s| format!("{s:.1}")),
            m.map_or("-".into(), |m| m.member_id.clone()),
            m.map_or("-".into(), |m| m.client_id.clone()),
            m.map_or("-".into(), |m| m.client_host.clone()),
        ]);
    }
    t.print()
}

/// How long ago the first uncommitted record of each partition was written (its timestamp:
/// the broker's append time on LogAppendTime topics, the producer's on CreateTime ones), in
/// seconds: one read at each committed offset. Partitions that return nothing within a few
/// seconds are left out (shown as `-`).
async fn lag_seconds(
    common: &Common,
    behind: &[(TopicPartition, i64)],
) -> BTreeMap<TopicPartition, f64> {
    let mut out = BTreeMap::new();
    if behind.is_empty() {
        return out;
    }
    let Ok(client) = common.client_config() else {
        return out;
    };
    let config = client::ConsumerConfig {
        client,
        ..client::ConsumerConfig::default()
    };
    let Ok(mut consumer) = client::Consumer::new(config).await else {
        return out;
    };
    consumer.assign(behind.iter().map(|(tp, _)| tp.clone()).collect());
    for (tp, committed) in behind {
        consumer.seek(tp, client::SeekTo::Offset(*committed));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while out.len() < behind.len() && std::time::Instant::now() < deadline {
        let Ok(records) = consumer.poll(std::time::Duration::from_millis(200)).await else {
            break;
        };
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        for r in records {
            let tp = TopicPartition::new(&r.topic, r.partition);
            if !out.contains_key(&tp) {
                out.insert(tp.clone(), (now_ms - r.timestamp).max(0) as f64 / 1000.0);
                consumer.pause(&[tp]);
            }
        }
    }
    out
}
