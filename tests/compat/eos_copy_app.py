"""A consume-transform-produce application for the exactly-once fault test (run as its own
process so the test can kill it): copies topic SRC to topic DST with confluent-kafka, one
transaction per batch, the consumed offsets committed inside the transaction. On any error it
closes everything and starts over from the group's committed offsets. Prints `copied N` after
every committed transaction (N counts this process's records).

Usage: eos_copy_app.py BOOTSTRAP SRC DST GROUP TRANSACTIONAL_ID
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

# Small transactions with a pause between them keep the copy running while faults happen.
BATCH = 25
PAUSE_S = 0.02


def copy(bootstrap: str, src: str, dst: str, group: str, txn_id: str) -> None:
    copied = 0
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed", "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500, "socket.timeout.ms": 5000,
    })
    producer = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": txn_id,
        "transaction.timeout.ms": 10000, "socket.timeout.ms": 5000, "linger.ms": 5,
    })
    try:
        producer.init_transactions(20)
        consumer.subscribe([src])
        while True:
            msgs = consumer.consume(BATCH, 0.5)
            for m in msgs:
                if m.error() and m.error().code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(m.error())
            msgs = [m for m in msgs if not m.error()]
            if not msgs:
                continue
            producer.begin_transaction()
            next_offsets: dict[int, int] = {}
            for m in msgs:
                producer.produce(dst, key=m.key(), value=m.value(), partition=m.partition())
                next_offsets[m.partition()] = m.offset() + 1
            offsets = [TopicPartition(src, p, o) for p, o in next_offsets.items()]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 20)
            producer.commit_transaction(20)
            copied += len(msgs)
            print(f"copied {copied}", flush=True)
            time.sleep(PAUSE_S)
    finally:
        try:
            consumer.close()
        except Exception:  # a dead broker makes close fail; we start over anyway
            pass


def main() -> None:
    bootstrap, src, dst, group, txn_id = sys.argv[1:6]
    while True:
        try:
            copy(bootstrap, src, dst, group, txn_id)
        except KafkaException as e:
            print(f"error {e.args[0]}", flush=True)
        time.sleep(0.2)


if __name__ == "__main__":
    main()
