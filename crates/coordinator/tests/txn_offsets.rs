//! Transactional offset commits (TxnOffsetCommit, KIP-98/KIP-447) in the group coordinator:
//! pending until the transaction's marker, committed on COMMIT, dropped on ABORT, reported as
//! UNSTABLE_OFFSET_COMMIT to clients that require stable offsets, ordered against plain
//! commits, rebuilt by replay, and validated against the group's generation.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use coordinator::GroupCoordinator;
use model::ErrorCode;

const UNSTABLE: i16 = 88;

#[test]
fn pending_until_commit_dropped_on_abort() {
    let mut h = H::new();
    let errs = h.txn_commit("g", 7, 0, 3, "", -1, &[("t", 0, 10), ("t", 1, 20)]);
    assert_eq!(errs, vec![0, 0]);
    // Written as one transactional batch of producer 7.
    assert_eq!(h.txn_log.len(), 1);
    assert_eq!(
        (h.txn_log[0].producer_id, h.txn_log[0].records.len()),
        (7, 2)
    );
    let p = h.txn_log[0].partition;
    // Invisible until the marker; stable fetches are told to retry.
    assert_eq!(
        h.fetch_stable("g", &[("t", &[0, 1])]),
        vec![(-1, UNSTABLE), (-1, UNSTABLE)]
    );
    let plain = h.fetch("g", 5, Some(&[("t", &[0])]));
    assert_eq!(plain.topics[0].partitions[0].committed_offset, -1);
    h.c.complete_txn(7, p, true);
    assert_eq!(
        h.fetch_stable("g", &[("t", &[0, 1])]),
        vec![(10, 0), (20, 0)]
    );

    h.txn_commit("g", 7, 0, 3, "", -1, &[("t", 0, 99)]);
    // A marker for another producer, or another partition, changes nothing.
    h.c.complete_txn(8, p, true);
    h.c.complete_txn(7, (p + 1) % PARTITIONS, true);
    assert_eq!(h.fetch_stable("g", &[("t", &[0])]), vec![(-1, UNSTABLE)]);
    h.c.complete_txn(7, p, false);
    assert_eq!(h.fetch_stable("g", &[("t", &[0])]), vec![(10, 0)]);
}

#[test]
fn a_newer_plain_commit_wins_over_an_older_transactional_one() {
    let mut h = H::new();
    h.txn_commit("g", 7, 0, 3, "", -1, &[("t", 0, 10)]);
    assert_eq!(h.commit("g", "", -1, &[("t", 0, 50)]), vec![0]);
    let p = h.txn_log[0].partition;
    h.c.complete_txn(7, p, true);
    let r = h.fetch("g", 5, Some(&[("t", &[0])]));
    assert_eq!(r.topics[0].partitions[0].committed_offset, 50);
}

#[test]
fn generation_and_member_are_checked_for_v3_plus() {
    let mut h = H::new();
    let (members, generation, _) = h.stable_group("g", 2);
    let ok = h.txn_commit("g", 7, 0, 3, &members[0], generation, &[("t", 0, 1)]);
    assert_eq!(ok, vec![0]);
    let bad_gen = h.txn_commit("g", 7, 0, 3, &members[0], generation + 1, &[("t", 0, 1)]);
    assert_eq!(bad_gen, vec![ErrorCode::IllegalGeneration.code()]);
    let bad_member = h.txn_commit("g", 7, 0, 3, "nobody", generation, &[("t", 0, 1)]);
    assert_eq!(bad_member, vec![ErrorCode::UnknownMemberId.code()]);
    // v0-v2 carry no member information: accepted while the group has members.
    let old = h.txn_commit("g", 7, 0, 2, "", -1, &[("t", 0, 1)]);
    assert_eq!(old, vec![0]);
    // An unknown group with a generation is ILLEGAL_GENERATION.
    let e = h.txn_commit("new", 7, 0, 3, "m", 3, &[("t", 0, 1)]);
    assert_eq!(e, vec![ErrorCode::IllegalGeneration.code()]);
}

#[test]
fn replay_rebuilds_pending_and_completed_transactional_offsets() {
    let mut h = H::new();
    h.txn_commit("g", 7, 0, 3, "", -1, &[("t", 0, 10)]);
    h.txn_commit("g", 8, 0, 3, "", -1, &[("t", 1, 20)]);
    let p = h.txn_log[0].partition;
    h.c.complete_txn(7, p, true);
    // Replay the log: plain records, transactional batches and the one marker, in order.
    let mut c = GroupCoordinator::new(test_config());
    for (i, b) in h.txn_log.iter().enumerate() {
        for r in &b.records {
            c.replay_txn(b.producer_id, &r.key, r.value.as_deref())
                .unwrap();
        }
        if i == 0 {
            c.complete_txn(7, p, true);
        }
    }
    for q in 0..PARTITIONS {
        c.load_partition(q, 0);
    }
    h.c = c;
    assert_eq!(
        h.fetch_stable("g", &[("t", &[0, 1])]),
        vec![(10, 0), (-1, UNSTABLE)]
    );
}
