"""Damage on disk never deletes data (issue 8, item 3). One flipped byte in an older segment of a
partition used to truncate that segment and delete every later healthy one at the next start. Now
the broker starts, keeps that partition offline (Produce and Fetch answer KAFKA_STORAGE_ERROR, its
files untouched), serves every other partition, and once the byte is restored every record is
back. Both after a clean shutdown and after kill -9."""

from __future__ import annotations

from pathlib import Path

import pytest

import clients
import kwire

KAFKA_STORAGE_ERROR = 56
RECORDS = 1500


def _files(d: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(d.iterdir())}


@pytest.mark.parametrize("stop", ["sigterm", "kill -9"])
def test_one_bad_byte_in_an_older_segment_deletes_nothing(brokers, topic, stop):
    server = brokers.start(**{"log.segment.bytes": 16384})
    victim, bystander = topic, topic + "-ok"
    values = [b"%05d" % i + b"v" * 95 for i in range(RECORDS)]
    clients.confluent_produce(server.bootstrap, victim, [{"value": v} for v in values], acks="all",
                              linger_ms=0, batch_num_messages=20)
    clients.confluent_produce(server.bootstrap, bystander, [{"value": b"before"}])
    if stop == "sigterm":
        server.stop()
        # Kafka's checkpoint format: version, count, "topic partition recovery-point" lines.
        lines = (server.data_dir / "recovery-point-offset-checkpoint").read_text().splitlines()
        assert lines[0] == "0" and f"{victim} 0 {RECORDS}" in lines[2:], lines
    else:
        server.crash()

    part = server.data_dir / f"{victim}-0"
    segments = sorted(part.glob("*.log"))
    assert len(segments) >= 4, segments
    victim_file = segments[1]
    data = bytearray(victim_file.read_bytes())
    at = len(data) - 10  # inside the last batch, after the last index entry: where the scan looks
    data[at] ^= 0x40
    victim_file.write_bytes(bytes(data))
    damaged = _files(part)

    server.start()
    with kwire.connect(server.address) as sock:
        r = kwire.produce_v7(sock, victim, 0, kwire.record_batch([kwire.Rec(None, b"x")], 0))
        assert r.error_code == KAFKA_STORAGE_ERROR
        f = kwire.fetch_v4(sock, victim, 0, 0)
        assert f.error_code == KAFKA_STORAGE_ERROR
    # Every other partition is served.
    assert clients.confluent_produce(server.bootstrap, bystander, [{"value": b"after"}])[0].offset() == 1
    assert [m.value for m in clients.kp_consume(server.bootstrap, bystander, 0, 2)] == [b"before", b"after"]
    assert _files(part) == damaged, "nothing may be truncated or deleted"
    assert "damaged below its recovery point" in server.log_tail(20000)
    server.stop()

    data[at] ^= 0x40
    victim_file.write_bytes(bytes(data))
    server.start()
    got = clients.confluent_consume(server.bootstrap, victim, 0, RECORDS)
    assert [m.value for m in got] == values
    assert clients.confluent_watermarks(server.bootstrap, victim) == (0, RECORDS)
