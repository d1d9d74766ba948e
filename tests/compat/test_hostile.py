"""Hostile and malformed frames over raw sockets. After each one the broker process must still
be alive and serve a fresh connection (raw ApiVersions) and a real client; where Kafka's answer
is defined (closed connection, UNSUPPORTED_VERSION, CORRUPT_MESSAGE) it is asserted exactly."""

from __future__ import annotations

import random
import socket
import struct
import time

import pytest

import clients
import kwire
from kwire import assert_serving as free_socket_check

CLOSE_TIMEOUT_S = 5.0


def assert_healthy(broker, topic=None):
    free_socket_check(broker)
    if topic is not None:
        delivered = clients.confluent_produce(broker.bootstrap, topic, [{"key": b"k", "value": b"still here"}])
        assert delivered[0].error() is None


def _send(broker, data: bytes, close_after: bool = False):
    sock = socket.create_connection(broker.address, timeout=5)
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    if close_after:
        sock.close()
        return None
    return sock


def test_garbage_bytes(broker, topic):
    rnd = random.Random(1234)
    for _ in range(5):
        sock = _send(broker, rnd.randbytes(4096))
        kwire.wait_closed(sock, 1.0)
        sock.close()
    # an unknown API key (0xfefe) in a well-sized frame: Kafka closes the connection
    sock = _send(broker, b"\x00\x00\x00\x10" + b"\xfe" * 16)
    assert kwire.wait_closed(sock, CLOSE_TIMEOUT_S), "connection left open after a garbage frame"
    sock.close()
    assert_healthy(broker, topic)


def test_negative_size_prefix_closes(broker, topic):
    sock = _send(broker, struct.pack(">i", -1) + b"\x00" * 16)
    assert kwire.wait_closed(sock, CLOSE_TIMEOUT_S), "negative frame size must close the connection"
    sock.close()
    assert_healthy(broker, topic)


@pytest.mark.parametrize("size", [100 * 1024 * 1024 + 1, 200 * 1024 * 1024, 0x7FFFFFFF])
def test_huge_size_prefix_closes(broker, topic, size):
    # Only the prefix is sent: a broker that allocates or waits for the body instead of
    # checking socket.request.max.bytes (100 MiB) first would hang here or eat memory.
    sock = _send(broker, struct.pack(">i", size) + b"\x00\x12\x00\x00")
    assert kwire.wait_closed(sock, CLOSE_TIMEOUT_S), f"size {size} > 100 MiB must close the connection"
    sock.close()
    assert_healthy(broker, topic)


def test_truncated_frames_then_close(broker, topic):
    full = kwire.api_versions_request(0, 1)
    for cut in (1, 3, 4, 6, len(full) - 1):
        _send(broker, full[:cut], close_after=True)
    # a frame promising 100 bytes, 10 sent, then close
    _send(broker, struct.pack(">i", 100) + b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00", close_after=True)
    # a valid Produce header with its body cut short
    frame = kwire.request(0, 7, 5, kwire.produce_v7_body(topic, 0, b"x" * 50))
    _send(broker, frame[:-20], close_after=True)
    assert_healthy(broker, topic)


def test_zero_size_frame(broker, topic):
    sock = _send(broker, struct.pack(">i", 0))
    assert kwire.wait_closed(sock, CLOSE_TIMEOUT_S), "an empty frame has no header: connection must close"
    sock.close()
    assert_healthy(broker, topic)


def test_unknown_api_key(broker, topic):
    with kwire.connect(broker.address) as sock:
        sock.sendall(kwire.request(9999, 0, 42, b""))
        sock.settimeout(CLOSE_TIMEOUT_S)
        try:
            frame = kwire.recv_frame(sock)
        except kwire.ConnectionClosed:
            frame = None  # Kafka closes the connection on an unknown API key
        except socket.timeout:
            pytest.fail("broker neither answered nor closed after an unknown API key")
        if frame is not None:
            assert struct.unpack(">i", frame[:4])[0] == 42
    assert_healthy(broker, topic)


def test_api_versions_unsupported_version(broker, topic):
    """ApiVersions v99 -> an ApiVersions v0 response with UNSUPPORTED_VERSION (35), listing at least
    the ApiVersions range itself so the client can retry with a version the broker speaks."""
    with kwire.connect(broker.address) as sock:
        sock.settimeout(CLOSE_TIMEOUT_S)
        sock.sendall(kwire.api_versions_request(99, 4242))
        resp = kwire.parse_api_versions_v0(kwire.recv_frame(sock))
        assert resp.correlation_id == 4242
        assert resp.error_code == 35
        rng = resp.range_of(18)
        assert rng is not None and rng.min_version == 0 and rng.max_version >= 3, resp
        # The connection stays usable: retry with v0 on the same socket.
        ok = kwire.api_versions(sock, version=0, correlation_id=4243)
        assert ok.error_code == 0
    assert_healthy(broker, topic)


def test_api_versions_v0_lists_implemented_apis(broker):
    with kwire.connect(broker.address) as sock:
        resp = kwire.api_versions(sock, 0)
    keys = {k.api_key: k for k in resp.api_keys}
    # Produce, Fetch, ListOffsets, Metadata, ApiVersions, CreateTopics, DeleteTopics, InitProducerId,
    # DeleteRecords, DescribeConfigs, AlterConfigs, DescribeLogDirs, CreatePartitions,
    # IncrementalAlterConfigs, DescribeCluster
    for key in (0, 1, 2, 3, 18, 19, 20, 21, 22, 32, 33, 35, 37, 44, 60):
        assert key in keys, f"API key {key} not advertised"
        assert keys[key].min_version <= keys[key].max_version
    assert keys[0].min_version <= 3 <= keys[0].max_version  # Produce v3..: record batch v2
    assert keys[0].max_version >= 7  # kcat, aiokafka, kafkajs produce with v7
    assert keys[1].max_version >= 11  # kcat, aiokafka, kafkajs fetch with v11


def _produce_frame(version: int, body: bytes, corr: int) -> bytes:
    return kwire.request(0, version, corr, body, flexible=version >= 9)


@pytest.mark.parametrize("version", [7, 9])
def test_produce_claiming_max_topics(broker, topic, version):
    """A 12-byte Produce body whose topic array claims i32::MAX entries must not make the broker
    allocate for them (a decoder that pre-allocates from the claimed length aborts the process)."""
    if version >= 9:
        # compact nullable transactional id (null), acks, timeout, compact array len+1 = 2^31
        body = kwire.uvarint(0) + kwire.i16(-1) + kwire.i32(1000) + kwire.uvarint(0x80000000)
    else:
        body = kwire.string(None) + kwire.i16(-1) + kwire.i32(1000) + kwire.i32(0x7FFFFFFF)
    assert len(body) == 12
    with kwire.connect(broker.address) as sock:
        sock.sendall(_produce_frame(version, body, 77))
        kwire.wait_closed(sock, 2.0)
    assert_healthy(broker, topic)


def test_fetch_claiming_max_topics(broker, topic):
    body = (kwire.i32(-1) + kwire.i32(100) + kwire.i32(1) + kwire.i32(1 << 20) + kwire.i8(0)
            + kwire.i32(0x7FFFFFFF))
    with kwire.connect(broker.address) as sock:
        sock.sendall(kwire.request(1, 4, 78, body))
        kwire.wait_closed(sock, 2.0)
    assert_healthy(broker, topic)


def _seed(broker, topic):
    clients.confluent_produce(broker.bootstrap, topic, [{"key": b"seed", "value": b"0"}])


def test_raw_produce_good_batch(broker, topic):
    """Sanity check of the raw encoder: a well-formed batch is accepted at the next offset."""
    _seed(broker, topic)
    batch = kwire.record_batch([kwire.Rec(b"rk", b"rv", [("h", b"x")]), kwire.Rec(None, b"second", timestamp_delta=5)],
                               int(time.time() * 1000))
    with kwire.connect(broker.address) as sock:
        res = kwire.produce_v7(sock, topic, 0, batch)
    assert (res.error_code, res.base_offset) == (0, 1)
    got = clients.confluent_consume(broker.bootstrap, topic, 0, 3)
    assert [(m.key, m.value, m.headers) for m in got[1:]] == [(b"rk", b"rv", (("h", b"x"),)), (None, b"second", ())]


def test_bad_crc_is_corrupt_message(broker, topic):
    _seed(broker, topic)
    batch = kwire.record_batch([kwire.Rec(b"k", b"v")], int(time.time() * 1000), corrupt_crc=True)
    with kwire.connect(broker.address) as sock:
        res = kwire.produce_v7(sock, topic, 0, batch)
        assert res.error_code == 2, res  # CORRUPT_MESSAGE
        # the connection is still good for the next request
        good = kwire.record_batch([kwire.Rec(b"k", b"good")], int(time.time() * 1000))
        res = kwire.produce_v7(sock, topic, 0, good, correlation_id=12)
        assert (res.error_code, res.base_offset) == (0, 1)
    assert clients.confluent_watermarks(broker.bootstrap, topic) == (0, 2)
    got = clients.confluent_consume(broker.bootstrap, topic, 0, 2)
    assert [m.value for m in got] == [b"0", b"good"]
    assert_healthy(broker, topic)


def test_batch_claiming_max_records(broker, topic):
    """A batch whose header claims i32::MAX records (CRC valid) is rejected, never allocated for."""
    _seed(broker, topic)
    batch = kwire.record_batch([kwire.Rec(b"k", b"v")], int(time.time() * 1000), record_count=0x7FFFFFFF)
    with kwire.connect(broker.address) as sock:
        sock.settimeout(CLOSE_TIMEOUT_S)
        res = kwire.produce_v7(sock, topic, 0, batch)
    assert res.error_code in (2, 87), res  # CORRUPT_MESSAGE or INVALID_RECORD
    assert clients.confluent_watermarks(broker.bootstrap, topic) == (0, 1)
    assert_healthy(broker, topic)


def test_truncated_batch_in_produce(broker, topic):
    _seed(broker, topic)
    batch = kwire.record_batch([kwire.Rec(b"k", b"v" * 100)], int(time.time() * 1000))
    with kwire.connect(broker.address) as sock:
        sock.settimeout(CLOSE_TIMEOUT_S)
        try:
            res = kwire.produce_v7(sock, topic, 0, batch[:-30])
            assert res.error_code in (2, 87), res
        except kwire.ConnectionClosed:
            pass  # closing the connection is also acceptable
    assert clients.confluent_watermarks(broker.bootstrap, topic) == (0, 1)
    assert_healthy(broker, topic)


def test_many_connections_at_once(broker):
    socks = [socket.create_connection(broker.address, timeout=5) for _ in range(200)]
    try:
        for i, s in enumerate(socks[:20]):
            s.sendall(kwire.api_versions_request(0, i))
        for i, s in enumerate(socks[:20]):
            assert kwire.parse_api_versions_v0(kwire.recv_frame(s)).correlation_id == i
    finally:
        for s in socks:
            s.close()
    free_socket_check(broker)


def test_pipelined_requests_answered_in_order(broker):
    with kwire.connect(broker.address) as sock:
        sock.sendall(b"".join(kwire.api_versions_request(0, 1000 + i) for i in range(50)))
        for i in range(50):
            assert kwire.parse_api_versions_v0(kwire.recv_frame(sock)).correlation_id == 1000 + i


def test_acks0_produce_gets_no_response(broker, topic):
    """acks=0 produce requests get no response: the next frame on the connection answers the
    request after it."""
    _seed(broker, topic)
    batch = kwire.record_batch([kwire.Rec(b"k", b"fire-and-forget")], int(time.time() * 1000))
    with kwire.connect(broker.address) as sock:
        sock.settimeout(CLOSE_TIMEOUT_S)
        sock.sendall(kwire.request(0, 7, 500, kwire.produce_v7_body(topic, 0, batch, acks=0)))
        resp = kwire.api_versions(sock, version=0, correlation_id=501)
        assert resp.error_code == 0
    assert clients.confluent_watermarks(broker.bootstrap, topic) == (0, 2)


def test_produce_to_unknown_partition(broker, topic):
    _seed(broker, topic)
    batch = kwire.record_batch([kwire.Rec(b"k", b"v")], int(time.time() * 1000))
    with kwire.connect(broker.address) as sock:
        res = kwire.produce_v7(sock, topic, 7, batch)
    assert res.error_code == 3, res  # UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_out_of_range(broker, topic):
    _seed(broker, topic)
    with kwire.connect(broker.address) as sock:
        part = kwire.fetch_v4(sock, topic, 0, 1000)
        # OFFSET_OUT_OF_RANGE; as in Kafka 4.4 the error answer carries no offsets (checked
        # against Kafka by crates/conformance).
        assert (part.error_code, part.high_watermark) == (1, -1)
        part = kwire.fetch_v4(sock, topic, 0, 1, correlation_id=22)  # at the end: empty, no error
        assert (part.error_code, part.high_watermark) == (0, 1)
        assert not part.records


def test_oversized_client_id_string(broker, topic):
    """A header string whose length runs past the frame: the request is rejected, nothing dies."""
    body = kwire.i16(18) + kwire.i16(0) + kwire.i32(9) + kwire.i16(32000) + b"short"
    with kwire.connect(broker.address) as sock:
        sock.sendall(kwire.i32(len(body)) + body)
        assert kwire.wait_closed(sock, CLOSE_TIMEOUT_S), "malformed header must close the connection"
    assert_healthy(broker, topic)
