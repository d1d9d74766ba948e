"""Replication throttles (KIP-73) on three `moldau server` processes: a reassignment adds a
replica to a partition holding ~10 MB while a low throttle holds the copy back — the follower's
(`follower.replication.throttled.rate` on the new replica's broker, the topic's
`follower.replication.throttled.replicas` naming it) or the leader's
(`leader.replication.throttled.rate` on the leader's broker, `leader.replication.throttled.replicas`
naming the current replicas), set as kafka-reassign-partitions --throttle sets them. The new
replica's log on disk grows no faster than Kafka's rate lets it (the rate counts at least
(samples - 1) windows, so that many windows' worth passes at once, plus the fetch that crosses
it; then nothing until the rate, or the burst's sample, has aged: at most
(1 + t / 10 s) x (10 s x rate + one fetch) by time t), the reassignment does not complete while
the throttle holds (unthrottled, the copy takes about a second), and completes soon after the
rate is removed. The in-sync follower is never held back (acks=all writes keep being answered).
"""

from __future__ import annotations

import time

import pytest
from checker import wait_for
from confluent_kafka import Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic, ResourceType)

SETTINGS = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "auto.leader.rebalance.enable": "false",
}
RATE = 100_000  # bytes/s
RECORD = 10_000
RECORDS = 1000  # ~10 MB
WINDOWS = 11  # replication.quota.window.num (default), of 1 s
FETCH = 1 << 20  # a follower's partition_max_bytes: the most one fetch can overshoot by
WATCH_S = 14.0


def log_bytes(cluster, node: int, topic: str) -> int:
    d = cluster.node(node).data_dir / f"{topic}-0"
    if not d.exists():
        return 0
    return sum(f.stat().st_size for f in d.glob("*.log"))


def set_broker_config(admin: AdminClient, broker: int, key: str, value: str | None) -> None:
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    res = ConfigResource(ResourceType.BROKER, str(broker), incremental_configs=[
        ConfigEntry(key, value or "", incremental_operation=op)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)


@pytest.mark.parametrize("side", ["follower", "leader"])
def test_reassignment_copies_at_the_throttled_rate(clusters, topic, side):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    cluster = clusters(3, **SETTINGS)
    b = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": b})
    # Node 1 leads, node 2 follows in sync; node 3 is added by the reassignment.
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2]])])[topic].result(60)
    wait_for("leader 1", lambda: admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader == 1)
    producer = Producer({"bootstrap.servers": b, "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic, value=bytes([i % 251]) * RECORD, partition=0)
    assert producer.flush(120) == 0
    written = log_bytes(cluster, 1, topic)
    assert written >= RECORDS * RECORD, written

    if side == "follower":
        throttled_broker, replicas = 3, "0:3"
    else:
        throttled_broker, replicas = 1, "0:1,0:2"
    key = f"{side}.replication.throttled.rate"
    set_broker_config(admin, throttled_broker, key, str(RATE))
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(f"{side}.replication.throttled.replicas", replicas,
                    incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)
    described = admin.describe_configs([ConfigResource(ResourceType.BROKER, str(throttled_broker))])
    entries = list(described.values())[0].result(30)
    assert entries[key].value == str(RATE), entries[key]

    kp = KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=30000)
    try:
        tp = TopicPartition(topic, 0)
        start = time.monotonic()
        assert kp.alter_partition_reassignments({tp: [1, 2, 3]}) == {tp: None}
        cluster.log(f"reassigning {topic}-0 to [1, 2, 3] under a {side} throttle of {RATE} B/s")
        samples = []
        while (elapsed := time.monotonic() - start) < WATCH_S:
            copied = log_bytes(cluster, 3, topic)
            samples.append((elapsed, copied))
            # Kafka's rate counts at least (samples - 1) windows, so (samples - 1) windows'
            # worth passes at once, and the fetch that crosses it; the next burst only once
            # the rate has fallen back, at least (samples - 1) windows later. (A sample read
            # late only makes the bound looser.)
            bursts = 1 + int(elapsed // (WINDOWS - 1))
            limit = bursts * (RATE * (WINDOWS - 1) + FETCH)
            assert copied <= limit, (f"{copied} bytes copied after {elapsed:.1f} s, over "
                                     f"the throttle's {limit:.0f}: {samples}")
            assert kp.list_partition_reassignments() != {}, (
                f"completed under the throttle after {elapsed:.1f} s: {samples}")
            time.sleep(0.5)
        copied = log_bytes(cluster, 3, topic)
        rate = copied / samples[-1][0]
        cluster.log(f"{copied} bytes copied in {WATCH_S} s under the throttle: {samples}")
        print(f"{side} throttle {RATE} B/s: {copied} bytes in {samples[-1][0]:.1f} s "
              f"({rate:.0f} B/s); bursts at {[round(t, 1) for (t, c), (_, p) in zip(samples[1:], samples) if c > p]}")
        # It progresses: at least the first fetch arrived and was written.
        assert copied >= RATE * (WINDOWS - 1) * 0.5, samples
        assert copied < written, samples
        # The in-sync follower is never held back: acks=all writes are answered meanwhile.
        producer.produce(topic, value=b"during", partition=0)
        assert producer.flush(30) == 0

        set_broker_config(admin, throttled_broker, key, None)
        lifted = time.monotonic()
        wait_for("the reassignment to complete once the throttle is lifted",
                 lambda: kp.list_partition_reassignments() == {}, timeout=60)
        cluster.log(f"completed {time.monotonic() - lifted:.1f} s after the throttle was lifted")
        print(f"completed {time.monotonic() - lifted:.1f} s after the throttle was lifted")
        p = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
        assert p.replicas == [1, 2, 3] and sorted(p.isrs) == [1, 2, 3], p
        assert log_bytes(cluster, 3, topic) >= written
    finally:
        kp.close()
