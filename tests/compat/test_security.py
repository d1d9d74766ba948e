"""SASL on a SASL_PLAINTEXT listener, with real clients against a real `moldau server`:
PLAIN users from Kafka's JAAS config key, SCRAM-SHA-256/512 credentials created with
AlterUserScramCredentials (confluent-kafka's admin) and read back with
DescribeUserScramCredentials (kafka-python's admin), produce and consume with confluent-kafka
(librdkafka), kafka-python and kcat over each mechanism; wrong passwords, unknown mechanisms,
requests before authentication and oversized tokens get Kafka's answer or a closed connection
while the broker keeps serving; a listener that cannot be secured as configured stops the broker
at startup naming the key, never serving it in plaintext.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

import clients
import kwire

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required '
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)

SASL_SETTINGS = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
}


def rdkafka_sasl(mechanism: str, user: str, password: str) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def kp_sasl(mechanism: str, user: str, password: str) -> dict:
    return dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                sasl_plain_username=user, sasl_plain_password=password)


@pytest.fixture(scope="module")
def sasl_broker(request, moldau_bin, tmp_path_factory):
    from conftest import BrokerPool, _report_pool
    pool = BrokerPool(moldau_bin, tmp_path_factory.mktemp("moldau-sasl"))
    server = pool.start("sasl", **SASL_SETTINGS)
    # SCRAM users are created over an authenticated PLAIN connection, as with Kafka.
    admin = AdminClient({"bootstrap.servers": server.bootstrap, "socket.timeout.ms": 10000,
                         **rdkafka_sasl("PLAIN", "admin", "admin-secret")})
    alterations = [
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                     b"carol-secret", b"carol-salt"),
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                     b"carol-secret"),
    ]
    # One mechanism per request: Kafka answers DUPLICATE_RESOURCE for a user named twice.
    for alteration in alterations:
        for user, fut in admin.alter_user_scram_credentials([alteration]).items():
            fut.result(timeout=20)
    yield server
    _report_pool(request, pool)


def roundtrip_confluent(bootstrap: str, topic: str, conf: dict, n: int = 5) -> None:
    """Produces with confluent-kafka and reads back with kcat (both librdkafka; the read is
    group-less, so it needs no group coordinator)."""
    records = [{"key": b"k%d" % i, "value": b"confluent-%d" % i} for i in range(n)]
    clients.confluent_produce(bootstrap, topic, records, **{k.replace(".", "_"): v for k, v in conf.items()})
    sec = [a for k, v in conf.items() for a in ("-X", f"{k}={v}")]
    consumed = subprocess.run(["kcat", "-b", bootstrap, *sec, "-C", "-t", topic, "-p", "0",
                               "-o", "beginning", "-c", str(n), "-e"], capture_output=True, timeout=30)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == [r["value"] for r in records]


def roundtrip_kafka_python(bootstrap: str, topic: str, conf: dict, n: int = 5) -> None:
    from kafka import KafkaConsumer, TopicPartition
    records = [{"key": b"k%d" % i, "value": b"kafka-python-%d" % i} for i in range(n)]
    clients.kp_produce(bootstrap, topic, records, **conf)
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", request_timeout_ms=10000,
                      fetch_max_wait_ms=100, **conf)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got = []
        deadline = time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                got.extend(r.value for r in recs)
        assert got == [r["value"] for r in records]
    finally:
        c.close()


@pytest.mark.parametrize("mechanism,user,password", [
    ("PLAIN", "alice", "alice-secret"),
    ("SCRAM-SHA-256", "carol", "carol-secret"),
    ("SCRAM-SHA-512", "carol", "carol-secret"),
    # A Moldau extension: PLAIN also checks a user's SCRAM credentials.
    ("PLAIN", "carol", "carol-secret"),
])
def test_confluent_and_kafka_python_authenticate_and_stream(sasl_broker, topic, mechanism, user, password):
    roundtrip_confluent(sasl_broker.bootstrap, topic + "-c", rdkafka_sasl(mechanism, user, password))
    roundtrip_kafka_python(sasl_broker.bootstrap, topic + "-k", kp_sasl(mechanism, user, password))


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_kcat_authenticates(sasl_broker, topic, mechanism):
    user, password = ("alice", "alice-secret") if mechanism == "PLAIN" else ("carol", "carol-secret")
    sec = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanism={mechanism}",
           "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
    produced = subprocess.run(["kcat", "-b", sasl_broker.bootstrap, *sec, "-P", "-t", topic, "-p", "0"],
                              input=b"one\ntwo\n", capture_output=True, timeout=30)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(["kcat", "-b", sasl_broker.bootstrap, *sec, "-C", "-t", topic, "-p", "0",
                               "-o", "beginning", "-c", "2", "-e"], capture_output=True, timeout=30)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == [b"one", b"two"]


def test_scram_credentials_are_described_and_deleted(sasl_broker):
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=sasl_broker.bootstrap, request_timeout_ms=10000,
                             **kp_sasl("PLAIN", "admin", "admin-secret"))
    try:
        described = admin.describe_user_scram_credentials(["carol"])
        text = repr(described)
        assert "carol" in text and "8192" in text and "4096" in text, text
    finally:
        admin.close()
    ca = AdminClient({"bootstrap.servers": sasl_broker.bootstrap, "socket.timeout.ms": 10000,
                      **rdkafka_sasl("SCRAM-SHA-256", "carol", "carol-secret")})
    got = ca.describe_user_scram_credentials(["carol", "nobody"])
    infos = got["carol"].result(timeout=20)
    assert sorted((i.mechanism, i.iterations) for i in infos.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 4096)]
    with pytest.raises(KafkaException) as err:
        got["nobody"].result(timeout=20)
    assert "RESOURCE_NOT_FOUND" in str(err.value) or "does not exist" in str(err.value)


def sasl_handshake(sock, mechanism: str, version: int = 1, correlation_id: int = 3):
    body = kwire.string(mechanism)
    sock.sendall(kwire.request(17, version, correlation_id, body))
    r = kwire.Reader(kwire.recv_frame(sock))
    assert r.i32() == correlation_id
    error = r.i16()
    mechanisms = [r.string() for _ in range(r.array_len())]
    return error, mechanisms


def sasl_authenticate(sock, token: bytes, correlation_id: int = 4):
    """SaslAuthenticate v1 (not flexible): error, message, auth bytes, session lifetime."""
    sock.sendall(kwire.request(36, 1, correlation_id, kwire.bytes32(token)))
    r = kwire.Reader(kwire.recv_frame(sock))
    assert r.i32() == correlation_id
    error = r.i16()
    message = r.string()
    auth = r.bytes32()
    lifetime = r.i64()
    return error, message, auth, lifetime


def test_bad_sasl_input_gets_kafkas_answer_and_the_broker_keeps_serving(sasl_broker):
    addr = sasl_broker.address
    # Wrong password: SASL_AUTHENTICATION_FAILED with Kafka's message, then closed.
    with kwire.connect(addr) as s:
        assert sasl_handshake(s, "PLAIN") == (0, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
        error, message, _, _ = sasl_authenticate(s, b"\0alice\0wrong")
        assert error == 58 and message == "Authentication failed: Invalid username or password"
        assert kwire.wait_closed(s, 10)
    # Unknown user over SCRAM: the same code, Kafka's generic message.
    with kwire.connect(addr) as s:
        sasl_handshake(s, "SCRAM-SHA-256")
        error, message, _, _ = sasl_authenticate(s, b"n,,n=nobody,r=abcdefgh")
        assert error == 58, message
        assert kwire.wait_closed(s, 10)
    # A mechanism not enabled: UNSUPPORTED_SASL_MECHANISM with the enabled ones, then closed.
    with kwire.connect(addr) as s:
        error, mechanisms = sasl_handshake(s, "GSSAPI")
        assert error == 33 and "PLAIN" in mechanisms
        assert kwire.wait_closed(s, 10)
    # Requests before authentication: closed without an answer (Metadata v1 here).
    with kwire.connect(addr) as s:
        s.sendall(kwire.request(3, 1, 5, kwire.i32(-1)))
        assert kwire.wait_closed(s, 10)
    # A token frame larger than sasl.server.max.receive.size before authentication: closed
    # after the size prefix, before the broker reads (or allocates) the body.
    with kwire.connect(addr) as s:
        s.sendall(struct.pack(">i", 4 << 20) + b"\0" * 1024)
        assert kwire.wait_closed(s, 10)
    # A truncated SaslAuthenticate body: closed.
    with kwire.connect(addr) as s:
        sasl_handshake(s, "PLAIN")
        frame = kwire.request(36, 1, 9, kwire.i32(100) + b"short")
        s.sendall(frame)
        assert kwire.wait_closed(s, 10)
    # ApiVersions is answered before authentication; a correct exchange then serves requests.
    with kwire.connect(addr) as s:
        assert kwire.api_versions(s).error_code == 0
        assert sasl_handshake(s, "PLAIN")[0] == 0
        error, _, _, lifetime = sasl_authenticate(s, b"\0alice\0alice-secret")
        assert (error, lifetime) == (0, 0)
        # Authenticated: a second handshake is an ordinary request answered ILLEGAL_SASL_STATE.
        assert sasl_handshake(s, "PLAIN", correlation_id=11)[0] == 34
    kwire.assert_serving(sasl_broker)
    roundtrip_confluent(sasl_broker.bootstrap, "after-bad-input", rdkafka_sasl("PLAIN", "alice", "alice-secret"), n=1)


def test_wrong_password_fails_the_clients(sasl_broker):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KPError
    # kafka-python retries the bootstrap until its deadline, then gives up.
    with pytest.raises(KPError):
        KafkaProducer(bootstrap_servers=sasl_broker.bootstrap, max_block_ms=5000,
                      request_timeout_ms=5000, **kp_sasl("SCRAM-SHA-256", "carol", "nope"))
    errors = []
    admin = AdminClient({"bootstrap.servers": sasl_broker.bootstrap, "socket.timeout.ms": 5000,
                         "error_cb": errors.append, **rdkafka_sasl("PLAIN", "alice", "nope")})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        admin.poll(0.2)
    assert any("uthentication" in str(e) for e in errors), errors


def test_sasl_handshake_on_a_plaintext_listener_is_illegal_state(broker):
    with kwire.connect(broker.address) as s:
        assert sasl_handshake(s, "PLAIN") == (34, [])
        # The connection stays usable, as in Kafka.
        assert kwire.api_versions(s).error_code == 0


def test_reauthentication_keeps_clients_working(brokers, topic):
    server = brokers.start("reauth", **SASL_SETTINGS, **{"connections.max.reauth.ms": 1500})
    with kwire.connect(server.address) as s:
        sasl_handshake(s, "PLAIN")
        error, _, _, lifetime = sasl_authenticate(s, b"\0alice\0alice-secret")
        assert (error, lifetime) == (0, 1500)
    conf = rdkafka_sasl("PLAIN", "alice", "alice-secret")
    p = clients.confluent_producer(server.bootstrap, **{k.replace(".", "_"): v for k, v in conf.items()})
    delivered = []
    deadline = time.monotonic() + 5
    i = 0
    # Keep one connection busy across several session lifetimes: librdkafka re-authenticates
    # (KIP-368) instead of being cut off.
    while time.monotonic() < deadline:
        p.produce(topic, value=b"v%d" % i, partition=0, on_delivery=lambda e, m: delivered.append(e))
        p.flush(10)
        i += 1
        time.sleep(0.2)
    assert delivered and all(e is None for e in delivered), delivered[:3]
    # A raw connection that does not re-authenticate is closed once its session expires.
    with kwire.connect(server.address) as s:
        sasl_handshake(s, "PLAIN")
        assert sasl_authenticate(s, b"\0alice\0alice-secret")[0] == 0
        deadline = time.monotonic() + 30
        closed = False
        while time.monotonic() < deadline and not closed:
            try:
                kwire.api_versions(s, correlation_id=21)
                time.sleep(0.3)
            except (kwire.ProtocolError, OSError):
                closed = True
        assert closed


@pytest.mark.parametrize("settings,key", [
    # Kafka's default keystore type (JKS) is not read: never a plaintext downgrade.
    ({"listeners": "SASL_SSL://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN"}, "ssl.keystore.type"),
    # A TLS controller listener needs its PEM stores like any other.
    ({"listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL"}, "ssl.keystore.type"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
      "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.controller.protocol": "SCRAM-SHA-256"},
     "sasl.mechanism.controller.protocol"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "sasl.enabled.mechanisms"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,GSSAPI"},
     "sasl.enabled.mechanisms"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0",
      "listener.security.protocol.map": "PLAINTEXT:SASL_WHATEVER"}, "listener.security.protocol.map"),
    ({"listener.name.nope.plain.sasl.jaas.config": PLAIN_JAAS}, "listener.name.nope.plain.sasl.jaas.config"),
])
def test_unservable_security_config_is_a_startup_error_naming_the_key(moldau_bin, tmp_path, settings, key):
    args = [str(moldau_bin), "server", "--data-dir", str(tmp_path / "d")]
    for k, v in settings.items():
        args += ["--set", f"{k}={v}"]
    out = subprocess.run(args, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    assert out.returncode != 0
    assert b"listening on" not in out.stdout
    assert key.encode() in out.stderr, out.stderr
    # Passwords never appear in the error.
    assert b"admin-secret" not in out.stderr


# ------------------------------------------------------------------------------------- TLS

def openssl(*args: str, cwd) -> None:
    out = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A throw-away CA, a server certificate for 127.0.0.1 and two client certificates (one
    from another CA), made with openssl for this run only."""
    d = tmp_path_factory.mktemp("certs")
    # Extensions make X.509 v3 certificates (webpki refuses v1).
    ext = d / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    client_ext = d / "client.ext"
    client_ext.write_text("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    for ca in ("ca", "rogue-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={ca}",
                "-keyout", f"{ca}.key", "-out", f"{ca}.pem", cwd=d)

    def issue(name: str, subject: str, ca: str, extfile: str):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
                "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        args = ["x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", extfile]
        openssl(*args, cwd=d)

    issue("server", "/CN=127.0.0.1", "ca", str(ext))
    issue("client", "/CN=app1/OU=payments/O=Moldau", "ca", str(client_ext))
    issue("rogue", "/CN=intruder", "rogue-ca", str(client_ext))
    # Kafka's PEM keystore: the certificate chain and the private key in one file.
    (d / "server-keystore.pem").write_text((d / "server.pem").read_text() + (d / "server.key").read_text())
    return d


def tls_settings(certs, listener: str = "SSL", **extra) -> dict:
    s = {"listeners": f"{listener}://127.0.0.1:0",
         "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "server-keystore.pem"),
         "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs / "ca.pem")}
    s.update(extra)
    return s


def start_tls_broker(brokers, certs, **settings):
    """Starts a broker whose only listener is TLS (the pool's readiness probe speaks plaintext,
    so this waits for the listen line and then for a TLS client to get metadata)."""
    from conftest import MoldauServer
    server = MoldauServer(brokers.binary, brokers.base / f"tls-{len(brokers.servers)}-data",
                          brokers.base / f"tls-{len(brokers.servers)}.log", settings)
    brokers.servers.append(server)
    server._wait_ready = lambda deadline: None
    return server.start()


def rdkafka_tls(certs, client: str | None = "client") -> dict:
    c = {"security.protocol": "SSL", "ssl.ca.location": str(certs / "ca.pem")}
    if client:
        c.update({"ssl.certificate.location": str(certs / f"{client}.pem"),
                  "ssl.key.location": str(certs / f"{client}.key")})
    return c


def kp_tls(certs, client: str | None = "client") -> dict:
    c = dict(security_protocol="SSL", ssl_cafile=str(certs / "ca.pem"), ssl_check_hostname=True)
    if client:
        c.update(ssl_certfile=str(certs / f"{client}.pem"), ssl_keyfile=str(certs / f"{client}.key"))
    return c


def wait_tls_metadata(bootstrap: str, conf: dict, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            AdminClient({"bootstrap.servers": bootstrap, **conf}).list_topics(timeout=5)
            return
        except KafkaException as e:
            last = e
            time.sleep(0.2)
    raise AssertionError(f"no metadata over TLS: {last}")


def test_tls_with_client_certificates(brokers, certs, topic):
    server = start_tls_broker(brokers, certs, **tls_settings(
        certs, **{"ssl.client.auth": "required",
                  "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=([^,]+).*$/$2-$1/L,DEFAULT"}))
    wait_tls_metadata(server.bootstrap, rdkafka_tls(certs))
    roundtrip_confluent(server.bootstrap, topic + "-c", rdkafka_tls(certs))
    roundtrip_kafka_python(server.bootstrap, topic + "-k", kp_tls(certs))
    # Without a certificate, or with one from another CA: the handshake fails, the broker
    # keeps serving.
    for conf in (rdkafka_tls(certs, client=None), rdkafka_tls(certs, client="rogue")):
        with pytest.raises(KafkaException):
            AdminClient({"bootstrap.servers": server.bootstrap, **conf}).list_topics(timeout=3)
    # Plaintext bytes to the TLS port: closed.
    with kwire.connect(server.address) as s:
        s.sendall(kwire.api_versions_request(0, 1))
        assert kwire.wait_closed(s, 15)
    roundtrip_confluent(server.bootstrap, topic + "-after", rdkafka_tls(certs), n=1)


def test_sasl_ssl_scram_and_tls_to_a_plaintext_port(brokers, certs, broker, topic):
    settings = tls_settings(certs, listener="SASL_SSL", **{
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS})
    server = start_tls_broker(brokers, certs, **settings)
    tls = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(certs / "ca.pem")}
    admin_conf = {**tls, "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"}
    wait_tls_metadata(server.bootstrap, admin_conf)
    admin = AdminClient({"bootstrap.servers": server.bootstrap, **admin_conf})
    up = UserScramCredentialUpsertion("dora", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"dora-pw")
    for fut in admin.alter_user_scram_credentials([up]).values():
        fut.result(timeout=20)
    scram = {**tls, "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "dora", "sasl.password": "dora-pw"}
    roundtrip_confluent(server.bootstrap, topic + "-c", scram)
    roundtrip_kafka_python(server.bootstrap, topic + "-k", dict(
        security_protocol="SASL_SSL", ssl_cafile=str(certs / "ca.pem"), sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="dora", sasl_plain_password="dora-pw"))
    # TLS to a plaintext port: the broker closes the connection and keeps serving.
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": broker.bootstrap,
                     "security.protocol": "SSL", "ssl.ca.location": str(certs / "ca.pem")}).list_topics(timeout=3)
    kwire.assert_serving(broker)


@pytest.mark.parametrize("extra,key", [
    ({"ssl.keystore.location": "/nonexistent/keystore.pem"}, "ssl.keystore.location"),
    ({"ssl.client.auth": "required", "ssl.truststore.location": "/nonexistent/ca.pem"},
     "ssl.truststore.location"),
    ({"ssl.keystore.type": "PKCS12"}, "ssl.keystore.type"),
])
def test_unusable_tls_files_stop_the_start_naming_the_key(moldau_bin, tmp_path, certs, extra, key):
    args = [str(moldau_bin), "server", "--data-dir", str(tmp_path / "d")]
    for k, v in {**tls_settings(certs), **extra}.items():
        args += ["--set", f"{k}={v}"]
    out = subprocess.run(args, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    assert out.returncode != 0
    assert b"listening on" not in out.stdout
    assert key.encode() in out.stderr, out.stderr
