"""Every record of every batch is validated at produce, as Kafka's LogValidator does (issue 8,
items 4 and 5): batches whose CRC is valid but whose records are garbage are refused whole with
Kafka's error (INVALID_RECORD for a record structure that does not add up, CORRUPT_MESSAGE for a
payload that does not decompress), null keys on compacted topics are INVALID_RECORD, a batch that
decompresses past the broker's bound is MESSAGE_TOO_LARGE, and clients may not write control
batches. After each refusal the partition holds only what real clients can read: confluent-kafka
and kafka-python consume it to the end. Real clients' batches pass for every codec (the rest of the
suite produces with every codec through four clients and kcat)."""

from __future__ import annotations

import gzip
import random

import pytest
from confluent_kafka.admin import NewTopic

import clients
import kwire
from kwire import Rec

CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_RECORD = 87
GZIP = 1


def raw_batch(records_section: bytes, count: int, *, attributes: int = 0, first_timestamp: int = 0,
              producer_id: int = -1) -> bytes:
    """A v2 batch around an arbitrary records section, with a valid CRC."""
    after_crc = (kwire.i16(attributes) + kwire.i32(count - 1) + kwire.i64(first_timestamp)
                 + kwire.i64(first_timestamp) + kwire.i64(producer_id) + kwire.i16(-1) + kwire.i32(-1)
                 + kwire.i32(count) + records_section)
    after_length = kwire.i32(-1) + kwire.i8(2) + kwire.struct.pack(">I", kwire.crc32c(after_crc)) + after_crc
    return kwire.i64(0) + kwire.i32(len(after_length)) + after_length


def record_with_header_count(n: int) -> bytes:
    body = kwire.i8(0) + kwire.varint(0) + kwire.varint(0) + kwire.varlong_bytes(b"k")
    body += kwire.varlong_bytes(b"value") + kwire.varint(n) + b"\x00" * 6
    return kwire.varint(len(body)) + body


def hostile_batches(now: int) -> dict[str, tuple[bytes, int]]:
    good = b"".join(kwire.encode_record(i, Rec(b"k%d" % i, b"v" * 20)) for i in range(3))
    wrong_len = bytearray(good)
    wrong_len[0] += 4  # the first record claims 2 more bytes than its fields hold
    return {
        "random records section": (raw_batch(random.Random(8).randbytes(200), 3, first_timestamp=now),
                                   INVALID_RECORD),
        "wrong record length": (raw_batch(bytes(wrong_len), 3, first_timestamp=now), INVALID_RECORD),
        "gzip flag on non-gzip data": (raw_batch(good, 3, attributes=GZIP, first_timestamp=now),
                                       CORRUPT_MESSAGE),
        "header count -5": (raw_batch(record_with_header_count(-5), 1, first_timestamp=now), INVALID_RECORD),
        "header count 2^31-1": (raw_batch(record_with_header_count(2**31 - 1), 1, first_timestamp=now),
                                INVALID_RECORD),
        "more records claimed than present": (raw_batch(good, 4, first_timestamp=now), INVALID_RECORD),
        "control batch from a client": (raw_batch(good, 3, attributes=0x20 | 0x10, first_timestamp=now,
                                                  producer_id=7), INVALID_RECORD),
    }


def _consume_all(broker, topic, expected: int):
    c = clients.confluent_consume(broker.bootstrap, topic, 0, expected)
    k = clients.kp_consume(broker.bootstrap, topic, 0, expected)
    assert [m.value for m in c] == [m.value for m in k]
    return c


def test_hostile_batches_are_refused_whole(broker, topic):
    import time
    now = int(time.time() * 1000)
    clients.confluent_produce(broker.bootstrap, topic, [{"value": b"before"}])
    with kwire.connect(broker.address) as sock:
        for i, (name, (batch, code)) in enumerate(hostile_batches(now).items()):
            r = kwire.produce_v7(sock, topic, 0, batch, correlation_id=100 + i)
            assert r.error_code == code, f"{name}: got {r.error_code}, want {code}"
    assert clients.confluent_watermarks(broker.bootstrap, topic) == (0, 1)
    clients.confluent_produce(broker.bootstrap, topic, [{"value": b"after"}])
    assert [m.value for m in _consume_all(broker, topic, 2)] == [b"before", b"after"]
    kwire.assert_serving(broker)


def test_null_keys_are_refused_on_compacted_topics(broker, topic):
    admin = clients.confluent_admin(broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})],
                        request_timeout=15)[topic].result(timeout=20)
    p = clients.confluent_producer(broker.bootstrap, retries=0)
    errors = []
    p.produce(topic, key=b"k", value=b"keyed", partition=0, on_delivery=lambda e, m: errors.append(e))
    p.flush(20)
    p.produce(topic, key=None, value=b"keyless", partition=0, on_delivery=lambda e, m: errors.append(e))
    p.flush(20)
    assert errors[0] is None and errors[1] is not None and errors[1].code() == INVALID_RECORD, errors
    from kafka.errors import InvalidRecordError
    with pytest.raises(InvalidRecordError):
        clients.kp_produce(broker.bootstrap, topic, [{"value": b"keyless"}], retries=0)
    assert clients.confluent_watermarks(broker.bootstrap, topic) == (0, 1)
    assert [m.value for m in _consume_all(broker, topic, 1)] == [b"keyed"]


def test_decompression_bombs_are_refused(broker, topic):
    """100 MiB of zeros gzip to ~100 KiB: under max.message.bytes, over the 64 MiB bound on what
    one batch may decompress to (Kafka has none; its cleaner and consumers would pay)."""
    import time
    now = int(time.time() * 1000)
    record = kwire.encode_record(0, Rec(b"k", b"\x00" * (100 << 20)))
    bomb = raw_batch(gzip.compress(record, compresslevel=9), 1, attributes=GZIP, first_timestamp=now)
    assert len(bomb) < 1 << 20
    clients.confluent_produce(broker.bootstrap, topic, [{"value": b"before"}])
    with kwire.connect(broker.address, timeout=60) as sock:
        r = kwire.produce_v7(sock, topic, 0, bomb)
    assert r.error_code == MESSAGE_TOO_LARGE
    # A batch that inflates to a few MiB is fine.
    fine = kwire.encode_record(0, Rec(b"k", b"\x00" * (4 << 20)))
    with kwire.connect(broker.address, timeout=60) as sock:
        r = kwire.produce_v7(sock, topic, 0, raw_batch(gzip.compress(fine), 1, attributes=GZIP,
                                                       first_timestamp=now))
    assert r.error_code == 0 and r.base_offset == 1
    assert clients.confluent_watermarks(broker.bootstrap, topic) == (0, 2)
