"""`moldau acl` and `moldau user` against a real `moldau server` with ACLs on (SASL_PLAINTEXT,
PLAIN admin `super.users=User:admin`, SCRAM-SHA-256/512 enabled), the effect seen by third-party
clients: confluent-kafka and kafka-python are denied, the CLI adds ACLs (kafka-acls' vocabulary),
they are allowed, the CLI removes them, they are denied again; a SCRAM user created by the CLI
logs in through confluent-kafka (SCRAM-SHA-256) and kafka-python (SCRAM-SHA-512), one mechanism
deleted by the CLI stops working while the other still does. The same CLI against Apache Kafka
(with its StandardAuthorizer) is in tests/reference/test_tools.py.
"""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest
from clients import authentication_error, confluent_produce_error
from clients import rdkafka_sasl_plaintext as rd_sasl
from confluent_kafka import KafkaError

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required '
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)
SETTINGS = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": STANDARD_AUTHORIZER,
    "super.users": "User:admin",
}


@pytest.fixture(scope="module")
def secured(request, moldau_bin, tmp_path_factory):
    from conftest import BrokerPool, _report_pool
    pool = BrokerPool(moldau_bin, tmp_path_factory.mktemp("moldau-sec-cli"))
    yield pool.start("sec-cli", **SETTINGS)
    _report_pool(request, pool)


@pytest.fixture(scope="module")
def admin_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli-config") / "admin.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret";\n')
    return path


def cli(moldau_bin, bootstrap, config, *args, stdin: str | None = None, check: bool = True):
    out = subprocess.run([str(moldau_bin), *args, "-b", bootstrap, "--timeout-ms", "15000",
                          "--command-config", str(config)],
                         capture_output=True, text=True, input=stdin, timeout=120)
    if check:
        assert out.returncode == 0, f"moldau {' '.join(args)}: {out.stderr}"
    return out


def kp(mechanism: str, user: str, password: str) -> dict:
    return dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                sasl_plain_username=user, sasl_plain_password=password)


def kp_group_read(bootstrap: str, topic: str, group: str, sec: dict):
    """kafka-python: joins `group`, reads one record of `topic` and commits it; returns the
    committed offset, or raises the client's error."""
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, request_timeout_ms=15000, consumer_timeout_ms=20000,
                      **sec)
    try:
        c.subscribe([topic])
        got = None
        for _ in range(40):
            batch = c.poll(timeout_ms=500, max_records=1)
            if batch:
                got = next(iter(batch.values()))[0]
                break
        assert got is not None, "no record read"
        c.commit()
        return c.committed(TopicPartition(topic, 0))
    finally:
        c.close()


def test_acl_cli_grants_and_revokes_what_clients_see(secured, moldau_bin, admin_config):
    topic = f"cli-acl-{uuid.uuid4().hex[:6]}"
    group = f"{topic}-group"
    alice = rd_sasl("PLAIN", "alice", "alice-secret")
    cli(moldau_bin, secured.bootstrap, admin_config, "topic", "create", topic, "--partitions", "1")

    # Denied: alice has no ACL.
    assert confluent_produce_error(secured.bootstrap, topic, alice).code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED

    # kafka-acls' vocabulary: --producer is WRITE, DESCRIBE, CREATE on the topic.
    added = cli(moldau_bin, secured.bootstrap, admin_config, "acl", "add", "--allow-principal",
                "User:alice", "--producer", "--topic", topic, "--json")
    assert sorted(a["operation"] for a in json.loads(added.stdout)) == ["CREATE", "DESCRIBE", "WRITE"]
    assert confluent_produce_error(secured.bootstrap, topic, alice) is None

    # The group is still denied to kafka-python; --consumer on topic and group allows it.
    from kafka.errors import GroupAuthorizationFailedError
    with pytest.raises(GroupAuthorizationFailedError):
        kp_group_read(secured.bootstrap, topic, group, kp("PLAIN", "alice", "alice-secret"))
    cli(moldau_bin, secured.bootstrap, admin_config, "acl", "add", "--allow-principal", "User:alice",
        "--consumer", "--topic", topic, "--group", group)
    committed = kp_group_read(secured.bootstrap, topic, group, kp("PLAIN", "alice", "alice-secret"))
    assert committed == 1

    # The CLI's list and a third-party DescribeAcls (kafka-python) agree.
    listed = json.loads(cli(moldau_bin, secured.bootstrap, admin_config, "acl", "list", "--topic", topic,
                            "--group", group, "--json").stdout)
    mine = sorted((a["resource_type"], a["operation"]) for a in listed if a["principal"] == "User:alice")
    assert mine == [("GROUP", "READ"), ("TOPIC", "CREATE"), ("TOPIC", "DESCRIBE"), ("TOPIC", "READ"),
                    ("TOPIC", "WRITE")], listed
    from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePatternFilter)
    from kafka.admin import ResourceType as KpResourceType
    kpa = KafkaAdminClient(bootstrap_servers=secured.bootstrap, request_timeout_ms=15000,
                           **kp("PLAIN", "admin", "admin-secret"))
    try:
        acls, _ = kpa.describe_acls(ACLFilter(
            principal="User:alice", host="*", operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KpResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL)))
        assert sorted(a.operation.name for a in acls) == ["CREATE", "DESCRIBE", "READ", "WRITE"], acls
    finally:
        kpa.close()

    # A DENY added by the CLI wins over the ALLOWs.
    cli(moldau_bin, secured.bootstrap, admin_config, "acl", "add", "--deny-principal", "User:alice",
        "--operation", "Write", "--topic", topic)
    assert confluent_produce_error(secured.bootstrap, topic, alice).code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Removing exactly that ACL restores the write.
    removed = cli(moldau_bin, secured.bootstrap, admin_config, "acl", "remove", "--deny-principal",
                  "User:alice", "--operation", "Write", "--topic", topic, "--json")
    assert [(a["permission"], a["operation"]) for a in json.loads(removed.stdout)] == [("DENY", "WRITE")]
    assert confluent_produce_error(secured.bootstrap, topic, alice) is None

    # Without a principal, remove drops every ACL of the resources named: denied again.
    cli(moldau_bin, secured.bootstrap, admin_config, "acl", "remove", "--topic", topic, "--group", group)
    assert json.loads(cli(moldau_bin, secured.bootstrap, admin_config, "acl", "list", "--topic", topic,
                          "--json").stdout) == []
    assert confluent_produce_error(secured.bootstrap, topic, alice).code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED

    # Bad input is refused by the CLI before anything is sent, naming the problem.
    bad = cli(moldau_bin, secured.bootstrap, admin_config, "acl", "add", "--allow-principal", "User:alice",
              "--operation", "Write", "--group", group, check=False)
    assert bad.returncode != 0 and "GROUP only supports" in bad.stderr, bad.stderr
    # A non-super user's CreateAcls is the broker's CLUSTER_AUTHORIZATION_FAILED.
    cfg = admin_config.parent / "alice.properties"
    cfg.write_text(admin_config.read_text().replace('"admin"', '"alice"').replace("admin-secret", "alice-secret"))
    denied = cli(moldau_bin, secured.bootstrap, cfg, "acl", "add", "--allow-principal", "User:alice",
                 "--operation", "All", "--topic", "*", check=False)
    assert denied.returncode != 0 and "CLUSTER_AUTHORIZATION_FAILED" in denied.stderr, denied.stderr


def test_user_cli_creates_scram_users_that_clients_log_in_with(secured, moldau_bin, admin_config, topic):
    user, password = f"carol{uuid.uuid4().hex[:4]}", "carol-pw-" + uuid.uuid4().hex[:8]
    out = cli(moldau_bin, secured.bootstrap, admin_config, "user", "add", user, "--password-stdin",
              "--mechanism", "SCRAM-SHA-256", "--mechanism", "scram-sha-512", "--iterations", "8192",
              stdin=password + "\n")
    assert password not in out.stdout + out.stderr
    listed = json.loads(cli(moldau_bin, secured.bootstrap, admin_config, "user", "list", user, "--json").stdout)
    assert listed == [{"user": user, "credentials": [
        {"mechanism": "SCRAM-SHA-256", "iterations": 8192},
        {"mechanism": "SCRAM-SHA-512", "iterations": 8192}]}], listed
    # confluent-kafka sees the same credentials (DescribeUserScramCredentials).
    from confluent_kafka.admin import AdminClient, ScramMechanism
    ca = AdminClient({"bootstrap.servers": secured.bootstrap, "socket.timeout.ms": 10000,
                      **rd_sasl("PLAIN", "admin", "admin-secret")})
    info = ca.describe_user_scram_credentials([user])[user].result(timeout=20)
    assert sorted((i.mechanism, i.iterations) for i in info.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 8192)]

    # The CLI grants the new user a topic; it logs in and writes with both clients.
    cli(moldau_bin, secured.bootstrap, admin_config, "topic", "create", topic, "--partitions", "1")
    cli(moldau_bin, secured.bootstrap, admin_config, "acl", "add", "--allow-principal", f"User:{user}",
        "--operation", "Write", "--operation", "Describe", "--topic", topic)
    assert confluent_produce_error(secured.bootstrap, topic, rd_sasl("SCRAM-SHA-256", user, password)) is None
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=secured.bootstrap, request_timeout_ms=15000,
                      **kp("SCRAM-SHA-512", user, password))
    try:
        p.send(topic, b"kp", partition=0).get(timeout=30)
    finally:
        p.close()
    # A wrong password is refused.
    assert authentication_error(secured.bootstrap, rd_sasl("SCRAM-SHA-256", user, "wrong")) is not None

    # Deleting one mechanism: that login fails, the other still works.
    cli(moldau_bin, secured.bootstrap, admin_config, "user", "delete", user, "--mechanism", "SCRAM-SHA-256")
    assert authentication_error(secured.bootstrap, rd_sasl("SCRAM-SHA-256", user, password)) is not None, \
        "SCRAM-SHA-256 still logs in after its credential was deleted"
    assert confluent_produce_error(secured.bootstrap, topic, rd_sasl("SCRAM-SHA-512", user, password)) is None
    # Deleting the rest (every mechanism it has) leaves no user.
    cli(moldau_bin, secured.bootstrap, admin_config, "user", "delete", user)
    gone = cli(moldau_bin, secured.bootstrap, admin_config, "user", "list", user, check=False)
    assert gone.returncode != 0 and "RESOURCE_NOT_FOUND" in gone.stderr, gone
    assert user not in cli(moldau_bin, secured.bootstrap, admin_config, "user", "list").stdout
