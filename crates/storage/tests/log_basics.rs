//! Append, read, lookups, validation, producer state and durability of a `Log`.
#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::*;
use model::{ErrorCode, TimestampType, TopicConfig};
use record::{BatchHeader, Compression, TimestampKind};
use std::sync::Arc;

#[test]
fn append_assigns_offsets_and_reads_whole_batches() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open(dir.path(), TopicConfig::default(), &clock);
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
    let a = log.append(batch("a", 3, T0), 5).unwrap();
    assert_eq!((a.base_offset, a.last_offset, a.duplicate), (0, 2, false));
    assert_eq!(a.log_append_time_ms, -1);
    let mut two = batch("b", 2, T0).to_vec();
    two.extend_from_slice(&batch("c", 1, T0));
    let b = log.append(Bytes::from(two), 5).unwrap();
    assert_eq!((b.base_offset, b.last_offset), (3, 5));
    assert_eq!(log.log_end_offset(), 6);

    let r = log.read(0, 1 << 20, i64::MAX, true).unwrap();
    assert_eq!(r.first_offset, 0);
    assert_eq!(r.next_offset, 6);
    let recs = records(&r.data);
    assert_eq!(recs.len(), 6);
    assert_eq!(recs[4], (4, Some(Bytes::from("b-1"))));
    let h = BatchHeader::parse(&r.data).unwrap();
    assert_eq!(h.partition_leader_epoch, 5);

    // Inside a batch: the whole batch that contains it.
    let r = log.read(4, 1 << 20, i64::MAX, true).unwrap();
    assert_eq!(r.first_offset, 3);
    // Upper bound excludes batches that reach it.
    let r = log.read(0, 1 << 20, 4, true).unwrap();
    assert_eq!(r.next_offset, 3);
    let r = log.read(3, 1 << 20, 4, true).unwrap();
    assert!(r.data.is_empty());
    // Byte budget: at least one batch when asked, none otherwise.
    let r = log.read(0, 10, i64::MAX, true).unwrap();
    assert_eq!((r.first_offset, r.next_offset), (0, 3));
    let r = log.read(0, 10, i64::MAX, false).unwrap();
    assert!(r.data.is_empty());
    // At the end: empty; past it or below the start: out of range.
    assert!(log.read(6, 100, i64::MAX, true).unwrap().data.is_empty());
    let e = log.read(7, 100, i64::MAX, true).unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::OffsetOutOfRange);
    assert_eq!(
        log.read(-1, 100, i64::MAX, true).unwrap_err().error_code(),
        ErrorCode::OffsetOutOfRange
    );
}

#[test]
fn invalid_requests_are_rejected_whole() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let config = TopicConfig {
        max_message_bytes: 200,
        ..TopicConfig::default()
    };
    let log = open(dir.path(), config, &clock);
    let good = batch("g", 1, T0);
    let mut bad = batch("x", 1, T0).to_vec();
    let n = bad.len();
    bad[n - 1] ^= 0xff;
    let mut req = good.to_vec();
    req.extend_from_slice(&bad);
    let e = log.append(Bytes::from(req), 0).unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::CorruptMessage);
    let e = log.append(batch("big", 20, T0), 0).unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::MessageTooLarge);
    let mut trunc = good.to_vec();
    trunc.extend_from_slice(&good[..30]);
    let e = log.append(Bytes::from(trunc), 0).unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::CorruptMessage);
    let e = log.append(Bytes::new(), 0).unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::InvalidRecord);
    let e = log.append(batch("old", 1, T0 - 10 * 86_400_000 * 365), 0);
    assert!(e.is_ok(), "before.max.ms defaults to unlimited");
    let e = log
        .append(batch("future", 1, T0 + 7_200_000), 0)
        .unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::InvalidTimestamp);
    assert_eq!(log.log_end_offset(), 1);
    assert_eq!(log.size_bytes() as usize, batch("old", 1, 0).len());
}

#[test]
fn log_append_time_patches_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let config = TopicConfig {
        message_timestamp_type: TimestampType::LogAppendTime,
        ..TopicConfig::default()
    };
    let log = open(dir.path(), config, &clock);
    clock.set(T0 + 500);
    let a = log
        .append(batch_with(Compression::Lz4, "t", 4, 1), 0)
        .unwrap();
    assert_eq!(a.log_append_time_ms, T0 + 500);
    let r = log.read(0, 1 << 20, i64::MAX, true).unwrap();
    let h = record::validate_batch(&r.data, 1 << 20).unwrap();
    assert_eq!(h.timestamp_type(), TimestampKind::LogAppendTime);
    assert_eq!(h.max_timestamp, T0 + 500);
    let (_, it) = record::decode_records(&r.data, 1 << 20).unwrap();
    assert!(it.map(|r| r.unwrap().timestamp).all(|t| t == T0 + 500));
    assert_eq!(log.offset_for_timestamp(T0 + 1), Some((0, T0 + 500)));
}

#[test]
fn timestamp_lookups_span_segments_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    {
        let log = open(dir.path(), config(), &clock);
        assert_eq!(log.max_timestamp(), None);
        assert_eq!(log.offset_for_timestamp(0), None);
        for i in 0..100 {
            log.append(batch("v", 2, T0 + i * 10), 0).unwrap();
        }
        assert!(log.segment_count() >= 2);
        assert_eq!(log.offset_for_timestamp(0), Some((0, T0)));
        assert_eq!(log.offset_for_timestamp(T0 + 505), Some((102, T0 + 510)));
        assert_eq!(log.offset_for_timestamp(T0 + 990), Some((198, T0 + 990)));
        assert_eq!(log.offset_for_timestamp(T0 + 991), None);
        assert_eq!(log.max_timestamp(), Some((198, T0 + 990)));
        log.close().unwrap();
    }
    let log = open(dir.path(), config(), &clock);
    assert_eq!(log.offset_for_timestamp(T0 + 505), Some((102, T0 + 510)));
    assert_eq!(log.max_timestamp(), Some((198, T0 + 990)));
    assert_eq!(log.log_end_offset(), 200);
}

#[test]
fn idempotent_producers_get_original_offsets_for_retries() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    {
        let log = open(dir.path(), config(), &clock);
        assert_eq!(
            log.append(idempotent(9, 0, 0, 2), 0).unwrap().base_offset,
            0
        );
        log.append(batch("x", 1, T0), 0).unwrap();
        assert_eq!(
            log.append(idempotent(9, 0, 2, 3), 0).unwrap().base_offset,
            3
        );
        let dup = log.append(idempotent(9, 0, 0, 2), 0).unwrap();
        assert!(dup.duplicate);
        assert_eq!((dup.base_offset, dup.last_offset), (0, 1));
        assert_eq!(log.log_end_offset(), 6);
        let e = log.append(idempotent(9, 0, 7, 1), 0).unwrap_err();
        assert_eq!(e.error_code(), ErrorCode::OutOfOrderSequenceNumber);
        let e = log.append(idempotent(9, -1, 5, 1), 0).unwrap_err();
        assert_eq!(e.error_code(), ErrorCode::InvalidProducerEpoch);
        assert_eq!(log.producer_state(9), Some((0, 4)));
        assert_eq!(log.producer_state(10), None);
        // Unclean: dropped without close; state is replayed from the log.
    }
    for clean in [false, true] {
        let log = open(dir.path(), config(), &clock);
        assert_eq!(log.producer_state(9), Some((0, 4)));
        let dup = log.append(idempotent(9, 0, 2, 3), 0).unwrap();
        assert!(dup.duplicate);
        assert_eq!(dup.base_offset, 3);
        if clean {
            log.close().unwrap();
        }
    }
    let log = open(dir.path(), config(), &clock);
    assert_eq!(
        log.append(idempotent(9, 1, 0, 1), 0).unwrap().base_offset,
        6
    );
    assert_eq!(log.producer_state(9), Some((1, 0)));
}

#[test]
fn flush_policies_and_group_commit() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let config = TopicConfig {
        flush_messages: 3,
        flush_ms: 1000,
        ..TopicConfig::default()
    };
    let log = Arc::new(open(dir.path(), config, &clock));
    log.append(batch("a", 2, T0), 0).unwrap();
    assert_eq!(log.durable_offset(), 0);
    log.append(batch("a", 1, T0), 0).unwrap();
    assert_eq!(log.durable_offset(), 3, "flush.messages=3 reached");
    log.append(batch("a", 1, T0), 0).unwrap();
    log.maybe_flush().unwrap();
    assert_eq!(log.durable_offset(), 3);
    clock.advance(1000);
    log.maybe_flush().unwrap();
    assert_eq!(log.durable_offset(), 4);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..16 {
            let log = log.clone();
            tasks.push(tokio::spawn(async move {
                let info = log.append(batch("g", 1, T0), 0).unwrap();
                log.wait_durable(info.last_offset).await.unwrap();
                assert!(log.durable_offset() > info.last_offset, "task {i}");
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert!(log.wait_durable(log.log_end_offset()).await.is_err());
    });
    assert_eq!(log.durable_offset(), 20);
}

#[test]
fn closed_log_refuses_appends_and_reopens_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open(dir.path(), config(), &clock);
    log.append(batch("a", 1, T0), 0).unwrap();
    log.close().unwrap();
    assert_eq!(
        log.append(batch("a", 1, T0), 0).unwrap_err().error_code(),
        ErrorCode::KafkaStorageError
    );
    drop(log);
    assert!(dir.path().join(".clean-shutdown").exists());
    let log = open(dir.path(), config(), &clock);
    assert!(!dir.path().join(".clean-shutdown").exists());
    assert_eq!(read_all(&log, 0).len(), 1);
    log.delete_dir().unwrap();
    assert!(!dir.path().exists());
}

#[test]
fn a_failed_fsync_takes_the_log_offline_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = Arc::new(open(dir.path(), TopicConfig::default(), &clock));
    log.append(batch("a", 1, T0), 0).unwrap();
    log.inject_fsync_failure();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let e = rt.block_on(log.wait_durable(0)).unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::KafkaStorageError);
    assert!(log.is_offline());
    // Not a cut-back write: never to be re-opened in this process (fsyncgate).
    assert_eq!(log.offline_cause(), Some(storage::OfflineCause::Other));
    assert_eq!(log.durable_offset(), 0);
    // Never retried: flushes and appends keep failing; reads of what is there still work.
    assert!(log.flush().is_err());
    let e = log.append(batch("b", 1, T0), 0).unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::KafkaStorageError);
    assert_eq!(read_all(&log, 0).len(), 1);
    // A fresh open (after the operator fixed the disk) recovers what is on disk.
    drop(log);
    let log = open(dir.path(), TopicConfig::default(), &clock);
    assert_eq!(log.log_end_offset(), 1);
}

#[test]
fn replicated_appends_keep_the_leaders_offsets() {
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let leader = open(leader_dir.path(), config(), &clock);
    let follower = open(follower_dir.path(), config(), &clock);
    for i in 0..20 {
        leader.append(idempotent(4, 0, i * 3, 3), 7).unwrap();
    }
    let mut next = 0;
    while next < leader.log_end_offset() {
        let r = leader.read(next, 500, i64::MAX, true).unwrap();
        let info = follower.append_replicated(r.data.clone()).unwrap();
        assert_eq!(info.base_offset, r.first_offset);
        next = r.next_offset;
    }
    assert_eq!(follower.log_end_offset(), 60);
    assert_eq!(read_all(&follower, 0), read_all(&leader, 0));
    let r = follower.read(0, 100, i64::MAX, true).unwrap();
    assert_eq!(
        BatchHeader::parse(&r.data).unwrap().partition_leader_epoch,
        7
    );
    // The follower knows the producer, so it could answer a retry as leader.
    assert_eq!(follower.producer_state(4), Some((0, 59)));
    // Going backwards is refused; a gap (compacted leader) is fine.
    let again = leader.read(0, 100, i64::MAX, true).unwrap().data;
    assert_eq!(
        follower.append_replicated(again).unwrap_err().error_code(),
        ErrorCode::InvalidRecord
    );
    let mut gap = batch("g", 1, T0).to_vec();
    record::set_base_offset(&mut gap, 100).unwrap();
    assert_eq!(
        follower
            .append_replicated(Bytes::from(gap))
            .unwrap()
            .base_offset,
        100
    );
    assert_eq!(follower.log_end_offset(), 101);
}

#[test]
fn a_replicated_jump_past_u32_offsets_starts_a_new_segment_there() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open(dir.path(), config(), &clock);
    log.append(batch("a", 2, T0), 0).unwrap();
    let far = 10_000_000_000i64;
    let mut b = batch("far", 2, T0).to_vec();
    record::set_base_offset(&mut b, far).unwrap();
    assert_eq!(
        log.append_replicated(Bytes::from(b)).unwrap().base_offset,
        far
    );
    assert_eq!(log.segment_base_offsets(), vec![0, far]);
    assert_eq!(log.log_end_offset(), far + 2);
    let r = log.read(5, 1000, i64::MAX, true).unwrap();
    assert_eq!(r.first_offset, far);
    drop(log);
    let log = open(dir.path(), config(), &clock);
    assert_eq!(log.log_end_offset(), far + 2);
    assert_eq!(read_all(&log, 0).len(), 4);
}

fn txn_batch(pid: i64, seq: i32, n: usize) -> Bytes {
    let mut b = record::BatchBuilder::new(Compression::None)
        .producer(pid, 0, seq)
        .transactional(true);
    for _ in 0..n {
        b.push(record::NewRecord::value("t").timestamp(T0));
    }
    b.build().unwrap()
}

fn marker(pid: i64, commit: bool) -> Bytes {
    let mut b = record::BatchBuilder::new(Compression::None)
        .producer(pid, 0, -1)
        .transactional(true)
        .control(true);
    b.push(record::NewRecord::new(
        Some(Bytes::from(vec![0, 0, 0, u8::from(commit)])),
        Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
        T0,
    ));
    b.build().unwrap()
}

#[test]
fn transactions_bound_the_stable_offset_and_aborts_are_listed() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    {
        let log = open(dir.path(), config(), &clock);
        log.append(batch("plain", 2, T0), 0).unwrap(); // 0-1
        assert_eq!(log.first_unstable_offset(), None);
        log.append(txn_batch(1, 0, 2), 0).unwrap(); // 2-3, txn of 1 opens at 2
        log.append(txn_batch(2, 0, 1), 0).unwrap(); // 4, txn of 2 opens at 4
        log.append(txn_batch(1, 2, 1), 0).unwrap(); // 5
        assert_eq!(log.first_unstable_offset(), Some(2));
        log.append(marker(1, false), 0).unwrap(); // 6: abort 1
        assert_eq!(log.first_unstable_offset(), Some(4));
        log.append(marker(2, true), 0).unwrap(); // 7: commit 2
        assert_eq!(log.first_unstable_offset(), None);
        let aborted = log.aborted_transactions(0, 100);
        assert_eq!(aborted.len(), 1);
        assert_eq!(
            (
                aborted[0].producer_id,
                aborted[0].first_offset,
                aborted[0].last_offset
            ),
            (1, 2, 6)
        );
        assert!(log.aborted_transactions(7, 100).is_empty());
        assert!(log.aborted_transactions(0, 2).is_empty());
        log.append(txn_batch(1, 3, 1), 0).unwrap(); // 8: a new txn of 1
        assert_eq!(log.first_unstable_offset(), Some(8));
    }
    // Unclean reopen replays the markers; the state is the same.
    let log = open(dir.path(), config(), &clock);
    assert_eq!(log.first_unstable_offset(), Some(8));
    assert_eq!(log.aborted_transactions(0, 100).len(), 1);
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), config(), &clock);
    assert_eq!(log.first_unstable_offset(), Some(8));
    assert_eq!(log.aborted_transactions(0, 100).len(), 1);
    // Truncating below the abort marker reopens that transaction.
    log.truncate_to(6).unwrap();
    assert_eq!(log.first_unstable_offset(), Some(2));
    assert!(log.aborted_transactions(0, 100).is_empty());
}

/// Group commit runs on a shared pool: a thousand open logs add no thread.
#[test]
fn many_logs_share_the_flusher_pool() {
    fn threads() -> usize {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let pool = storage::Flusher::new(3).unwrap();
    let first = open(&dir.path().join("warm"), TopicConfig::default(), &clock);
    drop(first);
    let before = threads();
    let logs: Vec<storage::Log> = (0..1000)
        .map(|i| {
            let options = storage::LogOptions {
                flusher: Some(pool.clone()),
                ..Default::default()
            };
            storage::Log::open_with(
                &dir.path().join(format!("p-{i}")),
                TopicConfig::default(),
                clock.clone(),
                options,
            )
            .unwrap()
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for log in &logs {
        log.append(batch("x", 1, T0), 0).unwrap();
    }
    rt.block_on(async {
        for log in &logs {
            log.wait_durable(0).await.unwrap();
        }
    });
    assert!(logs.iter().all(|l| l.durable_offset() == 1));
    // Other tests of this binary may run threads too; a thread per log would add 1,000.
    assert!(
        threads() < before + 50,
        "{} threads before, {} after",
        before,
        threads()
    );
    assert_eq!(pool.threads(), 3);
}
