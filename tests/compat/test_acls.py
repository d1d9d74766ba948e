"""ACLs with Kafka's StandardAuthorizer semantics, with real clients against a real `moldau server`
on a SASL_PLAINTEXT listener (PLAIN users admin, alice, bob; `super.users=User:admin`):
ACLs created with confluent-kafka's admin (CreateAcls), listed with kafka-python's admin
(DescribeAcls) and removed with both (DeleteAcls); a producer and a group consumer of the allowed
principal work, and denied produce, consume, group and admin requests get Kafka's
TOPIC/GROUP/CLUSTER_AUTHORIZATION_FAILED; Metadata hides the topics a principal may not
describe; DENY wins over ALLOW; `allow.everyone.if.no.acl.found`; without an authorizer the ACL
APIs answer SECURITY_DISABLED; an unknown authorizer class stops the start naming the key.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
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

import clients

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required '
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
)
SETTINGS = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": STANDARD_AUTHORIZER,
    "super.users": "User:admin",
}
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


def rd(user: str) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": PASSWORDS[user]}


def kp(user: str) -> dict:
    return dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                sasl_plain_username=user, sasl_plain_password=PASSWORDS[user])


def admin_for(server, user: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap, "socket.timeout.ms": 10000, **rd(user)})


def create_acls(server, bindings: list[AclBinding], user: str = "admin") -> None:
    a = admin_for(server, user)  # the client must outlive its futures
    for _, fut in a.create_acls(bindings).items():
        fut.result(timeout=20)


def delete_acls(server, filters: list[AclBindingFilter]) -> list[AclBinding]:
    a = admin_for(server, "admin")
    deleted = []
    for _, fut in a.delete_acls(filters).items():
        deleted.extend(fut.result(timeout=20))
    return deleted


def describe_acls(server, user: str, principal: str | None = None) -> list[AclBinding]:
    a = admin_for(server, user)
    return a.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(timeout=20)


def allow(user: str, rtype: ResourceType, name: str, op: AclOperation,
          pattern: ResourcePatternType = ResourcePatternType.LITERAL,
          permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(rtype, name, pattern, f"User:{user}", "*", op, permission)


def create_topic(server, name: str, user: str = "admin") -> None:
    a = admin_for(server, user)
    for _, fut in a.create_topics([NewTopic(name, 1, 1)]).items():
        fut.result(timeout=20)


def produce_error(server, user: str, topic: str):
    """The error of one confluent-kafka produce (None when delivered)."""
    from confluent_kafka import Producer
    errors = []
    p = Producer({"bootstrap.servers": server.bootstrap, "message.timeout.ms": 15000,
                  "allow.auto.create.topics": False, **rd(user)})
    try:
        p.produce(topic, b"v", partition=0, on_delivery=lambda err, msg: errors.append(err))
    except KafkaException as e:
        # librdkafka already knows the topic is not authorized (from Metadata).
        return e.args[0]
    p.flush(30)
    assert errors, "no delivery report"
    return errors[0]


@pytest.fixture(scope="module")
def acl_broker(request, moldau_bin, tmp_path_factory):
    from conftest import BrokerPool, _report_pool
    pool = BrokerPool(moldau_bin, tmp_path_factory.mktemp("moldau-acl"))
    yield pool.start("acl", **SETTINGS)
    _report_pool(request, pool)


def test_acls_are_created_described_and_deleted_by_two_clients(acl_broker):
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePattern, ResourcePatternFilter)
    from kafka.admin import ResourceType as KpResourceType
    create_acls(acl_broker, [
        allow("alice", ResourceType.TOPIC, "described-", AclOperation.WRITE, ResourcePatternType.PREFIXED),
        allow("bob", ResourceType.GROUP, "described-group", AclOperation.READ),
        allow("bob", ResourceType.TOPIC, "described-x", AclOperation.READ,
              permission=AclPermissionType.DENY),
    ])
    kpa = KafkaAdminClient(bootstrap_servers=acl_broker.bootstrap, request_timeout_ms=10000, **kp("admin"))
    try:
        acls, error = kpa.describe_acls(ACLFilter(
            principal=None, host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY)))
        got = {(a.principal, a.operation.name, a.permission_type.name, a.resource_pattern.resource_type.name,
                a.resource_pattern.resource_name, a.resource_pattern.pattern_type.name) for a in acls}
        assert ("User:alice", "WRITE", "ALLOW", "TOPIC", "described-", "PREFIXED") in got, got
        assert ("User:bob", "READ", "ALLOW", "GROUP", "described-group", "LITERAL") in got, got
        assert ("User:bob", "READ", "DENY", "TOPIC", "described-x", "LITERAL") in got, got
        # MATCH: the ACLs that apply to topic described-x (the prefixed one and the literal one).
        acls, _ = kpa.describe_acls(ACLFilter(
            principal=None, host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KpResourceType.TOPIC, "described-x", ACLResourcePatternType.MATCH)))
        assert {(a.principal, a.resource_pattern.resource_name) for a in acls} == {
            ("User:alice", "described-"), ("User:bob", "described-x")}
        # kafka-python deletes bob's group ACL.
        result = kpa.delete_acls([ACLFilter(
            principal="User:bob", host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KpResourceType.GROUP, "described-group",
                                                   ACLResourcePatternType.LITERAL))])
        deleted = [m[0] if isinstance(m, tuple) else m for _, matches, _ in result for m in (matches or [])]
        assert [a.resource_pattern.resource_name for a in deleted] == ["described-group"], result
    finally:
        kpa.close()
    # confluent-kafka deletes the rest of them.
    gone = delete_acls(acl_broker, [AclBindingFilter(ResourceType.TOPIC, "described-", ResourcePatternType.PREFIXED,
                                                     None, None, AclOperation.ANY, AclPermissionType.ANY),
                                    AclBindingFilter(ResourceType.TOPIC, "described-x", ResourcePatternType.LITERAL,
                                                     "User:bob", None, AclOperation.ANY, AclPermissionType.ANY)])
    assert sorted(b.name for b in gone) == ["described-", "described-x"]
    left = describe_acls(acl_broker, "admin")
    assert not [b for b in left if b.name.startswith("described-")], left


def test_invalid_acls_and_unauthorized_acl_requests_are_refused(acl_broker):
    with pytest.raises(KafkaException) as err:
        create_acls(acl_broker, [
            AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL,
                       "User:alice", "*", AclOperation.ALTER, AclPermissionType.ALLOW)])
    assert "kafka-cluster" in str(err.value), err.value
    # alice has no ALTER/DESCRIBE on the cluster.
    with pytest.raises(KafkaException) as err:
        create_acls(acl_broker, [allow("alice", ResourceType.TOPIC, "*", AclOperation.ALL)], user="alice")
    assert err.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, err.value
    # librdkafka answers a failed DescribeAcls with an empty list; kafka-python raises.
    from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePatternFilter)
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import ClusterAuthorizationFailedError
    kpa = KafkaAdminClient(bootstrap_servers=acl_broker.bootstrap, request_timeout_ms=10000, **kp("alice"))
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            kpa.describe_acls(ACLFilter(
                principal=None, host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY)))
    finally:
        kpa.close()


def kcat_read(server, user: str, topic: str) -> tuple[bool, str]:
    """kcat's group-less read of one record from partition 0: (succeeded, stderr)."""
    sec = [a for k, v in rd(user).items() for a in ("-X", f"{k}={v}")]
    out = subprocess.run(["kcat", "-b", server.bootstrap, *sec, "-C", "-t", topic, "-p", "0",
                          "-o", "beginning", "-c", "1", "-e"], capture_output=True, timeout=60)
    return out.returncode == 0 and bool(out.stdout.strip()), out.stderr.decode()


def test_produce_consume_and_groups_follow_the_acls(acl_broker, topic):
    t = f"orders-{topic}"
    create_topic(acl_broker, t)
    # No ACL: alice may not write, and does not see the topic.
    assert produce_error(acl_broker, "alice", t).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    alice_admin, root = admin_for(acl_broker, "alice"), admin_for(acl_broker, "admin")
    assert t not in alice_admin.list_topics(timeout=20).topics
    assert t in root.list_topics(timeout=20).topics
    # WRITE on the prefix orders-, READ on the topic and on group g-<topic>.
    create_acls(acl_broker, [
        allow("alice", ResourceType.TOPIC, "orders-", AclOperation.WRITE, ResourcePatternType.PREFIXED),
        allow("alice", ResourceType.TOPIC, t, AclOperation.READ),
        allow("alice", ResourceType.GROUP, f"g-{topic}", AclOperation.READ),
    ])
    assert produce_error(acl_broker, "alice", t) is None
    clients.kp_produce(acl_broker.bootstrap, t, [{"value": b"kp-%d" % i} for i in range(3)], **kp("alice"))
    assert t in alice_admin.list_topics(timeout=20).topics
    # kafka-python group consumer with the allowed group commits and reads back everything.
    from kafka import KafkaConsumer
    c = KafkaConsumer(t, bootstrap_servers=acl_broker.bootstrap, group_id=f"g-{topic}",
                      auto_offset_reset="earliest", enable_auto_commit=False, request_timeout_ms=15000,
                      **kp("alice"))
    try:
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 4 and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                got.extend(r.value for r in recs)
        assert sorted(got) == [b"kp-0", b"kp-1", b"kp-2", b"v"]
        c.commit()
    finally:
        c.close()
    # Another group: GROUP_AUTHORIZATION_FAILED (librdkafka reports it as a consumer error).
    from confluent_kafka import Consumer
    cc = Consumer({"bootstrap.servers": acl_broker.bootstrap, "group.id": f"other-{topic}",
                   "auto.offset.reset": "earliest", **rd("alice")})
    try:
        cc.subscribe([t])
        err = None
        deadline = time.monotonic() + 30
        while err is None and time.monotonic() < deadline:
            m = cc.poll(0.5)
            if m is not None and m.error():
                err = m.error()
        assert err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, err
    finally:
        cc.close()
    # bob has nothing: he cannot read the topic.
    assert kcat_read(acl_broker, "alice", t)[0]
    ok, err = kcat_read(acl_broker, "bob", t)
    assert not ok and "authorization failed" in err.lower(), err
    # DENY wins: a DENY READ for alice on the topic beats her ALLOW.
    create_acls(acl_broker, [allow("alice", ResourceType.TOPIC, t, AclOperation.READ,
                                   permission=AclPermissionType.DENY)])
    ok, err = kcat_read(acl_broker, "alice", t)
    assert not ok and "authorization failed" in err.lower(), err
    # Topic creation needs CREATE: alice has none.
    with pytest.raises(KafkaException) as err:
        create_topic(acl_broker, f"orders-new-{topic}", user="alice")
    assert err.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err.value


def test_kafka_acls_tool_manages_acls(acl_broker, tmp_path):
    kit = Path(__file__).resolve().parents[2] / "scripts" / "reference" / "kafka"
    if subprocess.run(["which", "java"], capture_output=True).returncode != 0:
        pytest.skip("no JVM on this machine")
    fetched = subprocess.run([str(kit), "fetch"], capture_output=True, timeout=600)
    if fetched.returncode != 0:
        pytest.skip("the Apache Kafka reference kit could not be fetched: " + fetched.stderr.decode()[-500:])
    config = tmp_path / "admin.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret";\n')
    base = [str(kit), "class", "org.apache.kafka.tools.AclCommand", "--bootstrap-server", acl_broker.bootstrap,
            "--command-config", str(config)]
    added = subprocess.run(base + ["--add", "--allow-principal", "User:bob", "--operation", "Read",
                                   "--operation", "Describe", "--topic", "tool-topic", "--group", "tool-group"],
                           capture_output=True, timeout=180)
    assert added.returncode == 0, added.stderr.decode()[-2000:]
    listed = subprocess.run(base + ["--list", "--topic", "tool-topic"], capture_output=True, timeout=180)
    assert listed.returncode == 0, listed.stderr.decode()[-2000:]
    out = listed.stdout.decode()
    assert "User:bob" in out and "READ" in out and "DESCRIBE" in out, out
    removed = subprocess.run(base + ["--remove", "--force", "--allow-principal", "User:bob", "--operation", "Read",
                                     "--operation", "Describe", "--topic", "tool-topic", "--group", "tool-group"],
                             capture_output=True, timeout=180)
    assert removed.returncode == 0, removed.stderr.decode()[-2000:]
    left = describe_acls(acl_broker, "admin", principal="User:bob")
    assert not [b for b in left if b.name.startswith("tool-")], left


def test_allow_everyone_if_no_acl_found(brokers, topic):
    server = brokers.start("open", **SETTINGS, **{"allow.everyone.if.no.acl.found": "true"})
    create_topic(server, topic)
    assert produce_error(server, "alice", topic) is None
    # An ACL on the topic closes it to everyone it does not name.
    create_acls(server, [allow("bob", ResourceType.TOPIC, topic, AclOperation.WRITE)])
    assert produce_error(server, "alice", topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(server, "bob", topic) is None


def test_acl_apis_without_an_authorizer_are_security_disabled(broker):
    a = AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10000})
    with pytest.raises(KafkaException) as err:
        for _, fut in a.create_acls([allow("alice", ResourceType.TOPIC, "t", AclOperation.READ)]).items():
            fut.result(timeout=20)
    assert err.value.args[0].code() == KafkaError.SECURITY_DISABLED, err.value
    # librdkafka answers an unsuccessful DescribeAcls with an empty list; kafka-python raises.
    from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePatternFilter)
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import SecurityDisabledError
    kpa = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        with pytest.raises(SecurityDisabledError):
            kpa.describe_acls(ACLFilter(
                principal=None, host="*", operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY)))
    finally:
        kpa.close()


def test_an_unknown_authorizer_stops_the_start_naming_the_key(moldau_bin, tmp_path):
    out = subprocess.run([str(moldau_bin), "server", "--data-dir", str(tmp_path / "d"),
                          "--set", "listeners=PLAINTEXT://127.0.0.1:0",
                          "--set", "authorizer.class.name=kafka.security.authorizer.AclAuthorizer"],
                         capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    assert out.returncode != 0
    assert b"authorizer.class.name" in out.stderr, out.stderr
