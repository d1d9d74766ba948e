"""Kafka Connect 4.4 and MirrorMaker 2 on Moldau.

- A distributed Connect worker (config/offset/status topics, compacted) runs Kafka's file source
  and sink connectors, configured through its REST API: data flows file -> topic -> file, and a
  restarted worker resumes from its committed source offsets and sink consumer offsets.
- MirrorMaker 2 (dedicated mode) mirrors a topic and its consumer group's offsets from one
  Moldau cluster to another; a consumer that fails over to the target resumes from the
  translated offsets.

Both run from the reference kit's Connect classpath (`scripts/reference/kafka connect-class ...`):
Kafka Connect 4.3.1, the newest release whose file connectors and MirrorMaker 2 are published.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from conftest import KIT, BrokerPool, KafkaNode
from ports import free_port


class JavaProcess:
    """A long-running Kafka main class (Connect worker, MirrorMaker) started through the kit."""

    def __init__(self, cls: str, config: Path, log: Path):
        self.cls, self.config, self.log_path = cls, config, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> "JavaProcess":
        env = dict(os.environ, MOLDAU_REF_LOG_LEVEL="INFO")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(KIT), "connect-class", self.cls, str(self.config)], stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """SIGTERM (Connect shuts down gracefully, committing offsets), then wait."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            return None

    def log_tail(self, n: int = 8000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return "<no log>"


def wait_until(what: str, timeout: float, cond, proc: JavaProcess | None = None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            pytest.fail(f"{proc.cls} exited while waiting for {what}\n{proc.log_tail()}", pytrace=False)
        try:
            last = cond()
            if last:
                return last
        except Exception as err:  # noqa: BLE001 - keep polling until the deadline
            last = err
        time.sleep(0.5)
    tail = proc.log_tail() if proc is not None else ""
    pytest.fail(f"timed out after {timeout}s waiting for {what} (last: {last!r})\n{tail}", pytrace=False)


def rest(url: str, method: str = "GET", body: dict | None = None, timeout: float = 120):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
        return resp.status, (json.loads(raw) if raw else None)


def topic_config(bootstrap: str, topic: str, key: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    cfg = admin.describe_configs([res])[res].result(timeout=30)
    return cfg[key].value


def count_records(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "counter", "enable.auto.commit": False})
    try:
        md = c.list_topics(topic, timeout=30).topics[topic]
        total = 0
        for p in md.partitions:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            total += hi - lo
        return total
    finally:
        c.close()


def consume_all(bootstrap: str, topic: str, expect: int, timeout: float = 60) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m)
        return out
    finally:
        c.close()


@pytest.fixture
def two_brokers(request, kit_libs, moldau_bin, tmp_path):
    """Two single-node clusters: Moldau, or with MOLDAU_REF_TARGET=kafka two Apache Kafka nodes
    from the kit (to check what Kafka itself does where a test and Moldau disagree)."""
    if os.environ.get("MOLDAU_REF_TARGET") == "kafka":
        nodes = [KafkaNode(tmp_path / "kafka-a").start(), KafkaNode(tmp_path / "kafka-b").start()]
        yield nodes
        for n in nodes:
            n.stop()
        return
    pool = BrokerPool(moldau_bin, tmp_path)
    a = pool.start("a", **{"group.initial.rebalance.delay.ms": 0})
    b = pool.start("b", **{"group.initial.rebalance.delay.ms": 0})
    yield a, b
    problems = pool.stop_all()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def test_connect_distributed_file_source_and_sink(two_brokers, tmp_path):
    broker, _ = two_brokers
    bs = broker.bootstrap
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    worker = tmp_path / "worker.properties"
    worker.write_text("\n".join([
        f"bootstrap.servers={bs}",
        "group.id=moldau-connect",
        "key.converter=org.apache.kafka.connect.storage.StringConverter",
        "value.converter=org.apache.kafka.connect.storage.StringConverter",
        "config.storage.topic=connect-configs",
        "offset.storage.topic=connect-offsets",
        "status.storage.topic=connect-status",
        "config.storage.replication.factor=1",
        "offset.storage.replication.factor=1",
        "status.storage.replication.factor=1",
        "offset.storage.partitions=5",
        "status.storage.partitions=2",
        "offset.flush.interval.ms=1000",
        f"listeners=http://127.0.0.1:{port}",
        "rest.advertised.host.name=127.0.0.1",
        f"rest.advertised.port={port}",
        "scheduled.rebalance.max.delay.ms=5000",
        "",
    ]))
    source_file = tmp_path / "input.txt"
    sink_file = tmp_path / "output.txt"
    first = [f"line {i}: {uuid.uuid4().hex}" for i in range(200)]
    source_file.write_text("".join(line + "\n" for line in first))

    proc = JavaProcess("org.apache.kafka.connect.cli.ConnectDistributed", worker, tmp_path / "connect-1.log").start()
    try:
        # /health answers 200 once the worker has joined its group and read the config topic
        # (503 while starting), so the POSTs below are not stuck behind the startup.
        wait_until("Connect ready", 240, lambda: rest(url + "/health")[0] == 200, proc)
        plugins = [p["class"] for p in rest(url + "/connector-plugins")[1]]
        assert "org.apache.kafka.connect.file.FileStreamSourceConnector" in plugins, plugins
        status, _ = rest(url + "/connectors", "POST", {"name": "file-source", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1", "file": str(source_file), "topic": "connect-lines"}})
        assert status == 201
        status, _ = rest(url + "/connectors", "POST", {"name": "file-sink", "config": {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "tasks.max": "1", "file": str(sink_file), "topics": "connect-lines"}})
        assert status == 201

        def sink_lines():
            return sink_file.read_text().splitlines() if sink_file.exists() else []

        wait_until("the sink file to hold every source line", 180, lambda: len(sink_lines()) >= len(first), proc)
        assert sink_lines() == first
        for name in ("file-source", "file-sink"):
            st = rest(f"{url}/connectors/{name}/status")[1]
            assert st["connector"]["state"] == "RUNNING", st
            assert [t["state"] for t in st["tasks"]] == ["RUNNING"], st
        assert sorted(rest(url + "/connectors")[1]) == ["file-sink", "file-source"]
        # The worker's internal topics are compacted, as Connect requires and created them.
        for t in ("connect-configs", "connect-offsets", "connect-status"):
            assert topic_config(bs, t, "cleanup.policy") == "compact", t
        # Wait for a source offset commit that covers every line before stopping.
        wait_until("the source offset commit", 60, lambda: _source_position(bs) == source_file.stat().st_size, proc)
    finally:
        code = proc.stop()
    assert code in (0, 130, 143), f"Connect worker exit code {code}\n{proc.log_tail()}"
    assert count_records(bs, "connect-lines") == len(first)

    # More lines while the worker is down; a restarted worker resumes from its committed offsets:
    # the source reads only the new lines, the sink appends only them.
    second = [f"more {i}: {uuid.uuid4().hex}" for i in range(50)]
    with source_file.open("a") as f:
        f.write("".join(line + "\n" for line in second))
    proc = JavaProcess("org.apache.kafka.connect.cli.ConnectDistributed", worker, tmp_path / "connect-2.log").start()
    try:
        wait_until("Connect ready after restart", 240, lambda: rest(url + "/health")[0] == 200, proc)
        wait_until("the connectors to come back from the config topic", 120,
                   lambda: sorted(rest(url + "/connectors")[1]) == ["file-sink", "file-source"], proc)
        wait_until("the sink file to hold the new lines", 180,
                   lambda: len(sink_file.read_text().splitlines()) >= len(first) + len(second), proc)
        assert sink_file.read_text().splitlines() == first + second
        assert count_records(bs, "connect-lines") == len(first) + len(second), "the source re-read lines"
        rest(f"{url}/connectors/file-source", "DELETE")
        wait_until("file-source deleted", 60, lambda: rest(url + "/connectors")[1] == ["file-sink"], proc)
    finally:
        code = proc.stop()
    assert code in (0, 130, 143), f"Connect worker exit code {code}\n{proc.log_tail()}"


def _source_position(bootstrap: str) -> int | None:
    """The file source's committed position, read from the worker's offset topic."""
    pos = None
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"pos-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe(["connect-offsets"])
        deadline = time.monotonic() + 10
        idle = 0
        while time.monotonic() < deadline and idle < 4:
            m = c.poll(0.5)
            if m is None:
                idle += 1
                continue
            idle = 0
            if m.error() is None and m.value() is not None and json.loads(m.key())[0] == "file-source":
                pos = json.loads(m.value())["position"]
    finally:
        c.close()
    return pos


def _produce(bootstrap: str, topic: str, ranges: dict[int, range]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for part, rng in ranges.items():
        for i in rng:
            p.produce(topic, key=f"k{i}".encode(), value=f"p{part}-{i}".encode(), partition=part)
    assert p.flush(30) == 0


def test_mirrormaker2_topic_and_group_offsets(two_brokers, tmp_path):
    """MirrorMaker 2 (dedicated mode) from cluster `src` to cluster `dst`, both Moldau.

    The group commits while MirrorMaker runs, at the then log end (MirrorMaker's translation
    is exact there; for older positions it only promises an offset at or before the exact one,
    KAFKA-14666, and may emit none). More records follow; a consumer that fails over to `dst`
    then gets exactly the records after the group's position, nothing before it.
    """
    source, target = two_brokers
    topic = "mm-orders"
    group = "mm-billing"
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": source.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=30)
    _produce(source.bootstrap, topic, {0: range(0, 30), 1: range(0, 20)})

    mm2 = tmp_path / "mm2.properties"
    mm2.write_text("\n".join([
        "clusters = src, dst",
        f"src.bootstrap.servers = {source.bootstrap}",
        f"dst.bootstrap.servers = {target.bootstrap}",
        "src->dst.enabled = true",
        "dst->src.enabled = false",
        "src->dst.topics = mm-.*",
        "src->dst.groups = mm-.*",
        "src->dst.sync.group.offsets.enabled = true",
        "src->dst.sync.group.offsets.interval.seconds = 1",
        "src->dst.emit.checkpoints.interval.seconds = 1",
        "src->dst.emit.heartbeats.interval.seconds = 1",
        "src->dst.refresh.topics.interval.seconds = 5",
        "src->dst.refresh.groups.interval.seconds = 5",
        # An offset sync for every record (the default is one per 100).
        "src->dst.offset.lag.max = 0",
        "replication.factor = 1",
        "checkpoints.topic.replication.factor = 1",
        "heartbeats.topic.replication.factor = 1",
        "offset-syncs.topic.replication.factor = 1",
        "offset.storage.replication.factor = 1",
        "status.storage.replication.factor = 1",
        "config.storage.replication.factor = 1",
        "",
    ]))
    proc = JavaProcess("org.apache.kafka.connect.mirror.MirrorMaker", mm2, tmp_path / "mm2.log").start()
    mirrored = f"src.{topic}"
    try:
        wait_until("the mirrored topic with every record", 240,
                   lambda: count_records(target.bootstrap, mirrored) == 50, proc)
        recs = consume_all(target.bootstrap, mirrored, 50)
        assert sorted(m.value().decode() for m in recs) == sorted(
            [f"p0-{i}" for i in range(30)] + [f"p1-{i}" for i in range(20)])
        for m in recs:  # partitions, offsets, keys and order are preserved
            part, i = m.value().decode()[1:].split("-")
            assert (m.partition(), m.offset(), m.key()) == (int(part), int(i), f"k{i}".encode())

        # The group consumes everything there is on the source and commits.
        c = Consumer({"bootstrap.servers": source.bootstrap, "group.id": group, "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
        c.commit(offsets=[TopicPartition(topic, 0, 30), TopicPartition(topic, 1, 20)], asynchronous=False)
        c.close()

        # Checkpoints: the group's offsets, translated, are committed on the target.
        reader = Consumer({"bootstrap.servers": target.bootstrap, "group.id": group, "enable.auto.commit": False})
        translated = {}
        try:
            def synced():
                got = reader.committed([TopicPartition(mirrored, 0), TopicPartition(mirrored, 1)], timeout=10)
                translated.update({tp.partition: tp.offset for tp in got})
                return translated == {0: 30, 1: 20}
            wait_until("the group's translated offsets on the target", 240, synced, proc)
        finally:
            reader.close()
        assert count_records(target.bootstrap, "src.checkpoints.internal") > 0
        assert count_records(target.bootstrap, "heartbeats") > 0

        # The source keeps taking records; they are mirrored too.
        _produce(source.bootstrap, topic, {0: range(30, 60), 1: range(20, 60)})
        wait_until("the new records mirrored", 120, lambda: count_records(target.bootstrap, mirrored) == 120, proc)
    finally:
        code = proc.stop()
    assert code in (0, 130, 143), f"MirrorMaker exit code {code}\n{proc.log_tail()}"

    # Failover: the consumer moves to the target cluster and resumes from the translated offsets.
    c = Consumer({"bootstrap.servers": target.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    want = {f"p0-{i}" for i in range(30, 60)} | {f"p1-{i}" for i in range(20, 60)}
    try:
        c.subscribe([mirrored])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < len(want) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                if m.error():
                    raise KafkaException(m.error())
                got.append(m.value().decode())
        assert len(got) == len(set(got)), "a record arrived twice"
        assert set(got) == want, f"missing {sorted(want - set(got))[:5]}, extra {sorted(set(got) - want)[:5]}"
    finally:
        c.close()
