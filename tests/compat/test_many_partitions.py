"""Many partitions (issue 8, item 9): thousands of partitions share a bounded flusher pool instead
of one OS thread each; the broker raises its soft open-file limit to the hard one at startup; and
a topic whose logs could not be opened is never reported as created: the partition cap accounts
for the descriptors the process has (POLICY_VIOLATION at CreateTopics), and a partition whose log
still fails to open is offline (KAFKA_STORAGE_ERROR), not silently "created"."""

from __future__ import annotations

import resource
import subprocess
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

import clients
import kwire

POLICY_VIOLATION = 44
KAFKA_STORAGE_ERROR = 56
PARTITIONS = 6000


def status(pid: int, field: str) -> str:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return line.split(":", 1)[1].strip()
    raise AssertionError(field)


def nofile_limits(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    raise AssertionError("no open-file limit")


def test_six_thousand_partitions_do_not_mean_six_thousand_threads(brokers, topic):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2 * PARTITIONS + 2000:
        pytest.skip(f"the hard open-file limit ({hard}) is too low for {PARTITIONS} partitions")
    server = brokers.start(**{"max.broker.partitions": PARTITIONS + 100, "log.io.threads": 4,
                              "log.segment.bytes": 1 << 20})
    # Opening 6,000 logs (a few fsyncs each) takes a while; the answer waits for it.
    admin = AdminClient({"bootstrap.servers": server.bootstrap, "socket.timeout.ms": 300_000})
    t0 = time.monotonic()
    fut = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)],
                              request_timeout=300)[topic]
    fut.result(timeout=320)
    print(f"created {PARTITIONS} partitions in {time.monotonic() - t0:.1f} s")
    md = admin.list_topics(topic, timeout=60).topics[topic]
    assert len(md.partitions) == PARTITIONS
    # acks=all on a spread of partitions: fsyncs go through the shared pool.
    for p in range(0, PARTITIONS, 500):
        assert clients.confluent_produce(server.bootstrap, topic, [{"value": b"v"}], partition=p,
                                         acks="all")[0].offset() == 0
    threads = int(status(server.proc.pid, "Threads"))
    # tokio workers, its blocking pool, the flusher pool and a few more: nowhere near 6,000.
    assert threads < 200, f"{threads} threads for {PARTITIONS} partitions"
    soft, hard_now = nofile_limits(server.proc.pid)
    assert soft == hard_now, "the soft open-file limit is raised to the hard one"
    server.crash()  # closing 6,000 logs cleanly is not what this test is about


def _limit_nofile(n: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    return apply


def test_partitions_that_cannot_be_opened_are_never_reported_created(moldau_bin, tmp_path, topic):
    """With 400 descriptors, the cap derived from them refuses a 300-partition topic up front
    instead of reporting it created with logs that cannot be opened."""
    data = tmp_path / "data"
    proc = subprocess.Popen([str(moldau_bin), "server", "--listen", "127.0.0.1:0", "--data-dir", str(data)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, preexec_fn=_limit_nofile(400))
    try:
        line = proc.stdout.readline().decode()
        port = int(line.split("127.0.0.1:")[1].split(",")[0])
        bootstrap = f"127.0.0.1:{port}"
        admin = clients.confluent_admin(bootstrap)
        big = NewTopic(topic, num_partitions=300, replication_factor=1)
        with pytest.raises(Exception) as e:
            admin.create_topics([big], request_timeout=30)[topic].result(timeout=60)
        assert e.value.args[0].code() == POLICY_VIOLATION, e.value
        assert "open-file" in e.value.args[0].str()
        assert topic not in admin.list_topics(timeout=10).topics
        small = NewTopic(topic, num_partitions=20, replication_factor=1)
        admin.create_topics([small], request_timeout=30)[topic].result(timeout=60)
        assert clients.confluent_produce(bootstrap, topic, [{"value": b"ok"}], partition=19)[0].offset() == 0
    finally:
        proc.kill()
        proc.wait(timeout=10)
