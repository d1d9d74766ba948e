//! Replica placement: where the replicas of new partitions go.
//!
//! Leaders and replicas are spread evenly over the usable brokers, counting what they already
//! host; replicas of one partition go to distinct racks first when brokers name racks (as
//! Kafka's rack-aware placement does). Deterministic: the same image and request always give the
//! same placement, so the simulation can replay it.

use model::NodeId;
use std::collections::BTreeMap;

/// A broker new replicas may be placed on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub id: NodeId,
    pub rack: Option<String>,
}

/// How many leaders and replicas each broker hosts.
#[derive(Clone, Debug, Default)]
pub struct Load {
    pub leaders: BTreeMap<NodeId, usize>,
    pub replicas: BTreeMap<NodeId, usize>,
}

impl Load {
    fn add(&mut self, replicas: &[NodeId]) {
        if let Some(l) = replicas.first() {
            *self.leaders.entry(*l).or_default() += 1;
        }
        for r in replicas {
            *self.replicas.entry(*r).or_default() += 1;
        }
    }

    fn leaders(&self, b: NodeId) -> usize {
        self.leaders.get(&b).copied().unwrap_or(0)
    }

    fn replicas(&self, b: NodeId) -> usize {
        self.replicas.get(&b).copied().unwrap_or(0)
    }
}

/// Places `count` partitions of `rf` replicas each; the first replica of each is its preferred
/// leader. `load` is updated with the placement. Fails (with Kafka's message) when there are
/// fewer usable brokers than `rf`.
pub fn place(
    candidates: &[Candidate],
    count: usize,
    rf: usize,
    load: &mut Load,
) -> Result<Vec<Vec<NodeId>>, String> {
    if rf > candidates.len() || rf == 0 {
        return Err(format!(
            "Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be reached because only {} broker(s) are registered.",
            candidates.len()
        ));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let mut chosen: Vec<&Candidate> = Vec::with_capacity(rf);
        // The leader: the broker leading the fewest partitions, then hosting the fewest.
        let leader = candidates
            .iter()
            .min_by_key(|c| (load.leaders(c.id), load.replicas(c.id), c.id))
            .ok_or("no candidates")?;
        chosen.push(leader);
        while chosen.len() < rf {
            let next = candidates
                .iter()
                .filter(|c| chosen.iter().all(|x| x.id != c.id))
                .min_by_key(|c| {
                    let rack_used = c.rack.is_some()
                        && chosen.iter().any(|x| x.rack.is_some() && x.rack == c.rack);
                    (rack_used, load.replicas(c.id), c.id)
                })
                .ok_or("no candidates")?;
            chosen.push(next);
        }
        let replicas: Vec<NodeId> = chosen.iter().map(|c| c.id).collect();
        load.add(&replicas);
        out.push(replicas);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn brokers(racks: &[Option<&str>]) -> Vec<Candidate> {
        racks
            .iter()
            .enumerate()
            .map(|(i, r)| Candidate {
                id: i as i32 + 1,
                rack: r.map(String::from),
            })
            .collect()
    }

    #[test]
    fn leaders_and_replicas_spread_evenly() {
        let b = brokers(&[None, None, None]);
        let mut load = Load::default();
        let placed = place(&b, 6, 3, &mut load).unwrap();
        for p in &placed {
            let mut s = p.clone();
            s.sort();
            assert_eq!(s, vec![1, 2, 3]);
        }
        assert!(load.leaders.values().all(|&n| n == 2), "{load:?}");
        // A second topic keeps the spread.
        place(&b, 3, 1, &mut load).unwrap();
        assert!(load.leaders.values().all(|&n| n == 3), "{load:?}");
        assert!(load.replicas.values().all(|&n| n == 7), "{load:?}");
    }

    #[test]
    fn racks_are_spread_first() {
        let b = brokers(&[Some("a"), Some("a"), Some("b"), Some("b")]);
        let mut load = Load::default();
        for p in place(&b, 8, 2, &mut load).unwrap() {
            let racks: Vec<_> = p
                .iter()
                .map(|id| b[*id as usize - 1].rack.clone())
                .collect();
            assert_ne!(racks[0], racks[1], "{p:?}");
        }
    }

    #[test]
    fn too_few_brokers_is_refused() {
        let b = brokers(&[None]);
        let e = place(&b, 1, 3, &mut Load::default()).unwrap_err();
        assert!(e.contains("only 1 broker(s)"), "{e}");
    }
}
