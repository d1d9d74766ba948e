//! Storage benchmark: machine ceilings and the engine measured in the same run, same dir.
//!
//! Run: `cargo bench -p storage --bench storage_bench` (env: `MOLDAU_BENCH_DIR` = where to
//! write, default the system temp dir; `MOLDAU_BENCH_MB` = data per throughput phase,
//! default 512; `MOLDAU_BENCH_SECS` = seconds per fsync phase, default 3).
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

    // Ceiling 1: plain buffered sequential write of the same bytes.
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
    let plain_write = mbps(bytes, t.elapsed());
    println!("ceiling  plain buffered write          {plain_write:9.1} MiB/s");

    // Ceiling 2: plain sequential read of that file (page cache, 1 MiB reads).
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
    let plain_read = mbps(bytes, t.elapsed());
    println!("ceiling  plain sequential read         {plain_read:9.1} MiB/s");
    std::fs::remove_file(&plain).expect("remove");

    // Ceiling 3: write + fdatasync per 64 KiB batch, single writer.
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

    // Engine 1: append, no fsync.
    let log_dir = root.path().join("bench-0");
    let log = open_log(&log_dir, TopicConfig::default());
    let t = Instant::now();
    for _ in 0..n_batches {
        log.append(batch.clone(), 0).expect("append");
    }
    let append_rate = mbps(bytes, t.elapsed());
    println!(
        "engine   append no fsync               {append_rate:9.1} MiB/s ({:.0}% of plain write)",
        100.0 * append_rate / plain_write
    );

    // Engine 2: sequential read of whole batches, 1 MiB per read.
    let t = Instant::now();
    let mut off = 0;
    let mut n = 0u64;
    while off < log.log_end_offset() {
        let r = log.read(off, 1 << 20, i64::MAX, true).expect("read");
        n += r.data.len() as u64;
        off = r.next_offset;
    }
    assert_eq!(n, bytes);
    let read_rate = mbps(bytes, t.elapsed());
    println!(
        "engine   sequential read (1 MiB reads) {read_rate:9.1} MiB/s ({:.0}% of plain read)",
        100.0 * read_rate / plain_read
    );
    log.delete_dir().expect("delete");
    drop(log);

    // Engine 3: group commit, 8 writers each appending then waiting for durability.
    let log = Arc::new(open_log(
        &root.path().join("bench-1"),
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
                while !stop.load(Ordering::Relaxed) {
                    let info = log.append(batch.clone(), 0).expect("append");
                    rt.block_on(log.wait_durable(info.last_offset))
                        .expect("durable");
                    written.fetch_add(batch.len() as u64, Ordering::Relaxed);
                }
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
        "engine   group commit, 8 writers       {gc_rate:9.1} MiB/s ({:.0}% of no-fsync append, {:.1}x write+fdatasync)",
        100.0 * gc_rate / append_rate,
        gc_rate / sync_rate
    );
    log.delete_dir().expect("delete");
    drop(log);

    // Engine 4: lookups on small and large logs (100-byte records, one per batch).
    for n in [1_000u64, 100_000, 1_000_000] {
        let log = open_log(
            &root.path().join(format!("lookup-{n}")),
            TopicConfig::default(),
        );
        let t0 = 1_700_000_000_000i64;
        for i in 0..n {
            log.append(small_batch(t0 + i as i64), 0).expect("append");
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
