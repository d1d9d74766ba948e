"""The compatibility suite's checks of a connection creation rate of 0
(tests/compat/test_connection_limits.py) against Apache Kafka 4.4 itself: a static 0 throttles
every connection for one quota window, and a 0 set at runtime is refused while a listener would
take it, with the same answers from Kafka and from Moldau; and over the broker-wide
`max.connections`, which the protected inter-broker listener passes, the least recently active
connection of the other listener is closed."""

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


@pytest.fixture(scope="module")
def kafka_two_listeners(kit_libs, tmp_path_factory):
    """A Kafka node with a CLIENT listener beside the inter-broker PLAINTEXT one (which is then
    protected) and max.connections=3. One network thread: Kafka closes the least recently used
    channel of each network thread (processor) of the other listeners that finds the broker over
    the limit, so with several the one closed is the least recently used of one of them."""
    node = KafkaNode(tmp_path_factory.mktemp("kafka-two-listeners"))
    node.start("--listener", "CLIENT:PLAINTEXT", "--set", "max.connections=3",
               "--set", "num.network.threads=1")
    yield node
    node.stop()


def test_over_max_connections_the_least_recently_active_closes_on_kafka(kafka_two_listeners):
    internal_host, internal_port = kafka_two_listeners.bootstrap.split(",")[0].rsplit(":", 1)
    client = (kafka_two_listeners.dir / "listener-client").read_text().strip().split(",")[0]
    host, port = client.rsplit(":", 1)
    compat_limits.check_over_max_connections_the_least_recently_active_closes(
        (host, int(port)), (internal_host, int(internal_port)), 3)
