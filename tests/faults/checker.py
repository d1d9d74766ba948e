"""The checker: drive idempotent acks=all producers through faults, remember every record the
cluster acknowledged, and prove at the end that each of them is readable exactly once, at its
acknowledged offset, in order per partition.

A record's value names its writer and its sequence number (`w<writer>-<seq>`); each writer
sends to one partition through its own idempotent confluent-kafka producer (librdkafka), so the
records of a writer in its partition must appear in sequence order. A delivery report without
error is an acknowledgement: (partition, offset) is then a promise. A delivery that failed
(timeout, error) is *indeterminate*: the record may or may not be in the log, but at most once.

`verify` reads every partition from its log start to its high watermark and checks:
1. every acknowledged record is at its acknowledged offset (nothing acknowledged is lost or
   moved); one acknowledged without an offset (librdkafka's implicit acks) is in its partition;
2. no value appears twice (no duplicates: idempotence held across retries and failovers);
3. per writer, sequence numbers increase in log order (order per partition);
4. every record read was sent by the workload (no garbage);
5. the log start is 0 (nothing was deleted under us) — unless the scenario lets retention
   delete (`retention=True`): then an acknowledged record below its partition's log start
   counts as deleted, and every one at or above it must still be in place.

Two workloads feed the same history: `Workload` (confluent-kafka, librdkafka) and
`NativeWorkload` (Moldau's own client: `moldau produce --json`, one process per writer).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


class CheckFailed(AssertionError):
    pass


@dataclass
class Ack:
    partition: int
    offset: int


@dataclass
class History:
    """What the producers were told: acknowledgements and failures, by value."""

    acked: dict[str, Ack] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    sent: set[str] = field(default_factory=set)
    # writer -> partition
    partitions: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    fatal: list[str] = field(default_factory=list)
    # (monotonic time, acked count) samples, for liveness checks.
    ack_times: list[float] = field(default_factory=list)
    # partition -> monotonic times of its acknowledgements (a stall of one partition).
    partition_ack_times: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))


def parse_value(v: bytes) -> tuple[int, int] | None:
    try:
        w, s = v.decode().lstrip("w").split("-")
        return int(w), int(s)
    except (ValueError, UnicodeDecodeError):
        return None


def check(history: History, logs: dict[int, list[tuple[int, bytes]]], log_starts: dict[int, int],
          retention: bool = False) -> dict:
    """The checks of the module docs on records read back (`logs`: partition -> [(offset,
    value)]). Raises CheckFailed listing every violation (the first 20); returns counts."""
    problems: list[str] = []
    by_offset: dict[int, dict[int, str]] = {p: {} for p in logs}
    seen: dict[str, tuple[int, int]] = {}
    last_seq: dict[tuple[int, int], int] = {}
    first_seq: dict[tuple[int, int], int] = {}
    for p, records in logs.items():
        if log_starts.get(p, 0) != 0 and not retention:
            problems.append(f"partition {p}: log start is {log_starts[p]}, expected 0")
        prev = -1
        for offset, raw in records:
            value = raw.decode("utf-8", "replace")
            if offset <= prev:
                problems.append(f"partition {p}: offset {offset} after {prev}")
            prev = offset
            by_offset[p][offset] = value
            parsed = parse_value(raw)
            if parsed is None or value not in history.sent:
                problems.append(f"partition {p} offset {offset}: unknown record {value!r}")
                continue
            if value in seen:
                problems.append(f"duplicate {value!r}: at {seen[value]} and ({p}, {offset})")
            seen[value] = (p, offset)
            writer, seq = parsed
            if history.partitions.get(writer) != p:
                problems.append(f"{value!r} in partition {p}, its writer sends to {history.partitions.get(writer)}")
            key = (p, writer)
            if key in last_seq and seq <= last_seq[key]:
                problems.append(f"partition {p}: {value!r} at offset {offset} after seq {last_seq[key]} (out of order)")
            last_seq[key] = max(seq, last_seq.get(key, -1))
            first_seq.setdefault(key, seq)
    lost = 0
    deleted = 0
    for value, ack in history.acked.items():
        if retention and ack.offset is not None and ack.offset < log_starts.get(ack.partition, 0):
            deleted += 1
            continue
        if ack.offset is None and retention and value not in seen:
            # Offset unknown: it was deleted if it came before the first record of its writer
            # still in the log (a writer's records are in sequence order).
            writer, seq = parse_value(value.encode()) or (None, -1)
            first = min((s for (p, w), s in first_seq.items() if w == writer), default=None)
            if first is None or seq < first:
                deleted += 1
                continue
        if ack.offset is None:
            # librdkafka acknowledges an idempotent producer's messages whose request timed out
            # once a later request of the same producer succeeds past their sequence numbers
            # ("implicitly acked": persisted, offset unknown). The promise is then that the
            # record is in its partition (once: checked above), at some offset.
            if seen.get(value, (None, None))[0] != ack.partition:
                lost += 1
                problems.append(f"acknowledged {value!r} (offset unknown) in partition {ack.partition} but it is "
                                f"not there{'' if value not in seen else f'; it is at {seen[value]}'}")
            continue
        got = by_offset.get(ack.partition, {}).get(ack.offset)
        if got != value:
            lost += 1
            problems.append(f"acknowledged {value!r} at ({ack.partition}, {ack.offset}) but read {got!r} there"
                            f"{'' if value not in seen else f'; it is at {seen[value]}'}")
    if problems:
        shown = "\n".join(problems[:20])
        raise CheckFailed(f"{len(problems)} violation(s), {lost} acknowledged record(s) lost or moved:\n{shown}")
    stats = {
        "acked": len(history.acked),
        "indeterminate": len(history.failed),
        "read": sum(len(r) for r in logs.values()),
        "indeterminate_present": sum(1 for v in history.failed if v in seen),
    }
    if retention:
        stats["deleted_by_retention"] = deleted
    return stats


class Workload:
    """`writers` producer threads, each with its own idempotent acks=all producer writing
    `w<i>-<seq>` to partition `i % partitions` as fast as `rate_per_writer` allows (bounded
    in flight), until `stop()`."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, writers: int = 3,
                 rate_per_writer: float = 200.0, producer_config: dict | None = None):
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.history = History()
        self.rate = rate_per_writer
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.producer_config = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            # Long enough to ride out every fault of a scenario: a record fails only if the
            # cluster could not take it for this long.
            "message.timeout.ms": 60000,
            "request.timeout.ms": 5000,
            "socket.connection.setup.timeout.ms": 3000,
            "reconnect.backoff.max.ms": 500,
            "retry.backoff.max.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
            **(producer_config or {}),
        }
        for w in range(writers):
            self.history.partitions[w] = w % partitions

    def start(self) -> "Workload":
        for w in range(len(self.history.partitions)):
            t = threading.Thread(target=self._run, args=(w,), name=f"writer-{w}", daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def _run(self, writer: int) -> None:
        h = self.history
        partition = h.partitions[writer]
        fatal = []

        def on_error(err):
            if err.fatal():
                fatal.append(str(err))

        p = Producer({**self.producer_config, "client.id": f"fault-writer-{writer}", "error_cb": on_error})

        def report(err, msg):
            value = msg.value().decode()
            with h.lock:
                if err is None:
                    h.acked[value] = Ack(msg.partition(), msg.offset())
                    now = time.monotonic()
                    h.ack_times.append(now)
                    h.partition_ack_times[msg.partition()].append(now)
                else:
                    h.failed[value] = str(err)

        seq = 0
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self.stopping.is_set() and not fatal:
            value = f"w{writer}-{seq}"
            try:
                p.produce(self.topic, value=value.encode(), partition=partition, on_delivery=report)
            except BufferError:
                p.poll(0.1)
                continue
            with h.lock:
                h.sent.add(value)
            seq += 1
            next_at += interval
            delay = next_at - time.monotonic()
            p.poll(max(0.0, delay))
            if delay < -1.0:
                next_at = time.monotonic()
        # Deliver (or fail) everything still queued.
        remaining = p.flush(self.producer_config["message.timeout.ms"] / 1000 + 30)
        if remaining:
            h.fatal.append(f"writer {writer}: {remaining} record(s) neither delivered nor failed")
        if fatal:
            h.fatal.append(f"writer {writer}: fatal producer error: {fatal[0]}")

    def acked_count(self) -> int:
        with self.history.lock:
            return len(self.history.acked)

    def wait_acks(self, more: int, timeout: float, why: str = "") -> None:
        """Waits until `more` records beyond the current count are acknowledged (liveness)."""
        target = self.acked_count() + more
        deadline = time.monotonic() + timeout
        while self.acked_count() < target:
            if time.monotonic() > deadline:
                raise CheckFailed(f"no progress{(' ' + why) if why else ''}: {self.acked_count()} of {target} acks after {timeout}s")
            if self.history.fatal:
                raise CheckFailed("; ".join(self.history.fatal))
            time.sleep(0.05)

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=120)
        if any(t.is_alive() for t in self.threads):
            raise CheckFailed("a writer did not finish")
        if self.history.fatal:
            raise CheckFailed("; ".join(self.history.fatal))

    def max_ack_gap(self, partition: int | None = None) -> float:
        """The longest time without any acknowledgement while the workload ran (seconds), in
        `partition` or (None) in the whole topic."""
        with self.history.lock:
            times = sorted(self.history.ack_times if partition is None
                           else self.history.partition_ack_times.get(partition, []))
        return max((b - a for a, b in zip(times, times[1:])), default=0.0)


class NativeWorkload(Workload):
    """The same workload through Moldau's own client: each writer is a `moldau produce TOPIC
    -p P --json` process (idempotent acks=all, the CLI's defaults) fed `w<i>-<seq>` lines on
    stdin at the writer's rate; the CLI prints one JSON object per acknowledged record as it
    is acknowledged, with its stdin line number, which names the value. A record the CLI does
    not report (it failed, or the process ended) is indeterminate."""

    def __init__(self, binary, bootstrap: str, topic: str, partitions: int, writers: int = 3,
                 rate_per_writer: float = 200.0):
        super().__init__(bootstrap, topic, partitions, writers, rate_per_writer)
        self.binary = str(binary)

    def _run(self, writer: int) -> None:
        h = self.history
        partition = h.partitions[writer]
        proc = subprocess.Popen(
            [self.binary, "produce", self.topic, "-p", str(partition), "--json", "-b", self.bootstrap,
             "--timeout-ms", "5000", "--linger-ms", "5"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        errors: list[bytes] = []
        bad_output: list[bytes] = []

        def read_acks():
            for raw in proc.stdout:
                try:
                    md = json.loads(raw)
                    value = f"w{writer}-{md['line'] - 1}"
                    ack = Ack(md["partition"], md["offset"])
                except (ValueError, KeyError, TypeError):
                    bad_output.append(raw)
                    continue
                with h.lock:
                    h.acked[value] = ack
                    now = time.monotonic()
                    h.ack_times.append(now)
                    h.partition_ack_times[ack.partition].append(now)

        def read_stderr():
            errors.extend(proc.stderr)

        readers = [threading.Thread(target=f, daemon=True) for f in (read_acks, read_stderr)]
        for t in readers:
            t.start()
        seq = 0
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        closed_early = False
        while not self.stopping.is_set():
            value = f"w{writer}-{seq}"
            with h.lock:
                h.sent.add(value)
            try:
                proc.stdin.write(value.encode() + b"\n")
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                closed_early = True
                break
            seq += 1
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self.stopping.wait(delay)
            elif delay < -1.0:
                next_at = time.monotonic()
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            # Its delivery timeout (120 s) bounds how long the last records may take.
            code = proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
            h.fatal.append(f"writer {writer}: moldau produce did not finish after stdin closed")
        for t in readers:
            t.join(timeout=10)
        text = b"".join(errors).decode("utf-8", "replace")[-2000:]
        if closed_early:
            h.fatal.append(f"writer {writer}: moldau produce exited while producing (exit {code}): {text}")
        # Exit 1 with "N of M records failed" only says some records are indeterminate; any
        # other failure (or unparsable output) is the client's or the broker's fault.
        elif code != 0 and "records failed" not in text:
            h.fatal.append(f"writer {writer}: moldau produce exited {code}: {text}")
        if bad_output:
            h.fatal.append(f"writer {writer}: unexpected output of moldau produce: {bad_output[:3]}")


def wait_for(what: str, cond, timeout: float = 60.0, every: float = 0.2):
    """Polls `cond` until it returns something truthy and returns that; an exception counts as
    "not yet" (metadata calls fail while nodes come and go, or while the quorum elects)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - retriable while nodes come and go
            last = e
        time.sleep(every)
    raise CheckFailed(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int,
                 config: dict[str, str] | None = None, timeout: float = 60.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, replication_factor, config=config or {})],
                                  operation_timeout=timeout, request_timeout=timeout)
    futures[topic].result(timeout=timeout)


def read_back(bootstrap: str, topic: str, partitions: int, timeout: float = 120.0
              ) -> tuple[dict[int, list[tuple[int, bytes]]], dict[int, int]]:
    """Every record of every partition from its log start to its high watermark."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "fault-checker",
        "enable.auto.commit": False,
        "isolation.level": "read_uncommitted",
        "fetch.wait.max.ms": 100,
    })
    logs: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    starts: dict[int, int] = {}
    try:
        ends: dict[int, int] = {}
        for p in range(partitions):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            starts[p], ends[p] = lo, hi
            logs[p] = []
        c.assign([TopicPartition(topic, p, starts[p]) for p in range(partitions) if ends[p] > starts[p]])
        pending = {p for p in range(partitions) if ends[p] > starts[p]}
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise CheckFailed(f"read-back incomplete: partitions {sorted(pending)} "
                                  f"at {[(p, logs[p][-1][0] if logs[p] else None, ends[p]) for p in pending]}")
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(msg.error())
            p = msg.partition()
            logs[p].append((msg.offset(), msg.value()))
            if msg.offset() + 1 >= ends[p]:
                pending.discard(p)
    finally:
        c.close()
    return dict(logs), starts
