//! `moldau txn list|describe|describe-producers|abort`: what `kafka-transactions.sh` does, over
//! the standard transaction admin APIs (works against Kafka too).

use anyhow::{bail, Context};
use clap::Subcommand;
use serde_json::json;

use super::output::{print_json, Table};
use super::Common;

#[derive(Subcommand, Debug)]
pub enum TxnCommand {
    /// List transactional ids on every broker, with their producer id and state.
    List {
        /// Only these states (Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
        /// CompleteAbort); repeatable.
        #[arg(long = "state")]
        states: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Show transactional ids at their coordinator: state, producer id and epoch, timeout,
    /// start time and the partitions of the open transaction.
    Describe {
        /// Transactional ids to describe.
        #[arg(required = true)]
        transactional_ids: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Show the producers a partition knows, with the start offset of any open transaction.
    DescribeProducers {
        /// Topic of the partition.
        #[arg(long, short = 't')]
        topic: String,
        /// Partition index.
        #[arg(long, short = 'p')]
        partition: i32,
        #[command(flatten)]
        common: Common,
    },
    /// Abort a hanging transaction on one partition (writes its ABORT marker), found by the
    /// start offset DescribeProducers shows, or given by producer id and epochs.
    Abort {
        /// Topic of the partition.
        #[arg(long, short = 't')]
        topic: String,
        /// Partition index.
        #[arg(long, short = 'p')]
        partition: i32,
        /// The first offset of the open transaction to abort.
        #[arg(long, conflicts_with_all = ["producer_id", "producer_epoch", "coordinator_epoch"])]
        start_offset: Option<i64>,
        /// The producer of the transaction (with --producer-epoch and --coordinator-epoch,
        /// instead of --start-offset).
        #[arg(long, requires_all = ["producer_epoch", "coordinator_epoch"])]
        producer_id: Option<i64>,
        /// The producer's epoch.
        #[arg(long)]
        producer_epoch: Option<i16>,
        /// The coordinator epoch of the producer's last marker on the partition.
        #[arg(long)]
        coordinator_epoch: Option<i32>,
        #[command(flatten)]
        common: Common,
    },
}

pub async fn run(cmd: TxnCommand) -> anyhow::Result<()> {
    match cmd {
        TxnCommand::List { states, common } => {
            let admin = common.admin().await?;
            let txns = admin
                .list_transactions(&states)
                .await
                .context("list transactions")?;
            if common.json {
                print_json(&json!(txns
                    .iter()
                    .map(|t| json!({"transactional_id": t.transactional_id,
                        "producer_id": t.producer_id, "state": t.state, "coordinator": t.coordinator}))
                    .collect::<Vec<_>>()))?;
            } else {
                let mut table =
                    Table::new(&["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"]);
                for t in txns {
                    table.row(vec![
                        t.transactional_id,
                        t.coordinator.to_string(),
                        t.producer_id.to_string(),
                        t.state,
                    ]);
                }
                table.print()?;
            }
        }
        TxnCommand::Describe {
            transactional_ids,
            common,
        } => {
            let admin = common.admin().await?;
            let txns = admin
                .describe_transactions(&transactional_ids)
                .await
                .context("describe transactions")?;
            if common.json {
                print_json(&json!(txns
                    .iter()
                    .map(|t| json!({"transactional_id": t.transactional_id, "coordinator": t.coordinator,
                        "state": t.state, "producer_id": t.producer_id, "producer_epoch": t.producer_epoch,
                        "timeout_ms": t.timeout_ms, "start_time_ms": t.start_time_ms,
                        "partitions": t.partitions.iter().map(|(tp, p)| format!("{tp}-{p}")).collect::<Vec<_>>()}))
                    .collect::<Vec<_>>()))?;
            } else {
                let mut table = Table::new(&[
                    "TRANSACTIONAL-ID",
                    "COORDINATOR",
                    "STATE",
                    "PRODUCER-ID",
                    "EPOCH",
                    "TIMEOUT-MS",
                    "START-TIME-MS",
                    "PARTITIONS",
                ]);
                for t in txns {
                    table.row(vec![
                        t.transactional_id,
                        t.coordinator.to_string(),
                        t.state,
                        t.producer_id.to_string(),
                        t.producer_epoch.to_string(),
                        t.timeout_ms.to_string(),
                        t.start_time_ms.to_string(),
                        t.partitions
                            .iter()
                            .map(|(tp, p)| format!("{tp}-{p}"))
                            .collect::<Vec<_>>()
                            .join(","),
                    ]);
                }
                table.print()?;
            }
        }
        TxnCommand::DescribeProducers {
            topic,
            partition,
            common,
        } => {
            let admin = common.admin().await?;
            let producers = admin
                .describe_producers(&topic, partition)
                .await
                .with_context(|| format!("describe producers of {topic}-{partition}"))?;
            if common.json {
                print_json(&json!(producers
                    .iter()
                    .map(
                        |p| json!({"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
                        "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
                        "coordinator_epoch": p.coordinator_epoch,
                        "current_transaction_start_offset": p.current_transaction_start_offset})
                    )
                    .collect::<Vec<_>>()))?;
            } else {
                let mut table = Table::new(&[
                    "PRODUCER-ID",
                    "EPOCH",
                    "LAST-SEQUENCE",
                    "LAST-TIMESTAMP",
                    "COORDINATOR-EPOCH",
                    "TXN-START-OFFSET",
                ]);
                for p in producers {
                    table.row(vec![
                        p.producer_id.to_string(),
                        p.producer_epoch.to_string(),
                        p.last_sequence.to_string(),
                        p.last_timestamp.to_string(),
                        p.coordinator_epoch.to_string(),
                        p.current_transaction_start_offset.to_string(),
                    ]);
                }
                table.print()?;
            }
        }
        TxnCommand::Abort {
            topic,
            partition,
            start_offset,
            producer_id,
            producer_epoch,
            coordinator_epoch,
            common,
        } => {
            let admin = common.admin().await?;
            let (pid, epoch, coordinator_epoch) = match (start_offset, producer_id) {
                (Some(offset), _) => {
                    let producers = admin
                        .describe_producers(&topic, partition)
                        .await
                        .with_context(|| format!("describe producers of {topic}-{partition}"))?;
                    let Some(p) = producers
                        .iter()
                        .find(|p| p.current_transaction_start_offset == offset)
                    else {
                        bail!(
                            "no open transaction starts at offset {offset} of {topic}-{partition}"
                        );
                    };
                    let epoch = i16::try_from(p.producer_epoch)
                        .with_context(|| format!("producer epoch {}", p.producer_epoch))?;
                    (p.producer_id, epoch, p.coordinator_epoch)
                }
                (None, Some(pid)) => (
                    pid,
                    producer_epoch.context("--producer-epoch is required")?,
                    coordinator_epoch.context("--coordinator-epoch is required")?,
                ),
                (None, None) => bail!("give --start-offset, or --producer-id with its epochs"),
            };
            admin
                .abort_transaction(&topic, partition, pid, epoch, coordinator_epoch)
                .await
                .with_context(|| {
                    format!("abort the transaction of producer {pid} on {topic}-{partition}")
                })?;
            if common.json {
                print_json(
                    &json!({"aborted": {"topic": topic, "partition": partition, "producer_id": pid}}),
                )?;
            } else {
                println!("aborted the transaction of producer {pid} on {topic}-{partition}");
            }
        }
    }
    Ok(())
}
