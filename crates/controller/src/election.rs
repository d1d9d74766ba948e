//! Partition leadership changes as Kafka's `PartitionChangeBuilder` decides them: a target
//! ISR in; the KIP-966 eligible leader replicas (ELR) and the leader out.
//!
//! Kafka 4.4 enables ELR on new clusters (`eligible.leader.replicas.version=1` comes with
//! metadata version 4.1-IV0), and so does Moldau, always:
//! - while the target ISR has at least `min.insync.replicas` members the ELR is empty (the
//!   setting capped at the replica count, as the replicas apply it for acks=all and the HW:
//!   Kafka's `getTopicEffectiveMinIsr` and `Partition.effectiveMinIsr`);
//! - below it, every member of the old ISR or ELR that is not in the target ISR is in the ELR
//!   (the HW cannot advance on an ISR below `min.insync.replicas`, so they hold everything
//!   committed);
//! - the ISR may become empty (the last member goes to the ELR, the partition has no leader);
//! - the leader stays while it is still valid; else the first valid replica in replica order
//!   (PREFERRED: the first replica first) from the ISR, or from the ELR when the ISR is empty
//!   (then the ISR becomes just it); else, where unclean election is allowed, the first
//!   acceptable replica at all (the ISR becomes just it, the ELR empties).
//!
//! One deliberate difference: Kafka removes a broker that restarts without a clean-shutdown
//! proof from every ISR *and ELR* (its unflushed data may be gone). Moldau counts replication
//! progress only once it is on disk, so a replica that crashes still holds everything
//! committed: a restart is handled as a fence (leadership moves, the ISR shrinks into the
//! ELR), never as a loss, and an ELR member that crashed may lead again.

use metadata::PartitionRegistration;
use model::NodeId;

/// Kafka's election types (`ElectLeaders`' PREFERRED = 0 and UNCLEAN = 1; ONLINE is the
/// controller's own, to keep a partition online).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Election {
    /// The first replica if it may lead; else like `Online`.
    Preferred,
    /// Keep the partition online from the ISR (or the ELR when the ISR is empty).
    Online,
    /// Like `Online`, then any acceptable replica (data loss possible).
    Unclean,
}

/// The outcome of a change: the next registration (epochs not bumped yet) and whether an
/// unclean election chose its leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub next: PartitionRegistration,
    pub unclean: bool,
}

/// Applies `target_isr` to `prev`, recomputes the ELR for `min_isr` (the topic's
/// `min.insync.replicas`, capped here at the partition's replica count), and elects by
/// `election` among the replicas `acceptable` says may lead (registered, unfenced, not
/// shutting down).
pub fn change(
    prev: &PartitionRegistration,
    target_isr: Vec<NodeId>,
    min_isr: usize,
    acceptable: impl Fn(NodeId) -> bool,
    election: Election,
) -> Change {
    // A reassignment completes first (Kafka's `completeReassignmentIfNeeded`): the removed
    // replicas leave the replica set, the ISR and the ELR, so a removed leader is replaced
    // by the election below.
    let completed;
    let (prev, target_isr) = match crate::reassignment::completion(prev, &target_isr) {
        Some((replicas, isr)) => {
            let mut p = prev.clone();
            p.isr.retain(|r| replicas.contains(r));
            p.elr.retain(|r| replicas.contains(r));
            p.replicas = replicas;
            p.adding_replicas.clear();
            p.removing_replicas.clear();
            completed = p;
            (&completed, isr)
        }
        None => (prev, target_isr),
    };
    // The replicas apply the setting capped at the replica count (Kafka's effectiveMinIsr on
    // both sides); the registration's own replicas, after a completed reassignment.
    let min_isr = model::config::effective_min_isr(min_isr, prev.replicas.len());
    let mut elr: Vec<NodeId> = if target_isr.len() >= min_isr {
        Vec::new()
    } else {
        prev.replicas
            .iter()
            .copied()
            .filter(|r| (prev.isr.contains(r) || prev.elr.contains(r)) && !target_isr.contains(r))
            .collect()
    };
    let valid = |r: NodeId| {
        (target_isr.contains(&r) || (target_isr.is_empty() && elr.contains(&r))) && acceptable(r)
    };
    let current = (prev.leader >= 0 && valid(prev.leader)).then_some(prev.leader);
    let first_valid = |skip: usize| prev.replicas.iter().copied().skip(skip).find(|&r| valid(r));
    let leader = match election {
        Election::Preferred => prev
            .replicas
            .first()
            .copied()
            .filter(|&r| valid(r))
            .or(current)
            .or_else(|| first_valid(1)),
        Election::Online | Election::Unclean => current.or_else(|| first_valid(0)),
    };
    let mut next = prev.clone();
    let mut isr = target_isr;
    let mut unclean = false;
    match leader {
        Some(l) => {
            if l != prev.leader && elr.contains(&l) {
                isr = vec![l];
                elr.retain(|&r| r != l);
            }
            next.leader = l;
        }
        None => {
            next.leader = -1;
            if election == Election::Unclean {
                if let Some(r) = prev.replicas.iter().copied().find(|&r| acceptable(r)) {
                    next.leader = r;
                    isr = vec![r];
                    elr.clear();
                    unclean = true;
                }
            }
        }
    }
    next.isr = isr;
    next.elr = elr;
    Change { next, unclean }
}

/// Whether the change from `prev` to `next` bumps the leader epoch (Kafka's
/// `PartitionChangeBuilder`): a new leader, or a replica leaving the replica set (a completed
/// or cancelled reassignment, `triggerLeaderEpochBumpForReplicaReassignmentIfNeeded`), so the
/// removed replica's fetches still in flight are fenced (FENCED_LEADER_EPOCH). Without it, a
/// replica removed (its log deleted) and added back could have the leader take such a fetch
/// for its progress, join the ISR with an empty log and be elected: the replication
/// simulation found that losing acknowledged records.
pub fn bumps_leader_epoch(prev: &PartitionRegistration, next: &PartitionRegistration) -> bool {
    next.leader != prev.leader || prev.replicas.iter().any(|r| !next.replicas.contains(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(replicas: &[i32], isr: &[i32], elr: &[i32], leader: i32) -> PartitionRegistration {
        let mut p = PartitionRegistration::new(replicas.to_vec(), leader);
        p.isr = isr.to_vec();
        p.elr = elr.to_vec();
        p
    }

    #[test]
    fn the_isr_shrinks_into_the_elr_below_min_isr_and_empties() {
        let all = |_| true;
        let p = reg(&[1, 2, 3], &[1, 2, 3], &[], 1);
        // At min ISR 2: [2,3] keeps an empty ELR; the leader moves to 2.
        let c = change(&p, vec![2, 3], 2, |r| r != 1, Election::Online);
        assert_eq!(
            (c.next.leader, &c.next.isr[..], &c.next.elr[..]),
            (2, &[2, 3][..], &[][..])
        );
        // [3] is below 2: 2 joins the ELR.
        let c = change(&c.next, vec![3], 2, |r| r == 3, Election::Online);
        assert_eq!(
            (c.next.leader, &c.next.isr[..], &c.next.elr[..]),
            (3, &[3][..], &[2][..])
        );
        // The last member leaves: empty ISR, no leader, both in the ELR.
        let c = change(&c.next, vec![], 2, |_| false, Election::Online);
        assert_eq!(
            (c.next.leader, &c.next.isr[..], &c.next.elr[..]),
            (-1, &[][..], &[2, 3][..])
        );
        assert!(c.next.check().is_ok());
        // 2 is back: it leads from the ELR, the ISR is just it, 3 stays eligible.
        let c = change(&c.next, vec![], 2, |r| r == 2, Election::Online);
        assert_eq!(
            (c.next.leader, &c.next.isr[..], &c.next.elr[..]),
            (2, &[2][..], &[3][..])
        );
        assert!(!c.unclean);
        // 1 catches up: the ISR reaches min ISR, the ELR empties.
        let c = change(&c.next, vec![1, 2], 2, all, Election::Online);
        assert_eq!(
            (c.next.leader, &c.next.isr[..], &c.next.elr[..]),
            (2, &[1, 2][..], &[][..])
        );
    }

    #[test]
    fn min_isr_one_keeps_the_last_member_eligible_and_no_one_else() {
        let p = reg(&[1, 2, 3], &[3], &[], 3);
        let c = change(&p, vec![], 1, |_| false, Election::Online);
        assert_eq!(
            (c.next.leader, &c.next.isr[..], &c.next.elr[..]),
            (-1, &[][..], &[3][..])
        );
        // 1 and 2 are back but neither may lead (they left while the ISR was enough)...
        let c2 = change(&c.next, vec![], 1, |r| r != 3, Election::Online);
        assert_eq!(c2.next.leader, -1);
        // ...unless unclean election is allowed.
        let c3 = change(&c.next, vec![], 1, |r| r != 3, Election::Unclean);
        assert_eq!(
            (c3.next.leader, &c3.next.isr[..], &c3.next.elr[..]),
            (1, &[1][..], &[][..])
        );
        assert!(c3.unclean);
        // 3 is back: it leads.
        let c4 = change(&c.next, vec![], 1, |r| r == 3, Election::Online);
        assert_eq!((c4.next.leader, &c4.next.isr[..]), (3, &[3][..]));
    }

    #[test]
    fn preferred_election_picks_the_first_replica_when_it_may_lead() {
        let p = reg(&[1, 2, 3], &[1, 2, 3], &[], 2);
        assert_eq!(
            change(&p, p.isr.clone(), 1, |_| true, Election::Preferred)
                .next
                .leader,
            1
        );
        assert_eq!(
            change(&p, p.isr.clone(), 1, |_| true, Election::Online)
                .next
                .leader,
            2
        );
        // The preferred replica is fenced: the current leader stays.
        assert_eq!(
            change(&p, p.isr.clone(), 1, |r| r != 1, Election::Preferred)
                .next
                .leader,
            2
        );
        // Out of the ISR: not preferred either.
        let p = reg(&[1, 2, 3], &[2, 3], &[], 3);
        assert_eq!(
            change(&p, p.isr.clone(), 1, |_| true, Election::Preferred)
                .next
                .leader,
            3
        );
    }

    /// The ELR follows the minimum the replicas apply (`min.insync.replicas` capped at the
    /// replica count, below which their HW stands still): a target ISR at it empties the ELR
    /// (also the full ISR where the setting is above the replica count), and a member leaving
    /// an ISR that falls below it stays eligible. Every valid registration of one to three
    /// replicas, every target ISR, settings 1 to 5.
    #[test]
    fn the_elr_follows_the_replicas_effective_min_isr() {
        let subsets = |of: &[i32]| -> Vec<Vec<i32>> {
            (0..1u32 << of.len())
                .map(|m| {
                    of.iter()
                        .enumerate()
                        .filter(|(i, _)| m & (1 << i) != 0)
                        .map(|(_, &r)| r)
                        .collect()
                })
                .collect()
        };
        let mut checked = 0;
        for replicas in [vec![1], vec![1, 2], vec![1, 2, 3]] {
            for isr in subsets(&replicas) {
                let rest: Vec<i32> = replicas
                    .iter()
                    .copied()
                    .filter(|r| !isr.contains(r))
                    .collect();
                for elr in subsets(&rest) {
                    if isr.is_empty() && elr.is_empty() {
                        continue;
                    }
                    let leader = isr.first().copied().unwrap_or(-1);
                    let p = reg(&replicas, &isr, &elr, leader);
                    for target in subsets(&replicas) {
                        for min_isr in 1..=5 {
                            let c = change(&p, target.clone(), min_isr, |_| true, Election::Online);
                            let n = &c.next;
                            let effective =
                                model::config::effective_min_isr(min_isr, n.replicas.len());
                            if target.len() >= effective {
                                assert!(n.elr.is_empty(), "{p:?} -> {target:?}, {min_isr}: {n:?}");
                            } else {
                                for r in isr.iter().filter(|r| !target.contains(r)) {
                                    assert!(
                                        n.elr.contains(r) || n.leader == *r,
                                        "{p:?} -> {target:?}, {min_isr}: {n:?}"
                                    );
                                }
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 500, "{checked}");
    }

    #[test]
    fn a_setting_above_the_replica_count_is_capped_at_it() {
        // Two replicas, min.insync.replicas=3: the full ISR is enough (as acks=all is on the
        // replicas), one below it puts the leaving member in the ELR.
        let p = reg(&[1, 2], &[1, 2], &[], 1);
        let c = change(&p, vec![1], 3, |_| true, Election::Online);
        assert_eq!((&c.next.isr[..], &c.next.elr[..]), (&[1][..], &[2][..]));
        let c = change(&c.next, vec![1, 2], 3, |_| true, Election::Online);
        assert_eq!((&c.next.isr[..], &c.next.elr[..]), (&[1, 2][..], &[][..]));
    }
}
