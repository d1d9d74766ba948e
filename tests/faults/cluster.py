"""N real `moldau server` processes on loopback, each behind fault-injecting proxies, and the
process faults a test can inject: kill -9, SIGSTOP/SIGCONT, SIGTERM, restarts.

Every node has fixed ports for its whole life (chosen free at cluster creation), so a node that
is killed and started again comes back where clients and peers expect it:
- its real listeners (client/broker `PLAINTEXT`, and `CONTROLLER` with more than one node) on
  127.0.0.1 ports only the proxies use;
- one proxy per listener on another port; that is what the node advertises and what the other
  nodes' `controller.quorum.voters` name, so every byte between nodes, and between clients and
  nodes, crosses a proxy (see proxy.py for partitions).
A single node runs with the plain `--listen/--advertise` flags; several nodes form a combined
broker+controller quorum (`process.roles`, `controller.quorum.voters`).
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from proxy import CLIENT, ProxyRuntime

# The compat suite's port picker (standard library only): ports below the ephemeral range.
sys.path.append(str(Path(__file__).resolve().parent.parent / "compat"))
from ports import free_port  # noqa: E402

LISTEN_RE = re.compile(r"^moldau: listening on 127\.0\.0\.1:(\d+), data in (.+)$")
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


class HarnessError(AssertionError):
    """The cluster did not do what the harness needs (start, stop, serve) in time."""


def api_versions_ok(port: int, timeout: float = 2.0) -> bool:
    """One ApiVersions v0 round trip to 127.0.0.1:port; True if it answers without error."""
    client_id = b"fault-harness"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(s, 4)
            (size,) = struct.unpack(">i", head)
            if size < 6 or size > 1 << 20:
                return False
            resp = _recv_exact(s, size)
            (error,) = struct.unpack(">h", resp[4:6])
            return error == 0
    except (OSError, ValueError):
        return False


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ValueError("connection closed")
        buf += chunk
    return buf


class Node:
    """One `moldau server` process with a fixed data dir and fixed ports."""

    def __init__(self, cluster: "Cluster", node_id: int):
        self.cluster = cluster
        self.id = node_id
        self.data_dir = cluster.base / f"node-{node_id}"
        self.log_path = cluster.base / f"node-{node_id}.log"
        self.port = free_port()
        self.controller_port = free_port()
        self.proxy = None
        self.controller_proxy = None
        self.proc: subprocess.Popen | None = None
        self.paused = False
        # This node's own settings, over the cluster's (e.g. a wrong cluster.id).
        self.settings: dict[str, object] = {}
        self._log = None
        self._drain: threading.Thread | None = None
        self._lines: queue.Queue = queue.Queue()
        self._spawned_at = 0.0

    # -- addresses ------------------------------------------------------------------------------
    @property
    def address(self) -> str:
        """Where clients and peers reach the node: its proxy."""
        return f"127.0.0.1:{self.proxy.listen_port}"

    def args(self) -> list[str]:
        c = self.cluster
        args = [str(c.binary), "server", "--data-dir", str(self.data_dir)]
        settings: dict[str, object] = {}
        if len(c.nodes) == 1:
            args += ["--listen", f"127.0.0.1:{self.port}", "--advertise", self.address]
        else:
            # A node names itself at its real controller port (it checks that against what
            # it binds) and its peers at their proxies.
            voters = ",".join(
                f"{n.id}@127.0.0.1:{n.controller_port if n is self else n.controller_proxy.listen_port}"
                for n in c.nodes)
            settings.update({
                "node.id": self.id,
                "process.roles": "broker,controller",
                "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
                "advertised.listeners": f"PLAINTEXT://{self.address}",
                "controller.quorum.voters": voters,
            })
        settings.update(c.settings)
        settings.update(self.settings)
        for key, value in settings.items():
            args += ["--set", f"{key}={value}"]
        return args

    # -- lifecycle ------------------------------------------------------------------------------
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, wait_ready: bool = True) -> "Node":
        """Starts the process and waits for its listen line (and, with `wait_ready`, for an
        ApiVersions answer)."""
        self.spawn()
        return self.wait_started(wait_ready)

    def spawn(self) -> None:
        """Starts the process without waiting (a quorum's voters wait for each other before
        they serve, so a cluster spawns every node first)."""
        assert not self.alive(), f"node {self.id} already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = self.args()
        self._log = open(self.log_path, "ab")
        self._log.write(f"\n=== {time.strftime('%H:%M:%S')} start: {' '.join(args)}\n".encode())
        self._log.flush()
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        env.setdefault("NO_COLOR", "1")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._log, env=env)
        self.paused = False
        self._lines = queue.Queue()
        proc, log, lines = self.proc, self._log, self._lines

        def pump():
            # The first line is the listen line; the rest is copied into the log so a chatty
            # stdout can never fill the pipe and block the node.
            first = True
            for raw in iter(proc.stdout.readline, b""):
                if first:
                    lines.put(raw)
                    first = False
                log.write(b"[stdout] " + raw)
                log.flush()
            if first:
                lines.put(b"")

        self._drain = threading.Thread(target=pump, daemon=True)
        self._drain.start()
        self._spawned_at = time.monotonic()

    def wait_started(self, wait_ready: bool = True) -> "Node":
        deadline = self._spawned_at + START_TIMEOUT_S
        try:
            raw = self._lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            self.kill9()
            raise HarnessError(f"node {self.id} printed no listen line\n{self.log_tail()}")
        line = raw.decode("utf-8", "replace").rstrip()
        m = LISTEN_RE.match(line)
        if not m or int(m.group(1)) != self.port:
            self.kill9()
            raise HarnessError(f"node {self.id}: unexpected first line {line!r}\n{self.log_tail()}")
        if wait_ready:
            while not api_versions_ok(self.port):
                if not self.alive():
                    raise HarnessError(f"node {self.id} exited during startup\n{self.log_tail()}")
                if time.monotonic() > deadline:
                    self.kill9()
                    raise HarnessError(f"node {self.id} not serving in {START_TIMEOUT_S}s\n{self.log_tail()}")
                time.sleep(0.05)
        return self

    def wait_exit(self, timeout: float = START_TIMEOUT_S) -> int:
        """Waits for a process that is expected to stop by itself (a refused start); its code."""
        assert self.proc is not None, f"node {self.id} not running"
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise HarnessError(f"node {self.id} still running after {timeout}s\n{self.log_tail()}")
        self._closed()
        return code

    def kill9(self) -> None:
        """SIGKILL: no shutdown work at all (what was fsynced must survive)."""
        if self.proc is None:
            return
        if self.paused:
            self.proc.send_signal(signal.SIGCONT)
        self.proc.kill()
        self.proc.wait(timeout=STOP_TIMEOUT_S)
        self._closed()

    def stop(self) -> int:
        """SIGTERM and wait: a controlled shutdown; it must exit 0."""
        assert self.proc is not None, f"node {self.id} not running"
        if self.paused:
            self.resume()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stacks = self.dump_stacks()
            self.kill9()
            raise HarnessError(f"node {self.id} did not exit {STOP_TIMEOUT_S}s after SIGTERM (thread stacks: "
                               f"{stacks})\n{self.log_tail()}")
        self._closed()
        if code != 0:
            raise HarnessError(f"node {self.id} exited {code} after SIGTERM\n{self.log_tail()}")
        return code

    def dump_stacks(self) -> str:
        """Every thread's stack of the running process, with gdb, into node-<id>.stacks.txt
        beside its log (a node that hangs on SIGTERM is gone once killed); that path, or why
        there is none."""
        gdb = shutil.which("gdb")
        if gdb is None or self.proc is None:
            return "none (no gdb)"
        out = self.cluster.base / f"node-{self.id}.stacks.txt"
        try:
            with open(out, "wb") as f:
                subprocess.run([gdb, "-p", str(self.proc.pid), "-batch", "-ex", "thread apply all bt"],
                               stdout=f, stderr=subprocess.STDOUT, timeout=120, check=False)
        except (OSError, subprocess.SubprocessError) as e:
            return f"none ({e})"
        return str(out)

    def pause(self) -> None:
        """SIGSTOP: the process is frozen (a zombie: its sockets stay open, it answers nothing).
        Returns once every thread is stopped: kill() only queues the signal, and the other
        threads are told to stop only when the thread that takes it runs, so under CPU
        contention the node kept serving for up to 120 ms after kill() returned (measured at
        load 15): long enough for a "frozen" follower to fetch the next records."""
        assert self.alive()
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while not self._stopped():
            if not self.alive():
                raise HarnessError(f"node {self.id} exited while being stopped\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise HarnessError(f"node {self.id} not stopped {STOP_TIMEOUT_S}s after SIGSTOP")
            time.sleep(0.001)

    def _stopped(self) -> bool:
        """Every thread of the process in the stopped state (Linux: /proc/PID/task/*/stat)."""
        states = self.thread_states()
        return bool(states) and all(s in "Tt" for s in states)

    def thread_states(self) -> list[str]:
        """The scheduler state letter of each thread of the process (empty once it is gone)."""
        states = []
        try:
            tasks = list(Path(f"/proc/{self.proc.pid}/task").iterdir())
        except OSError:
            return states
        for task in tasks:
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue  # a thread that ended meanwhile
            states.append(stat[stat.rindex(")") + 2])
        return states

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def _closed(self) -> None:
        self.proc = None
        self.paused = False
        if self._drain is not None:
            self._drain.join(timeout=5)
            self._drain = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, max_bytes: int = 8000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return "<no log>"
        return f"--- node {self.id} log tail ---\n" + data[-max_bytes:].decode("utf-8", "replace")


class Cluster:
    """N nodes, their proxies, and the fault vocabulary of the scenarios."""

    def __init__(self, binary: Path, base: Path, n: int, settings: dict[str, object] | None = None):
        self.binary = binary
        self.base = base
        self.settings = dict(settings or {})
        self.runtime = ProxyRuntime()
        self.network = self.runtime.network
        self.nodes: list[Node] = []
        for i in range(1, n + 1):
            node = Node(self, i)
            node.proxy = self.runtime.add(i, node.port)
            node.controller_proxy = self.runtime.add(i, node.controller_port)
            self.nodes.append(node)
        self.events: list[str] = []
        self.t0 = time.monotonic()

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id - 1]

    def log(self, event: str) -> None:
        self.events.append(f"{time.monotonic() - self.t0:7.2f}s {event}")

    def start(self) -> "Cluster":
        # Quorum voters wait for each other: start every process first, then wait for each.
        for n in self.nodes:
            n.spawn()
        for n in self.nodes:
            n.wait_started()
        self.log(f"started {len(self.nodes)} node(s)")
        return self

    # -- faults (each logged, so a failure shows the schedule) -------------------------------------
    def kill9(self, node_id: int) -> None:
        self.log(f"kill -9 node {node_id}")
        self.node(node_id).kill9()

    def restart(self, node_id: int) -> None:
        self.log(f"start node {node_id}")
        self.node(node_id).start()

    def sigterm(self, node_id: int) -> None:
        self.log(f"SIGTERM node {node_id}")
        self.node(node_id).stop()

    def pause(self, node_id: int) -> None:
        self.log(f"SIGSTOP node {node_id}")
        self.node(node_id).pause()

    def resume(self, node_id: int) -> None:
        self.log(f"SIGCONT node {node_id}")
        self.node(node_id).resume()

    def isolate(self, node_id: int, mode: str = "drop", clients: bool = True) -> None:
        """Cuts a node off from every other node (and from clients, with `clients`)."""
        self.log(f"isolate node {node_id} ({mode}{', clients too' if clients else ''})")
        others: list[object] = [n.id for n in self.nodes]
        if clients:
            others.append(CLIENT)
        self.network.isolate(node_id, others, mode)

    def partition(self, a: object, b: object, mode: str = "drop") -> None:
        self.log(f"partition {a} <-> {b} ({mode})")
        self.network.partition(a, b, mode)

    def heal(self) -> None:
        self.log("heal the network")
        self.network.heal_all()

    def diagnostics(self) -> str:
        return "\n".join(["--- fault schedule ---", *self.events, *(n.log_tail() for n in self.nodes)])

    def close(self) -> list[str]:
        """Stops every node (SIGTERM, exit 0 expected) and the proxies; returns problems."""
        problems = []
        self.network.heal_all()
        for n in self.nodes:
            if n.proc is None:
                continue
            if n.proc.poll() is not None:
                problems.append(f"node {n.id} died (exit {n.proc.returncode})\n{n.log_tail()}")
                n._closed()
                continue
            try:
                n.stop()
            except HarnessError as e:
                problems.append(str(e))
        self.runtime.close()
        return problems
