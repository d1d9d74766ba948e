"""Metadata and cluster description: one broker (node 1) on the advertised loopback port, every
partition led by node 1 with replicas/ISR [1], stable non-zero topic ids."""

from __future__ import annotations

import uuid

import pytest

from confluent_kafka import TopicCollection
from kafka import KafkaAdminClient

import clients

ZERO_UUID = uuid.UUID(int=0)


def _create(broker, topic, partitions):
    from confluent_kafka.admin import NewTopic
    admin = clients.confluent_admin(broker.bootstrap)  # keep the handle alive until the result
    fs = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)], request_timeout=15)
    fs[topic].result(timeout=20)


def test_confluent_metadata(broker, topic):
    _create(broker, topic, 4)
    admin = clients.confluent_admin(broker.bootstrap)
    md = admin.list_topics(timeout=10)
    assert set(md.brokers) == {1}
    b = md.brokers[1]
    assert (b.id, b.host, b.port) == (1, "127.0.0.1", broker.port)
    assert md.controller_id == 1
    assert md.cluster_id
    t = md.topics[topic]
    assert t.error is None
    assert sorted(t.partitions) == [0, 1, 2, 3]
    for pid, p in t.partitions.items():
        assert (p.id, p.leader, p.replicas, p.isrs, p.error) == (pid, 1, [1], [1], None)

    desc = admin.describe_topics(TopicCollection([topic]), request_timeout=15)[topic].result(timeout=20)
    assert desc.name == topic
    assert desc.is_internal is False
    assert str(desc.topic_id) != "AAAAAAAAAAAAAAAAAAAAAA"  # base64 of the zero uuid
    assert [p.id for p in desc.partitions] == [0, 1, 2, 3]
    assert all(p.leader.id == 1 and [r.id for r in p.replicas] == [1] and [r.id for r in p.isr] == [1]
               for p in desc.partitions)
    again = admin.describe_topics(TopicCollection([topic]), request_timeout=15)[topic].result(timeout=20)
    assert str(again.topic_id) == str(desc.topic_id)

    cluster = admin.describe_cluster(request_timeout=15).result(timeout=20)
    assert cluster.cluster_id == md.cluster_id
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(1, "127.0.0.1", broker.port)]
    assert cluster.controller.id == 1


def test_kafka_python_metadata(broker, topic):
    _create(broker, topic, 2)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        assert topic in admin.list_topics()
        (t,) = admin.describe_topics([topic])
        assert t["name"] == topic and t["error_code"] == 0
        topic_id = uuid.UUID(str(t["topic_id"]))
        assert topic_id != ZERO_UUID
        assert sorted(p["partition_index"] for p in t["partitions"]) == [0, 1]
        for p in t["partitions"]:
            assert (p["error_code"], p["leader_id"], list(p["replica_nodes"]), list(p["isr_nodes"])) == (0, 1, [1], [1])
        # KIP-516: describing by topic id gives the same topic back.
        (by_id,) = admin.describe_topics([topic_id])
        assert (by_id["error_code"], by_id["name"]) == (0, topic)
        (unknown,) = admin.describe_topics([uuid.uuid4()])
        assert unknown["error_code"] == 100  # UNKNOWN_TOPIC_ID
        cluster = admin.describe_cluster()
        assert cluster["controller_id"] == 1
        assert cluster["cluster_id"]
        assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [(1, "127.0.0.1", broker.port)]
    finally:
        admin.close()


def test_aiokafka_metadata(broker, topic):
    _create(broker, topic, 3)

    async def check():
        from aiokafka import AIOKafkaProducer, TopicPartition
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
        await p.start()
        try:
            assert await p.partitions_for(topic) == {0, 1, 2}
            cluster = p.client.cluster
            assert [(b.nodeId, b.host, b.port) for b in cluster.brokers()] == [(1, "127.0.0.1", broker.port)]
            assert cluster.controller.nodeId == 1
            for part in range(3):
                assert cluster.leader_for_partition(TopicPartition(topic, part)) == 1
        finally:
            await p.stop()

    clients.run_async(check())


def test_kcat_metadata(broker, topic):
    _create(broker, topic, 2)
    import json
    out = clients.kcat(["-L", "-J", "-b", broker.bootstrap]).stdout
    md = json.loads(out)
    assert [(b["id"], b["name"]) for b in md["brokers"]] == [(1, f"127.0.0.1:{broker.port}")]
    (t,) = [t for t in md["topics"] if t["topic"] == topic]
    assert [(p["partition"], p["leader"], [r["id"] for r in p["replicas"]], [r["id"] for r in p["isrs"]])
            for p in t["partitions"]] == [(0, 1, [1], [1]), (1, 1, [1], [1])]


def test_auto_create_on_metadata(broker, topic):
    """Producing to an unknown topic auto-creates it with num.partitions (default 1)."""
    clients.confluent_produce(broker.bootstrap, topic, [{"key": b"k", "value": b"v"}], partition=None)
    md = clients.confluent_admin(broker.bootstrap).list_topics(timeout=10)
    assert sorted(md.topics[topic].partitions) == [0]


def test_auto_create_uses_num_partitions(broker3, topic):
    clients.kp_produce(broker3.bootstrap, topic, [{"key": b"k", "value": b"v"}], partition=None)
    md = clients.confluent_admin(broker3.bootstrap).list_topics(timeout=10)
    assert sorted(md.topics[topic].partitions) == [0, 1, 2]


def test_auto_create_disabled(brokers, topic):
    server = brokers.start(**{"auto.create.topics.enable": "false"})
    from kafka import KafkaAdminClient as KA, KafkaProducer
    from kafka.errors import KafkaTimeoutError
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, max_block_ms=2000)
    try:
        with pytest.raises(KafkaTimeoutError):  # metadata never shows the topic
            producer.send(topic, b"v").get(timeout=5)
    finally:
        producer.close(timeout=5)
    admin = KA(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
    try:
        (t,) = admin.describe_topics([topic])
        assert t["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        assert topic not in admin.list_topics()
    finally:
        admin.close()
