"""Planted histories through the ordering check when messages carry priorities
(checkers.spark_order): a later message of a higher priority overtaking an earlier one of a
lower priority is a quorum queue's documented behaviour, so order is judged per publisher
stream and priority; a reorder within one priority is still a violation. Each check is also
worked out by the oracle (tests.checkers.oracle), which must agree field by field."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import summary
from tests.checkers.histories import Builder
from tests.checkers.test_literal import check

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]


def overtakes(path: Path, *, second_nine_first: bool = False, priorities: bool = True) -> None:
    """Writes one publisher's 1-0 (priority 1), 1-1 (9), 1-2 (none), 1-3 (9) and 1-4 (1), all
    confirmed before consumer 5 reads them highest first: 1-1, 1-3, 1-2, 1-0, 1-4 (1-3 before
    1-1 when `second_nine_first`). Without `priorities` the same history carries none."""
    given = [1, 9, None, 9, 1] if priorities else [None] * 5
    order = [3, 1, 2, 0, 4] if second_nine_first else [1, 3, 2, 0, 4]
    with Builder(path) as b:
        b.phase("main", "start")
        for seq, priority in enumerate(given):
            b.publish(1, seq, priority=priority)
        for seq in order:
            b.deliver(5, f"1-{seq}", priority=given[seq])
            b.ack(5, f"1-{seq}")
        b.phase("main", "end")
        b.drained()


def test_higher_priorities_overtaking_lower_ones_are_in_order(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    overtakes(p)
    r = check(p)
    o = r["ordering"]
    assert r["valid"] is True and o["valid"] is True
    assert o["by_priority"] is True and o["deliveries_checked"] == 5
    assert o["violation_count"] == 0 and o["flagged_violation_count"] == 0
    assert "violations 0, " in summary(r) and ", judged per priority  [True]" in summary(r)


def test_the_same_order_without_priorities_is_a_violation(tmp_path: Path) -> None:
    # The control: with no priority given, 1-3 ahead of 1-2 and 1-0 is a FIFO violation.
    p = tmp_path / "h.jsonl"
    overtakes(p, priorities=False)
    r = check(p)
    o = r["ordering"]
    assert o["by_priority"] is False and o["violation_count"] == 2
    assert "judged per priority" not in summary(r)
    assert [(e["earlier"]["id"], e["later"]["id"]) for e in o["examples"]] == [
        ("1-3", "1-2"), ("1-2", "1-0")]


def test_a_reorder_within_one_priority_is_still_a_violation(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    overtakes(p, second_nine_first=True)
    r = check(p)
    o = r["ordering"]
    assert r["valid"] is False and o["valid"] is False and o["by_priority"] is True
    assert o["violation_count"] == 1 and o["consumers_affected"] == ["5/c5"]
    e = o["examples"][0]
    assert (e["publisher"], e["earlier"]["id"], e["later"]["id"]) == (1, "1-3", "1-1")
    assert e["phase_boundary"]["phase"] == "main"


def test_a_redelivery_within_one_priority_keeps_the_flagged_rules(tmp_path: Path) -> None:
    # 1-0 and 1-1 (priority 9): consumer 5 gets 1-1, then 1-0 back flagged: a flagged reorder,
    # counted and never invalid, within the priority's stream; 1-2 (priority 1) after them.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        for seq, priority in enumerate([9, 9, 1]):
            b.publish(1, seq, priority=priority)
        b.deliver(5, "1-0", priority=9)
        b.deliver(5, "1-1", priority=9)
        b.ack(5, "1-1")
        b.deliver(5, "1-0", redelivered=True, priority=9)
        b.ack(5, "1-0")
        b.deliver(5, "1-2", priority=1)
        b.ack(5, "1-2")
        b.drained()
    o = check(p)["ordering"]
    assert o["valid"] is True and o["by_priority"] is True
    assert o["violation_count"] == 0 and o["flagged_violation_count"] == 1
    assert (o["flagged_examples"][0]["earlier"]["id"],
            o["flagged_examples"][0]["later"]["id"]) == ("1-1", "1-0")


@pytest.mark.parametrize("strict", [False, True])
def test_strict_mode_splits_by_priority_too(tmp_path: Path, strict: bool) -> None:
    # Two consumers in turn (a single active consumer's hand-over): across them, strict mode
    # reads one stream per publisher, and with priorities one per publisher and priority.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        for seq, priority in enumerate([1, 9, 1, 9]):
            b.publish(1, seq, priority=priority)
        for process, seq in ((5, 1), (5, 3), (6, 0), (6, 2)):
            b.deliver(process, f"1-{seq}", priority=[1, 9, 1, 9][seq])
            b.ack(process, f"1-{seq}")
        b.drained()
    o = check(p, strict_order=strict)["ordering"]
    assert o["valid"] is True and o["by_priority"] is True and o["strict"] is strict
