"""ACL checks on the per-item APIs (issue 14), as Kafka's KafkaApis makes them: configs
(DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, the cluster for brokers), DescribeProducers
(READ), Describe/ListTransactions (DESCRIBE on the transactional id, topics filtered),
OffsetDelete (DELETE on the group, READ on topics), TxnOffsetCommit (READ on topics),
FindCoordinator v4+ with allowed and denied keys (on the wire: clients send one key per
request). Each through real clients (confluent-kafka, kafka-python) where they can express
it, against a SASL broker with ACLs on."""

from __future__ import annotations

import struct
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AclOperation, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ResourceType)

import kwire
from test_acls import acl_broker, admin_for, allow, create_acls, create_topic, kp, rd  # noqa: F401


def kp_admin(server, user: str):
    from kafka.admin import KafkaAdminClient
    return KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=20000, **kp(user))


def code_of(fut) -> int:
    with pytest.raises(KafkaException) as e:
        fut.result(timeout=20)
    return e.value.args[0].code()


def test_configs_need_describe_configs_and_alter_configs(acl_broker):
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType
    ok, no = f"cfg-ok-{uuid.uuid4().hex[:6]}", f"cfg-no-{uuid.uuid4().hex[:6]}"
    create_topic(acl_broker, ok)
    create_topic(acl_broker, no)
    create_acls(acl_broker, [allow("alice", ResourceType.TOPIC, ok, AclOperation.DESCRIBE_CONFIGS),
                             allow("alice", ResourceType.TOPIC, ok, AclOperation.ALTER_CONFIGS),
                             allow("alice", ResourceType.TOPIC, no, AclOperation.DESCRIBE)])
    a = admin_for(acl_broker, "alice")
    fs = a.describe_configs([ConfigResource(ResourceType.TOPIC, ok), ConfigResource(ResourceType.TOPIC, no)])
    by_name = {r.name: f for r, f in fs.items()}
    assert "retention.ms" in by_name[ok].result(timeout=20)
    assert code_of(by_name[no]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Broker configs need DESCRIBE_CONFIGS on the cluster.
    (f,) = a.describe_configs([ConfigResource(ResourceType.BROKER, "1")]).values()
    assert code_of(f) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # IncrementalAlterConfigs: the allowed topic changes, the other is refused.
    set_retention = [ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)]
    fs = a.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, ok, incremental_configs=set_retention),
                                      ConfigResource(ResourceType.TOPIC, no, incremental_configs=set_retention)])
    by_name = {r.name: f for r, f in fs.items()}
    by_name[ok].result(timeout=20)
    assert code_of(by_name[no]) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # kafka-python: describe (all configs) and the legacy AlterConfigs.
    kadmin = kp_admin(acl_broker, "alice")
    try:
        got = kadmin.describe_configs([KpResource(ConfigResourceType.TOPIC, ok),
                                       KpResource(ConfigResourceType.TOPIC, no)], config_filter="all")
        assert got["topic"][ok]["retention.ms"]["value"] == "3600000"
        assert got["topic"].get(no, {}) == {}
        out = kadmin.alter_configs([KpResource(ConfigResourceType.TOPIC, no, {"retention.ms": "1000"})],
                                   raise_on_unknown=False, incremental=False)
        assert "TopicAuthorization" in out["topic"][no], out
        out = kadmin.alter_configs([KpResource(ConfigResourceType.BROKER, "1", {"log.retention.ms": "1000"})],
                                   raise_on_unknown=False, incremental=True)
        assert "ClusterAuthorization" in out["broker"]["1"], out
    finally:
        kadmin.close()


def commit_transaction(server, txn_id: str, topic: str) -> None:
    p = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": txn_id, **rd("admin")})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"v", partition=0)
    p.commit_transaction(30)


def test_transaction_and_producer_descriptions_follow_the_acls(acl_broker):
    from kafka import TopicPartition as KTP
    from kafka.errors import TopicAuthorizationFailedError, TransactionalIdAuthorizationFailedError
    tag = uuid.uuid4().hex[:6]
    seen, hidden = f"txn-seen-{tag}", f"txn-hidden-{tag}"
    ok_topic, no_topic = f"tx-topic-{tag}", f"tx-secret-{tag}"
    create_topic(acl_broker, ok_topic)
    create_topic(acl_broker, no_topic)
    commit_transaction(acl_broker, seen, ok_topic)
    commit_transaction(acl_broker, hidden, no_topic)
    # DESCRIBE on the secret topic (metadata), but not READ (DescribeProducers).
    create_acls(acl_broker, [allow("alice", ResourceType.TRANSACTIONAL_ID, seen, AclOperation.DESCRIBE),
                             allow("alice", ResourceType.TOPIC, ok_topic, AclOperation.READ),
                             allow("alice", ResourceType.TOPIC, no_topic, AclOperation.DESCRIBE)])
    kadmin = kp_admin(acl_broker, "alice")
    try:
        listed = [t.transactional_id for ts in kadmin.list_transactions().values() for t in ts]
        assert seen in listed and hidden not in listed, listed
        assert seen in kadmin.describe_transactions([seen])
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            kadmin.describe_transactions([hidden])
        assert KTP(ok_topic, 0) in kadmin.describe_producers([KTP(ok_topic, 0)])
        with pytest.raises(TopicAuthorizationFailedError):
            kadmin.describe_producers([KTP(no_topic, 0)])
    finally:
        kadmin.close()


def test_offset_delete_and_txn_offset_commit_check_topics(acl_broker):
    from kafka import TopicPartition as KTP
    from kafka.errors import GroupAuthorizationFailedError
    tag = uuid.uuid4().hex[:6]
    group, ok_topic, no_topic = f"g-{tag}", f"od-ok-{tag}", f"od-no-{tag}"
    create_topic(acl_broker, ok_topic)
    create_topic(acl_broker, no_topic)
    # Offsets committed by the admin for both topics.
    c = Consumer({"bootstrap.servers": acl_broker.bootstrap, "group.id": group, **rd("admin")})
    c.commit(offsets=[TopicPartition(ok_topic, 0, 0), TopicPartition(no_topic, 0, 0)], asynchronous=False)
    c.close()
    create_acls(acl_broker, [allow("alice", ResourceType.GROUP, group, AclOperation.READ),
                             allow("alice", ResourceType.TOPIC, ok_topic, AclOperation.READ)])
    kadmin = kp_admin(acl_broker, "alice")
    try:
        # OffsetDelete needs DELETE on the group.
        with pytest.raises(GroupAuthorizationFailedError):
            kadmin.delete_group_offsets(group, [KTP(ok_topic, 0)])
        create_acls(acl_broker, [allow("alice", ResourceType.GROUP, group, AclOperation.DELETE)])
        out = kadmin.delete_group_offsets(group, [KTP(ok_topic, 0), KTP(no_topic, 0)])
        assert out[KTP(ok_topic, 0)].__name__ == "NoError", out
        assert out[KTP(no_topic, 0)].__name__ == "TopicAuthorizationFailedError", out
    finally:
        kadmin.close()

    # TxnOffsetCommit: the transaction may commit offsets only of topics it may read.
    txn = f"txo-{tag}"
    create_acls(acl_broker, [allow("alice", ResourceType.TRANSACTIONAL_ID, txn, AclOperation.WRITE),
                             allow("alice", ResourceType.TOPIC, ok_topic, AclOperation.WRITE)])
    p = Producer({"bootstrap.servers": acl_broker.bootstrap, "transactional.id": txn, **rd("alice")})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(ok_topic, b"v", partition=0)
    meta = Consumer({"bootstrap.servers": acl_broker.bootstrap, "group.id": group, **rd("alice")})
    with pytest.raises(KafkaException) as e:
        p.send_offsets_to_transaction([TopicPartition(no_topic, 0, 1)], meta.consumer_group_metadata(), 30)
    meta.close()
    err = e.value.args[0]
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED or "authoriz" in err.str().lower(), err


def find_coordinator_v4(address, user: str, keys: list[str], key_type: int = 0) -> dict[str, int]:
    """FindCoordinator v4 (flexible) for several keys, after SASL/PLAIN as `user`:
    key -> error code."""
    from test_cluster_security import compact, read_uvarint
    from test_security import sasl_authenticate, sasl_handshake
    with kwire.connect(address) as s:
        assert sasl_handshake(s, "PLAIN")[0] == 0
        assert sasl_authenticate(s, f"\0{user}\0{user}-secret".encode())[0] == 0
        body = kwire.i8(key_type) + kwire.uvarint(len(keys) + 1) + b"".join(compact(k.encode()) for k in keys) + b"\x00"
        s.sendall(kwire.request(10, 4, 5, body, flexible=True))
        frame = kwire.recv_frame(s)
    at = 4 + 1 + 4  # correlation id, header tags, throttle
    n, at = read_uvarint(frame, at)
    out = {}
    for _ in range(n - 1):
        klen, at = read_uvarint(frame, at)
        key = frame[at:at + klen - 1].decode()
        at += klen - 1
        at += 4  # node id
        hlen, at = read_uvarint(frame, at)
        at += hlen - 1 + 4  # host, port
        (error,) = struct.unpack(">h", frame[at:at + 2])
        at += 2
        mlen, at = read_uvarint(frame, at)
        at += max(mlen - 1, 0)
        tags, at = read_uvarint(frame, at)
        assert tags == 0
        out[key] = error
    return out


def test_find_coordinator_answers_each_key(acl_broker):
    tag = uuid.uuid4().hex[:6]
    ok, no = f"fc-ok-{tag}", f"fc-no-{tag}"
    create_acls(acl_broker, [allow("alice", ResourceType.GROUP, ok, AclOperation.READ)])
    deadline = time.monotonic() + 30
    got = {}
    while time.monotonic() < deadline:
        got = find_coordinator_v4(acl_broker.address, "alice", [ok, no])
        if got.get(ok) not in (14, 15, 16):  # the offsets topic is still loading
            break
        time.sleep(0.3)
    assert got == {ok: 0, no: KafkaError.GROUP_AUTHORIZATION_FAILED}, got
    # Only denied keys: each answered with the error, nothing asked of the coordinator.
    assert find_coordinator_v4(acl_broker.address, "alice", [no]) == {no: KafkaError.GROUP_AUTHORIZATION_FAILED}


def test_cli_command_config_authenticates_every_command(acl_broker, moldau_bin, tmp_path):
    """`--command-config` takes a Kafka client properties file (the same one Kafka's tools
    take): with it the CLI authenticates; without it, or with a wrong password, it fails."""
    import subprocess
    good = tmp_path / "admin.properties"
    good.write_text(
        "# as for kafka-topics.sh --command-config\n"
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        '    username="admin" password="admin-secret";\n')
    bad = tmp_path / "bad.properties"
    bad.write_text(good.read_text().replace('password="admin-secret"', 'password="nope"'))
    name = f"cli-{uuid.uuid4().hex[:6]}"

    def cli(*args, config=None):
        extra = ["--command-config", str(config)] if config else []
        return subprocess.run([str(moldau_bin), *args, "-b", acl_broker.bootstrap, "--timeout-ms", "10000",
                               *extra], capture_output=True, timeout=120)

    out = cli("topic", "create", name, config=good)
    assert out.returncode == 0, out.stderr.decode()
    out = cli("topic", "list", config=good)
    assert out.returncode == 0 and name in out.stdout.decode(), out
    out = cli("topic", "list", config=bad)
    assert out.returncode != 0 and "SASL_AUTHENTICATION_FAILED" in out.stderr.decode(), out
    assert b"nope" not in out.stderr
    # Without it the broker closes the unauthenticated connection: the command fails.
    assert cli("topic", "list").returncode != 0


def offset_fetch_v8(address, user: str, groups: list[str]) -> dict[str, tuple[int, dict]]:
    """OffsetFetch v8 (several groups, all topics) after SASL/PLAIN as `user`:
    group -> (error code, {(topic, partition): committed offset})."""
    from test_cluster_security import compact, read_uvarint
    from test_security import sasl_authenticate, sasl_handshake
    with kwire.connect(address) as s:
        assert sasl_handshake(s, "PLAIN")[0] == 0
        assert sasl_authenticate(s, f"\0{user}\0{user}-secret".encode())[0] == 0
        body = (kwire.uvarint(len(groups) + 1)
                + b"".join(compact(g.encode()) + kwire.uvarint(0) + b"\x00" for g in groups)
                + b"\x00" + b"\x00")  # require_stable false, tags
        s.sendall(kwire.request(9, 8, 5, body, flexible=True))
        frame = kwire.recv_frame(s)
    at = 4 + 1 + 4  # correlation id, header tags, throttle
    n, at = read_uvarint(frame, at)
    out = {}
    for _ in range(n - 1):
        glen, at = read_uvarint(frame, at)
        group = frame[at:at + glen - 1].decode()
        at += glen - 1
        offsets = {}
        nt, at = read_uvarint(frame, at)
        for _ in range(max(nt - 1, 0)):
            tlen, at = read_uvarint(frame, at)
            topic = frame[at:at + tlen - 1].decode()
            at += tlen - 1
            np_, at = read_uvarint(frame, at)
            for _ in range(max(np_ - 1, 0)):
                part, offset = struct.unpack(">iq", frame[at:at + 12])
                at += 12 + 4  # partition, offset, leader epoch
                mlen, at = read_uvarint(frame, at)
                at += max(mlen - 1, 0) + 2  # metadata, error code
                _, at = read_uvarint(frame, at)
                offsets[(topic, part)] = offset
            _, at = read_uvarint(frame, at)
        (error,) = struct.unpack(">h", frame[at:at + 2])
        at += 2
        _, at = read_uvarint(frame, at)
        out[group] = (error, offsets)
    return out


def test_offset_fetch_v8_answers_each_group(acl_broker, topic):
    """One denied group in an OffsetFetch v8 gets GROUP_AUTHORIZATION_FAILED; the allowed group
    in the same request gets its offsets (Kafka answers per group; this denied the request)."""
    tag = uuid.uuid4().hex[:6]
    ok, no = f"of-ok-{tag}", f"of-no-{tag}"
    create_topic(acl_broker, topic)
    create_acls(acl_broker, [allow("alice", ResourceType.GROUP, ok, AclOperation.READ),
                             allow("alice", ResourceType.TOPIC, topic, AclOperation.READ)])
    c = Consumer({"bootstrap.servers": acl_broker.bootstrap, "group.id": ok, **rd("admin")})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
    finally:
        c.close()
    deadline = time.monotonic() + 30
    got = {}
    while time.monotonic() < deadline:
        got = offset_fetch_v8(acl_broker.address, "alice", [no, ok])
        if got.get(ok, (14,))[0] not in (14, 15, 16):  # the offsets topic is still loading
            break
        time.sleep(0.3)
    assert list(got) == [no, ok], got  # the request's order
    assert got[no] == (KafkaError.GROUP_AUTHORIZATION_FAILED, {}), got
    assert got[ok] == (0, {(topic, 0): 7}), got
    # Only denied groups: answered without the coordinator.
    assert offset_fetch_v8(acl_broker.address, "alice", [no]) == {no: (KafkaError.GROUP_AUTHORIZATION_FAILED, {})}


def describe_groups_v0(address, user: str, groups: list[str]) -> list[tuple[str, int]]:
    """DescribeGroups v0 after SASL/PLAIN as `user`: [(group, error code)] in the answer's
    order (the groups must have no members)."""
    from test_security import sasl_authenticate, sasl_handshake
    with kwire.connect(address) as s:
        assert sasl_handshake(s, "PLAIN")[0] == 0
        assert sasl_authenticate(s, f"\0{user}\0{user}-secret".encode())[0] == 0
        body = kwire.i32(len(groups)) + b"".join(kwire.string(g) for g in groups)
        s.sendall(kwire.request(15, 0, 5, body))
        frame = kwire.recv_frame(s)
    at = 4  # correlation id
    (n,) = struct.unpack(">i", frame[at:at + 4])
    at += 4
    out = []

    def string(at: int) -> tuple[str, int]:
        (length,) = struct.unpack(">h", frame[at:at + 2])
        return frame[at + 2:at + 2 + max(length, 0)].decode(), at + 2 + max(length, 0)

    for _ in range(n):
        (error,) = struct.unpack(">h", frame[at:at + 2])
        group, at = string(at + 2)
        for _ in range(3):  # state, protocol type, protocol
            _, at = string(at)
        (members,) = struct.unpack(">i", frame[at:at + 4])
        assert members == 0, frame
        at += 4
        out.append((group, error))
    return out


def test_describe_groups_answers_denied_groups_first(acl_broker):
    """As Kafka's handleDescribeGroupsRequest: the groups the caller may not describe come
    first (GROUP_AUTHORIZATION_FAILED, in the request's order), then what the coordinator
    answers for the others. The differential harness sorts groups, so this checks the order."""
    tag = uuid.uuid4().hex[:6]
    ok, no1, no2 = f"dg-ok-{tag}", f"dg-no1-{tag}", f"dg-no2-{tag}"
    create_acls(acl_broker, [allow("alice", ResourceType.GROUP, ok, AclOperation.DESCRIBE)])
    deadline = time.monotonic() + 30
    got = []
    while time.monotonic() < deadline:
        got = describe_groups_v0(acl_broker.address, "alice", [ok, no1, no2])
        if dict(got).get(ok) not in (14, 15):  # the offsets topic is still loading
            break
        time.sleep(0.3)
    assert got == [(no1, KafkaError.GROUP_AUTHORIZATION_FAILED),
                   (no2, KafkaError.GROUP_AUTHORIZATION_FAILED), (ok, 0)], got
