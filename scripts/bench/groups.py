#!/usr/bin/env python3
"""Consumer-group benchmark for Moldau (or any Kafka-compatible broker), with confluent-kafka.

Measures
  (a) join latency: from `subscribe()` to the member's `on_assign` with the group Stable, for one
      member and for N members (default 10) joining together; with our own brokers this runs
      once with group.initial.rebalance.delay.ms=0 and once with the default 3000;
  (b) offset-commit throughput: N members of one group commit synchronously in a loop for
      --seconds (one thread each; librdkafka releases the GIL while it waits), reporting
      commits/s and p50/p99/max commit latency.

Usage (with the venv that `./scripts/test setup` creates):
  cargo build --release -p moldau
  MOLDAU_BIN=target/release/moldau ~/.cache/moldau/venv-*/bin/python scripts/bench/groups.py
  ... scripts/bench/groups.py --brokers 127.0.0.1:9092     # an already running broker
Options: --members 10 --seconds 10 --repeat 5 --partitions 10
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

LISTEN_RE = re.compile(r"^moldau: listening on 127\.0\.0\.1:(\d+), data in (.+)$")


class Server:
    """A `moldau server` on 127.0.0.1:0 with its own temp data dir."""

    def __init__(self, binary: str, settings: dict):
        self.dir = tempfile.mkdtemp(prefix="moldau-bench-groups-")
        self.log = open(os.path.join(self.dir, "broker.log"), "wb")
        args = [binary, "server", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(self.dir, "data")]
        for k, v in settings.items():
            args += ["--set", f"{k}={v}"]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL)
        line = self.proc.stdout.readline().decode().strip()
        m = LISTEN_RE.match(line)
        if not m:
            self.stop()
            raise SystemExit(f"moldau did not start: {line!r} (log in {self.dir})")
        self.bootstrap = f"127.0.0.1:{m.group(1)}"
        threading.Thread(target=lambda: self.proc.stdout.read(), daemon=True).start()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        subprocess.run(["rm", "-rf", self.dir], check=False)


def create_topic(bootstrap, topic, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)[topic].result(timeout=30)
    deadline = time.monotonic() + 10
    while len(admin.list_topics(topic, timeout=5).topics[topic].partitions) != partitions:
        if time.monotonic() > deadline:
            raise SystemExit(f"no metadata for {topic}")
        time.sleep(0.05)


def pct(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def consumer(bootstrap, group, name, **extra):
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 500}
    conf.update(extra)
    return Consumer(conf)


# ------------------------------------------------------------------------------- (a) joins

def join_once(bootstrap, topic, partitions, members):
    """N members subscribe at the same instant; returns seconds from subscribe until every
    member holds its final assignment (disjoint, covering all partitions)."""
    group = f"bench-join-{uuid.uuid4().hex[:8]}"
    assigned = [set() for _ in range(members)]
    lock = threading.Lock()
    done = threading.Event()
    stop = threading.Event()
    barrier = threading.Barrier(members + 1)
    t_done = [None]
    t0 = [0.0]
    consumers = [consumer(bootstrap, group, f"j{i}") for i in range(members)]

    def check():
        union = set().union(*assigned)
        if len(union) == partitions and sum(map(len, assigned)) == partitions and all(assigned[:min(members, partitions)]):
            if t_done[0] is None:
                t_done[0] = time.monotonic()
            done.set()

    def run(i):
        c = consumers[i]

        def on_assign(_c, ps):
            with lock:
                assigned[i] = {p.partition for p in ps}
                check()

        def on_revoke(_c, ps):
            with lock:
                assigned[i] = set()

        barrier.wait()
        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        while not stop.is_set():
            c.poll(0.02)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(members)]
    for t in threads:
        t.start()
    t0[0] = time.monotonic()
    barrier.wait()
    ok = done.wait(60)
    stop.set()
    for t in threads:
        t.join(30)
    closers = [threading.Thread(target=c.close) for c in consumers]
    for t in closers:
        t.start()
    for t in closers:
        t.join(30)
    if not ok:
        raise SystemExit(f"group of {members} did not stabilise within 60 s")
    return t_done[0] - t0[0]


def bench_joins(bootstrap, partitions, members, repeat):
    topic = f"bench-join-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions)
    join_once(bootstrap, topic, partitions, 1)  # warm-up: __consumer_offsets, connections
    rows = []
    for n in (1, members):
        samples = [join_once(bootstrap, topic, partitions, n) for _ in range(repeat)]
        rows.append((n, samples))
    return rows


# ----------------------------------------------------------------------------- (b) commits

def bench_commits(bootstrap, partitions, members, seconds):
    topic = f"bench-commit-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions)
    group = f"bench-commit-{uuid.uuid4().hex[:8]}"
    consumers = [consumer(bootstrap, group, f"c{i}") for i in range(members)]
    assigned = [[] for _ in range(members)]
    latencies = [[] for _ in range(members)]
    errors = [0] * members
    kinds = {}
    go = threading.Event()
    stop_at = [0.0]

    def run(i):
        c = consumers[i]

        def on_assign(_c, ps):
            assigned[i] = [p.partition for p in ps]

        def on_revoke(_c, ps):
            assigned[i] = []

        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        # Keep serving the group (rebalance callbacks) until the main thread says go.
        while not go.is_set():
            c.poll(0.05)
        off = 0
        mine = assigned[i]
        while time.monotonic() < stop_at[0]:
            off += 1
            t = time.perf_counter()
            try:
                c.commit(offsets=[TopicPartition(topic, p, off) for p in mine], asynchronous=False)
                latencies[i].append(time.perf_counter() - t)
            except Exception as e:  # noqa: BLE001 - counted, reported
                errors[i] += 1
                kinds[str(e)[:120]] = kinds.get(str(e)[:120], 0) + 1
                time.sleep(0.01)
            c.poll(0)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(members)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 90
    stable_since = None
    while True:
        ok = sum(len(a) for a in assigned) == partitions and all(assigned[:min(members, partitions)])
        now = time.monotonic()
        stable_since = (stable_since or now) if ok else None
        if stable_since and now - stable_since > 1.0:
            break
        if now > deadline:
            raise SystemExit(f"commit group did not stabilise: {assigned}")
        time.sleep(0.05)
    stop_at[0] = time.monotonic() + seconds
    t0 = time.monotonic()
    go.set()
    for t in threads:
        t.join(seconds + 60)
    elapsed = time.monotonic() - t0
    closers = [threading.Thread(target=c.close) for c in consumers]
    for t in closers:
        t.start()
    for t in closers:
        t.join(30)
    all_lat = [x for l in latencies for x in l]
    return {"commits": len(all_lat), "elapsed": elapsed, "rate": len(all_lat) / elapsed,
            "p50": pct(all_lat, 0.5), "p99": pct(all_lat, 0.99), "max": max(all_lat, default=float("nan")),
            "errors": sum(errors), "error_kinds": kinds, "per_member": [len(l) for l in latencies]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", help="use this running broker instead of starting $MOLDAU_BIN")
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", choices=["joins", "commits"], help="run one part only")
    args = ap.parse_args()
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    if os.environ.get("MOLDAU_BIN") and not args.brokers:
        command = f"MOLDAU_BIN={shlex.quote(os.environ['MOLDAU_BIN'])} {command}"

    join_rows = []
    commit = None
    if args.brokers:
        if args.only != "commits":
            for n, samples in bench_joins(args.brokers, args.partitions, args.members, args.repeat):
                join_rows.append(("broker's own", n, samples))
        if args.only != "joins":
            commit = bench_commits(args.brokers, args.partitions, args.members, args.seconds)
    else:
        binary = os.environ.get("MOLDAU_BIN") or "target/release/moldau"
        for delay in ((0,) if args.only == "commits" else (0, 3000)):
            srv = Server(binary, {"group.initial.rebalance.delay.ms": delay})
            try:
                repeat = args.repeat if delay == 0 else max(1, min(args.repeat, 2))
                if args.only != "commits":
                    for n, samples in bench_joins(srv.bootstrap, args.partitions, args.members, repeat):
                        join_rows.append((delay, n, samples))
                if delay == 0 and args.only != "joins":
                    commit = bench_commits(srv.bootstrap, args.partitions, args.members, args.seconds)
            finally:
                srv.stop()

    print()
    if join_rows:
        print_joins(join_rows)
    if commit:
        print_commits(commit, args)
    print(f"command: {command}")


def print_joins(join_rows):
    print("(a) join latency: subscribe() -> every member has its assignment (group Stable), confluent-kafka")
    print(f"| initial.rebalance.delay.ms | members | runs | median ms | min ms | max ms |")
    print(f"|---|---|---|---|---|---|")
    for delay, n, s in join_rows:
        print(f"| {delay} | {n} | {len(s)} | {statistics.median(s) * 1000:.0f} | {min(s) * 1000:.0f} | {max(s) * 1000:.0f} |")
    print()


def print_commits(c, args):
    print(f"(b) synchronous OffsetCommit, {args.members} members x 1 thread, {args.partitions} partitions, "
          f"{args.seconds:g} s")
    print("| commits | commits/s | p50 ms | p99 ms | max ms | errors |")
    print("|---|---|---|---|---|---|")
    print(f"| {c['commits']} | {c['rate']:.0f} | {c['p50'] * 1000:.2f} | {c['p99'] * 1000:.2f} | "
          f"{c['max'] * 1000:.2f} | {c['errors']} |")
    print(f"commits per member: {c['per_member']}")
    if c["error_kinds"]:
        print(f"errors: {c['error_kinds']}")
    print()


if __name__ == "__main__":
    main()
