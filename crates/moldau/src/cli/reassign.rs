//! `moldau topic reassign`: the job of Kafka's `kafka-reassign-partitions.sh` (KIP-455
//! reassignments, KIP-73 throttles), with its options, its JSON files and its messages, so
//! plans and scripts move between the two tools.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{bail, Context};
use client::{Admin, ConfigOp, ResourceType, TopicPartition};
use serde_json::{json, Value};

use super::output::print_json;
use super::Common;

/// Topic configs naming the throttled replicas, and the broker rates (KIP-73).
const LEADER_REPLICAS: &str = "leader.replication.throttled.replicas";
const FOLLOWER_REPLICAS: &str = "follower.replication.throttled.replicas";
const LEADER_RATE: &str = "leader.replication.throttled.rate";
const FOLLOWER_RATE: &str = "follower.replication.throttled.rate";
/// Kafka's tool clears this one too (Moldau has no log-dir moves: it is stored and ignored).
const ALTER_LOG_DIRS_RATE: &str = "replica.alter.log.dirs.io.max.bytes.per.second";

/// The options of `moldau topic reassign` (its help text is on `TopicCommand::Reassign`).
#[derive(clap::Args, Debug)]
#[command(group(
    clap::ArgGroup::new("action")
        .required(true)
        .args(["generate", "execute", "verify", "cancel", "list"]),
))]
pub struct ReassignArgs {
    /// Propose a plan moving --topics (or --topics-to-move-json-file) over --broker-list.
    #[arg(long)]
    generate: bool,
    /// Start the reassignments of --reassignment-json-file.
    #[arg(long)]
    execute: bool,
    /// Report the reassignments of --reassignment-json-file; remove the throttles once all
    /// are complete.
    #[arg(long)]
    verify: bool,
    /// Cancel the reassignments of --reassignment-json-file that are in progress.
    #[arg(long)]
    cancel: bool,
    /// List every reassignment in progress.
    #[arg(long)]
    list: bool,
    /// The plan (Kafka's reassignment JSON) for --execute, --verify and --cancel.
    #[arg(long, value_name = "FILE")]
    reassignment_json_file: Option<PathBuf>,
    /// For --generate: Kafka's {"version":1,"topics":[{"topic":"t"}]}.
    #[arg(long, value_name = "FILE", conflicts_with = "topics")]
    topics_to_move_json_file: Option<PathBuf>,
    /// For --generate: the topics to move, comma-separated.
    #[arg(long, value_name = "TOPIC,...", value_delimiter = ',')]
    topics: Vec<String>,
    /// For --generate: the brokers to place the replicas on, comma-separated ids.
    #[arg(long, value_name = "ID,...", value_delimiter = ',')]
    broker_list: Vec<i32>,
    /// For --execute: bound replication between the brokers involved to BYTES per second
    /// while the reassignment copies (KIP-73 throttles, see above).
    #[arg(long, value_name = "BYTES")]
    throttle: Option<i64>,
    /// For --verify and --cancel: leave the throttles in place.
    #[arg(long)]
    preserve_throttles: bool,
    /// For --execute: start even though other reassignments are in progress (also how a
    /// running reassignment's throttle is changed: run it again with a new --throttle).
    #[arg(long)]
    additional: bool,
    #[command(flatten)]
    common: Common,
}

/// One partition of a plan: its target replicas.
type Plan = Vec<(TopicPartition, Vec<i32>)>;

pub async fn run(args: ReassignArgs) -> anyhow::Result<()> {
    if args.throttle.is_some() && !args.execute {
        bail!("--throttle only applies to --execute");
    }
    if args.throttle.is_some_and(|t| t < 0) {
        bail!("--throttle must be a number of bytes per second, at least 0");
    }
    let admin = args.common.admin().await?;
    if args.list {
        return list(&admin, &args.common).await;
    }
    if args.generate {
        return generate(&admin, &args).await;
    }
    let Some(file) = &args.reassignment_json_file else {
        bail!("--reassignment-json-file is required with --execute, --verify and --cancel");
    };
    let text = std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?;
    let plan = parse_plan(&text).with_context(|| format!("{}", file.display()))?;
    if args.execute {
        execute(&admin, &args, &plan).await
    } else if args.verify {
        verify(&admin, &args, &plan).await
    } else {
        cancel(&admin, &args, &plan).await
    }
}

/// Parses Kafka's reassignment JSON with the checks of Kafka's
/// `parsePartitionReassignmentData` / `validateReplicas`.
fn parse_plan(text: &str) -> anyhow::Result<Plan> {
    let v: Value = serde_json::from_str(text).context("not JSON")?;
    match v.get("version").and_then(Value::as_i64) {
        Some(1) => {}
        Some(other) => bail!("version {other} of the reassignment JSON is not supported (only 1)"),
        None => bail!("the reassignment JSON has no \"version\": 1"),
    }
    let parts = v
        .get("partitions")
        .and_then(Value::as_array)
        .context("the reassignment JSON has no \"partitions\" list")?;
    if parts.is_empty() {
        bail!("Partition reassignment list cannot be empty");
    }
    let mut plan = Plan::new();
    let mut seen = BTreeSet::new();
    for p in parts {
        let topic = p
            .get("topic")
            .and_then(Value::as_str)
            .with_context(|| format!("{p}: no \"topic\""))?;
        let partition = p
            .get("partition")
            .and_then(Value::as_i64)
            .and_then(|n| i32::try_from(n).ok())
            .with_context(|| format!("{p}: no \"partition\" number"))?;
        let replicas: Vec<i32> = p
            .get("replicas")
            .and_then(Value::as_array)
            .with_context(|| format!("{p}: no \"replicas\" list"))?
            .iter()
            .map(|r| r.as_i64().and_then(|n| i32::try_from(n).ok()))
            .collect::<Option<_>>()
            .with_context(|| format!("{p}: replicas must be broker ids"))?;
        let tp = TopicPartition::new(topic, partition);
        if replicas.is_empty() {
            bail!("Partition replica list cannot be empty");
        }
        let mut ids = BTreeSet::new();
        for r in &replicas {
            if !ids.insert(*r) {
                bail!("Partition replica lists may not contain duplicate entries: {tp} contains multiple entries for {r}.");
            }
        }
        if let Some(dirs) = p.get("log_dirs").and_then(Value::as_array) {
            if dirs.len() != replicas.len() {
                bail!("Size of replicas list {replicas:?} is different from size of log dirs list {dirs:?} for partition {tp}");
            }
            if dirs.iter().any(|d| d.as_str() != Some("any")) {
                bail!("{tp}: log_dirs other than \"any\" move replicas between log directories (AlterReplicaLogDirs), which this tool does not do");
            }
        }
        if !seen.insert(tp.clone()) {
            bail!("Partition reassignment contains duplicate topic partitions: {tp}");
        }
        plan.push((tp, replicas));
    }
    Ok(plan)
}

/// A plan as Kafka's tool writes it (keys in its order, `log_dirs` all "any").
fn plan_json(plan: &Plan) -> String {
    let parts: Vec<String> = plan
        .iter()
        .map(|(tp, replicas)| {
            let list = |v: Vec<String>| v.join(",");
            format!(
                "{{\"topic\":{},\"partition\":{},\"replicas\":[{}],\"log_dirs\":[{}]}}",
                Value::from(tp.topic.as_ref()),
                tp.partition,
                list(replicas.iter().map(i32::to_string).collect()),
                list(replicas.iter().map(|_| "\"any\"".to_string()).collect()),
            )
        })
        .collect();
    format!("{{\"version\":1,\"partitions\":[{}]}}", parts.join(","))
}

fn plan_value(plan: &Plan) -> Value {
    serde_json::from_str(&plan_json(plan)).unwrap_or(Value::Null)
}

fn ids(v: &[i32]) -> String {
    v.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// The current replicas of every partition of these topics.
async fn current_replicas(
    admin: &Admin,
    topics: &BTreeSet<String>,
) -> anyhow::Result<BTreeMap<TopicPartition, Vec<i32>>> {
    let names: Vec<String> = topics.iter().cloned().collect();
    let info = admin
        .describe_topics(&names)
        .await
        .with_context(|| format!("describe topics {}", names.join(",")))?;
    let mut out = BTreeMap::new();
    for t in info {
        for p in t.partitions {
            out.insert(
                TopicPartition::new(t.name.as_str(), p.partition),
                p.replicas,
            );
        }
    }
    Ok(out)
}

/// The current assignment of the plan's partitions; an unknown one is an error.
async fn current_of(admin: &Admin, plan: &Plan) -> anyhow::Result<Plan> {
    let topics = plan.iter().map(|(tp, _)| tp.topic.to_string()).collect();
    let current = current_replicas(admin, &topics).await?;
    plan.iter()
        .map(|(tp, _)| match current.get(tp) {
            Some(r) => Ok((tp.clone(), r.clone())),
            None => bail!("Unable to find partition: {tp}"),
        })
        .collect()
}

/// Kafka's `AdminUtils.assignReplicasToBrokers` without racks: partition p's first replica
/// on broker (p mod n), the others following it with a shift that grows every n partitions
/// (Kafka starts at a random broker and shift; this starts at the first, so a plan can be
/// generated again).
fn assign(partitions: usize, replication_factor: usize, brokers: &[i32]) -> Vec<Vec<i32>> {
    let n = brokers.len();
    let mut shift = 0;
    (0..partitions)
        .map(|p| {
            if p > 0 && p % n == 0 {
                shift += 1;
            }
            let first = p % n;
            let mut replicas = vec![brokers[first]];
            for j in 0..replication_factor.saturating_sub(1) {
                let index = (first + 1 + (shift + j) % (n - 1)) % n;
                replicas.push(brokers[index]);
            }
            replicas
        })
        .collect()
}

async fn generate(admin: &Admin, args: &ReassignArgs) -> anyhow::Result<()> {
    let mut topics: Vec<String> = args.topics.clone();
    if let Some(file) = &args.topics_to_move_json_file {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?;
        let v: Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", file.display()))?;
        let list = v
            .get("topics")
            .and_then(Value::as_array)
            .with_context(|| format!("{}: no \"topics\" list", file.display()))?;
        for t in list {
            let name = t
                .get("topic")
                .and_then(Value::as_str)
                .with_context(|| format!("{}: {t} has no \"topic\"", file.display()))?;
            topics.push(name.to_string());
        }
    }
    if topics.is_empty() {
        bail!("--generate needs the topics to move: --topics A,B or --topics-to-move-json-file");
    }
    let brokers: Vec<i32> = args
        .broker_list
        .iter()
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if brokers.is_empty() {
        bail!("--generate needs --broker-list ID,...");
    }
    let cluster = admin.describe_cluster().await.context("describe cluster")?;
    let unknown: Vec<i32> = brokers
        .iter()
        .copied()
        .filter(|b| !cluster.brokers.contains_key(b))
        .collect();
    if !unknown.is_empty() {
        bail!("Unknown broker id(s) {}", ids(&unknown));
    }
    let topics: BTreeSet<String> = topics.into_iter().collect();
    let current = current_replicas(admin, &topics).await?;
    let mut current_plan = Plan::new();
    let mut proposed = Plan::new();
    for topic in &topics {
        let parts: Vec<(&TopicPartition, &Vec<i32>)> = current
            .iter()
            .filter(|(tp, _)| tp.topic.as_ref() == topic.as_str())
            .collect();
        let rf = parts.first().map_or(1, |(_, r)| r.len());
        if rf > brokers.len() {
            bail!(
                "Replication factor: {rf} larger than available brokers: {}.",
                brokers.len()
            );
        }
        for ((tp, replicas), target) in parts.iter().zip(assign(parts.len(), rf, &brokers)) {
            current_plan.push(((*tp).clone(), (*replicas).clone()));
            proposed.push(((*tp).clone(), target));
        }
    }
    if args.common.json {
        return print_json(&json!({
            "current": plan_value(&current_plan),
            "proposed": plan_value(&proposed),
        }));
    }
    println!("Current partition replica assignment");
    println!("{}", plan_json(&current_plan));
    println!();
    println!("Proposed partition reassignment configuration");
    println!("{}", plan_json(&proposed));
    Ok(())
}

/// Kafka's `calculateProposedMoveMap` + `calculateLeaderThrottles` /
/// `calculateFollowerThrottles`: per topic, the current replicas of every partition in the
/// plan (they may lead and send) and the replicas each adds (they fetch), as sorted
/// `partition:broker` lists; and every broker involved.
fn throttles(
    current: &Plan,
    ongoing: &BTreeMap<TopicPartition, client::OngoingReassignment>,
    plan: &Plan,
) -> (BTreeMap<String, (String, String)>, BTreeSet<i32>) {
    let mut lists: BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
    let mut brokers = BTreeSet::new();
    for ((tp, target), (_, now)) in plan.iter().zip(current) {
        // A partition being reassigned already: its sources are the replicas not being
        // added (Kafka's rule).
        let sources: Vec<i32> = match ongoing.get(tp) {
            Some(o) => o
                .replicas
                .iter()
                .copied()
                .filter(|r| !o.adding.contains(r))
                .collect(),
            None => now.clone(),
        };
        let entry = lists.entry(tp.topic.to_string()).or_default();
        for s in &sources {
            entry.0.insert(format!("{}:{s}", tp.partition));
            brokers.insert(*s);
        }
        for d in target {
            if !sources.contains(d) {
                entry.1.insert(format!("{}:{d}", tp.partition));
            }
            brokers.insert(*d);
        }
    }
    let join = |s: BTreeSet<String>| s.into_iter().collect::<Vec<_>>().join(",");
    let lists = lists
        .into_iter()
        .map(|(t, (l, f))| (t, (join(l), join(f))))
        .collect();
    (lists, brokers)
}

async fn execute(admin: &Admin, args: &ReassignArgs, plan: &Plan) -> anyhow::Result<()> {
    let cluster = admin.describe_cluster().await.context("describe cluster")?;
    let unknown: BTreeSet<i32> = plan
        .iter()
        .flat_map(|(_, r)| r.iter().copied())
        .filter(|b| !cluster.brokers.contains_key(b))
        .collect();
    if !unknown.is_empty() {
        bail!(
            "Unknown broker id(s) {}",
            ids(&unknown.into_iter().collect::<Vec<_>>())
        );
    }
    let current = current_of(admin, plan).await?;
    let ongoing = admin
        .list_partition_reassignments(None)
        .await
        .context("list partition reassignments")?;
    if !ongoing.is_empty() && !args.additional {
        bail!("Cannot execute because there is an existing partition assignment.  Use --additional to override this and create a new partition assignment in addition to the existing one. The --additional flag can also be used to change the throttle by resubmitting the current reassignment.");
    }
    if !args.common.json {
        println!("Current partition replica assignment");
        println!();
        println!("{}", plan_json(&current));
        println!();
        println!("Save this to use as the --reassignment-json-file option during rollback");
    }
    if let Some(rate) = args.throttle {
        let (lists, brokers) = throttles(&current, &ongoing, plan);
        for (topic, (leader, follower)) in &lists {
            let mut ops = vec![(LEADER_REPLICAS.to_string(), ConfigOp::Set(leader.clone()))];
            if !follower.is_empty() {
                ops.push((
                    FOLLOWER_REPLICAS.to_string(),
                    ConfigOp::Set(follower.clone()),
                ));
            }
            admin
                .incremental_alter_configs(ResourceType::Topic, topic, &ops)
                .await
                .with_context(|| format!("set the throttled replicas of topic {topic}"))?;
        }
        for b in &brokers {
            let ops = [LEADER_RATE, FOLLOWER_RATE]
                .map(|k| (k.to_string(), ConfigOp::Set(rate.to_string())));
            admin
                .incremental_alter_configs(ResourceType::Broker, &b.to_string(), &ops)
                .await
                .with_context(|| format!("set the replication throttle of broker {b}"))?;
        }
        if !args.common.json {
            println!("Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is removed.");
            println!("The inter-broker throttle limit was set to {rate} B/s");
        }
    }
    let targets: Vec<_> = plan
        .iter()
        .map(|(tp, r)| (tp.clone(), Some(r.clone())))
        .collect();
    let results = admin
        .alter_partition_reassignments(&targets)
        .await
        .context("alter partition reassignments")?;
    let failed: Vec<String> = results
        .iter()
        .filter_map(|(tp, r)| r.as_ref().err().map(|e| format!("{tp}: {e}")))
        .collect();
    if args.common.json {
        print_json(&json!({
            "current": plan_value(&current),
            "started": results.iter().filter(|(_, r)| r.is_ok()).map(|(tp, _)| tp.to_string()).collect::<Vec<_>>(),
            "errors": failed,
            "throttle": args.throttle,
        }))?;
    }
    if !failed.is_empty() {
        bail!("Error reassigning partition(s):\n{}", failed.join("\n"));
    }
    if !args.common.json {
        let started: Vec<String> = plan.iter().map(|(tp, _)| tp.to_string()).collect();
        println!(
            "Successfully started partition reassignments for {}",
            started.join(",")
        );
    }
    Ok(())
}

/// Kafka's `clearAllThrottles`: the topic lists of the plan's topics and the rates of every
/// broker of the cluster.
async fn clear_throttles(admin: &Admin, plan: &Plan, quiet: bool) -> anyhow::Result<()> {
    let topics: BTreeSet<String> = plan.iter().map(|(tp, _)| tp.topic.to_string()).collect();
    let cluster = admin.describe_cluster().await.context("describe cluster")?;
    for b in cluster.brokers.keys() {
        let ops = [LEADER_RATE, FOLLOWER_RATE, ALTER_LOG_DIRS_RATE]
            .map(|k| (k.to_string(), ConfigOp::Delete));
        admin
            .incremental_alter_configs(ResourceType::Broker, &b.to_string(), &ops)
            .await
            .with_context(|| format!("clear the replication throttle of broker {b}"))?;
    }
    for t in &topics {
        let ops = [LEADER_REPLICAS, FOLLOWER_REPLICAS].map(|k| (k.to_string(), ConfigOp::Delete));
        admin
            .incremental_alter_configs(ResourceType::Topic, t, &ops)
            .await
            .with_context(|| format!("clear the throttled replicas of topic {t}"))?;
    }
    if !quiet {
        println!(
            "Clearing broker-level throttles on brokers {}",
            ids(&cluster.brokers.keys().copied().collect::<Vec<_>>())
        );
        println!(
            "Clearing topic-level throttles on topics {}",
            topics.into_iter().collect::<Vec<_>>().join(",")
        );
    }
    Ok(())
}

async fn verify(admin: &Admin, args: &ReassignArgs, plan: &Plan) -> anyhow::Result<()> {
    let current = current_of(admin, plan).await?;
    let tps: Vec<TopicPartition> = plan.iter().map(|(tp, _)| tp.clone()).collect();
    let ongoing = admin
        .list_partition_reassignments(Some(&tps))
        .await
        .context("list partition reassignments")?;
    let json = args.common.json;
    if !json {
        println!("Status of partition reassignment:");
    }
    let mut done = true;
    let mut rows = Vec::new();
    for ((tp, target), (_, now)) in plan.iter().zip(&current) {
        let (status, line) = if ongoing.contains_key(tp) {
            done = false;
            (
                "in_progress",
                format!("Reassignment of partition {tp} is still in progress."),
            )
        } else if now == target {
            (
                "completed",
                format!("Reassignment of partition {tp} is completed."),
            )
        } else {
            (
                "not_active",
                format!(
                    "There is no active reassignment of partition {tp}, but replica set is {} rather than {}.",
                    ids(now),
                    ids(target)
                ),
            )
        };
        if !json {
            println!("{line}");
        }
        rows.push(
            json!({"topic": tp.topic.as_ref(), "partition": tp.partition,
            "status": status, "replicas": now, "target": target}),
        );
    }
    let clear = done && !args.preserve_throttles;
    if clear {
        if !json {
            println!();
        }
        clear_throttles(admin, plan, json).await?;
    }
    if json {
        print_json(&json!({"partitions": rows, "complete": done, "throttles_cleared": clear}))?;
    }
    Ok(())
}

async fn cancel(admin: &Admin, args: &ReassignArgs, plan: &Plan) -> anyhow::Result<()> {
    let tps: Vec<TopicPartition> = plan.iter().map(|(tp, _)| tp.clone()).collect();
    let ongoing = admin
        .list_partition_reassignments(Some(&tps))
        .await
        .context("list partition reassignments")?;
    // As Kafka's tool: only the partitions still being reassigned are cancelled.
    let targets: Vec<_> = tps
        .iter()
        .filter(|tp| ongoing.contains_key(*tp))
        .map(|tp| (tp.clone(), None))
        .collect();
    let results = if targets.is_empty() {
        Vec::new()
    } else {
        admin
            .alter_partition_reassignments(&targets)
            .await
            .context("cancel partition reassignments")?
    };
    let failed: Vec<String> = results
        .iter()
        .filter_map(|(tp, r)| r.as_ref().err().map(|e| format!("{tp}: {e}")))
        .collect();
    if !failed.is_empty() {
        bail!(
            "Error cancelling partition reassignment(s):\n{}",
            failed.join("\n")
        );
    }
    let cancelled: Vec<String> = results.iter().map(|(tp, _)| tp.to_string()).collect();
    if !args.common.json {
        if cancelled.is_empty() {
            println!("None of the specified partition reassignments are active.");
        } else {
            println!(
                "Successfully cancelled partition reassignment for: {}",
                cancelled.join(",")
            );
        }
    }
    if !args.preserve_throttles {
        clear_throttles(admin, plan, args.common.json).await?;
    }
    if args.common.json {
        print_json(
            &json!({"cancelled": cancelled, "throttles_cleared": !args.preserve_throttles}),
        )?;
    }
    Ok(())
}

async fn list(admin: &Admin, common: &Common) -> anyhow::Result<()> {
    let ongoing = admin
        .list_partition_reassignments(None)
        .await
        .context("list partition reassignments")?;
    if common.json {
        let v: Vec<Value> = ongoing
            .iter()
            .map(|(tp, o)| {
                json!({"topic": tp.topic.as_ref(), "partition": tp.partition,
                    "replicas": o.replicas, "adding": o.adding, "removing": o.removing})
            })
            .collect();
        return print_json(&json!(v));
    }
    if ongoing.is_empty() {
        println!("No partition reassignments found.");
        return Ok(());
    }
    println!("Current partition reassignments:");
    for (tp, o) in &ongoing {
        println!(
            "{tp}: replicas: {}. adding: {}. removing: {}.",
            ids(&o.replicas),
            ids(&o.adding),
            ids(&o.removing)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_round_trip_in_kafkas_format_and_bad_ones_are_refused() {
        let text = r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[3,2]},
            {"topic":"t","partition":1,"replicas":[1],"log_dirs":["any"]}]}"#;
        let plan = parse_plan(text).unwrap();
        assert_eq!(plan[0], (TopicPartition::new("t", 0), vec![3, 2]));
        assert_eq!(
            plan_json(&plan),
            r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[3,2],"log_dirs":["any","any"]},{"topic":"t","partition":1,"replicas":[1],"log_dirs":["any"]}]}"#
        );
        assert_eq!(parse_plan(&plan_json(&plan)).unwrap(), plan);
        for bad in [
            r#"{"partitions":[]}"#,
            r#"{"version":2,"partitions":[{"topic":"t","partition":0,"replicas":[1]}]}"#,
            r#"{"version":1,"partitions":[]}"#,
            r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[]}]}"#,
            r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}"#,
            r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}"#,
            r#"{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/d"]}]}"#,
        ] {
            assert!(parse_plan(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn generated_assignments_spread_leaders_and_replicas_as_kafkas() {
        // Kafka's rack-unaware assignment from start index 0 and shift 0.
        assert_eq!(
            assign(4, 2, &[1, 2, 3]),
            vec![vec![1, 2], vec![2, 3], vec![3, 1], vec![1, 3]]
        );
        assert_eq!(assign(2, 1, &[5]), vec![vec![5], vec![5]]);
    }

    #[test]
    fn throttles_name_sources_on_leaders_and_new_replicas_on_followers() {
        let plan = vec![
            (TopicPartition::new("t", 0), vec![3, 2]),
            (TopicPartition::new("t", 1), vec![2, 1, 3]),
            (TopicPartition::new("u", 0), vec![1]),
        ];
        let current = vec![
            (TopicPartition::new("t", 0), vec![1, 2]),
            (TopicPartition::new("t", 1), vec![2, 1]),
            (TopicPartition::new("u", 0), vec![1]),
        ];
        let (lists, brokers) = throttles(&current, &BTreeMap::new(), &plan);
        assert_eq!(lists["t"], ("0:1,0:2,1:1,1:2".into(), "0:3,1:3".into()));
        assert_eq!(lists["u"], ("0:1".into(), String::new()));
        assert_eq!(brokers, BTreeSet::from([1, 2, 3]));
    }
}
