"""`moldau topic reassign` (the CLI's kafka-reassign-partitions) on three `moldau server`
processes: --generate proposes a plan over given brokers, --execute --throttle starts it and sets
the KIP-73 throttles as Kafka's tool does (checked through DescribeConfigs with kafka-python),
--list and --verify report it in progress while the throttle holds the copy back, --verify once
complete removes every throttle, a plan written by the CLI is read by Kafka's JSON rules (and the
other way round: Kafka's own tool reads it in tests/reference), --cancel stops a reassignment to
a stopped broker, and bad plans and unknown brokers are refused with exit code 1.
"""

from __future__ import annotations

import json
import subprocess

from checker import wait_for
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

SETTINGS = {
    "broker.session.timeout.ms": 3000,
    "broker.heartbeat.interval.ms": 500,
    "auto.leader.rebalance.enable": "false",
}


def cli(moldau_bin, cluster, *args, check=True):
    out = subprocess.run([str(moldau_bin), "topic", "reassign", *args, "-b", cluster.bootstrap,
                          "--timeout-ms", "20000"], capture_output=True, text=True, timeout=120)
    if check:
        assert out.returncode == 0, (args, out.stdout, out.stderr)
    return out


def configs(admin: AdminClient, kind: ResourceType, name: str) -> dict[str, str]:
    res = admin.describe_configs([ConfigResource(kind, name)])
    entries = list(res.values())[0].result(30)
    return {k: e.value for k, e in entries.items() if not e.is_default}


def test_moldau_topic_reassign_on_three_nodes(clusters, moldau_bin, topic, tmp_path):
    cluster = clusters(3, **SETTINGS)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 2, replica_assignment=[[1, 2], [2, 1]])])[topic].result(60)
    wait_for("leaders", lambda: [admin.list_topics(topic, timeout=10).topics[topic].partitions[p].leader
                                 for p in range(2)] == [1, 2])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(800):  # ~8 MB
        producer.produce(topic, value=bytes([i % 251]) * 10_000, partition=i % 2)
    assert producer.flush(120) == 0

    # --generate: Kafka's two JSON documents, the proposal over the brokers given.
    out = cli(moldau_bin, cluster, "--generate", "--topics", topic, "--broker-list", "2,3").stdout
    lines = out.splitlines()
    assert lines[0] == "Current partition replica assignment", out
    current = json.loads(lines[1])
    assert current == {"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]},
        {"topic": topic, "partition": 1, "replicas": [2, 1], "log_dirs": ["any", "any"]}]}, out
    assert lines[3] == "Proposed partition reassignment configuration", out
    proposed = json.loads(lines[4])
    assert [p["replicas"] for p in proposed["partitions"]] == [[2, 3], [3, 2]], out
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    again = cli(moldau_bin, cluster, "--generate", "--topics-to-move-json-file", str(topics_file),
                "--broker-list", "2,3", "--json").stdout
    assert json.loads(again)["proposed"] == proposed

    # --execute with a throttle low enough to hold the copy to node 3 back.
    plan = tmp_path / "plan.json"
    plan.write_text(lines[4])
    out = cli(moldau_bin, cluster, "--execute", "--reassignment-json-file", str(plan),
              "--throttle", "50000").stdout
    assert "Save this to use as the --reassignment-json-file option during rollback" in out, out
    assert json.loads(out.splitlines()[2]) == current, out
    assert "The inter-broker throttle limit was set to 50000 B/s" in out, out
    assert f"Successfully started partition reassignments for {topic}-0,{topic}-1" in out, out
    # Kafka's tool's throttles: the rates on every broker involved, the current replicas of
    # the moving partitions on the leader side, the added ones on the follower side.
    for b in ("1", "2", "3"):
        c = configs(admin, ResourceType.BROKER, b)
        assert c.get("leader.replication.throttled.rate") == "50000", (b, c)
        assert c.get("follower.replication.throttled.rate") == "50000", (b, c)
    t = configs(admin, ResourceType.TOPIC, topic)
    assert t["leader.replication.throttled.replicas"] == "0:1,0:2,1:1,1:2", t
    assert t["follower.replication.throttled.replicas"] == "0:3,1:3", t
    # A second plan refused while one is in progress (Kafka's --additional rule).
    refused = cli(moldau_bin, cluster, "--execute", "--reassignment-json-file", str(plan), check=False)
    assert refused.returncode == 1 and "existing partition assignment" in refused.stderr, refused

    listed = cli(moldau_bin, cluster, "--list").stdout
    assert listed.startswith("Current partition reassignments:"), listed
    assert f"{topic}-0: replicas: 2,3,1. adding: 3. removing: 1." in listed, listed
    out = cli(moldau_bin, cluster, "--verify", "--reassignment-json-file", str(plan)).stdout
    assert f"Reassignment of partition {topic}-0 is still in progress." in out, out
    assert "Clearing" not in out, out
    assert configs(admin, ResourceType.BROKER, "3").get("follower.replication.throttled.rate") == "50000"

    # Raise the throttle (--additional resubmits the plan with a new rate), then verify until
    # complete: the throttles are removed.
    out = cli(moldau_bin, cluster, "--execute", "--additional", "--reassignment-json-file", str(plan),
              "--throttle", "100000000").stdout
    assert "The inter-broker throttle limit was set to 100000000 B/s" in out, out

    def verified():
        out = cli(moldau_bin, cluster, "--verify", "--reassignment-json-file", str(plan)).stdout
        return out if "is still in progress" not in out else None
    out = wait_for("--verify says completed", verified, timeout=120, every=1.0)
    assert f"Reassignment of partition {topic}-0 is completed." in out, out
    assert f"Reassignment of partition {topic}-1 is completed." in out, out
    assert "Clearing broker-level throttles on brokers 1,2,3" in out, out
    assert f"Clearing topic-level throttles on topics {topic}" in out, out
    for b in ("1", "2", "3"):
        c = configs(admin, ResourceType.BROKER, b)
        assert "leader.replication.throttled.rate" not in c and "follower.replication.throttled.rate" not in c, c
    t = configs(admin, ResourceType.TOPIC, topic)
    assert "leader.replication.throttled.replicas" not in t, t
    p = admin.list_topics(topic, timeout=10).topics[topic].partitions
    assert [p[0].replicas, p[1].replicas] == [[2, 3], [3, 2]], p
    assert cli(moldau_bin, cluster, "--list").stdout.strip() == "No partition reassignments found."
    status = json.loads(cli(moldau_bin, cluster, "--verify", "--json", "--reassignment-json-file",
                            str(plan)).stdout)
    assert status["complete"] and [r["status"] for r in status["partitions"]] == ["completed"] * 2, status

    # Refusals: an unknown broker, a repeated replica, a log dir; exit code 1, one line.
    for bad, why in ([[2, 9], "Unknown broker id(s) 9"], [[2, 2], "duplicate entries"]):
        f = tmp_path / "bad.json"
        f.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": bad}]}))
        r = cli(moldau_bin, cluster, "--execute", "--reassignment-json-file", str(f), check=False)
        assert r.returncode == 1 and why in r.stderr, (bad, r.stdout, r.stderr)

    # --cancel: a reassignment to a stopped broker stays in progress until cancelled.
    cluster.sigterm(1)
    stuck = tmp_path / "stuck.json"
    stuck.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2, 1]}]}))
    # (Broker 1 is registered but fenced: the controller accepts it as a target.)
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    kp = KafkaAdminClient(bootstrap_servers=f"{cluster.node(2).address},{cluster.node(3).address}",
                          request_timeout_ms=30000)
    try:
        assert kp.alter_partition_reassignments({TopicPartition(topic, 0): [2, 1]}) == {TopicPartition(topic, 0): None}
    finally:
        kp.close()
    live = f"{cluster.node(2).address},{cluster.node(3).address}"
    out = subprocess.run([str(moldau_bin), "topic", "reassign", "--cancel", "--preserve-throttles",
                          "--reassignment-json-file", str(stuck), "-b", live], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert f"Successfully cancelled partition reassignment for: {topic}-0" in out.stdout, out.stdout
    admin2 = AdminClient({"bootstrap.servers": live})
    wait_for("the cancelled reassignment's replicas",
             lambda: admin2.list_topics(topic, timeout=10).topics[topic].partitions[0].replicas == [2, 3])
    cluster.restart(1)
