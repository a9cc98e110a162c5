"""The delayed-retry section (checkers.retry, checkers.spark_retry) over planted histories:
clean returns, each violation (early, unflagged, past the limit, gone) by each kind of return
(reject, nack, a consumer lost with the message), and what is not judged (a return with the
drain incomplete, a loss the history cannot bound, a node's loss the type may not delay). The oracle (tests.checkers.oracle_retry)
must agree with Spark on each."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from checkers.retry import settings_of
from checkers.spark_retry import delayed_retry_check
from history import Op
from history.faults import FaultWindow
from tests.checkers import oracle_retry
from tests.checkers.histories import Builder

pytestmark = [pytest.mark.spark]
SETTINGS = {"queue": "q", "type": "all", "min_ms": 200, "max_ms": 500, "delivery_limit": 3}


def reject(b: Builder, process: int, mid: str, f: str = "reject") -> None:
    b.op(type="ok", process=process, f=f, value=mid, node="n2", queue="q", consumer=f"c{process}",
         phase="main")


def dlv(b: Builder, process: int, mid: str, redelivered: bool = True,
        count: int | None = None) -> None:
    b.op(type="ok", process=process, f="consume", value=mid, node="n2", queue="q",
         consumer=f"c{process}", redelivered=redelivered, delivery_count=count, phase="main")


def end(b: Builder, process: int, how: str) -> None:
    """Ends consumer c<process>: "close" the harness's close (its invocation and outcome),
    "lost" its connection lost (the broker's `info` close), "timeout" the broker's cancel."""
    kw: dict[str, Any] = {"process": process, "value": None, "node": "n2", "queue": "q",
                          "consumer": f"c{process}", "phase": "main"}
    if how == "close":
        b.op(type="invoke", f="close", extra={"by": "harness", "holding": []}, **kw)
        b.op(type="ok", f="close", **kw)
    elif how == "lost":
        b.op(type="info", f="close", error="StreamLostError", extra={"by": "broker"}, **kw)
    else:
        b.op(type="ok", f="cancel", extra={"by": "broker", "holding": []}, **kw)


def judge(spark: Any, path: Path, drain_complete: bool = True,
          settings: dict[str, Any] | None = None,
          faults: Sequence[FaultWindow] = ()) -> dict[str, Any]:
    s = settings or SETTINGS
    got = delayed_retry_check(spark, path, s, drain_complete, faults=faults)
    assert oracle_retry.agrees(got, oracle_retry.judge(path, s, drain_complete, faults))
    return got


def test_returns_redelivered_after_their_delay_and_dead_lettered_past_the_limit_are_valid(
        spark, tmp_path):
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.at(10)
        dlv(b, 5, "1-0", redelivered=False)
        reject(b, 5, "1-0")  # count 1: ready after 200 ms
        b.at(215)
        dlv(b, 6, "1-0", count=1)
        reject(b, 6, "1-0")  # count 2: 400 ms
        b.at(620)
        dlv(b, 5, "1-0", count=2)
        reject(b, 5, "1-0")  # count 3: min(600, 500) = 500 ms
        b.at(1125)
        dlv(b, 5, "1-0", count=3)
        reject(b, 5, "1-0")  # count 4 > 3: dead-lettered
        b.at(1200)
        b.op(type="ok", process=9, f="dead-letter", value="1-0", queue="q.harness-dlq",
             phase="drain")
    got = judge(spark, p)
    assert got["valid"] is True
    assert (got["judged"], got["redelivered"], got["dead_lettered"]) == (4, 3, 1)
    assert got["violation_count"] == 0 and got["tolerance_ms"] == 50
    # the report's plot: each reject followed by a delivery, its delay and its least delay
    delays = got["delays"]
    assert (delays["of"], delays["limit"]) == (3, 1000)
    assert [(d["ms"], d["delay_ms"], d["bound_ms"], d["count"], d["outcome"])
            for d in delays["sample"]] == [(11.0, 204.0, 200.0, 1, "redelivered"),
                                           (216.0, 404.0, 400.0, 2, "redelivered"),
                                           (621.0, 504.0, 500.0, 3, "redelivered")]


def test_the_delay_sample_keeps_violations_first_within_its_limit(spark, tmp_path, monkeypatch):
    from checkers import spark_retry
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        for k in range(4):
            b.at(1000 * k)
            dlv(b, 5, f"1-{k}", redelivered=False)
            reject(b, 5, f"1-{k}")
            b.at(1000 * k + (100 if k == 2 else 300))  # 1-2 comes back early
            dlv(b, 5, f"1-{k}", count=1)
    monkeypatch.setattr(spark_retry, "DELAY_SAMPLE", 1)
    got = judge(spark, p)
    assert got["violations"]["early"] == 1 and got["redelivered"] == 3
    assert (got["delays"]["of"], got["delays"]["limit"]) == (4, 1)
    (kept,) = got["delays"]["sample"]
    assert (kept["ms"], kept["delay_ms"], kept["outcome"]) == (2001.0, 99.0, "early")


@pytest.mark.parametrize("story, violation", [
    ("early", "early"), ("unflagged", "unflagged"), ("past_limit", "past_limit"),
    ("gone", "gone")])
def test_each_violation_is_found_with_its_timeline(spark, tmp_path, story, violation):
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        dlv(b, 5, "1-0", redelivered=False)
        reject(b, 5, "1-0")
        b.at(100 if story == "early" else 600)
        if story != "gone":
            dlv(b, 6, "1-0", redelivered=story != "unflagged",
                count=5 if story == "past_limit" else 1)
    got = judge(spark, p)
    assert got["valid"] is False
    assert got["violations"][violation] == 1 and got["violation_count"] == 1
    ex = got["examples"][0]
    assert ex["id"] == "1-0" and ex["violation"] == violation
    assert [e["f"] for e in ex["timeline"]] == ["consume", "reject"] + (
        [] if story == "gone" else ["consume"])


def test_the_count_is_the_rejects_so_far_where_the_broker_gave_none(spark, tmp_path):
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        dlv(b, 5, "1-0", redelivered=False)
        reject(b, 5, "1-0")
        b.at(250)
        dlv(b, 5, "1-0")
        reject(b, 5, "1-0")
        b.at(550)  # 300 ms after the second reject, whose delay is 400 ms
        dlv(b, 5, "1-0")
    got = judge(spark, p)
    assert got["violations"]["early"] == 1 and got["redelivered"] == 1


def test_a_delivery_count_below_the_rejects_so_far_is_a_violation(spark, tmp_path):
    """Two rejects, then a delivery the broker counts once: it forgot a reject (count_low),
    though its delay would pass for the count it gave. A count above the rejects (a consumer
    lost with the message counts too) and a nack between them (it counts nothing, and is
    held for the count it leaves) are fine."""
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        dlv(b, 5, "1-0", redelivered=False)
        reject(b, 5, "1-0")
        b.at(250)
        dlv(b, 5, "1-0", count=1)
        reject(b, 5, "1-0")  # the second reject: the count must be 2 from now on
        b.at(500)
        dlv(b, 6, "1-0", count=1)  # 250 ms later: enough for a count of 1, not of 2
        dlv(b, 5, "1-1", redelivered=False)
        reject(b, 5, "1-1")
        b.at(1000)
        dlv(b, 6, "1-1", count=2)  # a consumer lost with it counted once more (400 ms waited)
        reject(b, 6, "1-1", f="nack")  # held min(200 x 2, 500) = 400 ms under "all"
        b.at(1402)
        dlv(b, 6, "1-1", count=2)  # the nack counts nothing
    got = judge(spark, p)
    assert got["valid"] is False
    assert got["violations"] == {"early": 0, "unflagged": 0, "count_low": 1, "past_limit": 0,
                                 "gone": 0}
    assert got["redelivered"] == 3
    assert got["by_kind"]["nack"] == {"returns": 1, "judged": 1,
                                      "outcomes": {"redelivered": 1}}
    [ex] = got["examples"]
    assert (ex["id"], ex["violation"], ex["count"]) == ("1-0", "count_low", 1)
    assert [(e["f"], e["delivery_count"]) for e in ex["timeline"]] == [
        ("consume", None), ("reject", None), ("consume", 1), ("reject", None), ("consume", 1)]


def test_returns_the_drain_could_not_settle_and_held_deliveries_are_not_judged(spark,
                                                                            tmp_path):
    """A reject never followed by a delivery with the drain incomplete; a delivery its consumer
    never settled while the consumer never ended (held, not known to be returned)."""
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        dlv(b, 5, "1-0", redelivered=False)
        dlv(b, 5, "1-1", redelivered=False)
        reject(b, 5, "1-1")
    got = judge(spark, p, drain_complete=False)
    assert got["valid"] == "unknown" and got["judged"] == 0
    assert got["not_judged"] == {"drain_incomplete": 1, "unbounded": 1, "consumer_timeout": 0,
                                 "return_path": 0}
    assert got["by_kind"]["lost"] == {"returns": 1, "judged": 0,
                                      "outcomes": {"unbounded": 1}}


@pytest.mark.parametrize("kind, waited, outcome", [
    ("all", 202, "redelivered"), ("all", 120, "early"),
    ("returned", 202, "redelivered"), ("returned", 120, "early"),
    ("failed", 20, "redelivered")])
def test_a_nack_is_held_for_its_unchanged_count_when_the_type_holds_nacks(
        spark, tmp_path, kind, waited, outcome):
    """A nack leaves the count as it was (0, then counted as 1): held min(200 x 1, 500) ms
    under "all" and "returned"; "failed" holds no nack, so any delay passes."""
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        dlv(b, 5, "1-0", redelivered=False)
        reject(b, 5, "1-0", f="nack")  # at 1 ms
        b.at(1 + waited)
        dlv(b, 6, "1-0")
        b.ack(6, "1-0", consumer="c6")
    got = judge(spark, p, settings={**SETTINGS, "type": kind})
    assert got["by_kind"]["nack"] == {"returns": 1, "judged": 1, "outcomes": {outcome: 1}}
    assert got["valid"] is (outcome == "redelivered")
    if outcome == "early":
        [ex] = got["examples"]
        assert (ex["kind"], ex["delay_ms"], ex["count"]) == ("nack", float(waited), 0)


def test_a_nack_whose_count_rose_went_back_another_way(spark, tmp_path):
    """A nack, then a delivery counted once more (its consumer was lost before the nack was
    applied): under "returned" not judged (a failed return is not held there)."""
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        dlv(b, 5, "1-0", redelivered=False)
        reject(b, 5, "1-0", f="nack")
        dlv(b, 6, "1-0", count=1)
        b.ack(6, "1-0", consumer="c6")
    got = judge(spark, p, settings={**SETTINGS, "type": "returned"})
    assert got["valid"] == "unknown" and got["not_judged"]["return_path"] == 1


@pytest.mark.parametrize("waited, outcome", [(205, "redelivered"), (100, "early")])
def test_a_consumer_closed_with_the_message_returns_it_from_the_close(
        spark, tmp_path, waited, outcome):
    """The harness closes a consumer holding 1-0 (never settled): the return's moment is the
    close's invocation (the channel lives until then); the count rises to 1: held 200 ms."""
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        dlv(b, 5, "1-0", redelivered=False)
        b.at(50)
        end(b, 5, "close")  # invoked at 50 ms
        b.at(50 + waited)
        dlv(b, 6, "1-0", count=1)
        b.ack(6, "1-0", consumer="c6")
    got = judge(spark, p)
    assert got["by_kind"]["lost"] == {"returns": 1, "judged": 1, "outcomes": {outcome: 1}}
    if outcome == "early":
        [ex] = got["examples"]
        assert (ex["kind"], ex["moment_ms"], ex["delay_ms"]) == ("lost", 50.0, float(waited))
        assert [e["f"] for e in ex["timeline"]] == ["consume", "consume", "ack"]


KILL_N2 = FaultWindow(f="kill", start_ns=40 * 10**6, end_ns=900 * 10**6,
                      value={"fault": "kill", "nodes": ["n2"]}, invoke_ns=30 * 10**6)
KILL_N1 = FaultWindow(f="kill", start_ns=40 * 10**6, end_ns=900 * 10**6,
                      value={"fault": "kill", "nodes": ["n1"]}, invoke_ns=30 * 10**6)
PARTITION = FaultWindow(f="start-partition", start_ns=40 * 10**6, end_ns=900 * 10**6,
                        value={"fault": "partition-one", "nodes": ["n2"]}, invoke_ns=30 * 10**6)


@pytest.mark.parametrize("kind, fault, how, waited, outcome", [
    ("all", KILL_N2, "lost", 180, "redelivered"),  # 210 ms after the kill's invocation
    ("all", KILL_N2, "lost", 100, "early"),  # 130 ms after it
    ("failed", KILL_N2, "lost", 180, "return_path"),  # down or the disconnected timeout
    ("all", None, "lost", 180, "unbounded"),  # a loss no fault explains: any moment
    ("all", PARTITION, "close", 180, "unbounded"),  # a partition may have returned it
    ("all", KILL_N1, "close", 100, "early"),  # a kill of another node leaves the close's bound
    ("all", None, "timeout", 180, "consumer_timeout")])
def test_a_consumer_lost_with_the_message_is_judged_only_where_the_history_bounds_it(
        spark, tmp_path, kind, fault, how, waited, outcome):
    """A consumer on n2 holds 1-0 and ends at 60 ms; the message comes back at 60 + waited ms
    with a count of 1 (held 200 ms)."""
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        dlv(b, 5, "1-0", redelivered=False)
        b.at(60)
        end(b, 5, how)
        b.at(60 + waited)
        dlv(b, 6, "1-0", count=1)
        b.ack(6, "1-0", consumer="c6")
    got = judge(spark, p, settings={**SETTINGS, "type": kind},
                faults=[fault] if fault else [])
    assert got["by_kind"]["lost"]["outcomes"] == {outcome: 1}
    assert got["valid"] is {"redelivered": True, "early": False}.get(outcome, "unknown")


def test_a_type_that_delays_no_reject_judges_only_the_flag_and_the_limit(spark, tmp_path):
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        dlv(b, 5, "1-0", redelivered=False)
        reject(b, 5, "1-0")
        dlv(b, 5, "1-0", count=1)
    got = judge(spark, p, settings={**SETTINGS, "type": "returned"})
    assert got["valid"] is True and got["redelivered"] == 1


def test_the_settings_are_the_harnesss_last_observation():
    class E:
        def __init__(self, f: str, value: Any) -> None:
            self.f, self.value = f, value
    assert settings_of([E("phase", {}), E("delayed-retry", SETTINGS)]) == SETTINGS
    assert settings_of([E("phase", {})]) is None
    assert Op  # the history's op model writes the delivery_count the rule reads


def _run(path: Path, observed: bool) -> None:
    """Writes a whole run: one message rejected, redelivered too early, then acked; the drain
    completes; `observed`: the harness recorded delayed-retry settings at setup."""
    from history import HARNESS
    with Builder(path) as b:
        if observed:
            b.op(type="info", process=HARNESS, f="delayed-retry", value=SETTINGS)
        b.publish(1, 0)
        b.phase("main", "start")
        dlv(b, 5, "1-0", redelivered=False)
        reject(b, 5, "1-0")
        dlv(b, 5, "1-0", count=1)
        b.ack(5, "1-0", consumer="c5")
        b.phase("main", "end")
        b.drain_end(complete=True)


@pytest.mark.usefixtures("spark")
def test_the_check_has_the_section_only_when_the_harness_observed_the_settings(tmp_path):
    from checkers import CheckOptions, check_history
    on, off = tmp_path / "on.jsonl", tmp_path / "off.jsonl"
    _run(on, True)
    _run(off, False)
    got = check_history(on, options=CheckOptions())
    assert got["delayed_retry"]["violations"]["early"] == 1
    assert got["valid"] is False
    assert "delayed_retry" not in check_history(off, options=CheckOptions())



@pytest.mark.usefixtures("spark")
def test_the_report_shows_the_section_the_checker_wrote_with_its_plot(tmp_path):
    import json

    from checkers import CheckOptions, check_history
    from reports.report import render
    _run(tmp_path / "history.jsonl", True)
    got = check_history(tmp_path / "history.jsonl", options=CheckOptions())
    (tmp_path / "results.json").write_text(json.dumps(got))
    assert "retry.png" in [p.name for p in render(tmp_path, index=False)]
    page = (tmp_path / "report.html").read_text()
    assert '<div class="promise" id="delayed_retry">' in page and '<img src="retry.png"' in page
    assert "<td>violations.early</td><td class=\"num\">1</td>" in page
