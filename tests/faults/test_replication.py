"""Replication under faults on a three-node cluster (combined broker+controller nodes):
partitions with three replicas, idempotent acks=all producers, and the leader's node killed
with SIGKILL. A new leader must be elected from the ISR and nothing acknowledged may be lost
(the checker reads every partition back from its leader at the end).
"""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient

from checker import CheckFailed, Workload, check, create_topic, read_back

PARTITIONS = 3
# Fast failure detection for tests: a dead broker is fenced (and loses its leaderships)
# after this long without a heartbeat.
CLUSTER_SETTINGS = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
}


def metadata(bootstrap: str, topic: str, timeout: float = 10.0):
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=timeout)
    return md.topics[topic].partitions


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> leader node id, as the cluster's metadata says now."""
    return {p: m.leader for p, m in metadata(bootstrap, topic).items()}


def wait_for(what: str, cond, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
            if last:
                return last
        except Exception as e:  # metadata calls fail while nodes come and go
            last = e
        time.sleep(0.2)
    raise CheckFailed(f"timed out waiting for {what} (last: {last!r})")


def finish(cluster, workload: Workload, topic: str) -> dict:
    workload.stop()
    logs, starts = read_back(cluster.bootstrap, topic, PARTITIONS)
    stats = check(workload.history, logs, starts)
    stats["max_ack_gap_s"] = round(workload.max_ack_gap(), 2)
    print(f"checker: {stats}")
    return stats


def isrs(bootstrap: str, topic: str) -> dict[int, list[int]]:
    return {p: sorted(m.isrs) for p, m in metadata(bootstrap, topic).items()}


def test_leader_kill9_rf3(clusters, topic, rng, rounds):
    """The leader of partition 0 is killed with SIGKILL under load, again and again: its
    partitions get new leaders from the ISR, producers carry on, the node comes back as a
    follower, catches up and rejoins the ISR (AlterPartition), and at the end every
    acknowledged record is still there, once, in order."""
    cluster = clusters(3, **CLUSTER_SETTINGS)
    create_topic(cluster.bootstrap, topic, PARTITIONS, 3)
    wait_for("every partition to have a leader",
             lambda: all(l >= 0 for l in leaders(cluster.bootstrap, topic).values()))
    w = Workload(cluster.bootstrap, topic, PARTITIONS).start()
    w.wait_acks(300, 90, "before the first fault")
    for _ in range(2 * rounds):
        time.sleep(rng.uniform(0.2, 1.5))
        victim = leaders(cluster.bootstrap, topic)[0]
        cluster.kill9(victim)
        t_kill = time.monotonic()
        new = wait_for("a new leader for partition 0",
                       lambda: (l := leaders(cluster.bootstrap, topic)[0]) not in (victim, -1) and l)
        w.wait_acks(300, 90, "after the leader was killed")
        print(f"partition 0: leader {victim} killed, node {new} leads after {time.monotonic() - t_kill:.1f}s")
        cluster.restart(victim)
        wait_for(f"node {victim} back in every ISR",
                 lambda: all(len(i) == 3 for i in isrs(cluster.bootstrap, topic).values()), timeout=90)
        cluster.log(f"ISRs full again: {isrs(cluster.bootstrap, topic)}")
        w.wait_acks(300, 90, "after the old leader came back")
    stats = finish(cluster, w, topic)
    assert stats["acked"] >= 900
