//! `moldau consume TOPIC`: tail a topic (or read a range of it), printing records as text,
//! JSON or a kcat-style template.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context};
use client::{
    Client, Consumer, ConsumerConfig, ConsumerRecord, GroupProtocol, OffsetReset, SeekTo,
    TopicPartition,
};
use serde_json::json;

use super::output::{json_bytes, text};
use super::Common;

#[derive(clap::Args, Debug)]
pub struct ConsumeArgs {
    pub topic: String,
    /// Start at the beginning of each partition (default: only new records). With --group,
    /// this applies only where the group has no committed offset yet.
    #[arg(long, conflicts_with_all = ["offset", "timestamp"])]
    pub from_beginning: bool,
    /// Start at this offset in each partition; `start`, `end`, and -N (N before the end)
    /// also work.
    #[arg(
        long,
        short = 'o',
        conflicts_with = "timestamp",
        allow_hyphen_values = true
    )]
    pub offset: Option<String>,
    /// Start at the first record with a timestamp at or after this (ms since the epoch).
    #[arg(long)]
    pub timestamp: Option<i64>,
    /// Consume as a member of this group (offsets committed; partitions shared).
    #[arg(long, short = 'g')]
    pub group: Option<String>,
    /// The group protocol: `classic` (JoinGroup/SyncGroup) or `consumer` (KIP-848: the
    /// broker assigns partitions, no stop-the-world rebalances).
    #[arg(long, default_value = "classic", value_parser = ["classic", "consumer"], requires = "group")]
    pub group_protocol: String,
    /// Stop after this many records.
    #[arg(long, short = 'n')]
    pub count: Option<u64>,
    /// Only these partitions; repeatable (not with --group).
    #[arg(long = "partition", short = 'p', conflicts_with = "group")]
    pub partitions: Vec<i32>,
    /// Stop at the end of the partitions instead of waiting for new records.
    #[arg(long, short = 'e')]
    pub exit: bool,
    /// `text` (the value), `json` (one object per record: topic, partition, offset,
    /// timestamp, key, value, headers as [{"key", "value"}]), or a template with %t topic, %p partition, %o offset,
    /// %k key, %v value, %T timestamp, %h headers, %% percent, \n, \t.
    #[arg(long, short = 'f', default_value = "text")]
    pub format: String,
    /// read_uncommitted (every record) or read_committed (only committed transactions,
    /// up to the last stable offset).
    #[arg(long, default_value = "read_uncommitted", value_parser = ["read_uncommitted", "read_committed"])]
    pub isolation: String,
    #[command(flatten)]
    pub common: Common,
}

/// How each record is printed.
enum Format {
    Json,
    Template(String),
}

fn render_template(t: &str, r: &ConsumerRecord) -> String {
    let mut out = String::new();
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek().copied()) {
            ('%', Some(n)) => {
                chars.next();
                match n {
                    't' => out.push_str(&r.topic),
                    'p' => out.push_str(&r.partition.to_string()),
                    'o' => out.push_str(&r.offset.to_string()),
                    'k' => out.push_str(&text(r.key.as_ref())),
                    'v' => out.push_str(&text(r.value.as_ref())),
                    'T' => out.push_str(&r.timestamp.to_string()),
                    'h' => out.push_str(
                        &r.headers
                            .iter()
                            .map(|(k, v)| format!("{k}={}", text(v.as_ref())))
                            .collect::<Vec<_>>()
                            .join(","),
                    ),
                    '%' => out.push('%'),
                    other => {
                        out.push('%');
                        out.push(other);
                    }
                }
            }
            ('\\', Some('n')) => {
                chars.next();
                out.push('\n');
            }
            ('\\', Some('t')) => {
                chars.next();
                out.push('\t');
            }
            _ => out.push(c),
        }
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

fn render(format: &Format, r: &ConsumerRecord) -> String {
    match format {
        Format::Template(t) => render_template(t, r),
        Format::Json => {
            // An array keeps the order and any repeated keys, as on the wire.
            let headers: Vec<serde_json::Value> = r
                .headers
                .iter()
                .map(|(k, v)| json!({"key": k, "value": json_bytes(v.as_ref())}))
                .collect();
            let v = json!({
                "topic": &*r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": json_bytes(r.key.as_ref()),
                "value": json_bytes(r.value.as_ref()),
                "headers": headers,
            });
            format!("{v}\n")
        }
    }
}

pub async fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    let format = if args.common.json || args.format == "json" {
        Format::Json
    } else if args.format == "text" {
        Format::Template("%v".into())
    } else {
        Format::Template(args.format.clone())
    };
    let start = match (&args.offset, args.timestamp, args.from_beginning) {
        (Some(o), _, _) => Some(match o.as_str() {
            "start" | "beginning" | "earliest" => SeekTo::Beginning,
            "end" | "latest" => SeekTo::End,
            n => SeekTo::Offset(
                n.parse()
                    .with_context(|| format!("--offset {n:?} is not a number, start or end"))?,
            ),
        }),
        (None, Some(ts), _) => Some(SeekTo::Timestamp(ts)),
        (None, None, true) => Some(SeekTo::Beginning),
        (None, None, false) => None,
    };
    let client = Client::connect(args.common.client_config()?)
        .await
        .with_context(|| format!("connect to {}", args.common.brokers))?;
    let topic = client
        .topic_fresh(&args.topic, false)
        .await
        .with_context(|| format!("look up topic {}", args.topic))?;
    let config = ConsumerConfig {
        client: args.common.client_config()?,
        group_id: args.group.clone(),
        auto_offset_reset: if args.from_beginning {
            OffsetReset::Earliest
        } else {
            OffsetReset::Latest
        },
        group_protocol: GroupProtocol::from_name(&args.group_protocol).unwrap_or_default(),
        isolation_level: i8::from(args.isolation == "read_committed"),
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::with_client(client.clone(), config);
    let all: Vec<TopicPartition> = topic
        .partitions
        .iter()
        .map(|p| TopicPartition::new(&args.topic, p.partition))
        .filter(|tp| args.partitions.is_empty() || args.partitions.contains(&tp.partition))
        .collect();
    if all.is_empty() {
        bail!("topic {} has no such partitions", args.topic);
    }
    if args.group.is_some() {
        if matches!(start, Some(SeekTo::Offset(_) | SeekTo::Timestamp(_))) {
            bail!("--offset N and --timestamp need manual assignment; drop --group or use `moldau group reset-offsets`");
        }
        consumer
            .subscribe(&[args.topic.as_str()])
            .context("subscribe")?;
    } else {
        consumer.assign(all.clone());
        let to = start.unwrap_or(SeekTo::End);
        if let SeekTo::Offset(back) = to {
            if back < 0 {
                // -N: N records before the end of each partition (never before its start).
                let admin = client::Admin::new(client.clone());
                let q = |ts: i64| all.iter().map(|tp| (tp.clone(), ts)).collect::<Vec<_>>();
                let ends = admin
                    .list_offsets(&q(-1))
                    .await
                    .context("list end offsets")?;
                let starts = admin
                    .list_offsets(&q(-2))
                    .await
                    .context("list start offsets")?;
                for tp in &all {
                    let end = ends.get(tp).copied().unwrap_or(0);
                    let begin = starts.get(tp).copied().unwrap_or(0);
                    consumer.seek(tp, SeekTo::Offset((end + back).max(begin)));
                }
            }
        }
        if !matches!(to, SeekTo::Offset(o) if o < 0) {
            for tp in &all {
                consumer.seek(tp, to);
            }
        }
    }
    // With --exit, stop once every partition reached the end it had when we started.
    let mut ends: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    if args.exit {
        let admin = client::Admin::new(client.clone());
        let q: Vec<_> = all.iter().map(|tp| (tp.clone(), -1)).collect();
        // read_committed ends at the last stable offset.
        let isolation = i8::from(args.isolation == "read_committed");
        ends = admin
            .list_offsets_isolated(&q, isolation)
            .await
            .context("list end offsets")?;
    }
    let mut seen = 0u64;
    let mut printed: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    // Ctrl-C or SIGTERM ends the loop normally, so a group member still commits and leaves.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("install SIGTERM handler")?;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    'outer: loop {
        if args.exit && at_end(&consumer, &ends) {
            break;
        }
        // Poll is cancel-safe for records: positions only advance when it returns them.
        let records = tokio::select! {
            r = consumer.poll(Duration::from_millis(500)) => r.context("consume")?,
            _ = &mut ctrl_c => break,
            _ = term.recv() => break,
        };
        for r in &records {
            out.write_all(render(&format, r).as_bytes())?;
            seen += 1;
            printed.insert(TopicPartition::new(&r.topic, r.partition), r.offset + 1);
            if args.count.is_some_and(|n| seen >= n) {
                break 'outer;
            }
        }
        out.flush()?;
    }
    out.flush()?;
    drop(out);
    if args.group.is_some() {
        // Commit exactly what was printed (not what was fetched) before leaving: rewind
        // positions past the last printed record, then close (which commits positions).
        for (tp, o) in &printed {
            consumer.seek(tp, SeekTo::Offset(*o));
        }
        consumer.close().await.context("leave group")?;
    }
    Ok(())
}

fn at_end(consumer: &Consumer, ends: &BTreeMap<TopicPartition, i64>) -> bool {
    let assigned = consumer.assignment();
    if assigned.is_empty() {
        return false;
    }
    assigned.iter().all(|tp| {
        let end = ends.get(tp).copied().unwrap_or(0);
        consumer.position(tp).is_some_and(|p| p >= end)
    })
}
