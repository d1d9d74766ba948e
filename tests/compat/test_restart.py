"""Durability across a clean restart on the same data dir: topics (ids, partition counts),
topic configs, records and offsets survive; deleted topics stay deleted; --set broker configs
show up as STATIC_BROKER_CONFIG."""

from __future__ import annotations

import time

from confluent_kafka import TopicCollection, TopicPartition
from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic, ResourceType

import clients


def _src(entry):
    s = entry.source
    return s if isinstance(s, ConfigSource) else ConfigSource(s)


def test_restart_keeps_topics_configs_and_data(brokers, topic):
    server = brokers.start(**{"log.segment.bytes": "1048576"})
    admin = clients.confluent_admin(server.bootstrap)
    gone = topic + "-gone"
    fs = admin.create_topics([NewTopic(topic, 3, 1, config={"retention.ms": "86400000", "cleanup.policy": "delete"}),
                              NewTopic(gone, 1, 1)], request_timeout=15)
    for f in fs.values():
        f.result(timeout=20)
    base = int(time.time() * 1000) - 60_000
    recs = {p: [{"key": b"p%d-%d" % (p, i), "value": b"x" * 100 + b"%d" % i, "headers": [("n", b"%d" % i)],
                 "timestamp": base + i} for i in range(50 + p)] for p in range(3)}
    for p, rs in recs.items():
        clients.confluent_produce(server.bootstrap, topic, rs, partition=p, compression_type="lz4")
    clients.confluent_produce(server.bootstrap, gone, [{"value": b"doomed"}])
    admin.delete_topics([gone], request_timeout=15)[gone].result(timeout=20)
    topic_id = str(admin.describe_topics(TopicCollection([topic]), request_timeout=15)[topic].result(timeout=20).topic_id)
    before = {p: clients.confluent_consume(server.bootstrap, topic, p, 50 + p) for p in range(3)}

    server.restart()
    admin = clients.confluent_admin(server.bootstrap)
    md = admin.list_topics(timeout=10)
    assert topic in md.topics and gone not in md.topics
    assert sorted(md.topics[topic].partitions) == [0, 1, 2]
    desc = admin.describe_topics(TopicCollection([topic]), request_timeout=15)[topic].result(timeout=20)
    assert str(desc.topic_id) == topic_id

    res = ConfigResource(ResourceType.TOPIC, topic)
    cfg = admin.describe_configs([res], request_timeout=15)[res].result(timeout=20)
    assert (cfg["retention.ms"].value, _src(cfg["retention.ms"])) == ("86400000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert (cfg["cleanup.policy"].value, _src(cfg["cleanup.policy"])) == ("delete", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    # broker-level override from --set: topic inherits it, reported as a static broker config
    assert (cfg["segment.bytes"].value, _src(cfg["segment.bytes"])) == ("1048576", ConfigSource.STATIC_BROKER_CONFIG)

    for p in range(3):
        assert clients.confluent_watermarks(server.bootstrap, topic, p) == (0, 50 + p)
        assert clients.confluent_consume(server.bootstrap, topic, p, 50 + p) == before[p]
    assert clients.kp_consume(server.bootstrap, topic, 1, 51) == before[1]
    # appends continue after the recovered end
    delivered = clients.confluent_produce(server.bootstrap, topic, [{"value": b"after"}], partition=2)
    assert delivered[0].offset() == 52


def test_restart_after_alter_and_delete_records(brokers, topic):
    server = brokers.start()
    admin = clients.confluent_admin(server.bootstrap)
    clients.kp_produce(server.bootstrap, topic, [{"key": b"k", "value": b"v%d" % i} for i in range(30)])
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "999000"})
    admin.alter_configs([res], request_timeout=15)[res].result(timeout=20)
    tp = TopicPartition(topic, 0, 12)
    admin.delete_records([tp], request_timeout=15)[tp].result(timeout=20)

    server.restart()
    assert clients.confluent_watermarks(server.bootstrap, topic) == (12, 30)
    admin = clients.confluent_admin(server.bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic)
    cfg = admin.describe_configs([res], request_timeout=15)[res].result(timeout=20)
    assert cfg["retention.ms"].value == "999000"
    got = clients.aio_consume(server.bootstrap, topic, 0, 18, start=12)
    assert [m.value for m in got] == [b"v%d" % i for i in range(12, 30)]


def test_segment_roll_and_restart(brokers, topic):
    """Many small segments (segment.bytes=16 KiB): reads across segment boundaries and recovery."""
    server = brokers.start()
    admin = clients.confluent_admin(server.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, config={"segment.bytes": "16384"})],
                        request_timeout=15)[topic].result(timeout=20)
    recs = [{"key": b"%d" % i, "value": bytes([i % 251]) * 700} for i in range(300)]
    clients.confluent_produce(server.bootstrap, topic, recs, **{"batch.num.messages": 7})
    got = clients.confluent_consume(server.bootstrap, topic, 0, 300)
    assert [m.value for m in got] == [r["value"] for r in recs]
    server.restart()
    got = clients.kp_consume(server.bootstrap, topic, 0, 160, start=140)
    assert [m.offset for m in got] == list(range(140, 300))
    assert [m.value for m in got] == [r["value"] for r in recs[140:]]
    clients.confluent_produce(server.bootstrap, topic, [{"value": b"tail"}])
    assert clients.confluent_watermarks(server.bootstrap, topic) == (0, 301)


def test_sigkill_keeps_acknowledged_records(brokers, topic):
    """acks=all is acknowledged only once durable: a SIGKILL right after must lose nothing acked,
    and the recovered log accepts appends at the right offset."""
    server = brokers.start()
    recs = [{"key": b"%d" % i, "value": b"durable-%d" % i} for i in range(500)]
    delivered = clients.confluent_produce(server.bootstrap, topic, recs, acks="all", compression_type="gzip",
                                          **{"batch.num.messages": 37})
    assert len(delivered) == 500
    clients.kp_produce(server.bootstrap, topic, [{"key": b"kp", "value": b"idempotent-acked"}])
    server.crash()
    server.start()
    assert clients.confluent_watermarks(server.bootstrap, topic) == (0, 501)
    got = clients.confluent_consume(server.bootstrap, topic, 0, 501)
    assert [m.value for m in got] == [r["value"] for r in recs] + [b"idempotent-acked"]
    delivered = clients.kp_produce(server.bootstrap, topic, [{"value": b"after crash"}])
    assert delivered[0].offset == 501


def test_idempotent_duplicate_detected_after_restart(brokers, topic):
    """Producer state (last sequences) survives a restart: a retried batch is still a duplicate."""
    import kwire
    server = brokers.start()
    clients.confluent_produce(server.bootstrap, topic, [{"key": b"k", "value": b"once"}], **{"enable.idempotence": True})
    (b,) = kwire.fetch_all_batches(server.address, topic, 0)
    assert b.producer_id >= 0
    server.restart()
    dup = kwire.record_batch([kwire.Rec(b"k", b"once")], b.first_timestamp, producer_id=b.producer_id,
                             producer_epoch=b.producer_epoch, base_sequence=0)
    with kwire.connect(server.address) as sock:
        res = kwire.produce_v7(sock, topic, 0, dup)
    assert res.error_code in (0, 46), res  # success (deduplicated) or DUPLICATE_SEQUENCE_NUMBER
    assert clients.confluent_watermarks(server.bootstrap, topic) == (0, 1)


def test_set_broker_configs_are_static_broker_config(brokers, topic):
    """`--set` broker configs: topics inherit them (source STATIC_BROKER_CONFIG), a topic override
    wins (DYNAMIC_TOPIC_CONFIG), deleting the override falls back to the broker value."""
    from kafka import KafkaAdminClient
    from kafka.admin import AlterConfigOp, ConfigResource as KCR, ConfigResourceType
    server = brokers.start(**{"log.retention.ms": "3600000", "num.partitions": "2"})
    clients.confluent_produce(server.bootstrap, topic, [{"value": b"v"}], partition=None)
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
    try:
        def topic_cfg():
            return admin.describe_configs([KCR(ConfigResourceType.TOPIC, topic)], config_filter="all")["topic"][topic]
        cfg = topic_cfg()
        assert (cfg["retention.ms"]["value"], cfg["retention.ms"]["config_source"]) == ("3600000", "STATIC_BROKER_CONFIG")
        assert (cfg["cleanup.policy"]["value"], cfg["cleanup.policy"]["config_source"]) == ("delete", "DEFAULT_CONFIG")
        (t,) = admin.describe_topics([topic])
        assert len(t["partitions"]) == 2

        broker_cfg = admin.describe_configs([KCR(ConfigResourceType.BROKER, "1")], config_filter="all")["broker"]["1"]
        assert (broker_cfg["log.retention.ms"]["value"], broker_cfg["log.retention.ms"]["config_source"]) == (
            "3600000", "STATIC_BROKER_CONFIG")
        assert (broker_cfg["num.partitions"]["value"], broker_cfg["num.partitions"]["config_source"]) == (
            "2", "STATIC_BROKER_CONFIG")

        admin.alter_configs([KCR(ConfigResourceType.TOPIC, topic, {"retention.ms": "5000"})])
        cfg = topic_cfg()
        assert (cfg["retention.ms"]["value"], cfg["retention.ms"]["config_source"]) == ("5000", "DYNAMIC_TOPIC_CONFIG")
        admin.alter_configs([KCR(ConfigResourceType.TOPIC, topic, {"retention.ms": (AlterConfigOp.DELETE, None)})])
        cfg = topic_cfg()
        assert (cfg["retention.ms"]["value"], cfg["retention.ms"]["config_source"]) == ("3600000", "STATIC_BROKER_CONFIG")
    finally:
        admin.close()
