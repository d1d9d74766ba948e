"""The checker can fail: a lost, moved, duplicated, reordered or unknown record is reported.
(Pure Python; no broker.)"""

from __future__ import annotations

import pytest

from checker import Ack, CheckFailed, History, check


def history() -> History:
    h = History()
    h.partitions = {0: 0, 1: 1}
    for v in ["w0-0", "w0-1", "w0-2", "w1-0", "w1-1"]:
        h.sent.add(v)
    h.acked = {"w0-0": Ack(0, 0), "w0-1": Ack(0, 1), "w1-0": Ack(1, 0)}
    h.failed = {"w0-2": "timed out", "w1-1": "timed out"}
    return h


GOOD = {0: [(0, b"w0-0"), (1, b"w0-1"), (2, b"w0-2")], 1: [(0, b"w1-0")]}


def test_a_correct_history_passes():
    stats = check(history(), GOOD, {0: 0, 1: 0})
    assert stats == {"acked": 3, "indeterminate": 2, "read": 4, "indeterminate_present": 1}


@pytest.mark.parametrize("logs, what", [
    ({0: [(0, b"w0-0"), (2, b"w0-2")], 1: [(0, b"w1-0")]}, "acknowledged 'w0-1'"),          # lost
    ({0: [(0, b"w0-0"), (1, b"w0-2"), (2, b"w0-1")], 1: [(0, b"w1-0")]}, "out of order"),  # reordered
    ({0: [(0, b"w0-0"), (1, b"w0-1"), (2, b"w0-1")], 1: [(0, b"w1-0")]}, "duplicate"),     # duplicated
    ({0: [(0, b"w0-0"), (1, b"w0-1")], 1: [(0, b"w1-0"), (1, b"zz")]}, "unknown record"),  # garbage
    ({0: [(0, b"w0-0"), (1, b"w0-1")], 1: [(0, b"w0-2"), (1, b"w1-0")]}, "writer sends to"),
    ({0: [(1, b"w0-0"), (2, b"w0-1")], 1: [(0, b"w1-0")]}, "acknowledged 'w0-0'"),          # moved
])
def test_violations_are_reported(logs, what):
    with pytest.raises(CheckFailed, match=what):
        check(history(), logs, {0: 0, 1: 0})


def test_a_moved_log_start_is_reported():
    with pytest.raises(CheckFailed, match="log start"):
        check(history(), GOOD, {0: 1, 1: 0})


def test_an_ack_without_offset_must_be_in_its_partition():
    """librdkafka's implicit acks (offset unknown): present in the partition passes, absent
    fails."""
    h = history()
    h.acked["w0-2"] = Ack(0, None)
    del h.failed["w0-2"]
    assert check(h, GOOD, {0: 0, 1: 0})["acked"] == 4
    with pytest.raises(CheckFailed, match=r"'w0-2' \(offset unknown\)"):
        check(h, {0: [(0, b"w0-0"), (1, b"w0-1")], 1: [(0, b"w1-0")]}, {0: 0, 1: 0})


def test_retention_lets_records_below_the_log_start_go():
    # Offsets 0 and 1 of partition 0 deleted by retention: their acks are not losses...
    logs = {0: [(2, b"w0-2")], 1: [(0, b"w1-0")]}
    h = history()
    h.acked["w0-2"] = Ack(0, 2)
    stats = check(h, logs, {0: 2, 1: 0}, retention=True)
    assert stats["deleted_by_retention"] == 2
    # ...but only with retention allowed, and one at or above the log start still counts.
    with pytest.raises(CheckFailed, match="log start is 2"):
        check(h, logs, {0: 2, 1: 0})
    with pytest.raises(CheckFailed, match="acknowledged 'w0-2'"):
        check(h, {0: [], 1: [(0, b"w1-0")]}, {0: 2, 1: 0}, retention=True)
