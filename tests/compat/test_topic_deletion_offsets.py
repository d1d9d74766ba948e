"""Deleting a topic drops the groups' committed offsets for it (Kafka's behaviour), and a
topic recreated under the same name starts with none; checked with confluent-kafka and
kafka-python admin clients."""

from __future__ import annotations

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KTopicPartition


def _committed(admin: AdminClient, group: str):
    r = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=15)
    return sorted((tp.topic, tp.partition, tp.offset) for tp in r.topic_partitions)


def test_delete_topic_drops_committed_offsets(broker, topic):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=15)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "deletion-g", "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 7)], asynchronous=False)
    finally:
        c.close()
    assert _committed(admin, "deletion-g") == [(topic, 0, 5), (topic, 1, 7)]

    kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        kadmin.delete_topics([topic], timeout_ms=15000)
        assert kadmin.list_group_offsets("deletion-g") == {"deletion-g": {}}
    finally:
        kadmin.close()
    assert _committed(admin, "deletion-g") == []

    # Recreated under the same name: no stale offsets come back; new commits work.
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=15)
    kc = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="deletion-g", enable_auto_commit=False)
    try:
        kc.commit({KTopicPartition(topic, 0): OffsetAndMetadata(0, "", -1)})
    finally:
        kc.close()
    assert _committed(admin, "deletion-g") == [(topic, 0, 0)]
