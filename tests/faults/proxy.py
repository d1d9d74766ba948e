"""A fault-injecting TCP proxy for the links of a test cluster (network partitions on loopback).

Every node of a test cluster is reached only through proxies: clients and other nodes connect
to a proxy port, the proxy forwards to the node's real port. Each proxy knows the node it
fronts (the destination); it learns the *source* of a connection from the first Kafka request
frame: Moldau's nodes name themselves `moldau-node-<id>` in the request header's client id (the
controller link, the quorum transport, replica fetchers), anything else is a client. So one
proxy per node and listener is enough to cut any single link (a -> b) without network
namespaces or root.

`Network` holds the rules, one per directed pair of endpoints (`"client"` or a node id):
- `drop`: connections are reset (both sides see a closed socket) and new ones are accepted
  and closed at once: a refused route, noticed immediately;
- `blackhole`: nothing is forwarded in either direction and nothing is closed: the packets
  vanish, as in a real partition, and the peers notice only through their own timeouts.
  Healing resumes the bytes held in the socket buffers, as TCP retransmission would.
A rule applies to a connection whose (source, destination) matches in either direction: a
network partition is symmetric.

All proxies run on one asyncio event loop in a daemon thread; the test thread changes rules
through thread-safe calls.
"""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import threading
from dataclasses import dataclass, field

CLIENT = "client"
NODE_CLIENT_ID = re.compile(rb"^moldau-node-(\d+)")


def endpoint_of(client_id: bytes | None) -> object:
    """The source endpoint named by a request's client id: a node id (int) or CLIENT."""
    if client_id:
        m = NODE_CLIENT_ID.match(client_id)
        if m:
            return int(m.group(1))
    return CLIENT


async def read_header(reader: asyncio.StreamReader) -> bytes:
    """Reads the start of the first request frame, up to and including the client id (or the
    whole frame if it is shorter). These bytes are forwarded as they came."""
    size_bytes = await reader.readexactly(4)
    (size,) = struct.unpack(">i", size_bytes)
    if size < 10:
        return size_bytes + await reader.readexactly(max(size, 0))
    head = await reader.readexactly(10)
    (length,) = struct.unpack(">h", head[8:10])
    rest = b""
    if length > 0:
        rest = await reader.readexactly(min(length, size - 10))
    return size_bytes + head + rest


def parse_client_id(prefix: bytes) -> bytes | None:
    """The client id of a Kafka request whose first bytes are `prefix` (size, api key, api
    version, correlation id, client id as a nullable INT16-length string: the same in every
    request header version). None if the prefix is too short or has no client id."""
    if len(prefix) < 14:
        return None
    (length,) = struct.unpack(">h", prefix[12:14])
    if length < 0 or len(prefix) < 14 + length:
        return None
    return prefix[14:14 + length]


@dataclass
class _Conn:
    src: object
    dst: object
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    closed: bool = False

    def abort(self) -> None:
        if self.closed:
            return
        self.closed = True
        for w in (self.client, self.upstream):
            try:
                sock = w.get_extra_info("socket")
                if sock is not None:
                    # Linger 0: close sends RST, so the peer sees a reset, not a clean FIN.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                w.transport.abort()
            except OSError:
                pass


@dataclass
class Network:
    """The rules and every live proxied connection. Thread-safe entry points: `partition`,
    `heal`, `isolate`, `heal_all`, `mode`."""

    rules: dict[tuple[object, object], str] = field(default_factory=dict)
    conns: list[_Conn] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    loop: asyncio.AbstractEventLoop | None = None
    changed: asyncio.Event | None = None
    # Counters for tests of the proxy itself.
    refused: int = 0
    accepted: int = 0

    def mode(self, src: object, dst: object) -> str | None:
        with self.lock:
            return self.rules.get((src, dst)) or self.rules.get((dst, src))

    def partition(self, a: object, b: object, mode: str = "drop") -> None:
        """Cuts the link between endpoints `a` and `b` (both directions)."""
        assert mode in ("drop", "blackhole"), mode
        with self.lock:
            self.rules[(a, b)] = mode
        self._notify()

    def heal(self, a: object, b: object) -> None:
        with self.lock:
            self.rules.pop((a, b), None)
            self.rules.pop((b, a), None)
        self._notify()

    def isolate(self, node: object, others: list[object], mode: str = "drop") -> None:
        """Cuts `node` from every endpoint in `others` (include CLIENT to cut clients too)."""
        with self.lock:
            for o in others:
                if o != node:
                    self.rules[(node, o)] = mode
        self._notify()

    def heal_all(self) -> None:
        with self.lock:
            self.rules.clear()
        self._notify()

    def _notify(self) -> None:
        if self.loop is None:
            return
        done = threading.Event()

        def apply():
            # Reset every connection a drop rule now covers; wake blackholed pumps.
            for c in list(self.conns):
                if self.mode(c.src, c.dst) == "drop":
                    c.abort()
            if self.changed is not None:
                self.changed.set()
            self.changed = asyncio.Event()
            done.set()

        self.loop.call_soon_threadsafe(apply)
        done.wait(timeout=10)


class Proxy:
    """Listens on a loopback port and forwards to `target` (the node `dst`'s real port)."""

    def __init__(self, network: Network, dst: object, target_port: int, listen_port: int = 0):
        self.network = network
        self.dst = dst
        self.target_port = target_port
        self.listen_port = listen_port
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.listen_port,
                                                 reuse_address=True)
        self.listen_port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        net = self.network
        # Learn the source from the first request (a Kafka client always speaks first).
        try:
            first = await read_header(reader)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            writer.close()
            return
        src = endpoint_of(parse_client_id(first))
        if net.mode(src, self.dst) == "drop":
            net.refused += 1
            _reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            # The node is down: the client sees its connection reset, as it would without us.
            _reset(writer)
            return
        net.accepted += 1
        conn = _Conn(src, self.dst, writer, up_writer)
        net.conns.append(conn)
        try:
            await self._send(conn, up_writer, first)
            await asyncio.gather(self._pump(conn, reader, up_writer),
                                 self._pump(conn, up_reader, writer))
        finally:
            conn.abort()
            if conn in net.conns:
                net.conns.remove(conn)

    async def _send(self, conn: _Conn, w: asyncio.StreamWriter, data: bytes) -> None:
        while self.network.mode(conn.src, conn.dst) == "blackhole" and not conn.closed:
            await self.network.changed.wait()
        if conn.closed:
            return
        w.write(data)
        await w.drain()

    async def _pump(self, conn: _Conn, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while not conn.closed:
                # Blackholed: do not even read, so the sender's socket buffers fill and its
                # bytes wait as they would in a partition; healed, they flow again.
                while self.network.mode(conn.src, conn.dst) == "blackhole" and not conn.closed:
                    await self.network.changed.wait()
                data = await r.read(65536)
                if not data:
                    break
                await self._send(conn, w, data)
        except (ConnectionError, OSError):
            pass
        finally:
            # One side ended: end the other side too (a proxy never half-closes).
            conn.abort()


def _reset(writer: asyncio.StreamWriter) -> None:
    try:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
    except OSError:
        pass


class ProxyRuntime:
    """The event-loop thread every proxy of a cluster runs on."""

    def __init__(self):
        self.network = Network()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fault-proxy", daemon=True)
        self.thread.start()
        ready = threading.Event()

        def init():
            self.network.loop = self.loop
            self.network.changed = asyncio.Event()
            ready.set()

        self.loop.call_soon_threadsafe(init)
        ready.wait(timeout=10)

    def add(self, dst: object, target_port: int, listen_port: int = 0) -> Proxy:
        proxy = Proxy(self.network, dst, target_port, listen_port)
        asyncio.run_coroutine_threadsafe(proxy.start(), self.loop).result(timeout=10)
        return proxy

    def close(self) -> None:
        async def shutdown():
            for c in list(self.network.conns):
                c.abort()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(timeout=10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
