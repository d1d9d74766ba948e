"""The group and transaction coordinators on a three-node cluster with replicated internal
topics (`offsets.topic.replication.factor=3`, `transaction.state.log.replication.factor=3`),
when the node that coordinates is killed with SIGKILL (issues 11 and 13):

- a consumer group of real clients (two confluent-kafka members and one kafka-python member,
  committing synchronously after every batch) keeps consuming on the new coordinator (the new
  leader of the group's `__consumer_offsets` partition), and no acknowledged commit is lost or
  goes backwards: every member starts a partition it is given at or past the highest commit
  acknowledged so far, an observer fetching the group's offsets never sees less than what was
  acknowledged before it asked, and the final offsets are the topic's end;
- the same for a KIP-848 consumer group (three confluent-kafka members with
  `group.protocol=consumer`): the new coordinator replays the group's records (its epoch,
  target and current assignments) from `__consumer_offsets`, so the members carry on with
  their member epochs, and again no acknowledged commit is lost or goes backwards;
- an exactly-once consume-transform-produce job (confluent-kafka transactional producer with
  `send_offsets_to_transaction`, read_committed consumer; `tests/compat/eos_copy_app.py`)
  keeps copying when the transaction coordinator's node is killed: the output holds every
  input record exactly once, in order per partition.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from checker import create_topic, wait_for

COMPAT = Path(__file__).resolve().parent.parent / "compat"

PARTITIONS = 6
PER_PARTITION = 300
INTERNAL_PARTITIONS = 6
SETTINGS = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "offsets.topic.replication.factor": 3,
    "transaction.state.log.replication.factor": 3,
    "offsets.topic.num.partitions": INTERNAL_PARTITIONS,
    "transaction.state.log.num.partitions": INTERNAL_PARTITIONS,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
}
# KIP-848 members: the brokers' consumer-group timeouts, short so a member fenced by the
# coordinator's change (none should be) is replaced within the deadline.
CONSUMER_GROUP_SETTINGS = {
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.session.timeout.ms": 6000,
    "group.consumer.min.heartbeat.interval.ms": 50,
    "group.consumer.heartbeat.interval.ms": 500,
}
DEADLINE_S = 90.0


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def fill(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, value=b"%d:%05d" % (part, i), partition=part)
        p.poll(0)
    assert p.flush(60) == 0


def group_coordinator(bootstrap: str, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    return desc.coordinator.id


def describe(bootstrap: str, group: str):
    """The group's description, or None while its coordinator cannot answer."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        return admin.describe_consumer_groups([group], request_timeout=5)[group].result(timeout=10)
    except (KafkaException, TimeoutError):
        return None


def rebalancing_or_joined(bootstrap: str, group: str, members: int) -> bool:
    """The group is rebalancing, or holds `members` members (a rebalance may be over before
    a describe sees it)."""
    desc = describe(bootstrap, group)
    return desc is not None and (not str(desc.state).endswith("STABLE") or len(desc.members) >= members)


def java_hash(s: str) -> int:
    h = 0
    for ch in s.encode("utf-16-be").decode("utf-16-be"):
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def txn_coordinator(bootstrap: str, transactional_id: str) -> int:
    """The leader of the id's `__transaction_state` partition (Kafka's `abs(hashCode) % n`)."""
    h = java_hash(transactional_id)
    p = 0 if h == -(1 << 31) else abs(h) % INTERNAL_PARTITIONS
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics("__transaction_state", timeout=10)
    return md.topics["__transaction_state"].partitions[p].leader


class Commits:
    """What the group's members had acknowledged, and the violations seen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked = {p: -1 for p in range(PARTITIONS)}
        self.count = 0
        self.violations: list[str] = []
        self.consumed = 0

    def ack(self, offsets: dict[int, int]) -> None:
        with self.lock:
            for p, o in offsets.items():
                if o < self.acked[p]:
                    self.violations.append(f"partition {p}: commit of {o} acknowledged after {self.acked[p]}")
                self.acked[p] = max(self.acked[p], o)
            self.count += 1

    def started(self, who: str, p: int, offset: int) -> None:
        with self.lock:
            if offset < self.acked[p]:
                self.violations.append(
                    f"{who} started partition {p} at {offset}, below the acknowledged commit {self.acked[p]}")

    def snapshot(self) -> dict[int, int]:
        with self.lock:
            return dict(self.acked)

    def done(self) -> bool:
        with self.lock:
            return all(o >= PER_PARTITION for o in self.acked.values())


def confluent_member(bootstrap: str, topic: str, group: str, name: str, commits: Commits,
                     stop: threading.Event, consumer_protocol: bool = False) -> None:
    last: dict[int, int | None] = {}

    def on_assign(_c, tps):
        for tp in tps:
            last[tp.partition] = None

    def on_revoke(_c, tps):
        for tp in tps:
            last.pop(tp.partition, None)

    conf = {
        "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
        "socket.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 1000,
        "reconnect.backoff.max.ms": 500,
    }
    if consumer_protocol:
        # The session and heartbeat are the broker's with group.protocol=consumer.
        del conf["session.timeout.ms"], conf["heartbeat.interval.ms"]
        conf["group.protocol"] = "consumer"
    c = Consumer(conf)
    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not stop.is_set():
            msgs = [m for m in c.consume(20, 0.5) if not m.error()]
            if not msgs:
                continue
            upto: dict[int, int] = {}
            for m in msgs:
                p, o = m.partition(), m.offset()
                if last.get(p) is None:
                    commits.started(name, p, o)
                last[p] = o
                upto[p] = o + 1
            time.sleep(0.05)
            try:
                res = c.commit(offsets=[TopicPartition(topic, p, o) for p, o in upto.items()],
                               asynchronous=False)
            except KafkaException:
                continue
            ok = {tp.partition: tp.offset for tp in res if tp.error is None}
            if ok:
                commits.ack(ok)
    finally:
        try:
            c.close()
        except Exception:
            pass


def kafka_python_member(bootstrap: str, topic: str, group: str, name: str, commits: Commits,
                        stop: threading.Event) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    last: dict[int, int | None] = {}

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            for tp in revoked:
                last.pop(tp.partition, None)

        def on_partitions_assigned(self, assigned):
            for tp in assigned:
                last[tp.partition] = None

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=name,
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      session_timeout_ms=6000, heartbeat_interval_ms=500,
                      request_timeout_ms=10000, metadata_max_age_ms=1000)
    c.subscribe([topic], listener=Listener())
    try:
        while not stop.is_set():
            batches = c.poll(timeout_ms=500, max_records=20)
            upto: dict[int, int] = {}
            for tp, records in batches.items():
                for r in records:
                    if last.get(tp.partition) is None:
                        commits.started(name, tp.partition, r.offset)
                    last[tp.partition] = r.offset
                    upto[tp.partition] = r.offset + 1
            if not upto:
                continue
            time.sleep(0.05)
            try:
                c.commit({KTP(topic, p): OffsetAndMetadata(o, "", -1) for p, o in upto.items()})
            except Exception:
                continue
            commits.ack(upto)
    finally:
        try:
            c.close(autocommit=False)
        except Exception:
            pass


def observer(bootstrap: str, topic: str, group: str, commits: Commits, stop: threading.Event) -> None:
    """Fetches the group's committed offsets again and again: never below what was
    acknowledged before the fetch was sent."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "socket.timeout.ms": 5000})
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    try:
        while not stop.is_set():
            before = commits.snapshot()
            try:
                got = c.committed(tps, timeout=5)
            except KafkaException:
                time.sleep(0.2)
                continue
            for tp in got:
                if tp.error is None and before[tp.partition] >= 0 and tp.offset < before[tp.partition]:
                    with commits.lock:
                        commits.violations.append(
                            f"OffsetFetch answered {tp.offset} for partition {tp.partition} "
                            f"after {before[tp.partition]} was acknowledged")
            time.sleep(0.2)
    finally:
        c.close()


def test_group_coordinator_kill9_keeps_the_group_and_its_offsets(clusters):
    cluster = clusters(3, **SETTINGS)
    kill_the_group_coordinator(cluster, "cg", lambda topic, group, commits, stop: [
        (confluent_member, (cluster.bootstrap, topic, group, "cf-1", commits, stop)),
        (confluent_member, (cluster.bootstrap, topic, group, "cf-2", commits, stop)),
        (kafka_python_member, (cluster.bootstrap, topic, group, "kp-1", commits, stop)),
        # Joins just before the kill: the coordinator dies mid-rebalance.
        (confluent_member, (cluster.bootstrap, topic, group, "cf-late", commits, stop)),
    ])


def test_consumer_group_coordinator_kill9_keeps_the_group_and_its_offsets(clusters):
    cluster = clusters(3, **SETTINGS, **CONSUMER_GROUP_SETTINGS)
    group = kill_the_group_coordinator(cluster, "kip848", lambda topic, group, commits, stop: [
        (confluent_member, (cluster.bootstrap, topic, group, name, commits, stop, True))
        for name in ("cf-1", "cf-2", "cf-3", "cf-late")
    ])
    desc = wait_for("the group described after the restart",
                    lambda: describe(cluster.bootstrap, group), timeout=DEADLINE_S)
    assert str(desc.type).endswith("CONSUMER"), desc.type


def kill_the_group_coordinator(cluster, prefix: str, make_members) -> str:
    """Members from `make_members(topic, group, commits, stop)` (and an observer) consume
    and commit while the group's coordinator is killed; the last member joins right before the
    kill, so the coordinator dies while the group rebalances. Checks the commits and returns
    the group's id."""
    t0 = time.monotonic()
    topic, group = uid(f"{prefix}-in"), uid(prefix)
    create_topic(cluster.bootstrap, topic, PARTITIONS, 3)
    fill(cluster.bootstrap, topic, PARTITIONS, PER_PARTITION)
    commits, stop = Commits(), threading.Event()
    members = [threading.Thread(target=f, args=args, daemon=True)
               for f, args in make_members(topic, group, commits, stop)]
    members.append(threading.Thread(target=observer, args=(cluster.bootstrap, topic, group, commits, stop),
                                    daemon=True))
    late = members.pop(-2)
    for t in members:
        t.start()
    members.append(late)
    try:
        wait_for("the group's first commits", lambda: commits.count >= 15, timeout=DEADLINE_S)
        victim = group_coordinator(cluster.bootstrap, group)
        at_kill = commits.snapshot()
        late.start()
        wait_for("the newcomer's join reaching the coordinator",
                 lambda: rebalancing_or_joined(cluster.bootstrap, group, len(members) - 1), timeout=DEADLINE_S)
        cluster.kill9(victim)
        t_kill = time.monotonic()
        cluster.log(f"killed group coordinator {victim} at commits {at_kill}")
        new = wait_for("a new group coordinator",
                       lambda: (n := group_coordinator(cluster.bootstrap, group)) != victim and n,
                       timeout=DEADLINE_S)
        wait_for("commits past the kill",
                 lambda: any(o > at_kill[p] for p, o in commits.snapshot().items()), timeout=DEADLINE_S)
        moved = time.monotonic() - t_kill
        wait_for("the whole topic consumed and committed", commits.done, timeout=DEADLINE_S)
    finally:
        stop.set()
        for t in members:
            t.join(timeout=30)
    cluster.restart(victim)
    final = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = final.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        final.close()
    assert not commits.violations, commits.violations[:5]
    assert {tp.partition: tp.offset for tp in got} == {p: PER_PARTITION for p in range(PARTITIONS)}
    print(f"group coordinator {victim} killed, node {new} coordinates; commits resumed after "
          f"{moved:.1f}s; {commits.count} commits acknowledged; test took {time.monotonic() - t0:.1f}s")
    return group


def test_transaction_coordinator_kill9_exactly_once_copy(clusters):
    sys.path.insert(0, str(COMPAT))
    from test_eos_faults import App, read_all

    t0 = time.monotonic()
    cluster = clusters(3, **SETTINGS)
    src, dst = uid("eos-a"), uid("eos-b")
    parts = 3
    per = 400
    create_topic(cluster.bootstrap, src, parts, 3)
    create_topic(cluster.bootstrap, dst, parts, 3)
    fill(cluster.bootstrap, src, parts, per)
    expected = {p: [b"%d:%05d" % (p, i) for i in range(per)] for p in range(parts)}
    txn_id = uid("eos-txn")
    app = App([cluster.bootstrap, src, dst, uid("eos-group"), txn_id])
    app.start()
    try:
        wait_for("the first committed transactions", lambda: app.commits >= 3, timeout=DEADLINE_S)
        victim = txn_coordinator(cluster.bootstrap, txn_id)
        commits_at_kill = app.commits
        cluster.kill9(victim)
        t_kill = time.monotonic()
        cluster.log(f"killed transaction coordinator {victim} after {commits_at_kill} transactions")
        wait_for("a new transaction coordinator",
                 lambda: txn_coordinator(cluster.bootstrap, txn_id) not in (victim, -1), timeout=DEADLINE_S)

        def progressed():
            app.supervise()
            return app.commits > commits_at_kill

        wait_for("a committed transaction after the kill", progressed, timeout=DEADLINE_S)
        resumed = time.monotonic() - t_kill
        deadline = time.monotonic() + DEADLINE_S
        while True:
            counts = [len(read_all(cluster.bootstrap, dst, p, per, 1.0)) for p in range(parts)]
            if all(n >= per for n in counts):
                break
            assert time.monotonic() < deadline, (
                f"copy incomplete: {counts} of {per} per partition (commits {app.commits}, "
                f"app restarts {app.restarts}, errors {app.errors[-3:]})")
            app.supervise()
            time.sleep(0.3)
    finally:
        app.kill()
    cluster.restart(victim)
    for p in range(parts):
        got = read_all(cluster.bootstrap, dst, p, per, 10.0)
        assert len(got) == per, f"partition {p}: {len(got)} records, want {per}"
        assert got == expected[p], f"partition {p}: duplicates, losses or reordering"
    print(f"transaction coordinator {victim} killed; transactions resumed after {resumed:.1f}s; "
          f"commits={app.commits} app restarts={app.restarts} errors={len(app.errors)}; "
          f"test took {time.monotonic() - t0:.1f}s")
