"""KIP-848 server-side regex subscriptions under ACLs, with librdkafka (confluent-kafka 2.16,
`group.protocol=consumer`, which sends the pattern as ConsumerGroupHeartbeat's
SubscribedTopicRegex) against a real `moldau server` with Kafka's StandardAuthorizer on a
SASL_PLAINTEXT listener.

As Kafka 4.4 (`TopicRegexResolver.filterTopicDescribeAuthorizedTopics`): a group's regexes
resolve only to the topics the principal of the resolving heartbeat may DESCRIBE, and the member
is told nothing (no error): it is simply not assigned the others. Moldau applies an ACL change
at the next heartbeat (Kafka at its next regex refresh, `group.consumer.regex.refresh.interval.ms`).

`scenario` takes only a bootstrap address, so the same steps can be run against Kafka itself
(scripts/reference/kafka start DIR --listener SASL_PLAINTEXT ...).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from test_acls import JAAS, PASSWORDS, STANDARD_AUTHORIZER, rd
from test_consumer_protocol import Kip848Member
from test_groups import all_parts, assert_no_errors, uniq, wait_until

SETTINGS = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": STANDARD_AUTHORIZER,
    "super.users": "User:admin",
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.session.timeout.ms": 6000,
    "group.consumer.min.heartbeat.interval.ms": 50,
    "group.consumer.heartbeat.interval.ms": 250,
}
WAIT_S = 30.0
assert set(PASSWORDS) >= {"admin", "alice"}


@pytest.fixture(scope="module")
def regex_acl_broker(request, moldau_bin, tmp_path_factory):
    from conftest import BrokerPool, _report_pool
    pool = BrokerPool(moldau_bin, tmp_path_factory.mktemp("moldau-regex-acl"))
    yield pool.start("regex-acl", **SETTINGS)
    _report_pool(request, pool)


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000, **rd("admin")})


def _grant(user: str, rtype: ResourceType, name: str, op: AclOperation) -> AclBinding:
    return AclBinding(rtype, name, ResourcePatternType.LITERAL, f"User:{user}", "*", op,
                      AclPermissionType.ALLOW)


def scenario(bootstrap: str, acl_change_s: float = WAIT_S) -> None:
    """alice's regex matches two topics; she may DESCRIBE (READ) one. She is assigned that one
    only and sees no error; a grant on the other adds it, taking the grant back removes it
    (each within `acl_change_s`)."""
    admin = _admin(bootstrap)
    prefix = uniq("rxacl")
    group = f"{prefix}-g"
    seen, hidden = f"{prefix}-seen", f"{prefix}-hidden"
    for fut in admin.create_topics([NewTopic(seen, 2, 1), NewTopic(hidden, 1, 1)]).values():
        fut.result(timeout=20)
    # READ implies DESCRIBE (Kafka's implied operations); nothing on `hidden`.
    for fut in admin.create_acls([_grant("alice", ResourceType.GROUP, group, AclOperation.READ),
                                  _grant("alice", ResourceType.TOPIC, seen, AclOperation.READ)]).values():
        fut.result(timeout=20)

    m = Kip848Member(bootstrap, group, [f"^{prefix}-.*"], name="alice-rx", **rd("alice"))
    m.start()
    try:
        wait_until(lambda: m.snapshot() == all_parts(seen, 2), WAIT_S, "only the describable topic")
        # Stays so: several heartbeats later `hidden` is still not assigned.
        time.sleep(1.5)
        assert m.snapshot() == all_parts(seen, 2)
        # librdkafka leaves out of its assignment what it cannot find in Metadata, so the
        # broker's view of the assignment is what tells.
        described = admin.describe_consumer_groups([group])[group].result(timeout=20)
        assigned = [sorted((tp.topic, tp.partition) for tp in mm.assignment.topic_partitions)
                    for mm in described.members]
        assert assigned == [sorted(all_parts(seen, 2))], assigned

        grant = _grant("alice", ResourceType.TOPIC, hidden, AclOperation.READ)
        for fut in admin.create_acls([grant]).values():
            fut.result(timeout=20)
        wait_until(lambda: m.snapshot() == all_parts(seen, 2) | all_parts(hidden, 1), acl_change_s,
                   "the topic alice was granted")
        # The member was never told about the topic it could not see.
        assert_no_errors([m])

        for fut in admin.delete_acls([AclBindingFilter(
                ResourceType.TOPIC, hidden, ResourcePatternType.LITERAL, "User:alice", "*",
                AclOperation.READ, AclPermissionType.ALLOW)]).values():
            assert len(fut.result(timeout=20)) == 1
        wait_until(lambda: m.snapshot() == all_parts(seen, 2), acl_change_s,
                   "the topic alice may no longer see is taken away")
        # Until the assignment follows, the client may still fetch or list offsets of the
        # revoked topic and be refused: that, and nothing else, may surface.
        assert all("TOPIC_AUTHORIZATION_FAILED" in e for e in m.errors), m.errors
    finally:
        m.stop()


def test_regex_resolves_only_to_topics_the_principal_may_describe(regex_acl_broker):
    scenario(regex_acl_broker.bootstrap)
