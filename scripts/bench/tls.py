#!/usr/bin/env python3
"""Produce and consume over TLS and SASL_SSL as a fraction of plaintext, in the same run (issue 14).

One `moldau server` with three listeners on loopback -- PLAINTEXT, SSL and SASL_SSL (SASL/PLAIN
over TLS; the mechanism only costs at connect) -- serving a throw-away CA's certificate made
here with openssl. Before the rounds one topic is produced over PLAINTEXT: the data every
listener consumes, so the consume runs differ only in their listener (a topic per listener
consumed by it measured its producer's batches as much as the listener). Each round runs, on
every listener in turn (the order rotates per round): `moldau bench produce` (1 KiB records by
default, acks=1, one partition) into a topic of its own, then `moldau bench consume` of the
shared topic from the beginning; the broker's CPU time (user + system, from /proc) is read
around each run, giving CPU-seconds per GB moved, and the client's (`moldau bench`, a child of this script) from
getrusage. Then the
connection setup rate: sequential new connections, each a TCP connect, the TLS handshake where
the listener has one, SASL (SaslHandshake + SaslAuthenticate PLAIN) on SASL_SSL, and one
ApiVersions request, with Python's ssl module as the client.

Prints a table per round and the median of the rounds, ratios to plaintext first. The client
(`moldau bench`, the same binary) shares the machine with the broker: on two cores the numbers
are those of the pair, which is what a client on the same host sees.

With --kafka the broker is Apache Kafka 4.4 from the reference kit (scripts/reference/kafka,
one combined KRaft node, the same three listeners and PEM certificate), measured by the same
`moldau bench` client: Kafka's own TLS-to-plaintext ratios on this machine, read beside Moldau's.

With --kcat every listener's consume is also run by kcat (librdkafka with OpenSSL, the payloads
to /dev/null, MB/s of payload bytes): a second client's view of the same ratios.

Usage: scripts/bench/tls.py [--records N] [--size B] [--rounds R] [--connections C] [--kafka] [--kcat]
  MOLDAU_BIN  broker and bench binary (default: target/release/moldau); with --kafka the bench
              client only
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TICK = os.sysconf("SC_CLK_TCK")
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")
USER, PASSWORD = "bench", "bench-secret"
PLAIN_JAAS = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{USER}="{PASSWORD}";'


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(d: Path) -> None:
    """A CA and a server certificate for 127.0.0.1, the server's as a PEM keystore."""
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=bench-ca",
            "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", "server.key", "-out", "server.csr", cwd=d)
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", "server.pem", "-extfile", "server.ext", cwd=d)
    (d / "keystore.pem").write_text((d / "server.pem").read_text() + (d / "server.key").read_text())


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Broker:
    def __init__(self, binary: str, work: Path):
        self.ports = dict(zip(LISTENERS, free_ports(3)))
        listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in self.ports.items())
        sets = {
            "listeners": listeners,
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(work / "keystore.pem"),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(work / "ca.pem"),
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        }
        args = [binary, "server", "--data-dir", str(work / "data")]
        for k, v in sets.items():
            args += ["--set", f"{k}={v}"]
        self.out = open(work / "broker.log", "w")
        self.proc = subprocess.Popen(args, stdout=self.out, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                connect_and_ask("PLAINTEXT", self.ports["PLAINTEXT"], None)
                return
            except OSError:
                if self.proc.poll() is not None:
                    self.out.close()
                    sys.exit(f"moldau exited {self.proc.returncode}: "
                             f"{(work / 'broker.log').read_text()[-2000:]}")
                time.sleep(0.1)
        sys.exit("moldau did not start listening within 60 s")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.out.close()


class KafkaBroker:
    """Apache Kafka from the reference kit with the same listeners; `pid` is its one JVM."""

    KIT = ROOT / "scripts/reference/kafka"

    def __init__(self, work: Path):
        self.dir = work / "kafka"
        sets = ["sasl.enabled.mechanisms=PLAIN",
                f"listener.name.sasl_ssl.plain.sasl.jaas.config={PLAIN_JAAS}"]
        for name in ("ssl", "sasl_ssl"):
            sets += [f"listener.name.{name}.ssl.keystore.type=PEM",
                     f"listener.name.{name}.ssl.keystore.location={work / 'keystore.pem'}"]
        args = [str(self.KIT), "start", str(self.dir), "--listener", "SSL:SSL",
                "--listener", "SASL_SSL:SASL_SSL"]
        for kv in sets:
            args += ["--set", kv]
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL, timeout=300)
        port = lambda text: int(text.strip().split(",")[0].rsplit(":", 1)[1])  # noqa: E731
        self.ports = {"PLAINTEXT": port((self.dir / "bootstrap").read_text().split("=", 1)[1]),
                      "SSL": port((self.dir / "listener-ssl").read_text()),
                      "SASL_SSL": port((self.dir / "listener-sasl_ssl").read_text())}
        self.pid = int((self.dir / "pids").read_text().split()[0])

    def stop(self) -> None:
        subprocess.run([str(self.KIT), "stop", str(self.dir)], check=True, timeout=120)


def api_versions_frame(correlation_id: int) -> bytes:
    # ApiVersions v0 (no body): api key 18, version 0, correlation id, client id "bench".
    client = b"bench"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client)) + client
    return struct.pack(">i", len(body)) + body


def sasl_frames() -> tuple[bytes, bytes]:
    client = b"bench"
    mech = b"PLAIN"
    hs = struct.pack(">hhih", 17, 1, 1, len(client)) + client + struct.pack(">h", len(mech)) + mech
    token = b"\0" + USER.encode() + b"\0" + PASSWORD.encode()
    auth = struct.pack(">hhih", 36, 0, 2, len(client)) + client + struct.pack(">i", len(token)) + token
    return struct.pack(">i", len(hs)) + hs, struct.pack(">i", len(auth)) + auth


def read_frame(s) -> bytes:
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            raise OSError("closed")
        head += chunk
    (n,) = struct.unpack(">i", head)
    body = b""
    while len(body) < n:
        chunk = s.recv(n - len(body))
        if not chunk:
            raise OSError("closed")
        body += chunk
    return body


def connect_and_ask(listener: str, port: int, ctx: ssl.SSLContext | None) -> None:
    """One new connection: TCP, TLS, SASL/PLAIN where the listener wants them, ApiVersions."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    s = ctx.wrap_socket(raw, server_hostname="127.0.0.1") if ctx is not None else raw
    try:
        if listener == "SASL_SSL":
            hs, auth = sasl_frames()
            s.sendall(hs)
            read_frame(s)
            s.sendall(auth)
            answer = read_frame(s)
            if struct.unpack(">h", answer[4:6])[0] != 0:
                raise OSError("SASL authentication failed")
        s.sendall(api_versions_frame(7))
        read_frame(s)
    finally:
        s.close()


def command_config(work: Path, listener: str) -> Path:
    path = work / f"{listener}.properties"
    lines = [f"security.protocol={listener}"]
    if listener != "PLAINTEXT":
        lines.append(f"ssl.truststore.location={work / 'ca.pem'}")
    if listener == "SASL_SSL":
        lines += ["sasl.mechanism=PLAIN", f"sasl.username={USER}", f"sasl.password={PASSWORD}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def measured(broker: Broker | KafkaBroker, args: list[str], **run) -> tuple[str, float, float, float]:
    """Runs a client command; its stdout, seconds, and the broker's and client's CPU-seconds."""
    before = cpu_seconds(broker.pid)
    client_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(args, check=True, timeout=600, **run).stdout
    elapsed = time.perf_counter() - start
    cpu = cpu_seconds(broker.pid) - before
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client = (after.ru_utime - client_before.ru_utime) + (after.ru_stime - client_before.ru_stime)
    return out, elapsed, cpu, client


def bench(binary: str, kind: str, broker: Broker | KafkaBroker, listener: str, cfg: Path, topic: str,
          records: int, size: int) -> dict:
    args = [binary, "bench", kind, "-b", f"127.0.0.1:{broker.ports[listener]}", "-t", topic,
            "--command-config", str(cfg), "--json", "--progress-interval", "0"]
    if kind == "produce":
        args += ["-n", str(records), "-s", str(size), "-p", "1", "--acks", "1"]
    out, _, cpu, client = measured(broker, args, capture_output=True, text=True)
    r = json.loads(out)
    gb = r["bytes"] / 1e9
    r["broker_cpu_s"] = cpu
    r["cpu_s_per_gb"] = cpu / gb if gb else float("nan")
    r["client_cpu_s_per_gb"] = client / gb if gb else float("nan")
    return r


def kcat_consume(broker: Broker | KafkaBroker, listener: str, work: Path, topic: str,
                 records: int, size: int) -> dict:
    """The shared topic read once by kcat (librdkafka with OpenSSL), payloads to /dev/null."""
    args = ["kcat", "-C", "-b", f"127.0.0.1:{broker.ports[listener]}", "-t", topic, "-o", "beginning",
            "-e", "-q", "-X", f"security.protocol={listener.lower()}"]
    if listener != "PLAINTEXT":
        args += ["-X", f"ssl.ca.location={work / 'ca.pem'}"]
    if listener == "SASL_SSL":
        args += ["-X", "sasl.mechanisms=PLAIN", "-X", f"sasl.username={USER}", "-X", f"sasl.password={PASSWORD}"]
    _, elapsed, cpu, client = measured(broker, args, stdout=subprocess.DEVNULL)
    gb = records * size / 1e9
    return {"mb_per_sec": gb * 1e3 / elapsed, "cpu_s_per_gb": cpu / gb, "client_cpu_s_per_gb": client / gb,
            "records_per_sec": records / elapsed, "p99_ms": float("nan")}


def connection_rate(listener: str, port: int, ctx: ssl.SSLContext | None, n: int,
                    pid: int) -> tuple[float, float]:
    before = cpu_seconds(pid)
    start = time.perf_counter()
    for _ in range(n):
        connect_and_ask(listener, port, ctx)
    elapsed = time.perf_counter() - start
    return n / elapsed, (cpu_seconds(pid) - before) / n * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=300)
    ap.add_argument("--kafka", action="store_true", help="measure Apache Kafka (the reference kit)")
    ap.add_argument("--kcat", action="store_true",
                    help="also consume the shared topic with kcat (librdkafka) on every listener")
    a = ap.parse_args()
    binary = os.environ.get("MOLDAU_BIN", str(ROOT / "target/release/moldau"))
    with tempfile.TemporaryDirectory(prefix="moldau-bench-tls.") as tmp:
        work = Path(tmp)
        make_certs(work)
        print(f"== machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} "
              f"{os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}; {a.records:,} x {a.size} B "
              f"records per run, acks=1, one partition; {a.rounds} rounds; "
              f"{'broker Apache Kafka 4.4, client' if a.kafka else 'binary'} {binary}")
        broker = KafkaBroker(work) if a.kafka else Broker(binary, work)
        ctx = ssl.create_default_context(cafile=str(work / "ca.pem"))
        cfgs = {name: command_config(work, name) for name in LISTENERS}
        results: dict[str, dict[str, list[dict]]] = {
            n: {"produce": [], "consume": [], "kcat": []} for n in LISTENERS}
        conns: dict[str, list[tuple[float, float]]] = {n: [] for n in LISTENERS}
        try:
            shared = "bench-tls-shared"
            r = bench(binary, "produce", broker, "PLAINTEXT", cfgs["PLAINTEXT"], shared, a.records, a.size)
            print(f"shared data set: {r['records_per_sec']:,.0f} rec/s over PLAINTEXT into {shared}", flush=True)
            for rnd in range(a.rounds):
                order = LISTENERS[rnd % 3:] + LISTENERS[:rnd % 3]
                for name in order:
                    topic = f"bench-tls-{name.lower()}-{rnd}"
                    for kind, t in (("produce", topic), ("consume", shared)):
                        r = bench(binary, kind, broker, name, cfgs[name], t, a.records, a.size)
                        results[name][kind].append(r)
                        print(f"round {rnd + 1} {name:9} {kind:7} {r['records_per_sec']:>12,.0f} rec/s "
                              f"{r['mb_per_sec']:>8.1f} MB/s  p99 {r['p99_ms']:7.2f} ms  broker "
                              f"{r['cpu_s_per_gb']:6.2f} CPU-s/GB, client {r['client_cpu_s_per_gb']:5.2f}  (load {os.getloadavg()[0]:.1f})",
                              flush=True)
                    if a.kcat:
                        r = kcat_consume(broker, name, work, shared, a.records, a.size)
                        results[name]["kcat"].append(r)
                        print(f"round {rnd + 1} {name:9} kcat -C {r['records_per_sec']:>12,.0f} rec/s "
                              f"{r['mb_per_sec']:>8.1f} MB/s (payloads)  broker {r['cpu_s_per_gb']:6.2f} "
                              f"CPU-s/GB, client {r['client_cpu_s_per_gb']:5.2f}", flush=True)
                    c = ctx if name != "PLAINTEXT" else None
                    rate, cpu_ms = connection_rate(name, broker.ports[name], c, a.connections, broker.pid)
                    conns[name].append((rate, cpu_ms))
                    print(f"round {rnd + 1} {name:9} connect {rate:>12,.0f} conn/s  broker {cpu_ms:.2f} "
                          f"CPU-ms per connection", flush=True)
        finally:
            broker.stop()
        print("\n== median of the rounds (ratio to PLAINTEXT in brackets)")
        print("| listener | produce MB/s | consume MB/s | produce CPU-s/GB | consume CPU-s/GB "
              "| new connections/s | broker CPU-ms per connection |")
        print("|---|---|---|---|---|---|---|")
        med = {n: {k: statistics.median(r["mb_per_sec"] for r in results[n][k]) for k in ("produce", "consume")}
               for n in LISTENERS}
        for n in LISTENERS:
            cpu = {k: statistics.median(r["cpu_s_per_gb"] for r in results[n][k]) for k in ("produce", "consume")}
            rate = statistics.median(c[0] for c in conns[n])
            cpu_conn = statistics.median(c[1] for c in conns[n])
            base = med["PLAINTEXT"]
            print(f"| {n} | {med[n]['produce']:.1f} ({med[n]['produce'] / base['produce']:.2f}) "
                  f"| {med[n]['consume']:.1f} ({med[n]['consume'] / base['consume']:.2f}) "
                  f"| {cpu['produce']:.2f} | {cpu['consume']:.2f} | {rate:,.0f} | {cpu_conn:.2f} |")
        if a.kcat:
            print("\n| listener | kcat consume MB/s of payloads | broker CPU-s/GB | kcat CPU-s/GB |")
            print("|---|---|---|---|")
            kmed = {n: statistics.median(r["mb_per_sec"] for r in results[n]["kcat"]) for n in LISTENERS}
            for n in LISTENERS:
                bcpu = statistics.median(r["cpu_s_per_gb"] for r in results[n]["kcat"])
                ccpu = statistics.median(r["client_cpu_s_per_gb"] for r in results[n]["kcat"])
                print(f"| {n} | {kmed[n]:.1f} ({kmed[n] / kmed['PLAINTEXT']:.2f}) | {bcpu:.2f} | {ccpu:.2f} |")
        print(f"== load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
