"""Thin, bounded helpers around the third-party clients: produce a list of records, read a
partition back, normalised to `Msg` tuples so tests can compare byte-exactly across clients.

Consumers never use consumer groups (the broker has none yet): confluent-kafka uses assign()
with an explicit start offset and auto-commit off, kafka-python and aiokafka use group_id=None,
kcat -C is group-less.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from typing import NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

CLIENT_TIMEOUT_S = 20.0


class Msg(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple
    timestamp: int


def _headers(h) -> tuple:
    return tuple((k, None if v is None else bytes(v)) for k, v in (h or ()))


# ------------------------------------------------------------------------- confluent-kafka

def confluent_admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def _rdkafka_conf(conf: dict) -> dict:
    # Python keyword names (compression_type) -> librdkafka property names (compression.type).
    return {k.replace("_", "."): v for k, v in conf.items()}


def confluent_producer(bootstrap: str, **conf) -> Producer:
    base = {"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 15000,
            "socket.timeout.ms": 10000}
    base.update(_rdkafka_conf(conf))
    return Producer(base)


def confluent_produce(bootstrap: str, topic: str, records, partition: int | None = 0, **conf) -> list:
    """Produce `records` (dicts: key, value, headers, timestamp) and return delivered messages.
    Raises on any delivery error."""
    p = confluent_producer(bootstrap, **conf)
    delivered, errors = [], []

    def on_delivery(err, msg):
        (errors if err else delivered).append((err, msg))

    for r in records:
        kwargs = dict(key=r.get("key"), value=r.get("value"), on_delivery=on_delivery)
        if partition is not None:
            kwargs["partition"] = partition
        if r.get("headers"):
            kwargs["headers"] = list(r["headers"])
        if r.get("timestamp") is not None:
            kwargs["timestamp"] = r["timestamp"]
        p.produce(topic, **kwargs)
        p.poll(0)
    remaining = p.flush(CLIENT_TIMEOUT_S)
    assert remaining == 0, f"{remaining} messages still queued after flush"
    if errors:
        raise AssertionError(f"delivery errors: {[str(e) for e, _ in errors[:5]]}")
    return [m for _, m in delivered]


def confluent_consumer(bootstrap: str, **conf) -> Consumer:
    base = {"bootstrap.servers": bootstrap, "group.id": "moldau-compat-unused",
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest", "socket.timeout.ms": 10000,
            "fetch.wait.max.ms": 100}
    base.update(_rdkafka_conf(conf))
    return Consumer(base)


def confluent_consume(bootstrap: str, topic: str, partition: int, count: int, start: int = 0,
                      timeout: float = CLIENT_TIMEOUT_S) -> list[Msg]:
    c = confluent_consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, partition, start)])
        out: list[Msg] = []
        errs = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().fatal():
                    raise KafkaException(m.error())
                errs.append(str(m.error()))
                continue
            out.append(Msg(m.offset(), m.key(), m.value(), _headers(m.headers()), m.timestamp()[1]))
        assert len(out) == count, f"confluent consumer got {len(out)}/{count} messages; errors: {errs[:5]}"
        return out
    finally:
        c.close()


def confluent_watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    c = confluent_consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    finally:
        c.close()


# ------------------------------------------------------------------------- kafka-python

def kp_produce(bootstrap: str, topic: str, records, partition: int | None = 0, **conf) -> list:
    from kafka import KafkaProducer
    base = dict(bootstrap_servers=bootstrap, linger_ms=5, request_timeout_ms=10000, max_block_ms=15000)
    base.update(conf)
    p = KafkaProducer(**base)
    try:
        futures = [p.send(topic, key=r.get("key"), value=r.get("value"), partition=partition,
                          headers=list(r.get("headers") or []) or None, timestamp_ms=r.get("timestamp"))
                   for r in records]
        p.flush(timeout=CLIENT_TIMEOUT_S)
        return [f.get(timeout=CLIENT_TIMEOUT_S) for f in futures]
    finally:
        p.close(timeout=5)


def kp_consumer(bootstrap: str, **conf):
    from kafka import KafkaConsumer
    base = dict(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                auto_offset_reset="earliest", request_timeout_ms=10000, fetch_max_wait_ms=100)
    base.update(conf)
    return KafkaConsumer(**base)


def kp_consume(bootstrap: str, topic: str, partition: int, count: int, start: int = 0,
               timeout: float = CLIENT_TIMEOUT_S) -> list[Msg]:
    from kafka import TopicPartition as KTP
    c = kp_consumer(bootstrap)
    try:
        tp = KTP(topic, partition)
        c.assign([tp])
        c.seek(tp, start)
        out: list[Msg] = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                out.extend(Msg(r.offset, r.key, r.value, _headers(r.headers), r.timestamp) for r in recs)
        assert len(out) == count, f"kafka-python consumer got {len(out)}/{count}"
        return out
    finally:
        c.close()


# ------------------------------------------------------------------------- aiokafka

def run_async(coro, timeout: float = 60.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def aio_produce_async(bootstrap: str, topic: str, records, partition: int | None = 0, **conf):
    from aiokafka import AIOKafkaProducer
    base = dict(bootstrap_servers=bootstrap, linger_ms=5, request_timeout_ms=10000)
    base.update(conf)
    p = AIOKafkaProducer(**base)
    await p.start()
    try:
        futs = [await p.send(topic, key=r.get("key"), value=r.get("value"), partition=partition,
                             headers=list(r.get("headers") or []) or None,
                             timestamp_ms=r.get("timestamp"))
                for r in records]
        return [await f for f in futs]
    finally:
        await p.stop()


def aio_produce(bootstrap: str, topic: str, records, partition: int | None = 0, **conf):
    return run_async(aio_produce_async(bootstrap, topic, records, partition, **conf))


async def aio_consume_async(bootstrap: str, topic: str, partition: int, count: int, start: int = 0,
                            timeout: float = CLIENT_TIMEOUT_S) -> list[Msg]:
    from aiokafka import AIOKafkaConsumer, TopicPartition as ATP
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", request_timeout_ms=10000, fetch_max_wait_ms=100)
    await c.start()
    try:
        tp = ATP(topic, partition)
        c.assign([tp])
        c.seek(tp, start)
        out: list[Msg] = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            batch = await c.getmany(tp, timeout_ms=200)
            for recs in batch.values():
                out.extend(Msg(r.offset, r.key, r.value, _headers(r.headers), r.timestamp) for r in recs)
        assert len(out) == count, f"aiokafka consumer got {len(out)}/{count}"
        return out
    finally:
        await c.stop()


def aio_consume(bootstrap: str, topic: str, partition: int, count: int, start: int = 0) -> list[Msg]:
    return run_async(aio_consume_async(bootstrap, topic, partition, count, start))


# ------------------------------------------------------------------------- kcat

def kcat(args: list[str], input_bytes: bytes | None = None, timeout: float = 30.0,
         check: bool = True) -> subprocess.CompletedProcess:
    stdin = {"input": input_bytes} if input_bytes is not None else {"stdin": subprocess.DEVNULL}
    proc = subprocess.run(["kcat", *args], capture_output=True, timeout=timeout, **stdin)
    if check and proc.returncode != 0:
        raise AssertionError(f"kcat {args} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}")
    return proc


def kcat_consume_json(bootstrap: str, topic: str, partition: int, count: int) -> list[dict]:
    proc = kcat(["-C", "-b", bootstrap, "-t", topic, "-p", str(partition), "-o", "beginning",
                 "-c", str(count), "-e", "-J", "-q"])
    lines = [json.loads(l) for l in proc.stdout.decode().splitlines() if l.strip()]
    assert len(lines) == count, f"kcat read {len(lines)}/{count}: {proc.stderr.decode(errors='replace')}"
    return lines


# --- SASL logins, shared by the security CLI tests on Moldau and on Apache Kafka -------------

def rdkafka_sasl_plaintext(mechanism: str, user: str, password: str) -> dict:
    """confluent-kafka settings for a SASL_PLAINTEXT login (PLAIN or SCRAM-SHA-256/512)."""
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def confluent_produce_error(bootstrap: str, topic: str, sec: dict):
    """The error of one confluent-kafka produce to partition 0 (None when delivered)."""
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 15000,
                  "allow.auto.create.topics": False, **sec})
    try:
        p.produce(topic, b"v", partition=0, on_delivery=lambda err, msg: errors.append(err))
    except KafkaException as e:
        return e.args[0]
    p.flush(30)
    return errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT)


def authentication_error(bootstrap: str, sec: dict, deadline_s: float = 30.0):
    """librdkafka's authentication error for these credentials (None if it logs in)."""
    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "error_cb": errors.append, **sec})
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        p.poll(0.2)
        auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        if auth:
            return auth[0]
        try:
            p.list_topics(timeout=1)
            return None  # Metadata answered: it logged in.
        except KafkaException:
            pass
    raise AssertionError(f"neither logged in nor refused within {deadline_s}s: {errors}")
