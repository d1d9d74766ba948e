//! `moldau bench produce|consume|e2e`: a load generator in the spirit of
//! kafka-producer-perf-test and the OpenMessaging Benchmark. It is only a client, so it runs
//! unchanged against any Kafka-compatible broker.
//!
//! Latency is recorded in microseconds in an HDR histogram: produce = send to acknowledgement;
//! consume = how long each `poll` that returned records waited (throughput counts from the
//! first assignment, so a group join does not dilute it); e2e = from just before the
//! record was handed to the producer to when a consumer received it (the send time travels in
//! the first 8 bytes of the value). Progress goes to stderr once a second; the summary goes to
//! stdout, and with `--json` it is exactly one JSON object on the last line.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Subcommand;
use client::{
    Acks, Admin, Compression, Consumer, ConsumerConfig, ErrorCode, NewTopic, Producer,
    ProducerConfig, ProducerRecord, SeekTo, TopicPartition,
};
use hdrhistogram::Histogram;
use serde_json::json;

use super::Common;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Produce records as fast as allowed; report throughput and acknowledgement latency.
    Produce(BenchArgs),
    /// Read a topic from the beginning; report throughput and poll latency.
    Consume(BenchArgs),
    /// Produce and consume at once; report end-to-end latency.
    E2e(BenchArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    #[arg(long, short = 't', default_value = "moldau-bench")]
    pub topic: String,
    /// Records to produce (produce, e2e) or read (consume). Default: 1,000,000 for produce
    /// and e2e without --duration; consume reads up to the end offsets seen at start.
    #[arg(long, short = 'n')]
    pub records: Option<u64>,
    /// Value size in bytes.
    #[arg(long, short = 's', default_value_t = 1024)]
    pub record_size: usize,
    /// Target records per second over all producers; 0 = as fast as possible.
    #[arg(long, short = 'r', default_value_t = 0)]
    pub rate: u64,
    /// Run for this many seconds (instead of a record count).
    #[arg(long, short = 'd')]
    pub duration: Option<f64>,
    /// 0, 1 or all.
    #[arg(long, default_value = "1")]
    pub acks: String,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long, short = 'z', default_value = "none")]
    pub compression: String,
    /// Create the topic with this many partitions if it does not exist.
    #[arg(long, short = 'p')]
    pub partitions: Option<i32>,
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Producer batch.size in bytes.
    #[arg(long, default_value_t = 256 * 1024)]
    pub batch_size: usize,
    /// Producer linger.ms.
    #[arg(long, default_value_t = 1)]
    pub linger_ms: u64,
    /// Produce requests in flight per broker connection.
    #[arg(long, default_value_t = 5)]
    pub in_flight: usize,
    /// Consume with this group (subscribe) instead of manual assignment.
    #[arg(long, short = 'g')]
    pub group: Option<String>,
    /// Seconds between progress lines on stderr; 0 turns them off.
    #[arg(long, default_value_t = 1.0)]
    pub progress_interval: f64,
    /// Produce in transactions (one transactional.id per producer) of
    /// --transaction-size records each; the summary adds commit (EndTxn) latency.
    #[arg(long)]
    pub transactional: bool,
    /// Records per transaction with --transactional.
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub transaction_size: u64,
    /// With --transactional, abort every N-th transaction instead of committing it (0:
    /// never); for data sets with aborted transactions in them.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub abort_every: u64,
    /// read_uncommitted or read_committed (consume, e2e).
    #[arg(long, default_value = "read_uncommitted")]
    pub isolation: String,
    #[command(flatten)]
    pub common: Common,
}

/// Counters and the latency histogram shared by all workers.
struct Stats {
    records: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
    latency_us: Mutex<Histogram<u64>>,
    /// When a consumer first had partitions (consume: the clock starts there, so a group
    /// join does not dilute throughput).
    first_assigned: std::sync::OnceLock<Instant>,
    /// Transactions committed, how long each commit (flush + EndTxn) took, and the EndTxn
    /// round trip alone (after the flush).
    transactions: AtomicU64,
    /// Transactions aborted on purpose (--abort-every).
    aborted: AtomicU64,
    commit_us: Mutex<Histogram<u64>>,
    end_txn_us: Mutex<Histogram<u64>>,
}

impl Stats {
    fn new() -> anyhow::Result<Arc<Stats>> {
        Ok(Arc::new(Stats {
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            first_error: Mutex::new(None),
            latency_us: Mutex::new(
                Histogram::new_with_bounds(1, 3_600_000_000, 3).context("create histogram")?,
            ),
            first_assigned: std::sync::OnceLock::new(),
            transactions: AtomicU64::new(0),
            aborted: AtomicU64::new(0),
            commit_us: Mutex::new(
                Histogram::new_with_bounds(1, 3_600_000_000, 3).context("create histogram")?,
            ),
            end_txn_us: Mutex::new(
                Histogram::new_with_bounds(1, 3_600_000_000, 3).context("create histogram")?,
            ),
        }))
    }

    fn commit(&self, total: Duration, end_txn: Duration) {
        self.transactions.fetch_add(1, Ordering::Relaxed);
        for (h, d) in [(&self.commit_us, total), (&self.end_txn_us, end_txn)] {
            if let Ok(mut h) = h.lock() {
                h.saturating_record(d.as_micros().max(1) as u64);
            }
        }
    }

    fn commit_percentile_ms(&self, q: f64) -> f64 {
        percentile_ms(&self.commit_us, q)
    }

    fn end_txn_percentile_ms(&self, q: f64) -> f64 {
        percentile_ms(&self.end_txn_us, q)
    }

    fn record(&self, bytes: usize, latency: Duration) {
        self.records.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        if let Ok(mut h) = self.latency_us.lock() {
            h.saturating_record(latency.as_micros().max(1) as u64);
        }
    }

    fn error(&self, e: &client::Error) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut f) = self.first_error.lock() {
            f.get_or_insert_with(|| e.to_string());
        }
    }

    fn percentile_ms(&self, q: f64) -> f64 {
        self.latency_us
            .lock()
            .map(|h| h.value_at_quantile(q) as f64 / 1000.0)
            .unwrap_or(0.0)
    }

    fn max_ms(&self) -> f64 {
        self.latency_us
            .lock()
            .map(|h| h.max() as f64 / 1000.0)
            .unwrap_or(0.0)
    }
}

const MB: f64 = 1024.0 * 1024.0;

fn spawn_progress(
    label: &'static str,
    stats: Arc<Stats>,
    start: Instant,
    interval: f64,
    stop: Arc<AtomicBool>,
) -> Option<tokio::task::JoinHandle<()>> {
    if interval <= 0.0 {
        return None;
    }
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs_f64(interval));
        tick.tick().await;
        let (mut last_records, mut last_bytes, mut last_t) = (0u64, 0u64, Instant::now());
        while !stop.load(Ordering::Acquire) {
            tick.tick().await;
            let (r, b, now) = (
                stats.records.load(Ordering::Relaxed),
                stats.bytes.load(Ordering::Relaxed),
                Instant::now(),
            );
            let dt = now.duration_since(last_t).as_secs_f64().max(1e-9);
            let line = format!(
                "{:7.1}s {label}: {r} records, {:.0} rec/s, {:.1} MB/s, p50 {:.2} ms, p99 {:.2} ms, errors {}",
                now.duration_since(start).as_secs_f64(),
                (r - last_records) as f64 / dt,
                (b - last_bytes) as f64 / MB / dt,
                stats.percentile_ms(0.5),
                stats.percentile_ms(0.99),
                stats.errors.load(Ordering::Relaxed),
            );
            // On a terminal the line updates in place; in a log each second gets a line.
            if tty {
                eprint!("\r{line}\x1b[K");
            } else {
                eprintln!("{line}");
            }
            (last_records, last_bytes, last_t) = (r, b, now);
        }
    }))
}

fn summarize(kind: &str, args: &BenchArgs, stats: &Stats, elapsed: Duration) -> anyhow::Result<()> {
    if args.progress_interval > 0.0 && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!(); // end the in-place progress line
    }
    let secs = elapsed.as_secs_f64().max(1e-9);
    let records = stats.records.load(Ordering::Relaxed);
    let bytes = stats.bytes.load(Ordering::Relaxed);
    let errors = stats.errors.load(Ordering::Relaxed);
    let rps = records as f64 / secs;
    let mbps = bytes as f64 / MB / secs;
    let (p50, p99, p999, max) = (
        stats.percentile_ms(0.5),
        stats.percentile_ms(0.99),
        stats.percentile_ms(0.999),
        stats.max_ms(),
    );
    if args.common.json {
        let v = json!({
            "bench": kind,
            "topic": args.topic,
            "records": records,
            "bytes": bytes,
            "errors": errors,
            "seconds": (secs * 1000.0).round() / 1000.0,
            "records_per_sec": rps.round(),
            "mb_per_sec": (mbps * 100.0).round() / 100.0,
            "p50_ms": p50,
            "p99_ms": p99,
            "p999_ms": p999,
            "max_ms": max,
            // Consume reads whatever is there: report the average value size it saw.
            "record_size": if kind == "consume" { bytes.checked_div(records).unwrap_or(0) } else { args.record_size as u64 },
            "acks": args.acks,
            "compression": args.compression,
            "producers": args.producers,
            "consumers": args.consumers,
            "transactional": args.transactional,
            "transaction_size": if args.transactional { Some(args.transaction_size) } else { None },
            "transactions": stats.transactions.load(Ordering::Relaxed),
            "transactions_aborted": stats.aborted.load(Ordering::Relaxed),
            "commit_p50_ms": stats.commit_percentile_ms(0.5),
            "commit_p99_ms": stats.commit_percentile_ms(0.99),
            "end_txn_p50_ms": stats.end_txn_percentile_ms(0.5),
            "end_txn_p99_ms": stats.end_txn_percentile_ms(0.99),
            "isolation": args.isolation,
        });
        println!("{v}");
    } else {
        let what = match kind {
            "produce" => "send-to-ack latency",
            "consume" => "poll latency",
            _ => "end-to-end latency",
        };
        println!(
            "{kind}: {records} records ({:.1} MB) in {secs:.2} s: {rps:.0} records/s, {mbps:.2} MB/s, {errors} errors",
            bytes as f64 / MB
        );
        println!("{what} ms: p50 {p50:.3}, p99 {p99:.3}, p99.9 {p999:.3}, max {max:.3}");
        let txns = stats.transactions.load(Ordering::Relaxed);
        if txns > 0 {
            println!(
                "{txns} transactions of {} records; commit (flush + EndTxn) ms: p50 {:.3}, p99 {:.3}; EndTxn alone ms: p50 {:.3}, p99 {:.3}",
                args.transaction_size,
                stats.commit_percentile_ms(0.5),
                stats.commit_percentile_ms(0.99),
                stats.end_txn_percentile_ms(0.5),
                stats.end_txn_percentile_ms(0.99)
            );
        }
        let aborted = stats.aborted.load(Ordering::Relaxed);
        if aborted > 0 {
            println!("{aborted} transactions aborted (--abort-every)");
        }
    }
    if let Ok(Some(e)) = stats.first_error.lock().map(|e| e.clone()) {
        eprintln!("moldau bench: first error: {e}");
    }
    Ok(())
}

async fn ensure_topic(args: &BenchArgs, admin: &Admin) -> anyhow::Result<()> {
    if let Some(p) = args.partitions {
        match admin.create_topic(NewTopic::new(&args.topic, p)).await {
            Ok(()) => {}
            Err(e) if e.code() == Some(ErrorCode::TopicAlreadyExists) => {}
            Err(e) => return Err(e).with_context(|| format!("create topic {}", args.topic)),
        }
    }
    Ok(())
}

pub async fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Produce(a) => produce(a).await,
        BenchCommand::Consume(a) => consume(a).await,
        BenchCommand::E2e(a) => e2e(a).await,
    }
}

fn producer_config(args: &BenchArgs) -> anyhow::Result<ProducerConfig> {
    let mut client = args.common.client_config()?;
    client.client_id = "moldau-bench".into();
    client.in_flight_max = args.in_flight.max(1);
    Ok(ProducerConfig {
        client,
        acks: Acks::parse(&args.acks).with_context(|| format!("bad --acks {:?}", args.acks))?,
        compression: Compression::from_name(&args.compression)
            .with_context(|| format!("bad --compression {:?}", args.compression))?,
        linger_ms: args.linger_ms,
        batch_size: args.batch_size.max(1),
        buffer_memory: (64 * 1024 * 1024).max(args.record_size * 4 + 1024 * 1024),
        max_request_size: (1024 * 1024).max(args.record_size + 1024),
        ..ProducerConfig::default()
    })
}

fn percentile_ms(h: &Mutex<Histogram<u64>>, q: f64) -> f64 {
    h.lock()
        .map(|h| h.value_at_quantile(q) as f64 / 1000.0)
        .unwrap_or(0.0)
}

/// Ends the producer's transaction (commits, or aborts when `abort`): flushes, then ends it
/// (timed apart; only commits are counted); false on error (recorded).
async fn commit(producer: &Producer, stats: &Stats, abort: bool) -> bool {
    let t = Instant::now();
    let r = match producer.flush().await {
        Ok(()) => {
            let end = Instant::now();
            let r = if abort {
                producer.abort_transaction().await
            } else {
                producer.commit_transaction().await
            };
            r.map(|()| end.elapsed())
        }
        Err(e) => Err(e),
    };
    match r {
        Ok(_) if abort => {
            stats.aborted.fetch_add(1, Ordering::Relaxed);
            true
        }
        Ok(end_txn) => {
            stats.commit(t.elapsed(), end_txn);
            true
        }
        Err(e) => {
            stats.error(&e);
            false
        }
    }
}

/// `read_committed` / `read_uncommitted` to Kafka's isolation level byte.
fn isolation_level(args: &BenchArgs) -> anyhow::Result<i8> {
    match args.isolation.as_str() {
        "read_uncommitted" => Ok(0),
        "read_committed" => Ok(1),
        other => bail!("bad --isolation {other:?} (read_uncommitted or read_committed)"),
    }
}

/// Pseudo-random filler so compression has something realistic (half random, half repeated).
fn filler(size: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..size)
        .map(|i| {
            if i % 2 == 0 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b'a' + (x % 26) as u8
            } else {
                b'x'
            }
        })
        .collect()
}

/// Runs `producers` producer tasks; `stamp` embeds the send time (µs since `epoch`).
async fn run_producers(
    args: &BenchArgs,
    stats: Arc<Stats>,
    epoch: Instant,
    stamp: bool,
    total: Option<u64>,
    deadline: Option<Instant>,
) -> anyhow::Result<u64> {
    let config = producer_config(args)?;
    let producers = args.producers.max(1);
    let base = Bytes::from(filler(args.record_size));
    let mut tasks = Vec::new();
    let txn_size = args.transaction_size.max(1);
    for i in 0..producers {
        let mut config = config.clone();
        if args.transactional {
            config.transactional_id = Some(format!("moldau-bench-{}-{i}", std::process::id()));
        }
        let producer = Producer::new(config)
            .await
            .with_context(|| format!("connect to {}", args.common.brokers))?;
        if args.transactional {
            producer
                .init_transactions()
                .await
                .context("init transactions")?;
        }
        let transactional = args.transactional;
        let abort_every = args.abort_every;
        let stats = stats.clone();
        let topic = args.topic.clone();
        let base = base.clone();
        let per =
            total.map(|t| t / producers as u64 + u64::from((i as u64) < t % producers as u64));
        let rate = args.rate as f64 / producers as f64;
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            let mut n = 0u64;
            let mut txns = 0u64;
            let end = |txns: &mut u64| {
                *txns += 1;
                abort_every > 0 && (*txns).is_multiple_of(abort_every)
            };
            loop {
                if per.is_some_and(|p| n >= p) || deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                if transactional && n.is_multiple_of(txn_size) {
                    if n > 0 && !commit(&producer, &stats, end(&mut txns)).await {
                        break;
                    }
                    if let Err(e) = producer.begin_transaction() {
                        stats.error(&e);
                        break;
                    }
                }
                if rate > 0.0 {
                    let due = start + Duration::from_secs_f64(n as f64 / rate);
                    if due > Instant::now() {
                        tokio::time::sleep_until(due.into()).await;
                    }
                }
                let value = if stamp && base.len() >= 8 {
                    let mut v = base.to_vec();
                    let us = epoch.elapsed().as_micros() as u64;
                    v[..8].copy_from_slice(&us.to_be_bytes());
                    Bytes::from(v)
                } else {
                    base.clone()
                };
                let size = value.len();
                let sent = Instant::now();
                let s = stats.clone();
                let r = producer
                    .send_with_callback(ProducerRecord::new(topic.clone(), value), move |r| match r
                    {
                        Ok(_) => {
                            if !stamp {
                                s.record(size, sent.elapsed());
                            }
                        }
                        Err(e) => s.error(&e),
                    })
                    .await;
                if let Err(e) = r {
                    stats.error(&e);
                    if !e.is_retriable() {
                        break;
                    }
                }
                n += 1;
            }
            if transactional && n > 0 {
                commit(&producer, &stats, end(&mut txns)).await;
            }
            let _ = producer.close().await;
            n
        }));
    }
    let mut sent = 0;
    for t in tasks {
        sent += t.await.context("producer task")?;
    }
    Ok(sent)
}

/// When a produce or e2e run stops: after `--duration` from `start`, after `--records`, or
/// (with neither) after 1,000,000 records.
fn run_limits(args: &BenchArgs, start: Instant) -> (Option<Instant>, Option<u64>) {
    let deadline = args.duration.map(|d| start + Duration::from_secs_f64(d));
    let total = args.records.or(if deadline.is_none() {
        Some(1_000_000)
    } else {
        None
    });
    (deadline, total)
}

async fn produce(args: BenchArgs) -> anyhow::Result<()> {
    let admin = args.common.admin().await?;
    ensure_topic(&args, &admin).await?;
    let stats = Stats::new()?;
    let start = Instant::now();
    let (deadline, total) = run_limits(&args, start);
    let stop = Arc::new(AtomicBool::new(false));
    let progress = spawn_progress(
        "produce",
        stats.clone(),
        start,
        args.progress_interval,
        stop.clone(),
    );
    let result = run_producers(&args, stats.clone(), start, false, total, deadline).await;
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Release);
    if let Some(p) = progress {
        p.abort();
    }
    result?;
    summarize("produce", &args, &stats, elapsed)?;
    fail_on_errors(&stats)
}

fn fail_on_errors(stats: &Stats) -> anyhow::Result<()> {
    let errors = stats.errors.load(Ordering::Relaxed);
    if errors > 0 {
        bail!("{errors} errors during the benchmark");
    }
    Ok(())
}

/// Splits the topic's partitions over `n` consumers, round robin.
async fn consumers_for(args: &BenchArgs, from: SeekTo) -> anyhow::Result<Vec<Consumer>> {
    let mut out = Vec::new();
    let n = args.consumers.max(1);
    let probe = client::Client::connect(args.common.client_config()?)
        .await
        .with_context(|| format!("connect to {}", args.common.brokers))?;
    let topic = probe
        .topic_fresh(&args.topic, false)
        .await
        .with_context(|| format!("look up topic {}", args.topic))?;
    for i in 0..n {
        let mut config = ConsumerConfig {
            client: args.common.client_config()?,
            group_id: args.group.clone(),
            auto_offset_reset: if from == SeekTo::Beginning {
                client::OffsetReset::Earliest
            } else {
                client::OffsetReset::Latest
            },
            max_poll_records: 10_000,
            fetch_max_wait_ms: 100,
            isolation_level: isolation_level(args)?,
            ..ConsumerConfig::default()
        };
        config.client.client_id = "moldau-bench".into();
        let mut c = Consumer::new(config)
            .await
            .with_context(|| format!("connect to {}", args.common.brokers))?;
        if args.group.is_some() {
            c.subscribe(&[args.topic.as_str()])?;
        } else {
            let mine: Vec<TopicPartition> = topic
                .partitions
                .iter()
                .filter(|p| p.partition as usize % n == i)
                .map(|p| TopicPartition::new(&args.topic, p.partition))
                .collect();
            c.assign(mine.clone());
            for tp in &mine {
                c.seek(tp, from);
            }
        }
        out.push(c);
    }
    Ok(out)
}

async fn consume(args: BenchArgs) -> anyhow::Result<()> {
    let admin = args.common.admin().await?;
    let info = admin
        .describe_topics(std::slice::from_ref(&args.topic))
        .await
        .with_context(|| format!("describe topic {}", args.topic))?;
    let tps: Vec<(TopicPartition, i64)> = info
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (TopicPartition::new(&t.name, p.partition), -1))
        })
        .collect();
    let ends = admin
        .list_offsets_isolated(&tps, isolation_level(&args)?)
        .await
        .context("list end offsets")?;
    let starts = admin
        .list_offsets(
            &tps.iter()
                .map(|(tp, _)| (tp.clone(), -2))
                .collect::<Vec<_>>(),
        )
        .await
        .context("list start offsets")?;
    let available: u64 = ends
        .iter()
        .map(|(tp, e)| (e - starts.get(tp).copied().unwrap_or(0)).max(0) as u64)
        .sum();
    let target = args.records.unwrap_or(available);
    if target == 0 && args.duration.is_none() {
        bail!(
            "topic {} is empty: produce first (moldau bench produce)",
            args.topic
        );
    }
    let consumers = consumers_for(&args, SeekTo::Beginning).await?;
    let stats = Stats::new()?;
    let start = Instant::now();
    let deadline = args.duration.map(|d| start + Duration::from_secs_f64(d));
    let stop = Arc::new(AtomicBool::new(false));
    let progress = spawn_progress(
        "consume",
        stats.clone(),
        start,
        args.progress_interval,
        stop.clone(),
    );
    // Without --records or --duration, read up to the end offsets seen at start (transaction
    // markers and aborted records occupy offsets, so positions decide, not record counts).
    let by_position = args.records.is_none() && args.duration.is_none();
    let ends = Arc::new(ends);
    let mut tasks = Vec::new();
    for mut c in consumers {
        let stats = stats.clone();
        let stop = stop.clone();
        let ends = ends.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let at_end = by_position && {
                    let assigned = c.assignment();
                    !assigned.is_empty()
                        && assigned.iter().all(|tp| {
                            let end = ends.get(tp).copied().unwrap_or(0);
                            c.position(tp).is_some_and(|p| p >= end)
                        })
                };
                if stop.load(Ordering::Acquire)
                    || at_end
                    || deadline.is_some_and(|d| Instant::now() >= d)
                    || args.records.is_some() && stats.records.load(Ordering::Relaxed) >= target
                {
                    break;
                }
                if !c.assignment().is_empty() {
                    stats.first_assigned.get_or_init(Instant::now);
                }
                let t0 = Instant::now();
                match c.poll(Duration::from_millis(200)).await {
                    Ok(rs) if !rs.is_empty() => {
                        let waited = t0.elapsed();
                        let bytes: usize = rs
                            .iter()
                            .map(|r| r.value.as_ref().map_or(0, Bytes::len))
                            .sum();
                        stats.records.fetch_add(rs.len() as u64, Ordering::Relaxed);
                        stats.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
                        if let Ok(mut h) = stats.latency_us.lock() {
                            h.saturating_record(waited.as_micros().max(1) as u64);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        stats.error(&e);
                        break;
                    }
                }
            }
            if !by_position {
                stop.store(true, Ordering::Release);
            }
            let _ = c.close().await;
        }));
    }
    for t in tasks {
        t.await.context("consumer task")?;
    }
    // Throughput counts from when partitions were first assigned, so joining a group does
    // not dilute it (with manual assignment that is the start).
    let elapsed = stats
        .first_assigned
        .get()
        .copied()
        .unwrap_or(start)
        .elapsed();
    stop.store(true, Ordering::Release);
    if let Some(p) = progress {
        p.abort();
    }
    summarize("consume", &args, &stats, elapsed)?;
    fail_on_errors(&stats)
}

async fn e2e(args: BenchArgs) -> anyhow::Result<()> {
    if args.record_size < 8 {
        bail!("e2e needs --record-size >= 8 (the send time travels in the value)");
    }
    let admin = args.common.admin().await?;
    ensure_topic(&args, &admin).await?;
    // Make sure the topic exists (auto-created by metadata if the broker allows) before the
    // consumers look it up.
    admin
        .client()
        .topic_fresh(&args.topic, true)
        .await
        .with_context(|| format!("look up topic {}", args.topic))?;
    let mut consumers = consumers_for(&args, SeekTo::End).await?;
    // Resolve every consumer's position (the current end) before producing.
    for c in &mut consumers {
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.positions().len() < c.assignment().len() || c.assignment().is_empty() {
            if Instant::now() >= deadline {
                bail!("consumers did not get positions within 30 s");
            }
            c.poll(Duration::from_millis(50))
                .await
                .context("start consumer")?;
        }
    }
    let stats = Stats::new()?;
    let epoch = Instant::now();
    let (deadline, total) = run_limits(&args, epoch);
    let stop = Arc::new(AtomicBool::new(false));
    let produced = Arc::new(AtomicU64::new(u64::MAX));
    let progress = spawn_progress(
        "e2e",
        stats.clone(),
        epoch,
        args.progress_interval,
        stop.clone(),
    );
    let mut tasks = Vec::new();
    for mut c in consumers {
        let stats = stats.clone();
        let stop = stop.clone();
        let produced = produced.clone();
        tasks.push(tokio::spawn(async move {
            let mut idle_since: Option<Instant> = None;
            loop {
                let goal = produced.load(Ordering::Acquire);
                if stop.load(Ordering::Acquire) || stats.records.load(Ordering::Relaxed) >= goal {
                    break;
                }
                // Once producing ended, give stragglers 10 s.
                if goal != u64::MAX
                    && idle_since.get_or_insert_with(Instant::now).elapsed()
                        > Duration::from_secs(10)
                {
                    break;
                }
                match c.poll(Duration::from_millis(100)).await {
                    Ok(rs) => {
                        let now_us = epoch.elapsed().as_micros() as u64;
                        for r in &rs {
                            let Some(v) = r.value.as_ref().filter(|v| v.len() >= 8) else {
                                continue;
                            };
                            let mut b = [0u8; 8];
                            b.copy_from_slice(&v[..8]);
                            let sent = u64::from_be_bytes(b);
                            stats.record(
                                v.len(),
                                Duration::from_micros(now_us.saturating_sub(sent)),
                            );
                        }
                    }
                    Err(e) => {
                        stats.error(&e);
                        break;
                    }
                }
            }
            let _ = c.close().await;
        }));
    }
    let result = run_producers(&args, stats.clone(), epoch, true, total, deadline).await;
    match &result {
        Ok(n) => produced.store(*n, Ordering::Release),
        Err(_) => stop.store(true, Ordering::Release),
    }
    for t in tasks {
        t.await.context("consumer task")?;
    }
    let elapsed = epoch.elapsed();
    stop.store(true, Ordering::Release);
    if let Some(p) = progress {
        p.abort();
    }
    let sent = result?;
    summarize("e2e", &args, &stats, elapsed)?;
    let got = stats.records.load(Ordering::Relaxed);
    if got < sent {
        bail!("consumed {got} of {sent} produced records");
    }
    fail_on_errors(&stats)
}
