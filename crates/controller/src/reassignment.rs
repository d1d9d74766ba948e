//! Partition reassignment (KIP-455) as Kafka's KRaft controller decides it
//! (`PartitionReassignmentReplicas`, `PartitionReassignmentRevert`): pure functions on a
//! partition registration, used by `Controller` and `election::change` (and by the
//! replication crate's simulation, whose model controller reassigns through `alter`).
//!
//! - **Start** (AlterPartitionReassignments with a replica list): the replica set becomes the
//!   target followed by the current replicas the target leaves out (`removing`); target
//!   replicas not in the current set are `adding`. The ISR and the leader stay: adding
//!   replicas become followers and copy the log from the leader.
//! - **Complete** (whenever a change is built, typically the leader's AlterPartition that
//!   brings the last adding replica into the ISR): once every adding replica is in the ISR
//!   and the ISR without the removing replicas is not empty, the replica set becomes the
//!   target, the removing replicas leave the ISR (and the ELR) and `adding`/`removing` empty.
//!   A leader that was removed is replaced by the election that follows (`election::change`).
//!   A reassignment that adds nothing completes at once.
//! - **Cancel** (a null replica list): the adding replicas leave the replica set and the ISR;
//!   if nothing of the ISR would remain, only an unclean election could revert it.

use metadata::PartitionRegistration;
use model::NodeId;

/// The replica set, adding and removing replicas of a reassignment of a partition with
/// replica set `current` (which during an ongoing reassignment holds both the old and the new
/// replicas) and adding replicas `adding` to `target`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reassigning {
    pub replicas: Vec<NodeId>,
    pub adding: Vec<NodeId>,
    pub removing: Vec<NodeId>,
}

/// Kafka's `PartitionReassignmentReplicas(current, target)`: removing = current replicas the
/// target leaves out; adding = target replicas that were not replicas before the reassignment
/// in progress, if any (a replica still being added stays "adding", as Kafka keeps the
/// partition's adding replicas when a new reassignment adds none); the replica set = the
/// target, then the removing replicas.
pub fn start(current: &[NodeId], adding: &[NodeId], target: &[NodeId]) -> Reassigning {
    let removing: Vec<NodeId> = current
        .iter()
        .copied()
        .filter(|r| !target.contains(r))
        .collect();
    let adding: Vec<NodeId> = target
        .iter()
        .copied()
        .filter(|r| !current.contains(r) || adding.contains(r))
        .collect();
    let mut replicas = target.to_vec();
    replicas.extend(&removing);
    Reassigning {
        replicas,
        adding,
        removing,
    }
}

/// Whether a reassignment of `p` is in progress.
pub fn in_progress(p: &PartitionRegistration) -> bool {
    !p.adding_replicas.is_empty() || !p.removing_replicas.is_empty()
}

/// Kafka's `maybeCompleteReassignment`: with `target_isr` as the next ISR, whether `p`'s
/// reassignment completes, and if so the final replica set and ISR.
pub fn completion(
    p: &PartitionRegistration,
    target_isr: &[NodeId],
) -> Option<(Vec<NodeId>, Vec<NodeId>)> {
    if !in_progress(p) {
        return None;
    }
    let keep = |r: &NodeId| !p.removing_replicas.contains(r);
    let isr: Vec<NodeId> = target_isr.iter().copied().filter(keep).collect();
    let replicas: Vec<NodeId> = p.replicas.iter().copied().filter(keep).collect();
    if isr.is_empty() || replicas.is_empty() {
        return None;
    }
    if !p.adding_replicas.iter().all(|r| isr.contains(r)) {
        return None;
    }
    Some((replicas, isr))
}

/// An AlterPartitionReassignments entry applied to `prev`, before the election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Altered {
    /// The registration to elect on (epochs not bumped).
    pub working: PartitionRegistration,
    /// A cancel that leaves no ISR member: only an unclean election can revert it (the
    /// caller refuses it unless the topic allows unclean elections).
    pub unclean: bool,
}

/// Kafka's `ReplicationControlManager.alterPartitionReassignment` up to the election, shared
/// by `Controller` and the replication simulation: `Some(target)` starts (or replaces) a
/// reassignment, leader and ISR staying (one that adds nothing completes in the election
/// that follows, `election::change`); `None` cancels the one in progress: the adding replicas
/// leave the replica set, the ISR and the ELR. None when there is nothing to cancel. The
/// target is validated by the caller (registered brokers, no duplicates, not empty).
pub fn alter(prev: &PartitionRegistration, target: Option<&[NodeId]>) -> Option<Altered> {
    let mut working = prev.clone();
    let unclean = match target {
        None => {
            if !in_progress(prev) {
                return None;
            }
            let (replicas, isr, unclean) = revert(prev);
            working
                .elr
                .retain(|r| replicas.contains(r) && !isr.contains(r));
            working.replicas = replicas;
            working.isr = isr;
            working.adding_replicas.clear();
            working.removing_replicas.clear();
            unclean
        }
        Some(target) => {
            let r = start(&prev.replicas, &prev.adding_replicas, target);
            working.replicas = r.replicas;
            working.adding_replicas = r.adding;
            working.removing_replicas = r.removing;
            false
        }
    };
    Some(Altered { working, unclean })
}

/// Kafka's `PartitionReassignmentRevert`: the replica set and ISR without the adding
/// replicas, and whether the revert needs an unclean election (no ISR member would remain:
/// the ISR then becomes the first remaining replica, as Kafka does).
pub fn revert(p: &PartitionRegistration) -> (Vec<NodeId>, Vec<NodeId>, bool) {
    let keep = |r: &NodeId| !p.adding_replicas.contains(r);
    let replicas: Vec<NodeId> = p.replicas.iter().copied().filter(keep).collect();
    let mut isr: Vec<NodeId> = p.isr.iter().copied().filter(keep).collect();
    let unclean = isr.is_empty();
    if unclean {
        isr.extend(replicas.first());
    }
    (replicas, isr, unclean)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(
        replicas: &[i32],
        isr: &[i32],
        adding: &[i32],
        removing: &[i32],
    ) -> PartitionRegistration {
        let mut p = PartitionRegistration::new(replicas.to_vec(), isr[0]);
        p.isr = isr.to_vec();
        p.adding_replicas = adding.to_vec();
        p.removing_replicas = removing.to_vec();
        p
    }

    #[test]
    fn the_replica_set_is_the_target_then_the_removed() {
        let r = start(&[1, 2, 3], &[], &[3, 4, 5]);
        assert_eq!(r.replicas, [3, 4, 5, 1, 2]);
        assert_eq!(r.adding, [4, 5]);
        assert_eq!(r.removing, [1, 2]);
        // Only a new order: nothing added or removed.
        let r = start(&[1, 2, 3], &[], &[3, 2, 1]);
        assert_eq!(
            (r.replicas, r.adding, r.removing),
            (vec![3, 2, 1], vec![], vec![])
        );
        // The same target again while it is in progress: nothing changes.
        let r = start(&[4, 2, 3, 1], &[4], &[4, 2, 3]);
        assert_eq!(
            (r.replicas, r.adding, r.removing),
            (vec![4, 2, 3, 1], vec![4], vec![1])
        );
        // Back to the old replicas: the one being added is removed, nothing is added.
        let r = start(&[4, 2, 3, 1], &[4], &[1, 2, 3]);
        assert_eq!((r.adding, r.removing), (vec![], vec![4]));
    }

    #[test]
    fn completes_once_every_adding_replica_is_in_the_isr() {
        let p = reg(&[2, 3, 4, 1], &[1, 2, 3], &[4], &[1]);
        assert_eq!(completion(&p, &[1, 2, 3]), None);
        assert_eq!(
            completion(&p, &[1, 2, 3, 4]),
            Some((vec![2, 3, 4], vec![2, 3, 4]))
        );
        // Only removals: completes at once; never to an empty ISR.
        let p = reg(&[1, 2, 3], &[3], &[], &[3]);
        assert_eq!(completion(&p, &[3]), None);
        let p = reg(&[1, 2, 3], &[1, 3], &[], &[3]);
        assert_eq!(completion(&p, &[1, 3]), Some((vec![1, 2], vec![1])));
        // Nothing in progress.
        assert_eq!(completion(&reg(&[1, 2], &[1, 2], &[], &[]), &[1, 2]), None);
    }

    #[test]
    fn cancel_drops_the_adding_replicas_and_needs_unclean_without_an_old_isr_member() {
        let p = reg(&[2, 3, 4, 1], &[1, 2, 4], &[4], &[1]);
        assert_eq!(revert(&p), (vec![2, 3, 1], vec![1, 2], false));
        let p = reg(&[4, 5, 1], &[4, 5], &[4, 5], &[1]);
        assert_eq!(revert(&p), (vec![1], vec![1], true));
    }
}
