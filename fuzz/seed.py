#!/usr/bin/env python3
"""Seeds fuzz/corpus/* from real traffic: real clients against a real `moldau server`.

Runs confluent-kafka (librdkafka), kafka-python and kcat (when installed) through a recording
TCP proxy (the broker advertises the proxy, so every connection goes through it) and writes:
  decode_request/     request frames as clients sent them (size prefix removed), a few per
                      API and version;
  record_validation/  record batches from the broker's segments (every codec, keys,
                      headers, idempotent and transactional producers, control batches),
                      alone and a few concatenated;
  storage_recovery/   real partition directories in the layout `fuzzing::storage_recovery`
                      reads (control byte, offset index, recovery point, one or two segments),
                      whole and with torn tails.
Small files only (at most 8 KiB). Existing seed files are replaced; run it again when the
clients or the storage format change, then commit the corpora.

Usage: MOLDAU_BIN=target/debug/moldau <venv>/bin/python fuzz/seed.py
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAX_FILE = 8 * 1024
PER_VERSION = 3

frames: list[tuple[str, bytes]] = []
frames_lock = threading.Lock()
client_label = ["none"]


def pump(src: socket.socket, dst: socket.socket, record: bool) -> None:
    buf = b""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
            if record:
                buf += data
                while len(buf) >= 4:
                    (size,) = struct.unpack(">i", buf[:4])
                    if len(buf) < 4 + size:
                        break
                    with frames_lock:
                        frames.append((client_label[0], buf[4:4 + size]))
                    buf = buf[4 + size:]
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def proxy(listener: socket.socket, upstream: list[tuple[str, int]]) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        server = socket.create_connection(upstream[0])
        threading.Thread(target=pump, args=(client, server, True), daemon=True).start()
        threading.Thread(target=pump, args=(server, client, False), daemon=True).start()


def run_clients(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

    client_label[0] = "librdkafka"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic("seed-plain", 1, 1, config={"segment.ms": "300"}),
              NewTopic("seed-compact", 1, 1, config={"cleanup.policy": "compact"}),
              NewTopic("seed-parts", 2, 1)]
    for f in admin.create_topics(topics).values():
        f.result(30)
    admin.create_partitions([NewPartitions("seed-parts", 3)])["seed-parts"].result(30)
    admin.describe_configs([ConfigResource("topic", "seed-plain")])
    list(admin.list_topics(timeout=10).topics)
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"]:
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                      "linger.ms": 5, "enable.idempotence": codec != "none"})
        for i in range(12):
            p.produce("seed-plain", key=f"k{i % 3}".encode(), value=f"{codec} value {i}".encode() * 3,
                      headers=[("h", b"v"), ("trace", None)] if i % 2 else None)
            p.produce("seed-compact", key=f"key-{i % 4}".encode(),
                      value=None if i == 7 else f"{codec}-{i}".encode())
        p.produce("seed-parts", value=b"x", partition=2)
        assert p.flush(30) == 0
        time.sleep(0.4)  # seed-plain rolls a segment (segment.ms) at its next append
        del p
    tp = Producer({"bootstrap.servers": bootstrap, "transactional.id": "seed-txn"})
    tp.init_transactions(30)
    for commit in (True, False):
        tp.begin_transaction()
        for i in range(3):
            tp.produce("seed-plain", value=f"txn {commit} {i}".encode())
        tp.commit_transaction(30) if commit else tp.abort_transaction(30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "seed-group",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.subscribe(["seed-plain", "seed-compact"])
    got = 0
    deadline = time.time() + 60
    while got < 20 and time.time() < deadline:
        m = c.poll(1.0)
        if m is not None and not m.error():
            got += 1
    c.commit(asynchronous=False)
    c.committed([TopicPartition("seed-plain", 0)], 10)
    c.close()

    client_label[0] = "kafka-python"
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic as KNewTopic
    ka = KafkaAdminClient(bootstrap_servers=bootstrap)
    ka.create_topics([KNewTopic("seed-kp", 1, 1)])
    for call in (ka.list_groups, lambda: ka.describe_groups(["seed-group"]),
                 ka.describe_cluster, lambda: ka.list_group_offsets("seed-group"),
                 lambda: ka.describe_log_dirs(), lambda: ka.list_transactions(),
                 lambda: ka.describe_producers([("seed-plain", 0)]),
                 lambda: ka.delete_records({("seed-parts", 2): 0})):
        try:
            call()
        except Exception as e:  # an API moldau lacks still sent its request frame
            print(f"kafka-python admin call: {e!r}")
    kp = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", linger_ms=5)
    for i in range(10):
        kp.send("seed-kp", key=b"k", value=b"kafka-python %d" % i, headers=[("a", b"b")])
    kp.flush(30)
    kp.close()
    kc = KafkaConsumer("seed-kp", bootstrap_servers=bootstrap, group_id="seed-kp-group",
                       auto_offset_reset="earliest", consumer_timeout_ms=5000)
    for _ in kc:
        pass
    kc.commit()
    kc.close()
    ka.delete_topics(["seed-kp"])
    ka.close()

    if shutil.which("kcat"):
        client_label[0] = "kcat"
        subprocess.run(["kcat", "-b", bootstrap, "-L"], check=True, capture_output=True, timeout=60)
        subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", "seed-plain", "-k", "kcat", "-z", "lz4"],
                       input=b"one\ntwo\n", check=True, timeout=60)
        subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", "seed-plain", "-c", "3", "-e"],
                       check=True, capture_output=True, timeout=60)


def batches(log: bytes) -> list[bytes]:
    out, at = [], 0
    while at + 12 <= len(log):
        (length,) = struct.unpack(">i", log[at + 8:at + 12])
        if length <= 0 or at + 12 + length > len(log):
            break
        out.append(log[at:at + 12 + length])
        at += 12 + length
    return out


def write_corpus(name: str, files: dict[str, bytes]) -> None:
    d = HERE / "corpus" / name
    d.mkdir(parents=True, exist_ok=True)
    for old in d.glob("seed-*"):
        old.unlink()
    for fname, data in files.items():
        if 0 < len(data) <= MAX_FILE:
            (d / f"seed-{fname}").write_bytes(data)
    print(f"{name}: {len([f for f in files.values() if 0 < len(f) <= MAX_FILE])} seed files")


def main() -> None:
    binary = os.environ.get("MOLDAU_BIN") or str(HERE.parent / "target/debug/moldau")
    work = Path(tempfile.mkdtemp(prefix="moldau-seed-"))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    pport = listener.getsockname()[1]
    broker = subprocess.Popen(
        [binary, "server", "--listen", "127.0.0.1:0", "--data-dir", str(work / "data"),
         "--advertise", f"127.0.0.1:{pport}"],
        stdout=subprocess.PIPE, stderr=open(work / "stderr", "wb"), text=True)
    try:
        line = broker.stdout.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        if not m:
            sys.exit(f"broker did not start: {line!r}")
        upstream = [("127.0.0.1", int(m.group(1)))]
        threading.Thread(target=proxy, args=(listener, upstream), daemon=True).start()
        run_clients(f"127.0.0.1:{pport}")
    finally:
        broker.terminate()
        broker.wait(30)
        listener.close()

    # decode_request: a few frames per (client, api, version), smallest first, distinct.
    by_key: dict[tuple[str, int, int], list[bytes]] = {}
    for label, f in frames:
        if len(f) >= 4:
            api, ver = struct.unpack(">hh", f[:4])
            by_key.setdefault((label, api, ver), []).append(f)
    req = {}
    for (label, api, ver), fs in sorted(by_key.items()):
        for i, f in enumerate(sorted(set(fs), key=len)[:PER_VERSION]):
            req[f"{label}-api{api}-v{ver}-{i}"] = f
    write_corpus("decode_request", req)

    # record_validation: distinct batches of every topic, plus a few runs of batches.
    data = work / "data"
    rec, seen = {}, set()
    for part in sorted(p for p in data.iterdir() if p.is_dir()):
        logs = sorted(part.glob("*.log"))
        all_batches = [b for log in logs for b in batches(log.read_bytes())]
        for i, b in enumerate(all_batches):
            if b[17:21] not in seen or i % 7 == 0:
                seen.add(b[17:21])
                rec[f"{part.name}-{i}"] = b
        if len(all_batches) >= 3:
            rec[f"{part.name}-run"] = b"".join(all_batches[:3])
    write_corpus("record_validation", rec)

    # storage_recovery: control byte, index entries, [recovery point], [split], segment(s).
    sto = {}
    for part in sorted(p for p in data.iterdir() if p.is_dir()):
        logs = sorted(part.glob("*.log"))
        if not logs:
            continue
        seg = logs[0].read_bytes()
        if not seg:
            continue
        index_path = logs[0].with_suffix(".index")
        index = index_path.read_bytes() if index_path.exists() else b""
        entries = [index[i:i + 8] for i in range(0, len(index) - 7, 8)]
        entries = [e for e in entries if e != b"\0" * 8 or e is entries[0]][:15]
        n = len(entries)
        sto[f"{part.name}-plain"] = bytes([0x00]) + seg
        sto[f"{part.name}-index"] = bytes([0x10 | n]) + b"".join(entries) + seg
        sto[f"{part.name}-clean"] = bytes([0x30 | n]) + b"".join(entries) + seg
        sto[f"{part.name}-rp"] = bytes([0x40, len(batches(seg)) // 2]) + seg
        sto[f"{part.name}-torn"] = bytes([0x00]) + seg[: max(1, len(seg) - 7)]
        if len(logs) >= 2:
            seg1 = logs[1].read_bytes()
            sto[f"{part.name}-two"] = bytes([0x80]) + struct.pack(">H", len(seg)) + seg + seg1
            sto[f"{part.name}-two-rp"] = (bytes([0xC0, 1]) + struct.pack(">H", len(seg)) + seg
                                          + seg1[: max(1, len(seg1) - 5)])
    write_corpus("storage_recovery", sto)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
