//! The transaction coordinator, request by request: the happy path, every out-of-order
//! transition with Kafka's error code, fencing, write failures (rollback), timeouts,
//! expiration, verification (KIP-890), the batched AddPartitionsToTxn, describe/list, and
//! reload from the log.

#![allow(clippy::unwrap_used)]

mod txn_common;

use coordinator::{TxnConfig, TxnState};
use model::ErrorCode;
use protocol::messages::{
    DescribeTransactionsRequest, ListTransactionsRequest, ProducerId, TransactionalId,
};
use protocol::ResponseKind;
use std::collections::BTreeSet;
use txn_common::*;

fn parts(p: &[(&str, i32)]) -> BTreeSet<(String, i32)> {
    p.iter().map(|(t, p)| (t.to_string(), *p)).collect()
}

#[test]
fn commit_goes_through_prepare_markers_and_complete() {
    let mut h = T::new();
    let (pid, epoch) = h.init_ok("tx");
    assert_eq!((pid, epoch), (1000, 0));
    assert_eq!(h.state("tx"), Some(TxnState::Empty));
    let t = h.add("tx", pid, epoch, &[("t", 0), ("t", 1)]);
    assert_eq!(h.add_error(t), Some(NONE));
    assert_eq!(h.state("tx"), Some(TxnState::Ongoing));
    // Adding partitions already in the transaction writes nothing.
    let before = h.log.len();
    let t = h.add("tx", pid, epoch, &[("t", 1)]);
    assert_eq!(h.add_error(t), Some(NONE));
    assert_eq!(h.log.len(), before);
    let t = h.add_offsets("tx", pid, epoch, "g");
    assert_eq!(h.error(t), Some(NONE));
    let gp = h.c.offsets_partition_for("g");
    assert!(h
        .value("tx")
        .partitions
        .contains(&("__consumer_offsets".to_string(), gp)));

    // EndTxn: the response comes once PrepareCommit is durable; markers go out to the three
    // partitions; CompleteCommit once they are all written.
    h.auto_markers = false;
    let t = h.end("tx", pid, epoch, true);
    assert_eq!(h.error(t), Some(NONE));
    assert_eq!(h.state("tx"), Some(TxnState::PrepareCommit));
    assert_eq!(h.markers.len(), 1);
    let m = h.markers[0].clone();
    assert!(m.commit);
    assert_eq!(
        (m.producer_id, m.producer_epoch, m.coordinator_epoch),
        (pid, epoch, 0)
    );
    assert_eq!(m.partitions.len(), 3);
    h.deliver_markers();
    assert_eq!(h.state("tx"), Some(TxnState::CompleteCommit));
    assert!(h.value("tx").partitions.is_empty());
    // The epoch stays the same across transactions (transaction version 1).
    let t = h.add("tx", pid, epoch, &[("u", 0)]);
    assert_eq!(h.add_error(t), Some(NONE));
    let v = h.value("tx");
    assert_eq!((v.state, v.producer_epoch), (TxnState::Ongoing, 0));
}

#[test]
fn out_of_order_transitions_get_kafka_errors_and_change_nothing() {
    let mut h = T::new();
    // Before InitProducerId.
    let t = h.end("tx", 1000, 0, true);
    assert_eq!(h.error(t), Some(code(ErrorCode::InvalidProducerIdMapping)));
    let t = h.add("tx", 1000, 0, &[("t", 0)]);
    assert_eq!(
        h.add_error(t),
        Some(code(ErrorCode::InvalidProducerIdMapping))
    );
    let t = h.add_offsets("tx", 1000, 0, "g");
    assert_eq!(h.error(t), Some(code(ErrorCode::InvalidProducerIdMapping)));
    assert!(h.log.is_empty());

    let (pid, epoch) = h.init_ok("tx");
    let log = h.log.len();
    // EndTxn with no transaction: INVALID_TXN_STATE.
    for commit in [true, false] {
        let t = h.end("tx", pid, epoch, commit);
        assert_eq!(h.error(t), Some(code(ErrorCode::InvalidTxnState)));
    }
    // Wrong producer id, wrong epoch.
    let t = h.end("tx", pid + 1, epoch, true);
    assert_eq!(h.error(t), Some(code(ErrorCode::InvalidProducerIdMapping)));
    let t = h.end_with("tx", pid, epoch + 1, true, 2);
    assert_eq!(h.error(t), Some(code(ErrorCode::ProducerFenced)));
    // Clients older than KIP-588 see INVALID_PRODUCER_EPOCH instead.
    let t = h.end_with("tx", pid, epoch + 1, true, 1);
    assert_eq!(h.error(t), Some(code(ErrorCode::InvalidProducerEpoch)));
    assert_eq!(h.log.len(), log);

    h.add("tx", pid, epoch, &[("t", 0)]);
    let t = h.end("tx", pid, epoch, false);
    assert_eq!(h.error(t), Some(NONE));
    assert_eq!(h.state("tx"), Some(TxnState::CompleteAbort));
    let log = h.log.len();
    // A retried abort succeeds; a commit after an abort is INVALID_TXN_STATE.
    let t = h.end("tx", pid, epoch, false);
    assert_eq!(h.error(t), Some(NONE));
    let t = h.end("tx", pid, epoch, true);
    assert_eq!(h.error(t), Some(code(ErrorCode::InvalidTxnState)));
    assert_eq!(h.log.len(), log);
    assert_eq!(h.state("tx"), Some(TxnState::CompleteAbort));

    // Unknown partitions fail the whole AddPartitionsToTxn; nothing is added.
    let t = h.add("tx", pid, epoch, &[("t", 0), ("nope", 3)]);
    let errs = h.add_errors(t).unwrap();
    assert!(errs.contains(&(("nope".into(), 3), code(ErrorCode::UnknownTopicOrPartition))));
    assert!(errs.contains(&(("t".into(), 0), code(ErrorCode::OperationNotAttempted))));
    assert_eq!(h.state("tx"), Some(TxnState::CompleteAbort));
    // Empty transactional id.
    let t = h.end("", pid, epoch, true);
    assert_eq!(h.error(t), Some(code(ErrorCode::InvalidRequest)));
}

/// Kafka's behaviour, with parking off (`park_max_ms = 0`).
#[test]
fn requests_during_a_pending_write_get_concurrent_transactions() {
    let mut h = T::with_config(TxnConfig {
        park_max_ms: 0,
        ..test_config()
    });
    let (pid, epoch) = h.init_ok("tx");
    h.auto_flush = false;
    let a = h.add("tx", pid, epoch, &[("t", 0)]);
    assert_eq!(h.add_error(a), None, "waiting for its write");
    // Nothing is visible before the write is durable.
    assert_eq!(h.state("tx"), Some(TxnState::Empty));
    let b = h.add("tx", pid, epoch, &[("t", 1)]);
    assert_eq!(
        h.add_error(b),
        Some(code(ErrorCode::ConcurrentTransactions))
    );
    let e = h.end("tx", pid, epoch, true);
    assert_eq!(h.error(e), Some(code(ErrorCode::ConcurrentTransactions)));
    let i = h.init("tx");
    assert_eq!(h.error(i), Some(code(ErrorCode::ConcurrentTransactions)));
    h.flush();
    assert_eq!(h.add_error(a), Some(NONE));
    assert_eq!(h.state("tx"), Some(TxnState::Ongoing));
    // While preparing: adds are CONCURRENT_TRANSACTIONS, as is any EndTxn (Kafka 4's order:
    // busy before fenced or out of order, KAFKA-18464); out of order once complete.
    h.auto_markers = false;
    h.auto_flush = true;
    h.end("tx", pid, epoch, true);
    let b = h.add("tx", pid, epoch, &[("t", 1)]);
    assert_eq!(
        h.add_error(b),
        Some(code(ErrorCode::ConcurrentTransactions))
    );
    let e = h.end("tx", pid, epoch, true);
    assert_eq!(h.error(e), Some(code(ErrorCode::ConcurrentTransactions)));
    let e = h.end("tx", pid, epoch, false);
    assert_eq!(h.error(e), Some(code(ErrorCode::ConcurrentTransactions)));
    let i = h.init("tx");
    assert_eq!(h.error(i), Some(code(ErrorCode::ConcurrentTransactions)));
    h.deliver_markers();
    assert_eq!(h.state("tx"), Some(TxnState::CompleteCommit));
    let e = h.end("tx", pid, epoch, false);
    assert_eq!(h.error(e), Some(code(ErrorCode::InvalidTxnState)));
}

/// A client's AddPartitionsToTxn / AddOffsetsToTxn that meets the previous transaction still
/// completing waits for it (parked) instead of getting CONCURRENT_TRANSACTIONS, and is run as
/// soon as the id settles: with the state of that moment (a fenced epoch is refused then).
/// Past `park_max_ms` it gets CONCURRENT_TRANSACTIONS; leadership moving answers
/// NOT_COORDINATOR. Each is answered exactly once (the harness checks).
#[test]
fn adds_wait_for_the_previous_transaction_to_complete() {
    let mut h = T::new();
    let (pid, epoch) = h.init_ok("tx");
    h.add("tx", pid, epoch, &[("t", 0)]);
    h.auto_markers = false;
    h.end("tx", pid, epoch, true);
    assert_eq!(h.state("tx"), Some(TxnState::PrepareCommit));
    let a = h.add("tx", pid, epoch, &[("t", 1)]);
    let o = h.add_offsets("tx", pid, epoch, "g");
    assert_eq!(h.add_error(a), None, "parked");
    assert_eq!(h.error(o), None, "parked");
    // The markers complete the commit; the parked requests then run, in order.
    h.auto_flush = false;
    h.deliver_markers();
    assert_eq!(
        h.add_error(a),
        None,
        "still parked while CompleteCommit is written"
    );
    h.flush();
    assert_eq!(h.add_error(a), Some(NONE));
    assert_eq!(h.error(o), Some(NONE));
    let v = h.value("tx");
    assert_eq!(v.state, TxnState::Ongoing);
    assert!(v.partitions.contains(&("t".to_string(), 1)));
    assert!(!v.partitions.contains(&("t".to_string(), 0)));
    assert_eq!(
        v.partitions.len(),
        2,
        "t-1 and the group's offsets partition"
    );
    h.auto_flush = true;

    // Parked past park_max_ms: CONCURRENT_TRANSACTIONS (the client retries).
    h.end("tx", pid, epoch, false);
    let late = h.add("tx", pid, epoch, &[("t", 0)]);
    h.advance(test_config().park_max_ms + 1);
    assert_eq!(
        h.add_error(late),
        Some(code(ErrorCode::ConcurrentTransactions))
    );
    h.deliver_markers();
    assert_eq!(h.state("tx"), Some(TxnState::CompleteAbort));

    // A stale epoch is refused at once, never parked.
    h.auto_markers = true;
    let (pid2, epoch2) = h.init_ok("tx");
    assert!(epoch2 > epoch && pid2 == pid);
    h.auto_markers = false;
    h.add("tx", pid2, epoch2, &[("t", 0)]);
    h.end("tx", pid2, epoch2, true);
    let stale = h.add("tx", pid, epoch, &[("t", 1)]);
    assert_eq!(
        h.add_error(stale),
        Some(code(ErrorCode::InvalidProducerEpoch)),
        "fenced (PRODUCER_FENCED is INVALID_PRODUCER_EPOCH at v0)"
    );
    let parked = h.add("tx", pid2, epoch2, &[("t", 1)]);
    assert_eq!(h.add_error(parked), None);
    // Leadership moves: NOT_COORDINATOR.
    let p = h.c.partition_for("tx");
    let out = h.c.unload_partition(p);
    h.absorb(out);
    assert_eq!(h.add_error(parked), Some(code(ErrorCode::NotCoordinator)));
}

#[test]
fn a_failed_write_rolls_back() {
    let mut h = T::new();
    // A new id whose first write fails is forgotten.
    h.auto_flush = false;
    let t = h.init("tx");
    h.fail_writes(ErrorCode::NotEnoughReplicas);
    assert_eq!(h.error(t), Some(code(ErrorCode::CoordinatorNotAvailable)));
    assert_eq!(h.state("tx"), None);
    h.auto_flush = true;
    let (pid, epoch) = h.init_ok("tx");
    // A failed AddPartitions leaves the state as it was.
    h.auto_flush = false;
    let t = h.add("tx", pid, epoch, &[("t", 0)]);
    h.fail_writes(ErrorCode::KafkaStorageError);
    assert_eq!(h.add_error(t), Some(code(ErrorCode::NotCoordinator)));
    assert_eq!(h.state("tx"), Some(TxnState::Empty));
    assert!(h.value("tx").partitions.is_empty());
    h.auto_flush = true;
    h.add("tx", pid, epoch, &[("t", 0)]);
    // A failed fence (InitProducerId during a transaction) keeps the old epoch.
    h.auto_flush = false;
    let t = h.init("tx");
    h.fail_writes(ErrorCode::NotEnoughReplicas);
    assert_eq!(h.error(t), Some(code(ErrorCode::CoordinatorNotAvailable)));
    let v = h.value("tx");
    assert_eq!((v.state, v.producer_epoch), (TxnState::Ongoing, epoch));
    // A failed completion write is retried after the backoff.
    h.auto_flush = true;
    h.end("tx", pid, epoch, true);
    assert_eq!(h.state("tx"), Some(TxnState::CompleteCommit));
    h.add("tx", pid, epoch, &[("t", 1)]);
    h.auto_flush = false;
    h.auto_markers = false;
    h.end("tx", pid, epoch, false);
    h.flush();
    assert_eq!(h.state("tx"), Some(TxnState::PrepareAbort));
    h.deliver_markers();
    h.fail_writes(ErrorCode::NotEnoughReplicas);
    assert_eq!(h.state("tx"), Some(TxnState::PrepareAbort));
    let deadline = h.c.next_deadline().unwrap();
    assert!(deadline <= h.now + h.cfg.retry_backoff_ms);
    h.advance(h.cfg.retry_backoff_ms);
    h.flush();
    assert_eq!(h.state("tx"), Some(TxnState::CompleteAbort));
}

#[test]
fn a_new_producer_fences_the_old_one_and_aborts_its_transaction() {
    let mut h = T::new();
    let (pid, e0) = h.init_ok("tx");
    h.add("tx", pid, e0, &[("t", 0)]);
    // The second producer's InitProducerId aborts the open transaction with a bumped epoch
    // and answers CONCURRENT_TRANSACTIONS; its retry gets a further bump.
    h.auto_markers = false;
    let t = h.init("tx");
    assert_eq!(h.error(t), Some(code(ErrorCode::ConcurrentTransactions)));
    let v = h.value("tx");
    assert_eq!(
        (v.state, v.producer_epoch),
        (TxnState::PrepareAbort, e0 + 1)
    );
    let m = h.markers[0].clone();
    assert!(!m.commit);
    assert_eq!(m.producer_epoch, e0 + 1);
    h.deliver_markers();
    assert_eq!(h.state("tx"), Some(TxnState::CompleteAbort));
    let (pid2, e2) = h.init_ok("tx");
    assert_eq!((pid2, e2), (pid, e0 + 2));
    // The zombie is fenced everywhere.
    let t = h.add_with("tx", pid, e0, &[("t", 0)], 2);
    assert_eq!(h.add_error(t), Some(code(ErrorCode::ProducerFenced)));
    let t = h.add_with("tx", pid, e0, &[("t", 0)], 1);
    assert_eq!(h.add_error(t), Some(code(ErrorCode::InvalidProducerEpoch)));
    let t = h.end("tx", pid, e0, true);
    assert_eq!(h.error(t), Some(code(ErrorCode::InvalidProducerEpoch)));
    assert!(!h.c.verify("tx", pid, e0, &parts(&[("t", 0)])).is_empty());
    // InitProducerId v3+ with a stale epoch is PRODUCER_FENCED; with the current one it bumps.
    let t = h.init_with("tx", TIMEOUT_MS, 4, Some((pid, e0)));
    assert_eq!(h.error(t), Some(code(ErrorCode::ProducerFenced)));
    let t = h.init_with("tx", TIMEOUT_MS, 3, Some((pid, e0)));
    assert_eq!(h.error(t), Some(code(ErrorCode::InvalidProducerEpoch)));
    let t = h.init_with("tx", TIMEOUT_MS, 4, Some((pid, e2)));
    assert_eq!(h.init_resp(t).unwrap().producer_epoch, e2 + 1);
    // A retry of that bump (the response was lost) returns the same epoch.
    let t = h.init_with("tx", TIMEOUT_MS, 4, Some((pid, e2)));
    assert_eq!(h.init_resp(t).unwrap().producer_epoch, e2 + 1);
}

#[test]
fn exhausted_epochs_rotate_the_producer_id() {
    let mut h = T::new();
    let (pid, _) = h.init_ok("tx");
    // Replay a state with an exhausted epoch, as if many producers came before.
    let mut v = h.value("tx");
    v.producer_epoch = i16::MAX - 1;
    let key = coordinator::txn::log::encode_key("tx");
    h.c.begin_loading(h.c.partition_for("tx"));
    h.c.replay(&key, Some(&coordinator::txn::log::encode_value(&v)))
        .unwrap();
    let now = h.now;
    h.c.load_partition(h.c.partition_for("tx"), 0, now);
    let (pid2, e) = h.init_ok("tx");
    assert_ne!(pid2, pid);
    assert_eq!(e, 0);
}

#[test]
fn timeouts_validate_and_expired_transactions_are_aborted_with_a_bump() {
    let mut h = T::new();
    let t = h.init_with("tx", 0, 4, None);
    assert_eq!(h.error(t), Some(code(ErrorCode::InvalidTransactionTimeout)));
    let t = h.init_with("tx", h.cfg.max_timeout_ms + 1, 4, None);
    assert_eq!(h.error(t), Some(code(ErrorCode::InvalidTransactionTimeout)));
    assert_eq!(h.state("tx"), None);

    let t = h.init_with("tx", 5_000, 4, None);
    let (pid, epoch) = {
        let r = h.init_resp(t).unwrap();
        (r.producer_id.0, r.producer_epoch)
    };
    h.add("tx", pid, epoch, &[("t", 0)]);
    h.advance(4_000);
    assert_eq!(h.state("tx"), Some(TxnState::Ongoing));
    h.auto_markers = false;
    h.advance(2_000);
    let v = h.value("tx");
    assert_eq!(
        (v.state, v.producer_epoch),
        (TxnState::PrepareAbort, epoch + 1)
    );
    assert_eq!(h.markers[0].producer_epoch, epoch + 1);
    h.deliver_markers();
    assert_eq!(h.state("tx"), Some(TxnState::CompleteAbort));
    // The producer learns it was fenced when it tries to commit.
    let t = h.end_with("tx", pid, epoch, true, 3);
    assert_eq!(h.error(t), Some(code(ErrorCode::ProducerFenced)));
}

#[test]
fn idle_transactional_ids_expire_with_a_tombstone() {
    let mut h = T::new();
    let (pid, epoch) = h.init_ok("old");
    h.add("old", pid, epoch, &[("t", 0)]);
    let (p2, e2) = h.init_ok("busy");
    h.add("busy", p2, e2, &[("t", 1)]);
    h.end("old", pid, epoch, true);
    // Ongoing transactions never expire (they time out instead, with a long timeout here).
    let mut cfg = h.cfg.clone();
    cfg.max_timeout_ms = 1 << 30;
    let mut h2 = T::with_config(TxnConfig { ..cfg });
    let t = h2.init_with("busy", 1 << 29, 4, None);
    let r = h2.init_resp(t).unwrap().clone();
    h2.add("busy", r.producer_id.0, r.producer_epoch, &[("t", 0)]);
    let (p3, e3) = h2.init_ok("old");
    h2.add("old", p3, e3, &[("t", 1)]);
    h2.end("old", p3, e3, false);
    h2.advance(h2.cfg.id_expiration_ms + h2.cfg.remove_expired_interval_ms);
    assert_eq!(h2.state("old"), None);
    assert_eq!(h2.state("busy"), Some(TxnState::Ongoing));
    let last = h2.log.last().unwrap();
    assert!(last.value.is_none(), "a tombstone");
    // After replay it stays gone.
    let (c, _) = h2.replayed();
    assert!(c.transaction("old").is_none());
    assert!(c.transaction("busy").is_some());
}

#[test]
fn verification_knows_which_partitions_are_in_the_transaction() {
    let mut h = T::new();
    let (pid, epoch) = h.init_ok("tx");
    let p = parts(&[("t", 0), ("t", 1)]);
    let errs = h.c.verify("tx", pid, epoch, &p);
    assert!(errs.values().all(|e| *e == ErrorCode::TransactionAbortable));
    h.add("tx", pid, epoch, &[("t", 0)]);
    let errs = h.c.verify("tx", pid, epoch, &p);
    assert_eq!(errs.len(), 1);
    assert_eq!(
        errs.get(&("t".to_string(), 1)),
        Some(&ErrorCode::TransactionAbortable)
    );
    let errs = h.c.verify("tx", pid, epoch + 1, &p);
    assert!(errs.values().all(|e| *e == ErrorCode::ProducerFenced));
    let errs = h.c.verify("nope", pid, epoch, &p);
    assert!(errs
        .values()
        .all(|e| *e == ErrorCode::InvalidProducerIdMapping));
    h.auto_markers = false;
    h.end("tx", pid, epoch, true);
    let errs = h.c.verify("tx", pid, epoch, &p);
    assert!(errs
        .values()
        .all(|e| *e == ErrorCode::ConcurrentTransactions));
    h.deliver_markers();
    // After the marker the partition is no longer part of a transaction.
    let errs = h.c.verify("tx", pid, epoch, &parts(&[("t", 0)]));
    assert_eq!(errs.len(), 1);
}

#[test]
fn batched_add_partitions_verifies_and_adds_per_transaction() {
    let mut h = T::new();
    let (p1, e1) = h.init_ok("a");
    let (p2, e2) = h.init_ok("b");
    h.add("a", p1, e1, &[("t", 0)]);
    h.auto_flush = false;
    let t = h.batch(
        vec![
            ("a", p1, e1, true, vec![("t", 0), ("t", 1)]),
            ("b", p2, e2, false, vec![("u", 0)]),
            ("c", 5, 0, true, vec![("t", 0)]),
        ],
        4,
    );
    assert!(!h.answers.contains_key(&t), "waits for b's write");
    h.flush();
    let ResponseKind::AddPartitionsToTxn(r) = h.answers.get(&t).unwrap().clone() else {
        panic!()
    };
    assert_eq!(r.results_by_transaction.len(), 3);
    let errs = |i: usize| -> Vec<(i32, i16)> {
        r.results_by_transaction[i]
            .topic_results
            .iter()
            .flat_map(|t| {
                t.results_by_partition
                    .iter()
                    .map(|p| (p.partition_index, p.partition_error_code))
            })
            .collect()
    };
    assert_eq!(
        errs(0),
        vec![(0, NONE), (1, code(ErrorCode::TransactionAbortable))]
    );
    assert_eq!(errs(1), vec![(0, NONE)]);
    assert_eq!(
        errs(2),
        vec![(0, code(ErrorCode::InvalidProducerIdMapping))]
    );
    assert_eq!(h.state("b"), Some(TxnState::Ongoing));
}

#[test]
fn describe_and_list_show_the_visible_state() {
    let mut h = T::new();
    let (pid, epoch) = h.init_ok("tx");
    h.add("tx", pid, epoch, &[("t", 1), ("t", 0)]);
    h.init_ok("idle");
    let tok = h.token(0);
    let mut r = DescribeTransactionsRequest::default();
    r.transactional_ids = vec![TransactionalId(sb("tx")), TransactionalId(sb("missing"))];
    let out = h.c.describe_transactions(&T::ctx(tok, 0), r);
    h.absorb(out);
    let ResponseKind::DescribeTransactions(d) = h.answers.get(&tok).unwrap().clone() else {
        panic!()
    };
    let s = &d.transaction_states[0];
    assert_eq!(s.error_code, 0);
    assert_eq!(s.transaction_state.as_str(), "Ongoing");
    assert_eq!((s.producer_id.0, s.producer_epoch), (pid, epoch));
    assert_eq!(s.transaction_timeout_ms, TIMEOUT_MS);
    assert_eq!(s.topics[0].partitions, vec![0, 1]);
    assert_eq!(
        d.transaction_states[1].error_code,
        code(ErrorCode::TransactionalIdNotFound)
    );

    let list = |h: &mut T, states: &[&str], pids: &[i64], duration: i64| {
        let tok = h.token(1);
        let mut r = ListTransactionsRequest::default();
        r.state_filters = states.iter().map(|s| sb(s)).collect();
        r.producer_id_filters = pids.iter().map(|p| ProducerId(*p)).collect();
        r.duration_filter = duration;
        let now = h.now;
        let out = h.c.list_transactions(&T::ctx(tok, 1), r, now);
        h.absorb(out);
        let ResponseKind::ListTransactions(l) = h.answers.get(&tok).unwrap().clone() else {
            panic!()
        };
        l
    };
    let all = list(&mut h, &[], &[], -1);
    assert_eq!(all.transaction_states.len(), 2);
    let ongoing = list(&mut h, &["Ongoing"], &[], -1);
    assert_eq!(ongoing.transaction_states.len(), 1);
    assert_eq!(
        ongoing.transaction_states[0].transactional_id.0.as_str(),
        "tx"
    );
    let bad = list(&mut h, &["Bogus"], &[], -1);
    assert!(bad.transaction_states.is_empty());
    assert_eq!(bad.unknown_state_filters.len(), 1);
    let by_pid = list(&mut h, &[], &[pid], -1);
    assert_eq!(by_pid.transaction_states.len(), 1);
    h.now += 10_000;
    // The duration filter compares now - start, as Kafka does: the id without a transaction
    // (start -1) is listed whatever the duration; the open one only once it ran long enough.
    assert_eq!(list(&mut h, &[], &[], 5_000).transaction_states.len(), 2);
    let long = list(&mut h, &[], &[], 50_000);
    assert_eq!(long.transaction_states.len(), 1);
    assert_eq!(
        long.transaction_states[0].transaction_state.as_str(),
        "Empty"
    );
}

#[test]
fn list_v2_filters_by_a_whole_id_pattern() {
    let mut h = T::new();
    for id in ["etl-1", "etl-2", "xetl-3", "other"] {
        h.init_ok(id);
    }
    let list = |h: &mut T, version: i16, pattern: Option<&str>| {
        let tok = h.token(1);
        let mut r = ListTransactionsRequest::default();
        r.transactional_id_pattern = pattern.map(sb);
        let now = h.now;
        let out = h.c.list_transactions(&T::ctx(tok, version), r, now);
        h.absorb(out);
        let ResponseKind::ListTransactions(l) = h.answers.get(&tok).unwrap().clone() else {
            panic!()
        };
        let mut ids: Vec<String> = l
            .transaction_states
            .iter()
            .map(|t| t.transactional_id.0.to_string())
            .collect();
        ids.sort();
        (l.error_code, ids)
    };
    // A whole-id match, as RE2/J's Matcher.matches(): "xetl-3" contains "etl-" but is not listed.
    assert_eq!(
        list(&mut h, 2, Some("etl-.*")),
        (0, vec!["etl-1".into(), "etl-2".into()])
    );
    assert_eq!(list(&mut h, 2, Some("etl-")).1, Vec::<String>::new());
    assert_eq!(list(&mut h, 2, Some("")).1.len(), 4, "empty: no filter");
    assert_eq!(list(&mut h, 2, None).1.len(), 4, "null: no filter");
    assert_eq!(
        list(&mut h, 2, Some("etl-(")),
        (code(ErrorCode::InvalidRegularExpression), vec![])
    );
    // Below v2 the field does not exist on the wire: ignored.
    assert_eq!(list(&mut h, 1, Some("etl-.*")).1.len(), 4);
}

#[test]
fn reload_replays_state_and_resends_markers_of_preparing_transactions() {
    let mut h = T::new();
    let (pa, ea) = h.init_ok("a");
    h.add("a", pa, ea, &[("t", 0)]);
    let (pb, eb) = h.init_ok("b");
    h.add("b", pb, eb, &[("t", 1), ("u", 0)]);
    let (pc, ec) = h.init_ok("c");
    h.add("c", pc, ec, &[("t", 0)]);
    h.end("c", pc, ec, false);
    h.auto_markers = false;
    h.end("b", pb, eb, true);
    assert_eq!(h.state("b"), Some(TxnState::PrepareCommit));
    let (mut c, out) = h.replayed();
    // Same visible state for every id.
    for id in ["a", "b", "c"] {
        assert_eq!(
            c.transaction(id).map(|s| s.value),
            h.c.transaction(id).map(|s| s.value),
            "{id}"
        );
    }
    // b was preparing: its markers go out again, with the new coordinator epoch.
    assert_eq!(out.markers.len(), 1);
    let m = &out.markers[0];
    assert_eq!(
        (m.transactional_id.as_str(), m.commit, m.coordinator_epoch),
        ("b", true, 1)
    );
    assert_eq!(m.partitions.len(), 2);
    // While a partition is loading, its ids answer COORDINATOR_LOAD_IN_PROGRESS; after an
    // unload, NOT_COORDINATOR.
    let p = c.partition_for("a");
    c.begin_loading(p);
    assert_eq!(
        c.verify("a", pa, ea, &parts(&[("t", 0)])).values().next(),
        Some(&ErrorCode::CoordinatorLoadInProgress)
    );
    c.unload_partition(p);
    assert_eq!(
        c.verify("a", pa, ea, &parts(&[("t", 0)])).values().next(),
        Some(&ErrorCode::NotCoordinator)
    );
}

#[test]
fn unload_answers_waiting_requests_with_not_coordinator() {
    let mut h = T::new();
    let (pid, epoch) = h.init_ok("tx");
    h.auto_flush = false;
    let t = h.add("tx", pid, epoch, &[("t", 0)]);
    let p = h.c.partition_for("tx");
    let out = h.c.unload_partition(p);
    h.absorb(out);
    assert_eq!(h.add_error(t), Some(code(ErrorCode::NotCoordinator)));
    // The write completing later changes nothing.
    h.flush();
    assert!(h.c.transaction("tx").is_none());
}
