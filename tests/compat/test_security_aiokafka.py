"""aiokafka in the security matrix: SSL with client certificates (mTLS), SASL_PLAINTEXT/PLAIN,
SASL_SSL/SCRAM-SHA-256 and SCRAM-SHA-512, each against a real `moldau server` with ACLs on
(`super.users=User:admin`). For each cell aiokafka is first denied (produce:
TopicAuthorizationFailedError, group consume: GroupAuthorizationFailedError, admin topic
creation: TOPIC_AUTHORIZATION_FAILED), then `moldau acl add` grants the principal what it needs
and the same produce, group consume with commit and topic creation succeed. Certificates are
made by openssl for the run (test_security.py's `certs`); SCRAM users by `moldau user add`.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid

import pytest

from test_security import certs, start_tls_broker, wait_tls_metadata  # noqa: F401

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" '
        'user_admin="admin-secret" user_alice="alice-secret";')
ACLS = {"authorizer.class.name": STANDARD_AUTHORIZER}
# Cells: (listener protocol, SASL mechanism or None for mTLS).
CELLS = [("SSL", None), ("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256"),
         ("SASL_SSL", "SCRAM-SHA-512")]


@pytest.fixture(scope="module")
def matrix(request, moldau_bin, certs, tmp_path_factory):  # noqa: F811
    """One broker per listener protocol, the CLI's admin config for each, and the SCRAM user."""
    from conftest import BrokerPool, _report_pool
    base = tmp_path_factory.mktemp("aiokafka-sec")
    pool = BrokerPool(moldau_bin, base)
    # A client certificate for the admin (principal User:CN=admin) next to the run's others.
    ext = certs / "client.ext"
    subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=admin",
                    "-keyout", "admin.key", "-out", "admin.csr"], cwd=certs, check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", "admin.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                    "-CAcreateserial", "-days", "2", "-out", "admin.pem", "-extfile", str(ext)],
                   cwd=certs, check=True, capture_output=True)
    (certs / "admin-keystore.pem").write_text((certs / "admin.pem").read_text() + (certs / "admin.key").read_text())
    tls = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "server-keystore.pem"),
           "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs / "ca.pem")}
    servers = {
        "SSL": start_tls_broker(pool, certs, **{"listeners": "SSL://127.0.0.1:0", **tls, **ACLS,
                                                 "ssl.client.auth": "required",
                                                 "super.users": "User:CN=admin"}),
        "SASL_PLAINTEXT": pool.start("sasl", **{
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS, **ACLS,
            "super.users": "User:admin"}),
        "SASL_SSL": start_tls_broker(pool, certs, **{
            "listeners": "SASL_SSL://127.0.0.1:0", **tls, **ACLS,
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS, "super.users": "User:admin"}),
    }
    configs = {}
    for proto, server in servers.items():
        cfg = base / f"{proto}.properties"
        lines = [f"security.protocol={proto}"]
        if proto != "SASL_PLAINTEXT":
            lines += [f"ssl.truststore.location={certs / 'ca.pem'}"]
        if proto == "SSL":
            lines += [f"ssl.keystore.location={certs / 'admin-keystore.pem'}"]
        else:
            lines += ["sasl.mechanism=PLAIN", "sasl.username=admin", "sasl.password=admin-secret"]
        cfg.write_text("\n".join(lines) + "\n")
        configs[proto] = cfg
    if_tls = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(certs / "ca.pem"),
              "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"}
    wait_tls_metadata(servers["SASL_SSL"].bootstrap, if_tls)
    wait_tls_metadata(servers["SSL"].bootstrap, {
        "security.protocol": "SSL", "ssl.ca.location": str(certs / "ca.pem"),
        "ssl.certificate.location": str(certs / "admin.pem"), "ssl.key.location": str(certs / "admin.key")})
    out = subprocess.run([str(moldau_bin), "user", "add", "scram-user", "--password-stdin",
                          "-b", servers["SASL_SSL"].bootstrap, "--command-config", str(configs["SASL_SSL"])],
                         input="scram-pw\n", capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    yield servers, configs
    _report_pool(request, pool)


def aio_security(certs, proto: str, mechanism: str | None) -> tuple[dict, str]:  # noqa: F811
    """aiokafka's keyword arguments for a cell, and the principal it authenticates as."""
    from aiokafka.helpers import create_ssl_context
    if proto == "SSL":
        ctx = create_ssl_context(cafile=str(certs / "ca.pem"), certfile=str(certs / "client.pem"),
                                 keyfile=str(certs / "client.key"))
        return dict(security_protocol="SSL", ssl_context=ctx), "User:O=Moldau,OU=payments,CN=app1"  # RFC 2253: last RDN first
    user, password = ("alice", "alice-secret") if mechanism == "PLAIN" else ("scram-user", "scram-pw")
    kw = dict(security_protocol=proto, sasl_mechanism=mechanism, sasl_plain_username=user,
              sasl_plain_password=password)
    if proto == "SASL_SSL":
        kw["ssl_context"] = create_ssl_context(cafile=str(certs / "ca.pem"))
    return kw, f"User:{user}"


async def produce(bootstrap: str, topic: str, sec: dict):
    from aiokafka import AIOKafkaProducer
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=15000, **sec)
    await p.start()
    try:
        return await asyncio.wait_for(p.send_and_wait(topic, b"v", partition=0), 30)
    finally:
        await p.stop()


async def group_read(bootstrap: str, topic: str, group: str, sec: dict) -> int:
    """Joins `group`, reads one record and commits; returns the committed offset."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                         auto_offset_reset="earliest", request_timeout_ms=15000, **sec)
    await c.start()
    try:
        got = await asyncio.wait_for(c.getone(), 40)
        await c.commit()
        assert got.value == b"v"
        return await c.committed(TopicPartition(topic, 0))
    finally:
        await c.stop()


async def create_topic(bootstrap: str, name: str, sec: dict):
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    a = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000, **sec)
    await a.start()
    try:
        return await a.create_topics([NewTopic(name, 1, 1)])
    finally:
        await a.close()


def topic_errors(resp) -> list[int]:
    return [t[1] for t in resp.topic_errors]


@pytest.mark.parametrize("proto,mechanism", CELLS, ids=[f"{p}-{m or 'mTLS'}" for p, m in CELLS])
def test_aiokafka_denied_then_allowed(matrix, certs, moldau_bin, proto, mechanism):  # noqa: F811
    from aiokafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
    servers, configs = matrix
    server = servers[proto]
    sec, principal = aio_security(certs, proto, mechanism)
    tag = uuid.uuid4().hex[:6]
    topic, group, created = f"aio-{tag}", f"aio-g-{tag}", f"aio-new-{tag}"

    def cli(*args):
        out = subprocess.run([str(moldau_bin), *args, "-b", server.bootstrap, "--timeout-ms", "15000",
                              "--command-config", str(configs[proto])],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr

    cli("topic", "create", topic, "--partitions", "1")
    # Denied: produce, group consume, topic creation.
    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(produce(server.bootstrap, topic, sec))
    assert topic_errors(asyncio.run(create_topic(server.bootstrap, created, sec))) == [29]
    cli("acl", "add", "--allow-principal", principal, "--operation", "Write", "--operation", "Describe",
        "--topic", topic)
    asyncio.run(produce(server.bootstrap, topic, sec))
    with pytest.raises((GroupAuthorizationFailedError, TopicAuthorizationFailedError)):
        asyncio.run(group_read(server.bootstrap, topic, group, sec))
    # Allowed: what the CLI grants.
    cli("acl", "add", "--allow-principal", principal, "--consumer", "--topic", topic, "--group", group)
    cli("acl", "add", "--allow-principal", principal, "--operation", "Create", "--topic", created)
    assert asyncio.run(group_read(server.bootstrap, topic, group, sec)) == 1
    assert topic_errors(asyncio.run(create_topic(server.bootstrap, created, sec))) == [0]
