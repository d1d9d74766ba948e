"""Fixtures that run a real `moldau server` process for the compatibility suite.

Each broker gets its own data directory and a free loopback port (the server binds port 0 and
reports the port on its first stdout line). Readiness is a real ApiVersions round trip, bounded
by a deadline; shutdown is SIGTERM and must exit 0. The binary comes from $MOLDAU_BIN
(scripts/test sets it); without it the suite falls back to the workspace's debug build.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

import kwire

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LISTEN_RE = re.compile(r"^moldau: listening on 127\.0\.0\.1:(\d+), data in (.+)$")
ADMIN_RE = re.compile(r"^moldau: admin on (http://\S+)$")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


def _find_binary() -> Path:
    env = os.environ.get("MOLDAU_BIN")
    if env:
        return Path(env)
    try:
        meta = subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--no-deps"],
            cwd=REPO, check=True, capture_output=True, timeout=60,
        )
        target = Path(json.loads(meta.stdout)["target_directory"])
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        target = REPO / "target"
    return target / "debug" / "moldau"


class MoldauServer:
    """One `moldau server` child process on 127.0.0.1 with a fixed data dir.

    `start()`/`stop()` may be called repeatedly (restart on the same data dir); the port changes
    on every start, so clients must be created after `start()` returns.
    """

    def __init__(self, binary: Path, data_dir: Path, log_path: Path, settings: dict[str, object]):
        self.binary = binary
        self.data_dir = data_dir
        self.log_path = log_path
        self.settings = dict(settings)
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self._log = None
        self._drain: threading.Thread | None = None
        self._admin_url: str | None = None
        self._admin_seen = threading.Event()

    @property
    def bootstrap(self) -> str:
        assert self.port is not None, "broker not started"
        return f"127.0.0.1:{self.port}"

    @property
    def address(self) -> tuple[str, int]:
        assert self.port is not None, "broker not started"
        return ("127.0.0.1", self.port)

    def admin_url(self, timeout: float = START_TIMEOUT_S) -> str:
        """The admin HTTP listener's base URL, from the `moldau: admin on URL` stdout line."""
        if not self._admin_seen.wait(timeout) or self._admin_url is None:
            pytest.fail(f"moldau printed no admin line within {timeout}s\n{self.log_tail()}", pytrace=False)
        return self._admin_url

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, max_bytes: int = 6000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return "<no log>"
        return data[-max_bytes:].decode("utf-8", "replace")

    def start(self, port: int | None = None) -> "MoldauServer":
        """Starts the broker on a free port, or on `port` (a restart that clients should
        reconnect to transparently, e.g. after `crash()`)."""
        assert not self.alive(), "broker already running"
        if not self.binary.exists():
            pytest.fail(f"moldau binary not found at {self.binary} (set MOLDAU_BIN)", pytrace=False)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        listen = f"127.0.0.1:{port or 0}"
        args = [str(self.binary), "server", "--listen", listen, "--data-dir", str(self.data_dir)]
        for key, value in self.settings.items():
            args += ["--set", f"{key}={value}"]
        self._log = open(self.log_path, "ab")
        self._log.write(f"\n=== start: {' '.join(args)}\n".encode())
        self._log.flush()
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        self._admin_url = None
        self._admin_seen.clear()
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log, env=env,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        lines: queue.Queue = queue.Queue()
        proc = self.proc
        log = self._log
        server = self

        def pump():
            # First line goes to the queue; everything after it is copied into the log so a
            # chatty stdout can never fill the pipe and block the broker.
            first = True
            for raw in iter(proc.stdout.readline, b""):
                if first:
                    lines.put(raw)
                    first = False
                else:
                    admin = ADMIN_RE.match(raw.decode("utf-8", "replace").rstrip("\r\n"))
                    if admin and not server._admin_seen.is_set():
                        server._admin_url = admin.group(1)
                        server._admin_seen.set()
                log.write(b"[stdout] " + raw)
                log.flush()
            if first:
                lines.put(b"")

        self._drain = threading.Thread(target=pump, daemon=True)
        self._drain.start()
        try:
            raw = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            self._kill()
            pytest.fail(f"moldau printed no listen line within {START_TIMEOUT_S}s\n{self.log_tail()}", pytrace=False)
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        match = LISTEN_RE.match(line)
        if not match:
            self._kill()
            pytest.fail(f"unexpected first stdout line from moldau: {line!r}\n{self.log_tail()}", pytrace=False)
        self.port = int(match.group(1))
        assert Path(match.group(2)).resolve() == self.data_dir.resolve(), line
        self._wait_ready(deadline)
        return self

    def _wait_ready(self, deadline: float) -> None:
        last_err: Exception | None = None
        while time.monotonic() < deadline:
            if not self.alive():
                pytest.fail(f"moldau exited during startup (code {self.proc.returncode})\n{self.log_tail()}", pytrace=False)
            try:
                with kwire.connect(self.address, timeout=2.0) as sock:
                    resp = kwire.api_versions(sock, version=0)
                if resp.error_code == 0:
                    return
                last_err = RuntimeError(f"ApiVersions error {resp.error_code}")
            except (OSError, kwire.ProtocolError) as err:
                last_err = err
            time.sleep(0.05)
        self._kill()
        pytest.fail(f"moldau not ready within {START_TIMEOUT_S}s: {last_err}\n{self.log_tail()}", pytrace=False)

    def stop(self, check: bool = True) -> int | None:
        """SIGTERM the broker and wait; with `check`, fail unless it exits 0 in time."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            self._close_log()
            if check:
                pytest.fail(f"moldau did not exit within {STOP_TIMEOUT_S}s of SIGTERM\n{self.log_tail()}", pytrace=False)
            return None
        self._close_log()
        if check and code != 0:
            pytest.fail(f"moldau exited with code {code} after SIGTERM (expected 0)\n{self.log_tail()}", pytrace=False)
        return code

    def crash(self) -> None:
        """SIGKILL: no shutdown work at all, as in a power cut (what was fsynced must survive)."""
        assert self.proc is not None, "broker not started"
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = None
        self._close_log()

    def restart(self) -> "MoldauServer":
        self.stop()
        return self.start()

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None
        self._close_log()

    def _close_log(self) -> None:
        if self._drain is not None:
            self._drain.join(timeout=5)
            self._drain = None
        if self._log is not None:
            self._log.close()
            self._log = None


class BrokerPool:
    """Starts brokers on demand and stops every one of them (checking exit 0) at teardown."""

    def __init__(self, binary: Path, base: Path):
        self.binary = binary
        self.base = base
        self.servers: list[MoldauServer] = []

    def start(self, name: str = "broker", **settings) -> MoldauServer:
        idx = len(self.servers)
        data_dir = self.base / f"{name}-{idx}-data"
        server = MoldauServer(self.binary, data_dir, self.base / f"{name}-{idx}.log", settings)
        self.servers.append(server)
        return server.start()

    def stop_all(self) -> list[str]:
        problems = []
        for server in self.servers:
            if server.proc is None:
                continue
            if server.proc.poll() is not None:
                problems.append(f"moldau died during the test (code {server.proc.returncode})\n{server.log_tail()}")
                server._kill()
                continue
            code = server.stop(check=False)
            if code != 0:
                problems.append(f"moldau exit code after SIGTERM: {code} (expected 0)\n{server.log_tail()}")
        return problems


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    if report.when == "call" and report.failed:
        # Attach the tail of every broker log this test touched to the failure report.
        for name, value in getattr(item, "funcargs", {}).items():
            servers = value.servers if isinstance(value, BrokerPool) else [value] if isinstance(value, MoldauServer) else []
            for server in servers:
                report.sections.append((f"moldau log ({name}: {server.log_path})", server.log_tail()))
    return report


def _report_pool(request, pool: BrokerPool) -> None:
    problems = pool.stop_all()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture(scope="session")
def moldau_bin() -> Path:
    return _find_binary()


@pytest.fixture
def brokers(request, moldau_bin, tmp_path):
    """Function-scoped pool: `brokers.start(**settings)` -> MoldauServer (own data dir)."""
    pool = BrokerPool(moldau_bin, tmp_path)
    yield pool
    _report_pool(request, pool)


@pytest.fixture(scope="module")
def broker(request, moldau_bin, tmp_path_factory) -> MoldauServer:
    """A broker shared by the tests of one module (default settings, 1 partition per topic)."""
    pool = BrokerPool(moldau_bin, tmp_path_factory.mktemp("moldau"))
    server = pool.start("shared")
    yield server
    _report_pool(request, pool)


@pytest.fixture(scope="module")
def broker3(request, moldau_bin, tmp_path_factory) -> MoldauServer:
    """A module-shared broker whose auto-created topics have 3 partitions."""
    pool = BrokerPool(moldau_bin, tmp_path_factory.mktemp("moldau3"))
    server = pool.start("shared3", **{"num.partitions": 3})
    yield server
    _report_pool(request, pool)


@pytest.fixture
def topic(request) -> str:
    """A fresh topic name per test (topics auto-create on first use)."""
    base = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:80]
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def assert_serving():
    return kwire.assert_serving




@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    # A shared broker that died in an earlier test would make every later test wait for client
    # timeouts; fail those fast instead.
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, MoldauServer) and value.proc is not None and not value.alive():
            pytest.fail(f"shared moldau broker is dead (exit code {value.proc.returncode})\n{value.log_tail()}",
                        pytrace=False)
