//! The server-side assignors of consumer groups, `uniform` and `range` (Kafka's names), as
//! pure functions of the members (subscriptions, racks, current target) and the topics.
//!
//! - `uniform` (Kafka's default): balanced (members' partition counts differ by at most one
//!   when all subscribe to the same topics; as balanced as the subscriptions allow
//!   otherwise) and sticky: a member keeps every partition of its current target it can keep
//!   within its share, so a join or leave moves only the partitions it must. When members
//!   send a rack id and brokers have `broker.rack` (same subscriptions), rack locality comes
//!   before stickiness: a member keeps first what lies in its rack, partitions go to a member
//!   with room in one of their replicas' racks, and only then back to their holder; in mixed
//!   subscriptions racks only break ties. Kafka 4.4's server-side assignors ignore racks;
//!   this one never trades balance for them.
//! - `range`: Kafka's server-side range assignor: per topic, subscribers ordered by instance
//!   id (static members first) then member id each get a contiguous range; co-partitioned
//!   topics get the same partition numbers.
//!
//! Work is linear in partitions plus members for the usual case (everyone subscribes to the
//! same topics); the balancing pass of mixed subscriptions is bounded.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use model::TopicId;

use super::records::Assignment;

/// One member as the assignor sees it.
#[derive(Clone, Debug)]
pub struct MemberSpec<'a> {
    pub id: &'a str,
    pub instance_id: Option<&'a str>,
    pub rack: Option<&'a str>,
    /// The subscribed topics that exist, as ids.
    pub topics: BTreeSet<TopicId>,
    /// The member's current target assignment (for stickiness).
    pub current: Option<&'a Assignment>,
}

/// One topic as the assignor sees it.
#[derive(Clone, Debug)]
pub struct TopicSpec<'a> {
    pub partitions: i32,
    /// Racks of each partition's replicas (empty when unknown).
    pub racks: &'a [Vec<String>],
}

/// Why an assignment could not be computed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AssignorError {
    #[error("unknown assignor {0}")]
    Unknown(String),
}

/// The assignor names Moldau implements.
pub const ASSIGNORS: &[&str] = &["uniform", "range"];

/// Runs the assignor `name`: every member gets an entry (possibly empty).
pub fn assign(
    name: &str,
    members: &[MemberSpec<'_>],
    topics: &BTreeMap<TopicId, TopicSpec<'_>>,
) -> Result<BTreeMap<String, Assignment>, AssignorError> {
    match name {
        "uniform" => Ok(uniform(members, topics)),
        "range" => Ok(range(members, topics)),
        other => Err(AssignorError::Unknown(other.to_string())),
    }
}

fn partitions_of(topics: &BTreeMap<TopicId, TopicSpec<'_>>, t: &TopicId) -> i32 {
    topics.get(t).map_or(0, |s| s.partitions.max(0))
}

// ---- range ----------------------------------------------------------------------------------

fn range(
    members: &[MemberSpec<'_>],
    topics: &BTreeMap<TopicId, TopicSpec<'_>>,
) -> BTreeMap<String, Assignment> {
    let mut order: Vec<&MemberSpec<'_>> = members.iter().collect();
    order.sort_by(|a, b| match (a.instance_id, b.instance_id) {
        (Some(x), Some(y)) => x.cmp(y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.id.cmp(b.id),
    });
    let mut out: BTreeMap<String, Assignment> = members
        .iter()
        .map(|m| (m.id.to_string(), Assignment::new()))
        .collect();
    let mut subscribers: BTreeMap<TopicId, Vec<&str>> = BTreeMap::new();
    for m in &order {
        for t in &m.topics {
            subscribers.entry(*t).or_default().push(m.id);
        }
    }
    for (t, subs) in subscribers {
        let n = partitions_of(topics, &t);
        let k = subs.len() as i32;
        let (quota, mut extra) = (n / k, n % k);
        let mut next = 0;
        for m in subs {
            let take = quota + i32::from(extra > 0);
            extra = (extra - 1).max(0);
            if take > 0 {
                out.entry(m.to_string())
                    .or_default()
                    .insert(t, (next..next + take).collect());
            }
            next += take;
        }
    }
    out
}

// ---- uniform --------------------------------------------------------------------------------

fn uniform(
    members: &[MemberSpec<'_>],
    topics: &BTreeMap<TopicId, TopicSpec<'_>>,
) -> BTreeMap<String, Assignment> {
    if members.is_empty() {
        return BTreeMap::new();
    }
    let homogeneous = members.iter().all(|m| m.topics == members[0].topics);
    let mut b = Builder::new(members, topics);
    if homogeneous {
        b.homogeneous();
    } else {
        b.heterogeneous();
    }
    b.finish()
}

/// Working state of the uniform assignor: members by index, partitions by (topic, index).
struct Builder<'a, 'b> {
    members: &'b [MemberSpec<'a>],
    topics: &'b BTreeMap<TopicId, TopicSpec<'a>>,
    /// Each member's partitions.
    owned: Vec<Vec<(TopicId, i32)>>,
    /// Which member holds a partition.
    owner: HashMap<(TopicId, i32), usize>,
    /// Partitions nobody holds yet, in topic and partition order.
    unassigned: Vec<(TopicId, i32)>,
}

impl<'a, 'b> Builder<'a, 'b> {
    fn new(members: &'b [MemberSpec<'a>], topics: &'b BTreeMap<TopicId, TopicSpec<'a>>) -> Self {
        let total: usize = members
            .iter()
            .flat_map(|m| m.topics.iter())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(|t| partitions_of(topics, t) as usize)
            .sum();
        Builder {
            members,
            topics,
            owned: vec![Vec::new(); members.len()],
            owner: HashMap::with_capacity(total),
            unassigned: Vec::new(),
        }
    }

    /// Each member's still-valid current partitions (subscribed, existing, not claimed by an
    /// earlier member), in partition order.
    fn valid_current(&self, i: usize) -> Vec<(TopicId, i32)> {
        let m = &self.members[i];
        let mut v = Vec::new();
        if let Some(cur) = m.current {
            for (t, parts) in cur {
                if !m.topics.contains(t) {
                    continue;
                }
                let n = partitions_of(self.topics, t);
                v.extend(
                    parts
                        .iter()
                        .filter(|p| **p >= 0 && **p < n)
                        .map(|p| (*t, *p)),
                );
            }
        }
        v
    }

    fn give(&mut self, i: usize, tp: (TopicId, i32)) {
        self.owner.insert(tp, i);
        self.owned[i].push(tp);
    }

    fn collect_unassigned(&mut self, topics: &BTreeSet<TopicId>) {
        for t in topics {
            for p in 0..partitions_of(self.topics, t) {
                if !self.owner.contains_key(&(*t, p)) {
                    self.unassigned.push((*t, p));
                }
            }
        }
    }

    fn rack_match(&self, i: usize, tp: &(TopicId, i32)) -> bool {
        let Some(rack) = self.members[i].rack else {
            return false;
        };
        self.topics
            .get(&tp.0)
            .and_then(|s| usize::try_from(tp.1).ok().and_then(|p| s.racks.get(p)))
            .is_some_and(|racks| racks.iter().any(|r| r == rack))
    }

    /// Whether a member should keep a partition on rack grounds: it is in one of the
    /// partition's replica racks, or either side has no rack to compare.
    fn rack_local_or_unknown(&self, i: usize, tp: &(TopicId, i32)) -> bool {
        let unknown = self.members[i].rack.is_none()
            || self
                .topics
                .get(&tp.0)
                .and_then(|s| usize::try_from(tp.1).ok().and_then(|p| s.racks.get(p)))
                .is_none_or(|r| r.is_empty());
        unknown || self.rack_match(i, tp)
    }

    fn homogeneous(&mut self) {
        let topics = self.members[0].topics.clone();
        let total: usize = topics
            .iter()
            .map(|t| partitions_of(self.topics, t) as usize)
            .sum();
        let n = self.members.len();
        let (min_quota, extra) = (total / n, total % n);
        // Members holding the most get the extra slots: they lose the least.
        let current: Vec<Vec<(TopicId, i32)>> = (0..n).map(|i| self.valid_current(i)).collect();
        let mut by_size: Vec<usize> = (0..n).collect();
        by_size.sort_by(|a, b| current[*b].len().cmp(&current[*a].len()).then(a.cmp(b)));
        let mut quota = vec![min_quota; n];
        for i in by_size.iter().take(extra) {
            quota[*i] += 1;
        }
        let any_racks = self.members.iter().any(|m| m.rack.is_some());
        // With racks, a member first keeps only what is local to it (or has no rack to
        // match); what it held elsewhere goes back to it below only if no member in the
        // partition's rack has room. Without racks every current partition is kept first.
        let mut elsewhere: Vec<((TopicId, i32), usize)> = Vec::new();
        for (i, cur) in current.into_iter().enumerate() {
            for tp in cur {
                if self.owned[i].len() >= quota[i] {
                    break;
                }
                if self.owner.contains_key(&tp) {
                    continue;
                }
                if any_racks && !self.rack_local_or_unknown(i, &tp) {
                    elsewhere.push((tp, i));
                } else {
                    self.give(i, tp);
                }
            }
        }
        let previous: HashMap<(TopicId, i32), usize> = elsewhere.into_iter().collect();
        self.collect_unassigned(&topics);
        let unassigned = std::mem::take(&mut self.unassigned);
        let room = |b: &Builder, i: usize| quota[i] > b.owned[i].len();
        let mut left = Vec::with_capacity(unassigned.len());
        if any_racks {
            // First pass: a partition goes to a member with room in one of its racks.
            let mut by_rack: HashMap<&str, Vec<usize>> = HashMap::new();
            for (i, m) in self.members.iter().enumerate() {
                if let Some(r) = m.rack {
                    by_rack.entry(r).or_default().push(i);
                }
            }
            let mut cursor: HashMap<&str, usize> = HashMap::new();
            let all_topics = self.topics;
            'partition: for tp in unassigned {
                let racks = all_topics
                    .get(&tp.0)
                    .and_then(|s| usize::try_from(tp.1).ok().and_then(|p| s.racks.get(p)));
                for rack in racks.into_iter().flatten() {
                    let Some(cands) = by_rack.get(rack.as_str()) else {
                        continue;
                    };
                    let c = cursor.entry(rack.as_str()).or_insert(0);
                    while *c < cands.len() && !room(self, cands[*c]) {
                        *c += 1;
                    }
                    if *c < cands.len() {
                        let i = cands[*c];
                        self.give(i, tp);
                        continue 'partition;
                    }
                }
                left.push(tp);
            }
            // Sticky again: a partition nobody in its racks took goes back to its holder.
            let mut rest = Vec::with_capacity(left.len());
            for tp in left {
                match previous.get(&tp) {
                    Some(&i) if room(self, i) => self.give(i, tp),
                    _ => rest.push(tp),
                }
            }
            left = rest;
        } else {
            left = unassigned;
        }
        let mut i = 0;
        for tp in left {
            while i < n && !room(self, i) {
                i += 1;
            }
            if i == n {
                // Cannot happen: quotas add up to the partition count.
                debug_assert!(false, "uniform assignor ran out of room");
                break;
            }
            self.give(i, tp);
        }
    }

    fn heterogeneous(&mut self) {
        let n = self.members.len();
        let all_topics: BTreeSet<TopicId> = self
            .members
            .iter()
            .flat_map(|m| m.topics.iter().copied())
            .collect();
        let mut subscribers: BTreeMap<TopicId, Vec<usize>> = BTreeMap::new();
        for (i, m) in self.members.iter().enumerate() {
            for t in &m.topics {
                subscribers.entry(*t).or_default().push(i);
            }
        }
        // Sticky: keep every valid current partition.
        for i in 0..n {
            for tp in self.valid_current(i) {
                if !self.owner.contains_key(&tp) {
                    self.give(i, tp);
                }
            }
        }
        // New partitions: topics with the fewest subscribers first, each partition to the
        // least loaded subscriber (rack match breaks ties).
        self.collect_unassigned(&all_topics);
        let mut unassigned = std::mem::take(&mut self.unassigned);
        unassigned.sort_by_key(|(t, p)| (subscribers.get(t).map_or(0, Vec::len), *t, *p));
        for tp in unassigned {
            let Some(subs) = subscribers.get(&tp.0) else {
                continue;
            };
            let best = subs
                .iter()
                .copied()
                .min_by_key(|i| (self.owned[*i].len(), !self.rack_match(*i, &tp), *i));
            if let Some(i) = best {
                self.give(i, tp);
            }
        }
        // Balance: move partitions from a member to an eligible one holding at least two
        // fewer, until none can move (each move lowers the sum of squared counts, so this
        // ends; the pass limit bounds the work on adversarial subscriptions).
        for _ in 0..64 {
            let mut moved = false;
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|a, b| {
                self.owned[*b]
                    .len()
                    .cmp(&self.owned[*a].len())
                    .then(a.cmp(b))
            });
            for x in order {
                // A move needs a member holding two fewer than x.
                let least = self.owned.iter().map(Vec::len).min().unwrap_or(0);
                let mut k = 0;
                while k < self.owned[x].len() && self.owned[x].len() >= least + 2 {
                    let tp = self.owned[x][k];
                    let target = subscribers.get(&tp.0).and_then(|subs| {
                        subs.iter()
                            .copied()
                            .filter(|y| *y != x)
                            .min_by_key(|y| (self.owned[*y].len(), !self.rack_match(*y, &tp), *y))
                    });
                    match target {
                        Some(y) if self.owned[y].len() + 2 <= self.owned[x].len() => {
                            self.owned[x].swap_remove(k);
                            self.give(y, tp);
                            moved = true;
                        }
                        _ => k += 1,
                    }
                }
            }
            if !moved {
                break;
            }
        }
    }

    fn finish(self) -> BTreeMap<String, Assignment> {
        let mut out = BTreeMap::new();
        for (i, parts) in self.owned.into_iter().enumerate() {
            let mut a = Assignment::new();
            for (t, p) in parts {
                a.entry(t).or_default().insert(p);
            }
            out.insert(self.members[i].id.to_string(), a);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u8) -> TopicId {
        TopicId([n; 16])
    }

    fn topics(spec: &[(u8, i32)]) -> BTreeMap<TopicId, TopicSpec<'static>> {
        spec.iter()
            .map(|(id, n)| {
                (
                    t(*id),
                    TopicSpec {
                        partitions: *n,
                        racks: &[],
                    },
                )
            })
            .collect()
    }

    fn member<'a>(id: &'a str, subs: &[u8], current: Option<&'a Assignment>) -> MemberSpec<'a> {
        MemberSpec {
            id,
            instance_id: None,
            rack: None,
            topics: subs.iter().map(|n| t(*n)).collect(),
            current,
        }
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    #[test]
    fn range_is_kafkas_co_partitioned_ranges() {
        let ts = topics(&[(1, 3), (2, 3)]);
        let ms = [member("b", &[1, 2], None), member("a", &[1, 2], None)];
        let out = assign("range", &ms, &ts).unwrap();
        let want_a: Assignment = [(t(1), [0, 1].into()), (t(2), [0, 1].into())].into();
        let want_b: Assignment = [(t(1), [2].into()), (t(2), [2].into())].into();
        assert_eq!(out["a"], want_a);
        assert_eq!(out["b"], want_b);
    }

    #[test]
    fn uniform_is_balanced_and_sticky_on_join() {
        let ts = topics(&[(1, 6)]);
        let ms = [member("a", &[1], None), member("b", &[1], None)];
        let first = assign("uniform", &ms, &ts).unwrap();
        assert_eq!((count(&first["a"]), count(&first["b"])), (3, 3));
        let ms = [
            member("a", &[1], Some(&first["a"])),
            member("b", &[1], Some(&first["b"])),
            member("c", &[1], None),
        ];
        let second = assign("uniform", &ms, &ts).unwrap();
        for m in ["a", "b", "c"] {
            assert_eq!(count(&second[m]), 2, "{m}");
        }
        // a and b only gave up partitions; c got exactly those.
        for m in ["a", "b"] {
            assert!(second[m][&t(1)].is_subset(&first[m][&t(1)]));
        }
    }

    #[test]
    fn uniform_heterogeneous_respects_subscriptions_and_balances() {
        let ts = topics(&[(1, 4), (2, 4)]);
        let ms = [
            member("a", &[1], None),
            member("b", &[1, 2], None),
            member("c", &[2], None),
        ];
        let out = assign("uniform", &ms, &ts).unwrap();
        assert!(out["a"].keys().all(|k| *k == t(1)));
        assert!(out["c"].keys().all(|k| *k == t(2)));
        let counts: Vec<usize> = ["a", "b", "c"].iter().map(|m| count(&out[*m])).collect();
        assert_eq!(counts.iter().sum::<usize>(), 8);
        assert!(
            counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1,
            "{counts:?}"
        );
    }

    #[test]
    fn uniform_prefers_racks_of_replicas() {
        let racks = vec![vec!["r1".to_string()], vec!["r2".to_string()]];
        let ts: BTreeMap<TopicId, TopicSpec<'_>> = [(
            t(1),
            TopicSpec {
                partitions: 2,
                racks: &racks,
            },
        )]
        .into();
        let mut a = member("a", &[1], None);
        a.rack = Some("r2");
        let mut b = member("b", &[1], None);
        b.rack = Some("r1");
        let out = assign("uniform", &[a, b], &ts).unwrap();
        assert_eq!(out["a"][&t(1)], [1].into());
        assert_eq!(out["b"][&t(1)], [0].into());
    }

    #[test]
    fn uniform_moves_toward_racks_as_members_join_one_by_one() {
        // Six partitions, partition p's only replica in rack r(p % 3); members with racks r0,
        // r1, r2 join one after another (each assignment starting from the previous one):
        // at the end each member holds its own rack's two partitions.
        let racks: Vec<Vec<String>> = (0..6).map(|p| vec![format!("r{}", p % 3)]).collect();
        let ts: BTreeMap<TopicId, TopicSpec<'_>> = [(
            t(1),
            TopicSpec {
                partitions: 6,
                racks: &racks,
            },
        )]
        .into();
        let names = ["m0", "m1", "m2"];
        let rack_names = ["r0", "r1", "r2"];
        let mut current: BTreeMap<String, Assignment> = BTreeMap::new();
        for joined in 1..=3 {
            let ms: Vec<MemberSpec<'_>> = (0..joined)
                .map(|i| {
                    let mut m = member(names[i], &[1], current.get(names[i]));
                    m.rack = Some(rack_names[i]);
                    m
                })
                .collect();
            let next = assign("uniform", &ms, &ts).unwrap();
            let counts: Vec<usize> = next.values().map(count).collect();
            assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);
            assert_eq!(counts.iter().sum::<usize>(), 6);
            current = next;
        }
        for (i, m) in names.iter().enumerate() {
            let want: BTreeSet<i32> = [i as i32, i as i32 + 3].into();
            assert_eq!(current[*m][&t(1)], want, "{m}");
        }
    }
}
