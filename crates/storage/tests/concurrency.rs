//! Reads, compaction and retention running concurrently with appends.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use model::{CleanupPolicy, TopicConfig};
use record::{BatchBuilder, Compression, NewRecord};

#[test]
fn readers_see_whole_batches_while_appends_run() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = Arc::new(open(dir.path(), config(), &clock));
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3u64)
        .map(|seed| {
            let (log, done) = (log.clone(), done.clone());
            std::thread::spawn(move || {
                let mut x = seed + 1;
                let mut reads = 0u64;
                while !done.load(Ordering::Acquire) || reads < 100 {
                    let leo = log.log_end_offset();
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let at = if leo == 0 { 0 } else { (x >> 33) as i64 % leo };
                    let r = log.read(at, 2000, leo, true).unwrap();
                    for (o, v) in records(&r.data) {
                        assert_eq!(v.unwrap(), Bytes::from(o.to_string()));
                        assert!(o < leo);
                    }
                    reads += 1;
                }
            })
        })
        .collect();
    for i in 0..3000usize {
        let next = log.log_end_offset();
        let mut b = BatchBuilder::new(Compression::ALL[i % 5]);
        for j in 0..(1 + i % 5) {
            b.push(NewRecord::value((next + j as i64).to_string()).timestamp(T0));
        }
        log.append(b.build().unwrap(), 0).unwrap();
    }
    done.store(true, Ordering::Release);
    for r in readers {
        r.join().unwrap();
    }
    assert!(log.segment_count() > 5);
}

#[test]
fn compaction_and_retention_run_alongside_appends() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let cfg = TopicConfig {
        cleanup_policy: CleanupPolicy {
            compact: true,
            delete: false,
        },
        min_cleanable_dirty_ratio: 0.0,
        ..config()
    };
    let log = Arc::new(open(dir.path(), cfg, &clock));
    let done = Arc::new(AtomicBool::new(false));
    let cleaner = {
        let (log, done) = (log.clone(), done.clone());
        std::thread::spawn(move || {
            let mut passes = 0;
            while !done.load(Ordering::Acquire) || passes < 3 {
                log.run_compaction().unwrap();
                log.run_retention().unwrap();
                let start = log.log_start_offset();
                let r = log.read(start, 1 << 16, i64::MAX, true).unwrap();
                let _ = records(&r.data);
                passes += 1;
            }
        })
    };
    let mut last: HashMap<String, String> = HashMap::new();
    for i in 0..4000usize {
        let key = format!("k{}", i % 37);
        let value = format!("v{i}");
        log.append(keyed(&[(&key, Some(&value))], T0), 0).unwrap();
        last.insert(key, value);
    }
    done.store(true, Ordering::Release);
    cleaner.join().unwrap();
    log.run_compaction().unwrap();
    // The newest value of every key is still there, offsets strictly increase.
    let all = read_all(&log, log.log_start_offset());
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
    let values: std::collections::HashSet<_> = all.iter().filter_map(|(_, v)| v.clone()).collect();
    for v in last.values() {
        assert!(values.contains(&Bytes::from(v.clone())), "lost {v}");
    }
    assert!(all.len() < 4000, "compaction removed nothing");
    assert_eq!(log.log_end_offset(), 4000);
}
