"""Results assembly: Jepsen-style validity merging, guarded checkers, gaps, queue validity."""

from __future__ import annotations

from typing import Any

import pytest

from checkers.options import CheckOptions
from checkers.results import (
    QUEUE_COUNTS,
    Gap,
    check_safe,
    compose,
    longest_gap,
    merge_valid,
    queue_section,
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
    ({}, False, {}, "unknown"),
    ({}, False, {"require_drain": False}, True),
    ({"lost_count": 1}, True, {}, False),
    ({"lost_count": 1}, False, {}, "unknown"),
    ({"lost_count": 1, "unexpected_count": 1}, False, {}, False),
    ({"delivered_failed_count": 1}, True, {}, False),
    ({"unflagged_duplicated_count": 1}, True, {}, False),
    ({"unflagged_duplicated_count": 1}, True, {"unflagged_duplicates_invalid": False}, True),
    ({"redelivered_duplicated_count": 1}, True, {}, True),
    ({"redelivered_duplicated_count": 1}, True, {"flagged_duplicates_invalid": True}, False),
])
def test_queue_validity(kw: dict[str, int], drained: bool, opts: dict[str, Any],
                        valid: Any) -> None:
    s = queue_section(counts(**kw), {}, drained, CheckOptions(**opts))
    assert s["valid"] == valid
    assert ("reason" in s) == (valid == "unknown")
