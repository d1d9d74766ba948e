"""The compatibility suite's checks of a connection creation rate of 0
(tests/compat/test_connection_limits.py) against Apache Kafka 4.4 itself: a static 0 throttles
every connection for one quota window, and a 0 set at runtime is refused while a listener would
take it, with the same answers from Kafka and from Moldau."""

from __future__ import annotations

import pytest

import test_connection_limits as compat_limits
from conftest import KafkaNode


@pytest.fixture(scope="module")
def kafka_zero_rate(kit_libs, tmp_path_factory):
    """A Kafka node started with max.connection.creation.rate=0."""
    node = KafkaNode(tmp_path_factory.mktemp("kafka-zero-rate"))
    node.start("--set", "max.connection.creation.rate=0")
    yield node
    node.stop()


def test_a_static_zero_creation_rate_on_kafka(kafka_zero_rate):
    host, port = kafka_zero_rate.bootstrap.split(",")[0].rsplit(":", 1)
    compat_limits.check_a_static_zero_creation_rate((host, int(port)), "1")
