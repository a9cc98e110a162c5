"""Results assembly: Jepsen-style validity merging, guarded checkers, gaps, queue validity."""

from __future__ import annotations

from typing import Any

import pytest

from checkers.options import CheckOptions
from checkers.phases import DrainState
from checkers.results import (
    QUEUE_COUNTS,
    Gap,
    check_safe,
    compose,
    longest_gap,
    lost_proven,
    merge_valid,
    queue_section,
    top_reasons,
    unaccounted,
)


@pytest.mark.parametrize(("valids", "merged"), [
    ([], True), ([True, True], True), ([True, "unknown"], "unknown"),
    (["unknown", False, True], False), ([True, None], "unknown"),
])
def test_merge_valid(valids: list[Any], merged: Any) -> None:
    assert merge_valid(valids) == merged


def test_compose_turns_a_raising_checker_into_unknown() -> None:
    def boom() -> dict[str, Any]:
        raise RuntimeError("no")

    r = compose({"a": check_safe("a", lambda: {"valid": True}), "b": check_safe("b", boom)})
    assert r["valid"] == "unknown" and r["a"] == {"valid": True}
    assert r["b"]["valid"] == "unknown" and r["b"]["error"] == "RuntimeError: no"


def test_longest_gap_counts_phase_edges_and_prefers_the_earliest() -> None:
    assert longest_gap([], 10, 30) == Gap(10, 30)
    assert longest_gap([15, 20, 25], 10, 30) == Gap(10, 15)
    assert longest_gap([12, 20, 22], 10, 30) == Gap(12, 20)
    assert longest_gap([5, 40], 10, 30) == Gap(10, 30)
    assert longest_gap([10], 10, 10) == Gap(10, 10)


def counts(**kw: int) -> dict[str, int]:
    return {**dict.fromkeys(QUEUE_COUNTS, 0), **kw}


@pytest.mark.parametrize(("kw", "drained", "opts", "valid"), [
    ({}, True, {}, True),
    ({}, False, {}, True),  # nothing lost: the drain cannot change the verdict
    ({}, False, {"require_drain": False}, True),
    ({"lost_count": 1}, True, {}, False),
    ({"lost_count": 1}, False, {}, "unknown"),
    ({"lost_count": 1}, False, {"require_drain": False}, False),
    ({"lost_count": 1, "lost_unacked_count": 1}, False, {}, "unknown"),
    ({"lost_count": 1, "unexpected_count": 1}, False, {}, False),
    ({"delivered_failed_count": 1}, True, {}, True),  # a nack is no promise of absence
    ({"delivered_failed_count": 1}, False, {}, True),
    ({"unflagged_duplicated_count": 1}, True, {}, False),
    ({"unflagged_duplicated_count": 1}, True, {"unflagged_duplicates_invalid": False}, True),
    ({"unflagged_after_ack_count": 1}, False, {}, False),
    ({"unflagged_after_ack_count": 1}, True, {"unflagged_duplicates_invalid": False}, True),
    ({"redelivered_duplicated_count": 1}, True, {}, True),
    ({"redelivered_duplicated_count": 1}, True, {"flagged_duplicates_invalid": True}, False),
])
def test_queue_validity(kw: dict[str, int], drained: bool, opts: dict[str, Any],
                        valid: Any) -> None:
    drain = DrainState(True) if drained else DrainState(False, "the drain did not complete: x")
    s = queue_section(counts(**kw), {}, drain, CheckOptions(**opts))
    assert s["valid"] == valid
    assert ("reason" in s) == (valid == "unknown")
    if valid == "unknown":
        assert s["reason"].startswith("the drain did not complete: x: ")
    assert s["drain_reason"] == drain.reason
    assert "delivered_failed" not in s["anomalies"]


def test_queue_anomalies_and_explanations() -> None:
    s = queue_section(counts(lost_count=2, lost_unacked_count=1, unflagged_after_ack_count=1,
                             unflagged_duplicated_count=1, delivered_failed_count=1),
                      {"lost_unacked": ["1-7"]}, DrainState(False, "the drain did not complete"),
                      CheckOptions())
    assert s["valid"] is False
    assert s["anomalies"] == ["lost", "lost_unacked", "unflagged_duplicated",
                              "unflagged_after_ack"]
    ex = s["explanations"]
    assert list(ex) == ["lost", "lost_unacked", "unflagged_duplicated", "unflagged_after_ack",
                        "delivered_failed"]
    assert ex["lost_unacked"].startswith("1 message. ") and "Example: 1-7." in ex["lost_unacked"]
    assert "not proven lost" in ex["lost"]
    assert "For first time deliveries it will be set to false" in ex["unflagged_after_ack"]


def test_top_reasons_orders_by_count_then_text_and_names_none() -> None:
    assert top_reasons({"nack": 2, None: 2, "a": 1, "b": 3}, 3) == {
        "b": 3, "(none)": 2, "nack": 2}


def test_a_users_dead_letter_exchange_makes_lost_unknown_only_when_a_limit_drops_into_it() -> None:
    user = {"queue": "q", "exchange": "mine", "dead_letter_queue": None, "by": "user",
            "limits": ["max length 5 (drop-head)"]}
    lost = counts(lost_count=1)
    s = queue_section(lost, {}, DrainState(True), CheckOptions(), dead_lettering=user)
    assert s["valid"] == "unknown" and s["dead_lettering"] == user
    assert s["reason"].startswith("the queue drops messages by design (max length 5 "
                                  "(drop-head)) into the user's dead-letter exchange 'mine'")
    assert unaccounted(user) is not None and not lost_proven(DrainState(True), CheckOptions(),
                                                             user)
    # No limit of the harness's: nothing drops into it by design, so a loss is a loss.
    no_limit = {**user, "limits": []}
    assert queue_section(lost, {}, DrainState(True), CheckOptions(),
                         dead_lettering=no_limit)["valid"] is False
    # The harness's own is read back: a missing message without a dead letter is lost.
    harness = {**user, "by": "harness", "dead_letter_queue": "q.harness-dlq"}
    assert unaccounted(harness) is None
    assert queue_section(lost, {}, DrainState(True), CheckOptions(),
                         dead_lettering=harness)["valid"] is False
    # Another anomaly is false whatever the dead letters.
    assert queue_section(counts(lost_count=1, unexpected_count=1), {}, DrainState(True),
                         CheckOptions(), dead_lettering=user)["valid"] is False


def test_dropped_by_design_is_reported_never_an_anomaly() -> None:
    s = queue_section(counts(dropped_by_design_count=3, dead_lettered_count=3), {},
                      DrainState(True), CheckOptions(),
                      dropped=({"maxlen": 2, "delivery_limit": 1},
                               {"maxlen": ["1-0", "1-1"], "delivery_limit": ["1-2"]}))
    assert s["valid"] is True and s["anomalies"] == []
    assert s["dropped_by_design_reasons"] == {"maxlen": 2, "delivery_limit": 1}
    assert s["dropped_by_design_examples"]["maxlen"] == ["1-0", "1-1"]
    assert list(s["explanations"]) == ["dropped_by_design"]
    assert s["explanations"]["dropped_by_design"].startswith("3 messages. Never delivered")
    assert s["explanations"]["dropped_by_design"].endswith(
        "Example: 1-0. By reason: maxlen 2, delivery_limit 1.")
