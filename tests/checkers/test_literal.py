"""Literal histories through the Spark checker: Jepsen's total-queue cases and each definition.

Every check is also worked out by the oracle (tests.checkers.oracle), which must agree with
the checker field by field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkers import CheckOptions, check_history
from tests.checkers import oracle
from tests.checkers.histories import Builder

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]


def check(path: Path, **opts: Any) -> dict[str, Any]:
    """Checks a history with the Spark checker; the oracle must agree. Returns the results."""
    got = check_history(path, options=CheckOptions(**opts))
    assert oracle.mismatches(got, oracle.judge(path, **opts)) == []
    return got


def queue_of(results: dict[str, Any]) -> dict[str, Any]:
    """Returns the queue section with its explanations reduced to their classes, in order, and
    without the loss told apart (the oracle agrees on it; test_literal_loss spells it out)."""
    q = {k: v for k, v in results["queue"].items() if k != "loss"}
    q["explanations"] = list(q["explanations"])
    return q


EMPTY_LISTS: dict[str, list[str]] = {k: [] for k in (
    "lost", "unexpected", "duplicated", "redelivered_duplicated", "unflagged_duplicated",
    "recovered", "delivered_failed", "lost_unacked", "unflagged_after_ack",
    "unflagged_redelivered", "dead_lettered_delivered")}


def expected_queue(**kw: Any) -> dict[str, Any]:
    """Returns a whole expected queue section (explanations as their classes): the empty one,
    updated with the keywords; acked_delivery_count defaults to delivery_count."""
    base: dict[str, Any] = {
        "valid": True, "anomalies": [], "drain_complete": True, "drain_reason": None,
        "acks_recorded": False,
        "attempt_count": 0, "acknowledged_count": 0, "ok_count": 0, "lost_count": 0,
        "unexpected_count": 0, "duplicated_count": 0, "redelivered_duplicated_count": 0,
        "unflagged_duplicated_count": 0, "recovered_count": 0, "delivered_failed_count": 0,
        "fail_count": 0, "info_count": 0, "delivery_count": 0, "lost_unacked_count": 0,
        "unflagged_after_ack_count": 0, "unflagged_redelivered_count": 0,
        "acked_delivery_count": 0, "dead_lettered_count": 0,
        "dropped_by_design_count": 0, "dead_lettered_delivered_count": 0, **EMPTY_LISTS,
        "fail_reasons": {}, "dropped_by_design_reasons": {}, "dropped_by_design_examples": {},
        "dead_lettering": None, "explanations": [],
    }
    base.update(kw)
    if "acked_delivery_count" not in kw:
        base["acked_delivery_count"] = base["delivery_count"]
    return base


# -- Jepsen's total-queue-test, ported ------------------------------------------------------


def test_jepsen_empty(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.drained()
    r = check(p)
    assert r["valid"] is True
    assert queue_of(r) == expected_queue()


def test_jepsen_sane(tmp_path: Path) -> None:
    # (invoke 1 enqueue 1) (invoke 2 enqueue 2) (ok 2 enqueue 2) then dequeues of 1 and 2.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.invoke(1, 0)
        b.invoke(2, 0)
        b.complete(2, 0, "ok")
        b.deliver(3, "1-0")
        b.deliver(3, "2-0")
        b.drained()
    assert queue_of(check(p)) == expected_queue(
        attempt_count=2, acknowledged_count=1, ok_count=2, recovered_count=1,
        recovered=["1-0"], info_count=1, delivery_count=2, explanations=["recovered"])


def test_jepsen_pathological(tmp_path: Path) -> None:
    # :hung never completes, :enqueued is lost, :wtf was never enqueued, :dup comes out twice.
    hung, enqueued, dup, wtf = "1-0", "2-0", "3-0", "99-0"
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.invoke(1, 0)
        b.publish(2, 0)
        b.publish(3, 0)
        b.op(type="invoke", process=4, f="consume", value=None)  # a dequeue that never completes
        b.deliver(5, wtf)
        b.deliver(6, dup)
        b.deliver(7, dup)
        b.drained()
    r = check(p)
    assert r["valid"] is False
    assert queue_of(r) == expected_queue(
        valid=False, anomalies=["lost", "unexpected", "unflagged_duplicated"],
        attempt_count=3, acknowledged_count=2, ok_count=1, lost_count=1, lost=[enqueued],
        unexpected_count=1, unexpected=[wtf], duplicated_count=1, duplicated=[dup],
        unflagged_duplicated_count=1, unflagged_duplicated=[dup], info_count=1,
        delivery_count=3, explanations=["lost", "unexpected", "unflagged_duplicated"])
    assert hung not in r["queue"]["recovered"]
    assert r["queue"]["loss"]["by_kind"] == {"all": {"runs": 1, "messages": 1}}


# -- our definitions ------------------------------------------------------------------------


def test_flagged_duplicate_is_valid_by_default(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.deliver(2, "1-0")
        b.deliver(3, "1-0", redelivered=True)
        b.drained()
    q = check(p)["queue"]
    assert q["valid"] is True
    assert (q["duplicated"], q["redelivered_duplicated"], q["unflagged_duplicated"]) == (
        ["1-0"], ["1-0"], [])
    assert check(p, flagged_duplicates_invalid=True)["queue"]["valid"] is False


def test_unflagged_extra_makes_duplicate_unflagged(tmp_path: Path) -> None:
    # The first delivery is flagged (its earlier delivery went unrecorded); the extra is not.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.deliver(2, "1-0", redelivered=True)
        b.deliver(3, "1-0", redelivered=False)
        b.drained()
    q = check(p)["queue"]
    assert q["unflagged_duplicated"] == ["1-0"] and q["valid"] is False
    assert check(p, unflagged_duplicates_invalid=False)["queue"]["valid"] is True


def test_delivered_after_nack_is_reported_not_invalid(tmp_path: Path) -> None:
    # basic.nack: the broker refuses responsibility, it does not say the message is absent.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0, "fail", error="nack")
        b.publish(1, 1, "fail", error="nack")
        b.publish(1, 2, "fail", error="returned: unroutable")
        b.deliver(2, "1-0")
        b.drained()
    r = check(p)
    q = queue_of(r)
    assert r["valid"] is True and q["valid"] is True and q["anomalies"] == []
    assert q["delivered_failed"] == ["1-0"] and q["delivered_failed_count"] == 1
    assert q["fail_count"] == 3 and q["recovered"] == []
    assert q["fail_reasons"] == {"nack": 2, "returned: unroutable": 1}
    assert q["explanations"] == ["delivered_failed"]
    assert "refuses responsibility" in r["queue"]["explanations"]["delivered_failed"]


def test_info_publish_delivered_is_recovered(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0, "info")
        b.publish(2, 0, "info")
        b.deliver(3, "2-0")
        b.drained()
    q = check(p)["queue"]
    assert q["valid"] is True
    assert q["recovered"] == ["2-0"] and q["info_count"] == 2 and q["lost"] == []


def test_cut_off_history_counts_open_publishes_as_info(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.phase("main", "start")
        b.publish(1, 0)
        b.deliver(2, "1-0")
        b.invoke(1, 1)  # the run crashed here
    q = check(p)["queue"]
    assert q["info_count"] == 1 and q["attempt_count"] == 2 and q["acknowledged_count"] == 1
    # Nothing is called lost, so the missing drain cannot change the verdict.
    assert q["valid"] is True and q["drain_complete"] is False and "reason" not in q
    assert "no drain-end event" in q["drain_reason"]


def test_lost_without_drain_is_unknown_not_false(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.phase("drain", "start")
        b.phase("drain", "incomplete")
    r = check(p)
    assert r["queue"]["valid"] == "unknown" and r["queue"]["lost"] == ["1-0"]
    assert "drain did not complete" in r["queue"]["reason"]
    assert r["valid"] == "unknown"
    assert check(p, require_drain=False)["queue"]["valid"] is False


def test_unexpected_without_drain_is_still_false(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.deliver(2, "7-7")
    assert check(p)["queue"]["valid"] is False


def test_samples_are_bounded_and_sorted_by_publisher_then_seq(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        for seq in range(12):
            b.publish(10, seq)
            b.publish(2, seq)
        b.drained()
    q = check(p, sample_size=5)["queue"]
    assert q["lost_count"] == 24
    assert q["lost"] == ["2-0", "2-1", "2-2", "2-3", "2-4"]


def test_unknown_keys_and_other_ops_are_ignored(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.op(type="invoke", process=1, f="publish", value="1-0", publisher=1, seq=0,
             extra={"trace": {"span": 3}})
        b.op(type="ok", process=1, f="publish", value="1-0", publisher=1, seq=0)
        b.op(type="invoke", process=2, f="get", value=None)
        b.op(type="fail", process=2, f="get", value=None)
        b.op(type="info", process=3, f="consume", value="1-0", error="channel closed")
        b.deliver(3, "1-0")
        b.drained()
    assert queue_of(check(p)) == expected_queue(attempt_count=1, acknowledged_count=1,
                                                ok_count=1, delivery_count=1)


# -- ordering --------------------------------------------------------------------------------


def ordering_history(p: Path) -> None:
    with Builder(p) as b:
        for seq in range(4):
            b.publish(1, seq)
        b.deliver(5, "1-0")
        b.deliver(5, "1-2")
        b.deliver(6, "1-1")                      # another consumer: its own stream
        b.deliver(5, "1-1", redelivered=True)    # late, but flagged
        b.deliver(5, "1-3")
        b.deliver(5, "1-2", redelivered=False, consumer="c5")  # unflagged and late
        b.drained()


def test_ordering_skips_redelivered_by_default(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    ordering_history(p)
    o = check(p)["ordering"]
    assert o["valid"] is False and o["strict"] is False
    assert o["violation_count"] == 1 and o["deliveries_checked"] == 5
    assert o["consumers_affected"] == ["5/c5"] and o["consumers_affected_count"] == 1
    (ex,) = o["examples"]
    assert (ex["earlier"]["id"], ex["later"]["id"], ex["publisher"]) == ("1-3", "1-2", 1)
    assert ex["earlier"]["index"] < ex["later"]["index"]


def test_strict_ordering_includes_redelivered(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    ordering_history(p)
    o = check(p, strict_order=True)["ordering"]
    assert o["strict"] is True and o["violation_count"] == 2 and o["deliveries_checked"] == 6
    assert [e["later"]["id"] for e in o["examples"]] == ["1-1", "1-2"]


def test_ordering_consumer_is_process_and_tag(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.publish(1, 1)
        b.deliver(5, "1-1", consumer="a")
        b.deliver(5, "1-0", consumer="b")  # same process, other channel: other stream
        b.deliver(6, "1-0", consumer="a")  # same tag, other process: other stream
        b.drained()
    assert check(p)["ordering"]["violation_count"] == 0


def test_ordering_examples_are_bounded(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        for seq in range(10):
            b.publish(1, seq)
        for seq in reversed(range(10)):
            b.deliver(5, f"1-{seq}")
        b.drained()
    o = check(p, example_size=3)["ordering"]
    assert o["violation_count"] == 9 and len(o["examples"]) == 3


def test_strict_same_message_redelivered_to_the_same_consumer(tmp_path: Path) -> None:
    # (a) a flagged redelivery of the message just delivered is not out of order.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        for seq in range(3):
            b.publish(1, seq)
        b.consume(5, "1-0")
        b.deliver(5, "1-1")
        b.consume(5, "1-1", redelivered=True)
        b.consume(5, "1-2")
        b.drained()
    o = check(p, strict_order=True)["ordering"]
    assert o["valid"] is True and o["violation_count"] == 0 and o["deliveries_checked"] == 4


def test_strict_order_runs_across_single_active_consumer_hand_overs(tmp_path: Path) -> None:
    # (b) 5 crashes holding 1-1; 6 becomes the active consumer and gets it again (flagged), then
    # goes on: fine. Then 7 takes over and starts again at 1-2: out of order for the queue,
    # although each consumer on its own saw increasing seqs.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        for seq in range(4):
            b.publish(1, seq)
        b.consume(5, "1-0")
        b.deliver(5, "1-1")
        b.consume(6, "1-1", redelivered=True)
        b.consume(6, "1-2")
        b.consume(6, "1-3")
        b.consume(7, "1-2")
        b.drained()
    o = check(p, strict_order=True)["ordering"]
    assert o["violation_count"] == 1 and o["consumers_affected"] == ["7/c7"]
    (ex,) = o["examples"]
    assert (ex["earlier"]["id"], ex["later"]["id"], ex["consumer"]) == ("1-3", "1-2", "7/c7")
    assert check(p)["ordering"]["violation_count"] == 0


def test_strict_flagged_redelivery_after_later_messages_is_a_violation(tmp_path: Path) -> None:
    # With prefetch 1 a returned message comes back first: 1-1 after 1-2 is out of order.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        for seq in range(3):
            b.publish(1, seq)
        b.consume(5, "1-0")
        b.deliver(5, "1-1")
        b.consume(6, "1-2")
        b.consume(6, "1-1", redelivered=True)
        b.drained()
    o = check(p, strict_order=True)["ordering"]
    assert o["violation_count"] == 1 and o["flagged_violation_count"] == 1
    assert [e["later"]["id"] for e in o["examples"]] == ["1-1"]
    assert [e["later"]["id"] for e in o["flagged_examples"]] == ["1-1"]
    default = check(p)["ordering"]
    assert default["valid"] is True and default["flagged_violation_count"] == 1


def test_flagged_reorders_are_counted_not_invalid(tmp_path: Path) -> None:
    # (d) default mode: a flagged delivery that comes after later messages is reported apart.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        for seq in range(4):
            b.publish(1, seq)
        b.consume(5, "1-0")
        b.consume(5, "1-2")
        b.consume(5, "1-1", redelivered=True)
        b.consume(5, "1-3")
        b.drained()
    o = check(p)["ordering"]
    assert o["valid"] is True and o["violation_count"] == 0
    assert o["flagged_violation_count"] == 1 and o["examples"] == []
    (ex,) = o["flagged_examples"]
    assert (ex["earlier"]["id"], ex["later"]["id"], ex["later"]["redelivered"]) == (
        "1-2", "1-1", True)


def test_publisher_slot_continues_across_processes(tmp_path: Path) -> None:
    # (c) publisher 7 is a slot: process 1 published 7-0 (confirmed) and 7-1 (unknown, then it
    # retired); process 2 went on with 7-2 and 7-3. 7-1 reaching the consumer after 7-2 is not
    # a violation (another channel, never confirmed); 7-0 after 7-2 would be (it was confirmed
    # before 7-2 was sent).
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0, publisher=7)
        b.publish(1, 1, "info", publisher=7)
        b.publish(2, 2, publisher=7)
        b.publish(2, 3, publisher=7)
        b.consume(5, "7-2")
        b.consume(5, "7-1")
        b.consume(5, "7-3")
        b.consume(5, "7-0")
        b.drained()
    r = check(p)
    o = r["ordering"]
    assert o["violation_count"] == 1 and o["unconfirmed_reorder_count"] == 1
    assert [(e["earlier"]["id"], e["later"]["id"], e["publisher"]) for e in o["examples"]] == [
        ("7-3", "7-0", 7)]
    assert [(e["earlier"]["id"], e["later"]["id"]) for e in o["unconfirmed_examples"]] == [
        ("7-2", "7-1")]
    assert r["queue"]["recovered"] == ["7-1"]


def test_ordering_reads_publisher_and_seq_fields_before_the_id(tmp_path: Path) -> None:
    # The fields win over the id; an id that is not "<publisher>-<seq>" still has them.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.op(type="ok", process=5, f="consume", value="a", publisher=3, seq=2, consumer="c5")
        b.op(type="ok", process=5, f="consume", value="b", publisher=3, seq=1, consumer="c5")
        b.op(type="ok", process=5, f="consume", value="4-9", publisher=3, seq=3, consumer="c5")
        b.op(type="ok", process=5, f="consume", value="4-1", consumer="c5")
        b.drained()
    o = check(p, unflagged_duplicates_invalid=False)["ordering"]
    assert o["deliveries_checked"] == 4 and o["violation_count"] == 1
    assert [(e["publisher"], e["earlier"]["seq"], e["later"]["seq"]) for e in o["examples"]] == [
        (3, 2, 1)]


# -- perf ------------------------------------------------------------------------------------


def test_perf_windows_latencies_and_gaps(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.at(0).phase("main", "start")
        b.at(10).invoke(1, 0)
        b.at(12).complete(1, 0)                      # healthy, 2 ms
        b.at(20).op(type="invoke", process="nemesis", f="kill", value={"fault": "kill"})
        b.at(21).op(type="info", process="nemesis", f="kill", value={"nodes": ["n1"]})
        b.at(30).invoke(1, 1)
        b.at(90).complete(1, 1)                      # in the window, 60 ms
        b.at(40).invoke(2, 0)
        b.at(41).complete(2, 0, "fail")
        b.at(50).invoke(3, 0)
        b.at(51).complete(3, 0, "info")
        b.at(60).op(type="invoke", process="nemesis", f="start", value={"fault": "kill"})
        b.at(61).op(type="info", process="nemesis", f="start", value={"nodes": ["n1"]})
        b.at(100).invoke(1, 2)
        b.at(105).complete(1, 2)                     # healthy, 5 ms
        b.at(200).phase("main", "end")
        b.drained()
    perf = check(p)["perf"]
    assert perf["valid"] is True
    assert perf["main_phase"] == {"start_ms": 0.0, "end_ms": 200.0}
    (w,) = perf["windows"]
    assert (w["f"], w["stop_f"], w["start_ms"], w["end_ms"], w["closed_by"], w["target"]) == (
        "kill", "start", 21.0, 61.0, "start", ["n1"])
    assert (w["invoked"], w["ok"], w["fail"], w["info"]) == (3, 1, 1, 1)
    assert w["latency_ms"] == {"p50": 60.0, "p95": 60.0, "p99": 60.0, "max": 60.0}
    assert w["recovery_ms"] == 29.0                 # first confirm after 61 ms is at 90 ms
    assert perf["healthy"]["invoked"] == 2
    assert perf["healthy"]["latency_ms"] == {"p50": 2.0, "p95": 5.0, "p99": 5.0, "max": 5.0}
    assert perf["overall"]["ok_share"] == 0.6
    assert perf["longest_without_confirm"] == {"ms": 95.0, "from_ms": 105.0, "to_ms": 200.0}


def test_perf_without_anything(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.drained()
    perf = check(p)["perf"]
    assert perf["overall"]["invoked"] == 0 and perf["overall"]["ok_share"] is None
    assert perf["windows"] == []


@pytest.mark.parametrize("n", [1, 2, 10, 101])
def test_perf_quantiles_are_nearest_rank(tmp_path: Path, n: int) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        for i in range(n):
            b.at(1000 * i).invoke(1, i)
            b.at(1000 * i + i + 1).complete(1, i)    # latency i+1 ms
        b.drained()
    lat = check(p)["perf"]["overall"]["latency_ms"]
    import math
    assert lat == {q: float(max(1, math.ceil(f * n))) for q, f in
                   (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0))}


def test_same_message_twice_to_one_consumer_is_out_of_order(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.deliver(5, "1-0")
        b.deliver(5, "1-0")  # unflagged: seq does not increase
        b.drained()
    r = check(p)
    assert r["ordering"]["violation_count"] == 1
    assert r["queue"]["unflagged_duplicated"] == ["1-0"]
