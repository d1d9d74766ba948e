"""Produce with every codec through every client, read back byte-exact (keys, values, headers,
timestamps, null key, null value), and check the batches stored by the broker really carry the
codec (raw Fetch: magic 2, compression bits) - a broker must keep producer batches as sent."""

from __future__ import annotations

import time

import pytest

import clients
import kwire
from clients import Msg

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def sample_records(base_ts: int) -> list[dict]:
    text = b"moldau compat payload; " * 40  # compressible, so every codec really compresses
    return [
        {"key": b"key-0", "value": b"value-0 " + text, "headers": [("h1", b"a"), ("h1", b"b"), ("h2", b"\x00\xff")], "timestamp": base_ts},
        {"key": None, "value": b"null key " + text, "headers": [], "timestamp": base_ts + 1},
        {"key": b"null-value", "value": None, "headers": [("only", b"header")], "timestamp": base_ts + 2},
        {"key": bytes(range(256)), "value": bytes(range(256)) * 8, "headers": [], "timestamp": base_ts + 3},
        {"key": b"key-4", "value": b"\xe2\x98\x83 utf8 snowman " + text, "headers": [("k\xe9y", b"v")], "timestamp": base_ts + 10_000},
        {"key": b"key-5", "value": text * 50, "headers": [], "timestamp": base_ts - 5_000},
    ]


def expected_msgs(records) -> list[Msg]:
    return [Msg(i, r["key"], r["value"], tuple(r["headers"]), r["timestamp"]) for i, r in enumerate(records)]


def assert_codec(broker, topic: str, codec: str, count: int) -> None:
    batches = kwire.fetch_all_batches(broker.address, topic, 0)
    assert batches, "no batches stored"
    assert {b.magic for b in batches} == {2}
    assert all(b.crc_ok for b in batches), "broker returned a batch with a bad CRC"
    assert {b.compression for b in batches} == {CODECS[codec]}, [b.compression for b in batches]
    assert sum(b.record_count for b in batches) == count
    assert {b.timestamp_type for b in batches} == {0}, "CreateTime expected"


# librdkafka decides per broker, from ApiVersions, whether it may compress; when it may not, it
# logs "Broker does not support compression type X: not compressing batch" and sends the batch
# uncompressed. Measured against moldau with `-d feature,msg`:
#  - librdkafka 2.16 (confluent-kafka): lz4 needs FindCoordinator v0 advertised (its "LZ4" feature,
#    a Kafka 0.8.2 marker); zstd needs Produce v7 + Fetch v10; gzip/snappy always work.
#  - librdkafka 2.0.2 (Debian's kcat 1.7.1): gzip, snappy and lz4 need the "MsgVer1" feature,
#    i.e. Produce v2 and Fetch v2 advertised - which Kafka 4.x (floors Produce v3, Fetch v4) and
#    moldau do not, so old kcat sends those uncompressed to Kafka 4 too; lz4 also needs "LZ4".
def _supports(keys: dict, api_key: int, version: int) -> bool:
    r = keys.get(api_key)
    return r is not None and r.min_version <= version <= r.max_version


def librdkafka_wire_codec(broker, client: str, codec: str) -> str:
    if codec == "none":
        return codec
    with kwire.connect(broker.address) as sock:
        keys = {k.api_key: k for k in kwire.api_versions(sock).api_keys}
    lz4_feature = _supports(keys, 10, 0)
    zstd_feature = _supports(keys, 0, 7) and _supports(keys, 1, 10)
    msgver1 = _supports(keys, 0, 2) and _supports(keys, 1, 2)
    if client == "confluent":
        ok = {"gzip": True, "snappy": True, "lz4": lz4_feature, "zstd": zstd_feature}[codec]
    else:
        ok = {"gzip": msgver1, "snappy": msgver1, "lz4": msgver1 and lz4_feature, "zstd": zstd_feature}[codec]
    return codec if ok else "none"


def kcat_codec(broker, codec: str) -> str:
    return librdkafka_wire_codec(broker, "kcat", codec)


def now_ms() -> int:
    return int(time.time() * 1000) - 60_000


@pytest.mark.parametrize("codec", list(CODECS))
def test_confluent_roundtrip(broker, topic, codec):
    records = sample_records(now_ms())
    delivered = clients.confluent_produce(broker.bootstrap, topic, records, compression_type=codec)
    assert sorted(m.offset() for m in delivered) == list(range(len(records)))
    assert_codec(broker, topic, librdkafka_wire_codec(broker, "confluent", codec), len(records))
    expected = expected_msgs(records)
    assert clients.confluent_consume(broker.bootstrap, topic, 0, len(records)) == expected
    assert clients.kp_consume(broker.bootstrap, topic, 0, len(records)) == expected


@pytest.mark.parametrize("codec", list(CODECS))
def test_kafka_python_roundtrip(broker, topic, codec):
    records = sample_records(now_ms())
    meta = clients.kp_produce(broker.bootstrap, topic, records,
                              compression_type=None if codec == "none" else codec)
    assert [m.offset for m in meta] == list(range(len(records)))
    assert all(m.partition == 0 for m in meta)
    assert_codec(broker, topic, codec, len(records))
    expected = expected_msgs(records)
    assert clients.kp_consume(broker.bootstrap, topic, 0, len(records)) == expected
    assert clients.confluent_consume(broker.bootstrap, topic, 0, len(records)) == expected


@pytest.mark.parametrize("codec", list(CODECS))
def test_aiokafka_roundtrip(broker, topic, codec):
    records = sample_records(now_ms())
    meta = clients.aio_produce(broker.bootstrap, topic, records,
                               compression_type=None if codec == "none" else codec)
    assert [m.offset for m in meta] == list(range(len(records)))
    assert_codec(broker, topic, codec, len(records))
    expected = expected_msgs(records)
    assert clients.aio_consume(broker.bootstrap, topic, 0, len(records)) == expected
    assert clients.confluent_consume(broker.bootstrap, topic, 0, len(records)) == expected


@pytest.mark.parametrize("codec", list(CODECS))
def test_kcat_roundtrip(broker, topic, codec):
    # -K: splits key from value, -Z turns an empty key or value into NULL, -H adds headers
    # to every message. librdkafka sends a batch uncompressed when compressing does not make it
    # smaller, so the four lines must share one batch even on a loaded machine: a long linger
    # (kcat's flush at the end of its input sends at once, it does not wait the linger out).
    lines = [b"k1:v1", b":value-with-null-key", b"key-with-null-value:", b"k4:" + b"x" * 2000]
    args = ["-P", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-K:", "-Z",
            "-H", "h1=one", "-H", "h2=two", "-X", "linger.ms=1000"]
    if codec != "none":
        args += ["-z", codec]
    before = int(time.time() * 1000)
    clients.kcat(args, input_bytes=b"\n".join(lines) + b"\n")
    after = int(time.time() * 1000)
    assert_codec(broker, topic, kcat_codec(broker, codec), len(lines))

    hdrs = (("h1", b"one"), ("h2", b"two"))
    got = clients.confluent_consume(broker.bootstrap, topic, 0, len(lines))
    assert [(m.offset, m.key, m.value, m.headers) for m in got] == [
        (0, b"k1", b"v1", hdrs),
        (1, None, b"value-with-null-key", hdrs),
        (2, b"key-with-null-value", None, hdrs),
        (3, b"k4", b"x" * 2000, hdrs),
    ]
    assert all(before - 1000 <= m.timestamp <= after + 1000 for m in got), [m.timestamp for m in got]

    out = clients.kcat_consume_json(broker.bootstrap, topic, 0, len(lines))
    assert [(o["offset"], o["key"], o["payload"]) for o in out] == [
        (0, "k1", "v1"), (1, None, "value-with-null-key"), (2, "key-with-null-value", None),
        (3, "k4", "x" * 2000)]
    assert all(o["headers"] == ["h1", "one", "h2", "two"] for o in out), out[0]
    assert [o["ts"] for o in out] == [m.timestamp for m in got]
    assert all(o["tstype"] == "create" for o in out)
    assert all(o["partition"] == 0 and o["broker"] == 1 for o in out)

    # -Z on the consumer side prints NULL for null keys and values.
    fmt = clients.kcat(["-C", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-o", "beginning",
                        "-c", "3", "-e", "-q", "-Z", "-f", "%k|%s\n"])
    assert fmt.stdout.decode().splitlines() == ["k1|v1", "NULL|value-with-null-key", "key-with-null-value|NULL"]


def test_cross_client_interleaved(broker, topic):
    """Batches from four producers interleave on one partition; every reader sees one log."""
    base = now_ms()
    pad = b" padding so that compression pays off" * 20
    r1 = [{"key": b"c", "value": b"from confluent" + pad, "headers": [("src", b"confluent")], "timestamp": base}]
    r2 = [{"key": b"k", "value": b"from kafka-python" + pad, "headers": [("src", b"kafka-python")], "timestamp": base + 1}]
    r3 = [{"key": b"a", "value": b"from aiokafka" + pad, "headers": [("src", b"aiokafka")], "timestamp": base + 2}]
    clients.confluent_produce(broker.bootstrap, topic, r1, compression_type="lz4")
    clients.kp_produce(broker.bootstrap, topic, r2, compression_type="gzip")
    clients.aio_produce(broker.bootstrap, topic, r3, compression_type="zstd")
    clients.kcat(["-P", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-K:", "-z", "snappy"],
                 input_bytes=b"kc:from kcat" + pad + b"\n")
    expected = [Msg(0, b"c", b"from confluent" + pad, (("src", b"confluent"),), base),
                Msg(1, b"k", b"from kafka-python" + pad, (("src", b"kafka-python"),), base + 1),
                Msg(2, b"a", b"from aiokafka" + pad, (("src", b"aiokafka"),), base + 2)]
    for reader in (clients.confluent_consume, clients.kp_consume, clients.aio_consume):
        got = reader(broker.bootstrap, topic, 0, 4)
        assert got[:3] == expected, reader.__name__
        assert (got[3].offset, got[3].key, got[3].value) == (3, b"kc", b"from kcat" + pad), reader.__name__
    assert [b.compression for b in kwire.fetch_all_batches(broker.address, topic, 0)] == [
        CODECS[librdkafka_wire_codec(broker, "confluent", "lz4")], 1, 4, CODECS[kcat_codec(broker, "snappy")]]


def test_consume_from_middle_offset(broker, topic):
    """Fetching from an offset inside a compressed batch returns records from that offset on."""
    records = [{"key": b"k%d" % i, "value": b"v%d" % i, "timestamp": now_ms() + i} for i in range(50)]
    clients.confluent_produce(broker.bootstrap, topic, records, compression_type="gzip", **{"linger.ms": 100})
    batches = kwire.fetch_all_batches(broker.address, topic, 0)
    assert sum(b.record_count for b in batches) == 50
    for reader in (clients.confluent_consume, clients.kp_consume, clients.aio_consume):
        got = reader(broker.bootstrap, topic, 0, 13, start=37)
        assert [(m.offset, m.key) for m in got] == [(i, b"k%d" % i) for i in range(37, 50)], reader.__name__


def test_large_message_roundtrip(broker, topic):
    """A ~900 KB value (under the 1 MiB default limit) survives produce and fetch intact."""
    import random
    rnd = random.Random(42)
    big = bytes(rnd.getrandbits(8) for _ in range(900_000))
    clients.confluent_produce(broker.bootstrap, topic, [{"key": b"big", "value": big}])
    clients.kp_produce(broker.bootstrap, topic, [{"key": b"big2", "value": big[::-1]}])
    got = clients.confluent_consume(broker.bootstrap, topic, 0, 2)
    assert got[0].value == big and got[1].value == big[::-1]
    got = clients.aio_consume(broker.bootstrap, topic, 0, 2)
    assert got[0].value == big and got[1].value == big[::-1]


def test_fetch_long_poll_wakes_on_produce(broker, topic):
    """A consumer parked in a long-poll Fetch (max wait 10 s) gets a new record as soon as it is
    appended, not when the wait expires."""
    import threading
    from confluent_kafka import TopicPartition
    clients.confluent_produce(broker.bootstrap, topic, [{"value": b"first"}])
    c = clients.confluent_consumer(broker.bootstrap, **{"fetch.wait.max.ms": 10000})
    try:
        c.assign([TopicPartition(topic, 0, 1)])
        assert c.poll(1.0) is None  # parked at the end of the log
        sent_at = []

        def produce_later():
            sent_at.append(time.monotonic())
            clients.confluent_produce(broker.bootstrap, topic, [{"value": b"second"}])

        t = threading.Timer(1.0, produce_later)
        t.start()
        deadline = time.monotonic() + 15
        msg = None
        while msg is None and time.monotonic() < deadline:
            m = c.poll(0.1)
            if m is not None and not m.error():
                msg = m
        t.join()
        assert msg is not None and msg.value() == b"second"
        latency = time.monotonic() - sent_at[0]
        assert latency < 5.0, f"record arrived {latency:.1f}s after produce: Fetch did not wake on append"
    finally:
        c.close()


def test_log_append_time_topic(broker, topic):
    """message.timestamp.type=LogAppendTime: the broker stamps batches with its clock, sets the
    timestamp-type attribute, and the batch CRC stays valid."""
    from confluent_kafka.admin import NewTopic
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
    admin = clients.confluent_admin(broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, config={"message.timestamp.type": "LogAppendTime"})],
                        request_timeout=15)[topic].result(timeout=20)
    before = int(time.time() * 1000)
    clients.confluent_produce(broker.bootstrap, topic, [{"key": b"k", "value": b"v%d" % i, "timestamp": 1000 + i}
                                                        for i in range(3)], compression_type="gzip")
    clients.kp_produce(broker.bootstrap, topic, [{"key": b"k", "value": b"v3", "timestamp": 5000}])
    after = int(time.time() * 1000)
    batches = kwire.fetch_all_batches(broker.address, topic, 0)
    assert all(b.crc_ok for b in batches)
    assert all(b.timestamp_type == 1 for b in batches)
    assert all(before - 1000 <= b.max_timestamp <= after + 1000 for b in batches), [b.max_timestamp for b in batches]
    c = clients.confluent_consumer(broker.bootstrap)
    try:
        from confluent_kafka import TopicPartition
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 4 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m)
        assert [m.value() for m in got] == [b"v0", b"v1", b"v2", b"v3"]
        for m in got:
            ts_type, ts = m.timestamp()
            assert ts_type == TIMESTAMP_LOG_APPEND_TIME
            assert before - 1000 <= ts <= after + 1000
    finally:
        c.close()
    kp = clients.kp_consume(broker.bootstrap, topic, 0, 4)
    assert all(before - 1000 <= m.timestamp <= after + 1000 for m in kp)
