"""The consumer-timeout section's hand-over (checkers.timeouts, checkers.spark_timeouts) on a
queue with a single active consumer, over planted histories: after the broker ends the active
consumer (a cancel, or a channel close 406), another consumer fed within the liveness bound is
a hand-over in time; none fed past the bound while messages were ready is a stalled hand-over
(invalid, with its timeline); a main phase that ends before the bound leaves it unknown; a fault
in effect restarts the count at its heal; with nothing ready nothing is judged. A plain-Python
oracle below must agree on each end's status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from checkers.liveness import LivenessBound
from checkers.spark_timeouts import consumer_timeout_check
from checkers.timeouts import hand_over_deadline
from tests.checkers.histories import MS, Builder
from tests.checkers.test_consumer_timeout import timed_out

pytestmark = [pytest.mark.spark]
SETTINGS = {"queue": "q", "timeout_ms": 5000, "hold_share": 0.1, "hold_s": 8.0,
            "single_active_consumer": True}
BOUND = LivenessBound(net_ticktime_s=4.0, grace_s=5.0, recovery_timeout_s=60.0)  # 10 s
DELIVERY = ("consume",)


def oracle(path: Path, windows: list[tuple[int, int]], main_end: int,
           depth: list[tuple[int, int]]) -> list[str]:
    """The hand-over rule written apart: each timed-out end's status, in history order."""
    ops = [orjson.loads(x) for x in path.read_text().splitlines() if x.strip()]
    client = [o for o in ops if isinstance(o.get("process"), int)]
    ok = [o for o in client if o["type"] == "ok"]
    out = []
    for c in client:
        if c.get("by") != "broker" or not ((c["type"], c["f"]) == ("ok", "cancel") or (
                (c["type"], c["f"]) == ("info", "close") and c.get("reply_code") == 406)):
            continue
        mine = (c["process"], c.get("consumer"))
        own = [o["index"] for o in ok if o["f"] in DELIVERY and o["index"] < c["index"]
               and (o["process"], o.get("consumer")) == mine]
        since = max(own, default=c["index"])
        nxt = next((o for o in ok if o["f"] in DELIVERY and o["index"] > since
                    and (o["process"], o.get("consumer")) != mine), None)
        confirmed = {o["value"] for o in ok if o["f"] == "publish" and o["index"] < c["index"]}
        taken = {o["value"] for o in ok if o["f"] in ("consume", "drain", "dead-letter")
                 and o["index"] < c["index"]}
        ready = len(c.get("holding") or []) + len(confirmed - taken)
        start = c["time"]
        moved = True
        while moved:  # every fault in effect before the deadline moves the count to its heal
            moved = False
            for w0, w1 in windows:
                if w0 <= start + BOUND.bound_ns and w1 > start:
                    start, moved = w1, True
        deadline = start + BOUND.bound_ns
        ready += sum(n for t, n in depth if c["time"] <= t <= deadline)
        out.append("handed_over" if nxt is not None and nxt["time"] <= deadline
                   else "nothing_ready" if ready == 0
                   else "run_ended" if main_end < deadline else "stalled")
    return out


def judge(spark: Any, path: Path, main_end_ms: float, windows_ms: tuple = (),
          bound: LivenessBound | None = BOUND, depth_ms: tuple = ()) -> dict[str, Any]:
    windows = [(int(a * MS), int(z * MS)) for a, z in windows_ms]
    depth = [(int(t * MS), n) for t, n in depth_ms]
    main_end = int(main_end_ms * MS)
    got = consumer_timeout_check(spark, path, SETTINGS, True, bound=bound, windows=windows,
                                 main_end=main_end, depth=depth)
    if bound is not None:
        assert [e["status"] for e in got["hand_over"]["each"]] == oracle(path, windows, main_end,
                                                                         depth)
    return got


def story(path: Path, *, next_ms: float | None = 5300.0, how: str = "cancel",
          holding: tuple[str, ...] = ("1-0", "1-1")) -> None:
    """Three messages confirmed; the active consumer 5 gets 1-0 and 1-1 and holds them; the
    broker ends it at 5.2 s (`how`); consumer 6 (a standby) is fed at `next_ms` (1-0 and 1-1
    back flagged, then 1-2), or never in the main phase, when the drain reads all three."""
    with Builder(path) as b:
        for seq in range(3):
            b.at(0).publish(1, seq)
        b.at(100).deliver(5, "1-0")
        b.deliver(5, "1-1")
        b.at(5200)
        timed_out(b, 5, list(holding), how)
        f = "consume" if next_ms is not None else "drain"
        b.at(next_ms if next_ms is not None else 60_000)
        for mid in ("1-0", "1-1"):
            b.consume(6 if f == "consume" else 9, mid, redelivered=True, f=f)
        b.consume(6 if f == "consume" else 9, "1-2", f=f)


@pytest.mark.parametrize("how", ["cancel", "close"])
def test_a_standby_fed_within_the_bound_is_a_hand_over_in_time(spark, tmp_path, how):
    p = tmp_path / "h.jsonl"
    story(p, how=how)
    got = judge(spark, p, main_end_ms=30_000)
    ho = got["hand_over"]
    assert got["valid"] is True and (ho["judged"], ho["handed_over"], ho["stalled"]) == (1, 1, 0)
    assert ho["delay_ms"] == {"max": 100.0, "median": 100.0}
    assert ho["bound"]["bound_ms"] == 10_000.0 and "subscribes again" in ho["after_an_end"]
    assert ho["each"] == [{"index": ho["each"][0]["index"], "ms": 5200.0, "consumer": "c5",
                           "how": "cancel" if how == "cancel" else "channel_close_406",
                           "status": "handed_over", "delay_ms": 100.0}]


def test_no_standby_fed_past_the_bound_with_messages_ready_is_a_stalled_hand_over(
        spark, tmp_path):
    p = tmp_path / "h.jsonl"
    story(p, next_ms=20_000)  # 14.8 s after the cancel, past the 10 s bound
    got = judge(spark, p, main_end_ms=30_000)
    ho = got["hand_over"]
    assert got["valid"] is False and ho["stalled"] == 1 and got["violations"]["stalled"] == 1
    (ex,) = ho["stalled_examples"]
    assert (ex["ms"], ex["consumer"], ex["held"], ex["waiting"], ex["deadline_ms"]) == (
        5200.0, "c5", 2, 1, 15_200.0)
    assert (ex["next"]["ms"], ex["next"]["consumer"], ex["delay_ms"]) == (20_000.0, "c6", 14_800.0)
    # The held messages themselves came back flagged: only the hand-over failed.
    assert got["redelivered"] == 2 and got["violation_count"] == 1


def test_never_fed_in_the_main_phase_is_stalled_and_a_standby_live_then_is_named(
        spark, tmp_path):
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.at(0).publish(1, 0)
        b.publish(1, 1)
        b.at(50).consume(7, "1-9", f="consume")  # consumer 7 was fed before: live at the end
        b.at(100).deliver(5, "1-0")
        b.at(5200)
        timed_out(b, 5, ["1-0"])
    got = judge(spark, p, main_end_ms=30_000)
    (ex,) = got["hand_over"]["stalled_examples"]
    assert got["valid"] is False and ex["next"] is None and ex["live"] == ["7 c7"]
    assert ex["waiting"] == 1  # 1-1, confirmed and never delivered


def test_a_main_phase_that_ends_before_the_bound_leaves_the_hand_over_unknown(spark, tmp_path):
    p = tmp_path / "h.jsonl"
    story(p, next_ms=None)
    got = judge(spark, p, main_end_ms=10_000)  # 4.8 s after the cancel
    ho = got["hand_over"]
    assert got["valid"] == "unknown" and ho["judged"] == 0
    assert ho["not_judged"] == {"nothing_ready": 0, "run_ended": 1}


def test_a_fault_in_effect_restarts_the_count_at_its_heal(spark, tmp_path):
    p = tmp_path / "h.jsonl"
    story(p, next_ms=20_000)
    got = judge(spark, p, main_end_ms=40_000, windows_ms=((4000, 12_000),))
    assert got["valid"] is True and got["hand_over"]["handed_over"] == 1
    assert hand_over_deadline(5, 10, [(0, 8), (17, 20), (31, 40)]) == 30  # 8 + 10, then 20 + 10


def test_with_nothing_ready_the_hand_over_is_not_judged_unless_a_depth_sample_saw_some(
        spark, tmp_path):
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.at(0).publish(1, 0)
        b.at(100).consume(5, "1-0")
        b.at(5200)
        timed_out(b, 5, [])
    got = judge(spark, p, main_end_ms=30_000, depth_ms=((4000, 7), (9000, 0), (16_000, 3)))
    assert got["hand_over"]["not_judged"] == {"nothing_ready": 1, "run_ended": 0}
    assert got["valid"] == "unknown"
    # The harness's depth sample 3.8 s after the end counted 4 ready (published by a client
    # whose confirm the history does not have): then the queue had something to hand over.
    got = judge(spark, p, main_end_ms=30_000, depth_ms=((4000, 7), (9000, 4), (16_000, 3)))
    (ex,) = got["hand_over"]["stalled_examples"]
    assert got["valid"] is False and ex["depth"] == [{"ms": 9000.0, "ready": 4}]


def test_without_a_bound_the_hand_over_is_unknown_and_without_sac_absent(spark, tmp_path):
    p = tmp_path / "h.jsonl"
    story(p)
    got = judge(spark, p, main_end_ms=30_000, bound=None)
    assert got["valid"] == "unknown" and "bound" in got["hand_over"]["reason"]
    plain = consumer_timeout_check(spark, p, {**SETTINGS, "single_active_consumer": False}, True)
    assert plain["valid"] is True and "hand_over" not in plain


@pytest.mark.usefixtures("spark")
def test_the_checker_judges_the_hand_over_by_the_runs_bound_and_main_phase(tmp_path):
    # Through check_history: the harness's observation says the queue has a single active
    # consumer, the bound comes from the run's settings, the main phase's end from its events.
    from checkers import CheckOptions, check_history
    from history import HARNESS
    with Builder(tmp_path / "history.jsonl") as b:
        b.op(type="info", process=HARNESS, f="consumer-timeout", value=SETTINGS)
        b.phase("main", "start")
        b.at(0).publish(1, 0)
        b.publish(1, 1)
        b.at(100).deliver(5, "1-0")
        b.at(5200)
        timed_out(b, 5, ["1-0"])
        b.at(20_000).consume(6, "1-0", redelivered=True)  # past the 10 s bound
        b.consume(6, "1-1")
        b.at(30_000).phase("main", "end")
        b.drain_end(complete=True)
    got = check_history(tmp_path / "history.jsonl", options=CheckOptions(), liveness=BOUND)
    section = got["consumer_timeout"]
    assert section["valid"] is False and section["hand_over"]["stalled"] == 1
    assert section["hand_over"]["stalled_examples"][0]["deadline_ms"] == 15_200.0
    assert got["valid"] is False
