"""Answers Moldau must give exactly as Apache Kafka 4.x does (issue 16), each checked with at
least two clients (confluent-kafka/librdkafka and kafka-python); the differential harness
(crates/conformance) checks the same answers field by field against a real Kafka:

- OffsetCommit / AlterConsumerGroupOffsets to a topic (or partition) that does not exist:
  UNKNOWN_TOPIC_OR_PARTITION for each such partition, and nothing is stored.
- Authorized operations with no authorizer: every operation the resource supports (8 for a
  topic, 7 for the cluster, 5 for a group).
- Group configs (config resource type GROUP): described with Kafka's defaults and sources,
  altered incrementally and validated against the broker's bounds.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (ConsumerGroupTopicPartitions, KafkaException, TopicCollection,
                             TopicPartition)
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewTopic, ResourceType)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KConfigResource, ConfigResourceType
from kafka.errors import UnknownTopicOrPartitionError
from kafka.structs import OffsetAndMetadata, TopicPartition as KTopicPartition

import clients

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_CONFIG = 40

TOPIC_OPS = {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS",
             "ALTER_CONFIGS"}
CLUSTER_OPS = {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
               "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"}
GROUP_OPS = {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def cadmin(broker):
    return clients.confluent_admin(broker.bootstrap)


@pytest.fixture
def kadmin(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    yield admin
    admin.close()


def _create(cadmin, topic: str, partitions: int = 1) -> None:
    cadmin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=20)
    # Kafka applies a created topic asynchronously; wait until it is served (the tests also
    # run against Apache Kafka).
    deadline = time.monotonic() + 30
    while True:
        t = cadmin.list_topics(topic, timeout=10).topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()):
            return
        assert time.monotonic() < deadline, f"topic {topic} not served: {t}"
        time.sleep(0.1)


def _ops(ops) -> set[str]:
    return {str(o).rsplit(".", 1)[-1] for o in ops or []}


# ------------------------------------------------------- offsets of topics that do not exist

def test_confluent_commit_to_unknown_topic_fails_per_partition(broker, cadmin):
    group, missing = _name("g"), _name("nosuch")
    consumer = clients.confluent_consumer(broker.bootstrap, **{"group.id": group})
    try:
        with pytest.raises(KafkaException) as exc:
            consumer.commit(offsets=[TopicPartition(missing, 0, 5)], asynchronous=False)
        assert exc.value.args[0].code() == UNKNOWN_TOPIC_OR_PARTITION
    finally:
        consumer.close()
    # The admin API (AlterConsumerGroupOffsets) reports the error on the partition.
    res = cadmin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(missing, 0, 5)])])[group]
    parts = res.result(timeout=20).topic_partitions
    assert [(p.topic, p.error.code()) for p in parts] == [(missing, UNKNOWN_TOPIC_OR_PARTITION)]
    # Nothing was stored.
    listed = cadmin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(missing, 0)])])[group]
    assert [p.offset for p in listed.result(timeout=20).topic_partitions] == [-1001]


def test_kafka_python_commit_mixing_known_and_unknown_partitions(cadmin, kadmin):
    group, topic, missing = _name("g"), _name("t"), _name("nosuch")
    _create(cadmin, topic, partitions=2)
    result = kadmin.alter_group_offsets(group, {
        KTopicPartition(topic, 0): OffsetAndMetadata(7, "", -1),
        KTopicPartition(topic, 2): OffsetAndMetadata(8, "", -1),  # past the partition count
        KTopicPartition(missing, 0): OffsetAndMetadata(9, "", -1),
    })
    errors = {(tp.topic, tp.partition): err for tp, err in result.items()}
    assert errors[(missing, 0)] is UnknownTopicOrPartitionError
    assert errors[(topic, 2)] is UnknownTopicOrPartitionError
    assert errors[(topic, 0)] in (None, 0) or getattr(errors[(topic, 0)], "errno", 0) == 0
    offsets = kadmin.list_group_offsets({group: None})[group]
    assert {(tp.topic, tp.partition): o.offset for tp, o in offsets.items()} == {(topic, 0): 7}


# ------------------------------------------------------------ authorized operations

def test_confluent_authorized_operations(broker, cadmin):
    topic, group = _name("t"), _name("g")
    _create(cadmin, topic)
    desc = cadmin.describe_topics(TopicCollection([topic]),
                                  include_authorized_operations=True)[topic].result(timeout=20)
    assert _ops(desc.authorized_operations) == TOPIC_OPS
    cluster = cadmin.describe_cluster(include_authorized_operations=True).result(timeout=20)
    assert _ops(cluster.authorized_operations) == CLUSTER_OPS
    cadmin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 1)])])[group].result(timeout=20)
    g = cadmin.describe_consumer_groups([group],
                                        include_authorized_operations=True)[group].result(timeout=20)
    assert _ops(g.authorized_operations) == GROUP_OPS


def test_kafka_python_authorized_operations(cadmin, kadmin):
    topic, group = _name("t"), _name("g")
    _create(cadmin, topic)
    [desc] = kadmin.describe_topics([topic])
    assert set(desc["authorized_operations"]) == TOPIC_OPS
    assert set(kadmin.describe_cluster()["authorized_operations"]) == CLUSTER_OPS
    kadmin.alter_group_offsets(group, {KTopicPartition(topic, 0): OffsetAndMetadata(1, "", -1)})
    described = kadmin.describe_groups([group], include_authorized_operations=True)[group]
    assert described["group_state"] == "Empty"
    assert set(described["authorized_operations"]) == GROUP_OPS


# ----------------------------------------------------------------------- group configs

def test_confluent_group_configs(cadmin):
    group = _name("g")
    res = ConfigResource(ResourceType.GROUP, group)
    configs = cadmin.describe_configs([res])[res].result(timeout=20)
    assert configs["consumer.session.timeout.ms"].value == "45000"
    assert ConfigSource(configs["consumer.session.timeout.ms"].source) == ConfigSource.DEFAULT_CONFIG
    assert configs["consumer.heartbeat.interval.ms"].value == "5000"
    assert configs["share.auto.offset.reset"].value == "latest"
    assert len(configs) == 21
    change = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "50000",
                    incremental_operation=AlterConfigOpType.SET)])
    assert cadmin.incremental_alter_configs([change])[change].result(timeout=20) is None
    configs = cadmin.describe_configs([res])[res].result(timeout=20)
    entry = configs["consumer.session.timeout.ms"]
    assert entry.value == "50000"
    assert ConfigSource(entry.source) == ConfigSource.GROUP_CONFIG
    # Outside group.consumer.{min,max}.session.timeout.ms: INVALID_CONFIG, nothing changes.
    bad = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "1",
                    incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as exc:
        cadmin.incremental_alter_configs([bad])[bad].result(timeout=20)
    assert exc.value.args[0].code() == INVALID_CONFIG
    assert cadmin.describe_configs([res])[res].result(timeout=20)[
        "consumer.session.timeout.ms"].value == "50000"


def test_kafka_python_group_configs_survive_restart(broker, kadmin):
    group = _name("g")
    res = KConfigResource(ConfigResourceType.GROUP, group)
    described = kadmin.describe_configs([res], config_filter="all")["group"][group]
    assert described["consumer.heartbeat.interval.ms"]["value"] == "5000"
    assert described["consumer.heartbeat.interval.ms"]["config_source"] == "DEFAULT_CONFIG"
    change = KConfigResource(ConfigResourceType.GROUP, group,
                             {"consumer.heartbeat.interval.ms": "6000"})
    assert kadmin.alter_configs([change], incremental=True)["group"][group] == "OK"
    unknown = KConfigResource(ConfigResourceType.GROUP, group, {"no.such.config": "1"})
    assert "InvalidConfigurationError" in str(
        kadmin.alter_configs([unknown], incremental=True, raise_on_unknown=False)["group"][group])
    kadmin.close()
    broker.restart()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        described = admin.describe_configs([res])["group"][group]
        assert described == {"consumer.heartbeat.interval.ms": {
            **described["consumer.heartbeat.interval.ms"],
            "value": "6000", "config_source": "DYNAMIC_GROUP_CONFIG"}}
    finally:
        admin.close()


# --- Found by the admin edge-case scenarios (crates/conformance/scenarios/admin_edges.json) ---

POLICY_VIOLATION = 44
INVALID_REQUEST = 42


def test_confluent_delete_records_on_compacted_topic_is_a_policy_violation(cadmin, broker):
    """Kafka keeps a compact-only topic's records by key: DeleteRecords answers
    POLICY_VIOLATION and the log start stays where it was (compact,delete topics may)."""
    compact, both = _name("dr-compact"), _name("dr-both")
    for t, policy in ((compact, "compact"), (both, "compact,delete")):
        cadmin.create_topics([NewTopic(t, 1, 1, config={"cleanup.policy": policy})])[t].result(
            timeout=20)
        clients.confluent_produce(broker.bootstrap, t, [{"key": b"k%d" % i, "value": b"v"}
                                                        for i in range(4)])
    tp = TopicPartition(compact, 0, 2)
    with pytest.raises(KafkaException) as e:
        cadmin.delete_records([tp], request_timeout=15)[tp].result(timeout=20)
    assert e.value.args[0].code() == POLICY_VIOLATION
    assert clients.confluent_watermarks(broker.bootstrap, compact) == (0, 4)
    tp = TopicPartition(both, 0, 2)
    assert cadmin.delete_records([tp], request_timeout=15)[tp].result(timeout=20).low_watermark == 2


def test_confluent_max_timestamp_and_timestamp_lookup_after_delete_records(cadmin, broker):
    """ListOffsets by timestamp after DeleteRecords moved the log start into a batch: the
    first record at or after the timestamp that is still in the log (Moldau answered a deleted
    offset whose timestamp was too early). MAX_TIMESTAMP answers as Kafka 4.4: the first record
    with the largest timestamp of the segments on disk."""
    from confluent_kafka.admin import OffsetSpec
    topic = _name("lo-ts")
    _create(cadmin, topic)
    p = clients.confluent_producer(broker.bootstrap, **{"linger.ms": 1000})
    for i, ts in enumerate((1000, 7000, 3000, 7000, 2000)):
        p.produce(topic, value=b"v%d" % i, partition=0, timestamp=ts)
        if i == 2:
            p.flush(15)  # two batches: offsets 0-2 and 3-4
    p.flush(15)
    tp = TopicPartition(topic, 0, 2)
    assert cadmin.delete_records([tp], request_timeout=15)[tp].result(timeout=20).low_watermark == 2

    def lookup(spec):
        tp = TopicPartition(topic, 0)
        return cadmin.list_offsets({tp: spec}, request_timeout=15)[tp].result(timeout=20)

    got = lookup(OffsetSpec.for_timestamp(7000))
    assert (got.offset, got.timestamp) == (3, 7000)
    got = lookup(OffsetSpec.max_timestamp())
    assert (got.offset, got.timestamp) == (1, 7000)


def test_confluent_broker_log_retention_ms_has_no_value_of_its_own(cadmin):
    """log.retention.ms takes its default from log.retention.hours: Kafka describes it with
    no value (and no default synonym) unless it is set."""
    r = ConfigResource(ResourceType.BROKER, "1")
    configs = cadmin.describe_configs([r])[r].result(timeout=20)
    assert configs["log.retention.ms"].value is None
    assert configs["log.segment.bytes"].value == "1073741824"


def test_broker_time_keys_in_other_units(brokers):
    """log.retention.hours/minutes, log.roll.hours and log.roll.jitter.hours set statically:
    they set the topic defaults (minutes beat hours, a .ms key beats both) and are described
    as Kafka 4.4 describes them (values, sources and synonyms checked against a Kafka started
    with the same settings)."""
    server = brokers.start("units", **{"log.retention.hours": 24, "log.retention.minutes": 90,
                                       "log.roll.hours": 2, "log.roll.jitter.hours": 1})
    admin = clients.confluent_admin(server.bootstrap)
    topic = _name("units")
    _create(admin, topic)
    t = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([t])[t].result(timeout=20)
    got = {k: (configs[k].value, configs[k].source) for k in ("retention.ms", "segment.ms", "segment.jitter.ms")}
    default = ConfigSource.DEFAULT_CONFIG.value
    assert got == {"retention.ms": ("5400000", default), "segment.ms": ("7200000", default),
                   "segment.jitter.ms": ("3600000", default)}
    kadmin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=15000)
    try:
        b = kadmin.describe_configs([KConfigResource(ConfigResourceType.BROKER, "1")], include_synonyms=True,
                                    config_filter="all")["broker"]["1"]
    finally:
        kadmin.close()

    def syn(*entries):
        return [{"name": n, "value": v, "source": s} for n, v, s in entries]
    static, dflt = "STATIC_BROKER_CONFIG", "DEFAULT_CONFIG"
    want = {
        "log.retention.hours": ("24", static, True, syn(("log.retention.hours", "24", static),
                                                        ("log.retention.hours", "168", dflt))),
        "log.retention.minutes": ("90", static, True, syn(("log.retention.minutes", "90", static),
                                                          ("log.retention.hours", "24", static),
                                                          ("log.retention.hours", "168", dflt))),
        "log.retention.ms": (None, dflt, False, []),
        "log.roll.hours": ("2", static, True, syn(("log.roll.hours", "2", static), ("log.roll.hours", "168", dflt))),
        "log.roll.jitter.hours": ("1", static, True, syn(("log.roll.jitter.hours", "1", static),
                                                         ("log.roll.jitter.hours", "0", dflt))),
        "log.roll.ms": (None, dflt, False, []),
    }
    assert {k: (b[k]["value"], b[k]["config_source"], b[k]["read_only"], b[k]["synonyms"]) for k in want} == want
