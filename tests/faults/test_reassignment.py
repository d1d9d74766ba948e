"""Partition reassignment (AlterPartitionReassignments, KIP-455) under load on a three-node
cluster: while the checker's idempotent acks=all producers write, every partition's replica set
is moved again and again (kafka-python's admin client), each time off its current leader, so
the new replica copies the log as a follower, joins the ISR, and only then does the
reassignment complete and leadership move. Nothing acknowledged may be lost: the checker reads
every partition back at the end.
"""

from __future__ import annotations

from checker import Workload, check, read_back, wait_for
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 3
SETTINGS = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "min.insync.replicas": 2,
    "auto.leader.rebalance.enable": "false",
}


def test_reassignment_under_load_loses_nothing(clusters, topic, rng, rounds):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    cluster = clusters(3, **SETTINGS)
    b = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_topics([NewTopic(topic, PARTITIONS, replica_assignment=[[1, 2], [2, 3], [3, 1]])],
                        operation_timeout=60)[topic].result(60)

    def parts():
        return admin.list_topics(topic, timeout=10).topics[topic].partitions

    wait_for("every partition to have a leader", lambda: all(parts()[p].leader > 0 for p in range(PARTITIONS)))
    w = Workload(b, topic, PARTITIONS).start()
    w.wait_acks(300, 90, "before the first reassignment")
    kp = KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=30000)
    try:
        for r in range(2 * rounds):
            now = parts()
            targets = {}
            for p in range(PARTITIONS):
                # Off the current leader: the other two nodes, in a random order.
                others = [n for n in (1, 2, 3) if n != now[p].leader]
                rng.shuffle(others)
                targets[p] = others
            cluster.log(f"round {r}: reassigning {targets} (leaders {[now[p].leader for p in range(PARTITIONS)]})")
            errs = kp.alter_partition_reassignments({TopicPartition(topic, p): t for p, t in targets.items()})
            assert all(e is None for e in errs.values()), errs
            wait_for("every reassignment to complete",
                     lambda: kp.list_partition_reassignments() == {}
                     and all(parts()[p].replicas == targets[p] and parts()[p].leader in targets[p]
                             for p in range(PARTITIONS)), timeout=90)
            cluster.log(f"round {r}: done, leaders {[parts()[p].leader for p in range(PARTITIONS)]}")
            w.wait_acks(300, 90, "after a reassignment")
    finally:
        kp.close()
    w.stop()
    logs, starts = read_back(b, topic, PARTITIONS)
    stats = check(w.history, logs, starts)
    stats["max_ack_gap_s"] = round(w.max_ack_gap(), 2)
    print(f"checker: {stats}")
    assert stats["acked"] >= 900
