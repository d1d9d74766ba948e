"""Client quotas (issue 14): DescribeClientQuotas / AlterClientQuotas (APIs 48/49) and their
enforcement, with real clients against a real `moldau server`.

kafka-python sends the two requests (its admin client has no quota methods; its own protocol
classes encode them); Kafka's own `kafka-configs --entity-type users/clients` is in
tests/reference/test_tools.py; `moldau quota` is tested here against kafka-python and in
tests/reference/test_cli_on_kafka.py against Kafka. Throttling is measured with confluent-kafka (librdkafka): a
producer over its `producer_byte_rate` is slowed to it (the acknowledged rate close to the
quota over a long window: see QUOTA_TOLERANCE) while another client of the same broker is not throttled at
all; a consumer over its `consumer_byte_rate` likewise. `quota.window.num=3` makes the rate
window (and so the test) short; the rates are Kafka's sampled rates either way.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import errors as kerrors
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest
from prometheus_client.parser import text_string_to_metric_families

import kwire

DEADLINE_S = 60.0
# The goal: a measured rate within 10 % of the quota. Measured on 2026-12-01 (load 15):
# producer -3 %, consumer +4 %, the same in two runs. (Before the sampled rate kept a window
# until its last record was old, a throttled client oscillated with a period of
# quota.window.num windows and these stretches measured +17 % and -16 %, reproducibly;
# auth::quota's `throttled_clients_hold_their_quota_over_any_stretch` reproduces that.)
QUOTA_TOLERANCE = 0.10
INVALID_REQUEST = 42


def kp_send(bootstrap: str, request):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        async def send():
            return await admin._manager.send(request)
        return admin._manager.run(send)
    finally:
        admin.close()


def alter(bootstrap: str, entries, validate_only=False):
    """entries: [([(type, name)], [(key, value, remove)])] -> [(error_code, message)]."""
    resp = kp_send(bootstrap, AlterClientQuotasRequest(entries=entries, validate_only=validate_only))
    return [(e.error_code, e.error_message or None) for e in resp.entries]


def describe(bootstrap: str, components, strict=False):
    """components: [(type, match_type, match)] -> {((type, name), ...): {key: value}}."""
    resp = kp_send(bootstrap, DescribeClientQuotasRequest(components=components, strict=strict))
    assert resp.error_code == 0, (resp.error_code, resp.error_message)
    return {tuple((d.entity_type, d.entity_name) for d in e.entity): {v.key: v.value for v in e.values}
            for e in resp.entries}


def wait_for(what: str, check) -> None:
    deadline = time.monotonic() + DEADLINE_S
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last is True:
            return
        time.sleep(0.2)
    pytest.fail(f"{what}: still {last!r} after {DEADLINE_S}s")


def test_alter_and_describe_client_quotas_with_kafka_python(brokers):
    b = brokers.start("quotas-api").bootstrap
    ok = alter(b, [
        ([("user", "alice")], [("producer_byte_rate", 1024.0, False), ("consumer_byte_rate", 2048.0, False)]),
        ([("user", "alice"), ("client-id", "app")], [("request_percentage", 12.5, False)]),
        ([("user", None)], [("producer_byte_rate", 4096.0, False)]),
        ([("client-id", None)], [("consumer_byte_rate", 8192.0, False)]),
        ([("ip", "127.0.0.2")], [("connection_creation_rate", 10.0, False)]),
    ])
    assert ok == [(0, None)] * 5, ok

    norm = lambda d: {tuple(sorted(k)): v for k, v in d.items()}  # noqa: E731
    assert norm(describe(b, [])) == norm({
        (("user", "alice"),): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
        (("user", "alice"), ("client-id", "app")): {"request_percentage": 12.5},
        (("user", None),): {"producer_byte_rate": 4096.0},
        (("client-id", None),): {"consumer_byte_rate": 8192.0},
        (("ip", "127.0.0.2"),): {"connection_creation_rate": 10.0},
    })

    # Exact name, non-strict: every entity with user alice; strict: alice alone.
    assert set(norm(describe(b, [("user", 0, "alice")]))) == {
        (("user", "alice"),), (("client-id", "app"), ("user", "alice"))}
    assert set(norm(describe(b, [("user", 0, "alice")], strict=True))) == {(("user", "alice"),)}
    # Default match, and "any" user.
    assert set(norm(describe(b, [("user", 1, None)]))) == {(("user", None),)}
    assert set(norm(describe(b, [("user", 2, None)], strict=True))) == {(("user", "alice"),), (("user", None),)}
    assert set(norm(describe(b, [("client-id", 0, "app"), ("user", 2, None)], strict=True))) == {
        (("client-id", "app"), ("user", "alice"))}

    # Removing one key keeps the other; removing the last removes the entity.
    assert alter(b, [([("user", "alice")], [("producer_byte_rate", 0.0, True)])]) == [(0, None)]
    assert norm(describe(b, [("user", 0, "alice")], strict=True)) == {
        (("user", "alice"),): {"consumer_byte_rate": 2048.0}}
    assert alter(b, [([("user", "alice")], [("consumer_byte_rate", 0.0, True)])]) == [(0, None)]
    assert norm(describe(b, [("user", 0, "alice")], strict=True)) == {}

    # Kafka's validation: each bad entry INVALID_REQUEST, the good ones in the same request apply.
    # An entity naming a type twice is no error: Kafka reads it into a map by type, so the
    # last name counts (carol; checked against Kafka 4.4 by the conformance scenarios).
    res = alter(b, [
        ([("user", "bob")], [("producer_byte_rate", -5.0, False)]),
        ([("user", "bob")], [("producer_byte_rate", 10.5, False)]),
        ([("user", "bob")], [("no_such_quota", 1.0, False)]),
        ([("user", "bob")], [("connection_creation_rate", 1.0, False)]),
        ([("ip", "127.0.0.3")], [("producer_byte_rate", 1.0, False)]),
        ([("ip", "1.2.3.4"), ("user", "bob")], [("connection_creation_rate", 1.0, False)]),
        ([("user", "bob"), ("user", "carol")], [("producer_byte_rate", 1.0, False)]),
        ([], [("producer_byte_rate", 1.0, False)]),
        ([("user", "dave")], [("producer_byte_rate", 100.0, False)]),
    ])
    assert [c for c, _ in res] == [INVALID_REQUEST] * 6 + [0, INVALID_REQUEST, 0], res
    assert all(m for _, m in res[:6] + res[7:8]), res
    assert set(norm(describe(b, [("user", 2, None)], strict=True))) == {
        (("user", None),), (("user", "carol"),), (("user", "dave"),)}
    # validate_only changes nothing.
    assert alter(b, [([("user", "erin")], [("producer_byte_rate", 100.0, False)])], validate_only=True) == [(0, None)]
    assert (("user", "erin"),) not in norm(describe(b, [("user", 2, None)]))
    # A bad filter is refused as a whole.
    resp = kp_send(b, DescribeClientQuotasRequest(components=[("user", 0, "a"), ("user", 0, "b")], strict=False))
    assert resp.error_code == INVALID_REQUEST

    # Quotas are cluster metadata: they survive a restart.
    server = brokers.servers[0]
    server.stop()
    server.start()
    assert norm(describe(server.bootstrap, [("user", 0, "dave")], strict=True)) == {
        (("user", "dave"),): {"producer_byte_rate": 100.0}}


class Produced:
    """A confluent-kafka producer sending as fast as the broker lets it, counting acknowledged
    value bytes by time, and the throttle time librdkafka saw (its statistics)."""

    def __init__(self, bootstrap: str, topic: str, client_id: str, pace: float | None = None,
                 value_size: int = 1000):
        self.pace = pace
        self.acked: list[tuple[float, int]] = []
        self.throttle_max = 0
        self.errors: list = []
        self.stop = threading.Event()
        self.value = b"v" * value_size

        def stats(js):
            for b in json.loads(js).get("brokers", {}).values():
                self.throttle_max = max(self.throttle_max, b.get("throttle", {}).get("max", 0))

        self.producer = Producer({
            "bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
            "batch.size": 16384, "acks": 1, "enable.idempotence": False,
            "queue.buffering.max.kbytes": 2048, "statistics.interval.ms": 500, "stats_cb": stats,
        })
        self.topic = topic
        self.thread = threading.Thread(target=self.run, daemon=True)

    def on_delivery(self, err, msg):
        if err:
            if not self.stop.is_set():
                self.errors.append(err)
        else:
            self.acked.append((time.monotonic(), len(msg.value())))

    def run(self):
        start, offered = time.monotonic(), 0
        while not self.stop.is_set():
            # A paced client offers at most `pace` bytes/s (and leaves the CPU to the others).
            if self.pace is not None and offered > self.pace * (time.monotonic() - start):
                self.producer.poll(0.01)
                continue
            offered += len(self.value)
            try:
                self.producer.produce(self.topic, self.value, partition=0, on_delivery=self.on_delivery)
            except BufferError:
                self.producer.poll(0.05)
                continue
            self.producer.poll(0)
        # What is still queued would take long to drain at the quota: drop it.
        self.producer.purge(in_queue=True, in_flight=True)
        self.producer.flush(30)

    def rate(self, t0: float, t1: float) -> float:
        return sum(n for t, n in self.acked if t0 <= t < t1) / (t1 - t0)


def scrape(server) -> dict:
    text = urllib.request.urlopen(server.admin_url() + "/metrics", timeout=30).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_producer_over_its_byte_rate_is_throttled_to_it_and_others_are_not(brokers):
    server = brokers.start("quotas-produce", **{"quota.window.num": 3})
    b = server.bootstrap
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_topics([NewTopic("quota-produce", 1, 1)])["quota-produce"].result(30)
    quota = 200_000
    assert alter(b, [([("client-id", "slow")], [("producer_byte_rate", float(quota), False)])]) == [(0, None)]
    slow = Produced(b, "quota-produce", "slow")
    # The other client offers 5 times the quota: all of it is taken, none throttled.
    fast = Produced(b, "quota-produce", "fast", pace=5 * quota)
    slow.thread.start()
    fast.thread.start()
    warmup, measure = 3.0, 10.0
    start = time.monotonic()
    time.sleep(warmup + measure)
    fast.stop.set()
    slow.stop.set()
    fast.thread.join(60)
    slow.thread.join(60)
    assert not slow.errors and not fast.errors, (slow.errors[:3], fast.errors[:3])
    t0, t1 = start + warmup, start + warmup + measure
    slow_rate, fast_rate = slow.rate(t0, t1), fast.rate(t0, t1)
    # The broker counts request bytes (record and protocol overhead included): the values
    # arrive a little below the quota.
    print("producer rates", slow_rate, fast_rate)
    assert abs(slow_rate - quota) / quota < QUOTA_TOLERANCE, (slow_rate, fast_rate)
    assert slow.throttle_max > 0
    # The other client is never throttled, and gets more than its share of a throttled one.
    assert fast.throttle_max == 0, fast.throttle_max
    assert fast_rate > 2 * quota, (slow_rate, fast_rate)
    slow.producer = fast.producer = None
    m = scrape(server)
    assert m[("moldau_quota_throttled_responses_total", (("quota", "produce"),))] > 0
    assert m[("moldau_quota_throttle_time_seconds_total", (("quota", "produce"),))] > 0
    assert m[("moldau_quota_throttled_responses_total", (("quota", "fetch"),))] == 0


def test_consumer_over_its_byte_rate_is_throttled_to_it(brokers):
    server = brokers.start("quotas-fetch", **{"quota.window.num": 3})
    b = server.bootstrap
    topic = "quota-fetch"
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    # Batches of ~16 KiB: each fetch returns about one (a throttled fetch costs a round trip,
    # so much bigger responses than the quota allows per window undershoot it, in Kafka too).
    p = Producer({"bootstrap.servers": b, "linger.ms": 20, "batch.size": 16384})
    for _ in range(16_000):
        p.produce(topic, b"c" * 1000, partition=0)
        p.poll(0)
    assert p.flush(60) == 0
    quota = 300_000
    # A default quota for every user, as kafka-configs --entity-type users --entity-default.
    assert alter(b, [([("user", None)], [("consumer_byte_rate", float(quota), False)])]) == [(0, None)]
    throttle = [0]

    def stats(js):
        for br in json.loads(js).get("brokers", {}).values():
            throttle[0] = max(throttle[0], br.get("throttle", {}).get("max", 0))

    c = Consumer({"bootstrap.servers": b, "group.id": "quota-fetch", "enable.auto.commit": False,
                  "max.partition.fetch.bytes": 16384,
                  "statistics.interval.ms": 500, "stats_cb": stats})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[float, int]] = []
    # The throttled bytes come in bursts, one each time the window sample holding the last
    # burst expires (every 3-4 s with 3 windows; Kafka's rate behaves the same): a count over a
    # window is off by up to one burst, +-14 % over 14 s (it failed about one run in six at
    # +11 %), +-7 % over 28 s.
    warmup, measure = 4.0, 28.0
    start = time.monotonic()
    while time.monotonic() < start + warmup + measure:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append((time.monotonic(), len(m.value())))
    c.close()
    t0, t1 = start + warmup, start + warmup + measure
    assert sum(n for _, n in got) < 16_000_000, "consumed everything: the test measured nothing"
    rate = sum(n for t, n in got if t0 <= t < t1) / measure
    print("consumer rate", rate)
    assert abs(rate - quota) / quota < QUOTA_TOLERANCE, rate
    assert throttle[0] > 0


def moldau_quota(moldau_bin, bootstrap: str, *args: str, check: bool = True):
    out = subprocess.run([str(moldau_bin), "quota", *args, "-b", bootstrap, "--timeout-ms", "20000"],
                         capture_output=True, text=True, timeout=120)
    if check:
        assert out.returncode == 0, f"moldau quota {' '.join(args)}: {out.stderr}"
    return out


def test_moldau_quota_cli_alters_and_describes_what_clients_see(brokers, moldau_bin):
    """`moldau quota` (kafka-configs' --entity-type users/clients vocabulary): what it sets,
    kafka-python's DescribeClientQuotas sees and the broker enforces (a librdkafka producer of
    that client id is throttled); what it describes is what kafka-python set."""
    b = brokers.start("quotas-cli").bootstrap
    moldau_quota(moldau_bin, b, "alter", "--user", "alice",
                 "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")
    moldau_quota(moldau_bin, b, "alter", "--user", "alice", "--client-defaults",
                 "--add-config", "request_percentage=12.5")
    moldau_quota(moldau_bin, b, "alter", "--client", "cli-slow", "--add-config", "producer_byte_rate=1000")
    norm = lambda d: {tuple(sorted(k)): v for k, v in d.items()}  # noqa: E731
    assert norm(describe(b, [])) == norm({
        (("user", "alice"),): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
        (("user", "alice"), ("client-id", None)): {"request_percentage": 12.5},
        (("client-id", "cli-slow"),): {"producer_byte_rate": 1000.0},
    })
    # What kafka-python sets, the CLI describes (strict: alice alone, not her clients).
    assert alter(b, [([("user", None)], [("consumer_byte_rate", 4096.0, False)])]) == [(0, None)]
    rows = json.loads(moldau_quota(moldau_bin, b, "describe", "--user", "alice", "--strict", "--json").stdout)
    assert rows == [{"entity": [{"type": "user", "name": "alice"}],
                     "quotas": {"consumer_byte_rate": 2048.0, "producer_byte_rate": 1024.0}}], rows
    text = moldau_quota(moldau_bin, b, "describe").stdout
    assert "user=<default>" in text and "user=alice,client-id=<default>" in text, text
    assert len(json.loads(moldau_quota(moldau_bin, b, "describe", "--user", "alice", "--json").stdout)) == 2
    # Removing one key keeps the other; validate-only changes nothing; a bad value is the
    # broker's INVALID_REQUEST message and a failing exit.
    moldau_quota(moldau_bin, b, "alter", "--user", "alice", "--delete-config", "producer_byte_rate")
    moldau_quota(moldau_bin, b, "alter", "--user", "bob", "--add-config", "producer_byte_rate=5",
                 "--validate-only")
    bad = moldau_quota(moldau_bin, b, "alter", "--user", "bob", "--add-config", "producer_byte_rate=10.5",
                       check=False)
    assert bad.returncode != 0 and "INVALID_REQUEST" in bad.stderr and "cannot be a fractional value" in bad.stderr, bad.stderr
    assert moldau_quota(moldau_bin, b, "alter", "--add-config", "x=1", check=False).returncode != 0
    assert norm(describe(b, [("user", 2, None)], strict=True)) == norm({
        (("user", "alice"),): {"consumer_byte_rate": 2048.0}, (("user", None),): {"consumer_byte_rate": 4096.0}})
    # The CLI's quota is enforced: a producer with that client id is throttled.
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_topics([NewTopic("quota-cli", 1, 1)])["quota-cli"].result(30)
    slow = Produced(b, "quota-cli", "cli-slow")
    slow.thread.start()
    wait_for("the CLI's quota throttles cli-slow", lambda: True if slow.throttle_max > 0 else f"throttle max {slow.throttle_max}")
    slow.stop.set()
    slow.thread.join(60)
    assert not slow.errors, slow.errors[:3]
    slow.producer = None


# --- controller_mutation_rate (KIP-599) ---------------------------------------------------
THROTTLING_QUOTA_EXCEEDED = 89


class KpMutations:
    """kafka-python's admin requests (CreateTopics v7, DeleteTopics v6, CreatePartitions v3:
    the versions whose quota is strict), the raw responses kept for their throttle_time_ms.
    kafka-python pauses a node for a response's throttle time and refuses to send to it
    meanwhile (NodeNotReadyError): `send` waits that out."""

    def __init__(self, bootstrap: str, client_id: str):
        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id)

    def send(self, request, items):
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                return self.admin._manager.run(
                    self.admin._send_request_to_controller, request, lambda r: iter(()), False)
            except kerrors.NodeNotReadyError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def create(self, topics: dict[str, int], validate_only: bool = False):
        from kafka.protocol.admin import CreateTopicsRequest
        r = self.send(CreateTopicsRequest(
            topics=self.admin._process_create_topics_input(
                {t: {"num_partitions": n, "replication_factor": 1} for t, n in topics.items()}),
            timeout_ms=30_000, validate_only=validate_only), None)
        return r.throttle_time_ms, {t.name: (t.error_code, t.error_message or None) for t in r.topics}

    def delete(self, topics: list[str]):
        from kafka.protocol.admin import DeleteTopicsRequest
        _Topic = DeleteTopicsRequest.DeleteTopicState
        r = self.send(DeleteTopicsRequest(topics=[_Topic(name=t) for t in topics], timeout_ms=30_000), None)
        return r.throttle_time_ms, {t.name: t.error_code for t in r.responses}

    def add_partitions(self, topics: dict[str, int]):
        from kafka.protocol.admin import CreatePartitionsRequest
        r = self.send(CreatePartitionsRequest(
            topics=self.admin._process_create_partitions_input(topics),
            timeout_ms=30_000, validate_only=False), None)
        return r.throttle_time_ms, {t.name: t.error_code for t in r.results}

    def close(self):
        self.admin.close()


def set_mutation_quota(b: str, client_id: str, rate: float) -> None:
    """Sets `client_id`'s controller_mutation_rate and waits until the controller enforces
    it. Kafka's controller takes a quota change into its quota manager a moment after
    AlterClientQuotas is answered; a probe client id, changed in the same request, shows
    when: its validate-only creations (the quota counts those too) are refused once its own
    1 partition/s is in force."""
    probe = client_id + "-probe"
    assert alter(b, [([("client-id", client_id)], [("controller_mutation_rate", rate, False)]),
                     ([("client-id", probe)], [("controller_mutation_rate", 1.0, False)])]) == [(0, None), (0, None)]
    kp = KpMutations(b, probe)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while kp.create({probe: 100}, validate_only=True)[1][probe][0] != THROTTLING_QUOTA_EXCEEDED:
            assert time.monotonic() < deadline, "the controller mutation quota is not enforced"
            time.sleep(0.1)
    finally:
        kp.close()


def until_allowed(what: str, call):
    """Repeats a kafka-python mutation while it is refused with THROTTLING_QUOTA_EXCEEDED;
    returns its first allowed (throttle_time_ms, results)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        throttle, results = call()
        codes = [r[0] if isinstance(r, tuple) else r for r in results.values()]
        if THROTTLING_QUOTA_EXCEEDED not in codes:
            return throttle, results
        assert time.monotonic() < deadline, f"{what}: still throttled"
        time.sleep(0.1)


def test_controller_mutation_rate_is_strict_for_new_request_versions(brokers):
    """Kafka's StrictControllerMutationQuota: a request is allowed while its client's token
    bucket (burst quota x controller.quota.window.num x window) is not in debt, even one that takes it
    there; then each topic gets THROTTLING_QUOTA_EXCEEDED and the response the time the debt
    takes to refill. Creations, deletions and added partitions all count; other clients not."""
    check_strict_mutation_quota(brokers.start("quotas-mutation", **{"controller.quota.window.num": 3}).bootstrap)


def check_strict_mutation_quota(b: str, p: str = "") -> None:
    """The strict quota's checks against a broker started with controller.quota.window.num=3
    (also run against Apache Kafka: tests/reference/test_quotas_on_kafka.py). `p` prefixes
    topic names and client ids. The rate is low so that the debts outlast slow steps (a
    loaded machine takes seconds to create 16 partitions)."""
    # 2 partitions/s: a burst of 6.
    set_mutation_quota(b, p + "kp-admin", 2.0)
    kp = KpMutations(b, p + "kp-admin")
    other = KpMutations(b, p + "kp-other")
    try:
        # 16 partitions with 6 tokens: allowed (the bucket was not in debt), unthrottled.
        assert kp.create({p + "big": 16}) == (0, {p + "big": (0, None)})
        # 10 in debt: every topic refused, throttled for the 5 s the debt takes (less what
        # has refilled since).
        asked = time.monotonic()
        throttle, results = kp.create({p + "t1": 1, p + "t2": 1})
        # Without a message, as Kafka's ApiError leaves out the error's generic one.
        assert results == {p + t: (THROTTLING_QUOTA_EXCEEDED, None) for t in ("t1", "t2")}, results
        assert 0 < throttle <= 5000, throttle
        # Another client id has no quota: its mutations go through meanwhile.
        assert other.create({p + "free": 16}) == (0, {p + "free": (0, None)})
        assert other.delete([p + "free"]) == (0, {p + "free": 0})
        # Once the debt is paid the same client creates again (kafka-python waits out the
        # throttle before it sends).
        assert until_allowed("create t1", lambda: kp.create({p + "t1": 1})) == (0, {p + "t1": (0, None)})
        assert time.monotonic() - asked >= 0.5 * throttle / 1000
        # Added partitions count: 11 more from a bucket near 0, then in debt again.
        assert until_allowed("add partitions", lambda: kp.add_partitions({p + "t1": 12})) == (0, {p + "t1": 0})
        throttle, results = kp.delete([p + "big"])
        assert results == {p + "big": THROTTLING_QUOTA_EXCEEDED} and throttle > 0, (throttle, results)
        # Deletions are allowed by the same rule once the debt is paid.
        assert until_allowed("delete big", lambda: kp.delete([p + "big"])) == (0, {p + "big": 0})
    finally:
        kp.close()
        other.close()


def test_controller_mutation_rate_through_a_forwarding_broker(brokers, tmp_path):
    """A broker that is not the controller forwards the mutations in an Envelope: the
    controller counts them against the client (the Envelope's principal, the inner request's
    client id) and the broker mutes the client's connection for the controller's throttle.
    Auto-creation goes the same way (a CreateTopics in an Envelope, as Kafka's)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cluster = {"cluster.id": "MkU3OEVBNTcwNTJENDM2Qk", "controller.listener.names": "CONTROLLER",
               "controller.quorum.voters": f"1@127.0.0.1:{port}", "controller.quota.window.num": 3,
               "num.partitions": 10}
    args = [str(brokers.binary), "server", "--data-dir", str(tmp_path / "controller"),
            "--set", "node.id=1", "--set", "process.roles=controller",
            "--set", f"listeners=CONTROLLER://127.0.0.1:{port}"]
    for k, v in cluster.items():
        args += ["--set", f"{k}={v}"]
    with open(tmp_path / "controller.log", "wb") as log:
        controller = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        b = brokers.start("forwarding", **{"node.id": 2, "process.roles": "broker", **cluster}).bootstrap
        check_strict_mutation_quota(b)
        check_permissive_mutation_quota(b)
        check_auto_creation_counts_against_the_mutation_quota(b)
    finally:
        controller.terminate()
        assert controller.wait(30) == 0


def poll_until(client, what: str, cond) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        assert time.monotonic() < deadline, what
        client.poll(0.1)


def test_controller_mutation_rate_throttles_old_request_versions(brokers):
    """librdkafka's admin sends CreateTopics / DeleteTopics below the versions that can carry
    THROTTLING_QUOTA_EXCEEDED: Kafka's PermissiveControllerMutationQuota takes every mutation
    and throttles the client once its bucket is in debt (throttle_time_ms, the connection not
    read meanwhile)."""
    check_permissive_mutation_quota(brokers.start("quotas-mutation-old", **{"controller.quota.window.num": 3}).bootstrap)


def check_permissive_mutation_quota(b: str, p: str = "") -> None:
    """The permissive quota's checks against a broker started with controller.quota.window.num=3 (also
    run against Apache Kafka: tests/reference/test_quotas_on_kafka.py)."""
    set_mutation_quota(b, p + "ck-admin", 2.0)
    throttles: list[int] = []
    free_throttles: list[int] = []
    ck = AdminClient({"bootstrap.servers": b, "client.id": p + "ck-admin",
                      "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    free = AdminClient({"bootstrap.servers": b, "client.id": p + "ck-other",
                        "throttle_cb": lambda e: free_throttles.append(e.throttle_time)})

    def create(client, name, n):
        t = time.monotonic()
        client.create_topics([NewTopic(name, n, 1)])[name].result(30)
        return time.monotonic() - t

    # 16 partitions from a burst of 6: created, and the response throttles up to 5 s
    # (librdkafka's ThrottleEvent counts seconds).
    create(ck, p + "big", 16)
    poll_until(ck, "a throttle callback", lambda: throttles)
    assert 0 < throttles[0] <= 5.0, throttles
    # The next request is taken (no error at this version) but read only after the throttle.
    assert create(ck, p + "small", 1) >= 0.5 * throttles[0]
    # Deletions count: 16 partitions from a bucket of at most 6 is a debt again, however
    # long the steps before took.
    seen = len(throttles)
    ck.delete_topics([p + "big"])[p + "big"].result(30)
    poll_until(ck, "a throttled deletion", lambda: any(t > 0 for t in throttles[seen:]))
    # Another client is never throttled.
    create(free, p + "free", 16)
    free.poll(0.5)
    assert free_throttles == [], free_throttles


# --- auto-created topics and the controller mutation quota -----------------------------------
UNKNOWN_TOPIC_OR_PARTITION = 3


def check_auto_creation_counts_against_the_mutation_quota(b: str, p: str = "") -> None:
    """Against a broker started with controller.quota.window.num=3 and num.partitions=10
    (also run against Apache Kafka: tests/reference/test_quotas_on_kafka.py). Kafka 4.4 creates
    the topics a Metadata request names (allow_auto_topic_creation) with a CreateTopics it
    forwards to the controller in an Envelope carrying the client's principal and client id
    (DefaultAutoTopicCreationManager / KRaftTopicCreator), so the controller counts their
    partitions against the client's controller_mutation_rate strictly, as a CreateTopics v6+
    of the client (KafkaApis's permissive quota is not passed on): with a burst of 3 tokens
    the first 10-partition topic is created and takes the bucket into debt, the others are
    not created (answered UNKNOWN_TOPIC_OR_PARTITION, as a topic being created), the
    Metadata response is not throttled, and the client's own CreateTopics is then refused.
    A client without a quota auto-creates meanwhile."""
    client = p + "auto-meta"
    set_mutation_quota(b, client, 1.0)
    host, port = b.rsplit(":", 1)
    address = (host, int(port))
    names = [f"{p}auto-{i}" for i in range(3)]

    def existing(topics: list[str]) -> set[str]:
        with kwire.connect(address, timeout=30) as s:
            _, errors = kwire.metadata_v4(s, topics, False, p + "auto-observer")
        return {n for n, code in errors.items() if code != UNKNOWN_TOPIC_OR_PARTITION}

    with kwire.connect(address, timeout=30) as sock:
        throttle, errors = kwire.metadata_v4(sock, names, True, client)
    assert throttle == 0 and set(errors) == set(names), (throttle, errors)
    # Kafka decides the three in one controller step (in no particular order): once one
    # exists, the others were refused.
    wait_for("an auto-created topic", lambda: len(existing(names)) > 0)
    assert len(existing(names)) == 1, existing(names)
    kp = KpMutations(b, client)
    try:
        throttle, results = kp.create({p + "auto-explicit": 1})
        assert results == {p + "auto-explicit": (THROTTLING_QUOTA_EXCEEDED, None)} and throttle > 0, (throttle, results)
    finally:
        kp.close()
    # Another client id has no quota: its auto-creation goes through.
    free = p + "auto-free"
    with kwire.connect(address, timeout=30) as sock:
        kwire.metadata_v4(sock, [free], True, p + "auto-free-client")
    wait_for("a free client's auto-created topic", lambda: existing([free]) == {free})


def test_auto_created_topics_count_against_the_mutation_quota(brokers):
    server = brokers.start("quotas-auto-create", **{"controller.quota.window.num": 3, "num.partitions": 10})
    check_auto_creation_counts_against_the_mutation_quota(server.bootstrap)
    # The refused CreateTopics was throttled, and /metrics shows it as the other quotas.
    m = scrape(server)
    assert m[("moldau_quota_throttled_responses_total", (("quota", "controller_mutation"),))] > 0, m
    assert m[("moldau_quota_throttle_time_seconds_total", (("quota", "controller_mutation"),))] > 0, m
