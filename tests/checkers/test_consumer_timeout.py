"""The consumer-timeout section (checkers.timeouts, checkers.spark_timeouts) over planted
histories: a broker cancel (or a channel the broker closed with 406, for a client without
consumer_cancel_notify) whose held messages come back flagged (or dead-lettered) is clean; a
delivery to the ended consumer after its end, a held message back unflagged, or never back
after a complete drain, is each a violation; with the drain incomplete a held message never
back is not judged. A plain-Python oracle below must agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from checkers.spark_timeouts import consumer_timeout_check
from history import BY_BROKER
from tests.checkers.histories import Builder

pytestmark = [pytest.mark.spark]
SETTINGS = {"queue": "q", "timeout_ms": 5000, "hold_share": 0.1, "hold_s": 8.0}


def oracle(path: Path, drain_complete: bool) -> dict[str, int]:
    """The rule written apart: counts per outcome."""
    ops = [orjson.loads(x) for x in path.read_text().splitlines() if x.strip()]
    ok = [o for o in ops if o.get("type") == "ok" and isinstance(o.get("process"), int)]
    out: dict[str, int] = {}
    ends = [o for o in ops if isinstance(o.get("process"), int) and o.get("by") == "broker"
            and ((o["type"], o["f"]) == ("ok", "cancel")
                 or ((o["type"], o["f"]) == ("info", "close") and o.get("reply_code") == 406))]
    for c in ends:
        later = [o for o in ok if o["index"] > c["index"]]
        for o in later:
            if o["f"] in ("consume", "drain") and o["process"] == c["process"] \
                    and o.get("consumer") == c.get("consumer"):
                out["delivered_after_cancel"] = out.get("delivered_after_cancel", 0) + 1
        for mid in c.get("holding") or []:
            held_by = [o["index"] for o in ok if o.get("value") == mid and o["index"] < c["index"]
                       and o["f"] in ("consume", "drain") and o["process"] == c["process"]
                       and o.get("consumer") == c.get("consumer")]
            since = [o for o in ok if o["index"] > max(held_by, default=c["index"])]
            nxt = next((o for o in since if o.get("value") == mid
                        and o["f"] in ("consume", "drain")), None)
            dead = any(o.get("value") == mid and o["f"] == "dead-letter" for o in since)
            acked = any(o.get("value") == mid and o["f"] == "ack" for o in since)
            k = ("redelivered" if nxt and nxt.get("redelivered") else "unflagged" if nxt
                 else "dead_lettered" if dead else "acked_after_end" if acked
                 else "lost" if drain_complete else "drain_incomplete")
            out[k] = out.get(k, 0) + 1
    return out


def judge(spark: Any, path: Path, drain_complete: bool = True) -> dict[str, Any]:
    got = consumer_timeout_check(spark, path, SETTINGS, drain_complete)
    counts = {**got["violations"], **got["not_judged"], "redelivered": got["redelivered"],
              "dead_lettered": got["dead_lettered"], "acked_after_end": got["acked_after_end"]}
    assert {k: v for k, v in counts.items() if v} == oracle(path, drain_complete)
    return got


CLOSE_TEXT = ("PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout "
              "value used: 5000 ms")


def timed_out(b: Builder, process: int, holding: list[str], how: str = "cancel") -> None:
    """Appends the broker's end of consumer `process` (tag "c<process>") holding `holding`: a
    basic.cancel (an ok op f "cancel"), or a channel close 406 (an info op f "close") as
    workloads.clients records them."""
    if how == "cancel":
        b.op(type="ok", process=process, f="cancel", consumer=f"c{process}", queue="q",
             phase="main", extra={"by": BY_BROKER, "holding": holding})
    else:
        b.op(type="info", process=process, f="close", consumer=f"c{process}", queue="q",
             phase="main", error=f"ChannelClosedByBroker: (406, {CLOSE_TEXT!r})",
             extra={"by": BY_BROKER, "holding": holding, "reply_code": 406,
                    "reply_text": CLOSE_TEXT})


def story(path: Path, *, back: str = "flagged", fed_after: bool = False,
          back_first: bool = False, how: str = "cancel") -> None:
    """Consumer 5 gets 1-0 and 1-1, holds both; the broker ends it (timeout: `how` "cancel" or
    "close"); 1-0 comes back to consumer 6 (`back`: "flagged", "unflagged", "dead" or
    "never"); 1-1 comes back flagged (`back_first`: recorded by consumer 6 before 5 records its
    end)."""
    with Builder(path) as b:
        b.deliver(5, "1-0")
        b.deliver(5, "1-1")
        if back_first:
            b.consume(6, "1-1", redelivered=True)
        timed_out(b, 5, ["1-0", "1-1"], how)
        if fed_after:
            b.deliver(5, "1-2")
        if back in ("flagged", "unflagged"):
            b.consume(6, "1-0", redelivered=back == "flagged")
        if back == "dead":
            b.op(type="ok", process=9, f="dead-letter", value="1-0", queue="q.harness-dlq",
                 phase="drain")
        if not back_first:
            b.consume(6, "1-1", redelivered=True)


def test_held_messages_back_flagged_or_dead_lettered_are_valid(spark, tmp_path):
    for back in ("flagged", "dead"):
        p = tmp_path / f"{back}.jsonl"
        story(p, back=back)
        got = judge(spark, p)
        assert got["valid"] is True and got["broker_cancels"] == 1 and got["held_judged"] == 2


def test_a_held_message_back_before_its_cancel_was_recorded_counts_as_back(spark, tmp_path):
    # quorum-consumer-timeout-healthy on 4.3.6, seed 4001: the broker returned 2-443 and sent the
    # cancel at once; consumer 13 recorded its redelivery 0.4 ms before consumer 11 recorded the
    # cancel. Judged from the delivery the consumer held it by, not from the cancel.
    p = tmp_path / "h.jsonl"
    story(p, back_first=True)
    got = judge(spark, p)
    assert got["valid"] is True and got["redelivered"] == 2 and got["violation_count"] == 0


@pytest.mark.parametrize("kw, violation", [
    ({"back": "unflagged"}, "unflagged"), ({"back": "never"}, "lost"),
    ({"fed_after": True}, "delivered_after_cancel")])
def test_each_violation_is_found(spark, tmp_path, kw, violation):
    p = tmp_path / "h.jsonl"
    story(p, **kw)
    got = judge(spark, p)
    assert got["valid"] is False and got["violations"][violation] == 1
    assert got["examples"][0]["violation"] == violation
    ex = got["examples"][0]
    fs = [e["f"] for e in ex["timeline"]]  # its message's ops and the broker's cancel, by index
    assert "cancel" in fs and [e["index"] for e in ex["timeline"]] == sorted(
        e["index"] for e in ex["timeline"])
    assert all(e["f"] == "cancel" or e["f"] in ("consume", "ack", "dead-letter")
               for e in ex["timeline"])
    assert fs.index("cancel") > 0 if violation != "delivered_after_cancel" else fs[0] == "cancel"


def test_a_held_message_its_consumer_acked_after_the_cancel_is_counted_apart(spark, tmp_path):
    # quorum-consumer-timeout-khepri-minority on 4.3.6, seed 4003: 2-176 was delivered 0.09 ms
    # before the cancel was recorded (in `holding`), acked 2 ms after it and never delivered
    # again: 4.3 returns only the messages past their timeout, and the ack settled this one.
    # The same message neither acked nor back after a complete drain is lost.
    got = {}
    for acked in (True, False):
        p = tmp_path / f"acked-{acked}.jsonl"
        with Builder(p) as b:
            b.deliver(5, "1-0")
            b.deliver(5, "1-1")  # a moment before the cancel, not yet acked
            timed_out(b, 5, ["1-0", "1-1"])
            if acked:
                b.ack(5, "1-1")
            b.consume(6, "1-0", redelivered=True)
        got[acked] = judge(spark, p)
    assert got[True]["valid"] is True and got[True]["violation_count"] == 0
    assert (got[True]["acked_after_end"], got[True]["redelivered"],
            got[True]["held_judged"]) == (1, 1, 1)
    assert got[False]["violations"]["lost"] == 1 and got[False]["acked_after_end"] == 0


def test_a_held_message_never_back_is_not_judged_when_the_drain_is_incomplete(spark, tmp_path):
    p = tmp_path / "h.jsonl"
    story(p, back="never")
    got = judge(spark, p, drain_complete=False)
    assert got["valid"] is True and got["not_judged"] == {"drain_incomplete": 1}


def test_without_a_broker_cancel_nothing_is_judged(spark, tmp_path):
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.consume(5, "1-0")
    assert judge(spark, p)["valid"] == "unknown"


def test_the_held_sample_says_how_long_each_held_message_was_held_and_its_outcome(
        spark, tmp_path, monkeypatch):
    from checkers import spark_timeouts
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.at(100).deliver(5, "1-0")
        b.at(900).deliver(5, "1-1")
        b.at(5200).op(type="ok", process=5, f="cancel", consumer="c5", queue="q", phase="main",
                      extra={"by": BY_BROKER, "holding": ["1-0", "1-1"]})
        b.at(5300).consume(6, "1-0", redelivered=True)
        b.consume(6, "1-1", redelivered=False)
    got = judge(spark, p)
    held = got["held"]
    assert (held["of"], held["limit"]) == (2, 1000)
    assert [(h["id"], h["cancel_ms"], h["held_ms"], h["consumer"], h["outcome"])
            for h in held["sample"]] == [("1-0", 5200.0, 5100.0, "c5", "redelivered"),
                                         ("1-1", 5200.0, 4300.0, "c5", "unflagged")]
    monkeypatch.setattr(spark_timeouts, "HELD_SAMPLE", 1)
    (kept,) = judge(spark, p)["held"]["sample"]  # the violation first
    assert (kept["id"], kept["outcome"]) == ("1-1", "unflagged")


@pytest.mark.usefixtures("spark")
def test_the_report_shows_the_section_the_checker_wrote_with_its_plot(tmp_path):
    import json

    from checkers import CheckOptions, check_history
    from history import HARNESS
    from reports.report import render
    with Builder(tmp_path / "history.jsonl") as b:
        b.op(type="info", process=HARNESS, f="consumer-timeout", value=SETTINGS)
        b.phase("main", "start")
        b.publish(1, 0)
        b.at(100).deliver(5, "1-0")
        b.at(5200).op(type="ok", process=5, f="cancel", consumer="c5", queue="q", phase="main",
                      extra={"by": BY_BROKER, "holding": ["1-0"]})
        b.consume(6, "1-0", redelivered=True)
        b.phase("main", "end")
        b.drain_end(complete=True)
    got = check_history(tmp_path / "history.jsonl", options=CheckOptions())
    assert got["consumer_timeout"]["held"]["sample"][0]["held_ms"] == 5100.0
    (tmp_path / "results.json").write_text(json.dumps(got))
    assert "timeout.png" in [p.name for p in render(tmp_path, index=False)]
    page = (tmp_path / "report.html").read_text()
    assert '<div class="promise" id="consumer_timeout">' in page
    assert '<img src="timeout.png"' in page and '<td>broker_cancels</td><td class="num">1</td>' in page


def test_a_cancel_the_broker_sent_again_is_counted_and_changes_nothing(spark, tmp_path):
    # RabbitMQ 4.3 sends basic.cancel for each release of a timed-out consumer's messages; the
    # client records the second as an info op (workloads.clients) and the section counts it.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.deliver(5, "1-0")
        b.op(type="ok", process=5, f="cancel", consumer="c5", queue="q", phase="main",
             extra={"by": BY_BROKER, "holding": ["1-0"]})
        b.op(type="info", process=5, f="cancel", consumer="c5", queue="q", phase="main",
             error="the broker sent basic.cancel again for this consumer",
             extra={"by": BY_BROKER})
        b.consume(6, "1-0", redelivered=True)
    got = judge(spark, p)
    assert got["valid"] is True and got["broker_cancels"] == 1 and got["repeated_cancels"] == 1


@pytest.mark.parametrize("kw, violation", [
    ({}, None), ({"back": "dead"}, None), ({"back": "unflagged"}, "unflagged"),
    ({"back": "never"}, "lost"), ({"fed_after": True}, "delivered_after_cancel")])
def test_a_channel_the_broker_closed_with_406_is_judged_as_a_cancel_is(spark, tmp_path, kw,
                                                                       violation):
    p = tmp_path / "h.jsonl"
    story(p, how="close", **kw)
    got = judge(spark, p)
    assert (got["broker_cancels"], got["broker_channel_closes"]) == (0, 1)
    assert got["ended_by"] == {"cancel": 0, "channel_close_406": 1}
    (end,) = got["ends"]
    assert (end["how"], end["reply_code"], end["reply_text"], end["held"]) == (
        "channel_close_406", 406, CLOSE_TEXT, 2)
    if violation is None:
        assert got["valid"] is True and got["held_judged"] == 2
    else:
        assert got["valid"] is False and got["violations"][violation] == 1
        assert "close" in [e["f"] for e in got["examples"][0]["timeline"]]


def test_a_close_the_broker_sent_for_another_reason_is_no_timed_out_end(spark, tmp_path):
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.deliver(5, "1-0")
        b.op(type="info", process=5, f="close", consumer="c5", queue="q", phase="main",
             error="ChannelClosedByBroker: (404, 'NOT_FOUND')",
             extra={"by": BY_BROKER, "holding": ["1-0"], "reply_code": 404,
                    "reply_text": "NOT_FOUND"})
        b.consume(6, "1-0", redelivered=True)
    got = judge(spark, p)
    assert got["valid"] == "unknown" and got["ended_by"] == {"cancel": 0, "channel_close_406": 0}


def test_a_cancel_sent_to_a_client_without_the_capability_is_a_violation(spark, tmp_path):
    p = tmp_path / "h.jsonl"
    story(p)
    got = consumer_timeout_check(spark, p, {**SETTINGS, "consumer_cancel_notify": False}, True)
    assert got["valid"] is False and got["violations"]["cancel_without_capability"] == 1
    closed = tmp_path / "closed.jsonl"
    story(closed, how="close")
    got = consumer_timeout_check(spark, closed, {**SETTINGS, "consumer_cancel_notify": False},
                                 True)
    assert got["valid"] is True and got["violation_count"] == 0
