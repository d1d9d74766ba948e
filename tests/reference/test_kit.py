"""The reference kit itself: `scripts/reference/kafka` fetches, starts, serves and stops Apache Kafka.

Everything else that compares Moldau with Kafka (the conformance harness, the side-by-side
benchmarks) stands on this, so it is proven with a third-party client (librdkafka via
confluent-kafka) producing and consuming through a Kafka the kit started.
"""

from __future__ import annotations

import os
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from conftest import KafkaNode, kafka_class, kit


def test_fetch_is_idempotent(kit_libs):
    again = kit("fetch").check()
    assert again.lines == [str(kit_libs)], again.stdout
    jars = {p.name for p in kit_libs.iterdir()}
    for prefix in ("kafka_2.13-4.4.0", "kafka-clients-4.4.0", "kafka-tools-4.4.0", "kafka-streams-4.4.0",
                   "connect-runtime-4.4.0", "log4j-slf4j-impl-"):
        assert any(j.startswith(prefix) for j in jars), f"{prefix}* missing from {kit_libs}"
    connect = {p.name for p in (kit_libs.parent.parent / "connect-4.3.1" / "libs").iterdir()}
    for prefix in ("connect-runtime-4.3.1", "connect-file-4.3.1", "connect-mirror-4.3.1", "kafka-clients-4.3.1"):
        assert any(j.startswith(prefix) for j in connect), f"{prefix}* missing from the Connect libs"


def test_start_produce_consume_stop(kit_libs, tmp_path):
    node = KafkaNode(tmp_path / "kafka")
    pids: list[int] = []
    res = kit("start", str(node.dir), timeout=400)
    try:
        res.check()
        assert res.lines[-1].startswith("bootstrap=127.0.0.1:"), res.stdout
        assert (node.dir / "bootstrap").read_text().strip() == res.lines[-1]
        bootstrap = res.lines[-1].split("=", 1)[1]
        pids = node.pids()
        assert len(pids) == 1
        os.kill(pids[0], 0)  # alive

        # A second start on the same directory is refused while the first one runs.
        assert kit("start", str(node.dir), timeout=60).returncode != 0

        topic = "kit-smoke"
        created = kafka_class("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap,
                              "--create", "--topic", topic, "--partitions", "2").check()
        assert f"Created topic {topic}." in created.stdout

        delivered = []
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        producer.produce(topic, key=b"k", value=b"hello kafka", partition=1, headers=[("h", b"v")],
                         on_delivery=lambda err, msg: delivered.append((err, msg.partition(), msg.offset())))
        assert producer.flush(30) == 0
        assert delivered == [(None, 1, 0)]

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kit-smoke", "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 1, 0)])
        got = None
        deadline = time.monotonic() + 60
        while got is None and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got = msg
        consumer.close()
        assert got is not None, "no record consumed from Apache Kafka"
        assert (got.key(), got.value(), got.headers(), got.offset()) == (b"k", b"hello kafka", [("h", b"v")], 0)
    finally:
        stopped = kit("stop", str(node.dir), timeout=120)
    stopped.check()
    assert not (node.dir / "pids").exists()
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        raise AssertionError(f"Kafka pid {pid} still alive after stop")
    # stop is idempotent.
    kit("stop", str(node.dir)).check()
