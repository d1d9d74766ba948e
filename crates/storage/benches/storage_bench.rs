//! Storage benchmark: machine ceilings and the engine measured in the same run, same dir.
//!
//! Run: `cargo bench -p storage --bench storage_bench` (env: `MOLDAU_BENCH_DIR` = where to
//! write, default the system temp dir; `MOLDAU_BENCH_MB` = data per throughput phase,
//! default 512; `MOLDAU_BENCH_SECS` = seconds per fsync phase, default 3;
//! `MOLDAU_BENCH_ONLY=throughput` = stop after the append/read phases, for profiling).
//!
//! Ceilings: plain buffered sequential write of the same bytes, write+fdatasync of the same
//! batch size, plain sequential read of the written file. Engine: append of 1 KiB records
//! in 64 KiB batches without fsync; group-committed appends from 8 concurrent writers; a
//! sequential read of whole batches; offset and timestamp lookups on small and large logs.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use model::TopicConfig;
use record::{BatchBuilder, Compression, NewRecord};
use storage::{Log, SystemClock};

const RECORD: usize = 1024;
const BATCH: usize = 64 * 1024;

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn mbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / (1024.0 * 1024.0) / d.as_secs_f64()
}

fn batch_64k(ts: i64) -> Bytes {
    let mut b = BatchBuilder::new(Compression::None);
    let value = Bytes::from(vec![b'x'; RECORD]);
    while b.estimated_size() + RECORD + 16 <= BATCH {
        b.push(NewRecord::new(None, Some(value.clone()), ts));
    }
    b.build().expect("build batch")
}

fn small_batch(ts: i64) -> Bytes {
    let mut b = BatchBuilder::new(Compression::None);
    b.push(NewRecord::new(None, Some(Bytes::from(vec![b'y'; 100])), ts));
    b.build().expect("build batch")
}

fn open_log(dir: &Path, config: TopicConfig) -> Log {
    Log::open(dir, config, Arc::new(SystemClock)).expect("open log")
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn main() {
    let base = std::env::var("MOLDAU_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let root = tempfile::tempdir_in(&base).expect("bench dir");
    let total = env_u64("MOLDAU_BENCH_MB", 512) * 1024 * 1024;
    let secs = env_u64("MOLDAU_BENCH_SECS", 3);
    let batch = batch_64k(SystemClock.now_ms_i64());
    let n_batches = total / batch.len() as u64;
    let bytes = n_batches * batch.len() as u64;
    println!(
        "dir {} | {} batches of {} bytes ({} x {} B records), {:.0} MiB per phase",
        root.path().display(),
        n_batches,
        batch.len(),
        record::BatchHeader::parse(&batch)
            .expect("header")
            .records_count,
        RECORD,
        bytes as f64 / 1048576.0
    );

    if std::env::var("MOLDAU_BENCH_ONLY").is_ok_and(|v| v == "read") {
        // Profiling aid: repeated engine reads of one log.
        let log = open_log(&root.path().join("read-only"), TopicConfig::default());
        for _ in 0..n_batches {
            log.append(batch.clone(), 0).expect("append");
        }
        for _ in 0..10 {
            let t = Instant::now();
            let mut off = 0;
            while off < log.log_end_offset() {
                off = log
                    .read(off, 1 << 20, i64::MAX, true)
                    .expect("read")
                    .next_offset;
            }
            println!("engine   read {:9.1} MiB/s", mbps(bytes, t.elapsed()));
            let t = Instant::now();
            let f = File::open(
                root.path()
                    .join("read-only")
                    .join("00000000000000000000.log"),
            )
            .expect("open");
            let mut buf = vec![0u8; 1 << 20];
            let mut pos = 0u64;
            use std::os::unix::fs::FileExt;
            loop {
                let k = f.read_at(&mut buf, pos).expect("read");
                if k == 0 {
                    break;
                }
                pos += k as u64;
            }
            println!(
                "plain    pread of the segment {:9.1} MiB/s",
                mbps(pos, t.elapsed())
            );
        }
        return;
    }

    // Throughput phases alternate ceiling and engine, three rounds, best of each: the
    // machine is shared, so a single pass is at the mercy of neighbours and writeback.
    let (mut plain_write, mut plain_read, mut append_rate, mut read_rate) =
        (0f64, 0f64, 0f64, 0f64);
    let mut plain_write_per_batch = 0f64;
    let mut plain_read_segment = 0f64;
    for round in 0..3 {
        // Ceiling: the same bytes with one write(2) per batch, as an append must do.
        let plain = root.path().join("plain-per-batch.bin");
        let t = Instant::now();
        {
            let mut f = File::create(&plain).expect("create");
            for _ in 0..n_batches {
                f.write_all(&batch).expect("write");
            }
        }
        plain_write_per_batch = plain_write_per_batch.max(mbps(bytes, t.elapsed()));
        std::fs::remove_file(&plain).expect("remove");

        // Ceiling: plain buffered sequential write of the same bytes.
        let plain = root.path().join("plain.bin");
        let t = Instant::now();
        {
            let mut f =
                std::io::BufWriter::with_capacity(1 << 20, File::create(&plain).expect("create"));
            for _ in 0..n_batches {
                f.write_all(&batch).expect("write");
            }
            f.flush().expect("flush");
        }
        plain_write = plain_write.max(mbps(bytes, t.elapsed()));

        // Ceiling: plain sequential read of that file (page cache, 1 MiB reads).
        let t = Instant::now();
        {
            let mut f = File::open(&plain).expect("open");
            let mut buf = vec![0u8; 1 << 20];
            let mut n = 0u64;
            loop {
                let k = f.read(&mut buf).expect("read");
                if k == 0 {
                    break;
                }
                n += k as u64;
            }
            assert_eq!(n, bytes);
        }
        plain_read = plain_read.max(mbps(bytes, t.elapsed()));
        std::fs::remove_file(&plain).expect("remove");

        // Engine: append, no fsync.
        let log = open_log(
            &root.path().join(format!("bench-{round}")),
            TopicConfig::default(),
        );
        let t = Instant::now();
        for _ in 0..n_batches {
            log.append(batch.clone(), 0).expect("append");
        }
        append_rate = append_rate.max(mbps(bytes, t.elapsed()));

        // Engine: sequential read of whole batches, 1 MiB per read.
        let t = Instant::now();
        let mut off = 0;
        let mut n = 0u64;
        while off < log.log_end_offset() {
            let r = log.read(off, 1 << 20, i64::MAX, true).expect("read");
            n += r.data.len() as u64;
            off = r.next_offset;
        }
        assert_eq!(n, bytes);
        read_rate = read_rate.max(mbps(bytes, t.elapsed()));

        // Ceiling: plain 1 MiB preads of the engine's own segment file. The page cache may
        // hold a file written in 64 KiB appends in smaller folios than one written in 1 MiB
        // chunks, so this is the like-for-like read ceiling.
        let t = Instant::now();
        {
            use std::os::unix::fs::FileExt;
            let f = File::open(log.dir().join("00000000000000000000.log")).expect("open");
            let mut buf = vec![0u8; 1 << 20];
            let mut pos = 0u64;
            loop {
                let k = f.read_at(&mut buf, pos).expect("read");
                if k == 0 {
                    break;
                }
                pos += k as u64;
            }
            assert_eq!(pos, bytes);
        }
        plain_read_segment = plain_read_segment.max(mbps(bytes, t.elapsed()));
        log.delete_dir().expect("delete");
    }
    println!("ceiling  plain buffered write (1 MiB)  {plain_write:9.1} MiB/s");
    println!("ceiling  plain write(2) per 64 KiB     {plain_write_per_batch:9.1} MiB/s");
    println!("ceiling  plain read of that file       {plain_read:9.1} MiB/s");
    println!("ceiling  plain pread of the log file   {plain_read_segment:9.1} MiB/s");
    println!(
        "engine   append no fsync               {append_rate:9.1} MiB/s ({:.0}% of buffered write, {:.0}% of write(2) per batch)",
        100.0 * append_rate / plain_write,
        100.0 * append_rate / plain_write_per_batch
    );
    println!(
        "engine   sequential read (1 MiB reads) {read_rate:9.1} MiB/s ({:.0}% of plain read, {:.0}% of pread of the log file)",
        100.0 * read_rate / plain_read,
        100.0 * read_rate / plain_read_segment
    );

    if std::env::var("MOLDAU_BENCH_ONLY").is_ok_and(|v| v == "throughput") {
        return;
    }

    // Ceiling: write + fdatasync per 64 KiB batch, single writer.
    let synced = root.path().join("synced.bin");
    let (sync_rate, sync_ops) = {
        let mut f = File::create(&synced).expect("create");
        let t = Instant::now();
        let mut n = 0u64;
        while t.elapsed() < Duration::from_secs(secs) {
            f.write_all(&batch).expect("write");
            f.sync_data().expect("fdatasync");
            n += 1;
        }
        let d = t.elapsed();
        (mbps(n * batch.len() as u64, d), n as f64 / d.as_secs_f64())
    };
    println!(
        "ceiling  write+fdatasync 64 KiB        {sync_rate:9.1} MiB/s ({sync_ops:.0} fsyncs/s)"
    );
    std::fs::remove_file(&synced).expect("remove");

    // Engine: group commit, 8 writers, each appending and waiting for durability with
    // 1 request in flight, then 5 (a Kafka producer's default max.in.flight).
    for in_flight in [1usize, 5] {
        let log = Arc::new(open_log(
            &root.path().join(format!("gc-{in_flight}")),
            TopicConfig::default(),
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicU64::new(0));
        let t = Instant::now();
        let writers: Vec<_> = (0..8)
            .map(|_| {
                let (log, stop, written, batch) =
                    (log.clone(), stop.clone(), written.clone(), batch.clone());
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .expect("runtime");
                    rt.block_on(async {
                        let mut pending = tokio::task::JoinSet::new();
                        while !stop.load(Ordering::Relaxed) {
                            while pending.len() >= in_flight {
                                pending.join_next().await;
                            }
                            let info = log.append(batch.clone(), 0).expect("append");
                            let (log, written, len) = (log.clone(), written.clone(), batch.len());
                            pending.spawn(async move {
                                log.wait_durable(info.last_offset).await.expect("durable");
                                written.fetch_add(len as u64, Ordering::Relaxed);
                            });
                        }
                        while pending.join_next().await.is_some() {}
                    });
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs(secs));
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().expect("writer");
        }
        let gc_rate = mbps(written.load(Ordering::Relaxed), t.elapsed());
        println!(
            "engine   group commit, 8 writers x {in_flight} in flight {gc_rate:7.1} MiB/s ({:.0}% of no-fsync append, {:.1}x write+fdatasync)",
            100.0 * gc_rate / append_rate,
            gc_rate / sync_rate
        );
        log.delete_dir().expect("delete");
    }

    // Engine 4: lookups on small and large logs (100-byte records, one per batch).
    for n in [1_000u64, 100_000, 1_000_000] {
        let log = open_log(
            &root.path().join(format!("lookup-{n}")),
            TopicConfig::default(),
        );
        let t0 = 1_700_000_000_000i64;
        let small: Vec<Bytes> = (0..n.min(1000))
            .map(|i| small_batch(t0 + i as i64))
            .collect();
        let t = Instant::now();
        for i in 0..n {
            // Timestamps must grow for the timestamp lookups below; rebuild past the cache.
            let b = if i < 1000 {
                small[i as usize].clone()
            } else {
                small_batch(t0 + i as i64)
            };
            log.append(b, 0).expect("append");
        }
        if n == 1_000_000 {
            let d = t.elapsed();
            println!(
                "engine   append of 1 M one-record batches ({} B): {:.0} batches/s (includes building them)",
                small[0].len(),
                n as f64 / d.as_secs_f64()
            );
        }
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let probes = 100_000u64;
        let t = Instant::now();
        for _ in 0..probes {
            let o = (rng.next() % n) as i64;
            let r = log.read(o, 1, i64::MAX, true).expect("read");
            assert_eq!(r.first_offset, o);
        }
        let read_ns = t.elapsed().as_nanos() as f64 / probes as f64;
        let t = Instant::now();
        for _ in 0..probes {
            let o = (rng.next() % n) as i64;
            let found = log.offset_for_timestamp(t0 + o).expect("found");
            assert_eq!(found.0, o);
        }
        let ts_ns = t.elapsed().as_nanos() as f64 / probes as f64;
        println!(
            "engine   lookups, {n:>9} batches ({:6.1} MiB): offset {read_ns:8.0} ns, timestamp {ts_ns:8.0} ns",
            log.size_bytes() as f64 / 1048576.0
        );
        log.delete_dir().expect("delete");
    }
}

trait NowMs {
    fn now_ms_i64(&self) -> i64;
}

impl NowMs for SystemClock {
    fn now_ms_i64(&self) -> i64 {
        use storage::Clock;
        self.now_ms()
    }
}
