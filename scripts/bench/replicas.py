#!/usr/bin/env python3
"""Memory, threads and idle CPU of brokers hosting many partition replicas (issue 10).

Three combined broker+controller nodes on loopback; `--partitions` partitions with three
replicas each (in topics of 100 partitions, CreateTopics of 10 topics at a time), so every
node hosts that many replicas and the cluster three times as many. Measured per node: RSS
and thread count before the topics, then once every node has opened all its replicas and
every partition has a full ISR (every follower fetching), after `--settle` seconds; and the
CPU the idle cluster burns over the next 10 s (follower fetch long-polls, HW checkpoints,
heartbeats).

Usage: MOLDAU_BIN=target/release/moldau python scripts/bench/replicas.py [--partitions 1000]
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster import cluster, replica_dirs, rss_mb, stop, wait_for  # noqa: E402


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return -1


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--settle", type=float, default=20)
    a = ap.parse_args()
    binary = Path(os.environ.get("MOLDAU_BIN", "target/release/moldau"))
    base = Path(tempfile.mkdtemp(prefix="moldau-bench-replicas-", dir=os.environ.get("BENCH_DIR")))
    nodes = []
    try:
        nodes, _ = cluster(binary, base, 3, {})
        boot = ",".join(x.address for x in nodes)
        out = {"partitions": a.partitions, "replicas_per_node": a.partitions, "rf": 3,
               "before": {x.id: {"rss_mb": rss_mb(x.proc.pid), "threads": threads(x.proc.pid)} for x in nodes}}
        admin = AdminClient({"bootstrap.servers": boot})
        sizes = [100] * (a.partitions // 100) + ([a.partitions % 100] if a.partitions % 100 else [])
        t0 = time.monotonic()
        for start in range(0, len(sizes), 10):
            new = [NewTopic(f"replicas-{i}", sizes[i], 3) for i in range(start, min(len(sizes), start + 10))]
            for f in admin.create_topics(new, operation_timeout=120, request_timeout=180).values():
                f.result(300)
        wait_for(lambda: all(replica_dirs(x.dir, "replicas-") == a.partitions for x in nodes),
                 timeout=900, every=0.5)

        def full_isrs():
            md = admin.list_topics(timeout=30)
            parts = [p for t, m in md.topics.items() if t.startswith("replicas-") for p in m.partitions.values()]
            return len(parts) == a.partitions and all(len(p.isrs) == 3 for p in parts)

        wait_for(full_isrs, timeout=900, every=1.0)
        out["all_open_with_full_isr_s"] = round(time.monotonic() - t0, 1)
        time.sleep(a.settle)
        out["after"] = {x.id: {"rss_mb": rss_mb(x.proc.pid), "threads": threads(x.proc.pid)} for x in nodes}
        c0 = {x.id: cpu_s(x.proc.pid) for x in nodes}
        time.sleep(10)
        out["idle_cpu_percent"] = {x.id: round((cpu_s(x.proc.pid) - c0[x.id]) * 10, 1) for x in nodes}
        out["load"] = load()
        print(json.dumps(out), flush=True)
    finally:
        stop(nodes)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
