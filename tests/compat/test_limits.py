"""Size limits: a record larger than the topic's max.message.bytes (or the broker's
message.max.bytes) is refused with MESSAGE_TOO_LARGE (10) and nothing is appended."""

from __future__ import annotations

import random

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import NewTopic

import clients

MESSAGE_TOO_LARGE = 10


def _random(n: int) -> bytes:
    return random.Random(n).randbytes(n)  # incompressible and deterministic


@pytest.fixture
def small_topic(broker, topic):
    admin = clients.confluent_admin(broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "2048"})],
                        request_timeout=15)[topic].result(timeout=20)
    return topic


def test_confluent_message_too_large(broker, small_topic):
    p = clients.confluent_producer(broker.bootstrap, retries=0)
    errors = []
    p.produce(small_topic, key=b"k", value=_random(8000), partition=0, on_delivery=lambda e, m: errors.append(e))
    assert p.flush(20) == 0
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE == MESSAGE_TOO_LARGE
    # a small record still goes through and lands at offset 0
    delivered = clients.confluent_produce(broker.bootstrap, small_topic, [{"key": b"k", "value": b"small"}])
    assert delivered[0].offset() == 0
    assert clients.confluent_watermarks(broker.bootstrap, small_topic) == (0, 1)


def test_kafka_python_message_too_large(broker, small_topic):
    from kafka.errors import MessageSizeTooLargeError
    with pytest.raises(MessageSizeTooLargeError):
        clients.kp_produce(broker.bootstrap, small_topic, [{"key": b"k", "value": _random(8000)}], retries=0)
    assert clients.confluent_watermarks(broker.bootstrap, small_topic) == (0, 0)


def test_aiokafka_message_too_large(broker, small_topic):
    from aiokafka.errors import MessageSizeTooLargeError
    with pytest.raises(MessageSizeTooLargeError):
        clients.aio_produce(broker.bootstrap, small_topic, [{"key": b"k", "value": _random(8000)}])
    assert clients.confluent_watermarks(broker.bootstrap, small_topic) == (0, 0)


def test_broker_message_max_bytes(brokers, topic):
    """--set message.max.bytes applies to auto-created topics."""
    server = brokers.start(**{"message.max.bytes": "4096"})
    p = clients.confluent_producer(server.bootstrap, retries=0)
    errors = []
    p.produce(topic, value=_random(10_000), partition=0, on_delivery=lambda e, m: errors.append(e))
    assert p.flush(20) == 0
    assert errors[0] is not None and errors[0].code() == MESSAGE_TOO_LARGE
    from kafka.errors import MessageSizeTooLargeError
    with pytest.raises(MessageSizeTooLargeError):
        clients.kp_produce(server.bootstrap, topic, [{"value": _random(10_000)}], retries=0)
    delivered = clients.confluent_produce(server.bootstrap, topic, [{"value": b"fits"}])
    assert delivered[0].offset() == 0
