"""The live watch of liveness after the heal (checkers.resume_watch), on planted histories: when
it says everything is back, and that a main phase cut where it says so, or at the runner's limit
when it never does, is judged by the liveness check rather than left unknown.

Times in ms as tests/checkers/test_liveness.py writes them (its helpers and its 4 s bound).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from checkers.resume_watch import ResumeWatch
from history import Op
from tests.checkers.test_liveness import BOUND, consume, history, live, partition, publish

MS = 1_000_000
Planted = list[tuple[float, dict[str, Any]]]
# Before the fault: n1 confirms, a consumer on n2 is fed (and acks).
BEFORE: Planted = [*publish("n1", 1, 0, 50), *consume("n2", 9, "1-0", 60)]
HEAL_MS = 1000.5  # partition(100, 1000)'s stop completes half a ms after its invocation


def ops(planted: Planted) -> list[Op]:
    return [dataclasses.replace(Op(**kw), time=round(t * MS))
            for t, kw in sorted(planted, key=lambda x: x[0])]


def first_resumed(watch: ResumeWatch, planted: Planted) -> float | None:
    """Feeds the ops in time order. Returns the time (ms) of the op after which the watch first
    says resumed, or None."""
    for op in ops(planted):
        watch.observe(op)
        if watch.resumed():
            return op.time / MS
    return None


def feed(watch: ResumeWatch, planted: Planted) -> None:
    for op in ops(planted):
        watch.observe(op)


def test_no_last_heal_before_a_fault_or_while_one_is_on():
    w = ResumeWatch()
    assert first_resumed(w, BEFORE) is None and w.last_heal_ns is None
    assert first_resumed(w, partition(100, 1000)[:2]) is None and w.last_heal_ns is None
    first_resumed(w, partition(100, 1000)[2:])
    assert w.last_heal_ns == round(HEAL_MS * MS)


def test_back_once_every_node_published_through_confirms_and_a_consumer_fed_after_acks():
    planted = [*BEFORE, *partition(100, 1000),
               *publish("n1", 1, 1, 1500),  # n1 confirms at 1501
               *publish("n3", 2, 0, 1600, outcome=None),  # n3: invoked, no confirm yet
               *consume("n2", 9, "1-1", 2000),  # fed at 2000, acked at 2000.5
               (2500, {"type": "ok", "process": 2, "f": "publish", "value": "2-0",
                       "node": "n3", "queue": "q", "publisher": 2, "seq": 0,
                       "phase": "main"})]
    assert first_resumed(ResumeWatch(), planted) == 2500  # n3's confirm was the last missing
    without_n3 = [x for x in planted if x[1].get("process") != 2]
    assert first_resumed(ResumeWatch(), without_n3) == 2000.5  # the ack after the delivery


def test_what_came_before_the_heal_does_not_count():
    # Confirms and a delivery during the fault, none after the heal: not back.
    planted = [*BEFORE, *partition(100, 1000), *publish("n1", 1, 1, 500),
               *consume("n2", 9, "1-1", 600)]
    assert first_resumed(ResumeWatch(), planted) is None


def test_a_queue_nobody_consumed_before_the_heal_waits_for_confirms_only():
    planted = [*publish("n1", 1, 0, 50), *partition(100, 1000), *publish("n1", 1, 1, 1500)]
    assert first_resumed(ResumeWatch(), planted) == 1501


def test_without_confirms_only_deliveries_are_waited_for():
    planted = [*BEFORE, *partition(100, 1000), *publish("n1", 1, 1, 1200, outcome=None),
               *consume("n2", 9, "1-1", 1300)]
    assert first_resumed(ResumeWatch(confirms=True), planted) is None
    assert first_resumed(ResumeWatch(confirms=False), planted) == 1300.5


def test_a_fault_after_a_heal_makes_the_last_heal_the_later_one():
    planted = [*BEFORE, *partition(100, 1000), *publish("n1", 1, 1, 1500),
               *consume("n2", 9, "1-1", 1600), *partition(2000, 3000, node="n2")]
    w = ResumeWatch()
    feed(w, planted[: len(planted) - 2])  # the second partition is on
    assert not w.resumed() and w.last_heal_ns is None
    feed(w, planted[len(planted) - 2:])
    assert w.last_heal_ns == round(3000.5 * MS) and not w.resumed()


def test_wait_returns_when_back_or_at_the_deadline():
    clock = [0]

    def now() -> int:
        clock[0] += 100 * MS
        return clock[0]

    w = ResumeWatch()
    first_resumed(w, [*BEFORE, *partition(100, 1000)])
    assert w.wait(now, 2000 * MS, poll_s=0.001) is False and clock[0] >= 2000 * MS
    first_resumed(w, [*publish("n1", 1, 1, 1500), *consume("n2", 9, "1-1", 1600)])
    assert w.wait(now, 0, poll_s=0.001) is True


# -- the check judges what the watch let run -------------------------------------------------


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_a_main_phase_cut_where_the_watch_says_back_or_at_the_limit_is_judged(tmp_path: Path):
    # Back: the main phase ends 1 ms after the watch said so, 1.6 s after the heal, well before
    # the 4 s bound; the check still says resumed, not unknown.
    back = [*BEFORE, *partition(100, 1000), *publish("n1", 1, 1, 1500),
            *consume("n2", 9, "1-1", 1600)]
    end = first_resumed(ResumeWatch(), back)
    assert end == 1600.5
    valid, sec = live(history(tmp_path / "back.jsonl", back, end + 1))
    assert valid is True and sec["valid"] is True and sec["status"] == "resumed"

    # Stuck: every publish through n1 times out (5 s) and the consumer is never fed again. The
    # runner's limit is the bound plus a publish's and a reconnection's timeout (TestSpec
    # .after_heal_limit_s: 4 + 5 + 3 s); cut there the check says not-resumed, cut at the heal
    # (the main phase ending with its last fault, as before) unknown.
    stuck = [*BEFORE, *partition(100, 1000), *publish("n1", 1, 1, 900, done=950),
             *publish("n1", 2, 0, 1200, "info", done=6200),
             *publish("n1", 3, 0, 6300, "info", done=11_300)]
    assert first_resumed(ResumeWatch(), stuck) is None
    limit_ms = BOUND.bound_ns / MS + 5000 + 3000
    valid, sec = live(history(tmp_path / "stuck.jsonl", stuck, HEAL_MS + limit_ms))
    assert valid is False and sec["status"] == "not-resumed" and sec["judged"] is True
    valid, sec = live(history(tmp_path / "cut.jsonl", stuck[:-4], HEAL_MS + 300))
    assert sec["valid"] == "unknown" and sec["judged"] is False
