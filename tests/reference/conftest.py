"""Fixtures for running Apache Kafka's own software (reference kit) next to `moldau server`.

The Moldau broker fixtures are the compatibility suite's (tests/compat/conftest.py: a real
`moldau server` child on a free loopback port, stopped with SIGTERM and checked for exit 0);
this file adds the reference kit (`scripts/reference/kafka`): running a Kafka main class with the
kit's classpath, and an Apache Kafka 4.4 node started and stopped by the kit.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
KIT = REPO / "scripts" / "reference" / "kafka"
COMPAT = REPO / "tests" / "compat"

# The compat suite's helpers (kwire, clients) and broker fixtures, under a distinct module name.
sys.path.insert(0, str(COMPAT))
_spec = importlib.util.spec_from_file_location("compat_conftest", COMPAT / "conftest.py")
compat_conftest = importlib.util.module_from_spec(_spec)
sys.modules["compat_conftest"] = compat_conftest
_spec.loader.exec_module(compat_conftest)

MoldauServer = compat_conftest.MoldauServer
BrokerPool = compat_conftest.BrokerPool
# Re-exported fixtures and hooks (pytest collects them from this module's namespace).
moldau_bin = compat_conftest.moldau_bin
brokers = compat_conftest.brokers
broker = compat_conftest.broker
broker3 = compat_conftest.broker3
topic = compat_conftest.topic
pytest_runtest_makereport = compat_conftest.pytest_runtest_makereport
pytest_runtest_call = compat_conftest.pytest_runtest_call


@dataclass
class ToolResult:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> "ToolResult":
        assert self.returncode == 0, f"{' '.join(self.args)} exited {self.returncode}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"
        return self

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.strip()]


def kit(*args: str, input_text: str | None = None, timeout: float = 120.0, env: dict | None = None) -> ToolResult:
    """Runs `scripts/reference/kafka ARGS...` and returns its output (never raises on exit code)."""
    argv = [str(KIT), *args]
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.run(argv, input=input_text, capture_output=True, text=True, timeout=timeout, env=full_env)
    return ToolResult(argv, proc.returncode, proc.stdout, proc.stderr)


# Short-lived tool JVMs start faster with only the C1 compiler and the serial collector (the
# machine has 2 shared cores); the perf tools override this with full JIT.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def kafka_class(cls: str, *args: str, env: dict | None = None, **kw) -> ToolResult:
    """Runs a Kafka main class (a CLI tool) with the kit's classpath."""
    full_env = {"MOLDAU_REF_JAVA_OPTS": QUICK_JVM}
    full_env.update(env or {})
    return kit("class", cls, *args, env=full_env, **kw)


def _jvm_missing() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and Path(java_home, "bin", "java").exists()) and shutil.which("java") is None:
        return "no Java found"
    if shutil.which("mvn") is None:
        return "no Maven (mvn) found"
    return None


@pytest.fixture(scope="session")
def kit_libs() -> Path:
    """The kit's libs directory (fetched once; the stage also fetches before pytest starts)."""
    missing = _jvm_missing()
    if missing:
        pytest.skip(f"SKIP: {missing}: the Apache Kafka reference kit cannot run")
    res = kit("fetch", timeout=1200).check()
    return Path(res.lines[-1])


class KafkaNode:
    """Apache Kafka started by the reference kit in DIR (`kit start` / `kit stop`)."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.bootstrap: str | None = None

    def start(self, *extra: str) -> "KafkaNode":
        res = kit("start", str(self.dir), *extra, timeout=400).check()
        last = res.lines[-1]
        assert last.startswith("bootstrap="), res.stdout
        self.bootstrap = last.split("=", 1)[1]
        return self

    def pids(self) -> list[int]:
        path = self.dir / "pids"
        return [int(p) for p in path.read_text().split()] if path.exists() else []

    def stop(self) -> None:
        kit("stop", str(self.dir), timeout=120).check()

    def log_tail(self, max_bytes: int = 6000) -> str:
        out = []
        for log in sorted(self.dir.glob("node-*/server.log")):
            out.append(f"--- {log}\n" + log.read_bytes()[-max_bytes:].decode("utf-8", "replace"))
        return "\n".join(out)


@pytest.fixture(scope="module")
def kafka_ref(kit_libs, tmp_path_factory):
    """One Apache Kafka 4.4 node (combined broker+controller) for the tests of a module."""
    node = KafkaNode(tmp_path_factory.mktemp("kafka-ref"))
    node.start()
    yield node
    node.stop()
