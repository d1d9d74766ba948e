"""Exactly-once under faults: a consume-transform-produce application (confluent-kafka, one
transactional producer plus a read_committed consumer in a group, offsets committed inside
each transaction; `eos_copy_app.py`, its own process) copies topic A to topic B while the
broker is killed with SIGKILL at random moments and restarted on the same port. At the end, B
read with read_committed holds every record of A exactly once, in order per partition.

A supervisor kills and restarts the application (SIGKILL, so its last transaction is left
open for the next instance to fence) when it makes no progress for a while, as an
orchestrator's liveness probe would: librdkafka can wedge when a broker dies during its
connection setup (a consumer waiting forever for an OffsetForLeaderEpoch validation, which
Moldau does not serve yet; a producer whose send_offsets_to_transaction outlives its timeout).
An application restart is one more fault exactly-once must survive.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

import clients

HERE = Path(__file__).resolve().parent
PARTITIONS = 3
PER_PARTITION = 600
KILLS = 4
DEADLINE_S = 80.0
# No committed transaction for this long: the supervisor restarts the application.
STALL_S = 8.0


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class App:
    """Runs and supervises the copy application process."""

    def __init__(self, args: list[str]):
        self.args = args
        self.proc: subprocess.Popen | None = None
        self.commits = 0
        self.restarts = 0
        self.errors: list[str] = []
        self.last_progress = time.monotonic()

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(HERE / "eos_copy_app.py"), *self.args],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        proc = self.proc
        self.last_progress = time.monotonic()

        def pump():
            for raw in iter(proc.stdout.readline, b""):
                line = raw.decode(errors="replace").strip()
                if line.startswith("copied "):
                    self.commits += 1
                    self.last_progress = time.monotonic()
                elif line.startswith("error "):
                    self.errors.append(line)

        threading.Thread(target=pump, daemon=True).start()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def supervise(self) -> None:
        if time.monotonic() - self.last_progress > STALL_S:
            self.kill()
            self.restarts += 1
            self.start()


def read_all(bootstrap: str, topic: str, partition: int, count: int, wait_s: float) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uid("check"),
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, partition, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    if len(out) >= count:
                        break
                    continue
                raise KafkaException(m.error())
            out.append(m.value())
    finally:
        c.close()
    return out


def test_exactly_once_copy_under_kill_9(brokers):
    server = brokers.start(**{"num.partitions": PARTITIONS, "group.initial.rebalance.delay.ms": 0,
                              "group.min.session.timeout.ms": 1000})
    port = server.port
    src, dst = uid("eos-a"), uid("eos-b")
    expected = {p: [b"%d:%05d" % (p, i) for i in range(PER_PARTITION)] for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        clients.confluent_produce(server.bootstrap, src, [{"key": b"k", "value": v} for v in expected[p]],
                                  partition=p, **{"enable.idempotence": True})
    app = App([server.bootstrap, src, dst, uid("eos-group"), uid("eos-txn")])
    app.start()
    rng = random.Random()
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.3, 2.0))
            server.crash()
            time.sleep(rng.uniform(0.0, 0.5))
            server.start(port=port)
        deadline = time.monotonic() + DEADLINE_S
        while True:
            counts = [len(read_all(server.bootstrap, dst, p, PER_PARTITION, 1.0)) for p in range(PARTITIONS)]
            if all(n >= PER_PARTITION for n in counts):
                break
            assert time.monotonic() < deadline, (
                f"copy incomplete: {counts} of {PER_PARTITION} per partition (commits {app.commits}, "
                f"app restarts {app.restarts}, errors {app.errors[-3:]})")
            app.supervise()
            time.sleep(0.3)
    finally:
        app.kill()
    for p in range(PARTITIONS):
        got = read_all(server.bootstrap, dst, p, PER_PARTITION, 10.0)
        assert len(got) == len(expected[p]), f"partition {p}: {len(got)} records, want {len(expected[p])}"
        assert got == expected[p], f"partition {p}: duplicates, losses or reordering"
    print(f"broker kills={KILLS} app restarts={app.restarts} commits={app.commits} errors={len(app.errors)}")
