#!/usr/bin/env python3
"""Broker instructions (valgrind --tool=callgrind) for one fixed produce workload, per build:
what metrics counting costs, repeatably even on a loaded machine.

Usage: scripts/bench/metrics_instructions.py BIN [BIN ...] [-- BENCH-ARGS]
  Each BIN (e.g. a release build and one built with `--features uncounted`) serves one topic
  of one partition under callgrind; instructions are counted only while
  `moldau bench produce BENCH-ARGS` runs (`--instr-atstart=no`, `callgrind_control -i`).
  Default BENCH-ARGS: -n 20000 -s 100 --acks 1 --linger-ms 0 --batch-size 100 --in-flight 1
  (exactly one record per Produce request: the worst case, everything is per request).
  Prints the total instructions of all broker threads and the Produce requests handled
  (calls of the produce handler, from the profile). Standard library and valgrind only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading

DEFAULT = ["-n", "20000", "-s", "100", "--acks", "1", "--linger-ms", "0", "--batch-size", "100",
           "--in-flight", "1"]


def profile(binary: str, bench: list[str], out: str) -> None:
    d = tempfile.mkdtemp(prefix="moldau-instr-")
    p = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                          binary, "server", "--listen", "127.0.0.1:0", "--data-dir", f"{d}/data",
                          "--set", "admin.listener="],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        first = p.stdout.readline().strip()
        m = re.match(r"^moldau: listening on (127\.0\.0\.1:\d+)", first)
        if not m:
            raise SystemExit(f"unexpected first line: {first!r}")
        threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
        boot = m.group(1)
        subprocess.run([binary, "topic", "create", "moldau-bench", "-p", "1", "-b", boot,
                        "--timeout-ms", "600000"], check=True, capture_output=True, timeout=900)
        subprocess.run(["callgrind_control", "-i", "on", str(p.pid)], check=True, capture_output=True)
        subprocess.run([binary, "bench", "produce", "-b", boot, "--producers", "1", "--json",
                        "--progress-interval", "0", *bench], check=True, capture_output=True, timeout=3600)
        subprocess.run(["callgrind_control", "-i", "off", str(p.pid)], check=True, capture_output=True)
    finally:
        p.terminate()
        p.wait(timeout=600)
        subprocess.run(["rm", "-rf", d], check=False)


def totals(out: str) -> tuple[int, int]:
    """(instructions, calls of the Produce handler) from a callgrind output file."""
    names: dict[str, str] = {}
    total = calls = 0
    cfn = None
    with open(out) as f:
        for line in f:
            if line.startswith("totals:"):
                total = int(line.split()[1])
            elif line.startswith(("fn=", "cfn=")):
                key, v = line.rstrip("\n").split("=", 1)
                m = re.match(r"\((\d+)\)(?: (.*))?", v)
                name = v
                if m:
                    if m.group(2):
                        names[m.group(1)] = m.group(2)
                    name = names.get(m.group(1), v)
                cfn = name if key == "cfn" else None
            elif line.startswith("calls=") and cfn is not None:
                if cfn == "broker::handlers::produce::produce":
                    calls += int(line.split("=")[1].split()[0])
                cfn = None
    return total, calls


def main() -> None:
    args = sys.argv[1:]
    bench = DEFAULT
    if "--" in args:
        i = args.index("--")
        args, bench = args[:i], args[i + 1:]
    if not args:
        raise SystemExit(__doc__)
    work = tempfile.mkdtemp(prefix="moldau-instr-out-")
    print(f"workload: moldau bench produce {' '.join(bench)}; load {os.getloadavg()[0]:.1f}")
    for n, binary in enumerate(args):
        out = f"{work}/callgrind.{n}.out"
        profile(binary, bench, out)
        ir, requests = totals(out)
        print(f"{binary}: {ir:,} instructions, {requests:,} Produce requests, "
              f"{ir / max(requests, 1):,.0f} per request ({out})", flush=True)


if __name__ == "__main__":
    main()
