"""Transactions and exactly-once with real clients against a real `moldau server`.

- A read_committed consumer of every client (librdkafka via confluent-kafka and kcat,
  kafka-python, aiokafka) never sees an aborted record, sees committed ones in order, and is
  held at the last stable offset while a transaction is open; read_uncommitted sees all.
- confluent-kafka's transactional producer and a consume-transform-produce loop with
  send_offsets_to_transaction (including an aborted round that is reprocessed).
- Zombie fencing: two producers sharing one transactional.id.
- An expired transaction is aborted by the coordinator (epoch bump: the producer is fenced).
- aiokafka and kafka-python transactional producers (begin/commit/abort, offsets in the
  transaction).
- kafka-python's transaction admin (list with every filter including the v2 pattern,
  describe, describe producers, abort of a hanging transaction).
- Transaction state survives kill -9 of the broker.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

import clients

DEADLINE_S = 30.0


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def txn_producer(bootstrap: str, txn_id: str, **conf) -> Producer:
    base = {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5,
            "socket.timeout.ms": 10000, "transaction.timeout.ms": 60000}
    base.update(conf)
    p = Producer(base)
    p.init_transactions(DEADLINE_S)
    return p


def write_mixed(bootstrap: str, topic: str) -> tuple[list[bytes], list[bytes]]:
    """Plain, committed, aborted and committed records on partition 0; returns (committed in
    order, aborted)."""
    committed, aborted = [], []
    plain = [b"plain-%d" % i for i in range(3)]
    clients.confluent_produce(bootstrap, topic, [{"value": v} for v in plain])
    committed += plain
    p = txn_producer(bootstrap, uid("mixed"))
    for round_, commit in enumerate([True, False, True, False, True]):
        p.begin_transaction()
        vals = [b"txn%d-%s-%d" % (round_, b"c" if commit else b"a", i) for i in range(4)]
        for v in vals:
            p.produce(topic, value=v, partition=0)
        if commit:
            p.commit_transaction(DEADLINE_S)
            committed += vals
        else:
            p.flush(DEADLINE_S)
            p.abort_transaction(DEADLINE_S)
            aborted += vals
    return committed, aborted


# ---------------------------------------------------------------- read_committed, every client

def read_confluent(bootstrap, topic, n, isolation="read_committed", wait_s=DEADLINE_S):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uid("unused"),
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + wait_s
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            out.append(m.value())
    finally:
        c.close()
    return out


def read_kafka_python(bootstrap, topic, n, isolation="read_committed", wait_s=DEADLINE_S):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      isolation_level=isolation, auto_offset_reset="earliest",
                      request_timeout_ms=30000)
    try:
        tp = KTP(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        out = []
        deadline = time.monotonic() + wait_s
        while len(out) < n and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                out += [r.value for r in recs]
        return out
    finally:
        c.close()


def read_aiokafka(bootstrap, topic, n, isolation="read_committed", wait_s=DEADLINE_S):
    async def go():
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition as ATP
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             isolation_level=isolation, auto_offset_reset="earliest")
        await c.start()
        try:
            tp = ATP(topic, 0)
            c.assign([tp])
            c.seek(tp, 0)
            out = []
            deadline = time.monotonic() + wait_s
            while len(out) < n and time.monotonic() < deadline:
                batch = await c.getmany(tp, timeout_ms=200)
                for recs in batch.values():
                    out += [r.value for r in recs]
            return out
        finally:
            await c.stop()
    return clients.run_async(go(), timeout=wait_s + 30)


def read_kcat(bootstrap, topic, n, isolation="read_committed", wait_s=DEADLINE_S):
    # kcat -e stops at the end of the partition as read_committed sees it (the LSO).
    out = clients.kcat(["-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning",
                        "-e", "-c", str(n), "-X", f"isolation.level={isolation}",
                        "-f", "%s\\n"], timeout=wait_s)
    return [line for line in out.stdout.split(b"\n") if line]


READERS = {
    "confluent": read_confluent,
    "kafka-python": read_kafka_python,
    "aiokafka": read_aiokafka,
    "kcat": read_kcat,
}


@pytest.fixture(scope="module")
def mixed(broker):
    topic = uid("mixed")
    committed, aborted = write_mixed(broker.bootstrap, topic)
    return topic, committed, aborted


@pytest.mark.parametrize("reader", list(READERS))
def test_read_committed_never_sees_aborted_records(broker, mixed, reader):
    topic, committed, aborted = mixed
    got = READERS[reader](broker.bootstrap, topic, len(committed))
    assert got == committed
    assert not set(got) & set(aborted)


@pytest.mark.parametrize("reader", ["confluent", "kafka-python", "aiokafka"])
def test_read_uncommitted_sees_everything(broker, mixed, reader):
    topic, committed, aborted = mixed
    got = READERS[reader](broker.bootstrap, topic, len(committed) + len(aborted),
                          isolation="read_uncommitted")
    assert sorted(got) == sorted(committed + aborted)


@pytest.mark.parametrize("reader", list(READERS))
def test_read_committed_is_held_at_the_open_transaction(broker, topic, reader):
    before = [b"before-%d" % i for i in range(3)]
    clients.confluent_produce(broker.bootstrap, topic, [{"value": v} for v in before])
    p = txn_producer(broker.bootstrap, uid("held"))
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=b"open-%d" % i, partition=0)
    p.flush(DEADLINE_S)
    # A plain record written after the open transaction is held back too.
    clients.confluent_produce(broker.bootstrap, topic, [{"value": b"after"}])
    held = READERS[reader](broker.bootstrap, topic, 10, wait_s=3.0)
    assert held == before, "read_committed must stop at the first open transaction"
    p.commit_transaction(DEADLINE_S)
    got = READERS[reader](broker.bootstrap, topic, 7)
    assert got == before + [b"open-0", b"open-1", b"open-2", b"after"]


# ---------------------------------------------------------------- confluent-kafka: EOS loop

def test_confluent_consume_transform_produce_with_offsets(broker):
    src, dst, group = uid("ctp-in"), uid("ctp-out"), uid("ctp")
    n = 60
    clients.confluent_produce(broker.bootstrap, src, [{"value": b"%d" % i} for i in range(n)])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([src])
    p = txn_producer(broker.bootstrap, uid("ctp-tx"))
    done, aborted_once = 0, False
    deadline = time.monotonic() + DEADLINE_S
    try:
        while done < n and time.monotonic() < deadline:
            msgs = [m for m in consumer.consume(10, 0.5) if not m.error()]
            if not msgs:
                continue
            p.begin_transaction()
            for m in msgs:
                p.produce(dst, value=m.value() + b"!", partition=0)
            p.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                          consumer.consumer_group_metadata(), DEADLINE_S)
            if not aborted_once and done > 0:
                # Abort one round: its output vanishes and its input is read again.
                p.abort_transaction(DEADLINE_S)
                aborted_once = True
                for tp in consumer.committed(consumer.assignment(), DEADLINE_S):
                    consumer.seek(tp)
                continue
            p.commit_transaction(DEADLINE_S)
            done += len(msgs)
        assert done == n
        assert aborted_once
        committed = consumer.committed([TopicPartition(src, 0)], DEADLINE_S)
        assert committed[0].offset == n
    finally:
        consumer.close()
    out = read_confluent(broker.bootstrap, dst, n)
    assert out == [b"%d!" % i for i in range(n)], "every input exactly once, in order"
    # A new member of the group starts after the committed (transactional) offset.
    again = clients.confluent_consumer(broker.bootstrap, **{"group.id": group})
    again.subscribe([src])
    try:
        assert again.consume(5, 3.0) == []
    finally:
        again.close()


def test_zombie_producer_is_fenced(broker, topic):
    txn_id = uid("zombie")
    p1 = txn_producer(broker.bootstrap, txn_id)
    p1.begin_transaction()
    p1.produce(topic, value=b"zombie", partition=0)
    p1.flush(DEADLINE_S)
    p2 = txn_producer(broker.bootstrap, txn_id)  # aborts p1's transaction, bumps the epoch
    p2.begin_transaction()
    p2.produce(topic, value=b"live", partition=0)
    p2.commit_transaction(DEADLINE_S)
    with pytest.raises(KafkaException) as e:
        p1.commit_transaction(DEADLINE_S)
    err = e.value.args[0]
    assert err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                         KafkaError.INVALID_PRODUCER_EPOCH), err
    assert read_confluent(broker.bootstrap, topic, 1) == [b"live"]
    assert read_confluent(broker.bootstrap, topic, 2, wait_s=2.0) == [b"live"]


def test_expired_transaction_is_aborted_by_the_coordinator(brokers, topic):
    server = brokers.start(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    p = txn_producer(server.bootstrap, uid("expire"),
                     **{"transaction.timeout.ms": 1500, "socket.timeout.ms": 1500})
    p.begin_transaction()
    p.produce(topic, value=b"expired", partition=0)
    p.flush(DEADLINE_S)
    clients.confluent_produce(server.bootstrap, topic, [{"value": b"later"}])
    # Once the coordinator aborts the transaction, the LSO moves past it.
    assert read_confluent(server.bootstrap, topic, 1) == [b"later"]
    with pytest.raises(KafkaException):
        p.commit_transaction(10)
    # The coordinator bumped the epoch when it aborted: the old producer is fenced.
    assert read_confluent(server.bootstrap, topic, 2, wait_s=2.0) == [b"later"]


# ---------------------------------------------------------------- aiokafka, kafka-python

def test_aiokafka_transactions(broker, topic):
    async def go():
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka.structs import TopicPartition as ATP
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=uid("aio"))
        await p.start()
        try:
            async with p.transaction():
                for i in range(3):
                    await p.send(topic, b"aio-c%d" % i, partition=0)
            with pytest.raises(RuntimeError):
                async with p.transaction():
                    await p.send(topic, b"aio-a", partition=0)
                    raise RuntimeError("abort this one")
            # Offsets in a transaction: commit group offsets atomically with output.
            group = uid("aio-g")
            async with p.transaction():
                await p.send(topic, b"aio-c3", partition=0)
                await p.send_offsets_to_transaction({ATP(topic, 0): 4}, group)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                             enable_auto_commit=False)
        await c.start()
        try:
            committed = await c.committed(ATP(topic, 0))
        finally:
            await c.stop()
        return committed
    assert clients.run_async(go(), timeout=90) == 4
    for reader in ("aiokafka", "confluent"):
        got = READERS[reader](broker.bootstrap, topic, 4)
        assert got == [b"aio-c0", b"aio-c1", b"aio-c2", b"aio-c3"], reader


def test_kafka_python_transactions(broker, topic):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=uid("kp"),
                      request_timeout_ms=30000)
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(3):
            p.send(topic, b"kp-c%d" % i, partition=0)
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, b"kp-a", partition=0)
        p.flush()
        p.abort_transaction()
        group = uid("kp-g")
        p.begin_transaction()
        p.send(topic, b"kp-c3", partition=0)
        p.send_offsets_to_transaction({KTP(topic, 0): OffsetAndMetadata(4, "", -1)}, group)
        p.commit_transaction()
    finally:
        p.close()
    for reader in ("kafka-python", "confluent"):
        got = READERS[reader](broker.bootstrap, topic, 4)
        assert got == [b"kp-c0", b"kp-c1", b"kp-c2", b"kp-c3"], reader
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        assert c.committed(KTP(topic, 0)) == 4
    finally:
        c.close()


# ---------------------------------------------------------------- kafka-python: transaction admin

def test_kafka_python_transaction_admin(broker, topic):
    """kafka-python's KIP-664 admin (ListTransactions v0-v2, DescribeTransactions,
    DescribeProducers, WriteTxnMarkers abort) on an open and a committed transaction; the
    Java side of the same APIs is kafka-transactions.sh (tests/reference/test_tools.py)."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.admin._transactions import AbortTransactionSpec
    from kafka.errors import BrokerResponseError

    prefix = uid("adm")
    done_id, open_id = f"{prefix}-done", f"{prefix}-open"
    done = txn_producer(broker.bootstrap, done_id)
    done.begin_transaction()
    done.produce(topic, value=b"done", partition=0)
    done.commit_transaction(DEADLINE_S)
    hung = txn_producer(broker.bootstrap, open_id)
    hung.begin_transaction()
    hung.produce(topic, value=b"open", partition=0)
    hung.flush(DEADLINE_S)

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        def listed(**filters):
            by_broker = admin.list_transactions(**filters)
            return {t.transactional_id: t.state.value for ts in by_broker.values() for t in ts}

        everything = listed()
        assert everything[done_id] == "CompleteCommit"
        assert everything[open_id] == "Ongoing"
        assert listed(state_filters=["Ongoing"]).get(done_id) is None
        # v2 (KIP-1152): the pattern must match the whole id.
        assert listed(transactional_id_pattern=f"{prefix}-.*") == {
            done_id: "CompleteCommit", open_id: "Ongoing"}
        assert listed(transactional_id_pattern=f"{prefix}-op") == {}
        with pytest.raises(BrokerResponseError) as bad:
            admin.list_transactions(transactional_id_pattern="(")
        assert bad.value.errno == 128, "INVALID_REGULAR_EXPRESSION"

        desc = admin.describe_transactions([open_id])[open_id]
        assert desc.state.value == "Ongoing"
        assert desc.topic_partitions == {KTP(topic, 0)}
        assert desc.transaction_start_time_ms > 0

        tp = KTP(topic, 0)
        producers = admin.describe_producers([tp])[tp].active_producers
        mine = [ps for ps in producers if ps.producer_id == desc.producer_id]
        assert len(mine) == 1 and mine[0].current_transaction_start_offset >= 0
        assert read_kafka_python(broker.bootstrap, topic, 5, wait_s=2.0) == [b"done"]

        # Abort the hanging transaction on the partition (as kafka-transactions.sh abort):
        # the read_committed position moves past it; its producer is left open (unfenced).
        admin.abort_transaction(AbortTransactionSpec(tp, mine[0].producer_id,
                                                     mine[0].producer_epoch,
                                                     mine[0].coordinator_epoch))
        clients.confluent_produce(broker.bootstrap, topic, [{"value": b"after"}])
        assert read_kafka_python(broker.bootstrap, topic, 2) == [b"done", b"after"]
        producers = admin.describe_producers([tp])[tp].active_producers
        assert all(ps.current_transaction_start_offset == -1 for ps in producers)
    finally:
        admin.close()
        hung.abort_transaction(DEADLINE_S)


# ---------------------------------------------------------------- restart

def test_transactions_survive_kill_9(brokers, topic):
    server = brokers.start()
    txn_id = uid("crash")
    p = txn_producer(server.bootstrap, txn_id)
    p.begin_transaction()
    p.produce(topic, value=b"committed", partition=0)
    p.commit_transaction(DEADLINE_S)
    p.begin_transaction()
    p.produce(topic, value=b"in-flight", partition=0)
    p.flush(DEADLINE_S)
    server.crash()
    server.start()
    # The open transaction is still open after the restart: nothing after it is visible.
    clients.confluent_produce(server.bootstrap, topic, [{"value": b"after"}])
    assert read_confluent(server.bootstrap, topic, 3, wait_s=3.0) == [b"committed"]
    # A new producer with the same id aborts it; everything committed becomes visible.
    p2 = txn_producer(server.bootstrap, txn_id)
    p2.begin_transaction()
    p2.produce(topic, value=b"new", partition=0)
    p2.commit_transaction(DEADLINE_S)
    assert read_confluent(server.bootstrap, topic, 3) == [b"committed", b"after", b"new"]
    out = read_confluent(server.bootstrap, topic, 4, isolation="read_uncommitted")
    assert sorted(out) == sorted([b"committed", b"in-flight", b"after", b"new"])
