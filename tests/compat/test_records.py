"""Record-level validation and fetch sizing: timestamp bounds (message.timestamp.after/before.max.ms
-> INVALID_TIMESTAMP), fetch limits smaller than one batch (KIP-74: the first batch is returned
whole), one consumer over several partitions, and producer sequence checks on the raw wire."""

from __future__ import annotations

import random
import time

import pytest
from confluent_kafka import KafkaError, TopicPartition
from confluent_kafka.admin import NewTopic

import clients
import kwire

INVALID_TIMESTAMP = 32
OUT_OF_ORDER_SEQUENCE_NUMBER = 45


def _produce_errors(bootstrap, topic, records, **conf):
    p = clients.confluent_producer(bootstrap, retries=0, **conf)
    results = []
    for r in records:
        p.produce(topic, key=r.get("key"), value=r.get("value"), partition=0, timestamp=r.get("timestamp", 0),
                  on_delivery=lambda e, m: results.append(e))
    assert p.flush(20) == 0
    return results


def test_timestamp_too_far_in_future(broker, topic):
    """Default message.timestamp.after.max.ms is one hour (Kafka 4)."""
    now = int(time.time() * 1000)
    clients.confluent_produce(broker.bootstrap, topic, [{"value": b"seed"}])
    errs = _produce_errors(broker.bootstrap, topic, [{"value": b"future", "timestamp": now + 3 * 3600_000}])
    assert errs[0] is not None and errs[0].code() == INVALID_TIMESTAMP, errs
    from kafka.errors import InvalidTimestampError
    with pytest.raises(InvalidTimestampError):
        clients.kp_produce(broker.bootstrap, topic, [{"value": b"future", "timestamp": now + 3 * 3600_000}], retries=0)
    # within the hour is fine
    ok = clients.confluent_produce(broker.bootstrap, topic, [{"value": b"soon", "timestamp": now + 600_000}])
    assert ok[0].offset() == 1
    assert clients.confluent_watermarks(broker.bootstrap, topic) == (0, 2)


def test_timestamp_too_old_for_topic(broker, topic):
    admin = clients.confluent_admin(broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, config={"message.timestamp.before.max.ms": "60000"})],
                        request_timeout=15)[topic].result(timeout=20)
    now = int(time.time() * 1000)
    errs = _produce_errors(broker.bootstrap, topic, [{"value": b"old", "timestamp": now - 3600_000}])
    assert errs[0] is not None and errs[0].code() == INVALID_TIMESTAMP, errs
    ok = clients.confluent_produce(broker.bootstrap, topic, [{"value": b"fresh", "timestamp": now - 1000}])
    assert ok[0].offset() == 0


def test_fetch_limits_smaller_than_a_batch(broker, topic):
    """KIP-74: with fetch limits below the size of the next batch the broker still returns that one
    batch whole (and only it), so consumers with small limits make progress."""
    rnd = random.Random(7)
    recs = [{"key": b"%d" % i, "value": rnd.randbytes(20_000)} for i in range(12)]
    p = clients.confluent_producer(broker.bootstrap, **{"linger.ms": 0})
    for r in recs:  # one batch per record
        p.produce(topic, key=r["key"], value=r["value"], partition=0)
        assert p.flush(20) == 0

    with kwire.connect(broker.address) as sock:
        part = kwire.fetch_v4(sock, topic, 0, 3, max_bytes=1024)
    assert part.error_code == 0
    batches = kwire.parse_batches(part.records or b"")
    assert [(b.base_offset, b.record_count) for b in batches] == [(3, 1)]
    assert len(part.records) == 12 + batches[0].length, "only the first batch, whole"

    c = clients.confluent_consumer(broker.bootstrap, **{
        "fetch.max.bytes": 1024, "max.partition.fetch.bytes": 1024, "message.max.bytes": 1000,
        "receive.message.max.bytes": 1_000_000})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 12 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
        assert got == [r["value"] for r in recs]
    finally:
        c.close()
    kc = clients.kp_consumer(broker.bootstrap, max_partition_fetch_bytes=1024, fetch_max_bytes=1024)
    try:
        from kafka import TopicPartition as KTP
        tp = KTP(topic, 0)
        kc.assign([tp])
        kc.seek(tp, 0)
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 12 and time.monotonic() < deadline:
            for batch in kc.poll(timeout_ms=200).values():
                got.extend(r.value for r in batch)
        assert got == [r["value"] for r in recs]
    finally:
        kc.close()


def test_one_consumer_many_partitions(broker3, topic):
    recs = {p: [{"key": b"p%d" % p, "value": b"%d-%d" % (p, i)} for i in range(30 + 5 * p)] for p in range(3)}
    for p, rs in recs.items():
        clients.confluent_produce(broker3.bootstrap, topic, rs, partition=p)
    c = clients.confluent_consumer(broker3.bootstrap)
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(3)])
        got = {0: [], 1: [], 2: []}
        deadline = time.monotonic() + 20
        while sum(map(len, got.values())) < 105 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got[m.partition()].append((m.offset(), m.value()))
        for p in range(3):
            assert got[p] == [(i, r["value"]) for i, r in enumerate(recs[p])], p
    finally:
        c.close()

    async def aio():
        from aiokafka import AIOKafkaConsumer, TopicPartition as ATP
        ac = AIOKafkaConsumer(bootstrap_servers=broker3.bootstrap, group_id=None, auto_offset_reset="earliest",
                              request_timeout_ms=10000, fetch_max_wait_ms=100)
        await ac.start()
        try:
            ac.assign([ATP(topic, p) for p in range(3)])
            out = {0: [], 1: [], 2: []}
            deadline = time.monotonic() + 20
            while sum(map(len, out.values())) < 105 and time.monotonic() < deadline:
                for tp, batch in (await ac.getmany(timeout_ms=200)).items():
                    out[tp.partition].extend(r.value for r in batch)
            return out
        finally:
            await ac.stop()

    out = clients.run_async(aio())
    for p in range(3):
        assert out[p] == [r["value"] for r in recs[p]], p


def test_sequence_gap_is_out_of_order(broker, topic):
    """An idempotent producer's batch that skips sequence numbers is refused."""
    clients.confluent_produce(broker.bootstrap, topic, [{"value": b"v"}], **{"enable.idempotence": True})
    (b,) = kwire.fetch_all_batches(broker.address, topic, 0)
    assert b.producer_id >= 0 and b.base_sequence == 0
    ts = int(time.time() * 1000)
    gap = kwire.record_batch([kwire.Rec(None, b"gap")], ts, producer_id=b.producer_id,
                             producer_epoch=b.producer_epoch, base_sequence=5)
    nxt = kwire.record_batch([kwire.Rec(None, b"next")], ts, producer_id=b.producer_id,
                             producer_epoch=b.producer_epoch, base_sequence=1)
    with kwire.connect(broker.address) as sock:
        res = kwire.produce_v7(sock, topic, 0, gap)
        assert res.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER, res
        res = kwire.produce_v7(sock, topic, 0, nxt, correlation_id=12)
        assert (res.error_code, res.base_offset) == (0, 1)
    assert clients.confluent_watermarks(broker.bootstrap, topic) == (0, 2)


def test_client_base_offset_is_replaced(broker, topic):
    """The broker assigns offsets whatever base offset the producer wrote into the batch."""
    clients.confluent_produce(broker.bootstrap, topic, [{"value": b"first"}])
    batch = bytearray(kwire.record_batch([kwire.Rec(b"a", b"1"), kwire.Rec(b"b", b"2")], int(time.time() * 1000)))
    batch[0:8] = (123456).to_bytes(8, "big")  # base offset is not covered by the CRC
    with kwire.connect(broker.address) as sock:
        res = kwire.produce_v7(sock, topic, 0, bytes(batch))
    assert (res.error_code, res.base_offset) == (0, 1)
    got = clients.kp_consume(broker.bootstrap, topic, 0, 3)
    assert [(m.offset, m.value) for m in got] == [(0, b"first"), (1, b"1"), (2, b"2")]
    batches = kwire.fetch_all_batches(broker.address, topic, 0)
    assert [(b.base_offset, b.record_count, b.crc_ok) for b in batches] == [(0, 1, True), (1, 2, True)]
