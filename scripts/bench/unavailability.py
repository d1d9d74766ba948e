#!/usr/bin/env python3
"""Produce unavailability when a partition leader dies (kill -9) or stops (SIGTERM), issue 10.

Three combined broker+controller nodes on loopback (no proxies), a topic of `--partitions`
partitions with three replicas (min.insync.replicas=2), and one idempotent acks=all
confluent-kafka producer (librdkafka, linger.ms=0) sending `--rate` records a second
round-robin over the partitions. Every record's send time and acknowledgement time are kept.
Each round picks the leader of partition 0, sends the fault, waits `--after` seconds, restarts
the node, waits until every ISR is full again and the load is steady, and goes on with the
next round (kill -9 rounds, then SIGTERM rounds).

Per fault, over the partitions the victim led at that moment:
- `gap_ms`: the longest time without any acknowledgement in one of those partitions across
  the fault (for kill -9 this is the unavailability: the session must expire, the controller
  elect, the client learn the new leader);
- latency of the records sent to those partitions from 1 s before the fault to `--after`
  seconds after it (send -> acknowledgement): p50, p99, max. For SIGTERM the issue's "p99
  produce stall" is this p99 (the controlled shutdown moves leadership before the exit).
Also printed: the broker session timeout in force and the machine's load average.

Usage: MOLDAU_BIN=target/release/moldau python scripts/bench/unavailability.py
       [--rounds 3] [--rate 1000] [--partitions 3] [--after 15]
       [--session-timeout-ms N]  (default: Moldau's default, Kafka's 9000) [--faults kill,term]
       RDKAFKA_DEBUG=metadata,msg  librdkafka's debug log (stderr); KEEP=1 keeps data and logs
Prints one JSON object per fault, then a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
import shutil

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster import cluster, pct, stop, wait_for  # noqa: E402

TOPIC = "unavailability"


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def partitions(bootstrap: str):
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=5)
    return md.topics[TOPIC].partitions


class Load:
    """One producer thread at a fixed rate; send and ack times per record."""

    def __init__(self, bootstrap: str, n_partitions: int, rate: float):
        self.sent: dict[int, tuple[int, float]] = {}  # seq -> (partition, send time)
        self.acked: dict[int, float] = {}  # seq -> ack time
        self.failed = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                "linger.ms": 0, "message.timeout.ms": 120000}
        if os.environ.get("RDKAFKA_DEBUG"):
            conf["debug"] = os.environ["RDKAFKA_DEBUG"]
        self.p = Producer(conf)
        self.n, self.rate = n_partitions, rate
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        seq, interval, next_at = 0, 1.0 / self.rate, time.monotonic()
        while not self.stopping.is_set():
            part = seq % self.n

            def done(err, msg, seq=seq):
                now = time.monotonic()
                with self.lock:
                    if err is None:
                        self.acked[seq] = now
                    else:
                        self.failed += 1

            now = time.monotonic()
            with self.lock:
                self.sent[seq] = (part, now)
            self.p.produce(TOPIC, value=b"x" * 100, partition=part, on_delivery=done)
            seq += 1
            next_at += interval
            self.p.poll(max(0.0, next_at - time.monotonic()))
        self.p.flush(130)

    def analyse(self, led: list[int], t_fault: float, after: float) -> dict:
        with self.lock:
            sent, acked = dict(self.sent), dict(self.acked)
        lat, gap = [], 0.0
        for p in led:
            times = sorted(acked[s] for s, (q, t) in sent.items() if q == p and s in acked
                           and t_fault - 5 <= acked[s] <= t_fault + after + 30)
            # The gap that spans the fault (or starts after it).
            for a, b in zip(times, times[1:]):
                if b >= t_fault and a <= t_fault + after:
                    gap = max(gap, b - a)
            lat += [(acked[s] - t) * 1000 for s, (q, t) in sent.items()
                    if q == p and t_fault - 1 <= t <= t_fault + after and s in acked]
        unacked = sum(1 for s, (q, t) in sent.items() if q in led and t_fault - 1 <= t <= t_fault + after
                      and s not in acked)
        return {"gap_ms": round(gap * 1000), "records": len(lat), "unacked": unacked,
                "p50_ms": round(pct(lat, 50), 1) if lat else None,
                "p99_ms": round(pct(lat, 99), 1) if lat else None,
                "max_ms": round(max(lat), 1) if lat else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--after", type=float, default=15)
    ap.add_argument("--session-timeout-ms", type=int, default=None)
    ap.add_argument("--faults", default="kill,term", help="kill (-9), term (SIGTERM), or both")
    a = ap.parse_args()
    binary = Path(os.environ.get("MOLDAU_BIN", "target/release/moldau"))
    settings = {"min.insync.replicas": 2}
    if a.session_timeout_ms:
        settings["broker.session.timeout.ms"] = a.session_timeout_ms
    base = Path(tempfile.mkdtemp(prefix="moldau-bench-unavail-", dir=os.environ.get("BENCH_DIR")))
    nodes = []
    results = defaultdict(list)
    try:
        nodes, _ = cluster(binary, base, 3, settings)
        boot = ",".join(x.address for x in nodes)
        admin = AdminClient({"bootstrap.servers": boot})
        admin.create_topics([NewTopic(TOPIC, a.partitions, 3)], operation_timeout=60)[TOPIC].result(60)
        wait_for(lambda: all(m.leader >= 0 and len(m.isrs) == 3 for m in partitions(boot).values()))
        load_ = Load(boot, a.partitions, a.rate)
        load_.thread.start()
        time.sleep(3)
        faults = []
        kinds = a.faults.split(",")
        for kind in ["kill -9"] * a.rounds * ("kill" in kinds) + ["SIGTERM"] * a.rounds * ("term" in kinds):
            parts = partitions(boot)
            victim = parts[0].leader
            led = sorted(p for p, m in parts.items() if m.leader == victim)
            node = next(x for x in nodes if x.id == victim)
            before = load()
            t_fault = time.monotonic()
            if kind == "kill -9":
                node.proc.kill()
            else:
                node.proc.send_signal(signal.SIGTERM)
            node.proc.wait(timeout=60)
            time.sleep(max(0.0, t_fault + a.after - time.monotonic()))
            faults.append((kind, victim, led, t_fault, before))
            node.start()
            wait_for(lambda: all(len(m.isrs) == 3 for m in partitions(boot).values()), timeout=180)
            time.sleep(3)
        load_.stopping.set()
        load_.thread.join(timeout=150)
        # Analysed once every record is acknowledged (or failed), so the slowest count too.
        for kind, victim, led, t_fault, before in faults:
            r = {"fault": kind, "victim": victim, "partitions_led": led,
                 **load_.analyse(led, t_fault, a.after), "load": before}
            results[kind].append(r)
            print(json.dumps(r), flush=True)
        summary = {"session_timeout_ms": a.session_timeout_ms or "default (9000)", "rate": a.rate,
                   "partitions": a.partitions, "failed_records": load_.failed, "load_end": load()}
        for kind, rs in results.items():
            summary[kind] = {"gap_ms_max": max(r["gap_ms"] for r in rs),
                             "p99_ms": [r["p99_ms"] for r in rs], "max_ms": [r["max_ms"] for r in rs]}
        print(json.dumps({"summary": summary}), flush=True)
    finally:
        stop(nodes)
        if os.environ.get("KEEP"):
            print(f"data and logs kept in {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
