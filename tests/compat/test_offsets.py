"""ListOffsets through four clients: earliest/latest, watermarks, offsets for timestamps (inside
and across batches, before the first and after the last record), max timestamp; DeleteRecords
moves the log start offset and consumers start there."""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

import clients

N = 10


@pytest.fixture
def timed_topic(broker, topic):
    """10 records at base + 1000*i: the first 5 in one batch, then one batch per record."""
    base = int(time.time() * 1000) - 600_000
    recs = [{"key": b"k%d" % i, "value": b"v%d" % i, "timestamp": base + 1000 * i} for i in range(N)]
    clients.confluent_produce(broker.bootstrap, topic, recs[:5], **{"linger.ms": 200})
    for r in recs[5:]:
        clients.confluent_produce(broker.bootstrap, topic, [r], **{"linger.ms": 0})
    return topic, base


# target timestamp offset from base -> expected offset (-1: no record that late)
CASES = [(-50_000, 0), (0, 0), (1, 1), (2500, 3), (4000, 4), (4001, 5), (7000, 7), (9000, 9), (9001, -1)]


def test_confluent_offsets(broker, timed_topic):
    topic, base = timed_topic
    c = clients.confluent_consumer(broker.bootstrap)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False) == (0, N)
        # One partition per request: a ListOffsets request naming a partition twice is invalid.
        for d, expected in CASES:
            (r,) = c.offsets_for_times([TopicPartition(topic, 0, base + d)], timeout=10)
            assert (r.offset, r.error) == (expected, None), d
    finally:
        c.close()

    admin = clients.confluent_admin(broker.bootstrap)
    tp = TopicPartition(topic, 0)
    for spec, offset, ts in [(OffsetSpec.earliest(), 0, None), (OffsetSpec.latest(), N, None),
                             (OffsetSpec.for_timestamp(base + 2500), 3, base + 3000),
                             (OffsetSpec.max_timestamp(), N - 1, base + 9000)]:
        info = admin.list_offsets({tp: spec}, request_timeout=15)[tp].result(timeout=20)
        assert info.offset == offset, spec
        if ts is not None:
            assert info.timestamp == ts, spec


def test_kafka_python_offsets(broker, timed_topic):
    from kafka import TopicPartition as KTP
    topic, base = timed_topic
    c = clients.kp_consumer(broker.bootstrap)
    try:
        tp = KTP(topic, 0)
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: N}
        for d, expected in CASES:
            res = c.offsets_for_times({tp: base + d})[tp]
            if expected < 0:
                assert res is None, d
            else:
                assert (res.offset, res.timestamp) == (expected, base + 1000 * expected), d
    finally:
        c.close()


def test_aiokafka_offsets(broker, timed_topic):
    topic, base = timed_topic

    async def run():
        from aiokafka import AIOKafkaConsumer, TopicPartition as ATP
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, request_timeout_ms=10000)
        await c.start()
        try:
            tp = ATP(topic, 0)
            assert await c.beginning_offsets([tp]) == {tp: 0}
            assert await c.end_offsets([tp]) == {tp: N}
            for d, expected in CASES:
                res = (await c.offsets_for_times({tp: base + d}))[tp]
                if expected < 0:
                    assert res is None, d
                else:
                    assert (res.offset, res.timestamp) == (expected, base + 1000 * expected), d
        finally:
            await c.stop()

    clients.run_async(run())


def test_kcat_offsets_query(broker, timed_topic):
    topic, base = timed_topic
    for d, expected in [(2500, 3), (0, 0), (9000, 9)]:
        out = clients.kcat(["-Q", "-b", broker.bootstrap, "-t", f"{topic}:0:{base + d}"]).stdout.decode()
        m = re.search(r"\[0\]\s+offset\s+(-?\d+)", out)
        assert m, out
        assert int(m.group(1)) == expected, (d, out)
    # -o -3: the last three records
    got = clients.kcat(["-C", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-o", "-3", "-e", "-q",
                        "-f", "%o:%s\n"]).stdout.decode().splitlines()
    assert got == ["7:v7", "8:v8", "9:v9"]


def test_empty_partition_offsets(broker, topic):
    from confluent_kafka.admin import NewTopic
    admin = clients.confluent_admin(broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=15)[topic].result(timeout=20)
    assert clients.confluent_watermarks(broker.bootstrap, topic) == (0, 0)
    c = clients.confluent_consumer(broker.bootstrap)
    try:
        (r,) = c.offsets_for_times([TopicPartition(topic, 0, 0)], timeout=10)
        assert r.offset == -1
    finally:
        c.close()


# ------------------------------------------------------------------------ DeleteRecords

def test_confluent_delete_records(broker, topic):
    recs = [{"key": b"k%d" % i, "value": b"v%d" % i} for i in range(20)]
    clients.confluent_produce(broker.bootstrap, topic, recs[:8], **{"linger.ms": 100})
    clients.confluent_produce(broker.bootstrap, topic, recs[8:], **{"linger.ms": 100})
    admin = clients.confluent_admin(broker.bootstrap)
    tp = TopicPartition(topic, 0, 5)  # inside the first batch
    res = admin.delete_records([tp], request_timeout=15)[tp].result(timeout=20)
    assert res.low_watermark == 5
    assert clients.confluent_watermarks(broker.bootstrap, topic) == (5, 20)
    # consumers reading from "earliest" start at the new log start offset, record-exact
    c = clients.confluent_consumer(broker.bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
        first = None
        deadline = time.monotonic() + 15
        while first is None and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                first = m
        assert first is not None
        assert (first.offset(), first.value()) == (5, b"v5")
    finally:
        c.close()
    got = clients.kp_consume(broker.bootstrap, topic, 0, 15, start=5)
    assert [m.value for m in got] == [r["value"] for r in recs[5:]]
    # earliest via ListOffsets in other clients
    from kafka import TopicPartition as KTP
    kc = clients.kp_consumer(broker.bootstrap)
    try:
        assert kc.beginning_offsets([KTP(topic, 0)]) == {KTP(topic, 0): 5}
    finally:
        kc.close()
    # cannot delete past the high watermark: OFFSET_OUT_OF_RANGE (1)
    tp = TopicPartition(topic, 0, 21)
    with pytest.raises(KafkaException) as e:
        admin.delete_records([tp], request_timeout=15)[tp].result(timeout=20)
    assert e.value.args[0].code() == 1
    # -1 (OFFSET_END) deletes everything up to the high watermark
    tp = TopicPartition(topic, 0, -1)
    res = admin.delete_records([tp], request_timeout=15)[tp].result(timeout=20)
    assert res.low_watermark == 20
    assert clients.confluent_watermarks(broker.bootstrap, topic) == (20, 20)
    # and the log continues at 20
    delivered = clients.confluent_produce(broker.bootstrap, topic, [{"key": b"k", "value": b"after"}])
    assert delivered[0].offset() == 20


def test_kafka_python_delete_records(broker, topic):
    from kafka import KafkaAdminClient, TopicPartition as KTP
    clients.kp_produce(broker.bootstrap, topic, [{"key": b"k", "value": b"v%d" % i} for i in range(10)])
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        res = admin.delete_records({KTP(topic, 0): 7})
        assert res[KTP(topic, 0)]["low_watermark"] == 7
    finally:
        admin.close()
    assert clients.confluent_watermarks(broker.bootstrap, topic) == (7, 10)
    got = clients.aio_consume(broker.bootstrap, topic, 0, 3, start=7)
    assert [m.value for m in got] == [b"v7", b"v8", b"v9"]
