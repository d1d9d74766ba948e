//! Retention, DeleteRecords, truncation, rolling and compaction, driven by a manual clock.
#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::*;
use model::{CleanupPolicy, ErrorCode, TopicConfig};

#[test]
fn segment_ms_rolls_by_the_clock() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let cfg = TopicConfig {
        segment_ms: 1000,
        ..TopicConfig::default()
    };
    let log = open(dir.path(), cfg, &clock);
    log.append(batch("a", 1, T0), 0).unwrap();
    log.append(batch("a", 1, T0), 0).unwrap();
    assert_eq!(log.segment_count(), 1);
    clock.advance(1001);
    log.append(batch("a", 1, T0), 0).unwrap();
    assert_eq!(log.segment_base_offsets(), vec![0, 2]);
}

#[test]
fn retention_by_time_and_size_deletes_whole_segments() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let cfg = TopicConfig {
        retention_ms: 10_000,
        ..config()
    };
    let log = open(dir.path(), cfg.clone(), &clock);
    for i in 0..150 {
        log.append(batch("r", 3, T0 + i * 100), 0).unwrap();
    }
    let segs = log.segment_base_offsets();
    assert!(segs.len() >= 3, "{segs:?}");
    assert_eq!(log.run_retention().unwrap().segments_deleted, 0);
    // Segments whose newest record is older than T0 + 5000 go.
    clock.set(T0 + 15_000);
    let stats = log.run_retention().unwrap();
    assert!(stats.segments_deleted >= 1);
    assert_eq!(stats.log_start_offset, log.log_start_offset());
    assert_eq!(log.log_start_offset(), log.segment_base_offsets()[0]);
    let e = log.read(0, 100, i64::MAX, true).unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::OffsetOutOfRange);
    let start = log.log_start_offset();
    assert_eq!(read_all(&log, start).len() as i64, 450 - start);

    // Size: keep at most ~2 segments' worth.
    log.update_config(TopicConfig {
        retention_ms: -1,
        retention_bytes: 5000,
        ..cfg
    });
    log.run_retention().unwrap();
    assert!(log.size_bytes() <= 5000 + 4096, "{}", log.size_bytes());
    // Everything expired, including the active segment: rolled, then deleted.
    log.update_config(TopicConfig {
        retention_ms: 1,
        ..config()
    });
    clock.advance(100_000);
    log.run_retention().unwrap();
    assert_eq!(log.log_start_offset(), 450);
    assert_eq!(log.log_end_offset(), 450);
    assert_eq!(log.size_bytes(), 0);
    assert_eq!(log.append(batch("n", 1, T0), 0).unwrap().base_offset, 450);
}

#[test]
fn delete_records_advances_the_start_durably() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    {
        let log = open(dir.path(), config(), &clock);
        for _ in 0..50 {
            log.append(batch("d", 4, T0), 0).unwrap();
        }
        assert_eq!(log.delete_records_before(101).unwrap(), 101);
        assert_eq!(log.log_start_offset(), 101);
        assert_eq!(log.delete_records_before(50).unwrap(), 101);
        assert!(log.delete_records_before(1000).is_err());
        assert!(log.segment_base_offsets()[0] <= 101);
        let r = log.read(101, 1 << 20, i64::MAX, true).unwrap();
        assert_eq!(r.first_offset, 100);
        assert_eq!(log.offset_for_timestamp(0), Some((101, T0)));
    }
    let log = open(dir.path(), config(), &clock);
    assert_eq!(log.log_start_offset(), 101);
}

#[test]
fn truncation_removes_the_tail_and_producer_state() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open(dir.path(), config(), &clock);
    for i in 0..40 {
        log.append(idempotent(1, 0, i * 2, 2), 0).unwrap();
    }
    assert_eq!(log.producer_state(1), Some((0, 79)));
    log.truncate_to(31).unwrap(); // inside batch [30, 31]: that batch goes too
    assert_eq!(log.log_end_offset(), 30);
    assert_eq!(log.producer_state(1), Some((0, 29)));
    assert_eq!(read_all(&log, 0).len(), 30);
    assert_eq!(
        log.append(idempotent(1, 0, 30, 2), 0).unwrap().base_offset,
        30
    );
    log.truncate_to(0).unwrap();
    assert_eq!(log.log_end_offset(), 0);
    assert_eq!(log.segment_count(), 1);
    drop(log);
    let log = open(dir.path(), config(), &clock);
    assert_eq!(log.log_end_offset(), 0);
    log.append(batch("z", 1, T0), 0).unwrap();
    log.delete_records_before(1).unwrap();
    log.truncate_to(0).unwrap(); // below the log start: start over there
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
}

fn compacted() -> TopicConfig {
    TopicConfig {
        cleanup_policy: CleanupPolicy {
            compact: true,
            delete: false,
        },
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms: 1000,
        ..config()
    }
}

fn latest_by_key(log: &storage::Log) -> Vec<(i64, Option<Bytes>)> {
    read_all(log, log.log_start_offset())
}

#[test]
fn compaction_keeps_the_newest_record_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open(dir.path(), compacted(), &clock);
    for round in 0..30 {
        let v1 = format!("a{round}");
        let v2 = format!("b{round}");
        log.append(keyed(&[("a", Some(&v1)), ("b", Some(&v2))], T0), 0)
            .unwrap();
    }
    log.append(keyed(&[("c", Some("c0"))], T0), 0).unwrap();
    log.append(keyed(&[("c", None)], T0), 0).unwrap(); // tombstone
    for round in 0..30 {
        let v = format!("a-late{round}");
        log.append(keyed(&[("a", Some(&v))], T0), 0).unwrap();
    }
    let before = log.size_bytes();
    let leo = log.log_end_offset();
    let stats = log.run_compaction().unwrap();
    assert!(stats.ran && stats.segments_cleaned > 0, "{stats:?}");
    assert!(log.size_bytes() < before);
    assert_eq!(log.log_end_offset(), leo);
    let recs = latest_by_key(&log);
    // Offsets increase; the newest b survives; the old a's in cleaned segments are gone.
    assert!(recs.windows(2).all(|w| w[0].0 < w[1].0));
    assert!(recs.iter().any(|(_, v)| v.as_deref() == Some(&b"b29"[..])));
    assert!(!recs.iter().any(|(_, v)| v.as_deref() == Some(&b"b28"[..])));
    assert!(!recs.iter().any(|(_, v)| v.as_deref() == Some(&b"a0"[..])));
    // Nothing new is dirty: a second pass does nothing.
    assert!(!log.run_compaction().unwrap().ran);
    // The tombstone is kept until delete.retention.ms passes, then dropped.
    let has_tombstone = |log: &storage::Log| latest_by_key(log).iter().any(|(_, v)| v.is_none());
    assert!(has_tombstone(&log));
    clock.advance(2000);
    for i in 0..120 {
        log.append(keyed(&[("d", Some(&format!("{i}")))], T0 + 2000), 0)
            .unwrap();
    }
    let s = log.run_compaction().unwrap();
    assert!(
        !has_tombstone(&log),
        "{s:?} {:?}",
        log.segment_base_offsets()
    );
    // Reads, lookups and reopen still work on a compacted log.
    let leo = log.log_end_offset();
    drop(log);
    let log = open(dir.path(), compacted(), &clock);
    assert_eq!(log.log_end_offset(), leo);
    assert!(!log
        .read(0, 1 << 20, i64::MAX, true)
        .unwrap()
        .data
        .is_empty());
}

#[test]
fn compaction_respects_policy_and_lag() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open(dir.path(), config(), &clock);
    for _ in 0..100 {
        log.append(keyed(&[("k", Some("v"))], T0), 0).unwrap();
    }
    assert!(!log.run_compaction().unwrap().ran, "cleanup.policy=delete");
    log.update_config(TopicConfig {
        min_compaction_lag_ms: 60_000,
        ..compacted()
    });
    assert!(!log.run_compaction().unwrap().ran, "too recent");
    clock.advance(60_001);
    let s = log.run_compaction().unwrap();
    assert!(s.ran && s.records_removed > 0);
}

#[test]
fn compaction_drops_aborted_writes_and_stops_at_open_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open(dir.path(), compacted(), &clock);
    let txn = |pid: i64, seq: i32, value: &str| {
        let mut b = record::BatchBuilder::new(record::Compression::None)
            .producer(pid, 0, seq)
            .transactional(true);
        b.push(record::NewRecord::new(
            Some(Bytes::from_static(b"k")),
            Some(Bytes::copy_from_slice(value.as_bytes())),
            T0,
        ));
        b.build().unwrap()
    };
    let marker = |pid: i64, commit: bool| {
        let mut b = record::BatchBuilder::new(record::Compression::None)
            .producer(pid, 0, -1)
            .transactional(true)
            .control(true);
        b.push(record::NewRecord::new(
            Some(Bytes::from(vec![0, 0, 0, u8::from(commit)])),
            Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
            T0,
        ));
        b.build().unwrap()
    };
    log.append(keyed(&[("k", Some("committed"))], T0), 0)
        .unwrap();
    log.append(txn(1, 0, "aborted"), 0).unwrap();
    log.append(marker(1, false), 0).unwrap();
    for i in 0..100 {
        log.append(keyed(&[(&format!("other{i}"), Some("x"))], T0), 0)
            .unwrap();
    }
    log.run_compaction().unwrap();
    let values: Vec<_> = read_all(&log, 0)
        .into_iter()
        .filter_map(|(_, v)| v)
        .collect();
    assert!(values.contains(&Bytes::from_static(b"committed")));
    assert!(!values.contains(&Bytes::from_static(b"aborted")));

    // An open transaction stops the cleaner at its first offset.
    let open_at = log.log_end_offset();
    log.append(txn(2, 0, "pending"), 0).unwrap();
    for i in 0..100 {
        log.append(keyed(&[("k", Some(&format!("new{i}")))], T0), 0)
            .unwrap();
    }
    log.run_compaction().unwrap();
    let r = log.read(open_at, 100, i64::MAX, true).unwrap();
    assert_eq!(
        r.first_offset, open_at,
        "the open transaction's batch is untouched"
    );
    let values: Vec<_> = read_all(&log, 0)
        .into_iter()
        .filter_map(|(_, v)| v)
        .collect();
    assert!(
        values.contains(&Bytes::from_static(b"committed")),
        "nothing past the open txn cleaned"
    );
}

/// Issue 8, item 5: a batch the cleaner cannot decode (here garbage records under a valid CRC,
/// which a replica may hold; produce refuses it) used to fail every compaction pass of the
/// partition for ever. It is now kept verbatim and counted, and the rest is compacted.
#[test]
fn an_unreadable_batch_never_stalls_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open(dir.path(), compacted(), &clock);
    let mut offset = 0;
    let mut put = |b: Bytes| {
        let mut b = b.to_vec();
        record::set_base_offset(&mut b, offset).unwrap();
        offset += i64::from(record::BatchHeader::parse(&b).unwrap().records_count);
        log.append_replicated(Bytes::from(b)).unwrap();
    };
    for round in 0..20 {
        put(keyed(&[("a", Some(&format!("a{round}")))], T0));
    }
    let mut garbage = keyed(&[("g", Some("ggggggggggg"))], T0).to_vec();
    let n = garbage.len();
    garbage[record::HEADER_LEN..n].fill(0x5a);
    record::recompute_crc(&mut garbage).unwrap();
    put(Bytes::from(garbage.clone()));
    for round in 20..60 {
        put(keyed(&[("a", Some(&format!("a{round}")))], T0));
    }
    let stats = log.run_compaction().unwrap();
    assert!(stats.ran && stats.segments_cleaned > 0, "{stats:?}");
    assert_eq!(stats.batches_skipped, 1, "{stats:?}");
    // The old a's are gone, the unreadable batch is still there, byte for byte.
    let data = log.read(0, 1 << 20, i64::MAX, true).unwrap().data;
    let batches = record::split_batches(&data).unwrap();
    assert!(batches.iter().any(|b| {
        let mut g = garbage.clone();
        g[..8].copy_from_slice(&b[..8]);
        b[..] == g[..]
    }));
    let mut values = Vec::new();
    for b in &batches {
        if let Ok((_, it)) = record::decode_records(b, 1 << 20) {
            values.extend(it.filter_map(|r| r.ok()?.value));
        }
    }
    assert!(!values.contains(&Bytes::from("a0")), "{values:?}");
}

/// Offsets of the transaction markers (control batches) in the log.
fn markers_in(log: &storage::Log) -> Vec<i64> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let r = log.read(next, 1 << 20, i64::MAX, true).unwrap();
        if r.data.is_empty() {
            break;
        }
        for b in record::split_batches(&r.data).unwrap() {
            let h = record::BatchHeader::parse(&b).unwrap();
            if h.is_control() && h.base_offset >= next {
                out.push(h.base_offset);
            }
        }
        next = r.next_offset;
    }
    out
}

/// Kafka's cleaner rules for transactions: aborted records go at once; a marker stays while
/// any record of its transaction does, and then for delete.retention.ms; a removed ABORT
/// marker takes its aborted-transaction index entry with it (also across a reopen).
#[test]
fn compaction_removes_transaction_markers_after_their_data() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open(dir.path(), compacted(), &clock);
    let txn = |pid: i64, key: &str, value: &str| {
        let mut b = record::BatchBuilder::new(record::Compression::None)
            .producer(pid, 0, 0)
            .transactional(true);
        b.push(record::NewRecord::new(
            Some(Bytes::copy_from_slice(key.as_bytes())),
            Some(Bytes::copy_from_slice(value.as_bytes())),
            T0,
        ));
        b.build().unwrap()
    };
    let end = |log: &storage::Log, pid: i64, commit: bool| {
        let m = record::EndTxnMarker {
            commit,
            coordinator_epoch: 0,
        };
        log.append_txn_marker(pid, 0, m, 0).unwrap().base_offset
    };
    // pid 1 commits a value later overwritten; pid 2 aborts; pid 3 commits a value that stays.
    log.append(txn(1, "over", "committed-old"), 0).unwrap();
    let commit1 = end(&log, 1, true);
    log.append(txn(2, "k2", "aborted"), 0).unwrap();
    let abort2 = end(&log, 2, false);
    log.append(txn(3, "k3", "committed-kept"), 0).unwrap();
    let commit3 = end(&log, 3, true);
    log.append(keyed(&[("over", Some("plain-new"))], T0), 0)
        .unwrap();
    let fill = |log: &storage::Log, tag: &str, ts: i64| {
        for i in 0..100 {
            log.append(keyed(&[(&format!("{tag}{i}"), Some("x"))], ts), 0)
                .unwrap();
        }
    };
    fill(&log, "a", T0);
    assert_eq!(markers_in(&log), vec![commit1, abort2, commit3]);
    assert_eq!(log.aborted_transactions(0, log.log_end_offset()).len(), 1);

    // Pass 1: the aborted and overwritten records go; every marker stays (each had records
    // of its transaction in this pass, and all are younger than delete.retention.ms).
    log.run_compaction().unwrap();
    let values: Vec<_> = read_all(&log, 0)
        .into_iter()
        .filter_map(|(_, v)| v)
        .collect();
    assert!(!values.contains(&Bytes::from_static(b"aborted")));
    assert!(!values.contains(&Bytes::from_static(b"committed-old")));
    assert!(values.contains(&Bytes::from_static(b"committed-kept")));
    assert_eq!(markers_in(&log), vec![commit1, abort2, commit3]);
    assert_eq!(log.aborted_transactions(0, log.log_end_offset()).len(), 1);

    // Pass 2, past delete.retention.ms: the markers with no records left go (and the abort's
    // index entry); the marker of the transaction whose record is still there stays.
    clock.advance(2000);
    fill(&log, "b", T0 + 2000);
    log.run_compaction().unwrap();
    assert_eq!(markers_in(&log), vec![commit3]);
    assert!(log.aborted_transactions(0, log.log_end_offset()).is_empty());
    let values: Vec<_> = read_all(&log, 0)
        .into_iter()
        .filter_map(|(_, v)| v)
        .collect();
    assert!(values.contains(&Bytes::from_static(b"committed-kept")));

    let leo = log.log_end_offset();
    drop(log);
    let log = open(dir.path(), compacted(), &clock);
    assert_eq!(log.log_end_offset(), leo);
    assert_eq!(markers_in(&log), vec![commit3]);
    assert!(log.aborted_transactions(0, leo).is_empty());
}
