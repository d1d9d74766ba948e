"""Three real `moldau server` processes as one cluster (combined broker+controller nodes, a
Raft quorum of three voters, every byte between them through the harness's proxies): the
cluster forms and each node shows all of it; RF=3 topics get a replica on every node with
leaders spread; after kill -9 of the active controller, admin requests keep working once a new
one is elected; a killed broker is fenced (clients stop seeing it, its partitions get leaders
elsewhere) and rejoins when restarted with its data; SIGTERM moves a broker's leadership away
before it exits; a node with another cluster.id, a damaged metadata log or a corrupt metadata
snapshot refuses to start and deletes nothing; a voter whose metadata disk fails stops.

Each scenario prints what it measured (formation time, kill -9 to the next committed
CreateTopics), so the stage's output doubles as a rough timing record.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections import Counter

from checker import wait_for
from cluster import api_versions_ok
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka import KafkaError, KafkaException

# Short broker sessions so fencing is seen in seconds (defaults: 9000 / 2000).
SETTINGS = {"broker.session.timeout.ms": 2000, "broker.heartbeat.interval.ms": 250}


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def brokers_seen_by(address: str) -> list[int]:
    return sorted(admin(address).list_topics(timeout=10).brokers)


def create(bootstrap: str, name: str, partitions: int, rf: int, timeout: float = 30.0) -> None:
    # The client must outlive its futures: a collected AdminClient fails them with _DESTROY.
    client = admin(bootstrap)
    futures = client.create_topics(
        [NewTopic(name, partitions, rf)], operation_timeout=timeout, request_timeout=timeout)
    futures[name].result(timeout=timeout)


def partitions_of(address: str, topic: str):
    md = admin(address).list_topics(topic, timeout=10)
    t = md.topics[topic]
    assert t.error is None, t.error
    return t.partitions


def controller_seen_by(cluster, address: str) -> int:
    """The quorum's leader as `moldau cluster info` reports it (DescribeQuorum through the
    node at `address`). Metadata cannot tell: it names the answering broker as the
    controller, since any broker forwards admin requests."""
    out = subprocess.run(
        [str(cluster.binary), "cluster", "info", "--json", "-b", address, "--timeout-ms", "5000"],
        capture_output=True, text=True, timeout=30, check=True).stdout
    return json.loads(out)["quorum"]["leader_id"]


def settled(cluster) -> int:
    """Waits until every running node lists every running broker and all name the same active
    controller; returns its id."""
    up = [n for n in cluster.nodes if n.alive()]
    ids = sorted(n.id for n in up)

    def agreed():
        if any(brokers_seen_by(n.address) != ids for n in up):
            return None
        seen = {controller_seen_by(cluster, n.address) for n in up}
        return seen.pop() if len(seen) == 1 else None

    return wait_for(f"nodes {ids} to agree on brokers and controller", agreed)


def test_cluster_forms_and_spreads_rf3_replicas(clusters, topic):
    t0 = time.monotonic()
    cluster = clusters(3, **SETTINGS)
    for n in cluster.nodes:
        wait_for(f"node {n.id} to list all brokers", lambda n=n: brokers_seen_by(n.address) == [1, 2, 3])
    print(f"3-node cluster formed (processes started to every node listing 3 brokers): "
          f"{time.monotonic() - t0:.2f} s")
    # Created through one node; every node answers with the same placement.
    create(cluster.node(2).address, topic, 6, 3)
    views = [wait_for(f"{topic} on node {n.id}", lambda n=n: partitions_of(n.address, topic))
             for n in cluster.nodes]
    for parts in views:
        assert sorted(parts) == list(range(6))
        for p in parts.values():
            assert sorted(p.replicas) == [1, 2, 3], p
            assert sorted(p.isrs) == [1, 2, 3], p
        assert Counter(p.leader for p in parts.values()) == {1: 2, 2: 2, 3: 2}
    assert [{i: p.leader for i, p in v.items()} for v in views[1:]] == \
        [{i: p.leader for i, p in views[0].items()}] * 2
    # More replicas than brokers is refused, as Kafka does.
    try:
        create(cluster.bootstrap, topic + "-rf4", 1, 4)
        raise AssertionError("RF 4 on 3 brokers was accepted")
    except Exception as e:  # noqa: BLE001 - the KafkaException carries the code
        assert "INVALID_REPLICATION_FACTOR" in str(e), e


def test_admin_requests_survive_kill9_of_the_active_controller(clusters, topic):
    cluster = clusters(3, **SETTINGS)
    settled(cluster)
    create(cluster.bootstrap, topic, 3, 3)
    victim = settled(cluster)
    others = ",".join(n.address for n in cluster.nodes if n.id != victim)
    cluster.kill9(victim)
    t0 = time.monotonic()
    def create_after():
        # An attempt that timed out may still have been committed: then it exists.
        try:
            create(others, topic + "-after", 3, 2, timeout=10)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        return True

    wait_for("CreateTopics after the election", create_after, timeout=60)
    elapsed = time.monotonic() - t0
    print(f"kill -9 of the active controller (node {victim}) to the next committed CreateTopics: "
          f"{elapsed:.2f} s")
    assert settled(cluster) != victim
    # The survivors agree on the new topic; the victim comes back with its data and catches up.
    for n in cluster.nodes:
        if n.id != victim:
            assert len(wait_for("new topic", lambda n=n: partitions_of(n.address, topic + "-after"))) == 3
    cluster.restart(victim)
    wait_for("the restarted node to catch up",
             lambda: partitions_of(cluster.node(victim).address, topic + "-after"))
    wait_for("all brokers again", lambda: brokers_seen_by(cluster.node(victim).address) == [1, 2, 3])


def test_a_killed_broker_is_fenced_and_rejoins(clusters, topic):
    cluster = clusters(3, **SETTINGS)
    settled(cluster)
    create(cluster.bootstrap, topic, 6, 3)
    controller = settled(cluster)
    victim = next(n.id for n in cluster.nodes if n.id != controller)
    observer = cluster.node(controller).address
    led = [i for i, p in partitions_of(observer, topic).items() if p.leader == victim]
    assert led, "every broker leads some partition"
    cluster.kill9(victim)
    t0 = time.monotonic()
    wait_for("the killed broker to be fenced", lambda: victim not in brokers_seen_by(observer))
    print(f"broker {victim} fenced {time.monotonic() - t0:.2f} s after kill -9 "
          f"(broker.session.timeout.ms={SETTINGS['broker.session.timeout.ms']})")
    parts = partitions_of(observer, topic)
    for i in led:
        assert parts[i].leader not in (victim, -1), parts[i]
        assert victim not in parts[i].isrs, parts[i]
    cluster.restart(victim)
    wait_for("the broker to rejoin", lambda: brokers_seen_by(observer) == [1, 2, 3])
    assert len(partitions_of(cluster.node(victim).address, topic)) == 6


def test_sigterm_moves_leadership_away_before_exit(clusters, topic):
    # Long sessions: leaders may only move because of the controlled shutdown, not a fence.
    cluster = clusters(3, **{"broker.session.timeout.ms": 60000, "broker.heartbeat.interval.ms": 250})
    settled(cluster)
    create(cluster.bootstrap, topic, 6, 3)
    controller = settled(cluster)
    victim = next(n.id for n in cluster.nodes if n.id != controller)
    observer = cluster.node(controller).address
    led = [i for i, p in partitions_of(observer, topic).items() if p.leader == victim]
    assert led, "every broker leads some partition"
    t0 = time.monotonic()
    cluster.sigterm(victim)
    print(f"broker {victim} exited {time.monotonic() - t0:.2f} s after SIGTERM")
    # The exit waited for the committed move: the survivors already name other leaders.
    parts = partitions_of(observer, topic)
    for i in led:
        assert parts[i].leader not in (victim, -1), parts[i]
        assert victim not in parts[i].isrs, parts[i]
    assert victim not in brokers_seen_by(observer)
    cluster.restart(victim)
    wait_for("the broker to rejoin", lambda: brokers_seen_by(observer) == [1, 2, 3])


def refusal_line(node) -> str:
    """The one line a refused start printed last (`moldau: ...`)."""
    lines = [l for l in node.log_path.read_text(errors="replace").splitlines() if l.startswith("moldau: ")]
    assert lines, node.log_tail()
    return lines[-1]


def test_a_node_with_another_cluster_id_is_refused(clusters, topic):
    cluster = clusters(3, **SETTINGS)
    settled(cluster)
    info = subprocess.run([str(cluster.binary), "cluster", "info", "--json", "-b", cluster.bootstrap],
                          capture_output=True, text=True, timeout=30, check=True)
    real_id = json.loads(info.stdout)["cluster_id"]
    assert real_id
    node = cluster.node(3)
    cluster.sigterm(3)
    node.settings["cluster.id"] = "AnotherClusterIdAAAAAA"
    # Its data dir says which cluster it belongs to: refused before it talks to anyone.
    node.spawn()
    assert node.wait_exit() == 2, node.log_tail()
    line = refusal_line(node)
    assert "cluster.id" in line and real_id in line, line
    # With an empty data dir it reaches the quorum, whose majority refuses its id.
    kept = node.data_dir.with_name("node-3.kept")
    node.data_dir.rename(kept)
    node.spawn()
    assert node.wait_exit() == 2, node.log_tail()
    line = refusal_line(node)
    assert "cluster.id" in line and "another cluster" in line, line
    # The majority kept serving meanwhile, and the node rejoins with its own data and id.
    create(cluster.bootstrap, topic, 3, 2)
    shutil.rmtree(node.data_dir)
    kept.rename(node.data_dir)
    node.settings.clear()
    cluster.restart(3)
    wait_for("node 3 to rejoin", lambda: brokers_seen_by(node.address) == [1, 2, 3])
    assert len(wait_for("the topic on node 3", lambda: partitions_of(node.address, topic))) == 3


def quorum_epoch(cluster) -> int:
    out = subprocess.run(
        [str(cluster.binary), "cluster", "info", "--json", "-b", cluster.bootstrap, "--timeout-ms", "5000"],
        capture_output=True, text=True, timeout=30, check=True).stdout
    return json.loads(out)["quorum"]["leader_epoch"]


def test_a_voter_with_damaged_metadata_refuses_or_recovers(clusters, topic):
    """A follower voter's metadata log corrupt in the middle, or missing entries it
    acknowledged (cut short, deleted): the node refuses to start with one clear line and
    touches no partition directory while the majority keeps serving. (Once another leader was
    elected, which no longer knows what the node acknowledged, a cut-short log catches up from
    the quorum instead; that is accepted only then, and the node must show every topic.)
    Restored, it rejoins."""
    cluster = clusters(3, **SETTINGS)
    controller = settled(cluster)
    for i in range(3):
        create(cluster.bootstrap, f"{topic}-{i}", 3, 3)
    victim = next(n.id for n in cluster.nodes if n.id != controller)
    node = cluster.node(victim)
    wait_for("the victim to see the topics", lambda: len(partitions_of(node.address, f"{topic}-2")) == 3)
    epoch = quorum_epoch(cluster)
    cluster.sigterm(victim)
    meta = node.data_dir / "__cluster_metadata-0"
    backup = node.data_dir.with_name(f"node-{victim}.metadata")
    shutil.copytree(meta, backup)
    (log,) = sorted(meta.glob("raft-*.log"))
    good = log.read_bytes()
    partition_dirs = sorted(p.name for p in node.data_dir.iterdir() if p.name.startswith(topic))
    assert len(partition_dirs) == 9

    def start_damaged(damage: str, expect: str) -> None:
        node.spawn()
        deadline = time.monotonic() + 60
        while node.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"{damage}: neither refused nor serving\n{node.log_tail()}")
            if api_versions_ok(node.port) and quorum_epoch(cluster) != epoch:
                # Another leader: the node caught up from the quorum; it must show it all.
                for i in range(3):
                    assert len(wait_for("topics", lambda i=i: partitions_of(node.address, f"{topic}-{i}"))) == 3
                print(f"{damage}: recovered from the quorum (leader epoch moved from {epoch})")
                cluster.sigterm(victim)
                return
            time.sleep(0.2)
        code = node.wait_exit()
        assert code != 0, f"{damage}: exit {code}"
        line = refusal_line(node)
        assert expect in line, f"{damage}: {line}"
        assert sorted(p.name for p in node.data_dir.iterdir() if p.name.startswith(topic)) == \
            partition_dirs, f"{damage}: partition directories changed"
        print(f"{damage}: exit {code}: {line[:200]}...")

    # A flipped byte in the middle: the checksum says so before Raft starts.
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    log.write_bytes(bytes(bad))
    start_damaged("mid-log corruption", "corrupt")
    # Entries cut off the end: what is left is valid, but less than it acknowledged.
    log.write_bytes(good[: len(good) // 2])
    start_damaged("truncated log", "acknowledged were lost")
    # No metadata at all.
    shutil.rmtree(meta)
    start_damaged("deleted metadata directory", "acknowledged were lost")
    # The majority served meanwhile; restored, the node rejoins and sees what it missed.
    create(cluster.bootstrap, f"{topic}-while-down", 3, 2)
    shutil.rmtree(meta)
    shutil.copytree(backup, meta)
    cluster.restart(victim)
    wait_for("the victim to rejoin", lambda: brokers_seen_by(node.address) == [1, 2, 3])
    assert len(wait_for("the new topic on the victim",
                        lambda: partitions_of(node.address, f"{topic}-while-down"))) == 3


def test_a_voter_whose_metadata_disk_fails_stops_and_a_corrupt_snapshot_refuses(clusters, topic):
    """A follower voter whose metadata log can no longer be written (its directory gone from
    under the running process) stops with an error naming the metadata log, as Kafka halts,
    while the majority keeps serving. Its latest metadata snapshot corrupt, it refuses to start
    and touches no partition directory; restored, it rejoins and sees what it missed.
    (Snapshots every few KiB of metadata here, so they exist after a few topics.)"""
    cluster = clusters(3, **SETTINGS, **{"metadata.log.max.record.bytes.between.snapshots": 2048})
    controller = settled(cluster)
    victim = next(n.id for n in cluster.nodes if n.id != controller)
    node = cluster.node(victim)
    meta = node.data_dir / "__cluster_metadata-0"
    for i in range(4):
        create(cluster.bootstrap, f"{topic}-{i}", 3, 3)
    wait_for("a metadata snapshot on the victim", lambda: list(meta.glob("*.checkpoint")))
    wait_for("the victim to see the topics", lambda: len(partitions_of(node.address, f"{topic}-3")) == 3)

    # The metadata disk goes away under the running node: its open files still take appends,
    # but the next file it writes by name (hard state, a snapshot, a segment) fails.
    gone = node.data_dir / "metadata-gone"
    meta.rename(gone)
    made = 0
    while node.proc.poll() is None and made < 40:
        create(cluster.bootstrap, f"{topic}-after-failure-{made}", 3, 2)
        made += 1
    code = node.wait_exit()
    assert code == 1, f"exit {code}\n{node.log_tail()}"
    line = refusal_line(node)
    assert "metadata log failed" in line, line
    print(f"failed metadata disk: exit {code}: {line[:200]}")
    settled(cluster)
    create(cluster.bootstrap, f"{topic}-while-down", 3, 2)
    gone.rename(meta)

    # The latest snapshot corrupt: refused with the file named, nothing deleted.
    (snapshot,) = sorted(meta.glob("*.checkpoint"), key=lambda p: int(p.name.split("-")[0]))[-1:]
    good = snapshot.read_bytes()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    snapshot.write_bytes(bytes(bad))
    partition_dirs = sorted(p.name for p in node.data_dir.iterdir() if p.name.startswith(topic))
    node.spawn()
    code = node.wait_exit()
    assert code != 0, f"exit {code}"
    line = refusal_line(node)
    assert "snapshot checksum mismatch" in line and snapshot.name in line, line
    assert sorted(p.name for p in node.data_dir.iterdir() if p.name.startswith(topic)) == partition_dirs
    print(f"corrupt snapshot: exit {code}: {line[:200]}")

    snapshot.write_bytes(good)
    cluster.restart(victim)
    wait_for("the victim to rejoin", lambda: brokers_seen_by(node.address) == [1, 2, 3])
    for name in (f"{topic}-after-failure-{made - 1}", f"{topic}-while-down"):
        assert len(wait_for(f"{name} on the victim", lambda name=name: partitions_of(node.address, name))) == 3


def test_moldau_cluster_start_runs_a_local_cluster(moldau_bin, tmp_path, topic):
    """`moldau cluster start`: one command, three child nodes, the bootstrap list printed once
    every node sees the whole cluster; kcat, kafka-python and librdkafka see all three brokers
    from any one node; a node killed with kill -9 is reported while the others keep serving
    acks=all writes; Ctrl-C stops every node."""
    import os
    import signal
    import threading

    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from kafka import KafkaAdminClient

    settings = [f"--set={k}={v}" for k, v in SETTINGS.items()]
    proc = subprocess.Popen([str(moldau_bin), "cluster", "start", "--base-port", "0", "--data-dir",
                             str(tmp_path / "local"), *settings], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    lines: list[str] = []
    errors: list[str] = []
    threading.Thread(target=lambda: [lines.append(l) for l in proc.stdout], daemon=True).start()
    threading.Thread(target=lambda: [errors.append(l) for l in proc.stderr], daemon=True).start()
    try:
        ready = wait_for("the cluster to be ready",
                         lambda: next((l for l in lines if "ready, bootstrap" in l), None) or
                         (proc.poll() is not None and pytest_fail(lines, errors)))
        bootstrap = ready.split("bootstrap ")[1].split()[0]
        nodes = bootstrap.split(",")
        pids = {int(l.split("node ")[1].split()[0]): int(l.split("pid ")[1].split(",")[0])
                for l in lines if l.startswith("moldau: node ")}
        assert len(nodes) == 3 and sorted(pids) == [1, 2, 3], lines
        for address in nodes:
            md = json.loads(subprocess.run(["kcat", "-L", "-J", "-b", address], capture_output=True,
                                           text=True, timeout=30, check=True).stdout)
            assert sorted(b["id"] for b in md["brokers"]) == [1, 2, 3], md
            kp = KafkaAdminClient(bootstrap_servers=address, request_timeout_ms=10000)
            try:
                # DescribeCluster (API 60) names brokers `broker_id`.
                assert sorted(b["broker_id"] for b in kp.describe_cluster()["brokers"]) == [1, 2, 3]
            finally:
                kp.close()
            assert brokers_seen_by(address) == [1, 2, 3]

        create(bootstrap, topic, 1, 3)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})

        def produce(values):
            failed = []
            for v in values:
                producer.produce(topic, v, on_delivery=lambda err, msg: err and failed.append(err))
            assert producer.flush(60) == 0 and not failed, failed

        produce([b"before-%d" % i for i in range(10)])
        (leader,) = {p.leader for p in partitions_of(nodes[0], topic).values()}
        os.kill(pids[leader], signal.SIGKILL)
        wait_for("the parent to report the killed node",
                 lambda: any(f"node {leader} exited" in l for l in errors))
        produce([b"after-%d" % i for i in range(10)])
        # No group: the group coordinator's move across nodes is tested in its own scenarios.
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-g",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        seen = []
        deadline = time.monotonic() + 60
        while len(seen) < 20 and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                seen.append(m.value())
        consumer.close()
        assert sorted(seen) == sorted([b"before-%d" % i for i in range(10)] + [b"after-%d" % i for i in range(10)])
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=90)
    assert code == 0, (lines, errors)
    assert any("stopped; data and logs kept" in l for l in lines), lines
    for pid in pids.values():
        assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()


def pytest_fail(lines, errors):
    raise AssertionError(f"moldau cluster start exited early\n{''.join(lines)}{''.join(errors)}")
