"""The compatibility suite's controller mutation quota checks (KIP-599,
tests/compat/test_quotas.py) against Apache Kafka 4.4 itself: the same assertions, with the
same clients (kafka-python's strict request versions, librdkafka's older permissive ones, and
raw Metadata requests that auto-create topics), hold for Kafka and for Moldau."""

from __future__ import annotations

import pytest

import test_quotas as compat_quotas
from conftest import KafkaNode


@pytest.fixture(scope="module")
def kafka_mutation_quota(kit_libs, tmp_path_factory):
    """A Kafka node whose controller mutation token buckets hold 3 seconds of quota and whose
    auto-created topics have 10 partitions, as the compat tests' Moldau brokers."""
    node = KafkaNode(tmp_path_factory.mktemp("kafka-mutation-quota"))
    node.start("--set", "controller.quota.window.num=3", "--set", "num.partitions=10")
    yield node
    node.stop()


def test_strict_controller_mutation_quota_on_kafka(kafka_mutation_quota):
    compat_quotas.check_strict_mutation_quota(kafka_mutation_quota.bootstrap, "strict-")


def test_permissive_controller_mutation_quota_on_kafka(kafka_mutation_quota):
    compat_quotas.check_permissive_mutation_quota(kafka_mutation_quota.bootstrap, "permissive-")


def test_auto_created_topics_and_the_mutation_quota_on_kafka(kafka_mutation_quota):
    compat_quotas.check_auto_creation_counts_against_the_mutation_quota(kafka_mutation_quota.bootstrap, "auto-")
