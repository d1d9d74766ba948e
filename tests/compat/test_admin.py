"""Topic administration through three admin clients (confluent-kafka AdminClient, kafka-python
KafkaAdminClient, aiokafka AIOKafkaAdminClient; kafkajs admin lives in node/): create (with
configs, validate_only, errors), describe configs (values and sources), AlterConfigs (replaces
the whole set), IncrementalAlterConfigs (SET/DELETE), CreatePartitions, delete and recreate."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewPartitions, NewTopic, ResourceType)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KConfigResource, ConfigResourceType, AlterConfigOp

import clients

TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17

DEFAULTS = {  # Kafka's topic config defaults (broker started without overrides)
    "cleanup.policy": "delete",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "segment.bytes": "1073741824",
    "max.message.bytes": "1048588",
    "min.insync.replicas": "1",
    "message.timestamp.type": "CreateTime",
}


def _src(entry) -> ConfigSource:
    s = entry.source
    return s if isinstance(s, ConfigSource) else ConfigSource(s)


def _wait(fut, timeout=20):
    return fut.result(timeout=timeout)


def _error_code(exc_info) -> int:
    err = exc_info.value.args[0]
    assert isinstance(err, KafkaError), err
    return err.code()


def topic_names(admin) -> set[str]:
    # Asking for all topics never auto-creates one (asking for a named topic may).
    return set(admin.list_topics(timeout=10).topics)


def describe(admin, topic) -> dict:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return _wait(admin.describe_configs([res], request_timeout=15)[res])


@pytest.fixture
def cadmin(broker):
    return clients.confluent_admin(broker.bootstrap)


@pytest.fixture
def kadmin(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    yield admin
    admin.close()


# ------------------------------------------------------------------------ confluent-kafka

def test_confluent_create_with_configs_and_describe(cadmin, topic):
    new = NewTopic(topic, num_partitions=3, replication_factor=1,
                   config={"retention.ms": "3600000", "cleanup.policy": "compact"})
    assert _wait(cadmin.create_topics([new], request_timeout=15)[topic]) is None
    assert sorted(cadmin.list_topics(timeout=10).topics[topic].partitions) == [0, 1, 2]

    cfg = describe(cadmin, topic)
    assert (cfg["retention.ms"].value, _src(cfg["retention.ms"])) == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert (cfg["cleanup.policy"].value, _src(cfg["cleanup.policy"])) == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert cfg["retention.ms"].is_default is False
    for name, value in DEFAULTS.items():
        if name in ("retention.ms", "cleanup.policy"):
            continue
        assert name in cfg, f"DescribeConfigs lacks {name}"
        assert (cfg[name].value, _src(cfg[name])) == (value, ConfigSource.DEFAULT_CONFIG), name
        assert cfg[name].is_default is True, name


def test_confluent_create_errors(cadmin, topic):
    _wait(cadmin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)], request_timeout=15)[topic])
    with pytest.raises(KafkaException) as e:
        _wait(cadmin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)], request_timeout=15)[topic])
    assert _error_code(e) == TOPIC_ALREADY_EXISTS

    bad = topic + "-zero"
    with pytest.raises(KafkaException) as e:
        _wait(cadmin.create_topics([NewTopic(bad, num_partitions=0, replication_factor=1)], request_timeout=15)[bad])
    assert _error_code(e) == INVALID_PARTITIONS

    bad_rf = topic + "-rf"
    with pytest.raises(KafkaException) as e:
        _wait(cadmin.create_topics([NewTopic(bad_rf, num_partitions=1, replication_factor=3)], request_timeout=15)[bad_rf])
    assert _error_code(e) == INVALID_REPLICATION_FACTOR

    bad_cfg = topic + "-cfg"
    with pytest.raises(KafkaException) as e:
        _wait(cadmin.create_topics([NewTopic(bad_cfg, num_partitions=1, replication_factor=1,
                                             config={"retention.ms": "not-a-number"})], request_timeout=15)[bad_cfg])
    assert _error_code(e) == INVALID_CONFIG

    bad_cfg_name = topic + "-cfgname"
    with pytest.raises(KafkaException) as e:
        _wait(cadmin.create_topics([NewTopic(bad_cfg_name, num_partitions=1, replication_factor=1,
                                             config={"no.such.config": "1"})], request_timeout=15)[bad_cfg_name])
    assert _error_code(e) == INVALID_CONFIG

    for bad_name in ("bad name!", "a" * 250, ".", ".."):
        with pytest.raises(KafkaException) as e:
            _wait(cadmin.create_topics([NewTopic(bad_name, num_partitions=1, replication_factor=1)],
                                       request_timeout=15)[bad_name])
        assert _error_code(e) == INVALID_TOPIC_EXCEPTION, bad_name

    assert not {bad, bad_rf, bad_cfg, bad_cfg_name} & topic_names(cadmin)


def test_confluent_validate_only(cadmin, topic):
    fs = cadmin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)],
                              validate_only=True, request_timeout=15)
    assert _wait(fs[topic]) is None
    assert topic not in topic_names(cadmin)
    # validate_only still reports errors
    with pytest.raises(KafkaException) as e:
        _wait(cadmin.create_topics([NewTopic(topic, num_partitions=0, replication_factor=1)],
                                   validate_only=True, request_timeout=15)[topic])
    assert _error_code(e) == INVALID_PARTITIONS


def test_confluent_alter_configs_replaces_all(cadmin, topic):
    _wait(cadmin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1,
                                         config={"cleanup.policy": "compact", "retention.ms": "1000000"})],
                               request_timeout=15)[topic])
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "2000000"})
    assert _wait(cadmin.alter_configs([res], request_timeout=15)[res]) is None
    cfg = describe(cadmin, topic)
    assert (cfg["retention.ms"].value, _src(cfg["retention.ms"])) == ("2000000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    # Non-incremental AlterConfigs resets every config it does not name to its default.
    assert (cfg["cleanup.policy"].value, _src(cfg["cleanup.policy"])) == ("delete", ConfigSource.DEFAULT_CONFIG)


def test_confluent_incremental_alter_configs(cadmin, topic):
    _wait(cadmin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1,
                                         config={"cleanup.policy": "compact", "retention.ms": "1000000"})],
                               request_timeout=15)[topic])
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "5000000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.message.bytes", "65536", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    assert _wait(cadmin.incremental_alter_configs([res], request_timeout=15)[res]) is None
    cfg = describe(cadmin, topic)
    assert (cfg["retention.ms"].value, _src(cfg["retention.ms"])) == ("5000000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert (cfg["max.message.bytes"].value, _src(cfg["max.message.bytes"])) == ("65536", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert (cfg["cleanup.policy"].value, _src(cfg["cleanup.policy"])) == ("delete", ConfigSource.DEFAULT_CONFIG)

    bad = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        _wait(cadmin.incremental_alter_configs([bad], request_timeout=15)[bad])
    assert _error_code(e) == INVALID_CONFIG
    assert describe(cadmin, topic)["retention.ms"].value == "5000000"


def test_confluent_create_partitions(cadmin, topic):
    _wait(cadmin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)], request_timeout=15)[topic])
    assert _wait(cadmin.create_partitions([NewPartitions(topic, 3)], validate_only=True, request_timeout=15)[topic]) is None
    assert sorted(cadmin.list_topics(timeout=10).topics[topic].partitions) == [0]
    assert _wait(cadmin.create_partitions([NewPartitions(topic, 3)], request_timeout=15)[topic]) is None
    md = cadmin.list_topics(timeout=10).topics[topic]
    assert sorted(md.partitions) == [0, 1, 2]
    assert all(p.leader == 1 for p in md.partitions.values())
    with pytest.raises(KafkaException) as e:  # shrinking is not allowed
        _wait(cadmin.create_partitions([NewPartitions(topic, 2)], request_timeout=15)[topic])
    assert _error_code(e) == INVALID_PARTITIONS
    with pytest.raises(KafkaException) as e:  # same count is not an increase either
        _wait(cadmin.create_partitions([NewPartitions(topic, 3)], request_timeout=15)[topic])
    assert _error_code(e) == INVALID_PARTITIONS
    # a new partition is usable right away
    clients.confluent_produce(cadmin_bootstrap(cadmin), topic, [{"key": b"k", "value": b"p2"}], partition=2)
    got = clients.confluent_consume(cadmin_bootstrap(cadmin), topic, 2, 1)
    assert (got[0].offset, got[0].value) == (0, b"p2")


def cadmin_bootstrap(admin) -> str:
    b = admin.list_topics(timeout=10).brokers[1]
    return f"{b.host}:{b.port}"


def test_confluent_delete_and_recreate(broker, cadmin, topic):
    _wait(cadmin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)], request_timeout=15)[topic])
    clients.confluent_produce(broker.bootstrap, topic, [{"key": b"k", "value": b"old"}] * 3, partition=1)
    old_id = _wait(cadmin.describe_topics(TopicCollection([topic]), request_timeout=15)[topic]).topic_id
    assert _wait(cadmin.delete_topics([topic], request_timeout=15)[topic]) is None
    assert topic not in topic_names(cadmin)
    with pytest.raises(KafkaException) as e:
        _wait(cadmin.delete_topics([topic], request_timeout=15)[topic])
    assert _error_code(e) == UNKNOWN_TOPIC_OR_PARTITION

    _wait(cadmin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)], request_timeout=15)[topic])
    assert sorted(cadmin.list_topics(timeout=10).topics[topic].partitions) == [0, 1, 2]
    new_id = _wait(cadmin.describe_topics(TopicCollection([topic]), request_timeout=15)[topic]).topic_id
    assert str(new_id) != str(old_id)
    # the recreated topic starts empty: no data from the deleted incarnation
    assert clients.confluent_watermarks(broker.bootstrap, topic, 1) == (0, 0)
    cfg = describe(cadmin, topic)
    assert _src(cfg["retention.ms"]) == ConfigSource.DEFAULT_CONFIG


def test_confluent_describe_broker_configs(cadmin):
    res = ConfigResource(ResourceType.BROKER, "1")
    cfg = _wait(cadmin.describe_configs([res], request_timeout=15)[res])
    assert cfg["num.partitions"].value == "1"
    assert cfg["message.max.bytes"].value == "1048588"
    assert cfg["auto.create.topics.enable"].value == "true"
    assert _src(cfg["num.partitions"]) == ConfigSource.DEFAULT_CONFIG


# ------------------------------------------------------------------------ kafka-python

def _kdescribe(kadmin, topic) -> dict:
    out = kadmin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    return out["topic"][topic]


def test_kafka_python_topic_lifecycle(kadmin, topic):
    res = kadmin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1,
                                        "configs": {"retention.ms": "7200000", "segment.bytes": "10485760"}}})
    assert [(t["name"], t["error_code"]) for t in res["topics"]] == [(topic, 0)]
    (t,) = kadmin.describe_topics([topic])
    assert sorted(p["partition_index"] for p in t["partitions"]) == [0, 1]

    cfg = _kdescribe(kadmin, topic)
    assert (cfg["retention.ms"]["value"], cfg["retention.ms"]["config_source"]) == ("7200000", "DYNAMIC_TOPIC_CONFIG")
    assert (cfg["segment.bytes"]["value"], cfg["segment.bytes"]["config_source"]) == ("10485760", "DYNAMIC_TOPIC_CONFIG")
    assert (cfg["cleanup.policy"]["value"], cfg["cleanup.policy"]["config_source"]) == ("delete", "DEFAULT_CONFIG")
    modified = kadmin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
    assert set(modified) == {"retention.ms", "segment.bytes"}

    # already exists / invalid partitions / validate_only, with exact error codes
    res = kadmin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}}, raise_errors=False)
    assert res["topics"][0]["error_code"] == TOPIC_ALREADY_EXISTS
    bad = topic + "-bad"
    res = kadmin.create_topics({bad: {"num_partitions": 0, "replication_factor": 1}}, raise_errors=False)
    assert res["topics"][0]["error_code"] == INVALID_PARTITIONS
    vo = topic + "-vo"
    res = kadmin.create_topics({vo: {"num_partitions": 4, "replication_factor": 1}}, validate_only=True)
    assert res["topics"][0]["error_code"] == 0
    names = set(kadmin.list_topics())
    assert topic in names and bad not in names and vo not in names

    # incremental alter (kafka-python picks IncrementalAlterConfigs when advertised)
    kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, topic,
                                          {"retention.ms": "60000", "segment.bytes": (AlterConfigOp.DELETE, None)})])
    cfg = _kdescribe(kadmin, topic)
    assert (cfg["retention.ms"]["value"], cfg["retention.ms"]["config_source"]) == ("60000", "DYNAMIC_TOPIC_CONFIG")
    assert (cfg["segment.bytes"]["value"], cfg["segment.bytes"]["config_source"]) == ("1073741824", "DEFAULT_CONFIG")

    # legacy AlterConfigs: kafka-python re-sends the other modified keys itself
    kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, topic, {"cleanup.policy": "compact"})],
                         incremental=False)
    cfg = _kdescribe(kadmin, topic)
    assert cfg["cleanup.policy"]["value"] == "compact"
    assert cfg["retention.ms"]["value"] == "60000"

    # partitions: grow to 5, shrinking fails with INVALID_PARTITIONS
    kadmin.create_partitions({topic: 5})
    (t,) = kadmin.describe_topics([topic])
    assert sorted(p["partition_index"] for p in t["partitions"]) == [0, 1, 2, 3, 4]
    resp = kadmin.create_partitions({topic: 1}, raise_errors=False)
    assert [r.error_code for r in resp.results] == [INVALID_PARTITIONS]

    # delete, unknown delete, recreate
    res = kadmin.delete_topics([topic])
    assert [(t["name"], t["error_code"]) for t in res["topics"]] == [(topic, 0)]
    assert topic not in set(kadmin.list_topics())
    res = kadmin.delete_topics([topic], raise_errors=False)
    assert res["topics"][0]["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    res = kadmin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    assert res["topics"][0]["error_code"] == 0
    cfg = _kdescribe(kadmin, topic)
    assert cfg["retention.ms"]["config_source"] == "DEFAULT_CONFIG"


def test_kafka_python_describe_log_dirs(broker, kadmin, topic):
    clients.kp_produce(broker.bootstrap, topic, [{"key": b"k", "value": b"x" * 1000}] * 5)
    (entry,) = kadmin.describe_log_dirs()
    assert entry["broker"] == 1
    (log_dir,) = entry["log_dirs"]
    assert log_dir["error_code"] == 0
    topics = {t["name"]: t for t in log_dir["topics"]}
    (part,) = topics[topic]["partitions"]
    assert part["partition_index"] == 0
    assert part["partition_size"] > 5000
    # DescribeLogDirs v4+ (KIP-827): the file store's total and usable bytes, as Kafka reports.
    assert log_dir["total_bytes"] > 0, log_dir
    assert 0 <= log_dir["usable_bytes"] <= log_dir["total_bytes"], log_dir


# ------------------------------------------------------------------------ aiokafka

def test_aiokafka_admin(broker, topic):
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic as ANewTopic, NewPartitions as ANewPartitions
    from aiokafka.admin.config_resource import ConfigResource as AConfigResource, ConfigResourceType as AType

    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
        await admin.start()
        try:
            await admin.create_topics([ANewTopic(topic, 2, 1, topic_configs={"retention.ms": "123000"})])
            assert topic in await admin.list_topics()
            resp = await admin.describe_configs([AConfigResource(AType.TOPIC, topic, {"retention.ms": None, "cleanup.policy": None})])
            entries = {e[0]: e[1] for r in resp for res in r.resources for e in res[4]}
            assert entries == {"retention.ms": "123000", "cleanup.policy": "delete"}
            await admin.alter_configs([AConfigResource(AType.TOPIC, topic, {"retention.ms": "456000"})])
            resp = await admin.describe_configs([AConfigResource(AType.TOPIC, topic, {"retention.ms": None})])
            assert [e[1] for r in resp for res in r.resources for e in res[4]] == ["456000"]
            await admin.create_partitions({topic: ANewPartitions(4)})
            desc = await admin.describe_topics([topic])
            assert sorted(p["partition"] for p in desc[0]["partitions"]) == [0, 1, 2, 3]
            await admin.delete_topics([topic])
            assert topic not in await admin.list_topics()
        finally:
            await admin.close()

    clients.run_async(run())


def test_confluent_create_many_topics_in_one_request(cadmin, topic):
    names = [f"{topic}-{i:02d}" for i in range(40)]
    fs = cadmin.create_topics([NewTopic(n, num_partitions=1 + i % 3, replication_factor=1) for i, n in enumerate(names)],
                              request_timeout=15)
    for f in fs.values():
        assert _wait(f) is None
    md = cadmin.list_topics(timeout=10)
    for i, n in enumerate(names):
        assert sorted(md.topics[n].partitions) == list(range(1 + i % 3)), n
    fs = cadmin.delete_topics(names, request_timeout=15)
    for f in fs.values():
        assert _wait(f) is None
    assert not set(names) & topic_names(cadmin)
