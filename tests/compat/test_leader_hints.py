"""KIP-951 on the wire: a NOT_LEADER_OR_FOLLOWER answer to Produce (v10+) and Fetch (v16+)
names the partition's current leader (id and leader epoch) and that leader's endpoint
(`node_endpoints`), so clients reach a new leader without a Metadata round trip. Three
`moldau server` processes; requests go to a broker that does not lead the partition, before and
after its leader moved (SIGTERM: controlled shutdown). Encoded and decoded by kafka-python's
schema-generated protocol classes (Kafka's own JSON message definitions), not by Moldau's code.
"""

from __future__ import annotations

import socket
import sys
import time
import uuid
from pathlib import Path

import kwire

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "faults"))


def _call(address: str, request, version: int, response_class):
    host, port = address.rsplit(":", 1)
    request.with_header(correlation_id=11, client_id="leader-hints")
    data = request.encode(version=version, header=True, framed=True)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(data)
        frame = kwire.recv_frame(s)
    return response_class.decode(frame, version=version, header=True)


def _wait(what, cond, timeout=60.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - nodes come and go
            last = e
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def test_not_leader_answers_name_the_current_leader(moldau_bin, tmp_path):
    from cluster import Cluster
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.protocol.consumer import FetchRequest, FetchResponse
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    cluster = Cluster(moldau_bin, tmp_path / "cluster", 3, {
        "broker.session.timeout.ms": 3000,
        "broker.heartbeat.interval.ms": 500,
        "auto.leader.rebalance.enable": "false",
    }).start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        topic = f"hints-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2]])])[topic].result(60)

        def metadata(via: int):
            req = MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                      allow_auto_topic_creation=False,
                                      include_topic_authorized_operations=False)
            return _call(cluster.node(via).address, req, 12, MetadataResponse)

        def leader_of(md):
            p = md.topics[0].partitions[0]
            return p.leader_id, p.leader_epoch

        md = _wait("a leader", lambda: (m := metadata(3)) and leader_of(m)[0] == 1 and m)
        topic_id = md.topics[0].topic_id
        brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
        batch = kwire.record_batch([kwire.Rec(key=None, value=b"v")], int(time.time() * 1000))

        def produce(via: int, version: int, acks: int = -1):
            P = ProduceRequest
            td = P.TopicProduceData(name=topic, partition_data=[P.TopicProduceData.PartitionProduceData(
                index=0, records=batch)])
            req = P[version](transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[td])
            resp = _call(cluster.node(via).address, req, version, ProduceResponse)
            return resp, resp.responses[0].partition_responses[0]

        def fetch(via: int, version: int):
            F = FetchRequest
            part = F.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                               last_fetched_epoch=-1, log_start_offset=-1,
                                               partition_max_bytes=1 << 20)
            req = F[version](max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                             session_id=0, session_epoch=-1,
                             topics=[F.FetchTopic(topic_id=topic_id, partitions=[part])],
                             forgotten_topics_data=[], rack_id="")
            resp = _call(cluster.node(via).address, req, version, FetchResponse)
            return resp, resp.responses[0].partitions[0]

        def check(via: int, leader: int, epoch: int):
            for v in (10, 11, 12):
                resp, p = produce(via, v)
                assert p.error_code == 6, (v, p)  # NOT_LEADER_OR_FOLLOWER
                assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (leader, epoch), (v, p)
                assert [(n.node_id, n.host, n.port) for n in resp.node_endpoints] == [
                    (leader, *brokers[leader])], (v, resp)
            for v in (16, 17):
                resp, p = fetch(via, v)
                assert p.error_code == 6, (v, p)
                assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (leader, epoch), (v, p)
                assert [(n.node_id, n.host, n.port) for n in resp.node_endpoints] == [
                    (leader, *brokers[leader])], (v, resp)
            # Older versions have neither field; a leader answers without them (acks=1: checked
            # here is the leader's answer, not how fast the ISR replicates on a busy machine).
            resp, p = produce(via, 9)
            assert p.error_code == 6
            resp, p = produce(leader, 12, acks=1)
            assert p.error_code == 0 and resp.node_endpoints == [], (p, resp)

        # Node 3 holds no replica, node 2 is a follower: both name leader 1 at its epoch.
        _, epoch = leader_of(md)
        check(3, 1, epoch)
        check(2, 1, epoch)

        # Leadership moves to node 2 (node 1 shuts down): the hint follows, with the new epoch.
        cluster.sigterm(1)
        md = _wait("node 2 leads", lambda: (m := metadata(3)) and leader_of(m)[0] == 2 and m)
        _, epoch2 = leader_of(md)
        assert epoch2 > epoch
        check(3, 2, epoch2)
    finally:
        problems = cluster.close()
    assert not problems, "\n".join(problems)
