//! One consumer-protocol group: its persisted state (group epoch, members with their
//! subscriptions and current assignments, the target assignment and its epoch, the
//! subscribed topics' metadata, resolved regexes), changed only by applying
//! [`CgRecord`]s, plus soft state (timers) that replay does not rebuild.
//!
//! Applying the records a handler emits is the only way state changes, and replay applies the
//! same records in log order, so a loaded group equals the group that wrote the log.
//! *Invariant:* a partition has at most one owner in the group (`assigned` or
//! `pending_revocation` of one member), checked on every apply.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use model::TopicId;

use super::records::{
    Assignment, AssignmentEpochs, CgRecord, CurrentAssignment, MemberMetadata, MemberState,
    ResolvedRegex, TopicMetadata,
};
use crate::Error;

/// The states of a consumer group, with Kafka's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConsumerGroupState {
    Empty,
    /// The group epoch moved past the target assignment epoch (never visible between
    /// requests here: the target is computed in the same step).
    Assigning,
    /// Some member has not reached the target assignment yet.
    Reconciling,
    Stable,
}

impl ConsumerGroupState {
    pub fn name(self) -> &'static str {
        match self {
            ConsumerGroupState::Empty => "Empty",
            ConsumerGroupState::Assigning => "Assigning",
            ConsumerGroupState::Reconciling => "Reconciling",
            ConsumerGroupState::Stable => "Stable",
        }
    }
}

/// A member: its subscription (ConsumerGroupMemberMetadata) and its current assignment
/// (ConsumerGroupCurrentMemberAssignment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub id: String,
    pub meta: MemberMetadata,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub state: MemberState,
    pub assigned: Assignment,
    pub pending_revocation: Assignment,
    /// When each held partition was assigned (KIP-1251).
    pub epochs: AssignmentEpochs,
}

impl Member {
    pub fn new(id: &str) -> Member {
        Member {
            id: id.to_string(),
            meta: MemberMetadata {
                rebalance_timeout_ms: -1,
                ..MemberMetadata::default()
            },
            epoch: 0,
            previous_epoch: 0,
            state: MemberState::Stable,
            assigned: Assignment::new(),
            pending_revocation: Assignment::new(),
            epochs: AssignmentEpochs::new(),
        }
    }

    /// Whether the member joined through JoinGroup (a classic member of a mixed group).
    pub fn uses_classic(&self) -> bool {
        self.meta.classic.is_some()
    }

    pub fn is_reconciled_to(&self, target_epoch: i32) -> bool {
        self.state == MemberState::Stable && self.epoch == target_epoch
    }

    pub fn current(&self) -> CurrentAssignment {
        CurrentAssignment {
            member_epoch: self.epoch,
            previous_member_epoch: self.previous_epoch,
            state: self.state,
            assigned: self.assigned.clone(),
            pending_revocation: self.pending_revocation.clone(),
            epochs: self.epochs.clone(),
        }
    }

    fn set_current(&mut self, c: &CurrentAssignment) {
        self.epoch = c.member_epoch;
        self.previous_epoch = c.previous_member_epoch;
        self.state = c.state;
        self.assigned = c.assigned.clone();
        self.pending_revocation = c.pending_revocation.clone();
        self.epochs = c.epochs.clone();
    }
}

/// Timers of one member (soft state, not persisted; rebuilt from `now` on load).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberTimers {
    /// Fenced when no heartbeat arrives before this.
    pub session_deadline_ms: i64,
    /// Fenced when still at `epoch` (revoking) at this time.
    pub rebalance_deadline: Option<(i64, i32)>,
    /// Classic members: fenced when they do not rejoin after REBALANCE_IN_PROGRESS by then.
    pub join_deadline_ms: Option<i64>,
    /// Classic members: fenced when they do not SyncGroup after JoinGroup by then.
    pub sync_deadline_ms: Option<i64>,
}

impl MemberTimers {
    pub fn next_deadline(&self) -> i64 {
        [
            Some(self.session_deadline_ms),
            self.rebalance_deadline.map(|(d, _)| d),
            self.join_deadline_ms,
            self.sync_deadline_ms,
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(i64::MAX)
    }
}

/// A consumer group. Owned by `ConsumerGroups`; single-threaded.
#[derive(Clone, Debug)]
pub struct ConsumerGroup {
    pub id: String,
    /// The `__consumer_offsets` partition holding this group.
    pub partition: i32,
    pub epoch: i32,
    /// The epoch of `target`; -1 after its tombstone.
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, Member>,
    /// group.instance.id -> member id.
    pub static_members: BTreeMap<String, String>,
    pub target: BTreeMap<String, Assignment>,
    pub subscription_metadata: BTreeMap<String, TopicMetadata>,
    pub regexes: BTreeMap<String, ResolvedRegex>,
    /// Who owns each partition and at which member epoch (derived from `members`).
    owners: HashMap<(TopicId, i32), (String, i32)>,
    pub timers: HashMap<String, MemberTimers>,
    /// Set when a subscribed topic changed in the metadata: the next heartbeat recomputes
    /// the subscription metadata (and bumps the epoch if it changed).
    pub metadata_stale: bool,
}

/// The persisted part of a group, for comparing a live group with its replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistedGroup {
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, Member>,
    pub target: BTreeMap<String, Assignment>,
    pub subscription_metadata: BTreeMap<String, TopicMetadata>,
    pub regexes: BTreeMap<String, ResolvedRegex>,
}

impl ConsumerGroup {
    pub fn new(id: &str, partition: i32) -> ConsumerGroup {
        ConsumerGroup {
            id: id.to_string(),
            partition,
            epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            target: BTreeMap::new(),
            subscription_metadata: BTreeMap::new(),
            regexes: BTreeMap::new(),
            owners: HashMap::new(),
            timers: HashMap::new(),
            metadata_stale: false,
        }
    }

    pub fn persisted(&self) -> PersistedGroup {
        PersistedGroup {
            epoch: self.epoch,
            assignment_epoch: self.assignment_epoch,
            members: self.members.clone(),
            target: self.target.clone(),
            subscription_metadata: self.subscription_metadata.clone(),
            regexes: self.regexes.clone(),
        }
    }

    pub fn state(&self) -> ConsumerGroupState {
        if self.members.is_empty() {
            ConsumerGroupState::Empty
        } else if self.epoch > self.assignment_epoch {
            ConsumerGroupState::Assigning
        } else if self
            .members
            .values()
            .any(|m| !m.is_reconciled_to(self.assignment_epoch))
        {
            ConsumerGroupState::Reconciling
        } else {
            ConsumerGroupState::Stable
        }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The member a static instance id belongs to.
    pub fn static_member(&self, instance_id: &str) -> Option<&Member> {
        self.static_members
            .get(instance_id)
            .and_then(|id| self.members.get(id))
    }

    /// The epoch of the member owning a partition, or -1 when it is free.
    pub fn partition_epoch(&self, topic: &TopicId, partition: i32) -> i32 {
        self.owners
            .get(&(*topic, partition))
            .map_or(-1, |(_, e)| *e)
    }

    /// The member owning a partition.
    pub fn partition_owner(&self, topic: &TopicId, partition: i32) -> Option<&str> {
        self.owners
            .get(&(*topic, partition))
            .map(|(m, _)| m.as_str())
    }

    /// Every owned partition with its owner (for invariant checks).
    pub fn owners(&self) -> impl Iterator<Item = (&(TopicId, i32), &(String, i32))> {
        self.owners.iter()
    }

    /// The topics a member subscribes to: its names plus what its regex resolved to.
    pub fn member_topics(&self, m: &MemberMetadata) -> BTreeSet<String> {
        let mut topics: BTreeSet<String> = m.subscribed_topic_names.iter().cloned().collect();
        if let Some(r) = m
            .subscribed_topic_regex
            .as_ref()
            .and_then(|r| self.regexes.get(r))
        {
            topics.extend(r.topics.iter().cloned());
        }
        topics
    }

    /// Every topic any member subscribes to, with the number of subscribers.
    pub fn subscribed_topic_counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for m in self.members.values() {
            for t in self.member_topics(&m.meta) {
                *counts.entry(t).or_insert(0) += 1;
            }
        }
        counts
    }

    /// Members per regex (a regex nobody uses any more is deleted).
    pub fn regex_users(&self) -> BTreeMap<&str, usize> {
        let mut users = BTreeMap::new();
        for m in self.members.values() {
            if let Some(r) = &m.meta.subscribed_topic_regex {
                *users.entry(r.as_str()).or_insert(0) += 1;
            }
        }
        users
    }

    /// The server assignor most members ask for (ties: the earlier in `configured`).
    pub fn preferred_assignor(&self, configured: &[String]) -> Option<String> {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = &m.meta.server_assignor {
                *counts.entry(a.as_str()).or_insert(0) += 1;
            }
        }
        let mut best: Option<(&str, usize)> = None;
        for name in configured {
            if let Some(&c) = counts.get(name.as_str()) {
                if best.is_none_or(|(_, b)| c > b) {
                    best = Some((name.as_str(), c));
                }
            }
        }
        best.map(|(n, _)| n.to_string())
    }

    /// Applies one record of this group (live or replayed). Errors only for a record that
    /// contradicts the state (corrupt log): two owners of one partition.
    pub fn apply(&mut self, rec: &CgRecord) -> Result<(), Error> {
        match rec {
            CgRecord::GroupEpoch { epoch, .. } => {
                if let Some(e) = epoch {
                    self.epoch = *e;
                }
            }
            CgRecord::SubscriptionMetadata { topics, .. } => {
                self.subscription_metadata = topics.clone().unwrap_or_default();
            }
            CgRecord::Member { member, value, .. } => match value {
                Some(meta) => {
                    let m = self
                        .members
                        .entry(member.clone())
                        .or_insert_with(|| Member::new(member));
                    if let Some(old) = m.meta.instance_id.take() {
                        if self.static_members.get(&old) == Some(member) {
                            self.static_members.remove(&old);
                        }
                    }
                    m.meta = meta.clone();
                    if let Some(instance) = &meta.instance_id {
                        self.static_members.insert(instance.clone(), member.clone());
                    }
                }
                None => {
                    if let Some(m) = self.members.remove(member) {
                        self.release(&m);
                        if let Some(instance) = &m.meta.instance_id {
                            if self.static_members.get(instance) == Some(member) {
                                self.static_members.remove(instance);
                            }
                        }
                    }
                    self.timers.remove(member);
                }
            },
            CgRecord::TargetEpoch { epoch, .. } => {
                self.assignment_epoch = epoch.unwrap_or(-1);
            }
            CgRecord::TargetMember { member, value, .. } => match value {
                Some(a) => {
                    self.target.insert(member.clone(), a.clone());
                }
                None => {
                    self.target.remove(member);
                }
            },
            CgRecord::Current { member, value, .. } => {
                let old = self.members.get(member).cloned();
                if let Some(old) = &old {
                    self.release(old);
                }
                let m = self
                    .members
                    .entry(member.clone())
                    .or_insert_with(|| Member::new(member));
                match value {
                    Some(c) => m.set_current(c),
                    None => {
                        // Kafka marks the member as leaving; its metadata tombstone follows.
                        m.epoch = -1;
                        m.previous_epoch = -1;
                        m.state = MemberState::Stable;
                        m.assigned.clear();
                        m.pending_revocation.clear();
                        m.epochs.clear();
                    }
                }
                let m = m.clone();
                self.own(&m)?;
            }
            CgRecord::Regex { regex, value, .. } => match value {
                Some(r) => {
                    self.regexes.insert(regex.clone(), r.clone());
                }
                None => {
                    self.regexes.remove(regex);
                }
            },
        }
        Ok(())
    }

    fn release(&mut self, m: &Member) {
        for a in [&m.assigned, &m.pending_revocation] {
            for (t, parts) in a {
                for p in parts {
                    if self
                        .owners
                        .get(&(*t, *p))
                        .is_some_and(|(owner, _)| owner == &m.id)
                    {
                        self.owners.remove(&(*t, *p));
                    }
                }
            }
        }
    }

    fn own(&mut self, m: &Member) -> Result<(), Error> {
        for a in [&m.assigned, &m.pending_revocation] {
            for (t, parts) in a {
                for p in parts {
                    if let Some((other, _)) = self.owners.get(&(*t, *p)) {
                        if other != &m.id {
                            return Err(Error::Corrupt("a partition assigned to two members"));
                        }
                    }
                    self.owners.insert((*t, *p), (m.id.clone(), m.epoch));
                }
            }
        }
        Ok(())
    }
}
