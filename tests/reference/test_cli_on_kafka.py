"""`moldau acl`, `moldau user`, `moldau quota` and `moldau topic reassign` against Apache Kafka 4.4 with its StandardAuthorizer: the proof
that the CLI is usable on a Kafka cluster. Kafka runs from the reference kit with an extra
SASL_PLAINTEXT listener (`--listener SASL:SASL_PLAINTEXT`: PLAIN admin/alice, SCRAM-SHA-256/512),
`super.users=User:admin` (and User:ANONYMOUS for the kit's PLAINTEXT listener, which carries
inter-broker traffic). The CLI logs in as admin with `--command-config`; confluent-kafka and
kafka-python see the effect: alice is denied, allowed after `moldau acl add`, denied again after
`moldau acl remove`; a user created by `moldau user add` logs in with SCRAM through both clients
and no longer after `moldau user delete`. Kafka applies metadata changes asynchronously after it
answers, so each effect is awaited with a deadline.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest
from confluent_kafka import KafkaError

from clients import authentication_error, confluent_produce_error
from clients import rdkafka_sasl_plaintext as rd_sasl
from conftest import KafkaNode

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret" user_alice="alice-secret";')
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


@pytest.fixture(scope="module")
def secured_kafka(kit_libs, tmp_path_factory):
    node = KafkaNode(tmp_path_factory.mktemp("kafka-secured"))
    node.start(
        "--listener", "SASL:SASL_PLAINTEXT",
        "--set", "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "--set", f"listener.name.sasl.plain.sasl.jaas.config={PLAIN_JAAS}",
        "--set", f"listener.name.sasl.scram-sha-256.sasl.jaas.config={SCRAM_JAAS}",
        "--set", f"listener.name.sasl.scram-sha-512.sasl.jaas.config={SCRAM_JAAS}",
        "--set", f"authorizer.class.name={STANDARD_AUTHORIZER}",
        "--set", "super.users=User:admin;User:ANONYMOUS",
    )
    node.sasl = (node.dir / "listener-sasl").read_text().strip()
    yield node
    node.stop()


@pytest.fixture(scope="module")
def admin_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli-on-kafka") / "admin.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret";\n')
    return path


def cli(moldau_bin, kafka, config, *args, stdin: str | None = None):
    out = subprocess.run([str(moldau_bin), *args, "-b", kafka.sasl, "--timeout-ms", "20000",
                          "--command-config", str(config)],
                         capture_output=True, text=True, input=stdin, timeout=120)
    assert out.returncode == 0, f"moldau {' '.join(args)}: {out.stderr}\n{kafka.log_tail(3000)}"
    return out


def eventually(check, what: str, deadline_s: float = 60.0):
    """Retries `check` (returns True when the effect is visible) until the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        if check():
            return
        assert time.monotonic() < end, f"not within {deadline_s}s: {what}"
        time.sleep(0.5)


def denied(err) -> bool:
    return err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_moldau_acl_manages_kafka_acls(secured_kafka, moldau_bin, admin_config):
    kafka = secured_kafka
    topic = f"cli-kafka-{uuid.uuid4().hex[:6]}"
    alice = rd_sasl("PLAIN", "alice", "alice-secret")
    cli(moldau_bin, kafka, admin_config, "topic", "create", topic, "--partitions", "1")
    assert denied(confluent_produce_error(kafka.sasl, topic, alice))

    added = cli(moldau_bin, kafka, admin_config, "acl", "add", "--allow-principal", "User:alice",
                "--producer", "--topic", topic, "--json")
    assert sorted(a["operation"] for a in json.loads(added.stdout)) == ["CREATE", "DESCRIBE", "WRITE"]
    eventually(lambda: confluent_produce_error(kafka.sasl, topic, alice) is None, "alice may write after acl add")

    listed = json.loads(cli(moldau_bin, kafka, admin_config, "acl", "list", "--topic", topic,
                            "--json").stdout)
    assert sorted((a["principal"], a["operation"], a["permission"]) for a in listed) == [
        ("User:alice", "CREATE", "ALLOW"), ("User:alice", "DESCRIBE", "ALLOW"),
        ("User:alice", "WRITE", "ALLOW")], listed
    # kafka-python's DescribeAcls on Kafka agrees with the CLI.
    from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePatternFilter, ResourceType)
    kpa = KafkaAdminClient(bootstrap_servers=kafka.sasl, request_timeout_ms=20000,
                           security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                           sasl_plain_username="admin", sasl_plain_password="admin-secret")
    try:
        acls, _ = kpa.describe_acls(ACLFilter(
            principal="User:alice", host="*", operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL)))
        assert sorted(a.operation.name for a in acls) == ["CREATE", "DESCRIBE", "WRITE"], acls
    finally:
        kpa.close()

    removed = cli(moldau_bin, kafka, admin_config, "acl", "remove", "--topic", topic, "--json")
    assert len(json.loads(removed.stdout)) == 3, removed.stdout
    eventually(lambda: denied(confluent_produce_error(kafka.sasl, topic, alice)), "alice denied after acl remove")


def test_moldau_user_manages_kafka_scram_users(secured_kafka, moldau_bin, admin_config):
    kafka = secured_kafka
    topic = f"cli-kafka-{uuid.uuid4().hex[:6]}"
    user, password = f"dora{uuid.uuid4().hex[:4]}", "dora-" + uuid.uuid4().hex[:8]
    out = cli(moldau_bin, kafka, admin_config, "user", "add", user, "--password-stdin", stdin=password + "\n")
    assert password not in out.stdout + out.stderr
    listed = json.loads(cli(moldau_bin, kafka, admin_config, "user", "list", user, "--json").stdout)
    assert listed == [{"user": user, "credentials": [
        {"mechanism": "SCRAM-SHA-256", "iterations": 4096},
        {"mechanism": "SCRAM-SHA-512", "iterations": 4096}]}], listed
    cli(moldau_bin, kafka, admin_config, "topic", "create", topic, "--partitions", "1")
    cli(moldau_bin, kafka, admin_config, "acl", "add", "--allow-principal", f"User:{user}",
        "--operation", "Write", "--operation", "Describe", "--topic", topic)

    # Kafka verifies the client-side salted password: both clients log in and write.
    eventually(lambda: confluent_produce_error(kafka.sasl, topic, rd_sasl("SCRAM-SHA-256", user, password)) is None,
               "confluent-kafka SCRAM-SHA-256 login and write")
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=kafka.sasl, request_timeout_ms=20000,
                      security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                      sasl_plain_username=user, sasl_plain_password=password)
    try:
        p.send(topic, b"kp", partition=0).get(timeout=30)
    finally:
        p.close()

    cli(moldau_bin, kafka, admin_config, "user", "delete", user)
    eventually(lambda: authentication_error(kafka.sasl, rd_sasl("SCRAM-SHA-256", user, password)) is not None,
               "no SCRAM login after user delete")


def test_moldau_quota_manages_kafka_client_quotas(secured_kafka, moldau_bin, admin_config):
    """`moldau quota` on Kafka: what it sets, kafka-python's DescribeClientQuotas shows (Kafka
    applies the record after it answers: awaited); what it describes is Kafka's answer; Kafka's
    refusal of a bad value is the CLI's error."""
    from kafka.admin import KafkaAdminClient
    from kafka.protocol.admin import DescribeClientQuotasRequest

    def kafka_quotas() -> dict:
        admin = KafkaAdminClient(bootstrap_servers=secured_kafka.sasl, security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="PLAIN", sasl_plain_username="admin",
                                 sasl_plain_password="admin-secret")
        try:
            async def send():
                return await admin._manager.send(DescribeClientQuotasRequest(components=[], strict=False))
            resp = admin._manager.run(send)
        finally:
            admin.close()
        assert resp.error_code == 0, resp
        return {tuple(sorted((d.entity_type, d.entity_name) for d in e.entity)): {v.key: v.value for v in e.values}
                for e in resp.entries}

    user = f"q-{uuid.uuid4().hex[:8]}"
    cli(moldau_bin, secured_kafka, admin_config, "quota", "alter", "--user", user,
        "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")
    cli(moldau_bin, secured_kafka, admin_config, "quota", "alter", "--user", user, "--client", "app",
        "--add-config", "request_percentage=12.5")
    eventually(lambda: kafka_quotas().get((("user", user),)) == {"producer_byte_rate": 1024.0,
                                                                 "consumer_byte_rate": 2048.0},
               "Kafka shows the user's quotas")
    eventually(lambda: kafka_quotas().get((("client-id", "app"), ("user", user))) == {"request_percentage": 12.5},
               "Kafka shows the user's client quota")
    rows = json.loads(cli(moldau_bin, secured_kafka, admin_config, "quota", "describe", "--user", user,
                          "--strict", "--json").stdout)
    assert rows == [{"entity": [{"type": "user", "name": user}],
                     "quotas": {"consumer_byte_rate": 2048.0, "producer_byte_rate": 1024.0}}], rows
    cli(moldau_bin, secured_kafka, admin_config, "quota", "alter", "--user", user,
        "--delete-config", "producer_byte_rate")
    eventually(lambda: kafka_quotas().get((("user", user),)) == {"consumer_byte_rate": 2048.0},
               "Kafka removed one key")
    bad = subprocess.run([str(moldau_bin), "quota", "alter", "--user", user, "--add-config",
                          "producer_byte_rate=10.5", "-b", secured_kafka.sasl, "--command-config",
                          str(admin_config)], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "INVALID_REQUEST" in bad.stderr and "cannot be a fractional value" in bad.stderr, bad.stderr


def test_moldau_topic_reassign_on_kafka(secured_kafka, moldau_bin, admin_config, tmp_path):
    """`moldau topic reassign` on Kafka (one node, so the plan keeps the partition where it
    is): --generate's plan is Kafka's JSON, --execute --throttle sets the KIP-73 configs Kafka's
    own tool sets (read back with confluent-kafka's DescribeConfigs), --verify reports it
    complete and removes them, --list finds nothing, an unknown broker is refused."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": secured_kafka.bootstrap})
    broker = str(next(iter(admin.list_topics(timeout=20).brokers)))
    topic = f"cli-kafka-{uuid.uuid4().hex[:6]}"
    cli(moldau_bin, secured_kafka, admin_config, "topic", "create", topic, "--partitions", "2")

    def set_configs(kind, name):
        entries = list(admin.describe_configs([ConfigResource(kind, name)]).values())[0].result(30)
        return {k: e.value for k, e in entries.items() if not e.is_default}

    out = cli(moldau_bin, secured_kafka, admin_config, "topic", "reassign", "--generate",
              "--topics", topic, "--broker-list", broker).stdout.splitlines()
    proposed = json.loads(out[4])
    assert proposed == {"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": [int(broker)], "log_dirs": ["any"]} for p in (0, 1)]}, out
    plan = tmp_path / "plan.json"
    plan.write_text(out[4])
    res = cli(moldau_bin, secured_kafka, admin_config, "topic", "reassign", "--execute",
              "--reassignment-json-file", str(plan), "--throttle", "1000000").stdout
    assert f"Successfully started partition reassignments for {topic}-0,{topic}-1" in res, res
    eventually(lambda: set_configs(ResourceType.BROKER, broker).get("leader.replication.throttled.rate") == "1000000"
               and set_configs(ResourceType.BROKER, broker).get("follower.replication.throttled.rate") == "1000000",
               "Kafka shows the broker throttles")
    eventually(lambda: set_configs(ResourceType.TOPIC, topic).get("leader.replication.throttled.replicas")
               == f"0:{broker},1:{broker}", "Kafka shows the topic's throttled replicas")

    def verified():
        out = cli(moldau_bin, secured_kafka, admin_config, "topic", "reassign", "--verify",
                  "--reassignment-json-file", str(plan)).stdout
        return "Clearing broker-level throttles" in out and f"Reassignment of partition {topic}-1 is completed." in out
    eventually(verified, "--verify reports it complete and clears the throttles")
    eventually(lambda: not any("replication.throttled" in k for k in set_configs(ResourceType.BROKER, broker))
               and not any("replication.throttled" in k for k in set_configs(ResourceType.TOPIC, topic)),
               "Kafka no longer shows any throttle")
    listed = cli(moldau_bin, secured_kafka, admin_config, "topic", "reassign", "--list").stdout
    assert listed.strip() == "No partition reassignments found.", listed
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [int(broker), 99]}]}))
    r = subprocess.run([str(moldau_bin), "topic", "reassign", "--execute", "--reassignment-json-file", str(bad),
                        "-b", secured_kafka.sasl, "--command-config", str(admin_config)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Unknown broker id(s) 99" in r.stderr, r.stderr
