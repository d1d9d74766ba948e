"""Fault scenarios on one node (what a one-node cluster must survive, and the harness's own
proof that it injects what it claims): kill -9 loops, a frozen (SIGSTOP) broker, SIGTERM
restarts, and a network partition between the clients and the node. Every scenario runs an
idempotent acks=all workload through the faults and ends with the checker (checker.py).
"""

from __future__ import annotations

import time

import pytest

from checker import CheckFailed, Workload, check, create_topic, read_back
from cluster import api_versions_ok

PARTITIONS = 3


def finish(cluster, workload: Workload, topic: str) -> dict:
    """Stops the workload and proves every acknowledged record is there exactly once."""
    workload.stop()
    logs, starts = read_back(cluster.bootstrap, topic, PARTITIONS)
    stats = check(workload.history, logs, starts)
    stats["max_ack_gap_s"] = round(workload.max_ack_gap(), 2)
    print(f"checker: {stats}")
    assert stats["acked"] > 0
    return stats


def start_workload(cluster, topic: str, **kw) -> Workload:
    create_topic(cluster.bootstrap, topic, PARTITIONS, 1)
    w = Workload(cluster.bootstrap, topic, PARTITIONS, **kw).start()
    w.wait_acks(100, 60, "before the first fault")
    return w


def test_kill9_loop(clusters, topic, rng, rounds):
    """kill -9 at random moments under load, restart on the same ports: nothing acknowledged
    is lost (acks=all is answered after fsync), no duplicates, order kept."""
    cluster = clusters(1)
    w = start_workload(cluster, topic)
    for _ in range(4 * rounds):
        time.sleep(rng.uniform(0.2, 2.0))
        cluster.kill9(1)
        time.sleep(rng.uniform(0.0, 1.0))
        cluster.restart(1)
        w.wait_acks(50, 90, "after a restart")
    finish(cluster, w, topic)


def test_sigstop_zombie(clusters, topic, rng, rounds):
    """The broker freezes (SIGSTOP) longer than the producers' request timeout, so they retry
    into a broker that still holds the first attempts; resumed, it must append each batch
    once (idempotence) and lose nothing."""
    cluster = clusters(1)
    w = start_workload(cluster, topic)
    for _ in range(2 * rounds):
        time.sleep(rng.uniform(0.2, 1.5))
        cluster.pause(1)
        time.sleep(rng.uniform(5.5, 7.0))
        cluster.resume(1)
        w.wait_acks(50, 90, "after SIGCONT")
    finish(cluster, w, topic)


def test_pause_returns_once_every_thread_is_stopped(clusters):
    """The harness's SIGSTOP is a freeze when `pause()` returns: every thread of the node is
    stopped (kill() alone returns before the signal reaches them all, and a loaded machine let
    a paused follower fetch for ~100 ms more), and SIGCONT lets it serve again."""
    cluster = clusters(1)
    node = cluster.node(1)
    for _ in range(20):
        cluster.pause(1)
        states = node.thread_states()
        assert states and all(s in "Tt" for s in states), states
        cluster.resume(1)
    assert api_versions_ok(node.port)


def test_sigterm_restarts(clusters, topic, rng, rounds):
    """Rolling restarts (SIGTERM, exit 0, start again) under load."""
    cluster = clusters(1)
    w = start_workload(cluster, topic)
    for _ in range(3 * rounds):
        time.sleep(rng.uniform(0.2, 1.5))
        cluster.sigterm(1)
        cluster.restart(1)
        w.wait_acks(50, 90, "after a restart")
    stats = finish(cluster, w, topic)
    print(f"longest time without an acknowledgement across {3 * rounds} restarts: {stats['max_ack_gap_s']}s")


@pytest.mark.parametrize("mode", ["blackhole", "drop"])
def test_client_partition(clusters, topic, rng, mode):
    """The proxy cuts the clients off the node (packets vanish, or connections are reset):
    no acknowledgement arrives while the partition lasts (the harness really partitions), and
    after healing the producers resume and the checker passes."""
    cluster = clusters(1)
    w = start_workload(cluster, topic)
    cluster.isolate(1, mode)
    # Acks already on their way may still land just after the cut; after that, none.
    time.sleep(1.0)
    before = w.acked_count()
    time.sleep(rng.uniform(4.0, 6.0))
    during = w.acked_count() - before
    cluster.heal()
    assert during == 0, f"{during} acknowledgement(s) crossed a {mode} partition"
    w.wait_acks(100, 90, "after healing")
    if mode == "drop":
        assert cluster.network.refused > 0, "no connection was refused during the partition"
    finish(cluster, w, topic)


def test_the_checker_sees_real_loss(clusters, topic):
    """The whole chain can fail: acknowledged records cut from the log on disk behind the
    broker's back (as a lost write would) are reported by the checker."""
    cluster = clusters(1)
    w = start_workload(cluster, topic)
    w.wait_acks(200, 60, "before the damage")
    w.stop()
    cluster.kill9(1)
    segment = cluster.node(1).data_dir / f"{topic}-0" / "00000000000000000000.log"
    size = segment.stat().st_size
    with open(segment, "r+b") as f:
        f.truncate(size // 2)
    cluster.restart(1)
    logs, starts = read_back(cluster.bootstrap, topic, PARTITIONS)
    with pytest.raises(CheckFailed, match="acknowledged record"):
        check(w.history, logs, starts)
