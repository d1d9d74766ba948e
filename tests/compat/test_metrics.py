"""The admin HTTP listener of a real `moldau server`: /metrics scraped over HTTP and parsed with
the Prometheus client library's parsers (Prometheus text and OpenMetrics), checked for values
while confluent-kafka produces and kafka-python consumes in a group; /health/*; the
`admin.listener` and `metrics.partition.series` settings."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

from confluent_kafka.admin import NewTopic
from prometheus_client.openmetrics import parser as om_parser
from prometheus_client import parser as prom_parser

import clients
from conftest import REPO
from ports import free_port

DASHBOARD = REPO / "docs" / "grafana" / "moldau.json"
OPENMETRICS = "application/openmetrics-text; version=1.0.0"
PARTITIONS = 3


def http_get(url: str, accept: str | None = None, method: str = "GET") -> tuple[int, str, str]:
    req = urllib.request.Request(url, method=method, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


class Samples:
    """Every sample of one scrape, by name; `get` sums those whose labels include `labels`."""

    def __init__(self, families):
        self.by_name: dict[str, list] = {}
        self.families = {}
        for f in families:
            self.families[f.name] = f
            for s in f.samples:
                self.by_name.setdefault(s.name, []).append(s)

    def matching(self, name: str, **labels) -> list:
        return [s for s in self.by_name.get(name, [])
                if all(s.labels.get(k) == str(v) for k, v in labels.items())]

    def get(self, name: str, **labels) -> float:
        return sum(s.value for s in self.matching(name, **labels))


def scrape(base: str, openmetrics: bool = False) -> Samples:
    status, ctype, body = http_get(base + "/metrics", accept=OPENMETRICS if openmetrics else None)
    assert status == 200, (status, body[:500])
    if openmetrics:
        assert ctype.startswith("application/openmetrics-text"), ctype
        assert body.endswith("# EOF\n")
        return Samples(om_parser.text_string_to_metric_families(body))
    assert ctype.startswith("text/plain; version=0.0.4"), ctype
    return Samples(prom_parser.text_string_to_metric_families(body))


def wait_for(what: str, fn, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def test_metrics_follow_a_real_workload(brokers, topic):
    server = brokers.start(**{"group.initial.rebalance.delay.ms": 0})
    base = server.admin_url()
    admin = clients.confluent_admin(server.bootstrap)
    # min.insync.replicas above the single replica: Kafka caps it at the replica count, so
    # acks=all is accepted and the partitions are not under min ISR.
    fs = admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={"message.timestamp.type": "LogAppendTime",
                                                                     "min.insync.replicas": "2"})],
                             operation_timeout=15)
    fs[topic].result(timeout=20)

    # Produce 60 records over the 3 partitions (acks=all, so each batch is fsynced).
    records = [{"key": f"k{i}".encode(), "value": b"v" * (100 + i)} for i in range(60)]
    before_ms = time.time() * 1000
    delivered = clients.confluent_produce(server.bootstrap, topic, records, partition=None, acks="all")
    after_ms = time.time() * 1000
    ends = {p: 0 for p in range(PARTITIONS)}
    for m in delivered:
        ends[m.partition()] = max(ends[m.partition()], m.offset() + 1)
    assert sum(ends.values()) == 60

    m = scrape(base)
    assert m.get("moldau_topic_produced_records_total", topic=topic) == 60
    for p, end in ends.items():
        assert m.get("moldau_log_end_offset", topic=topic, partition=p) == end
        assert m.get("moldau_log_high_watermark", topic=topic, partition=p) == end
        assert m.get("moldau_log_start_offset", topic=topic, partition=p) == 0
    # The broker stores the producer's batches as sent: bytes in == bytes in the logs.
    log_bytes = m.get("moldau_log_size_bytes", topic=topic)
    assert log_bytes > sum(len(r["value"]) for r in records)
    assert m.get("moldau_topic_produced_bytes_total", topic=topic) == log_bytes
    assert m.get("moldau_topic_log_size_bytes", topic=topic) == log_bytes
    assert m.get("moldau_topic_partitions", topic=topic) == PARTITIONS
    assert m.get("moldau_requests_total", api="Produce") >= 1
    assert m.get("moldau_request_latency_seconds_count", api="Produce", phase="total") >= 1
    assert m.get("moldau_log_fsync_latency_seconds_count") >= 1
    assert m.get("moldau_log_fsync_failures_total") == 0
    assert m.get("moldau_partitions_leader") >= PARTITIONS
    assert m.get("moldau_partitions_offline") == 0
    assert m.get("moldau_partitions_under_min_isr") == 0
    assert m.get("process_resident_memory_bytes") > 0

    # A kafka-python group consumes everything, then commits all but the last 2 records of
    # each partition: the broker's lag is exactly those, in records and in seconds.
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata
    group = f"{topic}-g"
    c = KafkaConsumer(topic, bootstrap_servers=server.bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", request_timeout_ms=15000, fetch_max_wait_ms=100)
    try:
        got = 0
        deadline = time.monotonic() + 120  # a loaded CI machine: joining and fetching can be slow
        while got < 60 and time.monotonic() < deadline:
            got += sum(len(v) for v in c.poll(timeout_ms=200).values())
        assert got == 60
        live = scrape(base)
        assert live.get("moldau_connections", listener="PLAINTEXT") >= 1
        assert live.get("moldau_group_members", group=group) == 1
        assert live.get("moldau_groups", state="Stable") >= 1
        assert live.get("moldau_topic_fetched_records_total", topic=topic) >= 60
        assert live.get("moldau_topic_fetched_bytes_total", topic=topic) >= log_bytes

        c.commit({TopicPartition(topic, p): OffsetAndMetadata(max(0, e - 2), "", -1) for p, e in ends.items()})
        scrape_start_ms = time.time() * 1000
        m = scrape(base)
        scrape_end_ms = time.time() * 1000
        for p, end in ends.items():
            left = min(2, end)
            assert m.get("moldau_consumer_group_lag_records", group=group, topic=topic, partition=p) == left
            lag_s = m.get("moldau_consumer_group_lag_seconds", group=group, topic=topic, partition=p)
            if left == 0:
                assert lag_s == 0
            else:
                # The first uncommitted record was appended during the produce above.
                lo = (scrape_start_ms - after_ms) / 1000 - 0.01
                hi = (scrape_end_ms - before_ms) / 1000 + 0.01
                assert lo <= lag_s <= hi, (lo, lag_s, hi)
        assert m.get("moldau_consumer_group_topic_lag_records", group=group, topic=topic) == \
            sum(min(2, e) for e in ends.values())

        c.commit({TopicPartition(topic, p): OffsetAndMetadata(e, "", -1) for p, e in ends.items()})
        m = scrape(base)
        assert m.get("moldau_consumer_group_topic_lag_records", group=group, topic=topic) == 0
        assert m.get("moldau_consumer_group_topic_lag_seconds", group=group, topic=topic) == 0
    finally:
        c.close()

    # A refused request moves the error counter by exactly its error.
    errors_before = m.get("moldau_request_errors_total", api="CreateTopics", error="TOPIC_ALREADY_EXISTS")
    fs = admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=15)
    try:
        fs[topic].result(timeout=20)
        raise AssertionError("creating an existing topic succeeded")
    except Exception as e:  # noqa: BLE001 - KafkaException carrying TOPIC_ALREADY_EXISTS
        assert "TOPIC_ALREADY_EXISTS" in str(e) or "already exists" in str(e), e
    m = scrape(base)
    assert m.get("moldau_request_errors_total", api="CreateTopics", error="TOPIC_ALREADY_EXISTS") == errors_before + 1

    # The same numbers in OpenMetrics, by content negotiation.
    om = scrape(base, openmetrics=True)
    assert om.get("moldau_topic_produced_records_total", topic=topic) == 60
    assert om.families["moldau_request_latency_seconds"].type == "histogram"
    assert om.families["moldau_topic_produced_bytes"].unit == "bytes"

    # Every series the Grafana dashboard queries is exported (and has samples) by now.
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queried = {name for e in exprs for name in re.findall(r"\b((?:moldau|process)_[a-z_]+)\b", e)}
    assert len(queried) >= 20, queried
    missing = sorted(n for n in queried if not m.by_name.get(n))
    assert not missing, f"dashboard queries series the broker does not export: {missing}"
    # And the other way round: every metric family the broker exports has a panel.
    base = {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in queried}
    unshown = sorted(f for f in m.families if f.startswith("moldau_") and f not in base)
    assert not unshown, f"metrics without a dashboard panel: {unshown}"


def test_health_and_admin_listener_settings(brokers, moldau_bin, tmp_path):
    port = free_port()
    fixed = brokers.start("fixed", **{"admin.listener": f"127.0.0.1:{port}", "metrics.partition.series": "false"})
    assert fixed.admin_url() == f"http://127.0.0.1:{port}"
    default = brokers.start("default")
    assert default.admin_url() != fixed.admin_url()
    for server in (fixed, default):
        base = server.admin_url()
        assert http_get(base + "/health/live")[0] == 200
        status, _, body = http_get(base + "/health/ready")
        assert (status, body) == (200, "ready\n")
        assert http_get(base + "/nope")[0] == 404
        assert http_get(base + "/metrics", method="POST")[0] == 405

    # Without per-partition series, per-topic series remain.
    clients.confluent_produce(fixed.bootstrap, "few-series", [{"value": b"x"}], partition=0)
    m = scrape(fixed.admin_url())
    assert m.get("moldau_topic_log_size_bytes", topic="few-series") > 0
    assert not m.matching("moldau_log_end_offset")

    # An empty admin.listener turns the listener off; a bad one stops the server at startup.
    off = brokers.start("off", **{"admin.listener": "", "log.format": "json"})
    assert not off._admin_seen.wait(1.0), "admin line printed with admin.listener empty"
    # log.format=json: every stderr line is one JSON event.
    events = [json.loads(line) for line in off.log_path.read_text().splitlines() if line.startswith("{")]
    assert any(e.get("fields", {}).get("message") == "moldau broker ready" for e in events), events[:5]
    assert all({"timestamp", "level", "fields"} <= e.keys() for e in events), events[:5]
    bad = subprocess.run([str(moldau_bin), "server", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "bad"),
                          "--set", "admin.listener=nowhere"], capture_output=True, timeout=60)
    assert bad.returncode != 0
    assert b"admin.listener" in bad.stderr, bad.stderr

    # /health/live answers while the broker is busy serving a producer.
    p = clients.confluent_producer(default.bootstrap, acks="all")
    for i in range(2000):
        p.produce("busy", value=b"y" * 200)
        p.poll(0)
        if i % 500 == 0:
            assert http_get(default.admin_url() + "/health/live")[0] == 200
    assert p.flush(20) == 0

    # A consumer at the end of the log with a long fetch.wait.max.ms parks its Fetch.
    from confluent_kafka import TopicPartition as CTP
    c = clients.confluent_consumer(default.bootstrap, **{"fetch.wait.max.ms": 5000})
    try:
        c.assign([CTP("busy", 0, 2000)])
        def parked():
            c.poll(0.05)
            return scrape(default.admin_url()).get("moldau_delayed_operations", kind="fetch") >= 1
        wait_for("a parked fetch", parked)
    finally:
        c.close()


def test_ready_only_once_partitions_are_loaded(brokers):
    """/health/ready answers 503 "starting" while a restarted broker opens its 600 partitions
    (the admin listener binds before the broker loads), then 200."""
    port = free_port()
    server = brokers.start("loading", **{"admin.listener": f"127.0.0.1:{port}"})
    subprocess.run([str(server.binary), "topic", "create", "many", "-p", "600", "-b", server.bootstrap,
                    "--timeout-ms", "120000"], check=True, capture_output=True, timeout=180)
    server.stop()
    seen: list[tuple[int, str]] = []
    done = threading.Event()

    def poll():
        while not done.is_set():
            try:
                status, _, body = http_get(f"http://127.0.0.1:{port}/health/ready")
            except OSError:
                continue  # not bound yet
            seen.append((status, body))
            if status == 200:
                return

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        server.start()
        wait_for("ready", lambda: seen and seen[-1][0] == 200)
    finally:
        done.set()
        poller.join(timeout=30)
    assert seen[0] == (503, "not ready: starting: loading metadata and partitions\n"), seen[:3]
    assert seen[-1] == (200, "ready\n")
    m = scrape(server.admin_url())
    assert m.get("moldau_topic_partitions", topic="many") == 600


def all_threads_stopped(pid: int) -> bool:
    """Whether every thread of `pid` is in state T (stopped) in /proc."""
    from pathlib import Path

    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):
            continue
    return bool(states) and all(s in ("T", "t") for s in states)


def test_not_ready_while_shutting_down(brokers, moldau_bin, tmp_path):
    """From SIGTERM on, /health/ready answers 503 "shutting down" (a load balancer stops sending
    clients) while /health/live still answers; the process then exits cleanly. The window is
    made observable, not raced: the broker is a broker-only node whose controller is stopped
    (SIGSTOP), so its controlled shutdown waits for an answer until the controller resumes
    (or its 5 s deadline passes)."""
    port = free_port()
    cluster = {"cluster.id": "MkU3OEVBNTcwNTJENDM2Qk", "controller.listener.names": "CONTROLLER",
               "controller.quorum.voters": f"1@127.0.0.1:{port}"}
    args = [str(moldau_bin), "server", "--data-dir", str(tmp_path / "controller"),
            "--set", "node.id=1", "--set", "process.roles=controller",
            "--set", f"listeners=CONTROLLER://127.0.0.1:{port}"]
    for k, v in cluster.items():
        args += ["--set", f"{k}={v}"]
    with open(tmp_path / "controller.log", "wb") as log:
        controller = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    stopped = False
    try:
        node = brokers.start("broker-only", **{"node.id": 2, "process.roles": "broker", **cluster})
        # A second broker: the last live broker skips the controlled shutdown (nowhere to
        # move leadership), so there must be another one for the controller to hold it open.
        brokers.start("other", **{"node.id": 3, "process.roles": "broker", **cluster})
        base = node.admin_url()
        wait_for("ready", lambda: http_get(base + "/health/ready")[:3:2] == (200, "ready\n"))
        admin = clients.confluent_admin(node.bootstrap)
        wait_for("both brokers live in node 2's metadata",
                 lambda: sorted(admin.list_topics(timeout=10).brokers) == [2, 3])

        controller.send_signal(signal.SIGSTOP)
        stopped = True
        wait_for("the controller's threads all stopped", lambda: all_threads_stopped(controller.pid))
        node.proc.send_signal(signal.SIGTERM)
        wait_for("503 shutting down",
                 lambda: http_get(base + "/health/ready")[:3:2] == (503, "not ready: shutting down\n"))
        assert node.alive()
        assert http_get(base + "/health/live")[0] == 200
        assert http_get(base + "/health/ready")[:3:2] == (503, "not ready: shutting down\n")

        controller.send_signal(signal.SIGCONT)
        stopped = False
        # The shutdown completes once the controller answers; stop() waits and checks exit 0.
        assert node.stop() == 0

        # The controller's own metrics: it is the active controller (the brokers are not, and
        # name it), and it counts the stopped broker as fenced, the other as unfenced.
        admin_line = wait_for("the controller's admin line", lambda: re.search(
            r"moldau: admin on (http://\S+)", (tmp_path / "controller.log").read_text(errors="replace")))
        cbase = admin_line.group(1)
        m = scrape(cbase)
        assert m.get("moldau_controller_active") == 1
        assert m.get("moldau_metadata_log_end_offset") >= m.get("moldau_metadata_applied_offset") > 0
        other = scrape(brokers.servers[-1].admin_url())
        assert other.get("moldau_controller_active") == 0
        assert other.get("moldau_metadata_current_leader") == 1
        assert not other.matching("moldau_controller_brokers")
        wait_for("broker 2 fenced on the controller", lambda: (
            scrape(cbase).get("moldau_controller_brokers", state="fenced"),
            scrape(cbase).get("moldau_controller_brokers", state="unfenced")) == (1, 1), 60)
    finally:
        if stopped:
            controller.send_signal(signal.SIGCONT)
        controller.terminate()
        try:
            controller.wait(timeout=30)
        except subprocess.TimeoutExpired:
            controller.kill()
            controller.wait()


def test_controller_metrics_follow_metadata_changes(brokers):
    """A single node is its own active controller: creating a topic with a real admin client
    commits metadata (the commit latency histogram counts it, the applied offset and the log
    end move) and the broker counts as unfenced."""
    server = brokers.start()
    base = server.admin_url()
    m = scrape(base)
    assert m.get("moldau_controller_active") == 1
    assert m.get("moldau_metadata_current_leader") == 1
    assert m.get("moldau_metadata_current_epoch") >= 1
    assert m.get("moldau_controller_brokers", state="unfenced") == 1
    assert m.get("moldau_controller_brokers", state="fenced") == 0
    commits, applied, log_end = (m.get("moldau_metadata_commit_latency_seconds_count"),
                                 m.get("moldau_metadata_applied_offset"), m.get("moldau_metadata_log_end_offset"))
    admin = clients.confluent_admin(server.bootstrap)
    admin.create_topics([NewTopic("controller-metrics", PARTITIONS, 1)], operation_timeout=15)["controller-metrics"].result(timeout=20)
    m = scrape(base)
    assert m.get("moldau_metadata_commit_latency_seconds_count") >= commits + 1
    assert m.get("moldau_metadata_commit_latency_seconds_sum") > 0
    assert m.get("moldau_metadata_applied_offset") > applied
    assert m.get("moldau_metadata_log_end_offset") > log_end


def test_group_metrics_follow_classic_and_consumer_groups(brokers):
    """Groups by protocol and state, members, rebalances and offset commits, moved by a
    kafka-python classic group and a librdkafka KIP-848 consumer group."""
    from confluent_kafka import Consumer, TopicPartition as CTopicPartition
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    server = brokers.start(**{
        "group.initial.rebalance.delay.ms": 0,
        "group.consumer.min.heartbeat.interval.ms": 50,
        "group.consumer.heartbeat.interval.ms": 250,
    })
    base = server.admin_url()
    topic = "group-metrics"
    admin = clients.confluent_admin(server.bootstrap)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=15)[topic].result(timeout=20)
    clients.confluent_produce(server.bootstrap, topic, [{"value": b"v"} for _ in range(30)], partition=None)

    def counters():
        m = scrape(base)
        return (m.get("moldau_group_rebalances_total", protocol="classic"),
                m.get("moldau_group_rebalances_total", protocol="consumer"),
                m.get("moldau_group_offset_commits_total"))

    classic0, consumer0, commits0 = counters()

    # A classic group (kafka-python): Stable with one member after its first rebalance; an
    # explicit commit of every partition counts one offset each.
    c = KafkaConsumer(topic, bootstrap_servers=server.bootstrap, group_id="metrics-classic",
                      enable_auto_commit=False, auto_offset_reset="earliest", request_timeout_ms=15000)
    try:
        wait_for("the classic member's assignment", lambda: c.poll(timeout_ms=200) is not None and len(c.assignment()) == PARTITIONS, 120)
        m = scrape(base)
        assert m.get("moldau_groups", protocol="classic", state="Stable") == 1
        assert m.get("moldau_group_members", group="metrics-classic") == 1
        assert m.get("moldau_group_rebalances_total", protocol="classic") >= classic0 + 1
        c.commit({TopicPartition(topic, p): OffsetAndMetadata(1, "", -1) for p in range(PARTITIONS)})
        assert counters()[2] == commits0 + PARTITIONS
    finally:
        c.close()
    wait_for("the classic group Empty", lambda: scrape(base).get("moldau_groups", protocol="classic", state="Empty") == 1)

    # A consumer-protocol group (librdkafka, group.protocol=consumer): a new group epoch for
    # the join, Stable once its assignment is reconciled, another epoch when it leaves.
    _, consumer1, commits1 = counters()
    k = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "metrics-kip848",
                  "group.protocol": "consumer", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        k.subscribe([topic])
        got = []
        def consumed_all():
            msg = k.poll(0.2)
            if msg is not None and not msg.error():
                got.append(msg)
            return len(got) >= 30
        wait_for("the KIP-848 member consumes everything", consumed_all, 120)
        wait_for("the consumer group Stable",
                 lambda: scrape(base).get("moldau_groups", protocol="consumer", state="Stable") == 1, 60)
        m = scrape(base)
        assert m.get("moldau_group_members", group="metrics-kip848") == 1
        assert m.get("moldau_group_rebalances_total", protocol="consumer") >= consumer1 + 1
        # Explicit offsets: a bare commit() skips partitions without a fetched position, and
        # which partitions the producer filled is the partitioner's choice.
        k.commit(offsets=[CTopicPartition(topic, p, 1) for p in range(PARTITIONS)], asynchronous=False)
        assert counters()[2] == commits1 + PARTITIONS
        joined = counters()[1]
    finally:
        k.close()
    wait_for("the consumer group Empty after the member left",
             lambda: scrape(base).get("moldau_groups", protocol="consumer", state="Empty") == 1, 60)
    assert counters()[1] >= joined + 1


def test_isr_shrinks_expands_and_under_replicated_partitions_on_the_leader(brokers, tmp_path):
    """A controller and two brokers; a topic with two replicas per partition. When one broker
    is killed, the controller fences it and takes it out of every ISR: the surviving broker
    leads every partition, each of them counted once as an ISR shrink, and all of them are
    under-replicated (ISR 1 < 2 replicas) and under min.insync.replicas=2. Restarted, the broker
    catches up as a follower and is put back in every ISR: four expands."""
    from confluent_kafka.admin import NewTopic as CNewTopic

    port = free_port()
    cluster = {"cluster.id": "MkU3OEVBNTcwNTJENDM2Qk", "controller.listener.names": "CONTROLLER",
               "controller.quorum.voters": f"1@127.0.0.1:{port}",
               "broker.session.timeout.ms": 2000, "broker.heartbeat.interval.ms": 250}
    args = [str(brokers.binary), "server", "--data-dir", str(tmp_path / "controller"),
            "--set", "node.id=1", "--set", "process.roles=controller",
            "--set", f"listeners=CONTROLLER://127.0.0.1:{port}"]
    for k, v in cluster.items():
        args += ["--set", f"{k}={v}"]
    with open(tmp_path / "controller.log", "wb") as log:
        controller = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        b2 = brokers.start("b2", **{"node.id": 2, "process.roles": "broker", **cluster})
        b3 = brokers.start("b3", **{"node.id": 3, "process.roles": "broker", **cluster})
        admin = clients.confluent_admin(b2.bootstrap)
        wait_for("both brokers registered", lambda: sorted(admin.list_topics(timeout=10).brokers) == [2, 3])
        topic = "isr-metrics"
        admin.create_topics([CNewTopic(topic, 4, 2, config={"min.insync.replicas": "2"})],
                            operation_timeout=15)[topic].result(timeout=20)
        base = b2.admin_url()
        before = scrape(base).get("moldau_isr_shrinks_total")
        controller_admin = re.search(r"moldau: admin on (http://\S+)",
                                     (tmp_path / "controller.log").read_text()).group(1)
        commits = scrape(controller_admin).get("moldau_metadata_commit_latency_seconds_count")
        assert scrape(base).get("moldau_partitions_under_replicated") == 0

        b3.crash()
        wait_for("broker 2 leads all four partitions with a shrunk ISR", lambda: (
            scrape(base).get("moldau_partitions_leader") == 4
            and scrape(base).get("moldau_partitions_under_replicated") == 4), 60)
        m = scrape(base)
        assert m.get("moldau_isr_shrinks_total") == before + 4
        assert m.get("moldau_partitions_under_min_isr") == 4
        expands = m.get("moldau_isr_expands_total")

        # The killed broker comes back, fetches as a follower and catches up: the leader asks
        # the controller to put it back in each ISR, four expands.
        b3.restart()
        wait_for("broker 3 back in every ISR", lambda: (
            scrape(base).get("moldau_partitions_under_replicated") == 0), 90)
        m = scrape(base)
        assert m.get("moldau_isr_expands_total") == expands + 4
        assert m.get("moldau_partitions_under_min_isr") == 0
        # Broker 3's registration and broker 2's AlterPartition came to the controller from
        # other brokers: their commits are timed where they are decided.
        assert scrape(controller_admin).get("moldau_metadata_commit_latency_seconds_count") >= commits + 2
    finally:
        # Brokers first: a broker shutting down talks to the controller (controlled shutdown).
        assert not brokers.stop_all()
        controller.terminate()
        try:
            controller.wait(timeout=30)
        except subprocess.TimeoutExpired:
            controller.kill()
            controller.wait()
