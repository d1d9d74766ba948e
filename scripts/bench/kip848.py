#!/usr/bin/env python3
"""A member joining a busy group: the consumer protocol (KIP-848) against the classic one.

Two confluent-kafka (librdkafka) members consume a 6-partition topic that a producer keeps
feeding (every partition, continuously); a third member joins. Measured per protocol, in the
same run:
  - join -> consuming: from the new member's subscribe() (its first heartbeat or JoinGroup goes
    out right then) to its first record;
  - the other members during the join: records they consumed between the join and the new
    member's first record, and the longest gap between two of their records in that window
    (a stop-the-world rebalance shows up as a gap as long as the rebalance).
Protocols: `consumer` (group.protocol=consumer, the broker's uniform assignor), `classic-coop`
(cooperative-sticky, incremental) and `classic-eager` (range: everyone gives up everything).
Heartbeat intervals are tuned on both sides (--heartbeat-ms, default 50).

Usage (with the venv that `./scripts/test setup` creates):
  cargo build --release -p moldau
  MOLDAU_BIN=target/release/moldau ~/.cache/moldau/venv-*/bin/python scripts/bench/kip848.py
Options: --repeat 7 --heartbeat-ms 50 --rate 2000 (records/s over all partitions)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from groups import Server, create_topic  # noqa: E402

PARTITIONS = 6


class Member(threading.Thread):
    def __init__(self, conf: dict, topic: str):
        super().__init__(daemon=True)
        self.conf, self.topic = conf, topic
        self.times: list[float] = []
        self.owned: set = set()
        self.first_record = None
        self.stop_event = threading.Event()
        self.lock = threading.Lock()

    def run(self):
        c = Consumer(self.conf)

        def assign(_, ps):
            with self.lock:
                self.owned |= {p.partition for p in ps}

        def revoke(_, ps):
            with self.lock:
                self.owned -= {p.partition for p in ps}

        c.subscribe([self.topic], on_assign=assign, on_revoke=revoke, on_lost=revoke)
        while not self.stop_event.is_set():
            m = c.poll(0.02)
            if m is None or m.error():
                continue
            now = time.monotonic()
            with self.lock:
                self.times.append(now)
                if self.first_record is None:
                    self.first_record = now
        c.close()

    def stop(self):
        self.stop_event.set()
        self.join(30)


class Feeder(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, rate: int):
        super().__init__(daemon=True)
        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        self.topic, self.rate = topic, rate
        self.stop_event = threading.Event()

    def run(self):
        i = 0
        period = PARTITIONS / self.rate
        next_at = time.monotonic()
        while not self.stop_event.is_set():
            for p in range(PARTITIONS):
                self.p.produce(self.topic, value=b"x" * 100, partition=p)
            i += 1
            self.p.poll(0)
            next_at += period
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        self.p.flush(10)

    def stop(self):
        self.stop_event.set()
        self.join(30)


def wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out: {what}")
        time.sleep(0.005)


def member_conf(bootstrap, group, protocol, hb_ms):
    # A small prefetch queue, so records the application sees track what the member fetches
    # (librdkafka's default prefetch would hide a pause behind buffered records).
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "latest",
            "enable.auto.commit": True, "fetch.wait.max.ms": 20, "fetch.error.backoff.ms": 20,
            "queued.min.messages": 1, "queued.max.messages.kbytes": 1, "fetch.queue.backoff.ms": 1}
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": hb_ms,
                     "partition.assignment.strategy":
                         "cooperative-sticky" if protocol == "classic-coop" else "range"})
    return conf


def one_join(bootstrap, protocol, hb_ms, rate):
    topic, group = f"kip848-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    feeder = Feeder(bootstrap, topic, rate)
    feeder.start()
    old = [Member(member_conf(bootstrap, group, protocol, hb_ms), topic) for _ in range(2)]
    for m in old:
        m.start()
    new = None
    try:
        wait(lambda: sorted(len(m.owned) for m in old) == [3, 3] and all(m.times for m in old), 60, "2 members settled")
        time.sleep(1.0)  # steady state before the join
        new = Member(member_conf(bootstrap, group, protocol, hb_ms), topic)
        t0 = time.monotonic()
        new.start()
        wait(lambda: new.first_record is not None, 60, "new member consuming")
        t1 = new.first_record
        window = sorted(t for m in old for t in m.times if t0 <= t <= t1)
        points = [t0] + window + [t1]
        gap = max(b - a for a, b in zip(points, points[1:]))
        # The same-length window just before the join, as the baseline.
        b0 = t0 - (t1 - t0)
        base = sorted(t for m in old for t in m.times if b0 <= t <= t0)
        bpoints = [b0] + base + [t0]
        base_gap = max(b - a for a, b in zip(bpoints, bpoints[1:]))
        wait(lambda: sorted(len(m.owned) for m in old + [new]) == [2, 2, 2], 60, "2+2+2")
        return (t1 - t0) * 1000, len(window), gap * 1000, len(base), base_gap * 1000
    finally:
        for m in old + ([new] if new else []):
            m.stop()
        feeder.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--heartbeat-ms", type=int, default=50)
    ap.add_argument("--rate", type=int, default=2000)
    args = ap.parse_args()
    binary = os.environ.get("MOLDAU_BIN", "target/release/moldau")
    hb = args.heartbeat_ms
    server = Server(binary, {
        "group.initial.rebalance.delay.ms": 0,
        "group.min.session.timeout.ms": 1000,
        "group.consumer.min.heartbeat.interval.ms": min(hb, 5000),
        "group.consumer.heartbeat.interval.ms": hb,
        "num.partitions": PARTITIONS,
    })
    try:
        print(f"heartbeat interval {hb} ms, {args.rate} records/s, {args.repeat} joins per protocol")
        print("| protocol | join -> first record, median (min-max) | records by the others during the join, median | longest pause of the others, median (max) | same-length window before the join: records, longest pause (medians) |")
        print("|---|---|---|---|---|")
        for protocol in ["consumer", "classic-coop", "classic-eager"]:
            runs = [one_join(server.bootstrap, protocol, hb, args.rate) for _ in range(args.repeat)]
            lat = [r[0] for r in runs]
            during = [r[1] for r in runs]
            gaps = [r[2] for r in runs]
            base = [r[3] for r in runs]
            base_gaps = [r[4] for r in runs]
            print(f"| {protocol} | {statistics.median(lat):.0f} ms ({min(lat):.0f}-{max(lat):.0f}) | "
                  f"{statistics.median(during):.0f} | {statistics.median(gaps):.0f} ms ({max(gaps):.0f}) | "
                  f"{statistics.median(base):.0f}, {statistics.median(base_gaps):.0f} ms |",
                  flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
