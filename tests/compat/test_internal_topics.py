"""Internal topics belong to the broker, and a broker hosts at most `max.broker.partitions`
partitions (issue 8, items 6 and 9).

Clients (confluent-kafka and kafka-python admin) cannot create `__consumer_offsets`, change its
configs or its partition count, or delete it: CreateTopics answers INVALID_REQUEST (Kafka's
answer for its own prohibited internal topic) before the broker created it, TOPIC_ALREADY_EXISTS
(Kafka's answer) once it exists, config and partition changes POLICY_VIOLATION,
DeleteTopics INVALID_TOPIC_EXCEPTION. Committed offsets of many groups survive the attempts and a
restart. CreateTopics/CreatePartitions past the cap get POLICY_VIOLATION, a million partitions
included, without the broker allocating anything for them."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                   NewTopic, ResourceType)
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KConfigResource, ConfigResourceType, NewTopic as KNewTopic
from kafka.errors import InvalidRequestError, PolicyViolationError, TopicAlreadyExistsError

import clients

OFFSETS = "__consumer_offsets"
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
TOPIC_ALREADY_EXISTS = 36


def _code(fut) -> int:
    with pytest.raises(KafkaException) as e:
        fut.result(timeout=20)
    return e.value.args[0].code()


def _commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def _committed(bootstrap: str, group: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=20)[0].offset
    finally:
        c.close()


def test_clients_cannot_create_or_change_internal_topics(brokers, topic):
    broker = brokers.start()
    admin = clients.confluent_admin(broker.bootstrap)
    # Creating it before the broker does (the attack of issue 8) and after.
    for validate_only in (False, True):
        bad = NewTopic(OFFSETS, num_partitions=1, replication_factor=1,
                       config={"cleanup.policy": "delete", "retention.ms": "2000"})
        assert _code(admin.create_topics([bad], validate_only=validate_only)[OFFSETS]) == INVALID_REQUEST
    kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        with pytest.raises(InvalidRequestError):
            kadmin.create_topics([KNewTopic(OFFSETS, 1, 1)])

        groups = [f"g-{i}" for i in range(12)]
        clients.confluent_produce(broker.bootstrap, topic, [{"value": b"x"}] * 3)
        for i, g in enumerate(groups):
            _commit(broker.bootstrap, g, topic, i + 1)
        assert len(admin.list_topics(timeout=10).topics[OFFSETS].partitions) == 50
        # Once it exists a creation is answered as for any existing topic (Kafka's answer).
        for validate_only in (False, True):
            exists = admin.create_topics([NewTopic(OFFSETS, 1, 1)], validate_only=validate_only)
            assert _code(exists[OFFSETS]) == TOPIC_ALREADY_EXISTS
        with pytest.raises(TopicAlreadyExistsError):
            kadmin.create_topics([KNewTopic(OFFSETS, 1, 1)])

        res = ConfigResource(ResourceType.TOPIC, OFFSETS, set_config={"cleanup.policy": "delete"})
        assert _code(admin.alter_configs([res])[res]) == POLICY_VIOLATION
        inc = ConfigResource(ResourceType.TOPIC, OFFSETS, incremental_configs=[
            ConfigEntry("retention.ms", "2000", incremental_operation=AlterConfigOpType.SET)])
        assert _code(admin.incremental_alter_configs([inc])[inc]) == POLICY_VIOLATION
        assert _code(admin.create_partitions([NewPartitions(OFFSETS, 60)])[OFFSETS]) == POLICY_VIOLATION
        assert _code(admin.delete_topics([OFFSETS])[OFFSETS]) == INVALID_TOPIC_EXCEPTION
        for incremental in (False, True):
            result = kadmin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, OFFSETS,
                                                           configs={"cleanup.policy": "delete"})],
                                          incremental=incremental)
            outcome = list(list(result.values())[0].values())[0]
            assert "[Error 44] PolicyViolationError" in str(outcome), (incremental, result)
    finally:
        kadmin.close()

    desc = admin.describe_configs([ConfigResource(ResourceType.TOPIC, OFFSETS)])
    configs = list(desc.values())[0].result(timeout=20)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == "604800000"
    broker.restart()
    for i, g in enumerate(groups):
        assert _committed(broker.bootstrap, g, topic) == i + 1, g


def test_partition_cap(brokers, topic):
    broker = brokers.start(**{"max.broker.partitions": 20, "offsets.topic.num.partitions": 3,
                              "num.partitions": 4})
    admin = clients.confluent_admin(broker.bootstrap)
    # librdkafka refuses more than 100,000 partitions itself; kafka-python sends anything.
    huge = NewTopic(f"{topic}-huge", num_partitions=100_000, replication_factor=1)
    assert _code(admin.create_topics([huge])[huge.topic]) == POLICY_VIOLATION
    assert _code(admin.create_topics([huge], validate_only=True)[huge.topic]) == POLICY_VIOLATION
    kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        with pytest.raises(PolicyViolationError):
            kadmin.create_topics([KNewTopic(f"{topic}-huge", 1_000_000, 1)])
    finally:
        kadmin.close()
    assert admin.create_topics([NewTopic(topic, num_partitions=10, replication_factor=1)])[topic].result(timeout=20) is None
    assert _code(admin.create_partitions([NewPartitions(topic, 21)])[topic]) == POLICY_VIOLATION
    admin.create_partitions([NewPartitions(topic, 13)])[topic].result(timeout=20)
    # The group coordinator's own topic (3 partitions) counts: 16 hosted now.
    _commit(broker.bootstrap, "cap-group", topic, 1)
    # Auto-creation (num.partitions=4) is no back door: 16 + 4 fits, one more does not.
    clients.confluent_produce(broker.bootstrap, f"{topic}-auto", [{"value": b"x"}])
    one = NewTopic(f"{topic}-one", num_partitions=1, replication_factor=1)
    assert _code(admin.create_topics([one])[one.topic]) == POLICY_VIOLATION
    kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        with pytest.raises(PolicyViolationError):
            kadmin.create_topics([KNewTopic(f"{topic}-k", 1, 1)])
    finally:
        kadmin.close()
    broker.restart()
    topics = clients.confluent_admin(broker.bootstrap).list_topics(timeout=10).topics
    assert len(topics[topic].partitions) == 13
    assert len(topics[f"{topic}-auto"].partitions) == 4
    assert f"{topic}-huge" not in topics
