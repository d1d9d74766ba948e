"""Consumer groups (issue #4): real third-party clients in real groups against `moldau server`.

confluent-kafka (librdkafka), kafka-python and aiokafka members join, rebalance (eager range /
roundrobin, cooperative-sticky), leave, die (SIGKILL of a member subprocess), come back as static
members, commit and resume across a broker restart; admin clients list/describe groups, read,
alter, reset and delete committed offsets, delete groups, and compute lag.

Every wait is a condition polled against a deadline. Brokers run with
`group.initial.rebalance.delay.ms=0` and a 1 s minimum session timeout so members that vanish
are detected within a few seconds.
"""

from __future__ import annotations

import asyncio
import functools
import os
import warnings
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from clients import confluent_produce

GROUP_SETTINGS = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "num.partitions": 6,
}
SESSION_MS = 6000
# A member that vanishes without leaving is removed after its session timeout (kill tests).
SHORT_SESSION_MS = 3000
HEARTBEAT_MS = 300
WAIT_S = 30.0


@pytest.fixture(scope="module")
def gbroker(request, moldau_bin, tmp_path_factory):
    """A module-shared broker tuned for fast group tests."""
    from conftest import BrokerPool, _report_pool
    pool = BrokerPool(moldau_bin, tmp_path_factory.mktemp("moldau-groups"))
    server = pool.start("groups", **GROUP_SETTINGS)
    yield server
    _report_pool(request, pool)


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class AssignmentTimeout(AssertionError):
    """Members did not reach the expected assignment in time."""


def wait_until(pred, timeout: float = WAIT_S, what: str = "condition", interval: float = 0.05,
               exc=AssertionError):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise exc(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def kafka_python_stall_retry(test):
    """Runs a kafka-python group test a second time (fresh topic and group) when its members
    never reached their assignment, with a warning so it stays visible.

    kafka-python 3.0.12 bug (client-side; the broker's answers are correct): a member whose
    rejoin was triggered by ConsumerCoordinator.need_rejoin()'s metadata check (assignment
    snapshot != metadata snapshot, e.g. a leader that first assigned before it had the topic's
    metadata, which group.initial.rebalance.delay.ms=0 makes likely) leaves its JoinGroup/SyncGroup
    task in flight when poll(timeout_ms) returns early ("timeout in ensure_active_group"); the
    leader's new assignment then makes the snapshots equal, so the next poll's need_rejoin() is
    False, join_group_async never consumes the finished task, heartbeats stay disabled, the
    assignment is never applied, and the broker expires the member's session (log: the generation
    reaches Stable, then "member session expired"). KafkaPythonMember avoids it by fetching the
    topics' metadata before subscribing and polling with a 1 s timeout; this retry is the backstop.
    """

    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        if kwargs.get("client", "kafka-python") != "kafka-python":
            return test(*args, **kwargs)
        try:
            return test(*args, **kwargs)
        except AssignmentTimeout as e:
            warnings.warn(f"kafka-python group stalled, retrying once: {str(e)[:300]}")
            return test(*args, **kwargs)

    return wrapper


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)[topic]
    fut.result(timeout=20)
    wait_until(lambda: len(admin.list_topics(topic, timeout=5).topics[topic].partitions) == partitions,
               10, f"metadata for {topic}")


def produce_spread(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str = "v") -> set:
    """Produce `per_partition` records to each partition; return the set of values."""
    recs = []
    values = set()
    for p in range(partitions):
        for i in range(per_partition):
            v = f"{tag}-{p}-{i}".encode()
            values.add(v)
            recs.append((p, v))
    for p in range(partitions):
        confluent_produce(bootstrap, topic, [{"value": v} for (pp, v) in recs if pp == p], partition=p)
    return values


# --------------------------------------------------------------------------------- members

class Member(threading.Thread):
    """A group member in its own thread: polls continuously, tracks its assignment from the
    rebalance callbacks, and records every message (topic, partition, offset, value)."""

    def __init__(self, name: str):
        super().__init__(daemon=True, name=name)
        self.name_ = name
        self.assigned: set = set()
        self.events: list = []  # ("assign"|"revoke"|"lost", frozenset)
        self.messages: list = []
        self.errors: list = []
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        self.lock = threading.Lock()
        self.commit_each = False

    def on_assign(self, parts):
        with self.lock:
            ps = frozenset((p[0], p[1]) for p in parts)
            self.events.append(("assign", ps))
            self.assigned |= ps

    def on_revoke(self, parts, kind="revoke"):
        with self.lock:
            ps = frozenset((p[0], p[1]) for p in parts)
            self.events.append((kind, ps))
            self.assigned -= ps

    def snapshot(self) -> set:
        with self.lock:
            return set(self.assigned)

    def values(self) -> list:
        with self.lock:
            return [m[3] for m in self.messages]

    def stop(self, timeout: float = 20):
        self.stop_event.set()
        self.join(timeout)
        assert not self.is_alive(), f"{self.name_} did not stop"


class ConfluentMember(Member):
    def __init__(self, bootstrap, group, topics, name="cf", **conf):
        super().__init__(name)
        self.conf = {
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS, "fetch.wait.max.ms": 100,
            "socket.timeout.ms": 10000, "client.id": name,
        }
        self.conf.update(conf)
        self.topics = topics
        self.close_on_stop = True
        self.consumer = None

    def run(self):
        try:
            c = self.consumer = Consumer(self.conf)
            c.subscribe(self.topics,
                        on_assign=lambda c_, ps: self.on_assign([(p.topic, p.partition) for p in ps]),
                        on_revoke=lambda c_, ps: self.on_revoke([(p.topic, p.partition) for p in ps]),
                        on_lost=lambda c_, ps: self.on_revoke([(p.topic, p.partition) for p in ps], "lost"))
            self.ready.set()
            while not self.stop_event.is_set():
                m = c.poll(0.1)
                if m is None:
                    continue
                if m.error():
                    self.errors.append(str(m.error()))
                    continue
                with self.lock:
                    self.messages.append((m.topic(), m.partition(), m.offset(), m.value()))
                if self.commit_each:
                    c.commit(message=m, asynchronous=False)
            if self.close_on_stop:
                c.close()
        except Exception as e:  # noqa: BLE001 - surfaced by the test
            self.errors.append(repr(e))


KP_MEMBER_SCRIPT = r"""
import json, os, sys, threading
from kafka import KafkaConsumer
from kafka.consumer.subscription_state import ConsumerRebalanceListener
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
ASSIGNORS = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
             "cooperative-sticky": CooperativeStickyAssignor}
spec = json.loads(sys.argv[1])
conf = spec["conf"]
if os.environ.get("KP_MEMBER_LOG_DIR"):  # debugging aid: full kafka-python debug log per member
    import logging
    logging.basicConfig(filename=os.path.join(os.environ["KP_MEMBER_LOG_DIR"], conf["client_id"] + ".log"),
                        level=logging.DEBUG, format="%(asctime)s %(threadName)s %(name)s %(message)s")
if "partition_assignment_strategy" in conf:
    conf["partition_assignment_strategy"] = [ASSIGNORS[n] for n in conf["partition_assignment_strategy"]]
lock = threading.Lock()
def emit(obj):
    with lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()
class L(ConsumerRebalanceListener):
    def on_partitions_revoked(self, r): emit({"ev": "revoke", "parts": [[t.topic, t.partition] for t in r]})
    def on_partitions_assigned(self, a): emit({"ev": "assign", "parts": [[t.topic, t.partition] for t in a]})
    def on_partitions_lost(self, l): emit({"ev": "lost", "parts": [[t.topic, t.partition] for t in l]})
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
c = KafkaConsumer(**conf)
# Work around a kafka-python 3.0.12 bug (see kafka_python_stall_retry): know the topics' metadata
# before joining, and poll with a timeout longer than a join round trip.
for t in spec["topics"]:
    c.partitions_for_topic(t)
c.subscribe(spec["topics"], listener=L())
emit({"ev": "ready"})
while not stop.is_set():
    for recs in c.poll(timeout_ms=1000).values():
        for r in recs:
            emit({"ev": "msg", "t": r.topic, "p": r.partition, "o": r.offset, "v": r.value.hex()})
    if spec["commit_each"]:
        c.commit()
c.close()
emit({"ev": "closed"})
"""


class KafkaPythonMember(Member):
    """A kafka-python member in its own process (isolates each client's IO thread; a stalled
    member cannot block the others); events come back as JSON lines."""

    def __init__(self, bootstrap, group, topics, name="kp", **conf):
        super().__init__(name)
        self.conf = dict(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                         enable_auto_commit=False, session_timeout_ms=SESSION_MS,
                         heartbeat_interval_ms=HEARTBEAT_MS, fetch_max_wait_ms=100,
                         request_timeout_ms=10000, client_id=name)
        self.conf.update(conf)
        self.topics = topics
        self.proc = None

    def run(self):
        import json
        spec = {"conf": self.conf, "topics": self.topics, "commit_each": self.commit_each}
        self.proc = subprocess.Popen([sys.executable, "-c", KP_MEMBER_SCRIPT, json.dumps(spec)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        err_lines = []
        t = threading.Thread(target=lambda: err_lines.extend(self.proc.stderr), daemon=True)
        t.start()
        for raw in self.proc.stdout:
            ev = json.loads(raw)
            kind = ev["ev"]
            if kind == "ready":
                self.ready.set()
            elif kind == "msg":
                with self.lock:
                    self.messages.append((ev["t"], ev["p"], ev["o"], bytes.fromhex(ev["v"])))
            elif kind == "assign":
                self.on_assign([tuple(p) for p in ev["parts"]])
            elif kind in ("revoke", "lost"):
                self.on_revoke([tuple(p) for p in ev["parts"]], "revoke" if kind == "revoke" else "lost")
        code = self.proc.wait()
        t.join(5)
        if code != 0:
            self.errors.append(f"exit {code}: " + b"".join(err_lines).decode(errors="replace")[-2000:])

    def stop(self, timeout: float = 20):
        while self.proc is None and self.is_alive():
            time.sleep(0.01)
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # the child closes its consumer (LeaveGroup) and exits
            except OSError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.errors.append("kafka-python member did not stop")
        self.join(timeout)
        assert not self.is_alive(), f"{self.name_} did not stop"


MEMBER_CLASSES = {"confluent": ConfluentMember, "kafka-python": KafkaPythonMember}


def start_members(cls, n, bootstrap, group, topics, **conf):
    ms = [cls(bootstrap, group, topics, name=f"{group}-m{i}", **conf) for i in range(n)]
    for m in ms:
        m.start()
    return ms


def stop_members(ms):
    for m in ms:
        if m.is_alive():
            m.stop()


def wait_balanced(members, topic_parts: set, per_member: list | None = None, timeout=WAIT_S):
    """Wait until the members' assignments are disjoint and cover `topic_parts` (with
    `per_member` sizes, sorted, when given)."""

    def ok():
        snaps = [m.snapshot() for m in members]
        union = set().union(*snaps)
        if union != topic_parts or sum(len(s) for s in snaps) != len(topic_parts):
            return False
        if per_member is not None and sorted(len(s) for s in snaps) != sorted(per_member):
            return False
        return snaps

    return wait_until(ok, timeout, f"assignment of {sorted(topic_parts)} over {len(members)} members: "
                                   f"{[sorted(m.snapshot()) for m in members]}", exc=AssignmentTimeout)


def wait_settled(members, topic_parts: set, per_member: list | None = None, quiet_s: float = 1.0,
                 timeout=WAIT_S):
    """Like wait_balanced, but also until no member has seen a rebalance callback for `quiet_s`:
    kafka-python members may rejoin once right after the first Stable generation (their
    metadata snapshot differs from the one the leader assigned with), which must not be mistaken
    for a rebalance caused by what the test does next."""
    deadline = time.monotonic() + timeout
    while True:
        snaps = wait_balanced(members, topic_parts, per_member, max(0.1, deadline - time.monotonic()))
        counts = [len(m.events) for m in members]
        quiet_until = time.monotonic() + quiet_s
        while time.monotonic() < quiet_until and [len(m.events) for m in members] == counts:
            time.sleep(0.05)
        if [len(m.events) for m in members] == counts:
            return [m.snapshot() for m in members]
        if time.monotonic() >= deadline:
            raise AssignmentTimeout(f"group did not settle within {timeout}s: {counts}")


def all_parts(topic, n):
    return {(topic, p) for p in range(n)}


def assert_no_errors(members):
    for m in members:
        assert not m.errors, f"{m.name_}: {m.errors[:5]}"


# ------------------------------------------------------------------ three members, exactly once

@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
@kafka_python_stall_retry
def test_three_members_consume_every_record_once(gbroker, client):
    topic, group = uniq(f"g3-{client}"), uniq("grp")
    create_topic(gbroker.bootstrap, topic, 6)
    members = start_members(MEMBER_CLASSES[client], 3, gbroker.bootstrap, group, [topic])
    try:
        snaps = wait_balanced(members, all_parts(topic, 6), [2, 2, 2])
        values = produce_spread(gbroker.bootstrap, topic, 6, 50)
        wait_until(lambda: sum(len(m.values()) for m in members) >= len(values), WAIT_S,
                   "all records consumed")
        got = [v for m in members for v in m.values()]
        assert len(got) == len(values) and set(got) == values, "duplicates or missing records"
        for m, snap in zip(members, snaps):
            assert {(t, p) for (t, p, _, _) in m.messages} <= snap, f"{m.name_} read outside its assignment"
        assert_no_errors(members)
    finally:
        stop_members(members)


def test_three_members_consume_every_record_once_aiokafka(gbroker):
    from aiokafka import AIOKafkaConsumer
    topic, group = uniq("g3-aio"), uniq("grp")
    create_topic(gbroker.bootstrap, topic, 6)

    async def main():
        cs = [AIOKafkaConsumer(topic, bootstrap_servers=gbroker.bootstrap, group_id=group,
                               auto_offset_reset="earliest", enable_auto_commit=False,
                               session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                               fetch_max_wait_ms=100, client_id=f"aio-{i}")
              for i in range(3)]
        received = [[] for _ in cs]
        stop = asyncio.Event()

        async def loop(i, c):
            while not stop.is_set():
                batch = await c.getmany(timeout_ms=100)
                for recs in batch.values():
                    received[i].extend((r.topic, r.partition, r.value) for r in recs)

        for c in cs:
            await c.start()
        tasks = [asyncio.create_task(loop(i, c)) for i, c in enumerate(cs)]
        try:
            deadline = time.monotonic() + WAIT_S
            while True:
                snaps = [set(c.assignment()) for c in cs]
                if sorted(len(s) for s in snaps) == [2, 2, 2] and len(set().union(*snaps)) == 6:
                    break
                assert time.monotonic() < deadline, f"aiokafka assignment not balanced: {snaps}"
                await asyncio.sleep(0.05)
            values = await asyncio.to_thread(produce_spread, gbroker.bootstrap, topic, 6, 50)
            while sum(map(len, received)) < len(values):
                assert time.monotonic() < deadline + WAIT_S, f"got {sum(map(len, received))}/{len(values)}"
                await asyncio.sleep(0.05)
            got = [v for r in received for (_, _, v) in r]
            assert len(got) == len(values) and set(got) == values
            for snap, r in zip(snaps, received):
                assert {(t.topic, t.partition) for t in snap} >= {(t, p) for (t, p, _) in r}
        finally:
            stop.set()
            for t in tasks:
                await t
            for c in cs:
                await c.stop()

    asyncio.run(asyncio.wait_for(main(), 90))


# ------------------------------------------------------------ members leaving / dying

@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
@kafka_python_stall_retry
def test_member_leaving_has_partitions_reassigned(gbroker, client):
    topic, group = uniq(f"leave-{client}"), uniq("grp")
    create_topic(gbroker.bootstrap, topic, 6)
    members = start_members(MEMBER_CLASSES[client], 3, gbroker.bootstrap, group, [topic])
    try:
        wait_balanced(members, all_parts(topic, 6), [2, 2, 2])
        leaver, rest = members[0], members[1:]
        t0 = time.monotonic()
        leaver.stop()  # close() sends LeaveGroup
        wait_balanced(rest, all_parts(topic, 6), [3, 3])
        # LeaveGroup triggers the rebalance at once: far below the session timeout.
        assert time.monotonic() - t0 < SESSION_MS / 1000, "rebalance waited for the session timeout"
        values = produce_spread(gbroker.bootstrap, topic, 6, 20)
        wait_until(lambda: set(rest[0].values()) | set(rest[1].values()) >= values, WAIT_S, "consumption")
        assert_no_errors(members)
    finally:
        stop_members(members)


MEMBER_SCRIPT = r"""
import sys, time
client, bootstrap, group, topic, session = sys.argv[1:6]
session = int(session)
def out(kind, parts):
    print(kind, ",".join(str(p) for p in sorted(parts)), flush=True)
if client == "confluent":
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": session,
                  "heartbeat.interval.ms": 300, "fetch.wait.max.ms": 100})
    c.subscribe([topic], on_assign=lambda c_, ps: out("assign", [p.partition for p in ps]))
    while True:
        c.poll(0.1)
elif client == "confluent-consumer-protocol":
    # KIP-848: incremental assignments; the session timeout is the broker's.
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    owned = set()
    def assign(c_, ps):
        owned.update(p.partition for p in ps); out("assign", owned)
    def revoke(c_, ps):
        owned.difference_update(p.partition for p in ps); out("assign", owned)
    c.subscribe([topic], on_assign=assign, on_revoke=revoke, on_lost=revoke)
    while True:
        c.poll(0.1)
else:
    from kafka import KafkaConsumer
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    class L(ConsumerRebalanceListener):
        def on_partitions_revoked(self, r): pass
        def on_partitions_assigned(self, a): out("assign", [tp.partition for tp in a])
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, session_timeout_ms=session, heartbeat_interval_ms=300,
                      fetch_max_wait_ms=100)
    c.partitions_for_topic(topic)
    c.subscribe([topic], listener=L())
    while True:
        c.poll(timeout_ms=1000)
"""


class MemberProcess:
    """A group member in a child process (so it can be SIGKILLed: no LeaveGroup, no goodbye)."""

    def __init__(self, client, bootstrap, group, topic, session_ms):
        self.proc = subprocess.Popen([sys.executable, "-c", MEMBER_SCRIPT, client, bootstrap, group, topic,
                                      str(session_ms)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL)
        self.assigned: set = set()
        self.lines: list = []
        self.t = threading.Thread(target=self._pump, daemon=True)
        self.t.start()

    def _pump(self):
        for raw in iter(self.proc.stdout.readline, b""):
            kind, _, parts = raw.decode().strip().partition(" ")
            self.lines.append(raw)
            if kind == "assign":
                self.assigned = {int(p) for p in parts.split(",") if p}

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
@kafka_python_stall_retry
def test_killed_member_partitions_reassigned_after_session_timeout(gbroker, client):
    topic, group = uniq(f"kill-{client}"), uniq("grp")
    create_topic(gbroker.bootstrap, topic, 6)
    survivor = MEMBER_CLASSES[client](gbroker.bootstrap, group, [topic], name="survivor",
                                      **({"session.timeout.ms": SHORT_SESSION_MS} if client == "confluent"
                                         else {"session_timeout_ms": SHORT_SESSION_MS}))
    survivor.start()
    child = MemberProcess(client, gbroker.bootstrap, group, topic, SHORT_SESSION_MS)
    try:
        wait_until(lambda: len(survivor.snapshot()) == 3 and len(child.assigned) == 3
                   and {p for _, p in survivor.snapshot()} | child.assigned == set(range(6)),
                   WAIT_S, "3+3 assignment between the survivor and the child", exc=AssignmentTimeout)
        t0 = time.monotonic()
        child.kill()
        wait_until(lambda: survivor.snapshot() == all_parts(topic, 6), WAIT_S, "survivor takes all 6", exc=AssignmentTimeout)
        took = time.monotonic() - t0
        # Detected by the session timeout (not earlier: nothing told the broker) within a margin.
        assert took < SHORT_SESSION_MS / 1000 + 10, took
        values = produce_spread(gbroker.bootstrap, topic, 6, 10)
        wait_until(lambda: set(survivor.values()) >= values, WAIT_S, "survivor consumes everything")
        assert_no_errors([survivor])
    finally:
        child.kill()
        survivor.stop()


@kafka_python_stall_retry
def test_member_that_stops_polling_is_removed_after_max_poll_interval(gbroker):
    """kafka-python leaves the group when poll() is not called within max.poll.interval.ms; the
    other member takes its partitions."""
    from kafka import KafkaConsumer
    topic, group = uniq("maxpoll"), uniq("grp")
    create_topic(gbroker.bootstrap, topic, 6)
    other = KafkaPythonMember(gbroker.bootstrap, group, [topic], name="other")
    other.start()
    stalled = KafkaConsumer(bootstrap_servers=gbroker.bootstrap, group_id=group,
                            auto_offset_reset="earliest", enable_auto_commit=False,
                            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                            max_poll_interval_ms=3000, fetch_max_wait_ms=100)
    stalled.partitions_for_topic(topic)  # kafka-python workaround, see kafka_python_stall_retry
    stalled.subscribe([topic])
    try:
        def balanced():
            stalled.poll(timeout_ms=500)
            return len(stalled.assignment()) == 3 and len(other.snapshot()) == 3
        wait_until(balanced, WAIT_S, "3+3 assignment", exc=AssignmentTimeout)
        # Stop polling: the heartbeat thread keeps the session alive but leaves after 3 s.
        wait_until(lambda: other.snapshot() == all_parts(topic, 6), WAIT_S, "other takes all 6", exc=AssignmentTimeout)
        assert_no_errors([other])
    finally:
        stalled.close()
        other.stop()


# ------------------------------------------------------------------ cooperative-sticky

@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
@kafka_python_stall_retry
def test_cooperative_sticky_incremental_rebalance(gbroker, client):
    topic, group = uniq(f"coop-{client}"), uniq("grp")
    create_topic(gbroker.bootstrap, topic, 6)
    if client == "confluent":
        conf = {"partition.assignment.strategy": "cooperative-sticky"}
    else:
        conf = {"partition_assignment_strategy": ["cooperative-sticky"]}
    cls = MEMBER_CLASSES[client]
    a = cls(gbroker.bootstrap, group, [topic], name="a", **conf)
    a.start()
    b = None
    try:
        wait_balanced([a], all_parts(topic, 6))
        before = a.snapshot()
        events_before = len(a.events)
        b = cls(gbroker.bootstrap, group, [topic], name="b", **conf)
        b.start()
        snaps = wait_balanced([a, b], all_parts(topic, 6), [3, 3])
        after_a = snaps[0]
        new_events = a.events[events_before:]
        revoked = set().union(*[ps for k, ps in new_events if k in ("revoke", "lost")] or [set()])
        assert not [e for e in new_events if e[0] == "lost"], new_events
        # Incremental: only the partitions that moved to b were revoked from a; a kept the rest
        # throughout (eager would revoke all 6 first).
        assert revoked == before - after_a, (new_events, before, after_a)
        assert len(revoked) == 3
        assert after_a <= before
        assert not [ps for k, ps in new_events if k == "assign" and ps], f"a got new partitions: {new_events}"
        # The group's protocol is cooperative-sticky.
        admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
        assert admin.describe_consumer_groups([group])[group].result(timeout=10).partition_assignor == \
            "cooperative-sticky"
        values = produce_spread(gbroker.bootstrap, topic, 6, 10)
        wait_until(lambda: set(a.values()) | set(b.values()) >= values, WAIT_S, "consumption")
        assert_no_errors([a, b])
    finally:
        stop_members([m for m in (a, b) if m])


# ------------------------------------------------------------------ range / roundrobin

@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
@kafka_python_stall_retry
def test_range_and_roundrobin_assignors(gbroker, client, assignor):
    t1, t2, group = uniq("asg-a"), uniq("asg-b"), uniq("grp")
    create_topic(gbroker.bootstrap, t1, 3)
    create_topic(gbroker.bootstrap, t2, 3)
    if client == "confluent":
        conf = {"partition.assignment.strategy": assignor}
    else:
        conf = {"partition_assignment_strategy": [assignor]}
    members = start_members(MEMBER_CLASSES[client], 2, gbroker.bootstrap, group, [t1, t2], **conf)
    try:
        parts = all_parts(t1, 3) | all_parts(t2, 3)
        # range: per topic, the first member (by id) gets partitions 0-1, the other gets 2 -> 4+2;
        # roundrobin over the 6 sorted partitions -> 3+3, alternating.
        snaps = wait_balanced(members, parts, [4, 2] if assignor == "range" else [3, 3])
        big = max(snaps, key=len)
        if assignor == "range":
            assert big == {(t1, 0), (t1, 1), (t2, 0), (t2, 1)}, big
        else:
            ordered = sorted(parts)
            assert {tuple(sorted(s)) for s in snaps} == {tuple(ordered[0::2]), tuple(ordered[1::2])}, snaps
        admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
        assert admin.describe_consumer_groups([group])[group].result(timeout=10).partition_assignor == assignor
        assert_no_errors(members)
    finally:
        stop_members(members)


# ------------------------------------------------------------------ commits across restart

def _commit_first(client, bootstrap, group, topic, n):
    """Consume exactly `n` records of partition 0 in group `group` and commit offset n."""
    if client == "confluent":
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "session.timeout.ms": SESSION_MS,
                      "heartbeat.interval.ms": HEARTBEAT_MS, "fetch.wait.max.ms": 100})
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.1)
            if m is not None and not m.error():
                got.append(m)
        assert len(got) == n
        c.commit(offsets=[TopicPartition(topic, 0, got[-1].offset() + 1)], asynchronous=False)
        c.close()
        return [m.offset() for m in got]
    from kafka import KafkaConsumer, TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, session_timeout_ms=SESSION_MS,
                      heartbeat_interval_ms=HEARTBEAT_MS, fetch_max_wait_ms=100, max_poll_records=n)
    c.partitions_for_topic(topic)  # kafka-python workaround, see kafka_python_stall_retry
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < n and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=1000, max_records=n - len(got)).values():
            got.extend(recs)
    assert len(got) == n
    c.commit({KTP(topic, 0): OffsetAndMetadata(got[-1].offset + 1, "", -1)})
    c.close()
    return [r.offset for r in got]


def _first_offset_after_join(client, bootstrap, group, topic):
    if client == "confluent":
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "session.timeout.ms": SESSION_MS,
                      "heartbeat.interval.ms": HEARTBEAT_MS})
        c.subscribe([topic])
        try:
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:
                m = c.poll(0.1)
                if m is not None and not m.error():
                    return m.offset()
            raise AssertionError("no record after rejoining")
        finally:
            c.close()
    if client == "aiokafka":
        from aiokafka import AIOKafkaConsumer

        async def go():
            c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS)
            await c.start()
            try:
                return (await c.getone()).offset
            finally:
                await c.stop()
        return asyncio.run(asyncio.wait_for(go(), WAIT_S))
    from kafka import KafkaConsumer
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, session_timeout_ms=SESSION_MS,
                      heartbeat_interval_ms=HEARTBEAT_MS)
    c.partitions_for_topic(topic)  # kafka-python workaround, see kafka_python_stall_retry
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=1000).values():
                return recs[0].offset
        raise AssertionError("no record after rejoining")
    finally:
        c.close()


@pytest.mark.parametrize("committer,resumer", [("confluent", "kafka-python"), ("kafka-python", "aiokafka"),
                                               ("confluent", "confluent")])
def test_committed_offsets_survive_restart(brokers, committer, resumer):
    b = brokers.start("restart", **GROUP_SETTINGS)
    topic, group = uniq("commit"), uniq("grp")
    create_topic(b.bootstrap, topic, 1)
    confluent_produce(b.bootstrap, topic, [{"value": f"r{i}".encode()} for i in range(30)], partition=0)
    assert _commit_first(committer, b.bootstrap, group, topic, 12) == list(range(12))
    b.restart()
    # The committed offset is back after replay of __consumer_offsets...
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])])
    tps = res[group].result(timeout=20).topic_partitions
    assert [(t.topic, t.partition, t.offset) for t in tps] == [(topic, 0, 12)]
    # ...and a new member resumes exactly there.
    assert _first_offset_after_join(resumer, b.bootstrap, group, topic) == 12


# ------------------------------------------------------------------ publish-subscribe

@kafka_python_stall_retry
def test_two_groups_each_receive_every_record(gbroker):
    topic = uniq("pubsub")
    create_topic(gbroker.bootstrap, topic, 6)
    g1 = start_members(ConfluentMember, 2, gbroker.bootstrap, uniq("grpA"), [topic])
    g2 = start_members(KafkaPythonMember, 2, gbroker.bootstrap, uniq("grpB"), [topic])
    try:
        wait_balanced(g1, all_parts(topic, 6), [3, 3])
        wait_balanced(g2, all_parts(topic, 6), [3, 3])
        values = produce_spread(gbroker.bootstrap, topic, 6, 20)
        for g in (g1, g2):
            wait_until(lambda: sum(len(m.values()) for m in g) >= len(values), WAIT_S, "group consumption")
            got = [v for m in g for v in m.values()]
            assert sorted(got) == sorted(values)
        assert_no_errors(g1 + g2)
    finally:
        stop_members(g1 + g2)


def test_two_groups_aiokafka_and_confluent(gbroker):
    from aiokafka import AIOKafkaConsumer
    topic = uniq("pubsub-aio")
    create_topic(gbroker.bootstrap, topic, 3)
    values = produce_spread(gbroker.bootstrap, topic, 3, 10)
    cf = ConfluentMember(gbroker.bootstrap, uniq("grpC"), [topic])
    cf.start()

    async def aio():
        c = AIOKafkaConsumer(topic, bootstrap_servers=gbroker.bootstrap, group_id=uniq("grpD"),
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             fetch_max_wait_ms=100)
        await c.start()
        got = []
        try:
            deadline = time.monotonic() + WAIT_S
            while len(got) < len(values) and time.monotonic() < deadline:
                for recs in (await c.getmany(timeout_ms=100)).values():
                    got.extend(r.value for r in recs)
        finally:
            await c.stop()
        return got

    try:
        got = asyncio.run(asyncio.wait_for(aio(), 60))
        assert sorted(got) == sorted(values)
        wait_until(lambda: len(cf.values()) >= len(values), WAIT_S, "confluent group consumption")
        assert sorted(cf.values()) == sorted(values)
    finally:
        cf.stop()


# ------------------------------------------------------------------ static membership

@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
@kafka_python_stall_retry
def test_static_member_restart_does_not_rebalance(gbroker, client):
    topic, group = uniq(f"static-{client}"), uniq("grp")
    create_topic(gbroker.bootstrap, topic, 6)
    cls = MEMBER_CLASSES[client]
    key = "group.instance.id" if client == "confluent" else "group_instance_id"
    sess = "session.timeout.ms" if client == "confluent" else "session_timeout_ms"
    a = cls(gbroker.bootstrap, group, [topic], name="a", **{key: "inst-a", sess: 20000})
    b = cls(gbroker.bootstrap, group, [topic], name="b", **{key: "inst-b", sess: 20000})
    b2 = None
    a.start()
    b.start()
    admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
    try:
        snaps = wait_settled([a, b], all_parts(topic, 6), [3, 3])
        desc0 = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assert sorted(m.group_instance_id for m in desc0.members) == ["inst-a", "inst-b"]
        a_events = len(a.events)
        b.stop()  # a static member does not send LeaveGroup on close
        desc1 = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assert desc1.state.name == "STABLE" and len(desc1.members) == 2, (desc1.state, desc1.members)
        b2 = cls(gbroker.bootstrap, group, [topic], name="b2", **{key: "inst-b", sess: 20000})
        b2.start()
        wait_until(lambda: b2.snapshot() == snaps[1], WAIT_S, "restarted static member gets its partitions back")
        # a saw no rebalance at all
        assert a.events[a_events:] == [], a.events[a_events:]
        assert a.snapshot() == snaps[0]
        desc2 = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assert desc2.state.name == "STABLE"
        ids = {m.group_instance_id: m.member_id for m in desc2.members}
        old = {m.group_instance_id: m.member_id for m in desc0.members}
        assert ids["inst-a"] == old["inst-a"] and ids["inst-b"] != old["inst-b"]
        assert_no_errors([a, b, b2])
    finally:
        stop_members([m for m in (a, b, b2) if m])


# ------------------------------------------------------------------ admin

def test_admin_confluent_list_describe_offsets_lag_alter_delete(gbroker):
    from confluent_kafka import ConsumerGroupTopicPartitions, ConsumerGroupState
    topic, group = uniq("adm-cf"), uniq("grp")
    create_topic(gbroker.bootstrap, topic, 3)
    produce_spread(gbroker.bootstrap, topic, 3, 10)
    admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
    m = ConfluentMember(gbroker.bootstrap, group, [topic], name="adm", **{"partition.assignment.strategy": "range"})
    m.commit_each = True
    m.start()
    try:
        wait_until(lambda: len(m.values()) == 30, WAIT_S, "member consumed 30")
        listed = admin.list_consumer_groups(request_timeout=10).result()
        mine = [g for g in listed.valid if g.group_id == group]
        assert len(mine) == 1 and mine[0].state == ConsumerGroupState.STABLE and not mine[0].is_simple_consumer_group
        d = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assert d.state == ConsumerGroupState.STABLE and d.partition_assignor == "range"
        assert not d.is_simple_consumer_group and len(d.members) == 1
        assert d.members[0].client_id == "adm" and d.members[0].host
        assert sorted((tp.topic, tp.partition) for tp in d.members[0].assignment.topic_partitions) == \
            sorted(all_parts(topic, 3))
        # NON_EMPTY_GROUP while a member exists
        with pytest.raises(KafkaException) as ei:
            admin.delete_consumer_groups([group], request_timeout=10)[group].result()
        assert ei.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
        # alter while the group has a member: rejected (UNKNOWN_MEMBER_ID per partition, as Kafka)
        res = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, 0, 1)])])[group].result(timeout=10)
        assert [tp.error.code() if tp.error else 0 for tp in res.topic_partitions] == [KafkaError.UNKNOWN_MEMBER_ID]
        m.stop()
        # committed offsets + high watermarks = lag (what kafka-consumer-groups --describe shows)
        offs = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=10)
        committed = {(t.topic, t.partition): t.offset for t in offs.topic_partitions}
        assert committed == {(topic, p): 10 for p in range(3)}
        assert admin.list_consumer_groups(request_timeout=10).result().valid  # still listed
        d = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assert d.state == ConsumerGroupState.EMPTY and d.members == []
        # reset: alter offsets of the now-empty group, then lag
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 0), TopicPartition(topic, 2, 7)])]
        )[group].result(timeout=10)
        offs = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, p) for p in range(3)])])[group].result(timeout=10)
        committed = {t.partition: t.offset for t in offs.topic_partitions}
        assert committed == {0: 3, 1: 0, 2: 7}
        c = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": group})
        try:
            hw = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in range(3)}
        finally:
            c.close()
        assert {p: hw[p] - committed[p] for p in range(3)} == {0: 7, 1: 10, 2: 3}
        # a new member resumes from the altered offsets
        r = ConfluentMember(gbroker.bootstrap, group, [topic], name="resume")
        r.start()
        try:
            wait_until(lambda: len(r.values()) >= 20, WAIT_S, "resume consumption")
            firsts = {}
            for (_, p, o, _) in r.messages:
                firsts.setdefault(p, o)
            assert firsts == {0: 3, 1: 0, 2: 7}
            assert len(r.values()) == 20
        finally:
            r.stop()
        admin.delete_consumer_groups([group], request_timeout=10)[group].result()
        assert group not in [g.group_id for g in admin.list_consumer_groups(request_timeout=10).result().valid]
        offs = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, 0)])])[group].result(timeout=10)
        assert [t.offset for t in offs.topic_partitions] == [-1001]  # OFFSET_INVALID: none committed
        # deleting again: GROUP_ID_NOT_FOUND
        with pytest.raises(KafkaException) as ei:
            admin.delete_consumer_groups([group], request_timeout=10)[group].result()
        assert ei.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
    finally:
        if m.is_alive():
            m.stop()


def test_admin_kafka_python_groups_offsets(gbroker):
    from kafka import KafkaConsumer, TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata
    topic, group = uniq("adm-kp"), uniq("grp")
    create_topic(gbroker.bootstrap, topic, 2)
    produce_spread(gbroker.bootstrap, topic, 2, 10)
    admin = KafkaAdminClient(bootstrap_servers=gbroker.bootstrap, request_timeout_ms=10000)
    m = KafkaPythonMember(gbroker.bootstrap, group, [topic], name="kpadm")
    m.commit_each = True
    m.start()
    try:
        wait_until(lambda: len(m.values()) == 20, WAIT_S, "consumed 20")
        groups = admin.list_groups()
        names = [g["group_id"] for g in groups]
        assert group in names, groups
        d = admin.describe_groups([group])[group]
        assert d["group_state"] == "Stable" and d["protocol_type"] == "consumer", d
        assert len(d["members"]) == 1 and d["members"][0]["client_id"] == "kpadm", d
        assert d["protocol_data"] in ("range", "roundrobin", "sticky", "cooperative-sticky"), d
        wait_until(lambda: {tp.partition: om.offset for tp, om in
                            admin.list_group_offsets({group: None})[group].items()} == {0: 10, 1: 10},
                   WAIT_S, "committed 10/10")
        res = admin.delete_groups([group])
        assert "NonEmptyGroup" in str(dict(res)[group]), res  # NON_EMPTY_GROUP
        m.stop()
        res = admin.alter_group_offsets(group, {KTP(topic, 0): OffsetAndMetadata(4, "meta", -1)})
        assert all(e.errno == 0 for e in res.values()), res
        offs = admin.list_group_offsets({group: [KTP(topic, 0), KTP(topic, 1)]})[group]
        assert {tp.partition: (om.offset, om.metadata) for tp, om in offs.items()} == {0: (4, "meta"), 1: (10, "")}
        if hasattr(admin, "reset_group_offsets"):
            res = admin.reset_group_offsets(group, {KTP(topic, 1): 2})
            offs = admin.list_group_offsets({group: [KTP(topic, 1)]})[group]
            assert offs[KTP(topic, 1)].offset == 2, (res, offs)
        # OffsetDelete of an empty group
        res = admin.delete_group_offsets(group, [KTP(topic, 0)])
        assert all(e.errno == 0 for e in res.values()), res
        offs = admin.list_group_offsets({group: [KTP(topic, 0), KTP(topic, 1)]})[group]
        assert {tp.partition: om.offset for tp, om in offs.items()} == {0: -1, 1: 2}, offs
        res = admin.delete_groups([group])
        assert str(dict(res)[group]) in ("OK", "NoError", "None"), res
        names = [g["group_id"] for g in admin.list_groups()]
        assert group not in names
    finally:
        if m.is_alive():
            m.stop()
        admin.close()


def test_offset_delete_rejected_for_subscribed_topic(gbroker):
    """OffsetDelete while a member subscribes to the topic: GROUP_SUBSCRIBED_TO_TOPIC (kafka-python)."""
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    topic, group = uniq("offdel"), uniq("grp")
    create_topic(gbroker.bootstrap, topic, 1)
    produce_spread(gbroker.bootstrap, topic, 1, 3)
    m = ConfluentMember(gbroker.bootstrap, group, [topic], name="sub")
    m.commit_each = True
    m.start()
    admin = KafkaAdminClient(bootstrap_servers=gbroker.bootstrap, request_timeout_ms=10000)
    try:
        wait_until(lambda: len(m.values()) == 3, WAIT_S, "consumed")
        try:
            res = admin.delete_group_offsets(group, [KTP(topic, 0)])
            errs = {tp: e.errno for tp, e in res.items()}
        except Exception as e:  # noqa: BLE001 - some versions raise
            errs = {"top": getattr(e, "errno", repr(e))}
        assert list(errs.values()) == [86], errs  # GROUP_SUBSCRIBED_TO_TOPIC
    finally:
        m.stop()
        admin.close()


# ------------------------------------------------------------------ simple consumers

def test_simple_consumer_commit_and_fetch_confluent(gbroker):
    topic, group = uniq("simple-cf"), uniq("grp")
    create_topic(gbroker.bootstrap, topic, 2)
    c = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
        res = c.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 9)], asynchronous=False)
        assert all(tp.error is None for tp in res), res
        got = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
        assert [(t.partition, t.offset) for t in got] == [(0, 5), (1, 9)]
    finally:
        c.close()
    # The simple group is visible to admin with its offsets and no members.
    admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
    d = admin.describe_consumer_groups([group])[group].result(timeout=10)
    assert d.members == [] and d.state.name == "EMPTY"
    # kafka-python sees the same offsets
    from kafka import KafkaConsumer, TopicPartition as KTP
    k = KafkaConsumer(bootstrap_servers=gbroker.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        assert [k.committed(KTP(topic, p)) for p in (0, 1)] == [5, 9]
    finally:
        k.close()


def test_simple_consumer_commit_and_fetch_kafka_python(gbroker):
    from kafka import KafkaConsumer, TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata
    topic, group = uniq("simple-kp"), uniq("grp")
    create_topic(gbroker.bootstrap, topic, 1)
    confluent_produce(gbroker.bootstrap, topic, [{"value": b"x%d" % i} for i in range(10)], partition=0)
    k = KafkaConsumer(bootstrap_servers=gbroker.bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", fetch_max_wait_ms=100)
    tp = KTP(topic, 0)
    try:
        k.assign([tp])
        assert k.committed(tp) is None
        got = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < 6 and time.monotonic() < deadline:
            for recs in k.poll(timeout_ms=100, max_records=6 - len(got)).values():
                got.extend(recs)
        k.commit({tp: OffsetAndMetadata(got[5].offset + 1, "simple", -1)})
        assert k.committed(tp) == 6
        assert k.committed(tp, metadata=True).metadata == "simple"
    finally:
        k.close()
    # a later simple consumer of the same group resumes at the committed offset (aiokafka)
    from aiokafka import AIOKafkaConsumer, TopicPartition as ATP

    async def resume():
        c = AIOKafkaConsumer(bootstrap_servers=gbroker.bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest")
        await c.start()
        try:
            c.assign([ATP(topic, 0)])
            assert await c.committed(ATP(topic, 0)) == 6
            return (await c.getone()).offset
        finally:
            await c.stop()
    assert asyncio.run(asyncio.wait_for(resume(), WAIT_S)) == 6


def test_simple_consumer_with_instance_id_commits_to_empty_group(gbroker):
    """A consumer outside group management that sets a group instance id commits with
    generation -1 and its instance id (kafka-python sends it at OffsetCommit v7+, librdkafka
    too): Kafka stores it while the group is empty, whatever member it names (issue 16)."""
    from kafka import KafkaConsumer, TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata
    topic, group = uniq("simple-static"), uniq("grp")
    create_topic(gbroker.bootstrap, topic, 2)
    k = KafkaConsumer(bootstrap_servers=gbroker.bootstrap, group_id=group, enable_auto_commit=False,
                      group_instance_id="static-kp")
    try:
        k.assign([KTP(topic, 0)])
        k.commit({KTP(topic, 0): OffsetAndMetadata(4, "", -1)})
        assert k.committed(KTP(topic, 0)) == 4
    finally:
        k.close()
    c = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "group.instance.id": "static-cf"})
    try:
        c.assign([TopicPartition(topic, 1, 0)])
        res = c.commit(offsets=[TopicPartition(topic, 1, 7)], asynchronous=False)
        assert all(tp.error is None for tp in res), res
        got = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
        assert [(t.partition, t.offset) for t in got] == [(0, 4), (1, 7)]
    finally:
        c.close()


def test_simple_consumer_commit_rejected_while_group_has_members(gbroker):
    """A generation -1 commit to a group with live members fails (Kafka: UNKNOWN_MEMBER_ID)."""
    topic, group = uniq("simple-busy"), uniq("grp")
    create_topic(gbroker.bootstrap, topic, 1)
    m = ConfluentMember(gbroker.bootstrap, group, [topic], name="live")
    m.start()
    c = Consumer({"bootstrap.servers": gbroker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        wait_balanced([m], all_parts(topic, 1))
        c.assign([TopicPartition(topic, 0, 0)])
        with pytest.raises(KafkaException) as ei:
            c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        assert ei.value.args[0].code() in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION), ei.value
    finally:
        c.close()
        m.stop()
