"""Apache Kafka 4.4's own command-line tools against a real `moldau server`.

Each tool runs as Kafka ships it: its main class on the reference kit's classpath
(`scripts/reference/kafka class ...`; kafka-topics.sh is org.apache.kafka.tools.TopicCommand in
4.x, and so on). The tests assert what the tools print, not just their exit codes.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from conftest import BrokerPool, kafka_class

TOPICS = "org.apache.kafka.tools.TopicCommand"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
GET_OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
DELETE_RECORDS = "org.apache.kafka.tools.DeleteRecordsCommand"
LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"
API_VERSIONS = "org.apache.kafka.tools.BrokerApiVersionsCommand"
CLUSTER = "org.apache.kafka.tools.ClusterTool"


@pytest.fixture(scope="module")
def mb(request, kit_libs, moldau_bin, tmp_path_factory):
    """One moldau broker for this module (no initial rebalance delay, as Kafka's dev config)."""
    pool = BrokerPool(moldau_bin, tmp_path_factory.mktemp("moldau-tools"))
    server = pool.start("tools", **{"group.initial.rebalance.delay.ms": 0})
    yield server
    problems = pool.stop_all()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def offsets(bootstrap: str, topic: str, *extra: str) -> dict[int, int]:
    """kafka-get-offsets: {partition: offset}, from its TOPIC:PARTITION:OFFSET lines."""
    res = kafka_class(GET_OFFSETS, "--bootstrap-server", bootstrap, "--topic", topic, *extra).check()
    out = {}
    for line in res.lines:
        t, p, o = line.rsplit(":", 2)
        assert t == topic, line
        out[int(p)] = int(o)
    return out


def produce_lines(bootstrap: str, topic: str, lines: list[str], *props: str) -> None:
    args = ["--bootstrap-server", bootstrap, "--topic", topic]
    for p in props:
        args += ["--property", p]
    kafka_class(CONSOLE_PRODUCER, *args, input_text="".join(line + "\n" for line in lines)).check()


def test_kafka_topics(mb):
    b = mb.bootstrap
    topic = name("tools-topics")
    res = kafka_class(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "3",
                      "--replication-factor", "1", "--config", "retention.ms=3600000",
                      "--config", "cleanup.policy=compact").check()
    assert res.lines == [f"Created topic {topic}."], res.stdout

    again = kafka_class(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "1")
    assert again.returncode != 0
    assert "already exists" in again.stdout + again.stderr

    listed = kafka_class(TOPICS, "--bootstrap-server", b, "--list").check()
    assert topic in listed.lines

    desc = kafka_class(TOPICS, "--bootstrap-server", b, "--describe", "--topic", topic).check()
    head = desc.lines[0]
    assert f"Topic: {topic}" in head and "PartitionCount: 3" in head and "ReplicationFactor: 1" in head, head
    assert re.search(r"TopicId: \S{22}", head), head
    assert "cleanup.policy=compact" in head and "retention.ms=3600000" in head, head
    parts = [line for line in desc.lines[1:] if "Partition:" in line]
    assert len(parts) == 3, desc.stdout
    for i, line in enumerate(parts):
        assert re.search(rf"Partition: {i}\s+Leader: 1\s+Replicas: 1\s+Isr: 1\b", line), line

    kafka_class(TOPICS, "--bootstrap-server", b, "--alter", "--topic", topic, "--partitions", "5").check()
    desc = kafka_class(TOPICS, "--bootstrap-server", b, "--describe", "--topic", topic).check()
    assert "PartitionCount: 5" in desc.lines[0], desc.stdout

    shrink = kafka_class(TOPICS, "--bootstrap-server", b, "--alter", "--topic", topic, "--partitions", "2")
    assert shrink.returncode != 0
    assert "InvalidPartitionsException" in shrink.stdout + shrink.stderr or "can only be increased" in shrink.stdout + shrink.stderr

    kafka_class(TOPICS, "--bootstrap-server", b, "--delete", "--topic", topic).check()
    deadline = time.monotonic() + 30
    while topic in kafka_class(TOPICS, "--bootstrap-server", b, "--list").check().lines:
        assert time.monotonic() < deadline, "topic still listed after delete"
        time.sleep(0.5)


def test_describe_topic_partitions_paginates(mb):
    """DescribeTopicPartitions (API 75, KIP-966): Kafka 4.4's kafka-topics --describe uses it
    (with a small --partition-size-limit-per-response it pages through the cursor and prints the
    ELR columns only this API carries), and kafka-python's describe_topic_partitions walks the
    pages itself: name order, a cursor into the middle of a topic, the next topic's start, and
    UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist."""
    from kafka.admin import KafkaAdminClient

    b = mb.bootstrap
    first, second = sorted([name("tools-dtp"), name("tools-dtp")])
    for t, n in ((first, 5), (second, 2)):
        kafka_class(TOPICS, "--bootstrap-server", b, "--create", "--topic", t, "--partitions", str(n),
                    "--replication-factor", "1").check()
    desc = kafka_class(TOPICS, "--bootstrap-server", b, "--describe", "--topic", "tools-dtp-.*",
                       "--partition-size-limit-per-response", "2").check()
    rows = [(m.group(1), int(m.group(2))) for line in desc.lines
            if (m := re.search(r"Topic: (\S+)\s+Partition: (\d+)\s+Leader: 1\s+Replicas: 1\s+Isr: 1\s+Elr: \s*LastKnownElr:", line))]
    # The tool prints the topics in its result map's (hash) order: each topic's partitions
    # come together and in order. The name order of the API itself is checked below.
    mine = [r for r in rows if r[0] in (first, second)]
    assert sorted(mine, key=lambda r: (r[0] != mine[0][0], r[1])) == mine, desc.stdout
    assert sorted(mine) == [(first, i) for i in range(5)] + [(second, 0), (second, 1)], desc.stdout

    kp = KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=30000)
    try:
        missing = name("tools-dtp-missing")  # sorts after both ("m" > any hex digit)
        pages, cursor = [], None
        while True:
            page = kp.describe_topic_partitions([second, missing, first], response_partition_limit=3, cursor=cursor)
            pages.append([(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]])
                          for t in page["topics"]])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert pages == [
            [(first, 0, [0, 1, 2])],
            [(first, 0, [3, 4]), (second, 0, [0])],
            [(second, 0, [1]), (missing, 3, [])],
        ], pages
        one = kp.describe_topic_partitions([first], response_partition_limit=5)
        assert one["next_cursor"] is None and [p["leader_id"] for p in one["topics"][0]["partitions"]] == [1] * 5
    finally:
        kp.close()


def test_kafka_configs(mb):
    b = mb.bootstrap
    topic = name("tools-configs")
    kafka_class(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "1").check()
    alter = kafka_class(CONFIGS, "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
                        "--alter", "--add-config", "retention.ms=1000,max.message.bytes=65536").check()
    assert f"Completed updating config for topic {topic}." in alter.stdout, alter.stdout

    desc = kafka_class(CONFIGS, "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
                       "--describe").check()
    assert f"Dynamic configs for topic {topic} are:" in desc.lines[0], desc.stdout
    body = "\n".join(desc.lines[1:])
    assert "retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000" in body, body
    assert "max.message.bytes=65536 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:max.message.bytes=65536" in body, body

    kafka_class(CONFIGS, "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
                "--alter", "--delete-config", "retention.ms").check()
    desc = kafka_class(CONFIGS, "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
                       "--describe").check()
    assert "retention.ms=" not in desc.stdout and "max.message.bytes=65536" in desc.stdout, desc.stdout

    # --all lists every topic config with its effective value.
    everything = kafka_class(CONFIGS, "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
                             "--describe", "--all").check()
    assert f"All configs for topic {topic} are:" in everything.lines[0], everything.stdout
    assert any(line.strip().startswith("retention.ms=604800000 ") for line in everything.lines), everything.stdout
    assert any(line.strip().startswith("segment.bytes=1073741824 ") for line in everything.lines), everything.stdout

    bad = kafka_class(CONFIGS, "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
                      "--alter", "--add-config", "retention.ms=soon")
    assert bad.returncode != 0
    assert "InvalidConfigurationException" in bad.stdout + bad.stderr or "Invalid value" in bad.stdout + bad.stderr

    brokers = kafka_class(CONFIGS, "--bootstrap-server", b, "--entity-type", "brokers", "--entity-name", "1",
                          "--describe", "--all").check()
    assert "All configs for broker 1 are:" in brokers.lines[0], brokers.stdout
    assert any(line.strip().startswith("num.partitions=") for line in brokers.lines), brokers.stdout


def _produce_size(bootstrap: str, topic: str, size: int) -> str | None:
    """One record of `size` bytes from librdkafka: None when acknowledged, else the error name."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "message.send.max.retries": 0,
                  "enable.idempotence": False})
    outcome: list = []
    p.produce(topic, b"x" * size, on_delivery=lambda err, msg: outcome.append(err))
    p.flush(30)
    assert outcome, "no delivery report within 30s"
    return None if outcome[0] is None else outcome[0].name()


def _until(what: str, check, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout}s")
        time.sleep(0.2)


def test_kafka_configs_dynamic_broker_configs(kit_libs, moldau_bin, tmp_path):
    """kafka-configs --entity-type brokers: the cluster-wide default (--entity-default) and one
    broker's value, described as Kafka describes them, applied to an open partition at once."""
    pool = BrokerPool(moldau_bin, tmp_path)
    try:
        b = pool.start("dyn").bootstrap
        topic = name("tools-dyn")
        kafka_class(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "1").check()
        assert _produce_size(b, topic, 10_000) is None

        def configs(*args: str):
            return kafka_class(CONFIGS, "--bootstrap-server", b, "--entity-type", "brokers", *args)

        res = configs("--entity-default", "--alter", "--add-config", "message.max.bytes=4096,log.retention.ms=7200000").check()
        assert "Completed updating default config for brokers in the cluster." in res.stdout, res.stdout
        _until("the default message.max.bytes refuses 10 kB", lambda: _produce_size(b, topic, 10_000) == "MSG_SIZE_TOO_LARGE")
        desc = configs("--entity-default", "--describe").check()
        assert desc.lines[0] == "Default configs for brokers in the cluster are:", desc.stdout
        assert sorted(line.strip() for line in desc.lines[1:]) == [
            "log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000}",
            "message.max.bytes=4096 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=4096}",
        ], desc.stdout

        res = configs("--entity-name", "1", "--alter", "--add-config", "message.max.bytes=65536").check()
        assert "Completed updating config for broker 1." in res.stdout, res.stdout
        _until("broker 1's own message.max.bytes wins", lambda: _produce_size(b, topic, 10_000) is None)
        desc = configs("--entity-name", "1", "--describe").check()
        assert desc.lines[0] == "Dynamic configs for broker 1 are:", desc.stdout
        assert [line.strip() for line in desc.lines[1:]] == [
            "message.max.bytes=65536 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:message.max.bytes=65536, "
            "DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=4096, DEFAULT_CONFIG:message.max.bytes=1048588}",
        ], desc.stdout
        everything = configs("--entity-name", "1", "--describe", "--all").check()
        assert any(line.strip().startswith("log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:")
                   for line in everything.lines), everything.stdout

        # Kafka answers a bad BROKER value with InvalidRequestException (KAFKA-13609); nothing changes.
        for bad in ("message.max.bytes=abc", "log.dirs=/tmp/elsewhere"):
            res = configs("--entity-default", "--alter", "--add-config", bad)
            assert res.returncode != 0 and "InvalidRequestException" in res.stdout + res.stderr, res.stdout + res.stderr
        assert "message.max.bytes=4096" in configs("--entity-default", "--describe").check().stdout

        configs("--entity-name", "1", "--alter", "--delete-config", "message.max.bytes").check()
        _until("back to the default's 4096", lambda: _produce_size(b, topic, 10_000) == "MSG_SIZE_TOO_LARGE")
        configs("--entity-default", "--alter", "--delete-config", "message.max.bytes,log.retention.ms").check()
        _until("back to Kafka's default", lambda: _produce_size(b, topic, 10_000) is None)
        assert configs("--entity-default", "--describe").check().lines == ["Default configs for brokers in the cluster are:"]
    finally:
        problems = pool.stop_all()
    assert not problems, problems


def _connection_logged(server, timeout: float = 0.0) -> tuple[int, bool]:
    """One connection with an ApiVersions round trip: (its port, whether the broker logged its
    `broker::connection` DEBUG line within `timeout`). The broker writes that line when it
    accepts, before it answers: once answered, a line not there will not come."""
    import kwire

    with kwire.connect(server.address) as sock:
        port = sock.getsockname()[1]
        kwire.api_versions(sock)
    deadline = time.monotonic() + timeout
    while True:
        if any(f"127.0.0.1:{port}" in line and "connection opened" in line
               for line in server.log_tail(1 << 20).splitlines()):
            return port, True
        if time.monotonic() >= deadline:
            return port, False
        time.sleep(0.2)


def test_kafka_configs_broker_loggers(mb):
    """kafka-configs --entity-type broker-loggers: lists this broker's loggers (Kafka's dotted
    names for tracing targets) and changes a level at runtime: a DEBUG line appears after
    --add-config and stops after --delete-config; Kafka's own checks of logger names and levels."""
    def loggers(*args: str):
        return kafka_class(CONFIGS, "--bootstrap-server", mb.bootstrap, "--entity-type", "broker-loggers",
                           "--entity-name", "1", *args)

    def listed() -> dict[str, str]:
        desc = loggers("--describe").check()
        assert desc.lines[0] == "Dynamic configs for broker-logger 1 are:", desc.stdout
        out = {}
        for line in desc.lines[1:]:
            kv, rest = line.strip().split(" ", 1)
            assert rest == "sensitive=false synonyms={}", line
            k, v = kv.split("=", 1)
            out[k] = v
        return out

    before = listed()
    assert before["root"] == "INFO" and before["broker.connection"] == "INFO", before
    quiet, _ = _connection_logged(mb)
    res = loggers("--alter", "--add-config", "broker.connection=DEBUG,broker=WARN").check()
    assert "Completed updating config for broker-logger 1." in res.stdout, res.stdout
    after = listed()
    # A logger without its own level follows its parent's, then root's.
    assert (after["broker.connection"], after["broker"], after["broker.state"], after["root"]) == \
        ("DEBUG", "WARN", "WARN", "INFO"), after
    assert _connection_logged(mb, timeout=30)[1], "no DEBUG line after --add-config broker.connection=DEBUG"
    assert f"127.0.0.1:{quiet}" not in mb.log_tail(1 << 20), "DEBUG line at INFO"

    loggers("--alter", "--delete-config", "broker.connection,broker").check()
    back = listed()
    assert (back["broker.connection"], back["broker"], back["broker.state"]) == ("INFO",) * 3, back
    # The broker writes the line when it accepts, before it answers the round trip.
    assert not _connection_logged(mb)[1], "DEBUG line after --delete-config"

    for bad, error in (("no.such.logger=DEBUG", "Invalid broker logger(s): no.such.logger"),
                       ("root=LOUD", "InvalidConfigurationException")):
        res = loggers("--alter", "--add-config", bad)
        assert res.returncode != 0 and error in res.stdout + res.stderr, res.stdout + res.stderr
    res = loggers("--alter", "--delete-config", "root")
    assert res.returncode != 0 and "Removing the log level of the root logger is not allowed" in res.stderr + res.stdout
    assert listed()["root"] == "INFO"


def test_console_producer_and_consumer(mb):
    b = mb.bootstrap
    topic = name("tools-console")
    kafka_class(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "2").check()
    lines = [f"key{i % 4}:value {i}" for i in range(20)]
    produce_lines(b, topic, lines, "parse.key=true", "key.separator=:", "parse.headers=false")
    assert sum(offsets(b, topic).values()) == 20

    out = kafka_class(CONSOLE_CONSUMER, "--bootstrap-server", b, "--topic", topic, "--from-beginning",
                      "--max-messages", "20", "--timeout-ms", "30000", "--group", f"{topic}-g",
                      "--property", "print.key=true", "--property", "key.separator=|",
                      "--property", "print.partition=true", "--property", "print.offset=true").check()
    got = [line for line in out.lines if "|" in line]
    assert len(got) == 20, out.stdout
    by_key: dict[str, list[str]] = {}
    for line in got:
        # The key separator separates every printed field: Partition:P|Offset:O|key|value
        m = re.fullmatch(r"Partition:(\d+)\|Offset:(\d+)\|(key\d)\|(value \d+)", line)
        assert m, line
        by_key.setdefault(m.group(3), []).append((int(m.group(1)), m.group(4)))
    for key, recs in by_key.items():
        assert len({p for p, _ in recs}) == 1, f"{key} spread over partitions: {recs}"
        want = [f"value {i}" for i in range(20) if f"key{i % 4}" == key]
        assert [v for _, v in recs] == want, (key, recs)
    assert "Processed a total of 20 messages" in out.stderr, out.stderr

    # The group committed its position: the same group sees nothing more.
    again = kafka_class(CONSOLE_CONSUMER, "--bootstrap-server", b, "--topic", topic, "--group", f"{topic}-g",
                        "--timeout-ms", "5000")
    assert "Processed a total of 0 messages" in again.stderr, again.stderr


def test_consumer_groups(mb):
    b = mb.bootstrap
    topic = name("tools-groups")
    group = f"{topic}-g"
    kafka_class(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "2").check()
    produce_lines(b, topic, [f"v{i}" for i in range(10)])
    ends = offsets(b, topic)
    assert sum(ends.values()) == 10
    kafka_class(CONSOLE_CONSUMER, "--bootstrap-server", b, "--topic", topic, "--group", group,
                "--from-beginning", "--max-messages", "10", "--timeout-ms", "30000").check()

    listed = kafka_class(GROUPS, "--bootstrap-server", b, "--list").check()
    assert group in listed.lines

    def describe(*extra):
        res = kafka_class(GROUPS, "--bootstrap-server", b, "--describe", "--group", group, *extra).check()
        rows = [line.split() for line in res.lines]
        header = next(r for r in rows if r and r[0] == "GROUP")
        return header, [dict(zip(header, r)) for r in rows if r and r[0] == group]

    header, rows = describe()
    assert header[:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"], header
    assert sorted(int(r["PARTITION"]) for r in rows) == [0, 1]
    for r in rows:
        assert int(r["CURRENT-OFFSET"]) == int(r["LOG-END-OFFSET"]) == ends[int(r["PARTITION"])], r
        assert r["LAG"] == "0", r

    _, state = describe("--state")
    assert state and state[0]["STATE"] == "Empty", state

    # Reset to the earliest offsets: dry run first (nothing changes), then --execute.
    dry = kafka_class(GROUPS, "--bootstrap-server", b, "--reset-offsets", "--group", group, "--topic", topic,
                      "--to-earliest", "--dry-run").check()
    assert "NEW-OFFSET" in dry.stdout, dry.stdout
    _, rows = describe()
    assert all(r["LAG"] == "0" for r in rows), rows
    kafka_class(GROUPS, "--bootstrap-server", b, "--reset-offsets", "--group", group, "--topic", topic,
                "--to-earliest", "--execute").check()
    _, rows = describe()
    for r in rows:
        assert r["CURRENT-OFFSET"] == "0" and int(r["LAG"]) == ends[int(r["PARTITION"])], r

    # Per partition: --to-offset on the fuller partition, --shift-by on the other (the tool
    # clamps a target past the log end to the log end, as it should).
    big = max(ends, key=ends.get)
    other = 1 - big
    kafka_class(GROUPS, "--bootstrap-server", b, "--reset-offsets", "--group", group, "--topic", f"{topic}:{big}",
                "--to-offset", "3", "--execute").check()
    kafka_class(GROUPS, "--bootstrap-server", b, "--reset-offsets", "--group", group, "--topic", f"{topic}:{other}",
                "--shift-by", "2", "--execute").check()
    _, rows = describe()
    current = {int(r["PARTITION"]): int(r["CURRENT-OFFSET"]) for r in rows}
    assert current == {big: 3, other: min(2, ends[other])}, rows

    deleted = kafka_class(GROUPS, "--bootstrap-server", b, "--delete-offsets", "--group", group,
                          "--topic", f"{topic}:{other}").check()
    assert re.search(rf"{re.escape(topic)}\s+{other}\s+Successful", deleted.stdout), deleted.stdout
    _, rows = describe()
    current = {int(r["PARTITION"]): r["CURRENT-OFFSET"] for r in rows}
    assert current.get(big) == "3" and current.get(other, "-") == "-", rows

    gone = kafka_class(GROUPS, "--bootstrap-server", b, "--delete", "--group", group).check()
    assert f"Deletion of requested consumer groups ('{group}') was successful." in gone.stdout, gone.stdout
    assert group not in kafka_class(GROUPS, "--bootstrap-server", b, "--list").check().lines
    missing = kafka_class(GROUPS, "--bootstrap-server", b, "--describe", "--group", group)
    assert "does not exist" in missing.stdout + missing.stderr, missing.stdout + missing.stderr


def test_get_offsets_and_delete_records(mb, tmp_path):
    b = mb.bootstrap
    topic = name("tools-offsets")
    kafka_class(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "2").check()
    produce_lines(b, topic, [f"v{i}" for i in range(10)], "parse.key=false")
    latest = offsets(b, topic)
    assert sum(latest.values()) == 10 and set(latest) == {0, 1}
    assert offsets(b, topic, "--time", "-2") == {0: 0, 1: 0}
    assert offsets(b, topic, "--time", "latest") == latest

    target = max(latest, key=latest.get)
    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": target, "offset": 3}]}))
    res = kafka_class(DELETE_RECORDS, "--bootstrap-server", b, "--offset-json-file", str(spec)).check()
    assert re.search(rf"partition: {re.escape(topic)}-{target}\s+low_watermark: 3", res.stdout), res.stdout
    assert offsets(b, topic, "--time", "-2")[target] == 3
    assert offsets(b, topic)[target] == latest[target]


def test_log_dirs(mb):
    b = mb.bootstrap
    topic = name("tools-logdirs")
    kafka_class(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "2").check()
    produce_lines(b, topic, ["x" * 500] * 4)
    res = kafka_class(LOG_DIRS, "--bootstrap-server", b, "--describe", "--topic-list", topic).check()
    doc = json.loads(next(line for line in res.lines if line.startswith("{")))
    (broker,) = doc["brokers"]
    assert broker["broker"] == 1
    (log_dir,) = broker["logDirs"]
    assert log_dir["error"] is None, log_dir
    parts = {p["partition"]: p for p in log_dir["partitions"]}
    assert set(parts) == {f"{topic}-0", f"{topic}-1"}, parts
    assert sum(p["size"] for p in parts.values()) > 2000, parts
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in parts.values()), parts


def test_producer_and_consumer_perf(mb):
    b = mb.bootstrap
    topic = name("tools-perf")
    kafka_class(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "2").check()
    n = 20000
    res = kafka_class(PRODUCER_PERF, "--topic", topic, "--num-records", str(n), "--record-size", "100",
                      "--throughput", "-1", "--producer-props", f"bootstrap.servers={b}", "acks=all",
                      "linger.ms=5", timeout=300, env={"MOLDAU_REF_JAVA_OPTS": ""}).check()
    final = res.lines[-1]
    m = re.match(r"(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max latency, "
                 r"\d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99.9th\.", final)
    assert m, res.stdout
    assert int(m.group(1)) == n
    assert sum(offsets(b, topic).values()) == n

    res = kafka_class(CONSUMER_PERF, "--bootstrap-server", b, "--topic", topic, "--num-records", str(n),
                      "--timeout", "60000", timeout=300, env={"MOLDAU_REF_JAVA_OPTS": ""}).check()
    header, row = res.lines[-2], res.lines[-1]
    cols = dict(zip([c.strip() for c in header.split(",")], [v.strip() for v in row.split(",")]))
    assert int(cols["data.consumed.in.nMsg"]) == n, res.stdout
    assert abs(float(cols["data.consumed.in.MB"]) - n * 100 / 1024 / 1024) < 0.01, cols


def test_verifiable_producer_and_consumer(mb):
    """The tools Kafka's own system tests use to check delivery: every acked record is consumed."""
    b = mb.bootstrap
    topic = name("tools-verifiable")
    kafka_class(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "3").check()
    n = 1000
    prod = kafka_class(VERIFIABLE_PRODUCER, "--bootstrap-server", b, "--topic", topic, "--max-messages", str(n),
                       "--acks", "-1", timeout=300).check()
    events = [json.loads(line) for line in prod.lines if line.startswith("{")]
    kinds = [e["name"] for e in events]
    assert kinds[0] == "startup_complete" and "shutdown_complete" in kinds, kinds[:3]
    acked = [e for e in events if e["name"] == "producer_send_success"]
    assert not [e for e in events if e["name"] == "producer_send_error"], prod.stdout[:2000]
    assert len(acked) == n
    seen = {(e["partition"], e["offset"]) for e in acked}
    assert len(seen) == n, "duplicate (partition, offset) acknowledged"
    tool_data = next(e for e in events if e["name"] == "tool_data")
    assert tool_data["sent"] == n and tool_data["acked"] == n, tool_data

    cons = kafka_class(VERIFIABLE_CONSUMER, "--bootstrap-server", b, "--topic", topic, "--group-id", f"{topic}-g",
                       "--max-messages", str(n), "--reset-policy", "earliest", "--verbose", timeout=300).check()
    events = [json.loads(line) for line in cons.lines if line.startswith("{")]
    consumed = set()
    for e in events:
        if e["name"] == "record_data":
            consumed.add((e["partition"], e["offset"]))
    assert consumed == seen, f"consumed {len(consumed)} of {n} acknowledged records"
    commits = [e for e in events if e["name"] == "offsets_committed"]
    assert commits and all(c["success"] for c in commits), commits[-3:]
    last = {}
    for c in commits:
        for o in c["offsets"]:
            last[o["partition"]] = o["offset"]
    ends = offsets(b, topic)
    assert last == {p: o for p, o in ends.items() if o > 0}, (last, ends)
    assert any(e["name"] == "partitions_assigned" for e in events)
    assert "shutdown_complete" in [e["name"] for e in events], events[-3:]


def test_broker_api_versions_and_cluster_id(mb):
    b = mb.bootstrap
    res = kafka_class(API_VERSIONS, "--bootstrap-server", b).check()
    assert re.search(r"127\.0\.0\.1:\d+ \(id: 1 rack: null", res.stdout), res.stdout
    assert re.search(r"Produce\(0\): 3 to \d+ \[usable: \d+\]", res.stdout), res.stdout
    assert re.search(r"Fetch\(1\): 4 to \d+ \[usable: \d+\]", res.stdout), res.stdout
    cid = kafka_class(CLUSTER, "cluster-id", "--bootstrap-server", b).check()
    assert re.fullmatch(r"Cluster ID: \S+", cid.lines[-1]), cid.stdout


def advertises(server, api_key: int) -> bool:
    import kwire

    with kwire.connect(server.address) as sock:
        return kwire.api_versions(sock).range_of(api_key) is not None


def test_kafka_metadata_quorum(mb):
    """kafka-metadata-quorum describe --status: runs once the broker advertises DescribeQuorum."""
    if not advertises(mb, 55):
        pytest.skip("DescribeQuorum (55) not advertised yet (controller quorum, issue 9)")
    res = kafka_class("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server", mb.bootstrap,
                      "describe", "--status").check()
    fields = dict(line.split(":", 1) for line in res.lines if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    assert fields.get("ClusterId"), res.stdout
    assert fields.get("LeaderId") == "1", res.stdout
    assert "CurrentVoters" in fields, res.stdout


def table(res) -> list[dict[str, str]]:
    """A tool's whitespace-separated table (header line, then rows) as dicts."""
    header = res.lines[0].split()
    return [dict(zip(header, line.split())) for line in res.lines[1:]]


def test_kafka_transactions_tool(mb):
    """kafka-transactions list, describe, describe-producers and abort (a hanging transaction's
    remedy: WriteTxnMarkers from the tool) on a transaction that is open on moldau."""
    if not advertises(mb, 66):
        pytest.skip("ListTransactions (66) not advertised yet (transactions, issue 11)")
    from confluent_kafka import Consumer, Producer, TopicPartition

    txns = "org.apache.kafka.tools.TransactionsCommand"
    b = mb.bootstrap
    topic = name("tools-txn")
    tid = name("tools-txn-id")
    kafka_class(TOPICS, "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "1").check()
    # The transaction must stay open through several JVM tool runs (seconds each on a loaded
    # machine): a timeout well above librdkafka's 60 s default, or the coordinator aborts it.
    p = Producer({"bootstrap.servers": b, "transactional.id": tid, "linger.ms": 0,
                  "transaction.timeout.ms": 600000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    assert p.flush(30) == 0

    listed = table(kafka_class(txns, "--bootstrap-server", b, "list").check())
    mine = [row for row in listed if row.get("TransactionalId") == tid]
    assert mine and mine[0]["TransactionState"] == "Ongoing", listed
    pid = mine[0]["ProducerId"]
    # ListTransactions v2 (KIP-1152): the pattern must match the whole transactional id.
    by_pattern = table(kafka_class(txns, "--bootstrap-server", b, "list",
                                   "--transactional-id-pattern", tid[:-2] + ".*").check())
    assert [row["TransactionalId"] for row in by_pattern] == [tid], by_pattern
    by_prefix = table(kafka_class(txns, "--bootstrap-server", b, "list",
                                  "--transactional-id-pattern", tid[:-2]).check())
    assert by_prefix == [], by_prefix

    desc = table(kafka_class(txns, "--bootstrap-server", b, "describe", "--transactional-id", tid).check())
    assert len(desc) == 1, desc
    assert desc[0]["ProducerId"] == pid and desc[0]["TransactionState"] == "Ongoing", desc
    assert desc[0]["TopicPartitions"] == f"{topic}-0", desc

    prods = table(kafka_class(txns, "--bootstrap-server", b, "describe-producers", "--topic", topic,
                              "--partition", "0").check())
    assert [(r["ProducerId"], r["CurrentTransactionStartOffset"]) for r in prods] == [(pid, "0")], prods

    # Abort it on the partition as an operator would a hanging transaction: the tool finds the
    # producer with DescribeProducers and writes an ABORT marker with WriteTxnMarkers.
    kafka_class(txns, "--bootstrap-server", b, "abort", "--topic", topic, "--partition", "0",
                "--start-offset", "0").check()
    # The partition's transaction is closed: a committed record after it is readable, the
    # aborted one never is.
    q = Producer({"bootstrap.servers": b, "transactional.id": tid + "-after", "linger.ms": 0})
    q.init_transactions(30)
    q.begin_transaction()
    q.produce(topic, b"after", partition=0)
    q.commit_transaction(30)
    c = Consumer({"bootstrap.servers": b, "group.id": name("g"), "isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        seen = []
        deadline = time.time() + 30
        while b"after" not in seen and time.time() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                seen.append(m.value())
        assert seen == [b"after"], seen
    finally:
        c.close()
    p.abort_transaction(30)


LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"


def _faults_cluster_class():
    """The fault suite's three-node cluster harness (tests/faults/cluster.py)."""
    import sys
    from pathlib import Path
    faults = str(Path(__file__).resolve().parent.parent / "faults")
    if faults not in sys.path:
        sys.path.insert(0, faults)
    from cluster import Cluster
    return Cluster


def _wait(what: str, cond, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
            if last:
                return last
        except Exception as e:  # metadata calls fail while nodes come and go
            last = e
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def test_kafka_leader_election_on_three_nodes(kit_libs, moldau_bin, tmp_path):
    """ElectLeaders (API 43) on three `moldau server` processes, with Kafka's own
    kafka-leader-election tool, confluent-kafka's and kafka-python's admin clients. Node 1 is
    the preferred (first) replica of partitions 0 and 1; a controlled shutdown (SIGTERM) moves
    their leadership away, and once node 1 is back in their ISRs a PREFERRED election gives it
    back: partition 0 by the tool, partition 1 by confluent-kafka. Already-preferred partitions
    and UNCLEAN elections of led partitions answer ELECTION_NOT_NEEDED ("Valid replica already
    elected"). Automatic preferred-leader balancing is off here (auto.leader.rebalance.enable)
    so that only the requested elections move leaders."""
    from confluent_kafka import ElectionType, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.admin import KafkaAdminClient

    Cluster = _faults_cluster_class()
    cluster = Cluster(moldau_bin, tmp_path / "cluster", 3, {
        "broker.session.timeout.ms": 3000,
        "broker.heartbeat.interval.ms": 500,
        "auto.leader.rebalance.enable": "false",
    }).start()
    try:
        b = cluster.bootstrap
        admin = AdminClient({"bootstrap.servers": b})
        topic = name("tools-elect")
        admin.create_topics([NewTopic(topic, 3, replica_assignment=[[1, 2, 3], [1, 3, 2], [2, 3, 1]])]
                            )[topic].result(60)

        def parts():
            return admin.list_topics(topic, timeout=10).topics[topic].partitions

        _wait("preferred leaders", lambda: [parts()[p].leader for p in range(3)] == [1, 1, 2])
        before = kafka_class(LEADER_ELECTION, "--bootstrap-server", b, "--election-type", "PREFERRED",
                             "--all-topic-partitions").check()
        assert f"{topic}-" not in before.stdout, before.stdout

        cluster.sigterm(1)
        _wait("partitions 0 and 1 led by others", lambda: all(parts()[p].leader in (2, 3) for p in (0, 1)))
        cluster.restart(1)
        _wait("node 1 back in every ISR", lambda: all(sorted(parts()[p].isrs) == [1, 2, 3] for p in range(3)),
              timeout=90)
        assert [parts()[p].leader for p in (0, 1)] != [1, 1]

        res = kafka_class(LEADER_ELECTION, "--bootstrap-server", b, "--election-type", "PREFERRED",
                          "--topic", topic, "--partition", "0").check()
        assert res.lines == [f"Successfully completed leader election (PREFERRED) for partitions {topic}-0"], \
            res.stdout
        assert parts()[0].leader == 1
        again = kafka_class(LEADER_ELECTION, "--bootstrap-server", b, "--election-type", "PREFERRED",
                            "--topic", topic, "--partition", "0").check()
        assert again.lines == [f"Valid replica already elected for partitions {topic}-0"], again.stdout
        unclean = kafka_class(LEADER_ELECTION, "--bootstrap-server", b, "--election-type", "UNCLEAN",
                              "--topic", topic, "--partition", "2").check()
        assert unclean.lines == [f"Valid replica already elected for partitions {topic}-2"], unclean.stdout

        # confluent-kafka (librdkafka's ElectLeaders) elects partition 1's preferred leader.
        done = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 1)]).result(30)
        assert done[TopicPartition(topic, 1)] is None, done
        assert parts()[1].leader == 1
        done = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 1)]).result(30)
        err = done[TopicPartition(topic, 1)]
        assert err is not None and err.name() == "ELECTION_NOT_NEEDED", done
        unknown = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 9)]).result(30)
        assert unknown[TopicPartition(topic, 9)].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, unknown

        # kafka-python (its own ElectLeaders encoding, sent to the controller it finds in
        # Metadata): nothing left to elect, every partition ELECTION_NOT_NEEDED (84).
        kp = KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=30000)
        try:
            resp = kp.elect_leaders(0, {topic: [0, 1, 2]}, raise_errors=False)
            codes = {(r.topic if hasattr(r, "topic") else r[0], p.partition_id if hasattr(p, "partition_id") else p[0]):
                     (p.error_code if hasattr(p, "error_code") else p[1])
                     for r in resp.replica_election_results
                     for p in (r.partition_result if hasattr(r, "partition_result") else r[1])}
            assert codes == {(topic, 0): 84, (topic, 1): 84, (topic, 2): 84}, resp
        finally:
            kp.close()
        assert [parts()[p].leader for p in range(3)] == [1, 1, 2]
    finally:
        problems = cluster.close()
    assert not problems, "\n".join(problems)


REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


def test_kafka_reassign_partitions_on_three_nodes(kit_libs, moldau_bin, tmp_path):
    """AlterPartitionReassignments / ListPartitionReassignments (APIs 45/46, KIP-455) on three
    `moldau server` processes, with Kafka's own kafka-reassign-partitions (--execute with
    --throttle, whose KIP-73 configs it sets and --verify removes, --verify, --list, --cancel)
    and kafka-python's admin client. Partition 0 moves off its leader (node 1
    → [3, 2]: node 3 copies the log, then leads); partition 1 grows to three replicas; the
    records written before are all read back afterwards. A reassignment to a stopped broker stays
    in progress (listed by both clients) until it is cancelled. Kafka's errors:
    UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS."""
    from confluent_kafka import Consumer, Producer, TopicPartition as CTP
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    Cluster = _faults_cluster_class()
    cluster = Cluster(moldau_bin, tmp_path / "cluster", 3, {
        "broker.session.timeout.ms": 3000,
        "broker.heartbeat.interval.ms": 500,
        "auto.leader.rebalance.enable": "false",
    }).start()
    kp = None
    try:
        b = cluster.bootstrap
        admin = AdminClient({"bootstrap.servers": b})
        topic = name("tools-reassign")
        admin.create_topics([NewTopic(topic, 2, replica_assignment=[[1, 2], [2, 1]])])[topic].result(60)

        def parts(t=topic):
            return admin.list_topics(t, timeout=10).topics[t].partitions

        _wait("leaders", lambda: [parts()[p].leader for p in range(2)] == [1, 2])
        producer = Producer({"bootstrap.servers": b, "acks": "all", "enable.idempotence": True})
        for i in range(300):
            producer.produce(topic, value=f"r{i}".encode(), partition=i % 2)
        assert producer.flush(60) == 0

        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic, "partition": 0, "replicas": [3, 2]},
            {"topic": topic, "partition": 1, "replicas": [2, 1, 3]},
        ]}))
        # --throttle (KIP-73): the tool sets the rates on every broker involved and the
        # throttled replica lists on the topic (IncrementalAlterConfigs); Moldau enforces them.
        res = kafka_class(REASSIGN, "--bootstrap-server", b, "--execute",
                          "--reassignment-json-file", str(plan), "--throttle", "50000000").check()
        assert f"Successfully started partition reassignments for {topic}-0,{topic}-1" in res.stdout, res.stdout
        assert "The inter-broker throttle limit was set to 50000000 B/s" in res.stdout, res.stdout

        def set_configs(kind, name):
            entries = list(admin.describe_configs([ConfigResource(kind, name)]).values())[0].result(30)
            return {k: e.value for k, e in entries.items() if not e.is_default}
        for node in ("1", "2", "3"):
            c = set_configs(ResourceType.BROKER, node)
            assert c.get("leader.replication.throttled.rate") == "50000000", (node, c)
            assert c.get("follower.replication.throttled.rate") == "50000000", (node, c)
        # The same lists `moldau topic reassign --throttle` computes (tests/faults/test_reassign_cli.py).
        t = set_configs(ResourceType.TOPIC, topic)
        assert t.get("leader.replication.throttled.replicas") == "0:1,0:2,1:1,1:2", t
        assert t.get("follower.replication.throttled.replicas") == "0:3,1:3", t

        def verified():
            out = kafka_class(REASSIGN, "--bootstrap-server", b, "--verify",
                              "--reassignment-json-file", str(plan)).check().stdout
            return out if (f"Reassignment of partition {topic}-0 is completed" in out
                           and f"Reassignment of partition {topic}-1 is completed" in out) else None
        out = _wait("--verify says completed", verified, timeout=90)
        # Once complete, --verify removes the throttles.
        assert "Clearing broker-level throttles" in out, out
        for node in ("1", "2", "3"):
            c = set_configs(ResourceType.BROKER, node)
            assert not any("replication.throttled" in k for k in c), (node, c)
        t = set_configs(ResourceType.TOPIC, topic)
        assert not any("replication.throttled" in k for k in t), t
        p = parts()
        assert (p[0].replicas, p[0].leader) == ([3, 2], 3), p[0]
        assert p[1].replicas == [2, 1, 3] and sorted(p[1].isrs) == [1, 2, 3], p[1]
        listed = kafka_class(REASSIGN, "--bootstrap-server", b, "--list").check()
        assert "No partition reassignments found." in listed.stdout, listed.stdout

        # Everything written before is there, read from the new leader of partition 0.
        consumer = Consumer({"bootstrap.servers": b, "group.id": name("g"), "enable.auto.commit": False})
        consumer.assign([CTP(topic, 0, 0), CTP(topic, 1, 0)])
        seen: set[str] = set()
        deadline = time.monotonic() + 60
        while len(seen) < 300 and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                seen.add(m.value().decode())
        consumer.close()
        assert seen == {f"r{i}" for i in range(300)}, 300 - len(seen)

        # A reassignment adding a stopped broker stays in progress until cancelled.
        other = name("tools-reassign-cancel")
        admin.create_topics([NewTopic(other, 1, replica_assignment=[[1, 2]])])[other].result(60)
        _wait("leader", lambda: parts(other)[0].leader == 1)
        cluster.sigterm(3)
        stuck = tmp_path / "stuck.json"
        stuck.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": other, "partition": 0, "replicas": [1, 3]}]}))
        # (kafka-python starts it: the tool refuses a broker DescribeCluster does not list, and
        # a fenced broker is not listed.)
        kp = KafkaAdminClient(bootstrap_servers=b, request_timeout_ms=30000)
        assert kp.alter_partition_reassignments({TopicPartition(other, 0): [1, 3]}) == {
            TopicPartition(other, 0): None}
        listed = kafka_class(REASSIGN, "--bootstrap-server", b, "--list").check()
        assert f"{other}-0: replicas: 1,3,2. adding: 3. removing: 2." in listed.stdout, listed.stdout
        assert kp.list_partition_reassignments() == {TopicPartition(other, 0): {
            "replicas": [1, 3, 2], "adding_replicas": [3], "removing_replicas": [2]}}
        # (--preserve-throttles: clearing them would need the stopped broker.)
        res = kafka_class(REASSIGN, "--bootstrap-server", b, "--cancel", "--preserve-throttles",
                          "--reassignment-json-file", str(stuck)).check()
        assert f"Successfully cancelled partition reassignment for: {other}-0" in res.stdout, res.stdout
        assert kp.list_partition_reassignments() == {}
        assert parts(other)[0].replicas == [1, 2]

        # kafka-python: errors, then a reassignment of its own.
        from kafka import errors as kerr
        errs = kp.alter_partition_reassignments({
            TopicPartition(other, 0): None,
            TopicPartition(other, 5): [1, 2],
            TopicPartition(name("missing"), 0): [1, 2],
        })
        assert sorted((tp.partition, e) for tp, e in errs.items() if tp.topic == other) == [
            (0, kerr.NoReassignmentInProgressError), (5, kerr.UnknownTopicOrPartitionError)], errs
        assert [e for tp, e in errs.items() if tp.topic != other] == [kerr.UnknownTopicOrPartitionError]
        cluster.restart(3)
        for bad in ([2, 2], [2, 9]):
            errs = kp.alter_partition_reassignments({TopicPartition(other, 0): bad})
            assert errs == {TopicPartition(other, 0): kerr.InvalidReplicationAssignmentError}, (bad, errs)
        assert kp.alter_partition_reassignments({TopicPartition(other, 0): [2, 3]}) == {TopicPartition(other, 0): None}
        _wait("kafka-python's reassignment done",
              lambda: parts(other)[0].replicas == [2, 3] and parts(other)[0].leader == 2, timeout=90)
        assert kp.list_partition_reassignments({other: [0]}) == {}
    finally:
        if kp is not None:
            kp.close()
        problems = cluster.close()
    assert not problems, "\n".join(problems)


def test_kafka_configs_client_quotas(mb):
    """kafka-configs --entity-type users / clients: AlterClientQuotas and DescribeClientQuotas
    as Kafka's AdminClient sends them (a user, a user+client pair, the client default, a refused
    value); removal and the filters are in tests/compat/test_quotas.py."""
    b = mb.bootstrap
    user, client = name("quser"), name("qclient")

    def configs(*args: str):
        return kafka_class(CONFIGS, "--bootstrap-server", b, *args)

    res = configs("--alter", "--entity-type", "users", "--entity-name", user,
                  "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152").check()
    assert f"Completed updating config for user {user}." in res.stdout, res.stdout
    res = configs("--alter", "--entity-type", "users", "--entity-name", user, "--entity-type", "clients",
                  "--entity-name", client, "--add-config", "request_percentage=50").check()
    assert "Completed updating config" in res.stdout, res.stdout
    res = configs("--alter", "--entity-type", "clients", "--entity-default",
                  "--add-config", "producer_byte_rate=4096").check()
    assert "Completed updating default config for clients" in res.stdout, res.stdout

    desc = configs("--describe", "--entity-type", "users", "--entity-name", user).check()
    text = desc.stdout
    assert f"Quota configs for user-principal '{user}' are" in text, text
    assert "producer_byte_rate=1048576.0" in text and "consumer_byte_rate=2097152.0" in text, text
    desc = configs("--describe", "--entity-type", "clients", "--entity-default").check()
    assert "the default client-id" in desc.stdout and "producer_byte_rate=4096.0" in desc.stdout, desc.stdout

    # A fractional byte rate is refused with Kafka's INVALID_REQUEST.
    bad = configs("--alter", "--entity-type", "users", "--entity-name", user, "--add-config", "producer_byte_rate=10.5")
    assert bad.returncode != 0
    assert "InvalidRequestException" in bad.stdout + bad.stderr, bad.stdout + bad.stderr
