//! Assignment computation for 1,000 members over 10,000 partitions (10 topics x 1,000), with
//! the consumer protocol's server-side assignors (KIP-848: `uniform`, `range`) and, in the same
//! run, the classic protocol's client-side assignors (the group leader's `range` and
//! `cooperative-sticky`, as Moldau's client computes them), plus a whole ConsumerGroupHeartbeat
//! of a member joining a 999-member group (target assignment, reconciliation, records).
//!
//! Run: `cargo bench -p moldau --bench assignors` (criterion).

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hint::black_box;

use client::{assign_cooperative_sticky, assign_range, Subscription};
use coordinator::consumer::assignor::{assign, MemberSpec, TopicSpec};
use coordinator::consumer::records::Assignment;
use coordinator::{CoordinatorConfig, GroupCoordinator, RequestContext, TopicInfo, TopicsImage};
use criterion::{criterion_group, criterion_main, Criterion};
use model::TopicId;
use protocol::messages::{ConsumerGroupHeartbeatRequest, GroupId, TopicName};
use protocol::StrBytes;

const MEMBERS: usize = 1_000;
const TOPICS: usize = 10;
const PARTITIONS_PER_TOPIC: i32 = 1_000;

fn topic_id(t: usize) -> TopicId {
    let mut id = [0u8; 16];
    id[0] = t as u8;
    id[15] = 0x42;
    TopicId(id)
}

fn topic_name(t: usize) -> String {
    format!("topic-{t}")
}

fn member_ids() -> Vec<String> {
    (0..MEMBERS).map(|i| format!("member-{i:04}")).collect()
}

fn topic_specs() -> BTreeMap<TopicId, TopicSpec<'static>> {
    (0..TOPICS)
        .map(|t| {
            (
                topic_id(t),
                TopicSpec {
                    partitions: PARTITIONS_PER_TOPIC,
                    racks: &[],
                },
            )
        })
        .collect()
}

fn specs<'a>(
    ids: &'a [String],
    subscribed: impl Fn(usize) -> BTreeSet<TopicId>,
    current: Option<&'a BTreeMap<String, Assignment>>,
) -> Vec<MemberSpec<'a>> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| MemberSpec {
            id,
            instance_id: None,
            rack: None,
            topics: subscribed(i),
            current: current.and_then(|c| c.get(id)),
        })
        .collect()
}

fn all_topics(_: usize) -> BTreeSet<TopicId> {
    (0..TOPICS).map(topic_id).collect()
}

/// Half the topics for even members, the other half plus one shared topic for odd ones.
fn mixed_topics(i: usize) -> BTreeSet<TopicId> {
    (0..TOPICS)
        .filter(|t| {
            if i.is_multiple_of(2) {
                *t < TOPICS / 2 + 1
            } else {
                *t >= TOPICS / 2
            }
        })
        .map(topic_id)
        .collect()
}

fn server_side(c: &mut Criterion) {
    let topics = topic_specs();
    let ids = member_ids();
    let fresh = specs(&ids, all_topics, None);
    c.bench_function("kip848/uniform/1000x10000/fresh", |b| {
        b.iter(|| black_box(assign("uniform", &fresh, &topics).unwrap()))
    });
    c.bench_function("kip848/range/1000x10000/fresh", |b| {
        b.iter(|| black_box(assign("range", &fresh, &topics).unwrap()))
    });
    // A member joins a balanced group: everyone keeps what fits their new share.
    let balanced = assign("uniform", &fresh[1..], &topics).unwrap();
    let joined = specs(&ids, all_topics, Some(&balanced));
    c.bench_function("kip848/uniform/1000x10000/one-joins-sticky", |b| {
        b.iter(|| black_box(assign("uniform", &joined, &topics).unwrap()))
    });
    let mixed = specs(&ids, mixed_topics, None);
    c.bench_function("kip848/uniform/1000x10000/heterogeneous", |b| {
        b.iter(|| black_box(assign("uniform", &mixed, &topics).unwrap()))
    });
}

fn classic_client_side(c: &mut Criterion) {
    let counts: HashMap<String, i32> = (0..TOPICS)
        .map(|t| (topic_name(t), PARTITIONS_PER_TOPIC))
        .collect();
    let members: Vec<(String, Subscription)> = member_ids()
        .into_iter()
        .map(|id| {
            (
                id,
                Subscription {
                    topics: (0..TOPICS).map(topic_name).collect(),
                    ..Subscription::default()
                },
            )
        })
        .collect();
    c.bench_function("classic/range/1000x10000/fresh", |b| {
        b.iter(|| black_box(assign_range(&members, &counts)))
    });
    c.bench_function("classic/cooperative-sticky/1000x10000/fresh", |b| {
        b.iter(|| black_box(assign_cooperative_sticky(&members, &counts)))
    });
}

fn heartbeat(member: &str, epoch: i32) -> ConsumerGroupHeartbeatRequest {
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let mut r = ConsumerGroupHeartbeatRequest::default();
    r.group_id = GroupId(s("bench"));
    r.member_id = s(member);
    r.member_epoch = epoch;
    r.rebalance_timeout_ms = if epoch == 0 { 60_000 } else { -1 };
    if epoch == 0 {
        r.subscribed_topic_names =
            Some((0..TOPICS).map(|t| TopicName(s(&topic_name(t)))).collect());
        r.topic_partitions = Some(Vec::new());
    }
    r
}

/// One member joining (and, untimed, leaving) a 999-member group: the whole heartbeat.
fn coordinator_join(c: &mut Criterion) {
    let mut co = GroupCoordinator::new(CoordinatorConfig {
        offsets_topic_num_partitions: 1,
        ..CoordinatorConfig::default()
    });
    co.set_topics(TopicsImage::new((0..TOPICS).map(|t| TopicInfo {
        id: topic_id(t),
        name: topic_name(t),
        partitions: PARTITIONS_PER_TOPIC,
        racks: Vec::new(),
        internal: false,
    })));
    co.load_partition(0, 0);
    let ctx = |token| RequestContext {
        token,
        api_version: 1,
        client_id: "bench",
        client_host: "/127.0.0.1",
        visible_topics: coordinator::TopicVisibility::ALL,
    };
    for (i, id) in member_ids().iter().enumerate().skip(1) {
        co.consumer_group_heartbeat(&ctx(i as u64), heartbeat(id, 0), 0);
    }
    let mut token = 1_000_000u64;
    c.bench_function("kip848/coordinator/heartbeat-join-into-999-members", |b| {
        b.iter_custom(|iters| {
            let mut total = std::time::Duration::ZERO;
            for _ in 0..iters {
                token += 2;
                let start = std::time::Instant::now();
                black_box(co.consumer_group_heartbeat(&ctx(token), heartbeat("joiner", 0), 0));
                total += start.elapsed();
                co.consumer_group_heartbeat(&ctx(token + 1), heartbeat("joiner", -1), 0);
            }
            total
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = server_side, classic_client_side, coordinator_join
}
criterion_main!(benches);
