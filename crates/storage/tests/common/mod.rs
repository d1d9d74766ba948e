//! Helpers shared by the storage integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use model::TopicConfig;
use record::{decode_records, BatchBuilder, Compression, NewRecord};
use storage::{Log, ManualClock};

pub const T0: i64 = 1_700_000_000_000;

pub fn config() -> TopicConfig {
    TopicConfig {
        segment_bytes: 4096,
        index_interval_bytes: 256,
        ..TopicConfig::default()
    }
}

pub fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(T0))
}

pub fn open(dir: &Path, config: TopicConfig, clock: &Arc<ManualClock>) -> Log {
    Log::open(dir, config, clock.clone()).unwrap()
}

/// A batch of `n` records whose values are "<tag>-<i>" and timestamps `ts`.
pub fn batch(tag: &str, n: usize, ts: i64) -> Bytes {
    batch_with(Compression::None, tag, n, ts)
}

pub fn batch_with(codec: Compression, tag: &str, n: usize, ts: i64) -> Bytes {
    let mut b = BatchBuilder::new(codec);
    for i in 0..n {
        b.push(NewRecord::value(format!("{tag}-{i}")).timestamp(ts));
    }
    b.build().unwrap()
}

pub fn keyed(records: &[(&str, Option<&str>)], ts: i64) -> Bytes {
    let mut b = BatchBuilder::new(Compression::None);
    for (k, v) in records {
        b.push(NewRecord::new(
            Some(Bytes::copy_from_slice(k.as_bytes())),
            v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
            ts,
        ));
    }
    b.build().unwrap()
}

pub fn idempotent(pid: i64, epoch: i16, seq: i32, n: usize) -> Bytes {
    let mut b = BatchBuilder::new(Compression::None).producer(pid, epoch, seq);
    for i in 0..n {
        b.push(NewRecord::value(format!("p{pid}-{}", seq as usize + i)).timestamp(T0));
    }
    b.build().unwrap()
}

/// Every (offset, value) in `data` (concatenated batches).
pub fn records(data: &Bytes) -> Vec<(i64, Option<Bytes>)> {
    let mut out = Vec::new();
    for b in record::split_batches(data).unwrap() {
        let (_, it) = decode_records(&b, 1 << 24).unwrap();
        for r in it {
            let r = r.unwrap();
            out.push((r.offset, r.value));
        }
    }
    out
}

/// All records from `from` to the log end.
pub fn read_all(log: &Log, from: i64) -> Vec<(i64, Option<Bytes>)> {
    let mut out = Vec::new();
    let mut next = from;
    while next < log.log_end_offset() {
        let r = log.read(next, 1 << 20, i64::MAX, true).unwrap();
        if r.data.is_empty() {
            break;
        }
        out.extend(records(&r.data).into_iter().filter(|(o, _)| *o >= from));
        next = r.next_offset;
    }
    out
}
