"""Connection limits as Kafka's (issue 14): `max.connections.per.ip` with
`max.connections.per.ip.overrides` (a connection over its address's limit is closed at once;
the broker keeps serving the others), static and changed at runtime with IncrementalAlterConfigs
on the broker (confluent-kafka's admin, as `kafka-configs --entity-type brokers`),
`max.connection.creation.rate` (the broker pauses accepting), and a listener's own
`listener.name.<listener>.max.connections` (KIP-402: that listener waits for a slot, the broker's
other listeners serve) and `listener.name.<listener>.max.connection.creation.rate` (KIP-612:
that listener's acceptor pauses; the inter-broker listener is out of the broker-wide rate, as
Kafka's protected listener), and over the broker-wide `max.connections` (which the protected
inter-broker listener passes) the least recently active connections of the other listeners are
closed until the total is back at the limit (Kafka's `closeExcessConnections`). Connections come
from different loopback addresses (127.0.0.1, 127.0.0.2) to show the limits are per address.
"""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

import clients
import kwire
from ports import free_port

DEADLINE_S = 60.0


def connect(server, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(10)
    s.bind((source, 0))
    s.connect(server.address)
    return s


def served(s: socket.socket) -> bool:
    """Whether the broker answers ApiVersions on this connection (False: it closed it)."""
    try:
        kwire.api_versions(s)
        return True
    except (kwire.ProtocolError, OSError):
        return False


def wait_for(what: str, check) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def connect_served(server, source: str = "127.0.0.1") -> socket.socket:
    """A served connection from `source`, once the broker has released the slots of connections
    closed just before (the harness's startup probe: its close is noticed asynchronously)."""
    got: list[socket.socket] = []

    def attempt() -> bool:
        s = connect(server, source)
        if served(s):
            got.append(s)
            return True
        s.close()
        return False

    wait_for(f"a connection from {source} is served", attempt)
    return got[0]


def accept_metrics(server, name: str) -> dict:
    """`/metrics` samples of one family (e.g. moldau_connection_accept_blocked_time_seconds),
    by listener."""
    text = urllib.request.urlopen(server.admin_url() + "/metrics", timeout=30).read().decode()
    return {s.labels.get("listener"): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name}


def test_max_connections_per_ip_with_an_override(brokers):
    server = brokers.start("per-ip", **{"max.connections.per.ip": 3,
                                         "max.connections.per.ip.overrides": "127.0.0.2:1"})
    held = [connect_served(server) for _ in range(3)]
    # The fourth from the same address is closed at once; another address has its own limit.
    assert not served(connect(server))
    other = connect(server, "127.0.0.2")
    assert served(other)
    assert not served(connect(server, "127.0.0.2"))
    # A slot freed is a slot taken again.
    held.pop().close()
    wait_for("a closed connection's slot is given back", lambda: served(connect(server)))
    # A real client on another address is served meanwhile.
    clients.confluent_produce(server.bootstrap, "per-ip", [{"value": b"v"}])
    for s in held + [other]:
        s.close()


def test_connection_limits_change_at_runtime(brokers):
    server = brokers.start("per-ip-dynamic")
    admin = AdminClient({"bootstrap.servers": server.bootstrap})

    def set_broker(entries):
        r = ConfigResource(ResourceType.BROKER, "1", incremental_configs=entries)
        admin.incremental_alter_configs([r])[r].result(timeout=30)

    held = [connect(server, "127.0.0.2") for _ in range(2)]
    assert all(served(s) for s in held)
    set_broker([ConfigEntry("max.connections.per.ip", "2", incremental_operation=AlterConfigOpType.SET)])
    assert not served(connect(server, "127.0.0.2"))
    # The admin client's own address is under the same limit: it keeps its one connection.
    set_broker([ConfigEntry("max.connections.per.ip.overrides", "127.0.0.2:4",
                            incremental_operation=AlterConfigOpType.SET)])
    more = [connect(server, "127.0.0.2") for _ in range(2)]
    assert all(served(s) for s in more)
    assert not served(connect(server, "127.0.0.2"))
    r = ConfigResource(ResourceType.BROKER, "1")
    described = admin.describe_configs([r])[r].result(timeout=30)
    assert described["max.connections.per.ip"].value == "2"
    assert not described["max.connections.per.ip"].is_read_only
    # A bad value is refused and changes nothing.
    with pytest.raises(Exception):
        set_broker([ConfigEntry("max.connections.per.ip.overrides", "127.0.0.2:x",
                                incremental_operation=AlterConfigOpType.SET)])
    set_broker([ConfigEntry("max.connections.per.ip", "", incremental_operation=AlterConfigOpType.DELETE),
                ConfigEntry("max.connections.per.ip.overrides", "", incremental_operation=AlterConfigOpType.DELETE)])
    extra = [connect(server, "127.0.0.2") for _ in range(3)]
    assert all(served(s) for s in extra)
    for s in held + more + extra:
        s.close()


def test_connection_creation_rate_pauses_accepting(brokers):
    # 2 connections per second over 3 one-second samples: 12 connections cannot all be
    # accepted within the first two seconds.
    server = brokers.start("creation-rate", **{"max.connection.creation.rate": 2, "quota.window.num": 3})
    start = time.monotonic()
    socks = [connect(server) for _ in range(12)]
    assert all(served(s) for s in socks)
    assert time.monotonic() - start >= 2.0
    # The pauses are in /metrics (Kafka's connection-accept-throttle-time); no slot was waited for.
    throttled = accept_metrics(server, "moldau_connection_accept_throttle_time_seconds_total")
    assert throttled.get("PLAINTEXT", 0) > 0, throttled
    blocked = accept_metrics(server, "moldau_connection_accept_blocked_time_seconds_total")
    assert blocked.get("PLAINTEXT") == 0, blocked
    for s in socks:
        s.close()


INVALID_REQUEST = 42


def zero_rate_refusal(key: str) -> str:
    """Kafka's message for a dynamic change that leaves a listener a connection limit of 0
    (its ConfigException("Invalid dynamic configuration", e) takes the name/value constructor)."""
    return ("Invalid value org.apache.kafka.common.config.ConfigException: "
            f"Invalid {key} 0 for configuration Invalid dynamic configuration")


def check_a_static_zero_creation_rate(address: tuple[str, int], broker: str) -> None:
    """A broker started with `max.connection.creation.rate=0` on its one client listener, as
    Kafka's ConnectionQuotas: a quota of 0 is violated by every connection, whose throttle (an
    infinite one) is capped at one quota window (1 s): each connection, the first too, is
    served after a second. At runtime a 0 is refused while a listener would take it: set for
    the broker, or as the cluster default the broker's own value does not override."""
    start = time.monotonic()
    socks = []
    for _ in range(4):
        s = socket.create_connection(address, timeout=30)
        socks.append(s)
        assert served(s)
    elapsed = time.monotonic() - start
    assert 3.5 <= elapsed < 30, elapsed
    for s in socks[1:]:
        s.close()
    s = socks[0]
    # Raised at runtime: connections come at once again.
    # Success: a null error message, as Kafka's ApiError.NONE.
    assert kwire.incremental_alter_broker_configs_v0(
        s, broker, {"max.connection.creation.rate": "1000"}) == (0, None)
    start = time.monotonic()
    fast = [socket.create_connection(address, timeout=30) for _ in range(4)]
    assert all(served(f) for f in fast)
    assert time.monotonic() - start < 2.0
    for f in fast:
        f.close()
    for key in ("max.connection.creation.rate", "max.connections"):
        assert kwire.incremental_alter_broker_configs_v0(s, broker, {key: "0"}) == (
            INVALID_REQUEST, zero_rate_refusal(key)), key
    # The cluster default's 0 is accepted while the broker's own 1000 overrides it for every
    # listener; the broker's own value can then not be deleted.
    assert kwire.incremental_alter_broker_configs_v0(
        s, "", {"max.connection.creation.rate": "0"}) == (0, None)
    assert kwire.incremental_alter_broker_configs_v0(
        s, broker, {"max.connection.creation.rate": None}) == (
            INVALID_REQUEST, zero_rate_refusal("max.connection.creation.rate"))
    assert kwire.incremental_alter_broker_configs_v0(
        s, "", {"max.connection.creation.rate": None}) == (0, None)
    s.close()


def test_a_static_zero_creation_rate_throttles_every_connection(brokers):
    server = brokers.start("zero-rate", **{"max.connection.creation.rate": 0})
    check_a_static_zero_creation_rate(server.address, "1")


def waiting_for_a_slot(s: socket.socket, seconds: float = 2.0) -> bool:
    """Sends ApiVersions on a connection the broker has not accepted yet: True when it is
    neither answered nor closed within `seconds` (the listener's acceptor waits for a slot);
    the request stays queued and is answered once the connection is accepted."""
    s.sendall(kwire.api_versions_request(0, 7))
    s.settimeout(seconds)
    try:
        data = s.recv(1, socket.MSG_PEEK)
    except socket.timeout:
        return True
    finally:
        s.settimeout(10)
    assert data, "the broker closed a connection over the listener's limit instead of waiting"
    return False


def answered(s: socket.socket) -> bool:
    """Whether the ApiVersions sent by `waiting_for_a_slot` gets its answer."""
    try:
        resp = kwire.parse_api_versions_v0(kwire.recv_frame(s))
        return resp.correlation_id == 7 and resp.error_code == 0
    except (kwire.ProtocolError, OSError):
        return False


def test_a_listeners_own_max_connections(brokers):
    """`listener.name.plaintext.max.connections=2`: a third connection to that listener waits
    (Kafka's acceptor waits for a slot; it is not closed) while the ADMIN listener of the same
    broker serves an admin client, which raises the limit at runtime (the waiting connection is
    then served), and a closed connection's slot is taken by the next one waiting."""
    admin_port = free_port()
    server = brokers.start("per-listener", **{
        "listeners": f"PLAINTEXT://127.0.0.1:0,ADMIN://127.0.0.1:{admin_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,ADMIN:PLAINTEXT",
        "listener.name.plaintext.max.connections": 2})
    held = [connect_served(server) for _ in range(2)]
    third = connect(server)
    assert waiting_for_a_slot(third)
    # Another listener of the broker has no such limit.
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{admin_port}"})
    r = ConfigResource(ResourceType.BROKER, "1")
    described = admin.describe_configs([r])[r].result(timeout=30)
    entry = described["listener.name.plaintext.max.connections"]
    assert (entry.value, entry.is_read_only) == ("2", False), entry

    def set_limit(value):
        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry("listener.name.plaintext.max.connections", value or "", incremental_operation=op)])
        admin.incremental_alter_configs([res])[res].result(timeout=30)

    # Raised at runtime: the waiting connection is accepted and answered; the next one waits.
    set_limit("3")
    assert answered(third)
    # The wait is in /metrics (Kafka's AcceptorBlockedPercent), for that listener only.
    blocked = accept_metrics(server, "moldau_connection_accept_blocked_time_seconds_total")
    assert blocked.get("PLAINTEXT", 0) > 0 and blocked.get("ADMIN") == 0, blocked
    fourth = connect(server)
    assert waiting_for_a_slot(fourth)
    # A connection closed: its slot goes to the one waiting.
    held.pop().close()
    assert answered(fourth)
    # A bad value is refused; removing the dynamic value brings back the config file's 2
    # (three are open): the next one waits until two have closed.
    with pytest.raises(Exception):
        set_limit("-1")
    set_limit(None)
    fifth = connect(server)
    assert waiting_for_a_slot(fifth)
    held.pop().close()
    third.close()
    assert answered(fifth)
    for s in (fourth, fifth):
        s.close()


def test_ip_connection_creation_rate_closes_connections_after_a_delay(brokers):
    """The `connection_creation_rate` quota of an `ip` entity (KIP-612), as Kafka's
    ConnectionQuotas: a connection from that address over its rate is not served and is
    closed once its throttle time (at most one quota window) has passed; other addresses are
    not limited."""
    from test_quotas import alter

    server = brokers.start("ip-creation-rate", **{"quota.window.num": 3})
    b = server.bootstrap
    assert alter(b, [([("ip", "127.0.0.1")], [("connection_creation_rate", 2.0, False)])]) == [(0, None)]
    # 2/s measured over at least 2 s at first: 4 new connections at once are within it. (The
    # harness's startup probe and the alter's connection came earlier.)
    results = []
    for _ in range(8):
        s = connect(server)
        t = time.monotonic()
        ok = served(s)
        results.append((ok, time.monotonic() - t))
        s.close()
    print("ip connection_creation_rate results", results)
    refused = [elapsed for ok, elapsed in results if not ok]
    assert refused and len(refused) < len(results), results
    # Closed after a delay (Kafka's delayed close), not at once; never longer than a window.
    assert all(0.1 <= elapsed <= 2.0 for elapsed in refused), results
    # Another address has no quota.
    others = [connect(server, "127.0.0.2") for _ in range(8)]
    assert all(served(s) for s in others)
    for s in others:
        s.close()
    # Once the rate is back under the quota, the address is served again.
    def served_again():
        with connect(server) as s:
            return served(s)
    wait_for("127.0.0.1 served again", served_again)


def connect_to(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    return s


def throttled_s(server) -> dict:
    return accept_metrics(server, "moldau_connection_accept_throttle_time_seconds_total")


def test_a_listeners_own_connection_creation_rate(brokers):
    """`listener.name.plaintext.max.connection.creation.rate=2` (KIP-612): that listener's
    acceptor pauses once its connections come faster, the ADMIN listener of the same broker is
    not throttled; changed at runtime per broker and cluster-wide with IncrementalAlterConfigs
    (confluent-kafka's admin, as `kafka-configs --entity-type brokers`); a producer on the
    throttled listener is served."""
    admin_port = free_port()
    server = brokers.start("listener-rate", **{
        "listeners": f"PLAINTEXT://127.0.0.1:0,ADMIN://127.0.0.1:{admin_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,ADMIN:PLAINTEXT",
        "listener.name.plaintext.max.connection.creation.rate": 2,
        "quota.window.num": 3})
    # 2/s over 3 one-second samples: 12 new connections cannot all be accepted within 2 s.
    start = time.monotonic()
    socks = [connect(server) for _ in range(12)]
    assert all(served(s) for s in socks)
    assert time.monotonic() - start >= 2.0
    others = [connect_to(admin_port) for _ in range(12)]
    assert all(served(s) for s in others)
    throttled = throttled_s(server)
    assert throttled.get("PLAINTEXT", 0) > 0 and throttled.get("ADMIN") == 0, throttled
    for s in socks + others:
        s.close()

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{admin_port}"})

    def alter(resource: str, key: str, value: str):
        r = ConfigResource(ResourceType.BROKER, resource, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([r])[r].result(timeout=30)

    r = ConfigResource(ResourceType.BROKER, "1")
    described = admin.describe_configs([r])[r].result(timeout=30)
    entry = described["listener.name.plaintext.max.connection.creation.rate"]
    assert (entry.value, entry.is_read_only) == ("2", False), entry
    # Per broker at runtime: now ADMIN has a rate of its own and pauses too.
    alter("1", "listener.name.admin.max.connection.creation.rate", "2")
    start = time.monotonic()
    socks = [connect_to(admin_port) for _ in range(12)]
    assert all(served(s) for s in socks)
    assert time.monotonic() - start >= 2.0
    assert throttled_s(server).get("ADMIN", 0) > 0
    for s in socks:
        s.close()
    # Kafka refuses a listener's own rate of 0 or less at runtime (and a non-number).
    for bad in ("0", "-1", "fast"):
        with pytest.raises(Exception):
            alter("1", "listener.name.admin.max.connection.creation.rate", bad)
    # Cluster-wide (raw IncrementalAlterConfigs: neither Python admin client can name the
    # default resource ""): PLAINTEXT raised to 1000/s, its acceptor no longer pauses.
    with kwire.connect(("127.0.0.1", admin_port), timeout=30) as s:
        assert kwire.incremental_alter_broker_configs_v0(
            s, "", {"listener.name.plaintext.max.connection.creation.rate": "1000"})[0] == 0
    before = throttled_s(server).get("PLAINTEXT")
    socks = [connect(server) for _ in range(12)]
    assert all(served(s) for s in socks)
    assert throttled_s(server).get("PLAINTEXT") == before
    for s in socks:
        s.close()
    # A real client on the listener with its own rate is served.
    clients.confluent_produce(server.bootstrap, "listener-rate", [{"value": b"v"}])


def test_the_inter_broker_listener_is_out_of_the_broker_wide_creation_rate(brokers):
    """As Kafka's protected listener: with `max.connection.creation.rate=2` and two listeners,
    client connections on PLAINTEXT use up the broker-wide rate, yet the inter-broker listener
    INTERNAL accepts at once (its own rate, the broker-wide value, counts only its own
    connections), and its connections do not count against the clients' rate."""
    internal_port = free_port()
    server = brokers.start("protected-listener", **{
        "listeners": f"PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:{internal_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "max.connection.creation.rate": 2,
        "quota.window.num": 3})
    socks = [connect(server) for _ in range(12)]
    assert all(served(s) for s in socks)
    assert throttled_s(server).get("PLAINTEXT", 0) > 0
    internal = [connect_to(internal_port) for _ in range(3)]
    assert all(served(s) for s in internal)
    assert throttled_s(server).get("INTERNAL") == 0, throttled_s(server)
    clients.confluent_produce(f"127.0.0.1:{internal_port}", "protected", [{"value": b"v"}])
    for s in socks + internal:
        s.close()


def connect_served_at(address: tuple[str, int]) -> socket.socket:
    """A served connection to `address`, once the broker has released the slots of connections
    closed just before (its close is noticed asynchronously)."""
    got: list[socket.socket] = []

    def attempt() -> bool:
        s = socket.create_connection(address, timeout=10)
        if served(s):
            got.append(s)
            return True
        s.close()
        return False

    wait_for(f"a connection to {address} is served", attempt)
    return got[0]


def closed_by_broker(s: socket.socket) -> bool:
    """Whether the broker has closed this connection (read without sending anything)."""
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        s.setblocking(True)
        s.settimeout(10)


def check_over_max_connections_the_least_recently_active_closes(
        clients_at: tuple[str, int], internal_at: tuple[str, int], max_connections: int) -> None:
    """A broker with `max.connections=max_connections`, a client listener at `clients_at` and
    its inter-broker listener at `internal_at` (protected: it has other listeners), nothing else
    connected. The client listener is filled with connections, each served once in turn; the
    first is used again. A connection to the inter-broker listener is then served at once, over
    the limit, and the least recently active client connection (the second: each one's last
    request is older than the first's) is closed while the others keep being served; a second
    one closes the next least recently active (the third), not the one used again."""
    held = [connect_served_at(clients_at) for _ in range(max_connections)]
    assert served(held[0])
    internal = socket.create_connection(internal_at, timeout=10)
    assert served(internal), "the inter-broker listener waits for nothing"
    wait_for("the least recently active client connection is closed", lambda: closed_by_broker(held[1]))
    assert not any(closed_by_broker(s) for s in held[:1] + held[2:])
    assert served(internal)
    # Used again just now: held[0] and the ones after held[2]; held[2]'s last request is the
    # oldest of those left.
    for s in held[3:] + held[:1]:
        assert served(s)
    second = socket.create_connection(internal_at, timeout=10)
    assert served(second)
    wait_for("the next least recently active client connection is closed", lambda: closed_by_broker(held[2]))
    assert not any(closed_by_broker(s) for s in held[:1] + held[3:])
    for s in held[:1] + held[3:] + [internal, second]:
        assert served(s)
        s.close()
    held[1].close()
    held[2].close()


def two_listeners(brokers, name: str, internal_port: int, **props):
    """A broker with PLAINTEXT (clients) and INTERNAL, its inter-broker listener (protected)."""
    return brokers.start(name, **{
        "listeners": f"PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:{internal_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL", **props})


def test_over_max_connections_the_least_recently_active_connections_close(brokers):
    """Kafka's closeExcessConnections (the same check runs on Kafka 4.4 in
    reference/test_connection_limits_on_kafka.py): `max.connections=3` filled on the client
    listener, a connection to the inter-broker listener is served at once and the least recently
    active client connection is closed, the one used since keeps being served; counted in
    /metrics for the client listener."""
    internal_port = free_port()
    server = two_listeners(brokers, "close-excess", internal_port, **{"max.connections": 3})
    check_over_max_connections_the_least_recently_active_closes(
        server.address, ("127.0.0.1", internal_port), 3)
    closed = accept_metrics(server, "moldau_connections_closed_over_max_total")
    assert closed == {"PLAINTEXT": 2, "INTERNAL": 0}, closed


def plaintext_connections(server) -> int:
    return int(accept_metrics(server, "moldau_connections").get("PLAINTEXT", 0))


def test_real_clients_keep_working_while_idle_connections_close_over_max_connections(brokers):
    """Two idle raw connections, then a confluent-kafka and a kafka-python producer that produce
    (their connections are more recent); `max.connections` lowered at runtime to one under the
    total (an admin client on the inter-broker listener: Kafka closes connections over a lowered
    limit too) closes the oldest idle one, a connection to the inter-broker listener then closes
    the other, and both producers keep producing on their connections."""
    internal_port = free_port()
    server = two_listeners(brokers, "close-excess-clients", internal_port)
    topic = "close-excess"
    clients.confluent_produce(server.bootstrap, topic, [{"value": b"created"}])
    wait_for("the first producer's connection is closed", lambda: plaintext_connections(server) == 0)
    idle = [connect_served(server) for _ in range(2)]
    rd = clients.confluent_producer(server.bootstrap)
    from kafka import KafkaProducer
    kp = KafkaProducer(bootstrap_servers=server.bootstrap, request_timeout_ms=10000, max_block_ms=15000)

    def produce_both(value: bytes) -> None:
        errors = []
        rd.produce(topic, value=value, partition=0, on_delivery=lambda err, msg: err and errors.append(err))
        assert rd.flush(30) == 0 and not errors, errors
        kp.send(topic, value=value, partition=0).get(timeout=30)

    try:
        produce_both(b"before")
        admin = clients.confluent_admin(f"127.0.0.1:{internal_port}")
        r = ConfigResource(ResourceType.BROKER, "1")
        admin.describe_configs([r])[r].result(timeout=30)
        # kafka-python's bootstrap connection closes once it knows the broker: wait until the
        # count is steady at what the producers keep (read twice with a request in between).
        before = plaintext_connections(server)
        produce_both(b"steady")
        wait_for("the client connections are steady", lambda: plaintext_connections(server) == before)
        # The admin client's one connection on INTERNAL counts in the total too.
        total = before + 1
        res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry("max.connections", str(total - 1), incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(timeout=30)
        wait_for("the oldest idle connection is closed", lambda: closed_by_broker(idle[0]))
        assert not closed_by_broker(idle[1])
        internal = connect_to(internal_port)
        assert served(internal)
        wait_for("the other idle connection is closed", lambda: closed_by_broker(idle[1]))
        produce_both(b"after")
        closed = accept_metrics(server, "moldau_connections_closed_over_max_total")
        assert closed.get("PLAINTEXT") == 2, closed
        assert plaintext_connections(server) == before - 2
        internal.close()
    finally:
        kp.close(timeout=5)
        rd.flush(5)
        for s in idle:
            s.close()
