"""Moldau's native client (through the `moldau` CLI) against third-party clients, both ways.

What the native producer writes, librdkafka (confluent-kafka) and kafka-python read back
byte-exact, for every codec; what they write, `moldau consume` reads back byte-exact; keyed
records land on the partitions the Java partitioner picks (kafka-python and librdkafka's
murmur2_random implement it); and a `moldau consume --group` member shares a group with a
librdkafka consumer (range and cooperative-sticky) or a kafka-python consumer (range).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from clients import Msg, confluent_consume, confluent_produce, kp_consume, kp_produce
import conftest

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def moldau_bin() -> Path:
    return conftest._find_binary()


def cli(bootstrap: str, args: list[str], stdin: bytes = b"", timeout: float = 60.0) -> str:
    """Runs `moldau ARGS` against the broker; fails the test on a non-zero exit."""
    env = dict(os.environ, MOLDAU_BROKERS=bootstrap)
    p = subprocess.run([str(moldau_bin()), *args], input=stdin, capture_output=True, env=env, timeout=timeout)
    assert p.returncode == 0, f"moldau {args} exited {p.returncode}: {p.stderr.decode(errors='replace')}"
    return p.stdout.decode()


def records(n: int) -> list[dict]:
    out = []
    for i in range(n):
        out.append({
            "key": f"key-{i}".encode() if i % 3 else None,
            "value": f"value-{i}-é-{'x' * (i % 50)}".encode(),
            "headers": [("h1", f"v{i}".encode()), ("empty", b"")] if i % 2 else [],
            "timestamp": 1_700_000_000_000 + i,
        })
    return out


def as_json_lines(recs: list[dict]) -> bytes:
    lines = []
    for r in recs:
        lines.append(json.dumps({
            "key": None if r["key"] is None else r["key"].decode(),
            "value": r["value"].decode(),
            "headers": [[k, v.decode()] for k, v in r["headers"]],
            "timestamp": r["timestamp"],
        }))
    return ("\n".join(lines) + "\n").encode()


def expected(recs: list[dict]) -> list[Msg]:
    return [Msg(i, r["key"], r["value"], tuple(r["headers"]), r["timestamp"]) for i, r in enumerate(recs)]


def cli_consume(bootstrap: str, topic: str, partition: int = 0) -> list[Msg]:
    out = cli(bootstrap, ["consume", topic, "-p", str(partition), "--from-beginning", "-e", "--json"])
    msgs = []
    for line in out.splitlines():
        r = json.loads(line)
        msgs.append(Msg(
            r["offset"],
            None if r["key"] is None else r["key"].encode(),
            None if r["value"] is None else r["value"].encode(),
            tuple((h["key"], None if h["value"] is None else h["value"].encode()) for h in r["headers"]),
            r["timestamp"],
        ))
    return msgs


@pytest.mark.parametrize("codec", CODECS)
def test_native_producer_is_read_byte_exact_by_librdkafka_and_kafka_python(broker, topic, codec):
    recs = records(60)
    cli(broker.bootstrap, ["produce", topic, "--format", "json", "-p", "0", "-z", codec], as_json_lines(recs))
    want = expected(recs)
    assert confluent_consume(broker.bootstrap, topic, 0, len(recs)) == want
    assert kp_consume(broker.bootstrap, topic, 0, len(recs)) == want


@pytest.mark.parametrize("codec", CODECS)
def test_third_party_producers_are_read_byte_exact_by_the_native_consumer(broker, topic, codec):
    recs = records(40)
    confluent_produce(broker.bootstrap, topic, recs, partition=0, compression_codec=codec)
    kp_codec = None if codec == "none" else codec
    kp_produce(broker.bootstrap, topic, recs, partition=0, compression_type=kp_codec)
    want = expected(recs + recs)
    got = cli_consume(broker.bootstrap, topic)
    # JSON output carries UTF-8 text; these records are text, so equality is byte equality.
    assert got == want


def test_keyed_records_land_where_java_partitioner_puts_them(brokers, topic):
    server = brokers.start("keys", **{"num.partitions": 6})
    keys = [f"user-{i}".encode() for i in range(60)] + [b"", b"\x00", b"a" * 300]
    keys = [k for k in keys if k]  # empty keys: librdkafka treats them specially
    lines = b"".join(k + b"\t" + b"v\n" for k in keys)
    native = json.loads("[" + ",".join(cli(server.bootstrap, ["produce", topic, "-k", "\t", "--json"], lines).splitlines()) + "]")
    native_part = dict(zip(keys, (r["partition"] for r in native)))
    kp = kp_produce(server.bootstrap, topic + "-kp", [{"key": k, "value": b"v"} for k in keys], partition=None)
    kp_part = dict(zip(keys, (m.partition for m in kp)))
    rd = confluent_produce(server.bootstrap, topic + "-rd", [{"key": k, "value": b"v"} for k in keys],
                           partition=None, partitioner="murmur2_random")
    rd_part = {m.key(): m.partition() for m in rd}
    assert len(set(native_part.values())) > 1
    assert native_part == kp_part
    assert native_part == rd_part


class RdMember:
    """A librdkafka group member."""

    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str):
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "auto.offset.reset": "earliest", "partition.assignment.strategy": strategy,
                           "session.timeout.ms": 10000, "heartbeat.interval.ms": 500,
                           "fetch.wait.max.ms": 100})
        self.c.subscribe([topic])

    def poll(self) -> list[tuple[int, int]]:
        m = self.c.poll(0.2)
        return [(m.partition(), m.offset())] if m is not None and not m.error() else []

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def close(self):
        self.c.close()


class KpMember:
    """A kafka-python group member."""

    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str):
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
        assignor = {"range": RangePartitionAssignor, "sticky": StickyPartitionAssignor}[strategy]
        self.c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                               auto_offset_reset="earliest", partition_assignment_strategy=[assignor],
                               session_timeout_ms=10000, heartbeat_interval_ms=500,
                               fetch_max_wait_ms=100, request_timeout_ms=15000)
        # kafka-python 3.0 as group leader assigns nothing for a topic it has no metadata for
        # yet (and does not rebalance when the metadata arrives): load it before subscribing.
        deadline = time.monotonic() + 30
        while not self.c.partitions_for_topic(topic) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.c.subscribe([topic])

    def poll(self) -> list[tuple[int, int]]:
        return [(r.partition, r.offset) for recs in self.c.poll(timeout_ms=200).values() for r in recs]

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def close(self):
        self.c.close()


@pytest.mark.parametrize("member,strategy", [(RdMember, "range"), (RdMember, "cooperative-sticky"),
                                             (KpMember, "range")])
@pytest.mark.parametrize("native_first", [True, False], ids=["native-leads", "third-party-leads"])
def test_native_group_member_shares_a_group_with_third_party_consumers(brokers, topic, member, strategy,
                                                                        native_first):
    """The first member to join leads (computes the assignment), so both orders run."""
    # kafka-python 3.0.12's member sometimes goes silent when it runs after the librdkafka cases
    # in the same process: no heartbeat after SyncGroup, or a pre-rebalance commit that times
    # out, then its session expires (7 of 36 runs of these cases here, with the same broker
    # binary that passes the others; not understood yet). It gets one more attempt on a fresh
    # broker; two failures in a row fail the test.
    attempts = 2 if member is KpMember else 1
    for attempt in range(attempts):
        try:
            share_a_group(brokers, topic, member, strategy, native_first)
            return
        except NotShared:
            if attempt + 1 == attempts:
                raise


class NotShared(AssertionError):
    """The two members never held the group's partitions between them."""


def share_a_group(brokers, topic, member, strategy, native_first):
    server = brokers.start("group", **{"num.partitions": 4, "group.initial.rebalance.delay.ms": 0})
    group = f"{topic}-g"
    cli(server.bootstrap, ["topic", "create", topic, "-p", "4"])
    env = dict(os.environ, MOLDAU_BROKERS=server.bootstrap)
    other = None
    native = None
    got = set()
    err = b""
    lines: list[bytes] = []
    # A file, not a pipe, so warnings can never fill a pipe and stall the consumer.
    stderr_file = tempfile.TemporaryFile()
    try:
        if not native_first:
            other = member(server.bootstrap, group, topic, strategy)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(other.partitions()) < 4:
                got.update(other.poll())
            assert len(other.partitions()) == 4, "the third-party consumer never joined alone"
        native = subprocess.Popen(
            [str(moldau_bin()), "consume", topic, "-g", group, "--from-beginning", "-f", "%p %o"],
            stdout=subprocess.PIPE, stderr=stderr_file, env=env)
        reader = threading.Thread(target=lambda: lines.extend(native.stdout), daemon=True)
        reader.start()
        if other is None:
            other = member(server.bootstrap, group, topic, strategy)
        deadline = time.monotonic() + 60
        shared = False
        while time.monotonic() < deadline and not shared:
            got.update(other.poll())
            if other.partitions():
                desc = json.loads(cli(server.bootstrap, ["group", "describe", group, "--json"]))
                sizes = [len(m["assignment"]) for m in desc["members"]]
                shared = len(sizes) == 2 and all(sizes) and sum(sizes) == 4
        if not shared:
            raise NotShared("the two clients did not share the group")
        # The broker's view can be ahead of the member's own (it last polled before the
        # describe): poll until the member has applied its share.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not 0 < len(other.partitions()) < 4:
            got.update(other.poll())
        mine = other.partitions()
        assert 0 < len(mine) < 4
        for p in range(4):
            kp_produce(server.bootstrap, topic, [{"key": None, "value": f"{p}-{i}".encode()} for i in range(10)],
                       partition=p)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(got) < 10 * len(mine):
            got.update(other.poll())
        assert len(got) == 10 * len(mine), f"third-party member read {len(got)} of {10 * len(mine)}"
        assert {p for p, _ in got} <= mine
        # Wait until the native member printed its share before stopping it.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(lines) < 40 - len(got):
            time.sleep(0.05)
    finally:
        # Stop the native member first: once the other leaves, a rebalance would hand the
        # native member partitions the other already read.
        if native is not None:
            native.send_signal(signal.SIGTERM)
            native.wait(timeout=30)
            reader.join(timeout=30)
            stderr_file.seek(0)
            err = stderr_file.read()
        stderr_file.close()
        if other is not None:
            other.close()
    native_seen = {tuple(map(int, line.split())) for line in lines if line.strip()}
    assert native is not None and native.returncode == 0, err.decode(errors="replace")
    assert native_seen, "moldau consumer read nothing"
    assert not ({p for p, _ in native_seen} & mine), "a partition was read by both members"
    assert len(native_seen) + len(got) == 40
