"""The consumer group protocol of KIP-848 (`group.protocol=consumer`) with librdkafka
(confluent-kafka 2.16) against `moldau server`: ConsumerGroupHeartbeat/ConsumerGroupDescribe,
server-side assignment, incremental reconciliation, session timeouts, conversion from classic
groups and mixed groups, and Kafka's errors where a client asks for something unsupported.

Brokers run with short `group.consumer.*` timeouts (the brokers' min/max allow them) so members
that vanish are detected within seconds. Every wait is a condition polled against a deadline.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from test_groups import (_commit_first, AssignmentTimeout, ConfluentMember, MemberProcess, all_parts, assert_no_errors,
                         create_topic, produce_spread, start_members, stop_members, uniq, wait_balanced,
                         wait_until)

SESSION_MS = 3000
HEARTBEAT_MS = 250
WAIT_S = 30.0
SETTINGS = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.session.timeout.ms": SESSION_MS,
    "group.consumer.min.heartbeat.interval.ms": 50,
    "group.consumer.heartbeat.interval.ms": HEARTBEAT_MS,
}
# The classic protocol's session settings are not allowed with group.protocol=consumer.
CONSUMER_PROTOCOL = {"group.protocol": "consumer", "session.timeout.ms": None, "heartbeat.interval.ms": None}


@pytest.fixture(scope="module")
def cbroker(request, moldau_bin, tmp_path_factory):
    from conftest import BrokerPool, _report_pool
    pool = BrokerPool(moldau_bin, tmp_path_factory.mktemp("moldau-kip848"))
    server = pool.start("kip848", **SETTINGS)
    yield server
    _report_pool(request, pool)


class Kip848Member(ConfluentMember):
    """A librdkafka member with group.protocol=consumer."""

    def __init__(self, bootstrap, group, topics, name="k", **conf):
        super().__init__(bootstrap, group, topics, name=name)
        for k, v in {**CONSUMER_PROTOCOL, **conf}.items():
            if v is None:
                self.conf.pop(k, None)
            else:
                self.conf[k] = v


def values_of(members):
    out = []
    for m in members:
        out.extend(m.values())
    return out


def test_three_members_consume_every_record_exactly_once(cbroker):
    topic, group = uniq("cp3"), uniq("grp")
    create_topic(cbroker.bootstrap, topic, 6)
    members = start_members(Kip848Member, 3, cbroker.bootstrap, group, [topic])
    try:
        wait_balanced(members, all_parts(topic, 6), [2, 2, 2])
        values = produce_spread(cbroker.bootstrap, topic, 6, 30)
        wait_until(lambda: set(values_of(members)) >= values, WAIT_S, "all records consumed")
        got = values_of(members)
        assert len(got) == len(values) == 180, (len(got), len(set(got)))
        assert sorted(got) == sorted(values)
        # Every partition was consumed by its owner only.
        for m in members:
            parts = {p for (_, p, _, _) in m.messages}
            assert parts == {p for (_, p) in m.snapshot()}, (m.name_, parts, m.snapshot())
        # ConsumerGroupDescribe through librdkafka's admin client.
        admin = AdminClient({"bootstrap.servers": cbroker.bootstrap})
        d = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assert len(d.members) == 3
        assert str(d.type).endswith("CONSUMER"), d.type
        assigned = set()
        for mem in d.members:
            assigned |= {(tp.topic, tp.partition) for tp in mem.assignment.topic_partitions}
        assert assigned == all_parts(topic, 6)
        listed = admin.list_consumer_groups().result(timeout=10)
        mine = [g for g in listed.valid if g.group_id == group]
        assert mine and str(mine[0].type).endswith("CONSUMER"), mine
        assert_no_errors(members)
    finally:
        stop_members(members)


def test_killed_member_partitions_move_after_its_session_timeout(cbroker):
    topic, group = uniq("cpkill"), uniq("grp")
    create_topic(cbroker.bootstrap, topic, 6)
    survivor = Kip848Member(cbroker.bootstrap, group, [topic], name="survivor")
    survivor.start()
    child = MemberProcess("confluent-consumer-protocol", cbroker.bootstrap, group, topic, SESSION_MS)
    try:
        wait_until(lambda: len(survivor.snapshot()) == 3 and len(child.assigned) == 3
                   and {p for _, p in survivor.snapshot()} | child.assigned == set(range(6)),
                   WAIT_S, "3+3 between the survivor and the child", exc=AssignmentTimeout)
        child.kill()
        wait_until(lambda: survivor.snapshot() == all_parts(topic, 6), WAIT_S, "survivor takes all 6",
                   exc=AssignmentTimeout)
        # The group's epoch moved past the dead member and it is gone.
        admin = AdminClient({"bootstrap.servers": cbroker.bootstrap})
        d = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assert len(d.members) == 1
        values = produce_spread(cbroker.bootstrap, topic, 6, 10)
        wait_until(lambda: set(survivor.values()) >= values, WAIT_S, "survivor consumes everything")
        assert_no_errors([survivor])
    finally:
        child.kill()
        survivor.stop()


class Feeder(threading.Thread):
    """Produces to every partition continuously until stopped."""

    def __init__(self, bootstrap, topic, partitions):
        super().__init__(daemon=True)
        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        self.topic, self.partitions = topic, partitions
        self.stop_event = threading.Event()
        self.sent = 0

    def run(self):
        while not self.stop_event.is_set():
            for p in range(self.partitions):
                self.p.produce(self.topic, value=f"feed-{self.sent}".encode(), partition=p)
                self.sent += 1
            self.p.poll(0)
            time.sleep(0.01)
        self.p.flush(10)

    def stop(self):
        self.stop_event.set()
        self.join(20)


def test_joining_member_does_not_pause_the_others(cbroker):
    topic, group = uniq("cpjoin"), uniq("grp")
    create_topic(cbroker.bootstrap, topic, 6)
    old = start_members(Kip848Member, 2, cbroker.bootstrap, group, [topic])
    feeder = Feeder(cbroker.bootstrap, topic, 6)
    new = None
    try:
        wait_balanced(old, all_parts(topic, 6), [3, 3])
        feeder.start()
        wait_until(lambda: all(m.values() for m in old), WAIT_S, "old members consuming")
        before = [m.snapshot() for m in old]
        marks = [len(m.events) for m in old]
        counts = [len(m.messages) for m in old]
        new = Kip848Member(cbroker.bootstrap, group, [topic], name="new")
        new.start()
        snaps = wait_balanced(old + [new], all_parts(topic, 6), [2, 2, 2])
        during = [len(m.messages) - c for m, c in zip(old, counts)]
        for m, b, s, mark in zip(old, before, snaps, marks):
            events = m.events[mark:]
            assert not [e for e in events if e[0] == "lost"], events
            revoked = set().union(*[ps for k, ps in events if k == "revoke"] or [set()])
            # Only what moved was revoked; what a member kept it never stopped consuming.
            assert revoked == b - s, (m.name_, events, b, s)
            assert s <= b
        print(f"records consumed by the other members during the join: {during}")
        # The old members kept consuming their retained partitions throughout.
        wait_until(lambda: all(len(m.messages) > c for m, c in zip(old, counts)), WAIT_S,
                   "old members still consuming")
        assert_no_errors(old + [new])
    finally:
        feeder.stop()
        stop_members(old + ([new] if new else []))


def test_empty_classic_group_converts_and_keeps_its_offsets(cbroker):
    topic, group = uniq("cpconv"), uniq("grp")
    create_topic(cbroker.bootstrap, topic, 1)
    values = produce_spread(cbroker.bootstrap, topic, 1, 20)
    # A classic-protocol member consumes the first 10 records and commits them.
    assert _commit_first("confluent", cbroker.bootstrap, group, topic, 10) == list(range(10))
    first = [f"v-0-{i}".encode() for i in range(10)]
    admin = AdminClient({"bootstrap.servers": cbroker.bootstrap})
    d = admin.describe_consumer_groups([group])[group].result(timeout=10)
    assert str(d.type).endswith("CLASSIC"), d.type
    m = Kip848Member(cbroker.bootstrap, group, [topic], name="upgraded")
    m.start()
    try:
        wait_until(lambda: len(m.values()) >= 10, WAIT_S, "the rest consumed")
        # It resumed from the classic group's committed offset: nothing consumed twice.
        assert sorted(first + m.values()) == sorted(values)
        d = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assert str(d.type).endswith("CONSUMER"), d.type
        assert_no_errors([m])
    finally:
        m.stop()


def test_online_upgrade_mixed_group_and_downgrade(cbroker):
    topic, group = uniq("cpmixed"), uniq("grp")
    create_topic(cbroker.bootstrap, topic, 6)
    classic = ConfluentMember(cbroker.bootstrap, group, [topic], name="classic",
                              **{"session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    classic.start()
    modern = None
    try:
        wait_balanced([classic], all_parts(topic, 6))
        # A consumer-protocol member joins the running classic group: upgraded to a consumer
        # group whose classic member keeps working through JoinGroup/SyncGroup/Heartbeat.
        modern = Kip848Member(cbroker.bootstrap, group, [topic], name="modern")
        modern.start()
        wait_balanced([classic, modern], all_parts(topic, 6), [3, 3])
        admin = AdminClient({"bootstrap.servers": cbroker.bootstrap})
        d = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assert str(d.type).endswith("CONSUMER"), d.type
        values = produce_spread(cbroker.bootstrap, topic, 6, 10)
        wait_until(lambda: set(classic.values()) | set(modern.values()) >= values, WAIT_S, "mixed consumption")
        got = [v for v in classic.values() + modern.values() if v in values]
        assert sorted(got) == sorted(values), "every record exactly once across the mixed group"
        # The consumer-protocol member leaves: the group goes back to classic.
        modern.stop()
        wait_balanced([classic], all_parts(topic, 6))
        wait_until(lambda: str(admin.describe_consumer_groups([group])[group].result(timeout=10).type)
                   .endswith("CLASSIC"), WAIT_S, "downgraded to classic")
        assert_no_errors([classic])
    finally:
        stop_members([m for m in (classic, modern) if m])


def test_unsupported_assignor_is_an_error_not_silence(cbroker):
    topic, group = uniq("cpasg"), uniq("grp")
    create_topic(cbroker.bootstrap, topic, 1)
    c = Consumer({"bootstrap.servers": cbroker.bootstrap, "group.id": group, "group.protocol": "consumer",
                  "group.remote.assignor": "sticky"})
    errors = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while not errors and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error():
                errors.append(m.error())
        assert errors, "no error surfaced"
        # librdkafka raises UNSUPPORTED_ASSIGNOR (112) as a fatal error with the code's text.
        e = errors[0]
        assert e.code() in (KafkaError.UNSUPPORTED_ASSIGNOR, KafkaError._FATAL), errors
        assert "assignor or its version range is not supported" in e.str(), errors
    finally:
        c.close()


def test_regex_subscription_picks_up_new_topics(cbroker):
    prefix = uniq("cprx")
    create_topic(cbroker.bootstrap, f"{prefix}-a", 2)
    m = Kip848Member(cbroker.bootstrap, uniq("grp"), [f"^{prefix}-.*"], name="rx")
    m.start()
    try:
        wait_until(lambda: m.snapshot() == all_parts(f"{prefix}-a", 2), WAIT_S, "regex matches the first topic")
        create_topic(cbroker.bootstrap, f"{prefix}-b", 1)
        wait_until(lambda: m.snapshot() == all_parts(f"{prefix}-a", 2) | all_parts(f"{prefix}-b", 1), WAIT_S,
                   "regex matches the new topic")
        assert_no_errors([m])
    finally:
        m.stop()


def _compact(s):
    import kwire
    if s is None:
        return b"\x00"
    b = s.encode()
    return kwire.uvarint(len(b) + 1) + b


def _heartbeat_v1(group, member, epoch, names, regex, assignor=None):
    import kwire
    body = _compact(group) + _compact(member) + kwire.i32(epoch) + _compact(None) + _compact(None)
    body += kwire.i32(60000)
    if names is None:
        body += b"\x00"
    else:
        body += kwire.uvarint(len(names) + 1) + b"".join(_compact(n) for n in names)
    body += _compact(regex) + _compact(assignor) + b"\x01" + b"\x00"
    return body


def _heartbeat_error(address, body, group, version=1):
    import kwire
    with kwire.connect(address) as sock:
        # FindCoordinator v0 first: it creates __consumer_offsets on a fresh broker.
        sock.sendall(kwire.request(10, 0, 4, kwire.string(group)))
        r = kwire.Reader(kwire.recv_frame(sock))
        assert r.i32() == 4 and r.i16() == 0
        sock.sendall(kwire.request(68, version, 5, body, flexible=True))
        r = kwire.Reader(kwire.recv_frame(sock))
        assert r.i32() == 5
        r.uvarint()  # response header tagged fields
        r.i32()  # throttle
        code = r.i16()
        n = r.uvarint()
        msg = r.take(n - 1).decode() if n else None
        return code, msg


def test_wire_errors_name_what_is_unsupported(cbroker):
    """A regex Kafka's RE2/J rejects gets INVALID_REGULAR_EXPRESSION (librdkafka checks regexes
    itself, so this speaks the wire directly); an unknown assignor UNSUPPORTED_ASSIGNOR."""
    g = uniq("grp")
    code, msg = _heartbeat_error(cbroker.address, _heartbeat_v1(g, "m-1", 0, None, "a(b"), g)
    assert code == 128, (code, msg)
    assert "is not a valid regular expression" in msg
    code, msg = _heartbeat_error(cbroker.address, _heartbeat_v1(g, "m-1", 0, ["t"], None, "sticky"), g)
    assert code == 112, (code, msg)
    code, msg = _heartbeat_error(cbroker.address, _heartbeat_v1(g, "", 0, ["t"], None), g)
    assert (code, msg) == (42, "MemberId can't be empty."), (code, msg)


def test_group_state_is_replayed_after_a_broker_restart(brokers):
    """Members, epochs and assignments live in __consumer_offsets: after a restart the group is
    replayed as it was; its members (killed with the broker down) are fenced after their
    session, and a new member takes over from the committed offsets."""
    server = brokers.start(**SETTINGS)
    topic, group = uniq("cprestart"), uniq("grp")
    create_topic(server.bootstrap, topic, 4)
    children = [MemberProcess("confluent-consumer-protocol", server.bootstrap, group, topic, SESSION_MS)
                for _ in range(2)]
    try:
        wait_until(lambda: sorted(len(c.assigned) for c in children) == [2, 2]
                   and children[0].assigned | children[1].assigned == set(range(4)),
                   WAIT_S, "2+2", exc=AssignmentTimeout)
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        before = admin.describe_consumer_groups([group])[group].result(timeout=10)
        for c in children:
            c.kill()
    finally:
        for c in children:
            c.kill()
    server.restart()
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    after = admin.describe_consumer_groups([group])[group].result(timeout=10)
    members = lambda d: sorted((m.member_id, sorted(tp.partition for tp in m.assignment.topic_partitions))
                               for m in d.members)
    assert members(after) == members(before)
    assert str(after.type).endswith("CONSUMER")
    # The dead members are fenced after their session; a newcomer gets everything.
    values = produce_spread(server.bootstrap, topic, 4, 5)
    m = Kip848Member(server.bootstrap, group, [topic], name="newcomer")
    m.start()
    try:
        wait_until(lambda: m.snapshot() == all_parts(topic, 4), WAIT_S, "newcomer owns all")
        wait_until(lambda: set(m.values()) >= values, WAIT_S, "newcomer consumes")
        assert_no_errors([m])
    finally:
        m.stop()


def test_static_member_restart_keeps_its_partitions_without_a_rebalance(cbroker):
    topic, group = uniq("cpstatic"), uniq("grp")
    create_topic(cbroker.bootstrap, topic, 4)
    a = Kip848Member(cbroker.bootstrap, group, [topic], name="a", **{"group.instance.id": "inst-a"})
    b = Kip848Member(cbroker.bootstrap, group, [topic], name="b", **{"group.instance.id": "inst-b"})
    a.start()
    b.start()
    a2 = None
    try:
        snaps = wait_balanced([a, b], all_parts(topic, 4), [2, 2])
        marks = len(b.events)
        a.stop()  # a static member leaves "for now" (epoch -2): its partitions stay reserved
        a2 = Kip848Member(cbroker.bootstrap, group, [topic], name="a2", **{"group.instance.id": "inst-a"})
        a2.start()
        wait_until(lambda: a2.snapshot() == snaps[0], WAIT_S, "the restarted member gets its partitions back")
        # b saw no rebalance at all.
        assert b.events[marks:] == [], b.events[marks:]
        assert b.snapshot() == snaps[1]
        assert_no_errors([b, a2])
    finally:
        stop_members([m for m in (a, b, a2) if m])


def test_group_id_only_transactional_offsets_into_a_live_consumer_group(cbroker):
    """As Kafka 4.4: a transactional producer that names only the group (kafka-python's and
    aiokafka's send_offsets_to_transaction(offsets, group_id): no member id, generation -1)
    may commit offsets for a consumer group that has members."""
    import clients
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP
    from kafka import KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata
    topic, group = uniq("cptxo"), uniq("grp")
    create_topic(cbroker.bootstrap, topic, 2)
    m = Kip848Member(cbroker.bootstrap, group, [topic], name="live")
    m.start()
    try:
        wait_balanced([m], all_parts(topic, 2))
        kp = KafkaProducer(bootstrap_servers=cbroker.bootstrap, transactional_id=uniq("kp"),
                           request_timeout_ms=30000)
        try:
            kp.init_transactions()
            kp.begin_transaction()
            kp.send_offsets_to_transaction({KTP(topic, 0): OffsetAndMetadata(7, "", -1)}, group)
            kp.commit_transaction()
        finally:
            kp.close()

        async def aio():
            p = AIOKafkaProducer(bootstrap_servers=cbroker.bootstrap, transactional_id=uniq("aio"))
            await p.start()
            try:
                async with p.transaction():
                    await p.send_offsets_to_transaction({ATP(topic, 1): 9}, group)
            finally:
                await p.stop()
        clients.run_async(aio(), timeout=60)
        admin = AdminClient({"bootstrap.servers": cbroker.bootstrap})
        from confluent_kafka import ConsumerGroupTopicPartitions
        # EndTxn is answered once the commit is prepared; the markers that make the offsets
        # visible follow (in Kafka too), so an OffsetFetch right after may not see them yet.
        deadline = time.monotonic() + 30
        while True:
            res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=10)
            got = {tp.partition: tp.offset for tp in res.topic_partitions if tp.topic == topic}
            if got == {0: 7, 1: 9} or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert got == {0: 7, 1: 9}, got
        assert_no_errors([m])
    finally:
        m.stop()


def _kafka_python_commit(bootstrap, group, member_id, epoch, topic, partition, offset):
    """OffsetCommit v9+ (the consumer-protocol versions) encoded and sent by kafka-python to the
    group's coordinator, with the member id and epoch given: the error name of the partition."""
    from kafka.admin import KafkaAdminClient
    from kafka.protocol.consumer import OffsetCommitRequest
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        _Topic = OffsetCommitRequest.OffsetCommitRequestTopic
        request = OffsetCommitRequest(
            group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id,
            group_instance_id=None, retention_time_ms=-1,
            topics=[_Topic(name=topic, partitions=[_Topic.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata="")])],
            min_version=9, max_version=9)  # v10 names topics by id

        async def send():
            node = await admin._find_coordinator_id(group)
            return await admin._manager.send(request, node_id=node)
        response = admin._manager.run(send)
        return KafkaError(response.topics[0].partitions[0].error_code).name()
    finally:
        admin.close()


def stale_epoch_commit_outcomes(bootstrap):
    """A librdkafka member (group.protocol=consumer) owns both partitions of a topic; kafka-python
    commits for it with an older member epoch, an unknown member and the member's own commit
    path is checked to still work. Returns what each commit answered and the committed offsets.
    Member epochs start at 2 (Kafka 4.4), so epoch 1 is older than any the member held."""
    topic, group = uniq("cpstale"), uniq("grp")
    create_topic(bootstrap, topic, 2)
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    c = Consumer(conf)
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while len(c.assignment()) < 2 and time.monotonic() < deadline:
            c.poll(0.2)
        assert len(c.assignment()) == 2, f"assignment {c.assignment()}"
        member = c.memberid()
        out = {
            "older epoch": _kafka_python_commit(bootstrap, group, member, 1, topic, 0, 7),
            "unknown member": _kafka_python_commit(bootstrap, group, "nobody", 1, topic, 0, 8),
        }
        c.commit(offsets=[TopicPartition(topic, 1, 5)], asynchronous=False)
        committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
        out["committed"] = [tp.offset for tp in committed]
        return out
    finally:
        c.close()


def test_a_commit_with_an_older_member_epoch_is_stale(cbroker):
    """kafka-python's OffsetCommit for a consumer-protocol member with an epoch older than any
    it held gets STALE_MEMBER_EPOCH (an unknown member UNKNOWN_MEMBER_ID) and changes nothing,
    while librdkafka's own commit at its current epoch is accepted: what Apache Kafka 4.4
    answers to the same function (checked against the reference kit)."""
    assert stale_epoch_commit_outcomes(cbroker.bootstrap) == {
        "older epoch": "STALE_MEMBER_EPOCH",
        "unknown member": "UNKNOWN_MEMBER_ID",
        "committed": [-1001, 5],
    }


def test_uniform_assignment_follows_client_rack_on_three_racked_brokers(brokers, tmp_path):
    """A controller and three brokers with `broker.rack` r2, r3, r4; a topic of six partitions
    with one replica each (two per broker). Three librdkafka members (group.protocol=consumer,
    the default `uniform` assignor) with `client.rack` r2, r3, r4 each get exactly the two
    partitions whose replica is in their own rack: balance and rack locality agree here, and
    Moldau's uniform assignor then takes the rack-local choice. (Kafka 4.4's server-side
    uniform and range assignors ignore racks; Moldau's range assignor does too.)"""
    import socket
    import subprocess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cluster = {"cluster.id": "MkU3OEVBNTcwNTJENDM2Qk", "controller.listener.names": "CONTROLLER",
               "controller.quorum.voters": f"1@127.0.0.1:{port}",
               "broker.session.timeout.ms": 4000, "broker.heartbeat.interval.ms": 250}
    args = [str(brokers.binary), "server", "--data-dir", str(tmp_path / "controller"),
            "--set", "node.id=1", "--set", "process.roles=controller",
            "--set", f"listeners=CONTROLLER://127.0.0.1:{port}"]
    for k, v in cluster.items():
        args += ["--set", f"{k}={v}"]
    with open(tmp_path / "controller.log", "wb") as log:
        controller = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    members = []
    try:
        nodes = [brokers.start(f"b{n}", **{"node.id": n, "process.roles": "broker", "broker.rack": f"r{n}",
                                          **SETTINGS, **cluster}) for n in (2, 3, 4)]
        bootstrap = nodes[0].bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_until(lambda: sorted(admin.list_topics(timeout=10).brokers) == [2, 3, 4], WAIT_S,
                   "three brokers registered")
        topic, group = uniq("cprack"), uniq("grp")
        create_topic(bootstrap, topic, 6)
        leaders = {p.id: p.leader for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()}
        by_rack = {f"r{n}": {(topic, p) for p, leader in leaders.items() if leader == n} for n in (2, 3, 4)}
        assert sorted(len(v) for v in by_rack.values()) == [2, 2, 2], leaders
        members = [Kip848Member(bootstrap, group, [topic], name=f"rack-r{n}", **{"client.rack": f"r{n}"})
                   for n in (2, 3, 4)]
        for m in members:
            m.start()
        wait_until(lambda: [m.snapshot() for m in members] == [by_rack[f"r{n}"] for n in (2, 3, 4)], WAIT_S,
                   f"each member holds its rack's partitions {by_rack}")
        assert_no_errors(members)
    finally:
        stop_members(members)
        assert not brokers.stop_all()
        controller.terminate()
        try:
            controller.wait(timeout=30)
        except subprocess.TimeoutExpired:
            controller.kill()
            controller.wait()
