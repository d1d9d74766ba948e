#!/usr/bin/env python3
"""What metrics cost: produce throughput and broker CPU, in alternating rounds of the same run,
either of two builds (BEFORE without the metrics, AFTER with them) or of one build in three
configurations; and the time and size of a /metrics scrape on a broker with many partitions.

Usage: scripts/bench/metrics.py --before BIN --after BIN [--rounds 3] [--seconds 8]
                                [--partitions 10000]
       scripts/bench/metrics.py --binary BIN [--uncounted BIN] [--rounds 5] [--seconds 8]
                                [--partitions 10000]
  BEFORE/AFTER are release `moldau` binaries (e.g. the commit before the metrics landed and the
  one after; build each with `cargo build --release -p moldau`). During AFTER's runs /metrics
  is scraped once a second, so the cost shown includes serving scrapes.
  --binary compares one release build with metrics served and scraped once a second, with
  `metrics.partition.series=false` (scraped too), and with `admin.listener=` (no admin
  listener, nothing scraped; the counters are still kept). --uncounted adds a fourth
  configuration, the base of the ratios: a build of the same commit with the hot-path counting
  compiled out (`cargo build --release -p moldau --features uncounted`), admin listener off.
  The machine's load average is printed with every number. --rounds 0 measures only the
  scrapes; --partitions must stay under the broker's cap (half the open-file limit).
Standard library only; `moldau bench produce --json` drives the load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

LISTEN_RE = re.compile(r"^moldau: listening on (127\.0\.0\.1:\d+), data in (.+)$")
ADMIN_RE = re.compile(r"^moldau: admin on (http://\S+)$")
TCK = os.sysconf("SC_CLK_TCK")


class Server:
    def __init__(self, binary: str, settings: dict[str, object], admin: bool = True):
        self.dir = tempfile.mkdtemp(prefix="moldau-metrics-bench-")
        args = [binary, "server", "--listen", "127.0.0.1:0", "--data-dir", f"{self.dir}/data"]
        for k, v in settings.items():
            args += ["--set", f"{k}={v}"]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        first = self.proc.stdout.readline().strip()
        m = LISTEN_RE.match(first)
        if not m:
            raise SystemExit(f"unexpected first line: {first!r}")
        self.bootstrap = m.group(1)
        self.admin = None
        self.proc.stdout.readable()
        # The admin line follows at once when the listener is on (both lines are one write).
        if admin and settings.get("admin.listener") != "":
            second = self.proc.stdout.readline().strip()
            a = ADMIN_RE.match(second)
            self.admin = a.group(1) if a else None
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TCK

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=300)  # closing 10,000 logs takes a while
        subprocess.run(["rm", "-rf", self.dir], check=False)


def bench_produce(binary: str, bootstrap: str, seconds: int, extra: list[str]) -> dict:
    out = subprocess.run([binary, "bench", "produce", "-b", bootstrap, "-d", str(seconds), "--json",
                          "--progress-interval", "0", *extra],
                         capture_output=True, text=True, timeout=seconds * 10 + 60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def scrape(url: str) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
        body = r.read()
    return time.perf_counter() - t0, len(body), body.count(b"\n")


def loopback_ceiling_mb_s(total: int = 1 << 30) -> float:
    """One TCP stream over loopback, 64 KiB writes: the machine's own limit for this path."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def sink():
        c, _ = srv.accept()
        while c.recv(1 << 20):
            pass
        c.close()

    t = threading.Thread(target=sink)
    t.start()
    s = socket.create_connection(srv.getsockname())
    chunk = b"\0" * 65536
    t0 = time.perf_counter()
    sent = 0
    while sent < total:
        s.sendall(chunk)
        sent += len(chunk)
    s.close()
    t.join()
    srv.close()
    return total / (time.perf_counter() - t0) / 1e6


LOADS = {
    # Many small requests: per-request costs (counting, timing) weigh the most.
    "100 B, acks=1, linger 0 (many small requests)":
        ["-s", "100", "--acks", "1", "--linger-ms", "0", "-p", "4", "--producers", "2"],
    # Batched throughput.
    "100 B, acks=all, batched": ["-s", "100", "--acks", "all", "-p", "4", "--producers", "2"],
}


CONFIGS = {
    # name: (settings, scraped once a second)
    "metrics on, scraped 1/s": ({}, True),
    "per-partition series off, scraped 1/s": ({"metrics.partition.series": "false"}, True),
    "admin listener off": ({"admin.listener": ""}, False),
}


def load() -> str:
    return "load " + "/".join(f"{x:.1f}" for x in os.getloadavg())


def run_once(binary: str, settings: dict, scraped: bool, admin: bool, seconds: int, extra: list[str]):
    server = Server(binary, settings, admin=admin)
    stop = threading.Event()
    scrapes = []
    if server.admin and scraped:
        def scraper():
            while not stop.wait(1.0):
                scrapes.append(scrape(server.admin)[0])
        threading.Thread(target=scraper, daemon=True).start()
    cpu0 = server.cpu_seconds()
    res = bench_produce(binary, server.bootstrap, seconds, extra)
    cpu = server.cpu_seconds() - cpu0
    stop.set()
    server.stop()
    rps = res.get("records_per_sec") or res.get("records_per_second") or 0.0
    records = res.get("records") or rps * seconds
    return rps, cpu / max(records, 1) * 1e6, len(scrapes)


def print_table(results: dict, names: list[str], base: str) -> None:
    """Ratios against the base of the same round (adjacent runs, the same load on the machine):
    median and range over the rounds; and the ratio of the medians."""
    print(f"\nbase: {base}; per config: records/s median; throughput / base: median of the "
          f"rounds' ratios (min-max) [ratio of the medians]; broker CPU-s per M records median; "
          f"1-min load average median (min-max) over its runs")
    print("\n| load | config | records/s | / base, per round | broker CPU-s per M records | load |")
    print("|---|---|---|---|---|---|")
    for load_name in LOADS:
        b = results[(load_name, base)]
        for n in names:
            xs = results[(load_name, n)]
            ratios = [x[0] / y[0] * 100 for x, y in zip(xs, b) if y[0] > 0]
            med = statistics.median(x[0] for x in xs)
            rel = "base" if n == base else (
                f"{statistics.median(ratios):.1f}% ({min(ratios):.0f}-{max(ratios):.0f}%) "
                f"[{med / statistics.median(y[0] for y in b) * 100:.1f}%]")
            loads = [x[2] for x in xs]
            print(f"| {load_name} | {n} | {med:,.0f} | {rel} | "
                  f"{statistics.median(x[1] for x in xs):.3f} | "
                  f"{statistics.median(loads):.1f} ({min(loads):.1f}-{max(loads):.1f}) |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before")
    ap.add_argument("--after")
    ap.add_argument("--binary")
    ap.add_argument("--uncounted")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--partitions", type=int, default=10000)
    args = ap.parse_args()
    if args.binary:
        variants = {name: (args.binary, settings, scraped, settings.get("admin.listener") != "")
                    for name, (settings, scraped) in CONFIGS.items()}
        if args.uncounted:
            variants["counting compiled out"] = (args.uncounted, {"admin.listener": ""}, False, False)
        args.after = args.binary
    elif args.before and args.after:
        # BEFORE has no admin listener at all (it predates it).
        variants = {"before": (args.before, {}, False, False), "after": (args.after, {}, True, True)}
    else:
        raise SystemExit("give --binary, or --before and --after")

    print(f"== machine: {os.cpu_count()} cores, {load()}; "
          f"loopback TCP ceiling (same run): {loopback_ceiling_mb_s():.0f} MB/s", flush=True)
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in range(args.rounds):
        for name, (binary, settings, scraped, admin) in variants.items():
            for load_name, extra in LOADS.items():
                rps, cpu, n = run_once(binary, settings, scraped, admin, args.seconds, extra)
                results.setdefault((load_name, name), []).append((rps, cpu, os.getloadavg()[0]))
                print(f"round {r + 1} [{load()}] {name}: {load_name}: {rps:,.0f} records/s, broker "
                      f"{cpu:.2f} CPU-s per million records" + (f", {n} scrapes" if n else ""), flush=True)
    names = list(variants)
    base = names[-1] if args.binary else names[0]
    if names and args.rounds > 0:
        print_table(results, names, base)

    # Scrape time and size with many partitions (--partitions 0 skips it).
    for series in ("true", "false") if args.partitions > 0 else ():
        server = Server(args.after, {"max.broker.partitions": args.partitions + 100,
                                     "metrics.partition.series": series})
        try:
            subprocess.run([args.after, "topic", "create", "big", "-p", str(args.partitions), "-b", server.bootstrap,
                            "--timeout-ms", "600000"], check=True, capture_output=True, timeout=900)
            hosted = 0
            deadline = time.monotonic() + 600
            while hosted < args.partitions and time.monotonic() < deadline:
                body = urllib.request.urlopen(server.admin + "/metrics", timeout=60).read().decode()
                m = re.search(r"^moldau_partitions (\d+)", body, re.M)
                hosted = int(m.group(1)) if m else 0
                if hosted < args.partitions:
                    time.sleep(0.5)  # poll interval while the logs open
            times = []
            size = lines = 0
            for _ in range(5):
                t, size, lines = scrape(server.admin)
                times.append(t)
            print(f"\n/metrics with {hosted} partitions, metrics.partition.series={series} [{load()}]: "
                  f"{size / 1e6:.2f} MB, {lines:,} lines, scrape time median {statistics.median(times) * 1000:.0f} ms "
                  f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f})")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
