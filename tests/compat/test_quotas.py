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
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest
from prometheus_client.parser import text_string_to_metric_families

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
    for _ in range(10_000):
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
    warmup, measure = 4.0, 14.0
    start = time.monotonic()
    while time.monotonic() < start + warmup + measure:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append((time.monotonic(), len(m.value())))
    c.close()
    t0, t1 = start + warmup, start + warmup + measure
    assert sum(n for _, n in got) < 10_000_000, "consumed everything: the test measured nothing"
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
