"""Bounded memory against hostile connections (issue 8, items 7 and 8), measured as the broker
process's peak RSS (VmHWM in /proc/PID/status) against generous bounds derived from the
configured budgets, never from speed.

- Many connections each sending most of a huge request frame: the broker-wide request budget
  (`queued.max.request.bytes`) stops it reading sockets once spent, instead of allocating.
- Connections pipelining Fetch requests and never reading: once a connection's unwritten
  responses pass `queued.max.response.bytes`, the broker stops processing (and reading) that
  connection's requests.

"The broker has stopped" is observed, not waited for: the broker-side socket of every hostile
connection still holds unread request bytes (its receive queue in /proc/net/tcp) while the
process's RSS stays inside the bound."""

from __future__ import annotations

import socket
import struct
import threading
import time

import clients
import kwire

MIB = 1 << 20
DEADLINE_S = 60.0


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


def server_rx_queue(broker_port: int, client_port: int) -> int | None:
    """Unread bytes in the broker-side socket of the connection from `client_port`."""
    want_local = f"0100007F:{broker_port:04X}"
    want_remote = f"0100007F:{client_port:04X}"
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            parts = line.split()
            if parts[1] == want_local and parts[2] == want_remote:
                return int(parts[4].split(":")[1], 16)
    return None


def wait_paused(server, socks, bound_kib: int, baseline_kib: int, done=lambda i: False):
    """Waits until every hostile connection is either `done` (all its bytes were read) or holds
    unread request bytes in the broker's socket (the broker stopped reading it), failing as soon
    as the broker's RSS passes the bound. At least one connection must be held back."""
    pid = server.proc.pid
    deadline = time.monotonic() + DEADLINE_S
    while True:
        rss = status_kib(pid, "VmRSS")
        assert rss - baseline_kib <= bound_kib, f"RSS grew by {(rss - baseline_kib) // 1024} MiB (bound {bound_kib // 1024} MiB)"
        queues = [server_rx_queue(server.port, s.getsockname()[1]) for s in socks]
        held = [q is not None and q > 0 for q in queues]
        if any(held) and all(h or done(i) for i, h in enumerate(held)):
            return
        assert time.monotonic() < deadline, f"broker never stopped reading: unread bytes per connection {queues}"
        time.sleep(0.05)


def test_request_budget_stops_reading_instead_of_allocating(brokers, topic):
    budget, frame = 48 * MIB, 24 * MIB
    server = brokers.start(**{"queued.max.request.bytes": budget, "socket.request.max.bytes": frame + 1024})
    clients.confluent_produce(server.bootstrap, topic, [{"value": b"warm"}])
    baseline = status_kib(server.proc.pid, "VmRSS")
    socks, threads = [], []
    body = b"\x00" * (frame - MIB)  # most of a frame: never completed

    def send(s):
        try:
            s.sendall(struct.pack(">i", frame) + body)
        except OSError:
            pass  # the test closed it

    for _ in range(16):  # 16 x 23 MiB = 368 MiB offered, 7.7x the budget
        s = socket.create_connection(server.address)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 256 * 1024)
        socks.append(s)
        t = threading.Thread(target=send, args=(s,), daemon=True)
        t.start()
        threads.append(t)
    bound = (budget + 64 * MIB) // 1024  # the budget plus generous slack (buffers, allocator)
    try:
        wait_paused(server, socks, bound, baseline, done=lambda i: not threads[i].is_alive())
        peak = status_kib(server.proc.pid, "VmHWM")
        assert peak - baseline <= bound, f"peak RSS grew by {(peak - baseline) // 1024} MiB"
        assert sum(not t.is_alive() for t in threads) <= budget // frame, "more frames read than the budget holds"
    finally:
        for s in socks:
            s.close()
    for t in threads:
        t.join(timeout=10)
    # The budget comes back when the connections go: the broker serves normally.
    delivered = clients.confluent_produce(server.bootstrap, topic, [{"value": b"x" * 1000}] * 50)
    assert delivered[-1].offset() == 50
    kwire.assert_serving(server)


def test_unread_fetch_responses_stop_the_connection(brokers, topic):
    fetch_max, queued = 4 * MIB, 8 * MIB
    server = brokers.start(**{"fetch.max.bytes": fetch_max, "queued.max.response.bytes": queued})
    value = b"f" * 100_000
    clients.confluent_produce(server.bootstrap, topic, [{"value": value}] * 60, linger_ms=50)
    baseline = status_kib(server.proc.pid, "VmRSS")
    socks = []
    for _ in range(3):
        s = socket.create_connection(server.address)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        socks.append(s)
    # 2,000 pipelined Fetch requests per connection (each answered with ~4 MiB): 24 GiB if
    # the broker built them all.
    body = (kwire.i32(-1) + kwire.i32(0) + kwire.i32(0) + kwire.i32(fetch_max) + kwire.i8(0)
            + kwire.i32(1) + kwire.string(topic) + kwire.i32(1) + kwire.i32(0) + kwire.i64(0)
            + kwire.i32(fetch_max))
    requests = b"".join(kwire.request(1, 4, i, body) for i in range(2000))

    def send(s):
        try:
            s.sendall(requests)  # blocks once the broker stops reading: that is the point
        except OSError:
            pass

    for s in socks:
        threading.Thread(target=send, args=(s,), daemon=True).start()
    # Each connection may hold its queued bytes plus one response being built and written.
    bound = (3 * (queued + 2 * fetch_max) + 64 * MIB) // 1024
    try:
        wait_paused(server, socks, bound, baseline)
        peak = status_kib(server.proc.pid, "VmHWM")
        assert peak - baseline <= bound, f"peak RSS grew by {(peak - baseline) // 1024} MiB"
        # The responses that were sent are whole and in order.
        s = socks[0]
        s.settimeout(20)
        for i in range(3):
            frame = kwire.recv_frame(s)
            assert struct.unpack(">i", frame[:4])[0] == i
    finally:
        for s in socks:
            s.close()
    assert [m.value for m in clients.confluent_consume(server.bootstrap, topic, 0, 60)] == [value] * 60
    kwire.assert_serving(server)


def test_unauthenticated_connection_flood_keeps_memory_bounded(brokers):
    """Issue 14: a client that has not authenticated can make the broker hold no more than a
    few KiB. 600 connections to a SASL listener each claim a large first frame (under
    `sasl.server.max.receive.size`) and send only its first bytes, or nothing at all; the
    broker's RSS stays within a bound far below what buffering the claimed frames would take,
    and an authenticated client is served meanwhile."""
    from test_security import SASL_SETTINGS, rdkafka_sasl
    server = brokers.start("flood", **SASL_SETTINGS)
    pid = server.proc.pid
    conf = rdkafka_sasl("PLAIN", "alice", "alice-secret")
    # Warm up the allocator and the client path before the baseline.
    clients.confluent_produce(server.bootstrap, "flood-before", [{"value": b"x"}],
                              **{k.replace(".", "_"): v for k, v in conf.items()})
    baseline = status_kib(pid, "VmRSS")
    socks = []
    claimed = 500_000
    try:
        for i in range(600):
            s = socket.create_connection(server.address, timeout=10)
            if i % 3:
                # A frame that claims 500 kB (a SaslHandshake header) and stops after 64 bytes.
                s.sendall(struct.pack(">i", claimed) + kwire.i16(17) + kwire.i16(1) + b"\0" * 60)
            socks.append(s)
        # Give the broker time to read what was sent, then check it holds little for it.
        time.sleep(2.0)
        grown = status_kib(pid, "VmRSS") - baseline
        print(f"RSS growth for 600 unauthenticated connections: {grown} KiB")
        # Buffering the claimed frames would take 400 x 500 kB = 200 MB.
        assert grown < 64 * 1024, f"RSS grew by {grown // 1024} MiB for 600 unauthenticated connections"
        clients.confluent_produce(server.bootstrap, "flood-during", [{"value": b"y"}],
                                  **{k.replace(".", "_"): v for k, v in conf.items()})
    finally:
        for s in socks:
            s.close()
