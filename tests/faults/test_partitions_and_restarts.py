"""More replication faults on a three-node cluster, with the checker's acks=all workload through
confluent-kafka (librdkafka) and Moldau's own client:
- a minority network partition of a leader: the proxies cut it off from the other two nodes
  (their replica fetchers, its controller links, the quorum), with or without its clients, by
  resets or by a blackhole; the majority elects a new leader and producers carry on there,
  while the old leader must not acknowledge an acks=all write it cannot replicate (its ISR
  cannot shrink without the controller); healed, it truncates its divergent tail and rejoins;
- a rolling restart (SIGTERM, restart, back in every ISR) of every node under load;
- a follower that was down while the leader's retention deleted the records it would have
  fetched next: restarted, it must start its log again at the leader's log start, catch up and
  rejoin the ISR, and then lead with everything acknowledged (above the log start) in place.
Each scenario draws its schedule from the seeded rng (FAULTS_SEED replays one) and repeats
its fault loop FAULTS_ROUNDS times; FAULTS_HEAVY=1 adds the longer variants.
"""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from checker import check, create_topic, read_back, wait_for
from test_replication import (CLUSTER_SETTINGS, PARTITIONS, bootstrap_except, finish, isrs, leaders,
                              loaded_cluster, workload)

HEAVY = os.environ.get("FAULTS_HEAVY") == "1"
heavy = pytest.mark.skipif(not HEAVY, reason="longer variant: FAULTS_HEAVY=1")


@pytest.mark.parametrize("client", ["confluent", pytest.param("moldau", marks=heavy)])
def test_leader_minority_partition(clusters, topic, rng, rounds, client):
    """The leader of partition 0 is cut off from both other nodes (and so from the quorum,
    whether or not it is the active controller). Its clients are cut too in some rounds (they
    must find the new leader through the majority) and not in others (they keep sending to the
    old leader, which must not answer acks=all: it can neither reach its followers nor shrink
    its ISR). The majority fences it after the broker session and elects a new leader from the
    ISR; producers carry on there. Healed, the old leader learns the new epoch, truncates what
    it appended alone, catches up and rejoins the ISR. Nothing acknowledged is lost."""
    cluster, w = loaded_cluster(clusters, topic, client)
    for r in range(2 * rounds):
        time.sleep(rng.uniform(0.2, 1.5))
        victim = leaders(cluster.bootstrap, topic)[0]
        majority = bootstrap_except(cluster, victim)
        mode = rng.choice(["drop", "blackhole"])
        # The first round cuts the clients too, the second leaves them (so one CI run sees
        # both cases); later ones draw.
        clients_too = r == 0 or (r > 1 and rng.random() < 0.5)
        cluster.isolate(victim, mode, clients=clients_too)
        t_cut = time.monotonic()
        new = wait_for("the majority to elect a new leader for partition 0",
                       lambda: (l := leaders(majority, topic)[0]) not in (victim, -1) and l, timeout=90)
        w.wait_acks(300, 90, f"on the majority side ({mode}, clients {'cut' if clients_too else 'not cut'})")
        print(f"partition 0: leader {victim} cut off ({mode}, clients {'cut' if clients_too else 'not cut'}); "
              f"node {new} leads after {time.monotonic() - t_cut:.1f}s")
        time.sleep(rng.uniform(0.0, 2.0))
        cluster.heal()
        wait_for(f"node {victim} back in every ISR",
                 lambda: all(len(i) == 3 for i in isrs(majority, topic).values()), timeout=90)
        w.wait_acks(300, 90, "after the partition healed")
    stats = finish(cluster, w, topic)
    assert stats["acked"] >= 1200


@pytest.mark.parametrize("client", ["confluent", "moldau"])
def test_rolling_sigterm_restart_under_load(clusters, topic, rng, rounds, client):
    """Every node in turn (a random order per round) gets SIGTERM under load: its controlled
    shutdown moves its leaderships away and it exits 0; it starts again, catches up and rejoins
    every ISR before the next node goes. Producers never stop for long (the longest gap without
    an acknowledgement is printed) and nothing acknowledged is lost."""
    cluster, w = loaded_cluster(clusters, topic, client)
    for _ in range(rounds):
        for victim in rng.sample([n.id for n in cluster.nodes], len(cluster.nodes)):
            cluster.sigterm(victim)
            w.wait_acks(100, 90, f"with node {victim} stopped")
            cluster.restart(victim)
            wait_for(f"node {victim} back in every ISR",
                     lambda: all(len(i) == 3 for i in isrs(cluster.bootstrap, topic).values()), timeout=90)
            cluster.log(f"ISRs full again: {isrs(cluster.bootstrap, topic)}")
            w.wait_acks(100, 90, f"after node {victim} came back")
    stats = finish(cluster, w, topic)
    print(f"longest time without an acknowledgement during the rolling restart: {stats['max_ack_gap_s']} s "
          f"in the topic, {stats['max_partition_ack_gap_s']} s in one partition")
    assert stats["acked"] >= 600


def log_start(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "fault-probe"})
    try:
        lo, _ = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return lo
    finally:
        c.close()


@pytest.mark.parametrize("client", ["confluent", pytest.param("moldau", marks=heavy)])
def test_follower_far_behind_past_retention(clusters, topic, rng, client):
    """A partition on two of the three nodes (leader L, follower F; min.insync.replicas=1),
    small segments and size-based retention. F is killed; L goes on alone, rolls and deletes
    every segment F would have fetched next. F restarts behind L's log start: it must start its
    log again at L's log start (Kafka's OFFSET_OUT_OF_RANGE handling), catch up and rejoin the
    ISR. Then L is killed: F leads, and every acknowledged record at or above the log start is
    in place (below it, retention deleted it legitimately)."""
    settings = {**CLUSTER_SETTINGS, "log.retention.check.interval.ms": 200}
    cluster = clusters(3, **settings)
    leader, follower = rng.sample([1, 2, 3], 2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    config = {"min.insync.replicas": "1", "segment.bytes": "16384", "retention.bytes": "32768"}
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[leader, follower]], config=config)],
                        operation_timeout=60, request_timeout=60)[topic].result(timeout=60)
    wait_for("partition 0 led by its first replica with a full ISR",
             lambda: leaders(cluster.bootstrap, topic)[0] == leader and len(isrs(cluster.bootstrap, topic)[0]) == 2)
    w = workload(cluster, topic, 1, client, writers=2).start()
    w.wait_acks(200, 90, "with both replicas up")
    cluster.kill9(follower)
    behind = max(a.offset for a in w.history.acked.values() if a.offset is not None) + 1
    wait_for(f"node {follower} out of the ISR", lambda: isrs(cluster.bootstrap, topic)[0] == [leader])
    # Well past where the follower stopped: everything it had, and more, is deleted on L.
    start = wait_for(f"the leader's log start past {behind} (retention)",
                     lambda: (s := log_start(cluster.bootstrap, topic)) > behind + rng.randrange(0, 500) and s,
                     timeout=120)
    cluster.log(f"leader's log start {start}, follower stopped below {behind}")
    cluster.restart(follower)
    wait_for(f"node {follower} back in the ISR", lambda: isrs(cluster.bootstrap, topic)[0] == [leader, follower]
             or sorted(isrs(cluster.bootstrap, topic)[0]) == sorted([leader, follower]), timeout=90)
    w.wait_acks(200, 90, "after the follower caught up")
    w.stop()
    # Stop deleting, so the read-back sees a fixed log start.
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.bytes", "-1", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=60)
    cluster.kill9(leader)
    wait_for(f"node {follower} to lead partition 0", lambda: leaders(cluster.bootstrap, topic)[0] == follower,
             timeout=90)
    logs, starts = read_back(cluster.node(follower).address, topic, 1)
    assert starts[0] >= start, f"the follower's log starts at {starts[0]}, below the leader's {start} it reset to"
    # And it got there by the reset (broker::replica's line), not by fetching from offset 0.
    assert "restarting the log at the leader's log start" in cluster.node(follower).log_path.read_text(errors="replace")
    stats = check(w.history, logs, starts, retention=True)
    print(f"checker (on the caught-up follower, log start {starts[0]}): {stats}")
    assert stats["deleted_by_retention"] > 0 and stats["acked"] - stats["deleted_by_retention"] >= 200
    cluster.restart(leader)
    wait_for(f"node {leader} back in the ISR", lambda: len(isrs(cluster.bootstrap, topic)[0]) == 2, timeout=90)


def test_moldau_client_workload_sees_every_ack(clusters, topic):
    """The native workload itself (no fault): every record `moldau produce --json` reports is
    read back at its offset, and all of them are reported (a driver that lost acks would make
    the scenarios above prove less)."""
    cluster = clusters(1)
    create_topic(cluster.bootstrap, topic, PARTITIONS, 1)
    w = workload(cluster, topic, PARTITIONS, "moldau").start()
    w.wait_acks(300, 90, "through moldau produce")
    w.stop()
    logs, starts = read_back(cluster.bootstrap, topic, PARTITIONS)
    stats = check(w.history, logs, starts)
    assert stats["acked"] == stats["read"] == len(w.history.sent), stats
