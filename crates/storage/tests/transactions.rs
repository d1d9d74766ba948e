//! Transactions in the log: markers and their fencing, the last stable offset, the aborted
//! transaction index (`.txnindex` per segment) across rolls, restarts, truncation and
//! retention, checked against a model over random operation sequences.
#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::*;
use model::{ErrorCode, TopicConfig};
use proptest::prelude::*;
use record::{BatchBuilder, Compression, EndTxnMarker, NewRecord};
use std::collections::BTreeMap;
use storage::{AbortedTxn, Log, TXN_INDEX_ENTRY_BYTES};

fn txn_batch(pid: i64, epoch: i16, seq: i32, n: usize) -> Bytes {
    let mut b = BatchBuilder::new(Compression::None)
        .producer(pid, epoch, seq)
        .transactional(true);
    for i in 0..n {
        b.push(NewRecord::value(format!("t{pid}-{i}-{}", "x".repeat(40))).timestamp(T0));
    }
    b.build().unwrap()
}

fn marker(commit: bool, coordinator_epoch: i32) -> EndTxnMarker {
    EndTxnMarker {
        commit,
        coordinator_epoch,
    }
}

fn txnindex_files(dir: &std::path::Path) -> BTreeMap<String, u64> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".txnindex"))
        .map(|e| {
            (
                e.file_name().to_string_lossy().to_string(),
                e.metadata().unwrap().len(),
            )
        })
        .collect()
}

#[test]
fn markers_are_fenced_by_producer_and_coordinator_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open(dir.path(), TopicConfig::default(), &clock);
    log.append(txn_batch(7, 2, 0, 1), 0).unwrap();
    assert!(log.has_ongoing_transaction(7));
    let leo = log.log_end_offset();
    let e = log
        .append_txn_marker(7, 1, marker(false, 0), 0)
        .unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::InvalidProducerEpoch);
    log.append_txn_marker(7, 2, marker(false, 3), 0).unwrap();
    assert!(!log.has_ongoing_transaction(7));
    let after = log.log_end_offset();
    assert_eq!(after, leo + 1);
    let e = log.append_txn_marker(7, 2, marker(true, 2), 0).unwrap_err();
    assert_eq!(e.error_code(), ErrorCode::TransactionCoordinatorFenced);
    assert_eq!(
        log.log_end_offset(),
        after,
        "a refused marker writes nothing"
    );
    let p = log.producers();
    assert_eq!(p.len(), 1);
    assert_eq!(
        (
            p[0].producer_epoch,
            p[0].coordinator_epoch,
            p[0].current_txn_start_offset
        ),
        (2, 3, -1)
    );
    // A non-transactional write from a producer in a transaction is refused.
    log.append(txn_batch(7, 2, 1, 1), 0).unwrap();
    let plain = idempotent(7, 2, 2, 1);
    assert_eq!(
        log.append(plain, 0).unwrap_err().error_code(),
        ErrorCode::InvalidTxnState
    );
}

#[test]
fn txn_index_files_follow_segments_across_restarts_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let cfg = TopicConfig {
        segment_bytes: 1024,
        retention_bytes: 3000,
        ..config()
    };
    let mut expected = Vec::new();
    {
        let log = open(dir.path(), cfg.clone(), &clock);
        let mut seqs = [0i32; 3];
        for round in 0..12i32 {
            let pid = i64::from(round % 3);
            let seq = &mut seqs[pid as usize];
            let first = log
                .append(txn_batch(pid, 0, *seq, 4), 0)
                .unwrap()
                .base_offset;
            *seq += 4;
            let commit = round % 2 == 0;
            let m = log.append_txn_marker(pid, 0, marker(commit, 0), 0).unwrap();
            if !commit {
                expected.push((pid, first, m.base_offset));
            }
        }
        assert!(log.segment_count() > 3);
        let got: Vec<_> = log
            .aborted_transactions(0, i64::MAX)
            .iter()
            .map(|a| (a.producer_id, a.first_offset, a.last_offset))
            .collect();
        assert_eq!(got, expected);
        // Rolled segments holding abort markers have a .txnindex of whole Kafka entries.
        let files = txnindex_files(dir.path());
        assert!(!files.is_empty());
        assert!(files
            .values()
            .all(|n| *n % TXN_INDEX_ENTRY_BYTES as u64 == 0));
        // Crash (no close): the same index comes back.
    }
    let check = |log: &Log| {
        let got: Vec<_> = log
            .aborted_transactions(0, i64::MAX)
            .iter()
            .map(|a| (a.producer_id, a.first_offset, a.last_offset))
            .collect();
        assert_eq!(got, expected);
        assert_eq!(log.first_unstable_offset(), None);
    };
    let log = open(dir.path(), cfg.clone(), &clock);
    check(&log);
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), cfg.clone(), &clock);
    check(&log);
    // Without any producer snapshot the whole log is replayed: same index.
    drop(log);
    for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
        if e.file_name().to_string_lossy().ends_with(".snapshot") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    let log = open(dir.path(), cfg.clone(), &clock);
    check(&log);
    // Retention by size drops old segments, their .txnindex files and their entries.
    let before = txnindex_files(dir.path()).len();
    let stats = log.run_retention().unwrap();
    assert!(stats.segments_deleted > 0);
    let start = log.log_start_offset();
    assert!(txnindex_files(dir.path()).len() <= before);
    assert!(log
        .aborted_transactions(0, i64::MAX)
        .iter()
        .all(|a| a.last_offset >= start));
}

/// One step of the random model test.
#[derive(Clone, Debug)]
enum Op {
    /// A transactional batch of `n` records from producer `pid`.
    Txn { pid: i64, n: usize },
    /// A plain batch.
    Plain { n: usize },
    /// A marker for `pid`.
    End { pid: i64, commit: bool },
    /// Close (clean) or drop (crash) and reopen.
    Reopen { clean: bool },
    /// Truncate to `frac`/16 of the log end.
    Truncate { frac: i64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0i64..3, 1usize..4).prop_map(|(pid, n)| Op::Txn { pid, n }),
        2 => (1usize..4).prop_map(|n| Op::Plain { n }),
        3 => (0i64..3, any::<bool>()).prop_map(|(pid, commit)| Op::End { pid, commit }),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
        1 => (8i64..16).prop_map(|frac| Op::Truncate { frac }),
    ]
}

/// The model: every batch as (first offset, last offset, kind) in log order.
#[derive(Clone, Debug)]
enum Entry {
    Data { pid: Option<i64>, first: i64 },
    Marker { pid: i64, commit: bool },
}

/// Aborted transactions as (producer, first offset, marker offset).
type Aborted = Vec<(i64, i64, i64)>;

/// Open transactions (producer -> first offset) and aborted ranges implied by the model.
fn derive(entries: &[(i64, Entry)]) -> (BTreeMap<i64, i64>, Aborted) {
    let mut open: BTreeMap<i64, i64> = BTreeMap::new();
    let mut aborted = Vec::new();
    for (offset, e) in entries {
        match e {
            Entry::Data {
                pid: Some(pid),
                first,
            } => {
                open.entry(*pid).or_insert(*first);
            }
            Entry::Data { pid: None, .. } => {}
            Entry::Marker { pid, commit } => {
                if let Some(first) = open.remove(pid) {
                    if !commit {
                        aborted.push((*pid, first, *offset));
                    }
                }
            }
        }
    }
    (open, aborted)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn transaction_state_matches_a_model(ops in proptest::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let clock = clock();
        let cfg = TopicConfig { segment_bytes: 700, ..config() };
        let mut log = Some(open(dir.path(), cfg.clone(), &clock));
        let mut entries: Vec<(i64, Entry)> = Vec::new();
        let mut seqs = [0i32; 3];
        for op in ops {
            let l = log.as_ref().unwrap();
            match op {
                Op::Txn { pid, n } => {
                    let info = l.append(txn_batch(pid, 0, seqs[pid as usize], n), 0).unwrap();
                    seqs[pid as usize] += n as i32;
                    entries.push((info.last_offset, Entry::Data { pid: Some(pid), first: info.base_offset }));
                }
                Op::Plain { n } => {
                    let info = l.append(batch("p", n, T0), 0).unwrap();
                    entries.push((info.last_offset, Entry::Data { pid: None, first: info.base_offset }));
                }
                Op::End { pid, commit } => {
                    let info = l.append_txn_marker(pid, 0, marker(commit, 0), 0).unwrap();
                    entries.push((info.base_offset, Entry::Marker { pid, commit }));
                }
                Op::Reopen { clean } => {
                    let l = log.take().unwrap();
                    if clean {
                        l.close().unwrap();
                    }
                    drop(l);
                    log = Some(open(dir.path(), cfg.clone(), &clock));
                }
                Op::Truncate { frac } => {
                    let to = l.log_end_offset() * frac / 16;
                    l.truncate_to(to).unwrap();
                    let end = l.log_end_offset();
                    entries.retain(|(last, _)| *last < end);
                    // Sequences restart where the producer's surviving batches end.
                    for (pid, seq) in seqs.iter_mut().enumerate() {
                        *seq = l.producers().iter()
                            .find(|p| p.producer_id == pid as i64)
                            .map_or(0, |p| p.last_sequence + 1);
                    }
                }
            }
            let l = log.as_ref().unwrap();
            let (open_txns, aborted) = derive(&entries);
            prop_assert_eq!(l.first_unstable_offset(), open_txns.values().min().copied());
            for pid in 0..3i64 {
                prop_assert_eq!(l.has_ongoing_transaction(pid), open_txns.contains_key(&pid));
            }
            let got: Vec<(i64, i64, i64)> = l.aborted_transactions(0, i64::MAX).iter()
                .map(|a: &AbortedTxn| (a.producer_id, a.first_offset, a.last_offset)).collect();
            prop_assert_eq!(&got, &aborted);
            // A bounded lookup returns exactly the overlapping ones.
            let mid = l.log_end_offset() / 2;
            let want: Vec<_> = aborted.iter().filter(|(_, f, last)| *last >= mid && *f < l.log_end_offset()).copied().collect();
            let got: Vec<_> = l.aborted_transactions(mid, l.log_end_offset()).iter()
                .map(|a| (a.producer_id, a.first_offset, a.last_offset)).collect();
            prop_assert_eq!(got, want);
        }
    }
}
