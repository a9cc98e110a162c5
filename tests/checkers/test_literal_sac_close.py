"""A single active consumer the harness ends by its channel's close alone (workloads.clients: no
basic.cancel) in the strict ordering check: the close gives back what the consumer held before
the next consumer is activated (rabbit_fifo's `{down, ...}`), so the held message comes back
flagged right after itself, which strict FIFO allows as it is; a delivery that reached the
consumer while its close was under way is recorded as its first delivery. A close excuses
nothing by itself: the next consumer fed a later message before the held one is a violation.
Literal histories through the Spark checker; the oracle (tests.checkers.oracle) must agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkers import CheckOptions, check_history
from tests.checkers import oracle
from tests.checkers.histories import Builder

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]


def check(path: Path) -> dict[str, Any]:
    """Checks a history in strict mode with the Spark checker; the oracle must agree. Returns
    the ordering section."""
    got = check_history(path, options=CheckOptions(strict_order=True))
    assert oracle.mismatches(got, oracle.judge(path, strict_order=True)) == []
    return got["ordering"]


def close(b: Builder, process: int, type_: str, holding: list[str]) -> None:
    """Appends one op of the harness's close of consumer `process`'s channel as workloads.clients
    records a single active consumer's: the invocation by the harness, or its outcome, each
    with what the consumer held (`holding`)."""
    by = {"by": "harness"} if type_ == "invoke" else {}
    b.op(type=type_, process=process, f="close", node="n2", queue="q", consumer=f"c{process}",
         phase="main", extra={**by, "holding": holding})


def story(b: Builder, *, during_close: bool, next_first: str) -> None:
    """Writes the stop of consumer 5, the single active one, and consumer 6 taking over: 5 acks
    1-0; it holds 1-1 at its close's invocation (`during_close` False) or is handed 1-1 while
    the close is under way (True); 6 then gets `next_first` and the rest in order."""
    for seq in range(4):
        b.publish(1, seq)
    b.phase("main", "start")
    b.consume(5, "1-0")
    if during_close:
        close(b, 5, "invoke", [])
        b.deliver(5, "1-1")
    else:
        b.deliver(5, "1-1")
        close(b, 5, "invoke", ["1-1"])
    close(b, 5, "ok", ["1-1"])
    rest = ["1-1", "1-2", "1-3"]
    rest.remove(next_first)
    for mid in [next_first, *rest]:
        b.consume(6, mid, redelivered=mid == "1-1")
    b.phase("main", "end")
    b.drained()


@pytest.mark.parametrize("during_close", [False, True])
def test_the_message_a_closed_consumer_gave_back_first_to_the_next_is_in_order(
        tmp_path: Path, during_close: bool) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        story(b, during_close=during_close, next_first="1-1")
    o = check(p)
    assert o["valid"] is True and o["violation_count"] == 0
    assert o["held_reorder_count"] == 0 and o["flagged_violation_count"] == 0
    assert o["deliveries_checked"] == 5


@pytest.mark.parametrize("during_close", [False, True])
def test_a_later_message_to_the_next_consumer_before_the_one_given_back_is_a_violation(
        tmp_path: Path, during_close: bool) -> None:
    # Without a cancel there is no hold window: the broker promised the held message back
    # before the next consumer was activated, so 1-2 ahead of it is out of order.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        story(b, during_close=during_close, next_first="1-2")
    o = check(p)
    assert o["valid"] is False and o["violation_count"] == 1 and o["held_reorder_count"] == 0
    (ex,) = o["examples"]
    assert (ex["earlier"]["id"], ex["later"]["id"], ex["consumer"]) == ("1-2", "1-1", "6/c6")

