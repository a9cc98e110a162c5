"""Literal histories with dead letters: what the queue dropped by design is told apart from
loss. Every check is also worked out by the oracle, which must agree field by field."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkers.traces import traces_of
from tests.checkers.histories import Builder
from tests.checkers.test_literal import check, expected_queue, queue_of

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]

HARNESS_DLX = {"queue": "q", "exchange": "q.harness-dlx", "dead_letter_queue": "q.harness-dlq",
               "by": "harness", "limits": ["max length 5 (drop-head)"]}


def test_messages_the_queue_dropped_by_design_are_not_lost(tmp_path: Path) -> None:
    # The run in small: a max length drops the oldest, a delivery limit drops one
    # returned too often; both come back from the harness's dead-letter queue. No fault.
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.dead_lettering()
        for seq in range(5):
            b.publish(1, seq)
        b.consume(2, "1-3")
        b.consume(2, "1-4")
        b.deliver(3, "1-2")  # returned unacked (its channel closed), and again, past the limit
        b.deliver(4, "1-2", redelivered=True)
        b.phase("drain", "start")
        b.dead_letter(9, "1-0")
        b.dead_letter(9, "1-1")
        b.dead_letter(9, "1-2", "delivery_limit", count=2)
        b.phase("drain", "end")
    r = check(p)
    assert r["valid"] is True
    assert queue_of(r) == expected_queue(
        acks_recorded=True, attempt_count=5, acknowledged_count=5, ok_count=2,
        delivery_count=4, acked_delivery_count=2, dead_lettered_count=3,
        dropped_by_design_count=3,
        dropped_by_design_reasons={"maxlen": 2, "delivery_limit": 1},
        dropped_by_design_examples={"maxlen": ["1-0", "1-1"], "delivery_limit": ["1-2"]},
        dead_lettering=HARNESS_DLX, explanations=["dropped_by_design"])
    assert r["queue"]["explanations"]["dropped_by_design"].startswith("3 messages. ")
    assert "By reason: maxlen 2, delivery_limit 1." in r["queue"]["explanations"][
        "dropped_by_design"]
    assert r["fates"]["totals"] == {"delivered": 2, "dropped_by_design": 3}


def test_only_a_confirmed_message_gone_without_a_dead_letter_is_lost(tmp_path: Path) -> None:
    # 1-0 dropped; 1-1 vanished (lost); 1-2 delivered and also dead-lettered (delivered);
    # 2-0's publish timed out, and the queue dropped it (dropped, though never confirmed).
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.dead_lettering()
        b.publish(1, 0)
        b.publish(1, 1)
        b.publish(1, 2)
        b.publish(2, 0, "info")
        b.deliver(3, "1-2")
        b.phase("drain", "start")
        b.dead_letter(9, "1-0")
        b.dead_letter(9, "2-0", "expired")
        b.dead_letter(9, "1-2", "rejected")
        b.phase("drain", "end")
    r = check(p)
    assert r["valid"] is False
    assert queue_of(r) == expected_queue(
        valid=False, anomalies=["lost"], attempt_count=4, acknowledged_count=3, info_count=1,
        ok_count=1, lost_count=1, lost=["1-1"], delivery_count=1, dead_lettered_count=3,
        dropped_by_design_count=2, dropped_by_design_reasons={"expired": 1, "maxlen": 1},
        dropped_by_design_examples={"expired": ["2-0"], "maxlen": ["1-0"]},
        dead_lettered_delivered_count=1, dead_lettered_delivered=["1-2"],
        dead_lettering=HARNESS_DLX,
        explanations=["lost", "dropped_by_design", "dead_lettered_delivered"])
    assert r["fates"]["totals"] == {"delivered": 1, "dropped_by_design": 2, "lost": 1}
    # 1-0 (dropped by design) and 1-2 (delivered) were confirmed around it: a lost middle.
    assert r["queue"]["loss"]["by_kind"] == {"middle": {"runs": 1, "messages": 1}}
    # The traces of a sampled id carry its dead letter among its ops.
    traces = traces_of(r)
    assert traces is not None
    assert [(o.type, o.f) for o in traces.ops["1-2"]] == [
        ("invoke", "publish"), ("ok", "publish"), ("ok", "consume"), ("ok", "dead-letter")]


def test_a_limit_dropping_into_the_users_exchange_leaves_missing_messages_unknown(
        tmp_path: Path) -> None:
    users = {"queue": "q", "exchange": "mine", "dead_letter_queue": None, "by": "user",
             "limits": ["delivery limit 20 (RabbitMQ 4.0's default)"]}
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.dead_lettering("user", tuple(users["limits"]))
        b.publish(1, 0)
        b.publish(1, 1)
        b.consume(2, "1-1")
        b.drained()
    r = check(p)
    q = r["queue"]
    assert r["valid"] == "unknown" and q["valid"] == "unknown" and q["lost"] == ["1-0"]
    assert q["drain_complete"] is True and q["dead_lettering"] == users
    assert q["reason"] == (
        "the queue drops messages by design (delivery limit 20 (RabbitMQ 4.0's default)) into "
        "the user's dead-letter exchange 'mine', which the harness does not read: lost "
        "messages cannot be told from messages dropped")
    assert "not proven lost" in q["explanations"]["lost"]
    assert r["fates"]["totals"] == {"delivered": 1, "unproven": 1}
