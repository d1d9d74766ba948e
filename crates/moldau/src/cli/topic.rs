//! `moldau topic create|list|describe|delete|alter-config|add-partitions|reassign`.

use anyhow::{bail, Context};
use clap::Subcommand;
use client::{ConfigOp, NewTopic, ResourceType, TopicPartition};
use serde_json::json;

use super::output::{print_json, Table};
use super::{parse_kv, Common};

#[derive(Subcommand, Debug)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        name: String,
        /// Partitions (default: the broker's num.partitions).
        #[arg(short = 'p', long, default_value_t = -1)]
        partitions: i32,
        /// Replication factor (default: the broker's default.replication.factor).
        #[arg(short = 'r', long, default_value_t = -1)]
        replication_factor: i16,
        /// Topic config, e.g. -c retention.ms=3600000; repeatable.
        #[arg(short = 'c', long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// List topics.
    List {
        /// Include internal topics such as __consumer_offsets.
        #[arg(long, short = 'i')]
        internal: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Show a topic's partitions (leader, replicas, ISR, offsets) and its non-default configs.
    Describe {
        name: String,
        /// Show every config, defaults included.
        #[arg(long, short = 'a')]
        all_configs: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Delete topics.
    Delete {
        #[arg(required = true)]
        names: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Change topic configs incrementally.
    AlterConfig {
        name: String,
        /// Set a config; repeatable.
        #[arg(long = "set", short = 's', value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Remove an override (back to the default); repeatable.
        #[arg(long = "delete", short = 'd', value_name = "KEY")]
        delete: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Move partitions between brokers, as kafka-reassign-partitions.sh does (its options, its JSON)
    ///
    /// A plan is Kafka's reassignment JSON, so files move between the two tools:
    ///   {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[3,2]}]}
    /// ("log_dirs" may be given, as Kafka writes it, but only with "any" entries).
    ///
    /// The usual round: --generate proposes a plan for --topics over --broker-list; --execute
    /// starts it (printing the current assignment, to save for a rollback), optionally with
    /// --throttle; --verify reports each partition and, once every one is complete, removes the
    /// throttles; --cancel stops the reassignments in progress (and removes the throttles);
    /// --list shows every reassignment in progress.
    ///
    /// --throttle BYTES (per second) sets what Kafka's tool sets: on every broker the moves
    /// involve, leader.replication.throttled.rate and follower.replication.throttled.rate; on
    /// each topic, leader.replication.throttled.replicas (the current replicas of the moving
    /// partitions) and follower.replication.throttled.replicas (the replicas being added). Only
    /// replicas that are not in sync are held back. --verify (once complete) and --cancel remove
    /// them, unless --preserve-throttles.
    #[command(verbatim_doc_comment)]
    Reassign(Box<super::reassign::ReassignArgs>),
    /// Add partitions to a topic.
    AddPartitions {
        name: String,
        /// How many partitions to add.
        #[arg(long, short = 'n', conflicts_with = "total")]
        num: Option<i32>,
        /// The new total number of partitions.
        #[arg(long)]
        total: Option<i32>,
        #[command(flatten)]
        common: Common,
    },
}

pub async fn run(cmd: TopicCommand) -> anyhow::Result<()> {
    match cmd {
        TopicCommand::Reassign(args) => super::reassign::run(*args).await?,
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            configs,
            common,
        } => {
            let admin = common.admin().await?;
            let mut t = NewTopic::new(&name, partitions);
            t.replication_factor = replication_factor;
            for c in &configs {
                let (k, v) = parse_kv(c)?;
                t = t.config(k, v);
            }
            admin
                .create_topic(t)
                .await
                .with_context(|| format!("create topic {name}"))?;
            if common.json {
                print_json(&json!({"topic": name, "created": true}))?;
            } else {
                println!("created topic {name}");
            }
        }
        TopicCommand::List { internal, common } => {
            let admin = common.admin().await?;
            let topics = admin.list_topics().await.context("list topics")?;
            let topics: Vec<_> = topics
                .into_iter()
                .filter(|t| internal || !t.internal)
                .collect();
            if common.json {
                let v: Vec<_> = topics
                    .iter()
                    .map(|t| {
                        json!({
                            "name": t.name,
                            "topic_id": t.topic_id,
                            "partitions": t.partitions.len(),
                            "replicas": t.partitions.first().map_or(0, |p| p.replicas.len()),
                            "internal": t.internal,
                        })
                    })
                    .collect();
                print_json(&json!(v))?;
            } else {
                let mut table = Table::new(&["NAME", "PARTITIONS", "REPLICAS"]);
                for t in &topics {
                    table.row(vec![
                        t.name.clone(),
                        t.partitions.len().to_string(),
                        t.partitions
                            .first()
                            .map_or(0, |p| p.replicas.len())
                            .to_string(),
                    ]);
                }
                table.print()?;
            }
        }
        TopicCommand::Describe {
            name,
            all_configs,
            common,
        } => describe(&common, &name, all_configs).await?,
        TopicCommand::Delete { names, common } => {
            let admin = common.admin().await?;
            let results = admin.delete_topics(&names).await.context("delete topics")?;
            let mut failed = Vec::new();
            for (n, r) in &results {
                match r {
                    Ok(()) if !common.json => println!("deleted topic {n}"),
                    Ok(()) => {}
                    Err(e) => failed.push(format!("{n}: {e}")),
                }
            }
            if common.json {
                print_json(&json!(results
                    .iter()
                    .map(|(n, r)| json!({"topic": n, "deleted": r.is_ok(),
                        "error": r.as_ref().err().map(|e| e.to_string())}))
                    .collect::<Vec<_>>()))?;
            }
            if !failed.is_empty() {
                bail!("delete topics: {}", failed.join("; "));
            }
        }
        TopicCommand::AlterConfig {
            name,
            set,
            delete,
            common,
        } => {
            if set.is_empty() && delete.is_empty() {
                bail!("nothing to change: give --set KEY=VALUE or --delete KEY");
            }
            let mut ops = Vec::new();
            for s in &set {
                let (k, v) = parse_kv(s)?;
                ops.push((k, ConfigOp::Set(v)));
            }
            for k in delete {
                ops.push((k, ConfigOp::Delete));
            }
            let admin = common.admin().await?;
            admin
                .incremental_alter_configs(ResourceType::Topic, &name, &ops)
                .await
                .with_context(|| format!("alter configs of topic {name}"))?;
            if common.json {
                print_json(&json!({"topic": name, "altered": ops.len()}))?;
            } else {
                println!("altered {} config(s) of topic {name}", ops.len());
            }
        }
        TopicCommand::AddPartitions {
            name,
            num,
            total,
            common,
        } => {
            let admin = common.admin().await?;
            let current = admin
                .describe_topics(std::slice::from_ref(&name))
                .await
                .with_context(|| format!("describe topic {name}"))?
                .first()
                .map_or(0, |t| t.partitions.len() as i32);
            let total = match (num, total) {
                (Some(n), None) => current + n,
                (None, Some(t)) => t,
                _ => bail!("give --num N (partitions to add) or --total N"),
            };
            admin
                .create_partitions(&name, total)
                .await
                .with_context(|| {
                    format!("grow topic {name} from {current} to {total} partitions")
                })?;
            if common.json {
                print_json(&json!({"topic": name, "partitions": total}))?;
            } else {
                println!("topic {name} now has {total} partitions (was {current})");
            }
        }
    }
    Ok(())
}

async fn describe(common: &Common, name: &str, all_configs: bool) -> anyhow::Result<()> {
    let admin = common.admin().await?;
    let info = admin
        .describe_topics(&[name.to_owned()])
        .await
        .with_context(|| format!("describe topic {name}"))?;
    let Some(t) = info.into_iter().next() else {
        bail!("topic {name} not found");
    };
    let tps: Vec<TopicPartition> = t
        .partitions
        .iter()
        .map(|p| TopicPartition::new(name, p.partition))
        .collect();
    let q = |ts: i64| tps.iter().map(|tp| (tp.clone(), ts)).collect::<Vec<_>>();
    let low = admin.list_offsets(&q(-2)).await.unwrap_or_default();
    let high = admin.list_offsets(&q(-1)).await.unwrap_or_default();
    let configs = admin
        .describe_configs(ResourceType::Topic, name, None)
        .await
        .with_context(|| format!("describe configs of topic {name}"))?;
    let configs: Vec<_> = configs
        .into_iter()
        .filter(|c| all_configs || c.source != "DEFAULT_CONFIG")
        .collect();
    if common.json {
        let parts: Vec<_> = t
            .partitions
            .iter()
            .zip(&tps)
            .map(|(p, tp)| {
                json!({
                    "partition": p.partition,
                    "leader": p.leader,
                    "leader_epoch": p.leader_epoch,
                    "replicas": p.replicas,
                    "isr": p.isr,
                    "log_start_offset": low.get(tp),
                    "high_watermark": high.get(tp),
                })
            })
            .collect();
        let cfg: serde_json::Map<String, serde_json::Value> = configs
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    json!({"value": c.value, "source": c.source}),
                )
            })
            .collect();
        print_json(&json!({
            "name": t.name,
            "topic_id": t.topic_id,
            "internal": t.internal,
            "partitions": parts,
            "configs": cfg,
        }))?;
        return Ok(());
    }
    println!("NAME        {}", t.name);
    println!("TOPIC ID    {}", t.topic_id);
    println!("PARTITIONS  {}", t.partitions.len());
    println!("INTERNAL    {}", t.internal);
    println!();
    let mut table = Table::new(&[
        "PARTITION",
        "LEADER",
        "EPOCH",
        "REPLICAS",
        "ISR",
        "LOG-START-OFFSET",
        "HIGH-WATERMARK",
    ]);
    let list = |v: &[i32]| v.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
    for (p, tp) in t.partitions.iter().zip(&tps) {
        table.row(vec![
            p.partition.to_string(),
            p.leader.to_string(),
            p.leader_epoch.to_string(),
            list(&p.replicas),
            list(&p.isr),
            low.get(tp).map_or("-".into(), i64::to_string),
            high.get(tp).map_or("-".into(), i64::to_string),
        ]);
    }
    table.print()?;
    if !configs.is_empty() {
        println!();
        let mut table = Table::new(&["CONFIG", "VALUE", "SOURCE"]);
        for c in configs {
            table.row(vec![c.name, c.value.unwrap_or_default(), c.source]);
        }
        table.print()?;
    }
    Ok(())
}
