//! The leader-epoch cache as the log keeps it: maintained by appends (leader and
//! replicated), truncation at both ends and leadership starts; persisted as Kafka's
//! `leader-epoch-checkpoint`; recovered (and rebuilt when missing) on open.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use storage::{EpochEndOffset, EpochEntry, UNDEFINED_EPOCH};

fn entries(v: &[(i32, i64)]) -> Vec<EpochEntry> {
    v.iter()
        .map(|&(epoch, start_offset)| EpochEntry {
            epoch,
            start_offset,
        })
        .collect()
}

fn eo(epoch: i32, end_offset: i64) -> EpochEndOffset {
    EpochEndOffset { epoch, end_offset }
}

fn checkpoint(dir: &std::path::Path) -> String {
    std::fs::read_to_string(dir.join("leader-epoch-checkpoint")).unwrap()
}

#[test]
fn appends_and_leadership_maintain_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open(dir.path(), config(), &clock);
    assert_eq!(log.latest_epoch(), None);
    assert_eq!(log.end_offset_for_epoch(0), EpochEndOffset::UNDEFINED);
    for _ in 0..3 {
        log.append(batch("a", 5, T0), 1).unwrap();
    }
    log.append(batch("b", 5, T0), 3).unwrap();
    assert_eq!(log.leader_epochs(), entries(&[(1, 0), (3, 15)]));
    assert_eq!(checkpoint(dir.path()), "0\n2\n1 0\n3 15\n");
    // A new leader records where its epoch starts before writing anything.
    log.assign_leader_epoch(5).unwrap();
    assert_eq!(log.leader_epochs(), entries(&[(1, 0), (3, 15), (5, 20)]));
    log.append(batch("c", 5, T0), 5).unwrap();
    assert_eq!(log.end_offset_for_epoch(5), eo(5, 25));
    assert_eq!(log.end_offset_for_epoch(4), eo(3, 20));
    assert_eq!(log.end_offset_for_epoch(1), eo(1, 15));
    assert_eq!(log.end_offset_for_epoch(0), eo(0, 0));
    assert_eq!(log.end_offset_for_epoch(6), EpochEndOffset::UNDEFINED);
    assert_eq!(
        log.end_offset_for_epoch(UNDEFINED_EPOCH),
        EpochEndOffset::UNDEFINED
    );
    // A crash (drop without close) keeps everything.
    drop(log);
    let log = open(dir.path(), config(), &clock);
    assert_eq!(log.leader_epochs(), entries(&[(1, 0), (3, 15), (5, 20)]));
    // A leadership that wrote nothing is dropped by a truncation at the log end (a
    // follower's lineage must end where its log does).
    log.assign_leader_epoch(6).unwrap();
    assert_eq!(log.latest_epoch(), Some(6));
    log.truncate_to(log.log_end_offset()).unwrap();
    assert_eq!(log.leader_epochs(), entries(&[(1, 0), (3, 15), (5, 20)]));
    log.close().unwrap();
    let log = open(dir.path(), config(), &clock);
    assert_eq!(log.leader_epochs(), entries(&[(1, 0), (3, 15), (5, 20)]));
}

#[test]
fn replicated_batches_carry_their_epochs_and_truncation_cuts_them() {
    let ldir = tempfile::tempdir().unwrap();
    let fdir = tempfile::tempdir().unwrap();
    let clock = clock();
    let leader = open(ldir.path(), config(), &clock);
    let follower = open(fdir.path(), config(), &clock);
    for (epoch, n) in [(0, 4), (2, 3), (2, 3), (7, 2)] {
        for _ in 0..n {
            leader.append(batch("x", 2, T0), epoch).unwrap();
        }
    }
    let mut next = 0;
    while next < leader.log_end_offset() {
        let r = leader.read(next, 300, i64::MAX, true).unwrap();
        follower.append_replicated(r.data).unwrap();
        next = r.next_offset;
    }
    assert_eq!(follower.leader_epochs(), leader.leader_epochs());
    assert_eq!(
        follower.leader_epochs(),
        entries(&[(0, 0), (2, 8), (7, 20)])
    );
    // Truncation into epoch 2 drops epoch 7; a cut at an epoch's first offset drops it.
    follower.truncate_to(22).unwrap();
    assert_eq!(follower.latest_epoch(), Some(7), "offset 20 is still there");
    follower.truncate_to(20).unwrap();
    assert_eq!(follower.leader_epochs(), entries(&[(0, 0), (2, 8)]));
    assert_eq!(follower.end_offset_for_epoch(2), eo(2, 20));
    drop(follower);
    let follower = open(fdir.path(), config(), &clock);
    assert_eq!(follower.leader_epochs(), entries(&[(0, 0), (2, 8)]));
    // Below the log start the log restarts empty, and so does the cache.
    follower.delete_records_before(10).unwrap();
    assert_eq!(follower.leader_epochs(), entries(&[(2, 10)]));
    follower.truncate_to(4).unwrap();
    assert_eq!(follower.leader_epochs(), entries(&[]));
    assert_eq!(follower.log_start_offset(), 4);
}

#[test]
fn log_start_moves_cut_the_front() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open(dir.path(), config(), &clock);
    for epoch in 1..=4 {
        for _ in 0..10 {
            log.append(batch("y", 10, T0), epoch).unwrap();
        }
    }
    assert_eq!(
        log.leader_epochs(),
        entries(&[(1, 0), (2, 100), (3, 200), (4, 300)])
    );
    log.delete_records_before(150).unwrap();
    assert_eq!(
        log.leader_epochs(),
        entries(&[(2, 150), (3, 200), (4, 300)])
    );
    // Requests for epochs older than the log start end where the first known one starts.
    assert_eq!(log.end_offset_for_epoch(1), eo(1, 150));
    drop(log);
    let log = open(dir.path(), config(), &clock);
    assert_eq!(
        log.leader_epochs(),
        entries(&[(2, 150), (3, 200), (4, 300)])
    );
}

#[test]
fn a_missing_or_damaged_checkpoint_is_rebuilt_and_stale_entries_are_cut() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open(dir.path(), config(), &clock);
    for epoch in [0, 0, 3, 3, 3, 8] {
        for _ in 0..5 {
            log.append(batch("z", 40, T0), epoch).unwrap();
        }
    }
    let want = entries(&[(0, 0), (3, 400), (8, 1000)]);
    assert_eq!(log.leader_epochs(), want);
    assert!(
        log.segment_count() > 2,
        "the rebuild must walk several segments"
    );
    drop(log);
    // A log from before the cache existed.
    std::fs::remove_file(dir.path().join("leader-epoch-checkpoint")).unwrap();
    let log = open(dir.path(), config(), &clock);
    assert_eq!(log.leader_epochs(), want);
    assert_eq!(checkpoint(dir.path()), "0\n3\n0 0\n3 400\n8 1000\n");
    drop(log);
    // A damaged one.
    std::fs::write(dir.path().join("leader-epoch-checkpoint"), "0\n3\n0 0\n3 1").unwrap();
    let log = open(dir.path(), config(), &clock);
    assert_eq!(log.leader_epochs(), want);
    drop(log);
    // A crash after a truncation of the log but before its checkpoint was rewritten leaves
    // entries past the log end: the open cuts them.
    std::fs::write(
        dir.path().join("leader-epoch-checkpoint"),
        "0\n4\n0 0\n3 400\n8 1000\n9 1200\n",
    )
    .unwrap();
    let log = open(dir.path(), config(), &clock);
    assert_eq!(log.leader_epochs(), want);
    assert_eq!(checkpoint(dir.path()), "0\n3\n0 0\n3 400\n8 1000\n");
}

#[test]
fn a_follower_behind_the_leaders_start_restarts_there() {
    let dir = tempfile::tempdir().unwrap();
    let clock = clock();
    let log = open(dir.path(), config(), &clock);
    for _ in 0..4 {
        log.append(batch("f", 5, T0), 2).unwrap();
    }
    // The leader's log starts at 100, far past this log's end (20).
    log.truncate_fully_and_start_at(100).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (100, 100));
    assert_eq!(log.leader_epochs(), entries(&[]));
    assert_eq!(log.end_offset_for_epoch(2), EpochEndOffset::UNDEFINED);
    let leader = tempfile::tempdir().unwrap();
    let l = open(leader.path(), config(), &clock);
    l.truncate_fully_and_start_at(100).unwrap();
    l.append(batch("g", 3, T0), 4).unwrap();
    let r = l.read(100, 1000, i64::MAX, true).unwrap();
    log.append_replicated(r.data).unwrap();
    assert_eq!(log.leader_epochs(), entries(&[(4, 100)]));
    drop(log);
    let log = open(dir.path(), config(), &clock);
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (100, 103));
    assert_eq!(log.leader_epochs(), entries(&[(4, 100)]));
}
