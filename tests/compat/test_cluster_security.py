"""Inter-broker and controller security on a real 3-node cluster (issue 14): every node's
inter-broker listener is SASL_PLAINTEXT (or SASL_SSL) with PLAIN, the CONTROLLER listener is
SASL_PLAINTEXT, ACLs are on and only the brokers' own user is a super user (no
User:ANONYMOUS), so replica fetchers, transaction markers, KIP-890 verification, Raft traffic,
registrations and forwarded requests must authenticate as the broker user to work at all. confluent-kafka and kafka-python then
replicate (RF=3), survive the leader's death and run a transaction across brokers; a broker
whose inter-broker password is wrong cannot replicate."""

from __future__ import annotations

import re
import struct
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import kwire
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from conftest import LISTEN_RE, START_TIMEOUT_S
from ports import free_port

DEADLINE_S = 60.0


def jaas(password: str) -> str:
    # Kafka's broker JAAS for PLAIN: the broker's own user (username/password, what it sends to
    # other brokers) and the users it accepts (user_<name>).
    return ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="broker" password="{password}" '
            'user_broker="broker-secret" user_alice="alice-secret";')


# Set by the SASL_SSL test: the CA clients trust.
CLIENT_TLS: dict = {}


def rd(user: str = "alice") -> dict:
    c = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
         "sasl.username": user, "sasl.password": f"{user}-secret", "socket.timeout.ms": 10000}
    if CLIENT_TLS:
        c.update({"security.protocol": "SASL_SSL", "ssl.ca.location": CLIENT_TLS["ca"]})
    return c


def kp(user: str = "alice") -> dict:
    c = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
             sasl_plain_username=user, sasl_plain_password=f"{user}-secret")
    if CLIENT_TLS:
        c.update(security_protocol="SASL_SSL", ssl_cafile=CLIENT_TLS["ca"])
    return c


def wait_for(what: str, fn, timeout: float = DEADLINE_S):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except Exception as e:  # noqa: BLE001 - clients raise many kinds while a cluster forms
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.2)
    pytest.fail(f"{what}: still {last!r} after {timeout}s")


class SecureCluster:
    """Three combined broker+controller nodes whose broker listener is SASL_PLAINTEXT."""

    def __init__(self, binary: Path, base: Path):
        self.binary = binary
        self.base = base
        self.ports = {i: free_port() for i in (1, 2, 3)}
        self.controller_ports = {i: free_port() for i in (1, 2, 3)}
        self.procs: dict[int, subprocess.Popen] = {}
        self.passwords = {i: "broker-secret" for i in (1, 2, 3)}
        # SASL_PLAINTEXT, or SASL_SSL with these TLS settings.
        self.listener = "SASL_PLAINTEXT"
        self.tls: dict[str, str] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports.values())

    def log(self, i: int) -> str:
        return (self.base / f"node-{i}.log").read_text(errors="replace")

    def args(self, i: int) -> list[str]:
        voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in self.controller_ports.items())
        settings = {
            "node.id": i,
            "process.roles": "broker,controller",
            "listeners": f"{self.listener}://127.0.0.1:{self.ports[i]},CONTROLLER://127.0.0.1:{self.controller_ports[i]}",
            # The controller listener authenticates too: voters and brokers reach it as the
            # broker user (sasl.mechanism.controller.protocol), with the right password even
            # on a node whose inter-broker password is wrong.
            "listener.security.protocol.map": f"{self.listener}:{self.listener},CONTROLLER:SASL_PLAINTEXT",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": jaas("broker-secret"),
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": voters,
            "inter.broker.listener.name": self.listener,
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            f"listener.name.{self.listener.lower()}.plain.sasl.jaas.config": jaas(self.passwords[i]),
            **self.tls,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:broker",
            "cluster.id": "c2VjdXJlLWNsdXN0ZXItMQ",
            "replica.lag.time.max.ms": 3000,
        }
        args = [str(self.binary), "server", "--data-dir", str(self.base / f"node-{i}")]
        for k, v in settings.items():
            args += ["--set", f"{k}={v}"]
        return args

    def spawn(self, i: int) -> None:
        log = open(self.base / f"node-{i}.log", "ab")
        self.procs[i] = subprocess.Popen(self.args(i), stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()

    def wait_listening(self, i: int) -> None:
        def listening():
            if self.procs[i].poll() is not None:
                pytest.fail(f"node {i} exited\n{self.log(i)[-4000:]}")
            return any(LISTEN_RE.match(line) for line in self.log(i).splitlines())
        wait_for(f"node {i} listening", listening, START_TIMEOUT_S * 2)

    def start(self) -> "SecureCluster":
        for i in self.ports:
            self.spawn(i)
        for i in self.ports:
            self.wait_listening(i)
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **rd("broker")})
        wait_for("3 brokers in the metadata", lambda: sorted(admin.list_topics(timeout=5).brokers) == [1, 2, 3])
        return self

    def stop(self, i: int) -> None:
        p = self.procs.pop(i)
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)

    def kill9(self, i: int) -> None:
        p = self.procs.pop(i)
        p.kill()
        p.wait(timeout=10)

    def stop_all(self) -> None:
        for i in list(self.procs):
            self.stop(i)


@pytest.fixture
def cluster(moldau_bin, tmp_path):
    c = SecureCluster(moldau_bin, tmp_path)
    try:
        yield c
    finally:
        c.stop_all()


def grant_alice(bootstrap: str) -> None:
    """alice may do anything to topics, groups and transactional ids, and write idempotently;
    the ACLs are created by the brokers' super user."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **rd("broker")})
    bindings = [
        AclBinding(rtype, "*", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.ALL,
                   AclPermissionType.ALLOW)
        for rtype in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)
    ] + [AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:alice", "*",
                    AclOperation.IDEMPOTENT_WRITE, AclPermissionType.ALLOW)]
    for f in admin.create_acls(bindings).values():
        f.result(timeout=20)


def isr(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int]]]:
    """partition -> (leader, ISR) as alice sees it."""
    md = AdminClient({"bootstrap.servers": bootstrap, **rd()}).list_topics(topic, timeout=10)
    return {p.id: (p.leader, sorted(p.isrs)) for p in md.topics[topic].partitions.values()}


def read_all(bootstrap: str, topic: str, n: int, isolation: str = "read_committed") -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "isolation.level": isolation, **rd()})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def test_brokers_replicate_and_run_transactions_over_a_sasl_inter_broker_listener(cluster):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    cluster.start()
    grant_alice(cluster.bootstrap)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **rd()})
    topic = f"rf3-{uuid.uuid4().hex[:8]}"
    for f in admin.create_topics([NewTopic(topic, 3, 3)]).values():
        f.result(timeout=30)
    wait_for("RF=3 topic with 3 in-sync replicas everywhere",
             lambda: (lambda s: len(s) == 3 and all(r == [1, 2, 3] for _, r in s.values()))(isr(cluster.bootstrap, topic)))

    # confluent-kafka and kafka-python produce with acks=all (every ISR member has it).
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True, **rd()})
    for i in range(30):
        p.produce(topic, value=f"c{i}".encode(), partition=i % 3)
    assert p.flush(30) == 0
    kpp = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", **kp())
    for i in range(30):
        kpp.send(topic, value=f"k{i}".encode(), partition=i % 3).get(timeout=30)
    kpp.close()

    # Still 3 in-sync replicas after several replica.lag.time.max.ms: followers fetch.
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        assert all(r == [1, 2, 3] for _, r in isr(cluster.bootstrap, topic).values())
        time.sleep(0.5)

    # The leader of partition 0 dies (kill -9): the new leader was a follower and has every
    # acknowledged record, which kafka-python reads back.
    leader = isr(cluster.bootstrap, topic)[0][0]
    cluster.kill9(leader)
    alive = ",".join(f"127.0.0.1:{cluster.ports[i]}" for i in cluster.procs)
    wait_for("a new leader for partition 0", lambda: isr(alive, topic)[0][0] not in (leader, -1))
    c = KafkaConsumer(bootstrap_servers=alive, auto_offset_reset="earliest", consumer_timeout_ms=20000, **kp())
    c.assign([TopicPartition(topic, 0)])
    values = set()
    for m in c:
        values.add(m.value)
        if len(values) == 20:
            break
    c.close()
    assert values == {f"c{i}".encode() for i in range(0, 30, 3)} | {f"k{i}".encode() for i in range(0, 30, 3)}

    # Start it again; a transaction spans partitions led by different brokers, so the
    # coordinator's markers and the leaders' verification cross the SASL listener.
    cluster.spawn(leader)
    cluster.wait_listening(leader)
    wait_for("the restarted broker back in every ISR",
             lambda: all(r == [1, 2, 3] for _, r in isr(cluster.bootstrap, topic).values()))
    txt = f"txn-{uuid.uuid4().hex[:8]}"
    for f in admin.create_topics([NewTopic(txt, 3, 3)]).values():
        f.result(timeout=30)
    wait_for("txn topic leaders", lambda: len({l for l, _ in isr(cluster.bootstrap, txt).values()} - {-1}) >= 2)
    tp = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txt, **rd()})
    tp.init_transactions(30)
    tp.begin_transaction()
    for i in range(9):
        tp.produce(txt, value=f"t{i}".encode(), partition=i % 3)
    tp.commit_transaction(30)
    tp.begin_transaction()
    tp.produce(txt, value=b"aborted", partition=0)
    tp.flush(10)
    tp.abort_transaction(30)
    got = read_all(cluster.bootstrap, txt, 9)
    assert sorted(got) == sorted(f"t{i}".encode() for i in range(9))
    # kafka-python reads committed data only too.
    kc = KafkaConsumer(txt, bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                       isolation_level="read_committed", consumer_timeout_ms=15000,
                       group_id=f"kg-{uuid.uuid4().hex[:6]}", **kp())
    seen = []
    for m in kc:
        seen.append(m.value)
        if len(seen) == 9:
            break
    kc.close()
    assert sorted(seen) == sorted(got)


def test_a_broker_with_wrong_inter_broker_credentials_cannot_replicate(cluster, tmp_path):
    """Over SASL_SSL (the listener's own PEM stores: its truststore checks the peer's
    certificate and host name, its keystore is the client certificate): nodes 1 and 2
    replicate to each other, node 3 with the wrong password cannot."""
    d = tmp_path / "certs"
    d.mkdir()
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                  "extendedKeyUsage=serverAuth,clientAuth\n")
    for args in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=ca",
         "-keyout", "ca.key", "-out", "ca.pem"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key",
         "-out", "server.csr"],
        ["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
         "-days", "2", "-out", "server.pem", "-extfile", "server.ext"],
    ):
        out = subprocess.run(["openssl", *args], cwd=d, capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
    (d / "keystore.pem").write_text((d / "server.pem").read_text() + (d / "server.key").read_text())
    cluster.listener = "SASL_SSL"
    cluster.tls = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(d / "keystore.pem"),
                   "ssl.truststore.type": "PEM", "ssl.truststore.location": str(d / "ca.pem")}
    CLIENT_TLS["ca"] = str(d / "ca.pem")
    try:
        wrong_credentials_cannot_replicate(cluster)
    finally:
        CLIENT_TLS.clear()


def wrong_credentials_cannot_replicate(cluster):
    cluster.passwords[3] = "wrong-secret"
    cluster.start()
    grant_alice(cluster.bootstrap)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **rd()})
    topic = f"bad-{uuid.uuid4().hex[:8]}"
    for f in admin.create_topics([NewTopic(topic, 3, 3)]).values():
        f.result(timeout=30)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **rd()})
    for i in range(9):
        p.produce(topic, value=b"x", partition=i % 3)
    assert p.flush(30) == 0
    # Node 3 is refused by the leaders (its fetchers cannot authenticate), falls out of the ISR
    # of the partitions it follows and never fetches a byte; nodes 1 and 2 replicate.
    wait_for("node 3 logs the refusal",
             lambda: "refused this broker's inter-broker authentication" in cluster.log(3))
    wait_for("node 3 out of the ISR of partitions others lead",
             lambda: all(3 not in r for l, r in isr(cluster.bootstrap, topic).values() if l != 3))
    assert all(sorted(r) == [1, 2] or l == 3 for l, r in isr(cluster.bootstrap, topic).values()), \
        isr(cluster.bootstrap, topic)
    assert "refused this broker's inter-broker authentication" not in cluster.log(1)


# ------------------------------------------------------------------ forged controller requests

def compact(b: bytes) -> bytes:
    return kwire.uvarint(len(b) + 1) + b


def principal_bytes(name: str) -> bytes:
    """Kafka's DefaultPrincipalData v0, version-prefixed (DefaultKafkaPrincipalBuilder)."""
    return kwire.i16(0) + compact(b"User") + compact(name.encode()) + b"\x00\x00"


def create_acl_request(principal: str) -> bytes:
    """CreateAcls v3 (flexible) granting `principal` ALL on the cluster, header included."""
    creation = (kwire.i8(4) + compact(b"kafka-cluster") + kwire.i8(3) + compact(principal.encode())
                + compact(b"*") + kwire.i8(2) + kwire.i8(3) + b"\x00")
    return kwire.request(30, 3, 77, kwire.uvarint(2) + creation + b"\x00", flexible=True)[4:]


def read_uvarint(data: bytes, at: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        b = data[at]
        at += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, at


def send_envelope(sock, inner: bytes, principal: bytes) -> tuple[int, bytes | None]:
    """Envelope v0 wrapping `inner` as if forwarded for `principal` from 127.0.0.1; returns
    (error code, inner response frame)."""
    body = compact(inner) + compact(principal) + compact(bytes([127, 0, 0, 1])) + b"\x00"
    sock.sendall(kwire.request(58, 0, 9, body, flexible=True))
    frame = kwire.recv_frame(sock)
    assert frame[:4] == kwire.i32(9)
    n, at = read_uvarint(frame, 5)  # after the correlation id and empty header tags
    data = None
    if n:
        data = frame[at:at + n - 1]
        at += n - 1
    (error,) = struct.unpack(">h", frame[at:at + 2])
    return error, data


def create_acl_result(frame: bytes) -> int:
    """The first result's error code of a CreateAcls v3 response frame (header v1)."""
    at = 4 + 1 + 4  # correlation id, header tags, throttle
    _, at = read_uvarint(frame, at)
    (error,) = struct.unpack(">h", frame[at:at + 2])
    return error


def sasl_plain(sock, user: str) -> None:
    from test_security import sasl_authenticate, sasl_handshake
    assert sasl_handshake(sock, "PLAIN")[0] == 0
    error, message, _, _ = sasl_authenticate(sock, f"\0{user}\0{user}-secret".encode())
    assert error == 0, message


def cluster_acls(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AclBindingFilter
    admin = AdminClient({"bootstrap.servers": bootstrap, **rd("broker")})
    f = AclBindingFilter(ResourceType.BROKER, None, ResourcePatternType.ANY, None, None,
                         AclOperation.ANY, AclPermissionType.ANY)
    return {b.principal for b in admin.describe_acls(f).result(timeout=20)}


def test_forged_envelopes_on_the_controller_listener_are_refused(cluster):
    cluster.start()
    grant_alice(cluster.bootstrap)
    address = ("127.0.0.1", cluster.controller_ports[1])

    # Unauthenticated: the SASL gate closes the connection before anything is decided.
    with kwire.connect(address) as s:
        body = compact(create_acl_request("User:alice")) + compact(principal_bytes("broker")) \
            + compact(bytes([127, 0, 0, 1])) + b"\x00"
        s.sendall(kwire.request(58, 0, 9, body, flexible=True))
        assert kwire.wait_closed(s, 10)

    # alice authenticates but is no broker: forwarding needs CLUSTER_ACTION, whatever
    # principal the Envelope claims.
    with kwire.connect(address) as s:
        sasl_plain(s, "alice")
        assert send_envelope(s, create_acl_request("User:alice"), principal_bytes("broker")) == (31, None)

    # A broker forwards alice's request: the controller authorizes it as alice's. (Sent to
    # every controller listener until the active controller answers: leadership may move.)
    def as_broker(inner: bytes, principal: bytes) -> tuple[int, bytes | None]:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            for port in cluster.controller_ports.values():
                with kwire.connect(("127.0.0.1", port)) as s:
                    sasl_plain(s, "broker")
                    error, inner_resp = send_envelope(s, inner, principal)
                if error != 41 or time.monotonic() > deadline:  # NOT_CONTROLLER
                    return error, inner_resp
            time.sleep(0.2)

    error, inner = as_broker(create_acl_request("User:alice"), principal_bytes("alice"))
    assert error == 0 and create_acl_result(inner) == 31
    # The same request as the broker user's own is allowed (the control).
    error, inner = as_broker(create_acl_request("User:carol"), principal_bytes("broker"))
    assert error == 0 and create_acl_result(inner) == 0
    # An Envelope without a readable principal is refused.
    assert as_broker(create_acl_request("User:alice"), b"\x00\x07junk")[0] == 97

    acls = cluster_acls(cluster.bootstrap)
    assert "User:carol" in acls and "User:alice" in acls  # alice's IDEMPOTENT_WRITE from grant_alice
    admin2 = AdminClient({"bootstrap.servers": cluster.bootstrap, **rd("broker")})
    from confluent_kafka.admin import AclBindingFilter
    alls = admin2.describe_acls(AclBindingFilter(
        ResourceType.BROKER, None, ResourcePatternType.ANY, "User:alice", None, AclOperation.ALL,
        AclPermissionType.ANY)).result(timeout=20)
    assert alls == [], alls
