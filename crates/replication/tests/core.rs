//! The replication core's decisions, one Kafka rule at a time: fetch fencing and errors,
//! the durable high watermark over the (maximal) ISR, acks=all outcomes, ISR shrink and
//! expansion through AlterPartition, and the follower's fetch/truncate loop.

#![allow(clippy::unwrap_used)]

use model::{ErrorCode, LeaderEpoch, Offset};
use replication::*;
use storage::LeaderEpochCache;

/// A log as the core sees it: start, end, durable end and the epoch cache.
#[derive(Default)]
struct MemLog {
    start: Offset,
    end: Offset,
    durable: Offset,
    epochs: LeaderEpochCache,
}

impl LogView for MemLog {
    fn log_start_offset(&self) -> Offset {
        self.start
    }
    fn log_end_offset(&self) -> Offset {
        self.end
    }
    fn durable_offset(&self) -> Offset {
        self.durable
    }
    fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.epochs.latest_epoch()
    }
    fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> EpochEndOffset {
        self.epochs.end_offset_for(epoch, self.end)
    }
}

impl MemLog {
    fn append(&mut self, epoch: LeaderEpoch, n: i64) {
        self.epochs.assign(epoch, self.end);
        self.end += n;
    }
    fn sync(&mut self) {
        self.durable = self.end;
    }
}

fn state(leader: i32, epoch: i32, pepoch: i32, isr: &[i32]) -> PartitionState {
    PartitionState {
        leader: Some(leader),
        leader_epoch: epoch,
        partition_epoch: pepoch,
        replicas: vec![1, 2, 3],
        isr: isr.to_vec(),
    }
}

fn config(node: i32, min_isr: usize) -> ReplicaConfig {
    ReplicaConfig {
        min_insync_replicas: min_isr,
        replica_lag_time_max_ms: 1_000,
        ..ReplicaConfig::new(node)
    }
}

fn follower_fetch(replica: i32, offset: Offset, epoch: LeaderEpoch) -> FetchRequest {
    FetchRequest {
        replica_id: Some(replica),
        fetch_offset: offset,
        current_leader_epoch: Some(epoch),
        last_fetched_epoch: Some(epoch),
        isr_eligible: true,
    }
}

/// Leader 1 of epoch 5 over replicas 1,2,3 with 10 durable records of epoch 5.
fn leader(min_isr: usize) -> (Replica, MemLog) {
    let mut log = MemLog::default();
    let mut r = Replica::new(config(1, min_isr), 0, &log);
    let acts = r.apply_metadata(0, state(1, 5, 1, &[1, 2, 3]), &log);
    assert_eq!(
        acts,
        vec![Action::AssignLeaderEpoch {
            epoch: 5,
            start_offset: 0
        }]
    );
    log.epochs.assign(5, 0);
    log.append(5, 10);
    log.sync();
    r.on_log_changed(1, &log);
    (r, log)
}

fn hw_moves(acts: &[Action]) -> Vec<Offset> {
    acts.iter()
        .filter_map(|a| match a {
            Action::HighWatermark(h) => Some(*h),
            _ => None,
        })
        .collect()
}

fn alters(acts: &[Action]) -> Vec<AlterPartitionRequest> {
    acts.iter()
        .filter_map(|a| match a {
            Action::AlterPartition(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn fetches_are_fenced_by_epoch_and_role() {
    let (mut r, log) = leader(1);
    let err = |r: &mut Replica, req| r.fetch(5, req, &log).0.error;
    let mut req = follower_fetch(2, 0, 4);
    assert_eq!(err(&mut r, req), ErrorCode::FencedLeaderEpoch);
    req.current_leader_epoch = Some(6);
    assert_eq!(err(&mut r, req), ErrorCode::UnknownLeaderEpoch);
    req.current_leader_epoch = None;
    assert_eq!(err(&mut r, req), ErrorCode::None, "no epoch: not checked");
    req.replica_id = Some(9);
    assert_eq!(
        err(&mut r, req),
        ErrorCode::NotLeaderOrFollower,
        "not a replica"
    );
    // Past the LEO with the same last epoch: the log diverges (epoch 5 ends at 10).
    let mut req = follower_fetch(2, 11, 5);
    let (ans, _) = r.fetch(5, req, &log);
    assert_eq!(ans.error, ErrorCode::None);
    assert_eq!(
        ans.diverging_epoch,
        Some(EpochEndOffset {
            epoch: 5,
            end_offset: 10
        })
    );
    assert_eq!(ans.read, None);
    // An epoch the leader does not know at all.
    req.last_fetched_epoch = Some(9);
    assert_eq!(err(&mut r, req), ErrorCode::OffsetOutOfRange);
    // Without a last epoch, past the LEO is out of range.
    req.last_fetched_epoch = None;
    let (ans, _) = r.fetch(5, req, &log);
    assert_eq!(
        (ans.error, ans.log_end_offset),
        (ErrorCode::OffsetOutOfRange, 10)
    );
    // A follower replica answers with NOT_LEADER_OR_FOLLOWER and the leader hint.
    let flog = MemLog::default();
    let mut f = Replica::new(config(2, 1), 0, &flog);
    f.apply_metadata(0, state(1, 5, 1, &[1, 2, 3]), &flog);
    let (ans, _) = f.fetch(
        0,
        FetchRequest {
            replica_id: None,
            fetch_offset: 0,
            current_leader_epoch: Some(5),
            last_fetched_epoch: None,
            isr_eligible: false,
        },
        &flog,
    );
    assert_eq!(ans.error, ErrorCode::NotLeaderOrFollower);
    assert_eq!(ans.current_leader, Some((1, 5)));
}

#[test]
fn the_high_watermark_is_the_smallest_durable_end_over_the_isr() {
    let (mut r, mut log) = leader(2);
    assert_eq!(
        r.high_watermark(),
        0,
        "followers' progress unknown in this epoch"
    );
    let (ans, acts) = r.fetch(10, follower_fetch(2, 10, 5), &log);
    assert_eq!(
        ans.read,
        Some(ReadRange {
            from: 10,
            upper_bound: 10
        })
    );
    assert!(
        hw_moves(&acts).is_empty(),
        "follower 3 is in the ISR and unknown"
    );
    let (_, acts) = r.fetch(10, follower_fetch(3, 7, 5), &log);
    assert_eq!(hw_moves(&acts), vec![7]);
    // The leader's own unsynced records do not count.
    log.append(5, 5);
    let acts = r.on_log_changed(11, &log);
    assert!(acts.contains(&Action::Flush { offset: 15 }));
    r.fetch(12, follower_fetch(2, 15, 5), &log);
    r.fetch(12, follower_fetch(3, 15, 5), &log);
    assert_eq!(r.high_watermark(), 10);
    log.sync();
    assert_eq!(hw_moves(&r.on_log_changed(13, &log)), vec![15]);
    // Consumers read below the HW only.
    let (ans, _) = r.fetch(
        14,
        FetchRequest {
            replica_id: None,
            fetch_offset: 3,
            current_leader_epoch: Some(5),
            last_fetched_epoch: None,
            isr_eligible: false,
        },
        &log,
    );
    assert_eq!(
        ans.read,
        Some(ReadRange {
            from: 3,
            upper_bound: 15
        })
    );
}

#[test]
fn acks_all_outcomes() {
    let (mut r, mut log) = leader(2);
    // Appended at 10..12, waiting for offset 12.
    assert_eq!(r.check_produce(true), Ok(5));
    log.append(5, 2);
    log.sync();
    r.on_log_changed(1, &log);
    assert!(r.wait_for_ack(7, 12, 1_000, &log).is_empty());
    r.fetch(2, follower_fetch(2, 12, 5), &log);
    let (_, acts) = r.fetch(2, follower_fetch(3, 12, 5), &log);
    assert!(acts.contains(&Action::AckDone {
        id: 7,
        error: ErrorCode::None
    }));
    // Timeouts.
    log.append(5, 1);
    log.sync();
    r.on_log_changed(3, &log);
    r.wait_for_ack(8, 13, 100, &log);
    assert!(r.tick(100, &log).contains(&Action::AckDone {
        id: 8,
        error: ErrorCode::RequestTimedOut
    }));
    // The ISR shrinks below min.insync.replicas after an append.
    r.wait_for_ack(9, 13, 10_000, &log);
    let acts = r.apply_metadata(200, state(1, 5, 2, &[1]), &log);
    assert!(acts.contains(&Action::AckDone {
        id: 9,
        error: ErrorCode::NotEnoughReplicasAfterAppend
    }));
    assert_eq!(r.check_produce(true), Err(ErrorCode::NotEnoughReplicas));
    assert_eq!(r.check_produce(false), Ok(5), "acks=1 still accepted");
    // KIP-966: no HW advance on an ISR below min.insync.replicas.
    log.append(5, 3);
    log.sync();
    assert!(hw_moves(&r.on_log_changed(300, &log)).is_empty());
    // Losing leadership fails waiting acks.
    r.apply_metadata(350, state(1, 5, 3, &[1, 2, 3]), &log);
    assert!(r.wait_for_ack(10, 16, 10_000, &log).is_empty());
    let acts = r.apply_metadata(400, state(2, 6, 4, &[2, 3]), &log);
    assert!(acts.contains(&Action::AckDone {
        id: 10,
        error: ErrorCode::NotLeaderOrFollower
    }));
    assert_eq!(r.check_produce(false), Err(ErrorCode::NotLeaderOrFollower));
}

/// A new leader epoch with the same leader (the controller bumps it when a reassignment
/// removes a replica, so that replica's fetches in flight are fenced): waiting acks=all
/// appends stay and are answered once the HW of the new epoch passes them; the removed
/// replica's fetch of the old epoch is fenced and records no progress.
#[test]
fn a_same_leader_epoch_bump_keeps_waiting_acks_and_fences_the_old_epochs_fetches() {
    let (mut r, mut log) = leader(1);
    log.append(5, 2);
    log.sync();
    r.on_log_changed(1, &log);
    assert!(r.wait_for_ack(7, 12, 10_000, &log).is_empty());
    // Replica 3 is reassigned away: epoch 6, same leader.
    let removed = PartitionState {
        replicas: vec![1, 2],
        ..state(1, 6, 2, &[1, 2])
    };
    let acts = r.apply_metadata(2, removed, &log);
    assert!(
        !acts.iter().any(|a| matches!(a, Action::AckDone { .. })),
        "{acts:?}"
    );
    assert!(acts.contains(&Action::AssignLeaderEpoch {
        epoch: 6,
        start_offset: 12
    }));
    // 3's fetch sent in epoch 5 is fenced; 2 fetches in epoch 6 and the ack is answered.
    let (ans, acts) = r.fetch(3, follower_fetch(3, 12, 5), &log);
    assert_eq!(ans.error, ErrorCode::FencedLeaderEpoch);
    assert!(acts.is_empty());
    let mut req = follower_fetch(2, 12, 6);
    req.last_fetched_epoch = Some(5);
    let (ans, acts) = r.fetch(4, req, &log);
    assert_eq!(ans.error, ErrorCode::None);
    assert!(acts.contains(&Action::AckDone {
        id: 7,
        error: ErrorCode::None
    }));
}

#[test]
fn isr_shrinks_and_expands_through_the_controller() {
    let (mut r, log) = leader(1);
    r.fetch(100, follower_fetch(2, 10, 5), &log);
    r.fetch(100, follower_fetch(3, 4, 5), &log);
    assert_eq!(r.high_watermark(), 4);
    // Follower 3 stops catching up: out of the ISR after replica.lag.time.max.ms.
    assert!(alters(&r.tick(900, &log)).is_empty());
    r.fetch(1_050, follower_fetch(2, 10, 5), &log);
    let sent = alters(&r.tick(1_050, &log));
    assert_eq!(
        sent,
        vec![AlterPartitionRequest {
            broker_id: 1,
            leader_epoch: 5,
            partition_epoch: 1,
            new_isr: vec![1, 2]
        }]
    );
    // While pending, the leaving member still counts (maximal ISR), and it is resent.
    assert_eq!(r.maximal_isr(), vec![1, 2, 3]);
    assert_eq!(r.high_watermark(), 4);
    assert!(alters(&r.tick(1_100, &log)).is_empty());
    assert_eq!(alters(&r.tick(6_100, &log)), sent, "retried");
    let acts = r.on_alter_partition_response(6_200, &sent[0], Ok(state(1, 5, 2, &[1, 2])), &log);
    assert_eq!(
        hw_moves(&acts),
        vec![10],
        "the HW moves once the shrink is committed"
    );
    // Follower 3 catches up: expansion proposed; the HW counts it at once.
    let (_, acts) = r.fetch(6_300, follower_fetch(3, 10, 5), &log);
    let expand = alters(&acts);
    assert_eq!(expand[0].new_isr, vec![1, 2, 3]);
    assert_eq!(r.maximal_isr(), vec![1, 2, 3]);
    // A definite refusal drops the proposal; it is proposed again on the follower's next
    // fetch that is in sync (as Kafka's maybeExpandIsr), not at once on any input.
    let acts =
        r.on_alter_partition_response(6_400, &expand[0], Err(ErrorCode::IneligibleReplica), &log);
    assert!(alters(&acts).is_empty());
    assert!(alters(&r.tick(6_410, &log)).is_empty());
    let (_, acts) = r.fetch(6_420, follower_fetch(3, 10, 5), &log);
    assert_eq!(alters(&acts), expand);
    // ...and the refused member keeps counting for the HW: a delayed copy of the refused
    // request may still be committed (until a newer partition epoch is known).
    assert_eq!(r.maximal_isr(), vec![1, 2, 3]);
    // An answer that leaves the outcome open (an earlier copy may have been committed)
    // keeps the maximal ISR and stops retrying until the metadata image tells.
    r.on_alter_partition_response(
        6_450,
        &expand[0],
        Err(ErrorCode::InvalidUpdateVersion),
        &log,
    );
    assert_eq!(r.maximal_isr(), vec![1, 2, 3]);
    assert!(alters(&r.tick(20_000, &log)).is_empty());
    r.apply_metadata(6_500, state(1, 5, 3, &[1, 2, 3]), &log);
    assert_eq!(r.maximal_isr(), vec![1, 2, 3]);
    // Stale metadata is ignored.
    r.apply_metadata(6_600, state(1, 5, 2, &[1, 2]), &log);
    assert_eq!(r.partition_state().unwrap().partition_epoch, 3);
}

#[test]
fn a_follower_rejoins_only_past_the_epoch_start() {
    let mut log = MemLog::default();
    log.append(3, 20);
    log.sync();
    let mut r = Replica::new(config(1, 1), 8, &log);
    r.apply_metadata(0, state(1, 4, 1, &[1, 2]), &log);
    log.epochs.assign(4, 20);
    r.fetch(1, follower_fetch(2, 20, 4), &log);
    // Follower 3 is at the HW but below the epoch's start offset (20): not yet in sync.
    let (_, acts) = r.fetch(1, follower_fetch(3, 19, 3), &log);
    assert!(alters(&acts).is_empty());
    let (_, acts) = r.fetch(2, follower_fetch(3, 20, 4), &log);
    assert_eq!(alters(&acts)[0].new_isr, vec![1, 2, 3]);
}

fn fetches(acts: &[Action]) -> Vec<FetchPlan> {
    acts.iter()
        .filter_map(|a| match a {
            Action::Fetch(p) => Some(*p),
            _ => None,
        })
        .collect()
}

fn ok(hw: Offset, has_records: bool) -> FetchResponse {
    FetchResponse {
        error: ErrorCode::None,
        high_watermark: hw,
        log_start_offset: 0,
        log_end_offset: 100,
        diverging_epoch: None,
        has_records,
    }
}

#[test]
fn a_follower_fetches_durably_and_learns_the_hw() {
    let mut log = MemLog::default();
    let mut r = Replica::new(config(2, 1), 0, &log);
    let acts = r.apply_metadata(0, state(1, 5, 1, &[1, 2, 3]), &log);
    let plan = fetches(&acts)[0];
    assert_eq!(plan.leader, 1);
    assert_eq!(
        plan.request,
        FetchRequest {
            replica_id: Some(2),
            fetch_offset: 0,
            current_leader_epoch: Some(5),
            last_fetched_epoch: None,
            isr_eligible: true,
        }
    );
    // A stale or duplicate answer is ignored.
    assert!(r
        .on_fetch_response(1, plan.fetch_id + 7, ok(0, true), &log)
        .is_empty());
    assert_eq!(
        r.on_fetch_response(1, plan.fetch_id, ok(4, true), &log),
        vec![Action::AppendFetched]
    );
    assert!(
        r.on_fetch_response(1, plan.fetch_id, ok(4, true), &log)
            .is_empty(),
        "duplicate"
    );
    log.append(5, 6);
    // Not durable yet: flush before reporting progress; the HW waits for durability too.
    assert_eq!(r.on_log_changed(2, &log), vec![Action::Flush { offset: 6 }]);
    log.sync();
    let acts = r.on_log_changed(3, &log);
    assert_eq!(hw_moves(&acts), vec![4]);
    let next = fetches(&acts)[0];
    assert_eq!(next.request.fetch_offset, 6);
    assert_eq!(next.request.last_fetched_epoch, Some(5));
    // Errors back off, then retry; a lost fetch is retried after the timeout.
    let mut e = ok(4, false);
    e.error = ErrorCode::NotLeaderOrFollower;
    assert!(r.on_fetch_response(4, next.fetch_id, e, &log).is_empty());
    assert!(fetches(&r.tick(500, &log)).is_empty());
    let again = fetches(&r.tick(1_004, &log))[0];
    assert!(fetches(&r.tick(20_000, &log)).is_empty());
    let retry = fetches(&r.tick(31_004, &log))[0];
    assert!(retry.fetch_id > again.fetch_id);
    // A leader that has not applied our epoch yet (UNKNOWN_LEADER_EPOCH) is asked again
    // soon, not after the full backoff: it catches up with the metadata within moments.
    let mut behind = ok(4, false);
    behind.error = ErrorCode::UnknownLeaderEpoch;
    assert!(r
        .on_fetch_response(31_005, retry.fetch_id, behind, &log)
        .is_empty());
    assert!(fetches(&r.tick(31_010, &log)).is_empty());
    let soon = fetches(&r.tick(31_025, &log))[0];
    assert!(soon.fetch_id > retry.fetch_id);
}

#[test]
fn a_follower_truncates_by_epoch_lineage() {
    // Follower log: epoch 1 at 0..10, epoch 3 at 10..16 (its own, never replicated).
    let mut log = MemLog::default();
    log.append(1, 10);
    log.append(3, 6);
    log.sync();
    let mut r = Replica::new(config(2, 1), 8, &log);
    let plan = fetches(&r.apply_metadata(0, state(1, 4, 1, &[1, 2]), &log))[0];
    assert_eq!(plan.request.last_fetched_epoch, Some(3));
    // The leader (epochs 1 at 0, 2 at 12, 4 at 14) says epoch 3 is unknown: epoch 2 ends
    // at 14. The follower has no epoch 2: it cuts to the end of its largest epoch below
    // (1 ends at 10), then asks again with epoch 1.
    let mut resp = ok(8, false);
    resp.diverging_epoch = Some(EpochEndOffset {
        epoch: 2,
        end_offset: 14,
    });
    let acts = r.on_fetch_response(1, plan.fetch_id, resp, &log);
    assert_eq!(acts, vec![Action::Truncate { offset: 10 }]);
    log.end = 10;
    log.epochs.truncate_from_end(10);
    let plan = fetches(&r.on_log_changed(2, &log))[0];
    assert_eq!(plan.request.last_fetched_epoch, Some(1));
    // Second round: the leader's epoch 1 ends at 12, past the follower's end: no cut.
    let mut resp = ok(8, false);
    resp.diverging_epoch = Some(EpochEndOffset {
        epoch: 1,
        end_offset: 12,
    });
    let acts = r.on_fetch_response(3, plan.fetch_id, resp, &log);
    assert_eq!(acts, vec![Action::Truncate { offset: 10 }]);
    // Pure function, incl. the fallback for a leader that knows no epochs.
    assert_eq!(truncation_offset(EpochEndOffset::UNDEFINED, 8, &log), 8);
}

#[test]
fn a_follower_behind_the_leaders_log_start_restarts_there() {
    let mut log = MemLog::default();
    log.append(1, 5);
    log.sync();
    let mut r = Replica::new(config(2, 1), 5, &log);
    let plan = fetches(&r.apply_metadata(0, state(1, 4, 1, &[1, 2]), &log))[0];
    let resp = FetchResponse {
        error: ErrorCode::OffsetOutOfRange,
        high_watermark: 40,
        log_start_offset: 30,
        log_end_offset: 50,
        diverging_epoch: None,
        has_records: false,
    };
    let acts = r.on_fetch_response(1, plan.fetch_id, resp, &log);
    assert_eq!(acts, vec![Action::TruncateFullyAndStartAt { offset: 30 }]);
    log = MemLog {
        start: 30,
        end: 30,
        durable: 30,
        epochs: LeaderEpochCache::default(),
    };
    let acts = r.on_log_changed(2, &log);
    assert_eq!(r.high_watermark(), 30);
    assert_eq!(fetches(&acts)[0].request.fetch_offset, 30);
}

#[test]
fn a_follower_whose_epoch_the_leader_deleted_restarts_at_the_leaders_start() {
    // The follower's last epoch (0) is older than anything the leader still has: its log
    // starts at 19 with epoch 1. The leader's answer (0 ends at 19) cannot vouch for the
    // follower's records below 19, so the follower restarts there (Kafka would keep them).
    let mut log = MemLog::default();
    log.append(0, 25);
    log.sync();
    let mut r = Replica::new(config(2, 1), 12, &log);
    let plan = fetches(&r.apply_metadata(0, state(1, 1, 1, &[1, 2]), &log))[0];
    let resp = FetchResponse {
        error: ErrorCode::None,
        high_watermark: 30,
        log_start_offset: 19,
        log_end_offset: 40,
        diverging_epoch: Some(EpochEndOffset {
            epoch: 0,
            end_offset: 19,
        }),
        has_records: false,
    };
    let acts = r.on_fetch_response(1, plan.fetch_id, resp, &log);
    assert_eq!(acts, vec![Action::TruncateFullyAndStartAt { offset: 19 }]);
}

#[test]
fn a_leader_tells_a_follower_with_an_epoch_older_than_its_log_to_diverge() {
    // Leader: retention moved its start to 19; only epoch 2 (from 19) is left.
    let mut log = MemLog::default();
    log.append(1, 19);
    log.append(2, 11);
    log.sync();
    log.start = 19;
    log.epochs.truncate_from_start(19);
    let mut r = Replica::new(config(1, 1), 19, &log);
    r.apply_metadata(0, state(1, 2, 1, &[1, 2]), &log);
    // Follower 2 at 19 with last epoch 0: nothing here vouches for its records below 19.
    let mut req = follower_fetch(2, 19, 2);
    req.last_fetched_epoch = Some(0);
    let (ans, _) = r.fetch(1, req, &log);
    assert_eq!(
        ans.diverging_epoch,
        Some(EpochEndOffset {
            epoch: 0,
            end_offset: 19
        })
    );
    // A consumer gets Kafka's answer (its position is checked by its own epoch logic).
    req.replica_id = None;
    assert_eq!(r.fetch(1, req, &log).0.diverging_epoch, None);
}

#[test]
fn min_insync_replicas_above_the_replication_factor_means_all_replicas() {
    // Kafka's effectiveMinIsr: min(min.insync.replicas, replication factor).
    let mut log = MemLog::default();
    let mut r = Replica::new(config(1, 5), 0, &log);
    r.apply_metadata(0, state(1, 1, 1, &[1, 2, 3]), &log);
    log.epochs.assign(1, 0);
    assert_eq!(r.check_produce(true), Ok(1));
    log.append(1, 4);
    log.sync();
    r.on_log_changed(1, &log);
    r.fetch(2, follower_fetch(2, 4, 1), &log);
    let (_, acts) = r.fetch(2, follower_fetch(3, 4, 1), &log);
    assert_eq!(hw_moves(&acts), vec![4]);
    r.apply_metadata(3, state(1, 1, 2, &[1, 2]), &log);
    assert_eq!(r.check_produce(true), Err(ErrorCode::NotEnoughReplicas));
}

/// Replication factor 1: the HW moves to the log end with every append (no fsync asked for
/// an acks=1 write), as before replication; an acks=all wait asks for the fsync and is
/// answered only once its batch is on disk.
#[test]
fn a_single_replica_moves_its_hw_with_appends_and_acks_after_the_fsync() {
    let mut log = MemLog::default();
    let mut r = Replica::new(config(1, 1), 0, &log);
    let single = PartitionState {
        replicas: vec![1],
        ..state(1, 0, 0, &[1])
    };
    r.apply_metadata(0, single, &log);
    assert!(r.is_single_replica());
    log.epochs.assign(0, 0);
    // acks=1: the HW is at the log end at once, and nothing asks for an fsync.
    log.append(0, 5);
    let acts = r.on_log_changed(1, &log);
    assert_eq!(hw_moves(&acts), vec![5]);
    assert!(!acts.iter().any(|a| matches!(a, Action::Flush { .. })));
    // acks=all: visible at once, acknowledged only after the fsync.
    log.append(0, 3);
    let acts = r.on_log_changed(2, &log);
    assert_eq!(hw_moves(&acts), vec![8]);
    let acts = r.wait_for_ack(1, 8, 10_000, &log);
    assert_eq!(acts, vec![Action::Flush { offset: 8 }]);
    // Another append while the fsync is under way asks again once it is done.
    log.durable = 8;
    log.append(0, 2);
    let acts = r.on_log_changed(3, &log);
    assert!(acts.contains(&Action::AckDone {
        id: 1,
        error: ErrorCode::None
    }));
    assert!(!acts.iter().any(|a| matches!(a, Action::Flush { .. })));
    assert_eq!(r.high_watermark(), 10);
    // min.insync.replicas above the replication factor does not block it (effective: 1).
    let mut strict = Replica::new(config(1, 2), 0, &log);
    strict.apply_metadata(
        4,
        PartitionState {
            replicas: vec![1],
            ..state(1, 1, 1, &[1])
        },
        &log,
    );
    assert_eq!(strict.check_produce(true), Ok(1));
}

/// Replication factor 1 reassigned to more replicas (KIP-455) while appends are not yet on
/// disk: the HW, which moved with the log end, is past the durable end. It stays (a leader's
/// HW never goes back) and the leader asks for the fsync, but followers learn no HW past
/// what is on the leader's disk until then: a crash could still take that tail, and a
/// follower must never have to truncate below its HW after a clean election, and acks=all
/// appends still wait for the fsync. Before, the replica's own check panicked ("HW past its
/// durable end") on its next input, and a waiting acks=all append was acknowledged before it
/// was on disk (found by the replication simulation's reassignments, seeds 0x5eed0000 and
/// 0x5eed1abc).
#[test]
fn a_single_replica_that_gains_replicas_keeps_its_hw_and_tells_followers_the_durable_end() {
    let mut log = MemLog::default();
    let mut r = Replica::new(config(1, 1), 0, &log);
    let single = PartitionState {
        replicas: vec![1],
        ..state(1, 0, 0, &[1])
    };
    r.apply_metadata(0, single, &log);
    log.epochs.assign(0, 0);
    log.append(0, 5);
    log.sync();
    log.append(0, 3);
    r.on_log_changed(1, &log);
    assert_eq!((r.high_watermark(), log.durable), (8, 5));
    // An acks=all append at 7 waits for the fsync.
    assert_eq!(
        r.wait_for_ack(1, 8, 10_000, &log),
        vec![Action::Flush { offset: 8 }]
    );
    // Reassigned to [1, 2]: 2 is adding, the ISR stays [1].
    let grown = PartitionState {
        replicas: vec![1, 2],
        ..state(1, 0, 1, &[1])
    };
    let acts = r.apply_metadata(2, grown, &log);
    assert!(
        acts.contains(&Action::Flush { offset: 8 }),
        "the unsynced tail is flushed now: {acts:?}"
    );
    assert_eq!(r.high_watermark(), 8);
    let acts = r.on_log_changed(3, &log);
    assert!(hw_moves(&acts).is_empty());
    assert!(
        !acts.iter().any(|a| matches!(a, Action::AckDone { .. })),
        "the acks=all append is not on disk yet: {acts:?}"
    );
    // The adding follower copies the log; it is told the leader's durable end as the HW.
    let (ans, _) = r.fetch(4, follower_fetch(2, 0, 0), &log);
    assert_eq!((ans.error, ans.high_watermark), (ErrorCode::None, 5));
    let (ans, acts) = r.fetch(5, follower_fetch(2, 8, 0), &log);
    assert_eq!(ans.high_watermark, 5);
    assert_eq!(
        alters(&acts)
            .iter()
            .map(|a| a.new_isr.clone())
            .collect::<Vec<_>>(),
        vec![vec![1, 2]],
        "caught up to the HW: proposed for the ISR"
    );
    // Once on disk, the HW is the HW again and the append is acknowledged.
    log.sync();
    let acts = r.on_log_changed(6, &log);
    assert!(acts.contains(&Action::AckDone {
        id: 1,
        error: ErrorCode::None
    }));
    let (ans, _) = r.fetch(7, follower_fetch(2, 8, 0), &log);
    assert_eq!((ans.high_watermark, r.high_watermark()), (8, 8));
}

/// Replication factor 1, two acks=all appends while one fsync is under way (the runtime drops
/// a second Flush while one is in flight): when the first fsync completes and answers the first
/// wait, the replica must ask for another fsync for the second, or it waits until the request
/// times out (clients then retried the batch: duplicates). Found by test_log_damage.py.
#[test]
fn a_single_replica_asks_again_for_an_fsync_of_a_later_waiting_append() {
    let mut log = MemLog::default();
    let mut r = Replica::new(config(1, 1), 0, &log);
    let single = PartitionState {
        replicas: vec![1],
        ..state(1, 0, 0, &[1])
    };
    r.apply_metadata(0, single, &log);
    log.epochs.assign(0, 0);
    log.append(0, 4);
    r.on_log_changed(1, &log);
    assert_eq!(
        r.wait_for_ack(1, 4, 10_000, &log),
        vec![Action::Flush { offset: 4 }]
    );
    // The second append's Flush is dropped by the runtime (one is in flight).
    log.append(0, 3);
    r.on_log_changed(2, &log);
    r.wait_for_ack(2, 7, 10_000, &log);
    // The first fsync covers only the first batch.
    log.durable = 4;
    let acts = r.on_log_changed(3, &log);
    assert!(acts.contains(&Action::AckDone {
        id: 1,
        error: ErrorCode::None
    }));
    assert!(
        acts.contains(&Action::Flush { offset: 7 }),
        "the second wait needs another fsync: {acts:?}"
    );
    log.sync();
    let acts = r.on_log_changed(4, &log);
    assert!(acts.contains(&Action::AckDone {
        id: 2,
        error: ErrorCode::None
    }));
}

/// `min.insync.replicas` changed without a restart: acks=all is refused once the ISR is below
/// the new minimum, and the HW stops moving (KIP-966); lowering it again lets both proceed.
#[test]
fn min_insync_replicas_changes_apply_at_once() {
    let (mut r, mut log) = leader(2);
    r.apply_metadata(10, state(1, 5, 2, &[1, 2]), &log);
    assert_eq!(r.check_produce(true), Ok(5));
    assert!(r.set_min_insync_replicas(3));
    assert!(!r.set_min_insync_replicas(3), "unchanged");
    assert_eq!(r.check_produce(true), Err(ErrorCode::NotEnoughReplicas));
    log.append(5, 2);
    log.sync();
    r.on_log_changed(20, &log);
    let (_, acts) = r.fetch(30, follower_fetch(2, 12, 5), &log);
    assert!(
        hw_moves(&acts).is_empty(),
        "no HW move on an ISR below the minimum"
    );
    assert!(r.set_min_insync_replicas(2));
    let acts = r.on_log_changed(40, &log);
    assert_eq!(hw_moves(&acts), vec![12]);
    assert_eq!(r.check_produce(true), Ok(5));
}

/// After an unclean election the new leader may lack records a follower counted as committed.
/// The follower must not panic (bytes from a peer never crash the broker): it lowers its HW,
/// says so, and follows the leader, as Kafka's fetcher does (truncation below the HW with a
/// warning).
#[test]
fn a_follower_past_an_unclean_leaders_log_lowers_its_hw_and_truncates() {
    let follower = |hw: Offset| {
        let mut log = MemLog::default();
        log.append(1, 10);
        log.sync();
        let mut r = Replica::new(config(2, 1), hw, &log);
        let plan = fetches(&r.apply_metadata(0, state(3, 2, 1, &[3]), &log))[0];
        (r, log, plan)
    };
    // The diverging epoch says epoch 1 ends at 5 on the leader.
    let (mut r, log, plan) = follower(8);
    let mut resp = ok(5, false);
    resp.diverging_epoch = Some(EpochEndOffset {
        epoch: 1,
        end_offset: 5,
    });
    let acts = r.on_fetch_response(1, plan.fetch_id, resp, &log);
    assert_eq!(
        acts,
        vec![
            Action::TruncatingBelowHighWatermark {
                offset: 5,
                high_watermark: 8
            },
            Action::HighWatermark(5),
            Action::Truncate { offset: 5 }
        ]
    );
    assert_eq!(r.high_watermark(), 5);
    // The leader's log ends at 3 (OFFSET_OUT_OF_RANGE for fetch offset 10).
    let (mut r, log, plan) = follower(8);
    let resp = FetchResponse {
        error: ErrorCode::OffsetOutOfRange,
        high_watermark: 3,
        log_start_offset: 0,
        log_end_offset: 3,
        diverging_epoch: None,
        has_records: false,
    };
    let acts = r.on_fetch_response(1, plan.fetch_id, resp, &log);
    assert_eq!(
        acts,
        vec![
            Action::TruncatingBelowHighWatermark {
                offset: 3,
                high_watermark: 8
            },
            Action::HighWatermark(3),
            Action::Truncate { offset: 3 }
        ]
    );
    // The leader knows no epoch as old as ours and starts at 6, below our HW of 8.
    let (mut r, log, plan) = follower(8);
    let resp = FetchResponse {
        error: ErrorCode::None,
        high_watermark: 6,
        log_start_offset: 6,
        log_end_offset: 7,
        diverging_epoch: Some(EpochEndOffset {
            epoch: 0,
            end_offset: 6,
        }),
        has_records: false,
    };
    let acts = r.on_fetch_response(1, plan.fetch_id, resp, &log);
    assert_eq!(
        acts,
        vec![
            Action::TruncatingBelowHighWatermark {
                offset: 6,
                high_watermark: 8
            },
            Action::HighWatermark(6),
            Action::TruncateFullyAndStartAt { offset: 6 }
        ]
    );
    // At or above the HW nothing is said: a clean election's truncation.
    let (mut r, log, plan) = follower(4);
    let mut resp = ok(5, false);
    resp.diverging_epoch = Some(EpochEndOffset {
        epoch: 1,
        end_offset: 5,
    });
    let acts = r.on_fetch_response(1, plan.fetch_id, resp, &log);
    assert_eq!(acts, vec![Action::Truncate { offset: 5 }]);
}

/// A follower that was caught up when it died (an idle partition: nothing written since) and
/// that the controller took out of the ISR (fenced) is not proposed back from its remembered
/// progress: only its own fetch can bring it back. Proposing it on every input made the
/// controller refuse it (INELIGIBLE_REPLICA) in a hot loop, each refusal keeping it counted
/// for the HW, so the HW never moved again (found by the coordinator kill -9 fault test).
#[test]
fn a_dead_follower_taken_out_of_the_isr_is_not_proposed_back() {
    let (mut r, mut log) = leader(1);
    r.fetch(100, follower_fetch(2, 10, 5), &log);
    r.fetch(100, follower_fetch(3, 10, 5), &log);
    assert_eq!(r.high_watermark(), 10);
    // Node 3 dies; the controller fences it and removes it from the ISR.
    let acts = r.apply_metadata(3_000, state(1, 5, 2, &[1, 2]), &log);
    assert!(alters(&acts).is_empty(), "{acts:?}");
    assert!(alters(&r.tick(3_100, &log)).is_empty());
    assert_eq!(r.maximal_isr(), vec![1, 2]);
    // Writes go on and commit with the ISR that is left.
    log.append(5, 3);
    log.sync();
    assert!(alters(&r.on_log_changed(3_200, &log)).is_empty());
    let (_, acts) = r.fetch(3_300, follower_fetch(2, 13, 5), &log);
    assert!(alters(&acts).is_empty(), "{acts:?}");
    assert_eq!(r.high_watermark(), 13);
}

/// SIGTERM of a broker that follows this leader: the controller's controlled shutdown takes it
/// out of the ISR, but it fetches once more before it exits, caught up. Proposed back, it was
/// refused (INELIGIBLE_REPLICA: shutting down) and, refused, kept counting for the HW until
/// a newer partition epoch, i.e. until the broker came back: acks=all stalled for as long as
/// it was down (found by scripts/bench/unavailability.py: the p99 produce stall after a
/// SIGTERM was the whole downtime). A fetch from a broker the leader's metadata shows fenced
/// or shutting down (Kafka's isReplicaIsrEligible) records progress but proposes nothing.
#[test]
fn a_follower_in_controlled_shutdown_is_not_proposed_back() {
    let (mut r, mut log) = leader(1);
    r.fetch(100, follower_fetch(2, 10, 5), &log);
    r.fetch(100, follower_fetch(3, 10, 5), &log);
    assert_eq!(r.high_watermark(), 10);
    // Node 3 asks for a controlled shutdown: the controller removes it from the ISR.
    r.apply_metadata(3_000, state(1, 5, 2, &[1, 2]), &log);
    // Its last fetch before the exit is caught up, but its broker is shutting down.
    let ineligible = FetchRequest {
        isr_eligible: false,
        ..follower_fetch(3, 10, 5)
    };
    let (_, acts) = r.fetch(3_100, ineligible, &log);
    assert!(alters(&acts).is_empty(), "{acts:?}");
    assert_eq!(r.maximal_isr(), vec![1, 2]);
    // Writes go on and commit with the two that are left while node 3 is away.
    log.append(5, 3);
    log.sync();
    r.on_log_changed(3_200, &log);
    r.fetch(3_300, follower_fetch(2, 13, 5), &log);
    assert_eq!(r.high_watermark(), 13);
    // Back (eligible) and caught up, it is proposed again.
    let (_, acts) = r.fetch(9_000, follower_fetch(3, 13, 5), &log);
    assert_eq!(alters(&acts)[0].new_isr, vec![1, 2, 3]);
}
