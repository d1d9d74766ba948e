//! `moldau produce TOPIC`: one record per stdin line.

use std::collections::VecDeque;

use anyhow::{bail, Context};
use bytes::Bytes;
use client::{Acks, Compression, DeliveryFuture, Producer, ProducerConfig, ProducerRecord};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::output::print_json;
use super::{parse_kv, Common};

#[derive(clap::Args, Debug)]
pub struct ProduceArgs {
    pub topic: String,
    /// Split each line at the first SEP into key and value (e.g. ':'); without it the whole
    /// line is the value and the key is null.
    #[arg(long, short = 'k', value_name = "SEP")]
    pub key_separator: Option<String>,
    /// Header added to every record; repeatable.
    #[arg(long = "header", short = 'H', value_name = "KEY=VALUE")]
    pub headers: Vec<String>,
    /// Write every record to this partition instead of using the partitioner.
    #[arg(long, short = 'p')]
    pub partition: Option<i32>,
    /// Input format: `text` (one value per line) or `json` (one object per line with
    /// optional "key", "value", "headers" ({k: v}, or [{"key", "value"}] / [[k, v]] to keep
    /// order and repeats), "partition", "timestamp").
    #[arg(long, short = 'f', default_value = "text", value_parser = ["text", "json"])]
    pub format: String,
    /// 0, 1 or all.
    #[arg(long, default_value = "all")]
    pub acks: String,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long, short = 'z', default_value = "none")]
    pub compression: String,
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// Print where each record was written, as soon as it is acknowledged (with `--json`: one
    /// object per record with its stdin `line` number).
    #[arg(long, short = 'v')]
    pub verbose: bool,
    #[command(flatten)]
    pub common: Common,
}

fn parse_line(
    args: &ProduceArgs,
    headers: &[(String, String)],
    line: &str,
) -> anyhow::Result<ProducerRecord> {
    let mut r = ProducerRecord {
        topic: args.topic.clone(),
        partition: args.partition,
        ..ProducerRecord::default()
    };
    if args.format == "json" {
        let v: Value = serde_json::from_str(line).context("parse JSON input line")?;
        let Value::Object(o) = v else {
            bail!("JSON input line is not an object");
        };
        let bytes_of = |v: &Value| -> Option<Bytes> {
            match v {
                Value::Null => None,
                Value::String(s) => Some(Bytes::from(s.clone())),
                other => Some(Bytes::from(other.to_string())),
            }
        };
        r.key = o.get("key").and_then(bytes_of);
        r.value = o.get("value").and_then(bytes_of);
        if let Some(p) = o.get("partition").and_then(Value::as_i64) {
            r.partition = Some(i32::try_from(p).context("partition out of range")?);
        }
        r.timestamp = o.get("timestamp").and_then(Value::as_i64);
        match o.get("headers") {
            Some(Value::Object(h)) => {
                for (k, v) in h {
                    r.headers.push((k.clone(), bytes_of(v)));
                }
            }
            Some(Value::Array(h)) => {
                for pair in h {
                    if let Some([k, v]) = pair.as_array().map(Vec::as_slice) {
                        r.headers
                            .push((k.as_str().unwrap_or_default().to_owned(), bytes_of(v)));
                    }
                }
            }
            _ => {}
        }
    } else {
        match args.key_separator.as_deref().filter(|s| !s.is_empty()) {
            Some(sep) => match line.split_once(sep) {
                Some((k, v)) => {
                    r.key = Some(Bytes::from(k.to_owned()));
                    r.value = Some(Bytes::from(v.to_owned()));
                }
                None => r.value = Some(Bytes::from(line.to_owned())),
            },
            None => r.value = Some(Bytes::from(line.to_owned())),
        }
    }
    for (k, v) in headers {
        r.headers.push((k.clone(), Some(Bytes::from(v.clone()))));
    }
    Ok(r)
}

pub async fn run(args: ProduceArgs) -> anyhow::Result<()> {
    let headers: Vec<(String, String)> = args
        .headers
        .iter()
        .map(|h| parse_kv(h))
        .collect::<anyhow::Result<_>>()?;
    let config = ProducerConfig {
        client: args.common.client_config()?,
        acks: Acks::parse(&args.acks).with_context(|| format!("bad --acks {:?}", args.acks))?,
        compression: Compression::from_name(&args.compression)
            .with_context(|| format!("bad --compression {:?}", args.compression))?,
        linger_ms: args.linger_ms,
        ..ProducerConfig::default()
    };
    let producer = Producer::new(config)
        .await
        .with_context(|| format!("connect to {}", args.common.brokers))?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut pending: VecDeque<(u64, DeliveryFuture)> = VecDeque::new();
    let mut produced = 0u64;
    let mut first_error: Option<String> = None;
    let mut failed = 0u64;
    let mut report =
        |(line, r): (u64, client::Result<client::RecordMetadata>)| -> anyhow::Result<()> {
            match r {
                Ok(md) => {
                    produced += 1;
                    if args.common.json {
                        print_json(&json!({"topic": &*md.topic, "partition": md.partition,
                        "offset": md.offset, "timestamp": md.timestamp, "line": line}))?;
                    } else if args.verbose {
                        println!(
                            "produced to {}-{} at offset {}",
                            md.topic, md.partition, md.offset
                        );
                    }
                }
                Err(e) => {
                    failed += 1;
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
            Ok(())
        };
    let mut line_no = 0u64;
    // Each record is reported as soon as it (and every record before it) is acknowledged, so
    // a long-running pipe shows its progress while stdin is still open.
    loop {
        let next = tokio::select! {
            biased;
            r = async { (&mut pending.front_mut().expect("not empty").1).await }, if !pending.is_empty() => {
                let (line, _) = pending.pop_front().expect("not empty");
                report((line, r))?;
                continue;
            }
            next = lines.next_line() => next.context("read stdin")?,
        };
        let Some(line) = next else { break };
        line_no += 1;
        if args.format == "json" && line.trim().is_empty() {
            continue;
        }
        let record =
            parse_line(&args, &headers, &line).with_context(|| format!("stdin line {line_no}"))?;
        let fut = producer
            .enqueue(record)
            .await
            .with_context(|| format!("produce stdin line {line_no} to {}", args.topic))?;
        pending.push_back((line_no, fut));
        while pending.len() > 10_000 {
            if let Some((line, f)) = pending.pop_front() {
                report((line, f.await))?;
            }
        }
    }
    while let Some((line, f)) = pending.pop_front() {
        report((line, f.await))?;
    }
    producer.close().await.context("close producer")?;
    if failed > 0 {
        bail!(
            "{failed} of {} records failed; first error: {}",
            failed + produced,
            first_error.unwrap_or_default()
        );
    }
    if !args.common.json {
        eprintln!("produced {produced} records to {}", args.topic);
    }
    Ok(())
}
