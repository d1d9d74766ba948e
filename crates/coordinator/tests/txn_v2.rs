//! Transaction version 2 (KIP-890 part 2) in the transaction coordinator: partition leaders
//! add partitions on the producer's behalf (AddPartitionsToTxn v5, not verify-only), EndTxn v5
//! bumps the producer epoch per transaction and answers the new one, markers carry it, retries
//! with the epoch before the bump succeed, an empty abort still fences, the epoch's exhaustion
//! moves the id to a new producer id, and the state log uses Kafka's v1 value with
//! ClientTransactionVersion.

#![allow(clippy::unwrap_used)]

mod txn_common;

use coordinator::txn::log;
use coordinator::TxnState;
use model::ErrorCode;
use txn_common::*;

/// Adds `parts` to transaction "tx" with a version-2 produce (which must succeed), stops the
/// markers from being delivered on their own, and sends EndTxn v5 (`commit` or abort) at
/// `epoch`; returns the EndTxn's token, its markers still pending.
fn end_with_markers_held(
    h: &mut T,
    pid: i64,
    epoch: i16,
    parts: &[(&str, i32)],
    commit: bool,
) -> u64 {
    let t = h.implicit_add("tx", pid, epoch, parts);
    assert_eq!(h.batch_error(t), Some(NONE));
    h.auto_markers = false;
    h.end_v2("tx", pid, epoch, commit)
}

#[test]
fn each_transaction_bumps_the_epoch_and_markers_carry_it() {
    let mut h = T::new();
    let (pid, e0) = h.init_ok("tx");
    // InitProducerId writes Kafka's version-0 value.
    assert_eq!(h.log.last().unwrap().value.as_ref().unwrap()[..2], [0, 0]);
    // The leader adds the partition when the producer's first batch arrives.
    let t = h.implicit_add("tx", pid, e0, &[("t", 0)]);
    assert_eq!(h.batch_error(t), Some(NONE));
    let v = h.value("tx");
    assert_eq!((v.state, v.client_txn_version), (TxnState::Ongoing, 2));
    // Its record is Kafka's flexible v1 value with ClientTransactionVersion = 2.
    let w = h.log.last().unwrap().value.clone().unwrap();
    assert_eq!(w[..2], [0, 1]);
    assert_eq!(log::decode_value(&w).unwrap().client_txn_version, 2);

    h.auto_markers = false;
    let t = h.end_v2("tx", pid, e0, true);
    let r = h.end_resp(t).unwrap().clone();
    assert_eq!(r.error_code, NONE);
    assert_eq!((r.producer_id.0, r.producer_epoch), (pid, e0 + 1));
    assert_eq!(h.state("tx"), Some(TxnState::PrepareCommit));
    let m = h.markers[0].clone();
    assert_eq!(
        (m.producer_id, m.producer_epoch, m.commit),
        (pid, e0 + 1, true)
    );

    // The next transaction's first batch, before the markers are written: the add waits for
    // the previous transaction to complete instead of failing.
    let t = h.implicit_add("tx", pid, e0 + 1, &[("t", 1)]);
    assert_eq!(h.batch_error(t), None);
    h.deliver_markers();
    assert_eq!(h.batch_error(t), Some(NONE));
    let v = h.value("tx");
    assert_eq!((v.state, v.producer_epoch), (TxnState::Ongoing, e0 + 1));
    // The old epoch is fenced from now on.
    let t = h.implicit_add("tx", pid, e0, &[("u", 0)]);
    assert_eq!(h.batch_error(t), Some(code(ErrorCode::ProducerFenced)));
    let t = h.end_v2("tx", pid, e0 + 1, false);
    assert_eq!(h.end_resp(t).unwrap().producer_epoch, e0 + 2);
    h.deliver_markers();
    assert_eq!(h.state("tx"), Some(TxnState::CompleteAbort));
}

#[test]
fn a_retried_end_txn_with_the_epoch_before_the_bump_succeeds() {
    let mut h = T::new();
    let (pid, e0) = h.init_ok("tx");
    let t = end_with_markers_held(&mut h, pid, e0, &[("t", 0)], true);
    assert_eq!(h.end_resp(t).unwrap().error_code, NONE);
    // Retry while the markers are being written: CONCURRENT_TRANSACTIONS (the client retries).
    let t = h.end_v2("tx", pid, e0, true);
    assert_eq!(h.error(t), Some(code(ErrorCode::ConcurrentTransactions)));
    h.deliver_markers();
    // Retry after completion: success with the bumped epoch.
    let t = h.end_v2("tx", pid, e0, true);
    let r = h.end_resp(t).unwrap();
    assert_eq!((r.error_code, r.producer_epoch), (NONE, e0 + 1));
    // A retry of the wrong outcome is refused; an epoch two behind is fenced.
    let t = h.end_v2("tx", pid, e0, false);
    assert_eq!(h.error(t), Some(code(ErrorCode::InvalidTxnState)));
    let t = h.end_v2("tx", pid, e0 - 1, true);
    assert_eq!(h.error(t), Some(code(ErrorCode::ProducerFenced)));
    // A commit of nothing with the current epoch is out of order.
    let t = h.end_v2("tx", pid, e0 + 1, true);
    assert_eq!(h.error(t), Some(code(ErrorCode::InvalidTxnState)));
}

/// franz-go's consume-transform-produce session: the commit is answered once prepared, the
/// client loses partitions at once and ends its next, empty transaction with the epoch the
/// commit answered while the commit's markers are still being written. Judged against the
/// preparing commit, that epoch would fence the client itself (it did, before Kafka's
/// KAFKA-18464 and here); it is answered CONCURRENT_TRANSACTIONS and, retried once the commit
/// is complete, aborts the empty transaction.
#[test]
fn an_empty_abort_with_the_new_epoch_waits_for_the_previous_commit() {
    let mut h = T::new();
    let (pid, e0) = h.init_ok("tx");
    let t = end_with_markers_held(&mut h, pid, e0, &[("t", 0)], true);
    assert_eq!(h.end_resp(t).unwrap().producer_epoch, e0 + 1);
    assert_eq!(h.state("tx"), Some(TxnState::PrepareCommit));
    for commit in [false, true] {
        let t = h.end_v2("tx", pid, e0 + 1, commit);
        assert_eq!(h.error(t), Some(code(ErrorCode::ConcurrentTransactions)));
    }
    // A stale epoch is still busy first, as in Kafka; fenced once the commit completed.
    let t = h.end_v2("tx", pid, e0 - 1, false);
    assert_eq!(h.error(t), Some(code(ErrorCode::ConcurrentTransactions)));
    h.deliver_markers();
    assert_eq!(h.state("tx"), Some(TxnState::CompleteCommit));
    let t = h.end_v2("tx", pid, e0 - 1, false);
    assert_eq!(h.error(t), Some(code(ErrorCode::ProducerFenced)));
    let t = h.end_v2("tx", pid, e0 + 1, false);
    let r = h.end_resp(t).unwrap();
    assert_eq!((r.error_code, r.producer_epoch), (NONE, e0 + 2));
    h.deliver_markers();
    assert_eq!(h.state("tx"), Some(TxnState::CompleteAbort));
}

#[test]
fn an_abort_of_a_transaction_the_coordinator_never_saw_still_bumps_the_epoch() {
    let mut h = T::new();
    let (pid, e0) = h.init_ok("tx");
    // The producer's batches failed before any leader added a partition; it aborts.
    let t = h.end_v2("tx", pid, e0, false);
    let r = h.end_resp(t).unwrap();
    assert_eq!((r.error_code, r.producer_epoch), (NONE, e0 + 1));
    assert_eq!(h.state("tx"), Some(TxnState::CompleteAbort));
    // Transaction version 1 keeps Kafka's answer for that.
    let (pid, e1) = h.init_ok("tx1");
    let t = h.end("tx1", pid, e1, false);
    assert_eq!(h.error(t), Some(code(ErrorCode::InvalidTxnState)));
}

#[test]
fn an_exhausted_epoch_moves_the_id_to_a_new_producer_id() {
    let mut h = T::new();
    let (pid, _) = h.init_ok("tx");
    let mut v = h.value("tx");
    let last = i16::MAX - 1;
    v.producer_epoch = last;
    let p = h.c.partition_for("tx");
    h.c.begin_loading(p);
    h.c.replay(&log::encode_key("tx"), Some(&log::encode_value(&v)))
        .unwrap();
    let now = h.now;
    h.c.load_partition(p, 0, now);
    let t = end_with_markers_held(&mut h, pid, last, &[("t", 0)], true);
    assert_eq!(h.end_resp(t).unwrap().error_code, NONE);
    // Markers still use the old producer id (with the last epoch).
    let m = h.markers[0].clone();
    assert_eq!((m.producer_id, m.producer_epoch), (pid, i16::MAX));
    h.deliver_markers();
    let v = h.value("tx");
    assert_ne!(v.producer_id, pid);
    assert_eq!((v.prev_producer_id, v.producer_epoch), (pid, 0));
    // A retry with the old id and its last epoch is recognised.
    let t = h.end_v2("tx", pid, last, true);
    let r = h.end_resp(t).unwrap();
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (NONE, v.producer_id, 0)
    );
}

#[test]
fn transaction_version_2_state_survives_a_reload() {
    let mut h = T::new();
    let (pid, e0) = h.init_ok("tx");
    let t = end_with_markers_held(&mut h, pid, e0, &[("t", 0), ("u", 0)], false);
    assert_eq!(h.end_resp(t).unwrap().error_code, NONE);
    let (c, out) = h.replayed();
    let v = c.transaction("tx").unwrap().value;
    assert_eq!(
        (v.state, v.producer_epoch, v.client_txn_version),
        (TxnState::PrepareAbort, e0 + 1, 2)
    );
    // The reloaded coordinator resends the markers with the bumped epoch.
    assert_eq!(out.markers.len(), 1);
    assert_eq!(out.markers[0].producer_epoch, e0 + 1);
    assert!(!out.markers[0].commit);
}
