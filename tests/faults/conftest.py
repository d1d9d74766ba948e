"""Fixtures of the fault suite: clusters of real `moldau server` processes behind proxies.

The binary comes from $MOLDAU_BIN (scripts/test sets it), else the workspace's debug build.
Fault schedules are random from a seed: `FAULTS_SEED` replays one (every test prints the seed
it used), `FAULTS_ROUNDS=N` runs each scenario's fault loop N times longer (soak runs),
`FAULTS_HEAVY=1` adds the longer variants (e.g. Moldau's own client in every scenario).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cluster import Cluster  # noqa: E402

REPO = HERE.parent.parent


def _find_binary() -> Path:
    env = os.environ.get("MOLDAU_BIN")
    if env:
        return Path(env)
    try:
        meta = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"],
                              cwd=REPO, check=True, capture_output=True, timeout=60)
        target = Path(json.loads(meta.stdout)["target_directory"])
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        target = REPO / "target"
    return target / "debug" / "moldau"


@pytest.fixture(scope="session")
def moldau_bin() -> Path:
    path = _find_binary()
    if not path.exists():
        pytest.fail(f"moldau binary not found at {path} (set MOLDAU_BIN)", pytrace=False)
    return path


@pytest.fixture
def rng(request) -> random.Random:
    seed = int(os.environ.get("FAULTS_SEED", random.SystemRandom().randrange(1 << 32)))
    print(f"{request.node.name}: FAULTS_SEED={seed}")
    request.node.fault_seed = seed
    return random.Random(seed)


@pytest.fixture
def rounds() -> int:
    return max(1, int(os.environ.get("FAULTS_ROUNDS", "1")))


@pytest.fixture
def topic(request) -> str:
    return f"faults-{request.node.name[:40]}-{uuid.uuid4().hex[:8]}".replace("[", "-").replace("]", "")


@pytest.fixture
def clusters(request, moldau_bin, tmp_path):
    """`clusters(n, **settings)` -> a started Cluster; every one is stopped at teardown (each
    node must exit 0 on SIGTERM), and a failing test gets the fault schedule and log tails."""
    made: list[Cluster] = []

    def make(n: int, **settings) -> Cluster:
        c = Cluster(moldau_bin, tmp_path / f"cluster-{len(made)}", n, settings)
        made.append(c)
        return c.start()

    request.node.fault_clusters = made
    yield make
    problems = []
    for c in made:
        problems += c.close()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed:
        seed = getattr(item, "fault_seed", None)
        if seed is not None:
            report.sections.append(("replay", f"FAULTS_SEED={seed}"))
        for i, c in enumerate(getattr(item, "fault_clusters", [])):
            report.sections.append((f"cluster {i}", c.diagnostics()))
    return report
