//! Reconciliation of one member toward the target assignment (Kafka's
//! `CurrentAssignmentBuilder`): the member first revokes what it must give up (staying at its
//! epoch, UNREVOKED_PARTITIONS), then moves to the target epoch with every target partition
//! that no other member still owns (UNRELEASED_PARTITIONS while some are still owned).
//!
//! *Invariant:* a partition is given to a member only when no member owns it, so a partition
//! never has two owners; a member's epoch only grows.

use super::group::Member;
use super::records::{Assignment, AssignmentEpochs, CurrentAssignment, MemberState};
use model::TopicId;

/// The partitions a member reports owning in its heartbeat (`None`: not reported).
pub type Owned<'a> = Option<&'a [(TopicId, Vec<i32>)]>;

/// The next current assignment of `member`, or None when it does not change.
pub fn reconcile(
    member: &Member,
    target_epoch: i32,
    target: &Assignment,
    owned: Owned<'_>,
    partition_epoch: &dyn Fn(&TopicId, i32) -> i32,
) -> Option<CurrentAssignment> {
    let next = match member.state {
        MemberState::Stable => {
            if member.epoch == target_epoch {
                return None;
            }
            next_assignment(
                member,
                member.epoch,
                target_epoch,
                target,
                owned,
                partition_epoch,
            )
        }
        MemberState::UnrevokedPartitions => {
            // The member must stop reporting the revoked partitions before it moves on.
            if owns_any(owned, &member.pending_revocation) {
                return None;
            }
            next_assignment(
                member,
                member.epoch,
                target_epoch,
                target,
                owned,
                partition_epoch,
            )
        }
        MemberState::UnreleasedPartitions => next_assignment(
            member,
            member.epoch,
            target_epoch,
            target,
            owned,
            partition_epoch,
        ),
        MemberState::Unknown => {
            // Written by a newer coordinator: start the member over from nothing.
            let mut empty = member.clone();
            empty.assigned.clear();
            empty.pending_revocation.clear();
            empty.epochs.clear();
            next_assignment(
                &empty,
                target_epoch,
                target_epoch,
                target,
                owned,
                partition_epoch,
            )
        }
    };
    (next != member.current()).then_some(next)
}

/// Kafka's `ownsRevokedPartitions`: unreported owned partitions count as still owned.
fn owns_any(owned: Owned<'_>, pending: &Assignment) -> bool {
    let Some(owned) = owned else {
        return true;
    };
    owned.iter().any(|(t, parts)| {
        pending
            .get(t)
            .is_some_and(|set| parts.iter().any(|p| set.contains(p)))
    })
}

fn next_assignment(
    member: &Member,
    member_epoch: i32,
    target_epoch: i32,
    target: &Assignment,
    owned: Owned<'_>,
    partition_epoch: &dyn Fn(&TopicId, i32) -> i32,
) -> CurrentAssignment {
    let mut assigned = Assignment::new();
    let mut revoke = Assignment::new();
    let mut pending_assignment = Assignment::new();
    let mut unreleased = false;
    let topics: std::collections::BTreeSet<&TopicId> =
        target.keys().chain(member.assigned.keys()).collect();
    for t in topics {
        let want = target.get(t);
        let have = member.assigned.get(t);
        for p in have.into_iter().flatten() {
            if want.is_some_and(|w| w.contains(p)) {
                assigned.entry(*t).or_default().insert(*p);
            } else {
                revoke.entry(*t).or_default().insert(*p);
            }
        }
        for p in want.into_iter().flatten() {
            if have.is_some_and(|h| h.contains(p)) {
                continue;
            }
            if partition_epoch(t, *p) == -1 {
                pending_assignment.entry(*t).or_default().insert(*p);
            } else {
                unreleased = true;
            }
        }
    }
    // Partitions kept keep the epoch they were assigned at (KIP-1251).
    let kept_epoch =
        |t: &TopicId, p: i32| member.epochs.get(&(*t, p)).copied().unwrap_or(member.epoch);
    if !revoke.is_empty() && owns_any(owned, &revoke) {
        let epochs = assigned
            .iter()
            .chain(revoke.iter())
            .flat_map(|(t, ps)| ps.iter().map(move |p| ((*t, *p), kept_epoch(t, *p))))
            .collect();
        return CurrentAssignment {
            member_epoch,
            previous_member_epoch: member.epoch_for_previous(member_epoch),
            state: MemberState::UnrevokedPartitions,
            assigned,
            pending_revocation: revoke,
            epochs,
        };
    }
    let mut epochs: AssignmentEpochs = assigned
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| ((*t, *p), kept_epoch(t, *p))))
        .collect();
    for (t, parts) in pending_assignment {
        for p in &parts {
            epochs.insert((t, *p), target_epoch);
        }
        assigned.entry(t).or_default().extend(parts);
    }
    CurrentAssignment {
        member_epoch: target_epoch,
        previous_member_epoch: member.epoch_for_previous(target_epoch),
        state: if unreleased {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        },
        assigned,
        pending_revocation: Assignment::new(),
        epochs,
    }
}

impl Member {
    /// Kafka's `updateMemberEpoch`: the previous epoch becomes the current one when the epoch
    /// changes, and stays otherwise.
    fn epoch_for_previous(&self, new_epoch: i32) -> i32 {
        if new_epoch != self.epoch {
            self.epoch
        } else {
            self.previous_epoch
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u8) -> TopicId {
        TopicId([n; 16])
    }

    fn a(parts: &[(u8, &[i32])]) -> Assignment {
        parts
            .iter()
            .map(|(tp, ps)| (t(*tp), ps.iter().copied().collect()))
            .collect()
    }

    fn member(
        epoch: i32,
        state: MemberState,
        assigned: Assignment,
        revoking: Assignment,
    ) -> Member {
        let mut m = Member::new("m");
        m.epoch = epoch;
        m.previous_epoch = epoch - 1;
        m.state = state;
        m.assigned = assigned;
        m.pending_revocation = revoking;
        m
    }

    #[test]
    fn stable_member_revokes_before_getting_new_partitions() {
        let m = member(5, MemberState::Stable, a(&[(1, &[0, 1, 2])]), a(&[]));
        let free = |_: &TopicId, _: i32| -1;
        let next = reconcile(&m, 6, &a(&[(1, &[0, 3])]), None, &free).unwrap();
        assert_eq!(next.state, MemberState::UnrevokedPartitions);
        assert_eq!(next.member_epoch, 5);
        assert_eq!(next.assigned, a(&[(1, &[0])]));
        assert_eq!(next.pending_revocation, a(&[(1, &[1, 2])]));
        // Still reporting a revoked partition: no progress.
        let mut revoking = m.clone();
        revoking.state = next.state;
        revoking.assigned = next.assigned.clone();
        revoking.pending_revocation = next.pending_revocation.clone();
        let owned = vec![(t(1), vec![0, 1])];
        assert_eq!(
            reconcile(&revoking, 6, &a(&[(1, &[0, 3])]), Some(&owned), &free),
            None
        );
        // Revoked: moves to epoch 6 with partition 3.
        let owned = vec![(t(1), vec![0])];
        let done = reconcile(&revoking, 6, &a(&[(1, &[0, 3])]), Some(&owned), &free).unwrap();
        assert_eq!(done.state, MemberState::Stable);
        assert_eq!((done.member_epoch, done.previous_member_epoch), (6, 5));
        assert_eq!(done.assigned, a(&[(1, &[0, 3])]));
    }

    #[test]
    fn partitions_owned_elsewhere_are_unreleased() {
        let m = member(5, MemberState::Stable, a(&[]), a(&[]));
        let owned_elsewhere = |_: &TopicId, p: i32| if p == 1 { 4 } else { -1 };
        let next = reconcile(&m, 6, &a(&[(1, &[0, 1])]), None, &owned_elsewhere).unwrap();
        assert_eq!(next.state, MemberState::UnreleasedPartitions);
        assert_eq!(next.member_epoch, 6);
        assert_eq!(next.assigned, a(&[(1, &[0])]));
    }

    #[test]
    fn reconciled_member_is_unchanged() {
        let m = member(6, MemberState::Stable, a(&[(1, &[0])]), a(&[]));
        assert_eq!(reconcile(&m, 6, &a(&[(1, &[0])]), None, &|_, _| -1), None);
    }
}
