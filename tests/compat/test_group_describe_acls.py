"""ConsumerGroupDescribe (KIP-848) under ACLs, with librdkafka's admin client (confluent-kafka
2.16, `AdminClient.describe_consumer_groups`) against a real `moldau server` with Kafka's
StandardAuthorizer on a SASL_PLAINTEXT listener.

As Kafka 4.4 (`KafkaApis.handleConsumerGroupDescribe`): a caller who may DESCRIBE the group but
not every topic in a member's assignment or target assignment gets the group answered
TOPIC_AUTHORIZATION_FAILED, "The group has described topic(s) that the client is not authorized
to describe.", with no members; the other groups of the same request are described as usual.

`scenario` takes only a bootstrap address, so the same steps can be run against Kafka itself
(scripts/reference/kafka start DIR --listener SASL:SASL_PLAINTEXT ...).
"""

from __future__ import annotations

import sys

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclOperation, NewTopic, ResourceType

from test_acls import rd
from test_consumer_protocol import Kip848Member
from test_groups import all_parts, uniq, wait_until
from test_regex_acls import SETTINGS, WAIT_S, _admin, _grant

MESSAGE = "The group has described topic(s) that the client is not authorized to describe."


@pytest.fixture(scope="module")
def describe_acl_broker(request, moldau_bin, tmp_path_factory):
    from conftest import BrokerPool, _report_pool
    pool = BrokerPool(moldau_bin, tmp_path_factory.mktemp("moldau-describe-acl"))
    yield pool.start("describe-acl", **SETTINGS)
    _report_pool(request, pool)


def _describe_error(future) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=20)
    return raised.value.args[0]


def _assigned(description) -> set:
    return {(tp.topic, tp.partition) for m in description.members
            for tp in m.assignment.topic_partitions}


def scenario(bootstrap: str) -> None:
    """Two groups run by admin: `mixed` consumes `shown` and `hidden`, `plain` only `shown`.
    alice may DESCRIBE both groups and `shown` only: `plain` is described, `mixed` is refused
    with TOPIC_AUTHORIZATION_FAILED, a group she may not describe with GROUP_AUTHORIZATION_FAILED.
    Once she may DESCRIBE `hidden` too, `mixed` is described in full."""
    admin = _admin(bootstrap)
    prefix = uniq("cgdacl")
    shown, hidden = f"{prefix}-shown", f"{prefix}-hidden"
    mixed, plain, foreign = f"{prefix}-mixed", f"{prefix}-plain", f"{prefix}-foreign"
    for fut in admin.create_topics([NewTopic(shown, 2, 1), NewTopic(hidden, 1, 1)]).values():
        fut.result(timeout=20)
    for fut in admin.create_acls([_grant("alice", ResourceType.GROUP, mixed, AclOperation.DESCRIBE),
                                  _grant("alice", ResourceType.GROUP, plain, AclOperation.DESCRIBE),
                                  _grant("alice", ResourceType.TOPIC, shown, AclOperation.DESCRIBE)]).values():
        fut.result(timeout=20)

    members = [Kip848Member(bootstrap, mixed, [shown, hidden], name="admin-mixed", **rd("admin")),
               Kip848Member(bootstrap, plain, [shown], name="admin-plain", **rd("admin")),
               Kip848Member(bootstrap, foreign, [shown], name="admin-foreign", **rd("admin"))]
    for m in members:
        m.start()
    try:
        wait_until(lambda: members[0].snapshot() == all_parts(shown, 2) | all_parts(hidden, 1)
                   and members[1].snapshot() == all_parts(shown, 2)
                   and members[2].snapshot() == all_parts(shown, 2), WAIT_S, "the groups' assignments")
        # The coordinator's view has settled too (admin may describe everything).
        wait_until(lambda: _assigned(admin.describe_consumer_groups([mixed])[mixed].result(timeout=20))
                   == all_parts(shown, 2) | all_parts(hidden, 1), WAIT_S, "mixed described by admin")

        alice = _admin_as(bootstrap, "alice")
        futures = alice.describe_consumer_groups([mixed, plain, foreign])
        described = futures[plain].result(timeout=20)
        assert _assigned(described) == all_parts(shown, 2)
        assert len(described.members) == 1
        e = _describe_error(futures[mixed])
        assert e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, e
        assert MESSAGE in e.str(), e.str()
        e = _describe_error(futures[foreign])
        assert e.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, e

        for fut in admin.create_acls([_grant("alice", ResourceType.TOPIC, hidden,
                                             AclOperation.DESCRIBE)]).values():
            fut.result(timeout=20)
        wait_until(lambda: _described_or_none(alice, mixed), WAIT_S, "mixed described once granted")
        assert _assigned(_described_or_none(alice, mixed)) == all_parts(shown, 2) | all_parts(hidden, 1)
    finally:
        for m in members:
            m.stop()


def _admin_as(bootstrap: str, user: str):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000, **rd(user)})


def _described_or_none(admin, group):
    try:
        return admin.describe_consumer_groups([group])[group].result(timeout=20)
    except KafkaException:
        return None


def test_describe_refuses_a_group_with_topics_the_caller_may_not_describe(describe_acl_broker):
    scenario(describe_acl_broker.bootstrap)


if __name__ == "__main__":
    # python tests/compat/test_group_describe_acls.py HOST:PORT (a SASL_PLAINTEXT listener with
    # the users of test_acls.JAAS and StandardAuthorizer, admin a super user), e.g. Kafka 4.4.
    scenario(sys.argv[1])
    print("ok")
