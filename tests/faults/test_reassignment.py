"""Partition reassignment (AlterPartitionReassignments, KIP-455) under load on a three-node
cluster: while the checker's idempotent acks=all producers write, every partition's replica set
is moved again and again (kafka-python's admin client), each time off its current leader, so
the new replica copies the log as a follower, joins the ISR, and only then does the
reassignment complete and leadership move; and replication factor 1 partitions grow to three
replicas and shrink back to one elsewhere. Nothing acknowledged may be lost: the checker reads
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



def test_replication_factor_one_grows_and_shrinks_under_load(clusters, topic, rng, rounds):
    """Replication factor 1 -> 3 -> 1 by reassignment while acks=all producers write (checked)
    and an acks=1 producer writes to a second topic reassigned alike (load only: acks=1 records
    may go with a leader change). A single replica moves its HW with its log end, ahead of the
    fsync (acks=1 asks for none): when replicas are added, the leader keeps that HW but must
    tell its new followers no more than its disk holds and answer acks=all only once on disk
    (its own check panicked on "HW past its durable end", on every node, and a panic during
    an fsync took a log offline). Shrinking back to one replica on another node removes the
    leader and two replicas. Nothing acknowledged may be lost, and no node may panic."""
    import threading

    from confluent_kafka import Producer
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    cluster = clusters(3, **SETTINGS)
    b = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": b})
    loose = f"{topic}-acks1"
    futures = admin.create_topics([NewTopic(t, PARTITIONS, replica_assignment=[[1], [2], [3]])
                                   for t in (topic, loose)], operation_timeout=60)
    for f in futures.values():
        f.result(60)

    def parts(t=topic):
        return admin.list_topics(t, timeout=10).topics[t].partitions

    wait_for("every partition to have a leader",
             lambda: all(parts(t)[p].leader > 0 for t in (topic, loose) for p in range(PARTITIONS)))
    stop = threading.Event()

    def acks1_load():
        p = Producer({"bootstrap.servers": b, "acks": "1", "linger.ms": 2, "message.timeout.ms": 60000})
        i = 0
        while not stop.is_set():
            try:
                p.produce(loose, value=b"x" * 100, partition=i % PARTITIONS)
                i += 1
            except BufferError:
                pass
            p.poll(0.001)
        p.flush(60)

    loader = threading.Thread(target=acks1_load, name="acks1-load", daemon=True)
    loader.start()
    w = Workload(b, topic, PARTITIONS).start()
    w.wait_acks(300, 90, "before the first reassignment")
    kp = KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=30000)

    def reassign(targets: dict[int, list[int]], what: str) -> None:
        cluster.log(f"{what}: reassigning {targets}")
        errs = kp.alter_partition_reassignments({TopicPartition(t, p): r for p, r in targets.items()
                                                 for t in (topic, loose)})
        assert all(e is None for e in errs.values()), errs
        wait_for(f"{what} to complete",
                 lambda: kp.list_partition_reassignments() == {}
                 and all(parts(t)[p].replicas == targets[p] and parts(t)[p].leader in targets[p]
                         for t in (topic, loose) for p in range(PARTITIONS)), timeout=90)
        w.wait_acks(300, 90, f"after {what}")

    try:
        for r in range(2 * rounds):
            now = parts()
            grown = {}
            for p in range(PARTITIONS):
                others = [n for n in (1, 2, 3) if n != now[p].leader]
                rng.shuffle(others)
                grown[p] = [now[p].leader] + others
            reassign(grown, f"round {r}: growing to three replicas")
            now = parts()
            reassign({p: [rng.choice([n for n in (1, 2, 3) if n != now[p].leader])]
                      for p in range(PARTITIONS)}, f"round {r}: shrinking to one replica elsewhere")
    finally:
        kp.close()
        stop.set()
        loader.join(90)
    w.stop()
    logs, starts = read_back(b, topic, PARTITIONS)
    stats = check(w.history, logs, starts)
    print(f"checker: {stats}")
    assert stats["acked"] >= 1500
    panics = [n.id for n in cluster.nodes if b"panicked at" in n.log_path.read_bytes()]
    assert not panics, f"nodes {panics} panicked\n" + "\n".join(cluster.node(i).log_tail() for i in panics)
