"""Planted histories through the priority check (checkers.spark_priority): strict priorities of
quorum queues on 4.3. Every check is also worked out by the oracle (tests.checkers
.oracle_priority, through tests.checkers.oracle.judge), which must agree field by field,
the ordering section included (judged per publisher and priority: see
tests.checkers.test_literal_priority_order)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkers.results import PRIORITY_SKEW_WHY
from checkers.spark_priority import SKEW_MARGIN_NS
from harness.cli import summary
from tests.checkers.histories import MS, Builder
from tests.checkers.test_literal import check

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]

NONE_JUDGED = {"returned": 0, "prefetch": 0, "priority_unknown": 0, "no_settlement": 0,
               "within_skew": 0, "competing": 0}


def take(b: Builder, process: int, mid: str, priority: int | None, *,
         redelivered: bool = False, acked: bool = True, f: str = "consume") -> None:
    """A delivery of `mid` to consumer `process` (and its ack unless `acked` is false)."""
    b.deliver(process, mid, redelivered=redelivered, priority=priority, f=f)
    if acked:
        b.ack(process, mid, phase="drain" if f == "drain" else "main")


def overtaken(path: Path, *, consume: int = 1, sac: bool = False,
              second_consumer: bool = False, confirm: str = "ok",
              settled_after_ns: int = 200 * MS) -> None:
    """Writes the issue's violation in small: 1-1 (priority 9) is confirmed (at index 7, 7 ms)
    while consumer 5 holds 2-0, and 5 settles 2-0 `settled_after_ns` later (index 8); yet 5 is
    then handed 1-0 (priority 1), and 1-1 only after it (to 5 itself, or as the first delivery
    of a second consumer 6)."""
    with Builder(path) as b:
        b.priorities(consume=consume, sac=sac)
        b.publish(2, 0, priority=1)
        b.publish(1, 0, priority=1)
        b.deliver(5, "2-0", priority=1)
        if confirm == "ok":
            b.publish(1, 1, priority=9)
        else:
            b.invoke(1, 1, priority=9)
            b.complete(1, 1, confirm, priority=9)
        b.later(settled_after_ns - MS)  # the clock had moved on 1 ms past the confirm
        b.ack(5, "2-0")
        take(b, 5, "1-0", 1)
        take(b, 6 if second_consumer else 5, "1-1", 9)
        b.drained()


def overtaken_example(settled_ms: float) -> dict[str, Any]:
    """Returns the example `overtaken` (one consumer) gives of 1-0, its settlement recorded at
    `settled_ms`."""
    return {
        "consumer": "5/c5",
        "delivery": {"id": "1-0", "priority": 1, "level": 1, "index": 9,
                     "time_ms": round(settled_ms + 1, 3), "node": "n2"},
        "settled": {"index": 8, "time_ms": settled_ms},
        "overtaken_by": {
            "id": "1-1", "priority": 9, "level": 9,
            "published": {"index": 6, "time_ms": 6.0, "node": "n1"},
            "confirmed": {"index": 7, "time_ms": 7.0},
            "delivered": {"index": 11, "time_ms": round(settled_ms + 3, 3), "node": "n2",
                          "consumer": "5/c5"}},
    }


def section(**kw: Any) -> dict[str, Any]:
    """Returns a whole judged priority section: the clean one, updated with the keywords."""
    base: dict[str, Any] = {
        "valid": True, "composes_only_when_false": True, "applicable": True, "reason": None,
        "queue": "q", "line": "4.3", "levels": 32, "strict": True,
        "single_active_consumer": False, "delivery_count": 0, "judged_count": 0,
        "violation_count": 0, "not_judged_count": 0, "not_judged": dict(NONE_JUDGED),
        "unconfirmed_set_aside_count": 0, "skew_margin_ms": SKEW_MARGIN_NS / 1e6,
        "skew_margin_reason": PRIORITY_SKEW_WHY, "examples": [], "within_skew_examples": []}
    base.update(kw)
    return base


def test_higher_priorities_first_is_judged_in_order(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.priorities()
        b.publish(1, 0, priority=1)
        b.publish(2, 0, priority=9)
        b.publish(3, 0)  # no priority: level 4
        take(b, 5, "2-0", 9)  # the consumer's first: what was ready then is not recorded
        take(b, 5, "3-0", None)
        take(b, 5, "1-0", 1)
        b.drained()
    r = check(p)
    assert r["valid"] is True
    assert r["priority"] == section(delivery_count=3, judged_count=2, not_judged_count=1,
                                    not_judged={**NONE_JUDGED, "no_settlement": 1})


def test_a_ready_higher_priority_message_delivered_later_is_a_violation(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    overtaken(p)
    r = check(p)
    assert r["valid"] is False and r["queue"]["valid"] is True
    assert r["priority"] == section(
        valid=False, delivery_count=3, judged_count=2, violation_count=1, not_judged_count=1,
        not_judged={**NONE_JUDGED, "no_settlement": 1}, examples=[overtaken_example(207.0)])


@pytest.mark.parametrize(("after_ns", "violation"), [
    (870_000, False),  # the real 4.3.6 control's one pair: a confirm 0.87 ms before the ack
    (SKEW_MARGIN_NS, False),  # exactly the margin: not more than it before the ack
    (SKEW_MARGIN_NS + 1_000, True),  # 1 us past it
])
def test_a_confirm_within_the_skew_margin_of_the_settlement_is_set_aside(
        tmp_path: Path, after_ns: int, violation: bool) -> None:
    # The confirm and the ack are recorded by different client threads, the ack after its
    # write: a confirm recorded at most the margin before the ack does not say the broker had
    # the message when it took the ack in. Such a delivery is counted, never a pass.
    p = tmp_path / "h.jsonl"
    overtaken(p, settled_after_ns=after_ns)
    r = check(p)
    ex = overtaken_example(round((7 * MS + after_ns) / 1e6, 3))
    if violation:
        assert r["valid"] is False
        assert r["priority"] == section(
            valid=False, delivery_count=3, judged_count=2, violation_count=1,
            not_judged_count=1, not_judged={**NONE_JUDGED, "no_settlement": 1}, examples=[ex])
    else:
        assert r["valid"] is True
        assert r["priority"] == section(
            delivery_count=3, judged_count=1, not_judged_count=2,
            not_judged={**NONE_JUDGED, "no_settlement": 1, "within_skew": 1},
            within_skew_examples=[ex])
        assert ("priority: judged 1, violations 0, not judged 2 (1 within the 100.0 ms skew "
                "margin)  [True (counts only when false)]") in summary(r)


def test_a_returned_message_legitimately_jumps_ahead(tmp_path: Path) -> None:
    # 1-0 (priority 1) goes to consumer 5, whose channel closes unacked; 1-1 and 1-3 (priority
    # 9) are confirmed; consumer 6 gets 1-0 back first (returned messages come ahead of fresh
    # ones, their priority not kept), then 1-1; then 1-2 (priority 1), returned by the broker's
    # count alone (x-acquired-count: a consumer that held it was never recorded), ahead of 1-3.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.priorities()
        b.publish(1, 0, priority=1)
        take(b, 5, "1-0", 1, acked=False)
        b.publish(1, 1, priority=9)
        b.publish(1, 2, priority=1)
        b.publish(1, 3, priority=9)
        take(b, 6, "1-0", 1, redelivered=True)
        take(b, 6, "1-1", 9)
        b.deliver(6, "1-2", priority=1, acquired_count=1)
        b.ack(6, "1-2")
        take(b, 6, "1-3", 9)
        b.drained()
    r = check(p)
    assert r["valid"] is True
    assert r["priority"] == section(
        delivery_count=5, judged_count=2, not_judged_count=3,
        not_judged={**NONE_JUDGED, "returned": 2, "no_settlement": 1})


def test_a_consumer_with_prefetch_above_one_is_not_judged(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    overtaken(p, consume=10)
    r = check(p)
    assert r["valid"] is True  # nothing judged: unknown, which composes only when false
    assert r["priority"] == section(
        valid="unknown", reason="no delivery could be judged", delivery_count=3,
        not_judged_count=3, not_judged={**NONE_JUDGED, "prefetch": 3})


def test_drain_deliveries_are_not_judged_with_the_drains_prefetch(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.priorities()
        b.publish(1, 0, priority=1)
        b.publish(1, 1, priority=9)
        b.phase("drain", "start")
        take(b, 7, "1-0", 1, f="drain")
        take(b, 7, "1-1", 9, f="drain")
        b.phase("drain", "end")
    assert check(p)["priority"]["not_judged"] == {**NONE_JUDGED, "prefetch": 2}


def test_a_higher_message_left_for_the_drain_overtook_what_the_consumer_got(
        tmp_path: Path) -> None:
    # 2-0 (priority 9) is confirmed before consumer 5 settles 1-0, yet 5 gets 1-1 and 1-2
    # (priority 1), and 2-0 is first read by the drain, whose consumer subscribed after its
    # start: it was ready all along.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.priorities()
        b.publish(1, 0, priority=1)
        b.publish(1, 1, priority=1)
        b.publish(1, 2, priority=1)
        b.publish(2, 0, priority=9)
        b.later(500 * MS)  # the acks come well after 2-0's confirm
        take(b, 5, "1-0", 1)
        take(b, 5, "1-1", 1)
        take(b, 5, "1-2", 1)
        b.phase("drain", "start")
        take(b, 7, "2-0", 9, f="drain")
        b.phase("drain", "end")
    r = check(p)
    assert r["valid"] is False
    assert r["priority"]["violation_count"] == 2 and r["priority"]["judged_count"] == 2
    assert [e["delivery"]["id"] for e in r["priority"]["examples"]] == ["1-1", "1-2"]
    assert r["priority"]["examples"][0]["overtaken_by"]["delivered"]["consumer"] == "7/c7"


def test_an_unconfirmed_higher_priority_publish_is_not_counted(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    overtaken(p, confirm="info")
    r = check(p)
    assert r["valid"] is True
    assert r["priority"] == section(
        delivery_count=3, judged_count=2, not_judged_count=1,
        not_judged={**NONE_JUDGED, "no_settlement": 1}, unconfirmed_set_aside_count=1)


def test_a_higher_message_confirmed_after_the_settlement_is_not_counted(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.priorities()
        b.publish(2, 0, priority=1)
        b.publish(1, 0, priority=1)
        b.invoke(1, 1, priority=9)
        take(b, 5, "2-0", 1)
        b.complete(1, 1, priority=9)  # confirmed after 5's ack: maybe enqueued after 1-0 left
        take(b, 5, "1-0", 1)
        take(b, 5, "1-1", 9)
        b.drained()
    r = check(p)
    assert r["priority"]["violation_count"] == 0 and r["priority"]["judged_count"] == 2
    assert r["priority"]["unconfirmed_set_aside_count"] == 0


def test_another_consumer_may_have_held_the_higher_message(tmp_path: Path) -> None:
    # 1-1 went to consumer 6 as its first delivery: 6 may have had it before 5 got 1-0.
    p = tmp_path / "h.jsonl"
    overtaken(p, second_consumer=True)
    r = check(p)
    assert r["valid"] is True
    assert r["priority"]["not_judged"] == {**NONE_JUDGED, "no_settlement": 2, "competing": 1}
    assert r["priority"]["judged_count"] == 0 and r["priority"]["valid"] == "unknown"


def test_with_a_single_active_consumer_the_next_one_came_after(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    overtaken(p, second_consumer=True, sac=True)
    r = check(p)
    assert r["valid"] is False
    assert r["priority"]["violation_count"] == 1
    assert r["priority"]["examples"][0]["overtaken_by"]["delivered"]["consumer"] == "6/c6"


@pytest.mark.parametrize(("line", "levels", "strict", "reason"), [
    # (4.0's two levels are judged by the two-level rule: below; a line serving more at a
    # ratio has none)
    ("4.x", 3, False, "3-level priorities are served at a ratio (RabbitMQ 4.x), not strictly"),
    ("3.10", None, False, "RabbitMQ 3.10's quorum queues have no message priorities"),
    (None, None, False, "the broker's release line is unknown"),
])
def test_a_line_without_strict_priorities_is_not_applicable(
        tmp_path: Path, line: str | None, levels: int | None, strict: bool, reason: str) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.priorities(line=line, levels=levels, strict=strict)
        b.publish(2, 0, priority=1)
        b.publish(1, 0, priority=1)
        b.publish(1, 1, priority=9)
        take(b, 5, "2-0", 1)
        take(b, 5, "1-0", 1)
        take(b, 5, "1-1", 9)
        b.drained()
    r = check(p)
    assert r["valid"] is True
    assert r["priority"] == {
        "valid": "unknown", "composes_only_when_false": True, "applicable": False,
        "reason": f"not applicable: {reason}", "queue": "q", "line": line, "levels": levels,
        "strict": strict, "single_active_consumer": False}


def test_a_run_without_priorities_has_no_section_or_says_none_was_given(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        take(b, 5, "1-0", None)
        b.drained()
    assert "priority" not in check(p)
    q = tmp_path / "observed.jsonl"
    with Builder(q) as b:
        b.priorities()
        b.publish(1, 0)
        take(b, 5, "1-0", None)
        b.drained()
    r = check(q)
    assert r["priority"]["applicable"] is False
    assert r["priority"]["reason"] == "not applicable: no message carried a priority"


def test_a_priority_beyond_the_lines_levels_is_not_judged(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.priorities()
        b.publish(1, 0, priority=1)
        b.publish(2, 0, priority=40)
        b.publish(3, 0, priority=2)
        take(b, 5, "1-0", 1)
        take(b, 5, "3-0", 2)  # 2-0 is of no known level: it overtakes nothing
        take(b, 5, "2-0", 40)
        b.drained()
    r = check(p)
    assert r["priority"]["not_judged"] == {**NONE_JUDGED, "no_settlement": 1,
                                           "priority_unknown": 1}
    assert r["priority"]["judged_count"] == 1 and r["priority"]["violation_count"] == 0


# -- the two-level rule (4.0 to 4.2) ------------------------------------------------------------

TWO = {"line": "4.0", "levels": 2, "strict": False}


def two_level(path: Path, *, normal_first: bool, settle_after_publish_ns: int = 200 * MS) -> None:
    """4.0's shape: consumer 5 holds 2-0; 1-1 (priority 9: high) is published and confirmed,
    and 1-0 (priority 1: normal) published after that confirm (`normal_first`: before 1-1's
    publish); 5 settles 2-0 `settle_after_publish_ns` after 1-0's publish and is handed 1-0,
    then 1-1."""
    with Builder(path) as b:
        b.priorities(**TWO)
        b.publish(2, 0, priority=1)
        b.deliver(5, "2-0", priority=1)
        if normal_first:
            b.publish(1, 0, priority=1)
        b.publish(1, 1, priority=9)
        if not normal_first:
            b.publish(1, 0, priority=1)
        b.later(settle_after_publish_ns - 2 * MS)  # 1-0's publish took 2 ms of the clock
        b.ack(5, "2-0")
        take(b, 5, "1-0", 1)
        take(b, 5, "1-1", 9)
        b.drained()


def test_two_levels_a_younger_normal_message_before_a_ready_high_one_is_a_violation(
        tmp_path: Path) -> None:
    # 4.0.5's rabbit_fifo_q takes the high queue's head on every dequeue but every third, and
    # then the normal one's only if it was enqueued first: 1-0, published after 1-1's confirm,
    # could never go first.
    p = tmp_path / "h.jsonl"
    two_level(p, normal_first=False)
    r = check(p)
    assert r["valid"] is False and r["queue"]["valid"] is True
    s = r["priority"]
    assert (s["applicable"], s["line"], s["levels"], s["strict"]) == (True, "4.0", 2, False)
    assert (s["judged_count"], s["violation_count"]) == (2, 1)
    ex = s["examples"][0]
    assert ex["delivery"]["id"] == "1-0" and ex["delivery"]["level"] == 0
    assert ex["delivery"]["published"]["index"] == 6  # after 1-1's confirm (index 5)
    assert ex["overtaken_by"]["id"] == "1-1" and ex["overtaken_by"]["level"] == 1
    assert ex["overtaken_by"]["confirmed"]["index"] == 5


def test_two_levels_an_older_normal_message_may_take_its_turn(tmp_path: Path) -> None:
    # 1-0 was published (and confirmed) before 1-1: the ratio's third turn may take it first.
    p = tmp_path / "h.jsonl"
    two_level(p, normal_first=True)
    r = check(p)
    assert r["valid"] is True
    assert (r["priority"]["judged_count"], r["priority"]["violation_count"]) == (2, 0)


@pytest.mark.parametrize(("settle_after_publish_ns", "verdict"), [
    (SKEW_MARGIN_NS + 50 * MS, "violation"),  # the publish was recorded after the confirm
    (SKEW_MARGIN_NS - 50 * MS, "within_skew"),  # and the confirm is within the ack's margin
])
def test_two_levels_a_confirm_read_before_the_publish_counts_whatever_the_gap(
        tmp_path: Path, settle_after_publish_ns: int, verdict: str) -> None:
    # 1-1's confirm (index 5) is recorded 1 ms before 1-0's publish (index 6): the publish is
    # recorded before its write, so the broker had 1-1 before 1-0; that is an order of cause,
    # and the margin is not needed for it when the publish came more than the margin before
    # the ack. Closer, the ack's margin decides as in the strict rule.
    p = tmp_path / "h.jsonl"
    two_level(p, normal_first=False, settle_after_publish_ns=settle_after_publish_ns)
    s = check(p)["priority"]
    if verdict == "violation":
        assert s["violation_count"] == 1 and s["not_judged"]["within_skew"] == 0
    else:
        assert s["violation_count"] == 0 and s["not_judged"]["within_skew"] == 1
        assert s["within_skew_examples"][0]["delivery"]["published"]["index"] == 6


def test_two_levels_a_message_without_its_publish_is_not_judged(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.priorities(**TWO)
        b.publish(2, 0, priority=1)
        b.publish(1, 1, priority=9)
        take(b, 5, "2-0", 1)
        take(b, 5, "3-0", 1)  # its publish is not in the history: its age is unknown
        take(b, 5, "1-1", 9)
        b.drained()
    s = check(p)["priority"]
    assert s["not_judged"] == {**NONE_JUDGED, "no_settlement": 1, "priority_unknown": 1}
    assert (s["judged_count"], s["violation_count"]) == (1, 0)


# -- random priority histories: the engine says what the oracle says -------------------------


@st.composite
def priority_histories(draw: st.DrawFn) -> dict[str, Any]:
    """Draws a small priority run that keeps the history contract (every completion after its
    invoke, every ack after a delivery it acks) and follows no queue model: messages of random
    priorities and outcomes, delivered in any order to two main consumers and the drain's
    (mostly acked at once), flagged or counted returned now and then, the clock moving on by
    1 ms an op and now and then by tens of ms more (so that pairs fall on both sides of the
    skew margin), on 4.3's strict levels or 4.0's two."""
    n = draw(st.integers(3, 9))
    prios = draw(st.lists(st.sampled_from([None, 1, 1, 9, 9, 31, 40]), min_size=n, max_size=n))
    steps: list[tuple[Any, ...]] = []
    invoked: list[int] = []
    completed: set[int] = set()
    unacked: dict[int, list[int]] = {5: [], 6: [], 9: []}
    drain = False
    length = draw(st.integers(12, 40))
    for i in range(length):
        action = draw(st.sampled_from(["publish", "publish", "invoke", "complete", "take",
                                       "take", "take", "deliver", "ack", "drain"]))
        if action in ("publish", "invoke") and len(invoked) < n:
            invoked.append(len(invoked))
            steps.append(("invoke", invoked[-1]))
            action = "complete" if action == "publish" else action
        if action == "complete" and set(invoked) - completed:
            k = draw(st.sampled_from(sorted(set(invoked) - completed)))
            completed.add(k)
            steps.append(("complete", k, draw(st.sampled_from(["ok"] * 4 + ["info", "fail"]))))
        elif action in ("take", "deliver") and invoked:
            c = 9 if drain else draw(st.sampled_from([5, 5, 6]))
            k = draw(st.sampled_from(invoked))
            returned = draw(st.sampled_from([(False, None)] * 6 + [(True, None), (False, 2)]))
            steps.append(("deliver", c, k, *returned))
            unacked[c].append(k)
            action = "ack" if action == "take" else action
        if action == "ack":
            waiting = [c for c, ks in unacked.items() if ks]
            if waiting:
                c = draw(st.sampled_from(waiting))
                steps.append(("ack", c, unacked[c].pop(0)))
        elif action == "drain" and not drain and 3 * i > 2 * length:  # late, if at all
            drain = True
            steps.append(("drain",))
    gaps = draw(st.lists(st.sampled_from([0, 0, 0, 0, 40, 70, 120]), min_size=len(steps),
                         max_size=len(steps)))
    return {"prios": prios, "steps": steps, "gaps": gaps,
            "consume": draw(st.sampled_from([1, 1, 1, 2])), "sac": draw(st.booleans()),
            "two": draw(st.booleans())}


def write_priority_history(path: Path, h: dict[str, Any]) -> Path:
    prios = h["prios"]
    with Builder(path) as b:
        b.priorities(consume=h["consume"], sac=h["sac"], **(TWO if h["two"] else {}))
        for step, gap in zip(h["steps"], h["gaps"], strict=True):
            b.later(gap * MS)
            kind, *args = step
            if kind == "invoke":
                b.invoke(1, args[0], priority=prios[args[0]])
            elif kind == "complete":
                b.complete(1, args[0], args[1], priority=prios[args[0]])
            elif kind == "deliver":
                c, k, flagged, acquired = args
                b.deliver(c, f"1-{k}", redelivered=flagged, priority=prios[k],
                          acquired_count=acquired, f="drain" if c == 9 else "consume")
            elif kind == "ack":
                b.ack(args[0], f"1-{args[1]}", phase="drain" if args[0] == 9 else "main")
            else:
                b.phase("drain", "start")
    return path


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(priority_histories())
def test_random_priority_histories_are_judged_as_the_oracle_judges_them(
        h: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as d:
        r = check(write_priority_history(Path(d) / "history.jsonl", h))  # asserts agreement
    p = r["priority"]
    if p["applicable"]:  # else no message carried a priority
        assert p["judged_count"] + p["not_judged_count"] == p["delivery_count"]
