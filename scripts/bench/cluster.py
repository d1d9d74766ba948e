#!/usr/bin/env python3
"""Controller quorum timings (issue 9), on loopback, no proxies:

- formation: N combined broker+controller nodes started at once -> every node's Metadata
  lists N brokers;
- failover: kill -9 of the active controller (found with `moldau cluster info`, i.e.
  DescribeQuorum) -> the next CreateTopics committed through a survivor (one long-lived
  librdkafka AdminClient, as an application has); the killed node is restarted between runs;
- CreateTopics latency: sequential CreateTopics (1 partition, RF = nodes) answered once
  committed and applied, p50/p99, on 1 node and on N nodes;
- bulk creation: `--bulk-topics T --bulk-partitions P` CreateTopics of T topics x P partitions
  at RF = nodes (100 topics per request, as a provisioning script sends them) on the N-node
  cluster: time until every request is answered (committed), time until every node has opened
  all its replicas (T x P partition directories each), and each node's RSS before and after;
- the machine's limit for a commit, measured in the same run: write + fsync of a small
  record in the data dir's file system, p50/p99 (a metadata commit needs at least one on the
  leader, and on N nodes one on a majority).

Usage: MOLDAU_BIN=target/release/moldau python scripts/bench/cluster.py [--nodes 3]
       [--creates 200] [--failovers 5] [--election-timeout-ms 1000]
       [--bulk-topics 1000 --bulk-partitions 6]
Prints one JSON object per measurement; the summary last.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    def __init__(self, binary, base: Path, node_id: int, n: int, ports, settings):
        self.binary, self.id, self.n = binary, node_id, n
        self.dir = base / f"node-{node_id}"
        self.port, self.cport = ports[node_id]
        self.ports, self.settings = ports, settings
        self.proc = None

    def args(self):
        a = [str(self.binary), "server", "--data-dir", str(self.dir)]
        s = dict(self.settings)
        if self.n == 1:
            a += ["--listen", f"127.0.0.1:{self.port}"]
        else:
            s.update({
                "node.id": self.id, "process.roles": "broker,controller",
                "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.cport}",
                "controller.quorum.voters": ",".join(f"{i}@127.0.0.1:{c}" for i, (_, c) in self.ports.items()),
            })
        for k, v in s.items():
            a += ["--set", f"{k}={v}"]
        return a

    def start(self):
        self.dir.mkdir(parents=True, exist_ok=True)
        log = open(self.dir.with_suffix(".log"), "ab")
        self.proc = subprocess.Popen(self.args(), stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL)

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"


def wait_for(fn, timeout=120.0, every=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception:  # noqa: BLE001 - not yet
            pass
        time.sleep(every)
    raise TimeoutError("condition not met")


def brokers(address):
    return sorted(AdminClient({"bootstrap.servers": address}).list_topics(timeout=5).brokers)


def leader(binary, bootstrap):
    out = subprocess.run([str(binary), "cluster", "info", "--json", "-b", bootstrap, "--timeout-ms", "3000"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return json.loads(out)["quorum"]["leader_id"]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def cluster(binary, base, n, settings):
    ports = {i: (free_port(), free_port()) for i in range(1, n + 1)}
    nodes = [Node(binary, base, i, n, ports, settings) for i in range(1, n + 1)]
    t0 = time.monotonic()
    for x in nodes:
        x.start()
    for x in nodes:
        wait_for(lambda x=x: brokers(x.address) == list(range(1, n + 1)))
    return nodes, time.monotonic() - t0


def stop(nodes):
    for x in nodes:
        if x.proc and x.proc.poll() is None:
            x.proc.send_signal(signal.SIGTERM)
    for x in nodes:
        if x.proc:
            x.proc.wait(timeout=60)


def creates(bootstrap, count, rf, prefix):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    lat = []
    for i in range(count):
        name = f"{prefix}-{i}"
        t = time.monotonic()
        admin.create_topics([NewTopic(name, 1, rf)], operation_timeout=30, request_timeout=30)[name].result(60)
        lat.append((time.monotonic() - t) * 1000)
    return lat


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return -1.0


def replica_dirs(directory: Path, prefix: str) -> int:
    return sum(1 for p in directory.iterdir() if p.name.startswith(prefix))


def bulk(nodes, boot, topics, partitions, rf):
    rss_before = {x.id: rss_mb(x.proc.pid) for x in nodes}
    admin = AdminClient({"bootstrap.servers": boot})
    t0 = time.monotonic()
    for start in range(0, topics, 100):
        new = [NewTopic(f"bulk-{i}", partitions, rf) for i in range(start, min(topics, start + 100))]
        for f in admin.create_topics(new, operation_timeout=120, request_timeout=180).values():
            f.result(300)
    committed = time.monotonic() - t0
    want = topics * partitions
    wait_for(lambda: all(replica_dirs(x.dir, "bulk-") == want for x in nodes), timeout=900, every=0.2)
    opened = time.monotonic() - t0
    return {"topics": topics, "partitions_each": partitions, "rf": rf,
            "all_answered_s": round(committed, 2), "all_replicas_open_s": round(opened, 2),
            "rss_mb_before": rss_before, "rss_mb_after": {x.id: rss_mb(x.proc.pid) for x in nodes}}


def fsync_ms(directory: Path, n: int = 200):
    lat = []
    path = directory / "fsync-probe"
    with open(path, "ab") as f:
        for _ in range(n):
            t = time.monotonic()
            f.write(b"x" * 200)
            f.flush()
            os.fsync(f.fileno())
            lat.append((time.monotonic() - t) * 1000)
    path.unlink()
    return {"p50": round(pct(lat, 50), 3), "p99": round(pct(lat, 99), 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--creates", type=int, default=200)
    ap.add_argument("--failovers", type=int, default=5)
    ap.add_argument("--election-timeout-ms", type=int, default=None)
    ap.add_argument("--bulk-topics", type=int, default=0)
    ap.add_argument("--bulk-partitions", type=int, default=6)
    a = ap.parse_args()
    binary = Path(os.environ.get("MOLDAU_BIN", "target/release/moldau"))
    settings = {}
    if a.election_timeout_ms:
        settings["controller.quorum.election.timeout.ms"] = a.election_timeout_ms
    base = Path(tempfile.mkdtemp(prefix="moldau-bench-cluster-"))
    summary = {"nodes": a.nodes, "settings": settings}
    try:
        summary["fsync_ms"] = fsync_ms(base)
        print(json.dumps({"fsync_ms": summary["fsync_ms"]}), flush=True)
        nodes, formed = cluster(binary, base / "one", 1, settings)
        lat = creates(nodes[0].address, a.creates, 1, "one")
        stop(nodes)
        summary["create_topics_ms_1_node"] = {"p50": round(pct(lat, 50), 2), "p99": round(pct(lat, 99), 2)}
        print(json.dumps({"create_topics_1_node_ms": summary["create_topics_ms_1_node"]}), flush=True)

        nodes, formed = cluster(binary, base / "n", a.nodes, settings)
        summary["formation_s"] = round(formed, 3)
        print(json.dumps({"formation_s": summary["formation_s"]}), flush=True)
        boot = ",".join(x.address for x in nodes)
        lat = creates(boot, a.creates, a.nodes, "n")
        summary[f"create_topics_ms_{a.nodes}_nodes"] = {"p50": round(pct(lat, 50), 2), "p99": round(pct(lat, 99), 2)}
        print(json.dumps({f"create_topics_{a.nodes}_nodes_ms": summary[f"create_topics_ms_{a.nodes}_nodes"]}), flush=True)
        fails = []
        for r in range(a.failovers):
            ids = list(range(1, a.nodes + 1))
            wait_for(lambda: all(brokers(x.address) == ids for x in nodes))
            victim = leader(binary, boot)
            survivors = [x for x in nodes if x.id != victim]
            admin = AdminClient({"bootstrap.servers": ",".join(x.address for x in survivors)})
            admin.list_topics(timeout=10)  # connected before the kill, as an application is
            vnode = nodes[victim - 1]
            vnode.proc.kill()
            t0 = time.monotonic()
            vnode.proc.wait()
            name = f"after-{r}"
            while True:
                try:
                    admin.create_topics([NewTopic(name, 1, a.nodes - 1)], operation_timeout=5,
                                        request_timeout=5)[name].result(10)
                    break
                except Exception:  # noqa: BLE001 - election running
                    if time.monotonic() - t0 > 120:
                        raise
            took = time.monotonic() - t0
            fails.append(took)
            print(json.dumps({"failover_run": r, "killed": victim, "kill9_to_commit_s": round(took, 3)}), flush=True)
            vnode.start()
        if fails:
            summary["kill9_to_commit_s"] = {"runs": [round(x, 3) for x in fails],
                                            "median": round(statistics.median(fails), 3),
                                            "max": round(max(fails), 3)}
        if a.bulk_topics:
            ids = list(range(1, a.nodes + 1))
            wait_for(lambda: all(brokers(x.address) == ids for x in nodes))
            summary["bulk"] = bulk(nodes, boot, a.bulk_topics, a.bulk_partitions, a.nodes)
            print(json.dumps({"bulk": summary["bulk"]}), flush=True)
        stop(nodes)
    finally:
        print(json.dumps(summary), flush=True)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
