#!/usr/bin/env python3
"""Transactions benchmark for Moldau (or any Kafka-compatible broker), with `moldau bench`.

Measures, in one run on one broker:
  (a) the machine's limit that transactions hit: the latency of a small write + fdatasync in the
      broker's data directory (every transaction waits for ~3 of them: its PrepareCommit
      record, its markers, its CompleteCommit record);
  (b) produce throughput, acks=all (idempotent), non-transactional and in transactions of
      10 / 100 / 1,000 records, interleaved over --rounds rounds (best of each kept), with
      the commit latency (flush + EndTxn) and the EndTxn round trip alone, p50 / p99;
  (c) consumption of the same data with read_committed and read_uncommitted, alternating
      (best of each): a data set of committed transactions only, and one where every 10th
      transaction is aborted (read_committed delivers 90% of its records and skips the rest).

Usage (stdlib only):
  cargo build --release -p moldau
  MOLDAU_BIN=target/release/moldau python3 scripts/bench/txn.py
Options: --seconds 10 (per produce run) --rounds 2 --size 100 (record bytes)
         --consume-records 5000000 --consume-repeats 5
         --brokers HOST:PORT (an already running broker; no broker CPU figures then)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

LISTEN_RE = re.compile(r"^moldau: listening on 127\.0\.0\.1:(\d+), data in (.+)$")


class Server:
    """A `moldau server` on 127.0.0.1:0 with its own temp data dir."""

    def __init__(self, binary: str):
        self.dir = tempfile.mkdtemp(prefix="moldau-bench-txn-")
        self.data = os.path.join(self.dir, "data")
        self.log = open(os.path.join(self.dir, "broker.log"), "wb")
        args = [binary, "server", "--listen", "127.0.0.1:0", "--data-dir", self.data,
                "--set", "group.initial.rebalance.delay.ms=0"]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL)
        line = self.proc.stdout.readline().decode().strip()
        m = LISTEN_RE.match(line)
        if not m:
            self.stop(keep=True)
            raise SystemExit(f"moldau did not start: {line!r} (log in {self.dir})")
        self.bootstrap = f"127.0.0.1:{m.group(1)}"
        threading.Thread(target=lambda: self.proc.stdout.read(), daemon=True).start()

    def stop(self, keep: bool = False):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        if keep:
            print(f"broker data and log kept in {self.dir}", file=sys.stderr)
        else:
            # A run writes gigabytes; leaving them in /tmp fills small disks.
            shutil.rmtree(self.dir, ignore_errors=True)


def fsync_latency_ms(directory: str, n: int = 300) -> tuple[float, float]:
    """p50 / p99 of (4 KiB write + fdatasync) in `directory`."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"fsync-probe-{uuid.uuid4().hex[:8]}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    block = b"x" * 4096
    samples = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            samples.append((time.perf_counter() - t) * 1000)
    finally:
        os.close(fd)
        os.unlink(path)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def bench(moldau: str, brokers: str, *args: str) -> dict:
    cmd = [moldau, "bench", *args, "--brokers", brokers, "--json", "--progress-interval", "0"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if out.get("errors"):
        print(f"warning: {out['errors']} errors in {' '.join(args)}: {res.stderr.strip()[-300:]}", file=sys.stderr)
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (from /proc; 0 when unavailable)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def loadavg() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--consume-records", type=int, default=5_000_000)
    ap.add_argument("--consume-repeats", type=int, default=5)
    ap.add_argument("--brokers")
    opts = ap.parse_args()
    moldau = os.environ.get("MOLDAU_BIN", "target/release/moldau")
    print(f"machine: {os.cpu_count()} cores, load average at start {loadavg()}")
    server = None
    if opts.brokers:
        brokers, data_dir = opts.brokers, tempfile.gettempdir()
    else:
        server = Server(moldau)
        brokers, data_dir = server.bootstrap, server.data
    try:
        p50, p99 = fsync_latency_ms(data_dir)
        print(f"ceiling: 4 KiB write + fdatasync in the data directory: p50 {p50:.3f} ms, p99 {p99:.3f} ms "
              f"(~{1000 / p50:.0f} sequential fsyncs/s)")

        runs = [("plain", []), ("txn-10", ["10"]), ("txn-100", ["100"]), ("txn-1000", ["1000"])]
        best: dict[str, dict] = {}
        tag = uuid.uuid4().hex[:6]
        for r in range(opts.rounds):
            for name, size in runs:
                args = ["produce", "-t", f"bench-txn-{tag}-{name}-{r}", "-p", "1", "-s", str(opts.size),
                        "-d", str(opts.seconds), "--acks", "all"]
                if size:
                    args += ["--transactional", "--transaction-size", size[0]]
                out = bench(moldau, brokers, *args)
                print(f"  round {r + 1} {name}: {out['records_per_sec']:.0f} records/s"
                      + (f", commit p50 {out['commit_p50_ms']:.2f} ms p99 {out['commit_p99_ms']:.2f} ms, "
                         f"EndTxn p50 {out['end_txn_p50_ms']:.2f} ms p99 {out['end_txn_p99_ms']:.2f} ms"
                         if size else ""), flush=True)
                if name not in best or out["records_per_sec"] > best[name]["records_per_sec"]:
                    best[name] = out
        plain = best["plain"]["records_per_sec"]
        print(f"\nproduce, {opts.size} B records, acks=all, 1 partition, 1 producer, {opts.seconds:.0f} s per run, "
              f"best of {opts.rounds}:")
        print("| run | records/s | transactions/s | vs non-transactional | commit (flush + EndTxn) p50 / p99 "
              "| EndTxn p50 / p99 |")
        print("|---|---|---|---|---|---|")
        for name, size in runs:
            o = best[name]
            lat = (f"{o['commit_p50_ms']:.2f} / {o['commit_p99_ms']:.2f} ms",
                   f"{o['end_txn_p50_ms']:.2f} / {o['end_txn_p99_ms']:.2f} ms") if size else ("", "")
            label = "non-transactional (idempotent)" if not size else f"transactions of {size[0]} records"
            tps = f"{o['records_per_sec'] / int(size[0]):,.0f}" if size else ""
            print(f"| {label} | {o['records_per_sec']:,.0f} | {tps} | {100 * o['records_per_sec'] / plain:.0f}% "
                  f"| {lat[0]} | {lat[1]} |")

        print(f"\nconsume, {opts.consume_records:,} records of {opts.size} B, 1 partition, from the beginning "
              f"(page cache), best of {opts.consume_repeats} alternating; broker CPU per million log records "
              f"(median; the measure least disturbed by other load on the machine):")
        print("| data | isolation | records delivered | records/s delivered | log records/s | read_committed vs "
              "read_uncommitted (log records/s) | broker CPU ms / M records |")
        print("|---|---|---|---|---|---|---|")
        for label, extra in [("transactions of 1,000, all committed", []),
                             ("transactions of 1,000, every 10th aborted", ["--abort-every", "10"])]:
            topic = f"bench-txn-{tag}-data-{len(extra)}"
            bench(moldau, brokers, "produce", "-t", topic, "-p", "1", "-s", str(opts.size), "-n",
                  str(opts.consume_records), "--acks", "all", "--transactional", "--transaction-size", "1000",
                  *extra)
            got: dict[str, dict] = {}
            cpu: dict[str, list[float]] = {"read_committed": [], "read_uncommitted": []}
            for _ in range(opts.consume_repeats):
                for iso in ("read_committed", "read_uncommitted"):
                    before = cpu_seconds(server.proc.pid) if server else 0.0
                    out = bench(moldau, brokers, "consume", "-t", topic, "--isolation", iso)
                    if server:
                        cpu[iso].append((cpu_seconds(server.proc.pid) - before) * 1e9 / opts.consume_records)
                    # Both pass every record of the log; read_committed delivers only committed ones.
                    out["log_rps"] = opts.consume_records / out["seconds"] if out.get("seconds") else 0
                    if iso not in got or out["log_rps"] > got[iso]["log_rps"]:
                        got[iso] = out
            ratio = 100 * got["read_committed"]["log_rps"] / got["read_uncommitted"]["log_rps"]
            for iso in ("read_committed", "read_uncommitted"):
                o = got[iso]
                cpu_ms = f"{statistics.median(cpu[iso]):.0f}" if cpu[iso] else "n/a"
                print(f"| {label} | {iso} | {o['records']:,} | {o['records_per_sec']:,.0f} | {o['log_rps']:,.0f} | "
                      + (f"{ratio:.0f}%" if iso == "read_committed" else "") + f" | {cpu_ms} |")
        print(f"\nload average at end {loadavg()}")
    except BaseException:
        if server:
            server.stop(keep=True)
            server = None
        raise
    finally:
        if server:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
