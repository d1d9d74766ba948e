"""Certificate reload without restart (issue 14), as Kafka reloads a keystore: an
IncrementalAlterConfigs of the broker's `listener.name.<listener>.ssl.keystore.location`
(a new path, or the same path once the file changed) makes new connections get the new
certificate while connections already open keep working. A store that cannot be loaded is
refused (by IncrementalAlterConfigs and the legacy AlterConfigs) and the listener keeps its
certificate, and no other `listener.name.*` key is stored to be ignored. After a restart the
dynamic store, not the config file's, is served from the first connection. (That the keys are
per broker, never a cluster-wide default, is checked in crates/controller/tests/controller.rs:
neither Python client can name the default resource.) With real clients against a real
`moldau server`: confluent-kafka (admin, producer), kafka-python (a producer connected before
the reload), and Python's ssl module to see which certificate a new connection is served.
As Kafka's SslFactory, a new certificate must keep the subject and SubjectAltNames of the
current one unless `ssl.allow.dn.changes` / `ssl.allow.san.changes` say otherwise.
"""

from __future__ import annotations

import socket
import ssl
import subprocess

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ConfigSource, ResourceType)

from test_broker_configs import kafka_python_alter
from test_security import (kp_tls, openssl, rdkafka_tls, start_tls_broker, tls_settings,
                           wait_tls_metadata)

KEY = "listener.name.ssl.ssl.keystore.location"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A throw-away CA and three server certificates for 127.0.0.1 (distinct keys and
    serials), each as a PEM keystore (chain and key in one file)."""
    d = tmp_path_factory.mktemp("reload-certs")
    ext = d / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=ca",
            "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    # Three with the same identity (subject and SubjectAltNames), and, for Kafka's
    # compatibility rule, one with another subject, one without an alt name, one with one more.
    variants = {"server": ("/CN=127.0.0.1", ext), "second": ("/CN=127.0.0.1", ext),
                "third": ("/CN=127.0.0.1", ext), "other-dn": ("/O=Moldau/CN=other", ext)}
    for name, sans in (("fewer-san", "IP:127.0.0.1"), ("more-san", "IP:127.0.0.1,DNS:localhost,DNS:extra")):
        e = d / f"{name}.ext"
        e.write_text(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n")
        variants[name] = ("/CN=127.0.0.1", e)
    for name, (subject, extfile) in variants.items():
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
                "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", str(extfile), cwd=d)
        (d / f"{name}-keystore.pem").write_text((d / f"{name}.pem").read_text() + (d / f"{name}.key").read_text())
    return d


def served_certificate(address: tuple[str, int], ca) -> bytes:
    """The DER certificate a new TLS connection to the listener is served."""
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(address, timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            return s.getpeercert(binary_form=True)


def der(pem_path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem_path.read_text())


def set_broker_configs(admin: AdminClient, broker: str, entries: dict[str, str]) -> None:
    res = ConfigResource(ResourceType.BROKER, broker, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in entries.items()])
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(timeout=30)


def produce_one(bootstrap: str, conf: dict, topic: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, **conf})
    errors = []
    p.produce(topic, b"after-reload", on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(30) == 0
    assert errors == [None], errors


def test_keystore_reload_through_incremental_alter_configs(brokers, certs, topic, tmp_path):
    from kafka import KafkaProducer
    live = tmp_path / "keystore.pem"
    live.write_text((certs / "server-keystore.pem").read_text())
    server = start_tls_broker(brokers, certs, **tls_settings(
        certs, **{KEY: str(live), "ssl.keystore.location": "/nonexistent/unused.pem"}))
    client = rdkafka_tls(certs, client=None)
    wait_tls_metadata(server.bootstrap, client)
    # The listener's own key configures it (the bare key names a file that does not exist).
    assert served_certificate(server.address, certs / "ca.pem") == der(certs / "server.pem")
    admin = AdminClient({"bootstrap.servers": server.bootstrap, **client})
    # A connection made before the reload, with another client library.
    kp = KafkaProducer(bootstrap_servers=server.bootstrap, **kp_tls(certs, client=None))
    kp.send(topic, b"before").get(timeout=30)

    # A new path: new connections get the new certificate.
    set_broker_configs(admin, "1", {KEY: str(certs / "second-keystore.pem")})
    assert served_certificate(server.address, certs / "ca.pem") == der(certs / "second.pem")
    produce_one(server.bootstrap, client, topic)
    # Described as Kafka lists a broker's listener overrides: writable, the dynamic value first.
    r = ConfigResource(ResourceType.BROKER, "1")
    entry = admin.describe_configs([r])[r].result(timeout=30)[KEY]
    assert (entry.value, entry.source, entry.is_read_only) == (
        str(certs / "second-keystore.pem"), ConfigSource.DYNAMIC_BROKER_CONFIG.value, False), entry
    kp.send(topic, b"old connection").get(timeout=30)

    # The same path again once the file changed: reloaded too (Kafka's in-place renewal).
    set_broker_configs(admin, "1", {KEY: str(live)})
    assert served_certificate(server.address, certs / "ca.pem") == der(certs / "server.pem")
    live.write_text((certs / "third-keystore.pem").read_text())
    assert kafka_python_alter(server.bootstrap, "1", {KEY: str(live)}, **kp_tls(certs, client=None)) == "OK"
    assert served_certificate(server.address, certs / "ca.pem") == der(certs / "third.pem")

    # A store that cannot be used is refused, and the listener keeps its certificate.
    for bad in ("/nonexistent/keystore.pem", str(certs / "ca.key")):
        with pytest.raises(KafkaException) as e:
            set_broker_configs(admin, "1", {KEY: bad})
        assert e.value.args[0].code() in (40, 42), e.value  # INVALID_CONFIG / INVALID_REQUEST
        # The legacy AlterConfigs (kafka-python's non-incremental alter) is checked the same way.
        legacy = kafka_python_alter(server.bootstrap, "1", {KEY: bad}, incremental=False,
                                    **kp_tls(certs, client=None))
        assert "InvalidRequestError" in legacy, legacy
    assert served_certificate(server.address, certs / "ca.pem") == der(certs / "third.pem")
    # Other listener.name.* keys cannot change at runtime: refused, not stored and ignored.
    with pytest.raises(KafkaException):
        set_broker_configs(admin, "1", {"listener.name.ssl.ssl.client.auth": "required"})
    # A listener that does not exist on this broker.
    with pytest.raises(KafkaException):
        set_broker_configs(admin, "1", {"listener.name.nope.ssl.keystore.location": str(live)})

    kp.send(topic, b"still").get(timeout=30)
    kp.close()
    # The dynamic path survives a restart (it is cluster metadata): the config file's store
    # (`live`, now the third certificate) is replaced before the first client is served.
    set_broker_configs(admin, "1", {KEY: str(certs / "second-keystore.pem")})
    assert served_certificate(server.address, certs / "ca.pem") == der(certs / "second.pem")
    server.stop()
    server.start()
    assert served_certificate(server.address, certs / "ca.pem") == der(certs / "second.pem")
    wait_tls_metadata(server.bootstrap, client)


def refused(admin: AdminClient, path) -> str:
    """Sets the keystore and expects Kafka's refusal (INVALID_REQUEST): its message."""
    with pytest.raises(KafkaException) as e:
        set_broker_configs(admin, "1", {KEY: str(path)})
    assert e.value.args[0].code() == 42, e.value  # INVALID_REQUEST, as Kafka's ConfigAdminManager
    return e.value.args[0].str()


def test_a_new_keystore_keeps_the_certificates_subject_and_alt_names(brokers, certs, topic, tmp_path):
    """Kafka's SslFactory (CertificateEntries.ensureCompatible): a keystore whose certificate
    has another subject, or lacks one of the current SubjectAltNames, is refused with
    INVALID_REQUEST and Kafka's message, and the listener keeps its certificate, whether the
    path is new or the same file changed; more alt names are fine. `ssl.allow.dn.changes` /
    `ssl.allow.san.changes` (here per listener) allow both."""
    live = tmp_path / "keystore.pem"
    live.write_text((certs / "server-keystore.pem").read_text())
    server = start_tls_broker(brokers, certs, **tls_settings(certs, **{"ssl.keystore.location": str(live)}))
    client = rdkafka_tls(certs, client=None)
    wait_tls_metadata(server.bootstrap, client)
    admin = AdminClient({"bootstrap.servers": server.bootstrap, **client})
    ca = certs / "ca.pem"

    message = refused(admin, certs / "other-dn-keystore.pem")
    assert message == ("Validation of dynamic config update of SSLFactory failed: "
                       "org.apache.kafka.common.config.ConfigException: Keystore DistinguishedName does not match: "
                       " existing={alias=kafka, DN=CN=127.0.0.1}, new={alias=kafka, DN=CN=other, O=Moldau}"), message
    message = refused(admin, certs / "fewer-san-keystore.pem")
    assert "ConfigException: Keystore SubjectAltNames do not match:  existing={alias=kafka, SAN=[" in message, message
    assert "new={alias=kafka, SAN=[[7, 127.0.0.1]]}" in message, message
    # kafka-python's legacy AlterConfigs is refused the same way.
    legacy = kafka_python_alter(server.bootstrap, "1", {KEY: str(certs / "other-dn-keystore.pem")},
                                incremental=False, **kp_tls(certs, client=None))
    assert "InvalidRequestError" in legacy, legacy
    # The same file renewed in place with another subject: refused too.
    live.write_text((certs / "other-dn-keystore.pem").read_text())
    assert "Keystore DistinguishedName does not match" in refused(admin, live)
    assert served_certificate(server.address, ca) == der(certs / "server.pem")
    # One alt name more: accepted, served to the next connection.
    set_broker_configs(admin, "1", {KEY: str(certs / "more-san-keystore.pem")})
    assert served_certificate(server.address, ca) == der(certs / "more-san.pem")
    produce_one(server.bootstrap, client, topic)

    # With both changes allowed on the listener, both certificates are taken.
    allowing = start_tls_broker(brokers, certs, **tls_settings(certs, **{
        "listener.name.ssl.ssl.allow.dn.changes": "true", "ssl.allow.san.changes": "true"}))
    wait_tls_metadata(allowing.bootstrap, client)
    admin = AdminClient({"bootstrap.servers": allowing.bootstrap, **client})
    set_broker_configs(admin, "1", {KEY: str(certs / "fewer-san-keystore.pem")})
    assert served_certificate(allowing.address, ca) == der(certs / "fewer-san.pem")
    set_broker_configs(admin, "1", {KEY: str(certs / "other-dn-keystore.pem")})
    assert served_certificate(allowing.address, ca) == der(certs / "other-dn.pem")
    produce_one(allowing.bootstrap, client, topic)


def test_tls_keys_of_a_listener_without_tls_stop_the_start(moldau_bin, tmp_path, certs):
    args = [str(moldau_bin), "server", "--data-dir", str(tmp_path / "d"),
            "--set", "listeners=PLAINTEXT://127.0.0.1:0",
            "--set", f"listener.name.plaintext.ssl.keystore.location={certs / 'server-keystore.pem'}"]
    out = subprocess.run(args, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    assert out.returncode != 0
    assert b"listening on" not in out.stdout
    assert b"listener.name.plaintext.ssl.keystore.location" in out.stderr, out.stderr
