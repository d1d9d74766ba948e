"""Dynamic broker configs (config resource type BROKER) with real admin clients.

kafka-python and confluent-kafka (librdkafka) set and describe this broker's values (neither
Python client can name the cluster-wide default, resource ""; Kafka's own kafka-configs does
that in tests/reference/test_tools.py); a real producer shows each committed change taking
effect on a partition that is already open, without a restart; the values survive a restart;
a bad value is refused (INVALID_REQUEST, as Kafka answers for BROKER resources) and changes
nothing.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource as CResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from clients import confluent_consumer, confluent_produce, confluent_watermarks

DEADLINE_S = 60.0
BIG = b"x" * 10_000


def produce_one(bootstrap: str, topic: str, value: bytes) -> str | None:
    """Produces one record; None when acknowledged, else the broker's error name."""
    p = Producer({"bootstrap.servers": bootstrap, "message.send.max.retries": 0,
                  "enable.idempotence": False, "linger.ms": 0})
    outcome: list = []
    p.produce(topic, value, on_delivery=lambda err, msg: outcome.append(err))
    p.flush(30)
    assert outcome, "no delivery report within 30s"
    return None if outcome[0] is None else outcome[0].name()


def wait_for(what: str, check) -> None:
    deadline = time.monotonic() + DEADLINE_S
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last is True:
            return
        time.sleep(0.2)
    pytest.fail(f"{what}: still {last!r} after {DEADLINE_S}s")


def describe_broker(cadmin: AdminClient, broker: str) -> dict:
    r = CResource(ResourceType.BROKER, broker)
    return cadmin.describe_configs([r])[r].result(timeout=30)


def kafka_python_alter(bootstrap: str, broker: str, configs: dict, incremental: bool = True,
                       **security) -> str:
    """IncrementalAlterConfigs (or the legacy AlterConfigs, which replaces the broker's whole
    set) from kafka-python on one broker: 'OK' or its error text (`security`: kafka-python's
    connection settings)."""
    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap, **security)
    try:
        res = kadmin.alter_configs([ConfigResource(ConfigResourceType.BROKER, broker, configs=configs)],
                                   raise_on_unknown=False, incremental=incremental)
    finally:
        kadmin.close()
    return str(res["broker"][broker])


def test_dynamic_broker_configs_apply_without_restart_and_survive_one(brokers):
    server = brokers.start("dyn")
    b = server.bootstrap
    cadmin = AdminClient({"bootstrap.servers": b})
    topic = "dyn-configs"
    cadmin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    assert produce_one(b, topic, BIG) is None

    # kafka-python lowers this broker's message.max.bytes: the partition, already open, refuses
    # what is now too big as soon as the change is committed.
    assert kafka_python_alter(b, "1", {"message.max.bytes": "4096", "log.retention.ms": "7200000"}) == "OK"
    wait_for("message.max.bytes=4096 applied", lambda: produce_one(b, topic, BIG) == "MSG_SIZE_TOO_LARGE")
    assert produce_one(b, topic, b"small") is None

    # Bad values and static keys: INVALID_REQUEST (Kafka's code for BROKER resources, see
    # KAFKA-13609), nothing changes.
    for bad in ({"message.max.bytes": "abc"}, {"min.insync.replicas": "0"}, {"log.dirs": "/tmp/x"}):
        outcome = kafka_python_alter(b, "1", bad)
        assert "InvalidRequestError" in outcome, (bad, outcome)
    configs = describe_broker(cadmin, "1")
    mmb = configs["message.max.bytes"]
    assert (mmb.value, mmb.source, mmb.is_read_only) == ("4096", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    assert configs["min.insync.replicas"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["log.dirs"].is_read_only and configs["log.dirs"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert produce_one(b, topic, BIG) == "MSG_SIZE_TOO_LARGE"

    # librdkafka raises it again (IncrementalAlterConfigs SET), and a topic without overrides
    # says where its values come from.
    r = CResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("message.max.bytes", "65536", incremental_operation=AlterConfigOpType.SET)])
    cadmin.incremental_alter_configs([r])[r].result(timeout=30)
    wait_for("message.max.bytes=65536 applied", lambda: produce_one(b, topic, BIG) is None)
    t = CResource(ResourceType.TOPIC, topic)
    tc = cadmin.describe_configs([t])[t].result(timeout=30)
    assert (tc["max.message.bytes"].value, tc["max.message.bytes"].source) == (
        "65536", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert (tc["retention.ms"].value, tc["retention.ms"].source) == (
        "7200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

    # Committed in the metadata log: a restart keeps the values and applies them at load.
    server.restart()
    b = server.bootstrap
    cadmin = AdminClient({"bootstrap.servers": b})
    assert describe_broker(cadmin, "1")["message.max.bytes"].value == "65536"
    assert produce_one(b, topic, BIG) is None
    assert produce_one(b, topic, b"y" * 70_000) == "MSG_SIZE_TOO_LARGE"

    # Deleting the dynamic value falls back to the static/default one at once.
    r = CResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("message.max.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    cadmin.incremental_alter_configs([r])[r].result(timeout=30)
    wait_for("dynamic message.max.bytes removed", lambda: produce_one(b, topic, b"y" * 70_000) is None)
    assert describe_broker(cadmin, "1")["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value


def connection_logged(server, timeout: float = 0.0) -> tuple[int, bool]:
    """Opens a connection, makes one ApiVersions round trip, closes it: (its local port, whether
    the broker's `broker::connection` DEBUG line for it is in the log within `timeout`)."""
    import kwire

    with kwire.connect(server.address) as sock:
        port = sock.getsockname()[1]
        kwire.api_versions(sock)
    needle = f"127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        lines = [l for l in server.log_tail(1 << 20).splitlines() if "connection opened" in l]
        if any(needle in l for l in lines):
            return port, True
        if time.monotonic() >= deadline:
            return port, False
        time.sleep(0.2)


def test_broker_logger_levels_change_at_runtime_and_are_not_persisted(brokers):
    """BROKER_LOGGER (resource type 8) from kafka-python: DescribeConfigs lists this broker's
    loggers with their levels (source DYNAMIC_BROKER_LOGGER_CONFIG); IncrementalAlterConfigs SET
    turns a module's DEBUG lines on at once, DELETE turns them off again, without a restart;
    Kafka's checks (root cannot be deleted, only FATAL..TRACE, no APPEND, this broker's id only,
    validate_only changes nothing); levels are not persisted, as in Kafka: a restart is back to
    RUST_LOG's."""
    from kafka.admin import AlterConfigOp

    server = brokers.start("loggers")
    kadmin = KafkaAdminClient(bootstrap_servers=server.bootstrap)

    def levels(*names):
        r = ConfigResource(ConfigResourceType.BROKER_LOGGER, "1", configs=list(names) or None)
        got = kadmin.describe_configs([r], config_filter="all")["broker_logger"]["1"]
        return {k: (v["value"], v["config_source"]) for k, v in got.items()}

    def alter(configs: dict, validate_only: bool = False, broker: str = "1") -> str:
        r = ConfigResource(ConfigResourceType.BROKER_LOGGER, broker, configs=configs)
        return str(kadmin.alter_configs([r], validate_only=validate_only, incremental=True)
                   ["broker_logger"][broker])

    try:
        listed = levels()
        assert listed["root"] == ("INFO", "DYNAMIC_BROKER_LOGGER_CONFIG"), listed
        assert listed["broker.connection"][0] == "INFO" and listed["broker"][0] == "INFO", listed
        shown_port, _ = connection_logged(server)

        assert alter({"broker.connection": (AlterConfigOp.SET, "DEBUG")}, validate_only=True) == "OK"
        assert levels("broker.connection")["broker.connection"][0] == "INFO", "validate_only changed a level"

        assert alter({"broker.connection": (AlterConfigOp.SET, "DEBUG")}) == "OK"
        assert levels("broker.connection", "broker")["broker.connection"][0] == "DEBUG"
        assert levels("broker")["broker"][0] == "INFO"
        assert connection_logged(server, timeout=30)[1], "no DEBUG line after SET broker.connection=DEBUG"
        assert f"127.0.0.1:{shown_port}" not in server.log_tail(1 << 20), "DEBUG line logged at INFO"

        assert alter({"broker.connection": (AlterConfigOp.DELETE, None)}) == "OK"
        assert levels("broker.connection")["broker.connection"][0] == "INFO"
        # The broker writes the line when it accepts, before it answers the round trip.
        assert not connection_logged(server)[1], "DEBUG line after DELETE"

        refused = {
            "root delete": alter({"root": (AlterConfigOp.DELETE, None)}),
            "bad level": alter({"root": (AlterConfigOp.SET, "LOUD")}),
            "lower case": alter({"root": (AlterConfigOp.SET, "debug")}),
            "append": alter({"root": (AlterConfigOp.APPEND, "DEBUG")}),
        }
        assert "InvalidRequestError" in refused["root delete"] and "not allowed" in refused["root delete"], refused
        assert "InvalidConfigurationError" in refused["bad level"], refused
        assert "InvalidConfigurationError" in refused["lower case"], refused
        assert "InvalidRequestError" in refused["append"], refused
        assert levels("root")["root"][0] == "INFO", "a refused change changed root"
    finally:
        kadmin.close()

    server.restart()
    kadmin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        assert levels("broker.connection")["broker.connection"][0] == "INFO", "log levels were persisted"
    finally:
        kadmin.close()


def _records_up_to_end(bootstrap: str, topic: str) -> list:
    """Every record of partition 0 from the start to the last offset (compaction leaves gaps)."""
    _, high = confluent_watermarks(bootstrap, topic)
    c = confluent_consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out = []
        deadline = time.monotonic() + DEADLINE_S
        while (not out or out[-1].offset() < high - 1) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                out.append(m)
        assert out and out[-1].offset() == high - 1, f"read {len(out)} records, not to offset {high - 1}"
        return out
    finally:
        c.close()


def test_log_cleaner_backoff_ms_is_dynamic(brokers):
    """`log.cleaner.backoff.ms` changes at runtime, as in Kafka: a broker started with a cleaner
    pause of an hour compacts nothing until kafka-python lowers it; then the committed change
    ends the pause at once. librdkafka describes it (DYNAMIC_BROKER_CONFIG, writable) and deletes
    it again; a bad value is refused."""
    server = brokers.start("cleaner", **{"log.cleaner.backoff.ms": 3_600_000})
    b = server.bootstrap
    cadmin = AdminClient({"bootstrap.servers": b})
    entry = describe_broker(cadmin, "1")["log.cleaner.backoff.ms"]
    assert (entry.value, entry.source, entry.is_read_only) == (
        "3600000", ConfigSource.STATIC_BROKER_CONFIG.value, False)

    # Small segments so most of the log is in closed (cleanable) segments; 10 keys x 30 values.
    topic = "cleaner-dynamic"
    cadmin.create_topics([NewTopic(topic, 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"})]
    )[topic].result(timeout=30)
    records = [{"key": f"k{i % 10}".encode(), "value": f"v{i}".encode() + b"." * 40} for i in range(300)]
    confluent_produce(b, topic, records, batch_num_messages=5)  # batches below segment.bytes
    assert len(_records_up_to_end(b, topic)) == 300, "compacted before the backoff was lowered"

    for bad in ("-1", "soon"):
        outcome = kafka_python_alter(b, "1", {"log.cleaner.backoff.ms": bad})
        assert "InvalidRequestError" in outcome, (bad, outcome)
    assert kafka_python_alter(b, "1", {"log.cleaner.backoff.ms": "100"}) == "OK"
    entry = describe_broker(cadmin, "1")["log.cleaner.backoff.ms"]
    assert (entry.value, entry.source) == ("100", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

    def compacted():
        kept = _records_up_to_end(b, topic)
        return True if len(kept) < 300 else f"{len(kept)} records"
    wait_for("compaction after log.cleaner.backoff.ms=100", compacted)
    latest = {}
    for m in _records_up_to_end(b, topic):
        latest[m.key()] = m.value()
    assert latest == {f"k{i % 10}".encode(): f"v{i}".encode() + b"." * 40 for i in range(290, 300)}

    r = CResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("log.cleaner.backoff.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    cadmin.incremental_alter_configs([r])[r].result(timeout=30)
    wait_for("dynamic log.cleaner.backoff.ms removed",
             lambda: describe_broker(cadmin, "1")["log.cleaner.backoff.ms"].value == "3600000")
