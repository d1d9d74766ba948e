"""A minimal, independent Kafka wire encoder/decoder for the raw-socket tests.

Only what the hostile-frame and batch-inspection tests need: request framing (header v1/v2),
ApiVersions, Produce v7 / v9-shaped bodies, Fetch v4, and the record batch v2 format with
CRC32C. Written from the protocol specification so the tests do not trust any client library.
"""

from __future__ import annotations

import socket
import struct
from contextlib import contextmanager
from dataclasses import dataclass, field

import crc32c as _crc32c


class ProtocolError(Exception):
    """The peer sent something this decoder cannot parse, or closed mid-frame."""


class ConnectionClosed(ProtocolError):
    pass


# ---------------------------------------------------------------- primitive encoders

def i8(v: int) -> bytes: return struct.pack(">b", v)
def i16(v: int) -> bytes: return struct.pack(">h", v)
def i32(v: int) -> bytes: return struct.pack(">i", v)
def i64(v: int) -> bytes: return struct.pack(">q", v)


def string(s: str | None) -> bytes:
    if s is None:
        return i16(-1)
    b = s.encode()
    return i16(len(b)) + b


def bytes32(b: bytes | None) -> bytes:
    if b is None:
        return i32(-1)
    return i32(len(b)) + b


def uvarint(v: int) -> bytes:
    assert v >= 0
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def varint(v: int) -> bytes:
    return uvarint((v << 1) ^ (v >> 63))


def varlong_bytes(b: bytes | None) -> bytes:
    if b is None:
        return varint(-1)
    return varint(len(b)) + b


def crc32c(data: bytes) -> int:
    return _crc32c.crc32c(data)


# ---------------------------------------------------------------- decoding

class Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError(f"short read: need {n} at {self.pos} of {len(self.data)}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def i8(self) -> int: return struct.unpack(">b", self.take(1))[0]
    def i16(self) -> int: return struct.unpack(">h", self.take(2))[0]
    def i32(self) -> int: return struct.unpack(">i", self.take(4))[0]
    def u32(self) -> int: return struct.unpack(">I", self.take(4))[0]
    def i64(self) -> int: return struct.unpack(">q", self.take(8))[0]

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self.take(n).decode()

    def bytes32(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self.take(n)

    def array_len(self) -> int:
        n = self.i32()
        if n > len(self.data):
            raise ProtocolError(f"array length {n} larger than frame")
        return n

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ProtocolError("varint too long")

    def varint(self) -> int:
        v = self.uvarint()
        return (v >> 1) ^ -(v & 1)

    def remaining(self) -> int:
        return len(self.data) - self.pos


# ---------------------------------------------------------------- framing and sockets

@contextmanager
def connect(address, timeout: float = 5.0):
    sock = socket.create_connection(address, timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        yield sock
    finally:
        sock.close()


def request(api_key: int, api_version: int, correlation_id: int, body: bytes,
            client_id: str | None = "moldau-compat", flexible: bool = False) -> bytes:
    """Frame a request: size prefix + header (v1, or v2 with empty tagged fields) + body."""
    header = i16(api_key) + i16(api_version) + i32(correlation_id) + string(client_id)
    if flexible:
        header += b"\x00"
    payload = header + body
    return i32(len(payload)) + payload


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionClosed(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket, max_size: int = 64 << 20) -> bytes:
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    if size < 0 or size > max_size:
        raise ProtocolError(f"bad response size {size}")
    return recv_exact(sock, size)


def wait_closed(sock: socket.socket, timeout: float) -> bool:
    """True if the peer closes (EOF or reset) within `timeout`; False if it stays open and silent.

    Bytes that arrive meanwhile are read and discarded (a response before the close is allowed
    by the callers that use this).
    """
    sock.settimeout(timeout)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


# ---------------------------------------------------------------- ApiVersions

@dataclass
class ApiKeyRange:
    api_key: int
    min_version: int
    max_version: int


@dataclass
class ApiVersionsResponse:
    correlation_id: int
    error_code: int
    api_keys: list[ApiKeyRange] = field(default_factory=list)

    def range_of(self, api_key: int) -> ApiKeyRange | None:
        for k in self.api_keys:
            if k.api_key == api_key:
                return k
        return None


def api_versions_request(version: int, correlation_id: int) -> bytes:
    if version >= 3:
        body = uvarint(len("moldau-compat") + 1) + b"moldau-compat" + uvarint(len("1.0") + 1) + b"1.0" + b"\x00"
        return request(18, version, correlation_id, body, flexible=True)
    return request(18, version, correlation_id, b"")


def parse_api_versions_v0(frame: bytes) -> ApiVersionsResponse:
    """Response header v0 + ApiVersions body v0 (the shape of every error response, too)."""
    r = Reader(frame)
    corr = r.i32()
    err = r.i16()
    keys = [ApiKeyRange(r.i16(), r.i16(), r.i16()) for _ in range(r.array_len())]
    if r.remaining() != 0:
        raise ProtocolError(f"{r.remaining()} trailing bytes in ApiVersions v0 response")
    return ApiVersionsResponse(corr, err, keys)


def api_versions(sock: socket.socket, version: int = 0, correlation_id: int = 7) -> ApiVersionsResponse:
    assert version in (0,), "only v0 is parsed here"
    sock.sendall(api_versions_request(version, correlation_id))
    resp = parse_api_versions_v0(recv_frame(sock))
    if resp.correlation_id != correlation_id:
        raise ProtocolError(f"correlation id {resp.correlation_id} != {correlation_id}")
    return resp


# ---------------------------------------------------------------- record batches (v2)

@dataclass
class Rec:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp_delta: int = 0


def encode_record(offset_delta: int, rec: Rec) -> bytes:
    body = i8(0) + varint(rec.timestamp_delta) + varint(offset_delta)
    body += varlong_bytes(rec.key) + varlong_bytes(rec.value)
    body += varint(len(rec.headers))
    for hk, hv in rec.headers:
        body += varlong_bytes(hk.encode()) + varlong_bytes(hv)
    return varint(len(body)) + body


def record_batch(records: list[Rec], first_timestamp: int, *, attributes: int = 0,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 record_count: int | None = None, corrupt_crc: bool = False) -> bytes:
    """An uncompressed magic-2 batch with base offset 0, exactly as a producer sends it."""
    recs = b"".join(encode_record(i, r) for i, r in enumerate(records))
    max_ts = first_timestamp + max((r.timestamp_delta for r in records), default=0)
    count = len(records) if record_count is None else record_count
    after_crc = (i16(attributes) + i32(max(len(records) - 1, 0)) + i64(first_timestamp) + i64(max_ts)
                 + i64(producer_id) + i16(producer_epoch) + i32(base_sequence) + i32(count) + recs)
    crc = crc32c(after_crc)
    if corrupt_crc:
        crc ^= 0x5A5A5A5A
    after_length = i32(-1) + i8(2) + struct.pack(">I", crc) + after_crc
    return i64(0) + i32(len(after_length)) + after_length


@dataclass
class BatchHeader:
    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    crc_ok: bool

    @property
    def compression(self) -> int:
        return self.attributes & 0x7

    @property
    def timestamp_type(self) -> int:
        return (self.attributes >> 3) & 1


def parse_batches(data: bytes) -> list[BatchHeader]:
    """Split a Fetch `records` blob into batch headers (a trailing partial batch is allowed)."""
    out = []
    pos = 0
    while len(data) - pos >= 61:
        r = Reader(data[pos:])
        base_offset = r.i64()
        length = r.i32()
        if len(data) - pos < 12 + length:
            break  # partial batch at the end of a fetch response
        body = data[pos + 12: pos + 12 + length]
        r = Reader(body)
        ple, magic, crc = r.i32(), r.i8(), r.u32()
        covered = body[9:]
        h = BatchHeader(base_offset, length, ple, magic, crc, r.i16(), r.i32(), r.i64(), r.i64(),
                        r.i64(), r.i16(), r.i32(), r.i32(), crc32c(covered) == crc)
        out.append(h)
        pos += 12 + length
    return out


# ---------------------------------------------------------------- Produce

def produce_v7_body(topic: str, partition: int, records: bytes, acks: int = -1, timeout_ms: int = 10000) -> bytes:
    return (string(None) + i16(acks) + i32(timeout_ms)
            + i32(1) + string(topic) + i32(1) + i32(partition) + bytes32(records))


@dataclass
class ProducePartitionResult:
    topic: str
    partition: int
    error_code: int
    base_offset: int
    log_append_time: int
    log_start_offset: int


def parse_produce_v7(frame: bytes) -> tuple[int, list[ProducePartitionResult]]:
    r = Reader(frame)
    corr = r.i32()
    out = []
    for _ in range(r.array_len()):
        name = r.string()
        for _ in range(r.array_len()):
            out.append(ProducePartitionResult(name, r.i32(), r.i16(), r.i64(), r.i64(), r.i64()))
    r.i32()  # throttle_time_ms
    if r.remaining() != 0:
        raise ProtocolError(f"{r.remaining()} trailing bytes in Produce v7 response")
    return corr, out


def produce_v7(sock, topic: str, partition: int, records: bytes, correlation_id: int = 11,
               acks: int = -1) -> ProducePartitionResult:
    sock.sendall(request(0, 7, correlation_id, produce_v7_body(topic, partition, records, acks)))
    corr, results = parse_produce_v7(recv_frame(sock))
    if corr != correlation_id:
        raise ProtocolError(f"correlation id {corr} != {correlation_id}")
    assert len(results) == 1, results
    return results[0]


# ---------------------------------------------------------------- Fetch v4

@dataclass
class FetchPartition:
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    records: bytes | None


def fetch_v4(sock, topic: str, partition: int, offset: int, correlation_id: int = 21,
             max_bytes: int = 16 << 20) -> FetchPartition:
    body = (i32(-1) + i32(100) + i32(1) + i32(max_bytes) + i8(0)
            + i32(1) + string(topic) + i32(1) + i32(partition) + i64(offset) + i32(max_bytes))
    sock.sendall(request(1, 4, correlation_id, body))
    r = Reader(recv_frame(sock))
    if r.i32() != correlation_id:
        raise ProtocolError("correlation id mismatch")
    r.i32()  # throttle
    parts = []
    for _ in range(r.array_len()):
        r.string()
        for _ in range(r.array_len()):
            idx, err, hw, lso = r.i32(), r.i16(), r.i64(), r.i64()
            n_aborted = r.i32()
            for _ in range(max(n_aborted, 0)):
                r.i64(), r.i64()
            parts.append(FetchPartition(idx, err, hw, lso, r.bytes32()))
    if r.remaining() != 0:
        raise ProtocolError(f"{r.remaining()} trailing bytes in Fetch v4 response")
    assert len(parts) == 1, parts
    return parts[0]


def fetch_all_batches(address, topic: str, partition: int = 0) -> list[BatchHeader]:
    """Every batch of a partition from offset 0 to the high watermark, via raw Fetch v4."""
    out: list[BatchHeader] = []
    offset = 0
    with connect(address) as sock:
        for corr in range(100, 10_000):
            part = fetch_v4(sock, topic, partition, offset, correlation_id=corr)
            if part.error_code != 0:
                raise ProtocolError(f"fetch error {part.error_code}")
            batches = [b for b in parse_batches(part.records or b"") if b.base_offset + b.last_offset_delta >= offset]
            out.extend(batches)
            if batches:
                offset = batches[-1].base_offset + batches[-1].last_offset_delta + 1
            if offset >= part.high_watermark:
                return out
            if not batches:
                raise ProtocolError(f"no progress fetching at offset {offset} (hw {part.high_watermark})")
    raise ProtocolError("too many fetch rounds")


def metadata_v4(sock, topics: list[str], allow_auto_topic_creation: bool, client_id: str,
                correlation_id: int = 31) -> tuple[int, dict[str, int]]:
    """Metadata v4 for `topics` as `client_id`: (throttle_time_ms, {topic: error_code})."""
    body = i32(len(topics)) + b"".join(string(t) for t in topics) + i8(1 if allow_auto_topic_creation else 0)
    sock.sendall(request(3, 4, correlation_id, body, client_id=client_id))
    r = Reader(recv_frame(sock))
    if r.i32() != correlation_id:
        raise ProtocolError("wrong correlation id")
    throttle = r.i32()
    for _ in range(r.array_len()):
        r.i32(), r.string(), r.i32(), r.string()
    r.string()
    r.i32()
    errors = {}
    for _ in range(r.array_len()):
        code, name = r.i16(), r.string()
        r.i8()
        for _ in range(r.array_len()):
            r.i16(), r.i32(), r.i32()
            for _ in range(2):
                for _ in range(r.array_len()):
                    r.i32()
        errors[name] = code
    return throttle, errors


def incremental_alter_broker_configs_v0(sock, broker: str, configs: dict[str, str | None],
                                        correlation_id: int = 41) -> tuple[int, str | None]:
    """IncrementalAlterConfigs v0 of one BROKER resource (`broker` "" is the cluster-wide
    default, which neither Python admin client can name): SET each key, DELETE where the
    value is None. Returns (error_code, error_message)."""
    entries = b"".join(string(k) + i8(0 if v is not None else 1) + string(v) for k, v in configs.items())
    body = i32(1) + i8(4) + string(broker) + i32(len(configs)) + entries + i8(0)
    sock.sendall(request(44, 0, correlation_id, body))
    r = Reader(recv_frame(sock))
    if r.i32() != correlation_id:
        raise ProtocolError("wrong correlation id")
    r.i32()
    if r.array_len() != 1:
        raise ProtocolError("expected one resource")
    code, message = r.i16(), r.string()
    return code, message


def assert_serving(server) -> None:
    """The broker process is alive and a brand-new connection gets a good ApiVersions answer."""
    assert server.alive(), f"moldau process died\n{server.log_tail()}"
    with connect(server.address, timeout=5.0) as sock:
        resp = api_versions(sock, version=0)
    assert resp.error_code == 0
    assert resp.range_of(18) is not None
