"""Transactions whose partitions live on several brokers (issue 11): the transaction
coordinator sends WriteTxnMarkers to every partition leader, and each leader verifies a
producer's first batch on a partition with the coordinator on another broker (KIP-890 part 1,
AddPartitionsToTxn v4 verify-only). Real clients (confluent-kafka, kafka-python) commit and
abort across a 3-node cluster; read_committed consumers see exactly the committed records,
and offsets committed inside a transaction land in the group's coordinator wherever it is.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from checker import create_topic

PARTITIONS = 6
GROUPS = 4
TIMEOUT_S = 90.0


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> leader broker id, once every partition has one."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        md = admin.list_topics(topic, timeout=10).topics[topic]
        got = {p: m.leader for p, m in md.partitions.items()}
        if len(got) == PARTITIONS and all(l >= 0 for l in got.values()):
            return got
        assert time.monotonic() < deadline, f"leaders of {topic}: {got}"
        time.sleep(0.2)


def read_committed(bootstrap: str, topic: str, group: str | None = None) -> dict[int, list[bytes]]:
    """Every record a read_committed consumer sees, per partition, up to the LSO."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group or uid("reader"),
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    })
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        at_end: set[int] = set()
        deadline = time.monotonic() + TIMEOUT_S
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"read_committed stuck: at end {sorted(at_end)}"
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                    continue
                raise KafkaException(m.error())
            at_end.discard(m.partition())
            got[m.partition()].append(m.value())
    finally:
        c.close()
    return got


def committed_offsets(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=TIMEOUT_S)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def test_confluent_kafka_commits_and_aborts_across_brokers(clusters):
    cluster = clusters(3)
    topic = uid("txn-x")
    create_topic(cluster.bootstrap, topic, PARTITIONS, 1)
    placement = leaders(cluster.bootstrap, topic)
    assert len(set(placement.values())) >= 2, f"partitions should spread over brokers: {placement}"

    p = Producer({
        "bootstrap.servers": cluster.bootstrap,
        "transactional.id": uid("cf"),
        "transaction.timeout.ms": 60000,
    })
    p.init_transactions(TIMEOUT_S)
    # Committed: 3 records on every partition (so every broker gets a marker).
    p.begin_transaction()
    for part in range(PARTITIONS):
        for i in range(3):
            p.produce(topic, value=b"c-%d-%d" % (part, i), partition=part)
    p.commit_transaction(TIMEOUT_S)
    # Aborted: one record on every partition.
    p.begin_transaction()
    for part in range(PARTITIONS):
        p.produce(topic, value=b"a-%d" % part, partition=part)
    p.flush(TIMEOUT_S)
    p.abort_transaction(TIMEOUT_S)
    # Committed with groups' offsets in the same transaction. A group's coordinator is the
    # leader of its __consumer_offsets partition: with GROUPS groups on 3 brokers, some are
    # (all but surely) on another broker than the transaction's coordinator.
    groups = [uid("cf-g") for _ in range(GROUPS)]
    p.begin_transaction()
    for part in range(PARTITIONS):
        p.produce(topic, value=b"o-%d" % part, partition=part)
    for i, group in enumerate(groups):
        meta = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group}).consumer_group_metadata()
        p.send_offsets_to_transaction([TopicPartition(topic, part, 7 + i) for part in range(PARTITIONS)],
                                      meta, TIMEOUT_S)
    p.commit_transaction(TIMEOUT_S)

    got = read_committed(cluster.bootstrap, topic)
    for part in range(PARTITIONS):
        assert got[part] == [b"c-%d-%d" % (part, i) for i in range(3)] + [b"o-%d" % part], (part, got[part])
    for i, group in enumerate(groups):
        assert committed_offsets(cluster.bootstrap, topic, group) == {part: 7 + i for part in range(PARTITIONS)}


def test_kafka_python_commits_and_aborts_across_brokers(clusters):
    from kafka import KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    cluster = clusters(3)
    topic = uid("txn-kp")
    create_topic(cluster.bootstrap, topic, PARTITIONS, 1)
    placement = leaders(cluster.bootstrap, topic)
    assert len(set(placement.values())) >= 2, f"partitions should spread over brokers: {placement}"

    p = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=uid("kp"),
                      request_timeout_ms=30000)
    try:
        p.init_transactions()
        p.begin_transaction()
        for part in range(PARTITIONS):
            p.send(topic, b"kc-%d" % part, partition=part)
        p.commit_transaction()
        p.begin_transaction()
        for part in range(PARTITIONS):
            p.send(topic, b"ka-%d" % part, partition=part)
        p.flush()
        p.abort_transaction()
        groups = [uid("kp-g") for _ in range(GROUPS)]
        p.begin_transaction()
        for i, group in enumerate(groups):
            p.send_offsets_to_transaction(
                {KTP(topic, part): OffsetAndMetadata(3 + i, "", -1) for part in range(PARTITIONS)}, group)
        p.commit_transaction()
    finally:
        p.close()
    got = read_committed(cluster.bootstrap, topic)
    for part in range(PARTITIONS):
        assert got[part] == [b"kc-%d" % part], (part, got[part])
    for i, group in enumerate(groups):
        assert committed_offsets(cluster.bootstrap, topic, group) == {part: 3 + i for part in range(PARTITIONS)}
