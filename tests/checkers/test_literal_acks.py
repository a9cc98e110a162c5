"""Literal histories through the Spark checker (the oracle agreeing): the drain's outcome,
consumer acks, and a message delivered unflagged after a flagged redelivery of it was acked
(issue 10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from history import BLOCKED_ERROR
from tests.checkers.histories import Builder
from tests.checkers.test_literal import check, expected_queue, queue_of

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]

# -- the drain's outcome (issue 10, item 2) ---------------------------------------------------


def test_drain_end_saying_incomplete_is_incomplete(tmp_path: Path) -> None:
    # state "end" but complete=false: the drain did not prove anything, and its reason is kept.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.drain_end("end", complete=False, reason="queue not drained: timeout on n1")
    q = check(p)["queue"]
    assert q["valid"] == "unknown" and q["drain_complete"] is False
    assert "queue not drained: timeout on n1" in q["reason"]
    assert "queue not drained: timeout on n1" in q["drain_reason"]
    assert q["lost"] == ["1-0"] and "not proven lost" in q["explanations"]["lost"]


def test_drain_end_saying_complete_proves_loss(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.drain_end("end", complete=True)
    q = check(p)["queue"]
    assert q["valid"] is False and q["drain_complete"] is True and q["drain_reason"] is None


def test_nothing_lost_needs_no_drain(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.deliver(2, "1-0")
        b.drain_end("incomplete", complete=False, reason="n3 refused")
    r = check(p)
    assert r["valid"] is True and r["queue"]["valid"] is True
    assert r["queue"]["drain_complete"] is False and "n3 refused" in r["queue"]["drain_reason"]


# -- consumer acknowledgements (issue 10, item 3) ---------------------------------------------


def test_unacked_delivery_redelivered_elsewhere_is_not_a_duplicate(tmp_path: Path) -> None:
    # Consumer 5 crashed holding 1-0; the broker redelivered it (flagged) to 6, which acked it.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.publish(1, 1)
        b.deliver(5, "1-0")
        b.consume(6, "1-0", redelivered=True)
        b.consume(6, "1-1")
        b.drained()
    assert queue_of(check(p)) == expected_queue(
        acks_recorded=True, attempt_count=2, acknowledged_count=2, ok_count=2,
        delivery_count=3, acked_delivery_count=2)


def test_delivered_but_never_acked_is_lost_unacked(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.publish(1, 1)
        b.consume(5, "1-0")
        b.deliver(5, "1-1")  # the channel closed before the ack; never delivered again
        b.drained()
    r = check(p)
    assert queue_of(r) == expected_queue(
        valid=False, anomalies=["lost", "lost_unacked"], acks_recorded=True, attempt_count=2,
        acknowledged_count=2, ok_count=1, lost_count=1, lost=["1-1"], lost_unacked_count=1,
        lost_unacked=["1-1"], delivery_count=2, acked_delivery_count=1,
        explanations=["lost", "lost_unacked"])
    assert r["queue"]["loss"]["by_kind"] == {"suffix": {"runs": 1, "messages": 1}}


def test_ack_pairs_with_the_latest_delivery_of_its_stream(tmp_path: Path) -> None:
    # 1-0 reaches consumer 5 twice on one channel (the second flagged) and is acked once: one
    # consumption, so no duplicate; an unacked unflagged delivery elsewhere counts for nothing.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.deliver(5, "1-0")
        b.deliver(6, "1-0")
        b.deliver(5, "1-0", redelivered=True)
        b.ack(5, "1-0")
        b.drained()
    q = check(p)["queue"]
    assert q["valid"] is True and q["duplicated"] == [] and q["acked_delivery_count"] == 1
    assert q["delivery_count"] == 3 and q["unflagged_after_ack"] == []


def test_duplicates_count_acked_deliveries(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.publish(1, 1)
        b.consume(5, "1-0")
        b.consume(6, "1-0")                      # acked twice, unflagged: a duplicate
        b.consume(5, "1-1")
        b.consume(7, "1-1", redelivered=True)    # acked twice, the extra flagged
        b.drained()
    q = check(p)["queue"]
    assert (q["duplicated"], q["unflagged_duplicated"], q["redelivered_duplicated"]) == (
        ["1-0", "1-1"], ["1-0"], ["1-1"])
    assert q["valid"] is False and q["anomalies"] == ["unflagged_duplicated"]


def test_unexpected_counts_unacked_deliveries(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.consume(5, "1-0")
        b.deliver(5, "9-9")
        b.drained()
    q = check(p)["queue"]
    assert q["unexpected"] == ["9-9"] and q["valid"] is False and q["ok_count"] == 1


# -- redelivered=false after an acked redelivery (issue 10, item 5) ----------------------------


def test_unflagged_delivery_after_acked_redelivery(tmp_path: Path) -> None:
    # The quorum-ignore pattern: in flight to 5 (minority) when the partition began, redelivered
    # (flagged) to 6 and acked there, then delivered to 5 again, unflagged, after the heal.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.publish(1, 1)
        b.deliver(5, "1-0")
        b.consume(6, "1-0", redelivered=True)
        b.consume(5, "1-0")
        b.consume(6, "1-1", redelivered=True)   # flagged, acked, never again: fine
        b.drained()
    r = check(p)
    q = r["queue"]
    assert q["unflagged_after_ack"] == ["1-0"] and q["unflagged_after_ack_count"] == 1
    # A channel acks its deliveries in the order they came (first in, first out): 5's one ack
    # is of its first delivery, so the second, unflagged one was never acked, and the message
    # was consumed twice, the second time flagged. The unflagged delivery after the acked
    # redelivery is still the anomaly, and still invalid.
    assert q["unflagged_duplicated"] == [] and q["redelivered_duplicated"] == ["1-0"]
    assert q["valid"] is False
    assert q["anomalies"] == ["unflagged_after_ack"]
    text = q["explanations"]["unflagged_after_ack"]
    assert "For first time deliveries it will be set to false" in text and "1-0" in text


def test_unflagged_after_flagged_without_acks_recorded(tmp_path: Path) -> None:
    # An older history: every delivery counts as acked at its own place.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.deliver(5, "1-0", redelivered=True)
        b.deliver(6, "1-0")
        b.drained()
    q = check(p)["queue"]
    assert q["unflagged_after_ack"] == ["1-0"] and q["acks_recorded"] is False


def test_unflagged_before_the_flagged_ack_is_not_after_ack(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.deliver(6, "1-0", redelivered=True)
        b.deliver(5, "1-0")          # unflagged, but before 6 acked the flagged delivery
        b.ack(6, "1-0")
        b.drained()
    q = check(p)["queue"]
    assert q["unflagged_after_ack"] == [] and q["valid"] is True


@pytest.mark.parametrize(("gap_ms", "found"), [(5_000.0, True), (500.0, False)])
def test_an_unacked_delivery_handed_out_again_unflagged_is_reported(
        tmp_path: Path, gap_ms: float, found: bool) -> None:
    # RabbitMQ 4.3's classic queue after a graceful restart: delivered to 5, still unacked when
    # the queue stopped, delivered again unflagged to 6 after the restart. No ack of the first:
    # not a duplicate, not unflagged_after_ack; unflagged_redelivered, reported, and invalid
    # only when asked. 500 ms after the first is within what a dying consumer may record late.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.at(100).deliver(5, "1-0")
        b.at(100 + gap_ms).consume(6, "1-0")
        b.drained()
    q = check(p)["queue"]
    assert q["unflagged_redelivered"] == (["1-0"] if found else [])
    assert q["duplicated"] == [] and q["unflagged_after_ack"] == [] and q["valid"] is True
    strict = check(p, unflagged_redeliveries_invalid=True)["queue"]
    assert strict["valid"] is (not found)
    if found:
        assert strict["anomalies"] == ["unflagged_redelivered"]
        assert "1-0" in strict["explanations"]["unflagged_redelivered"]


def test_one_aggregate_pairs_acks_as_the_window_does(spark: Any, tmp_path: Path) -> None:
    # The message table pairs an id's one delivery and one ack in one aggregate, and leaves ids
    # with more to the window (checkers.spark_queue.message_table). Every way one delivery and
    # one ack can stand, orphans included (a check stops at them), beside dead letters (which
    # pair with nothing) and publishes a blocked connection left unknown: the window's table.
    from checkers import spark_io, spark_queue

    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        for seq in range(8):
            b.publish(1, seq)
        for seq in range(8, 13):
            b.publish(1, seq)
        b.publish(1, 13, "info", error=BLOCKED_ERROR)          # blocked: unknown, never consumed
        b.publish(1, 14, "info", error=BLOCKED_ERROR)          # blocked, then consumed
        b.consume(5, "1-0")                                    # paired
        b.consume(5, "1-1", redelivered=True)                  # paired, flagged
        b.ack(5, "1-2")                                        # the ack first: an orphan
        b.deliver(5, "1-2")
        b.deliver(5, "1-3")                                    # acked by another process:
        b.ack(6, "1-3")                                        # an orphan
        b.ack(6, "1-4")                                        # an ack alone: an orphan
        b.deliver(5, "1-5")                                    # a delivery alone
        b.deliver(5, "1-6")                                    # two deliveries: the window's
        b.consume(6, "1-6")
        b.deliver(6, "1-7", redelivered=True)                  # flagged, acked, then unflagged:
        b.ack(6, "1-7")                                        # the window's
        b.deliver(5, "1-7")
        b.consume(7, "2-0")                                    # never published
        b.consume(14, "1-14")
        b.dead_letter(9, "1-8")                                # dropped by design
        b.dead_letter(9, "1-9", reason="delivery_limit")       # dead-lettered after a delivery
        b.deliver(5, "1-9")                                    # its process never acked
        b.consume(5, "1-10")                                   # delivered and acked, then
        b.dead_letter(9, "1-10", reason="rejected")            # dead-lettered too
        b.dead_letter(9, "1-11", reason=None)                  # twice, the first's reason:
        b.dead_letter(9, "1-11", reason="expired")             # none
        b.deliver(9, "1-12")                                   # the dead-letter reader's own
        b.dead_letter(9, "1-12")                               # process delivers, then its
        b.ack(9, "1-12")                                       # dead letter, then the ack
    h = spark_io.load(spark, p, tmp_path, memory_limit=2**40)
    try:
        built = spark_queue.message_table(h, True, lambda df, _name: df)
        want = spark_queue.windowed(h.df)
        rows = [sorted((r.asDict() for r in t.collect()), key=lambda r: r["id"])
                for t in (built, want)]
        assert rows[0] == rows[1]
        by_id = {r["id"]: r for r in rows[0]}
        assert [i for i, r in by_id.items() if r["orphan_at"] is not None] == ["1-2", "1-3", "1-4"]
        # The table says where each id's first dead letter is; its reason is read there.
        reasons = {r["loc"]: r["reason"] for r in h.df.where(spark_io.is_dead_letter())
                   .select(spark_io.loc().alias("loc"), "reason").collect()}
        assert {i: (r["n_dead"], reasons[r["dead_loc"]])
                for i, r in by_id.items() if r["n_dead"]} == {
            "1-8": (1, "maxlen"), "1-9": (1, "delivery_limit"), "1-10": (1, "rejected"),
            "1-11": (2, None), "1-12": (1, "maxlen")}
        assert spark_queue.dropped_reasons(h, built, 10) == (
            {"(none)": 1, "delivery_limit": 1, "maxlen": 1},
            {"(none)": ["1-11"], "delivery_limit": ["1-9"], "maxlen": ["1-8"]})
        assert (by_id["1-12"]["n_acked"], by_id["1-14"]["n_acked"]) == (1, 1)
        assert [i for i, r in by_id.items() if r["comp_blocked"]] == ["1-13", "1-14"]
    finally:
        h.close()
