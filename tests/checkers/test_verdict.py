"""The verdict word (checkers.verdict): a valid run that tested nothing is "valid but weak"."""

from __future__ import annotations

from typing import Any

import pytest

from checkers.verdict import is_weak, lost_is_proven, verdict_word

WEAK = {"weak": True, "reason": "none of 6 partitions was noticed"}
STRONG = {"weak": False, "reason": ""}


@pytest.mark.parametrize(("results", "word", "weak"), [
    ({"valid": True}, "valid", False),
    ({"valid": True, "strength": STRONG}, "valid", False),
    ({"valid": True, "strength": WEAK}, "valid but weak", True),
    ({"valid": False, "strength": WEAK}, "invalid", False),
    ({"valid": "unknown", "strength": WEAK}, "unknown", False),
    ({"valid": True, "strength": {"weak": "yes"}}, "valid", False),
    ({"valid": True, "strength": [1]}, "valid", False),
    ({}, "unknown", False),
    (None, "unknown", False),
    ([True], "unknown", False),
])
def test_verdict_word_and_weakness(results: Any, word: str, weak: bool) -> None:
    assert verdict_word(results) == word
    assert is_weak(results) is weak


def test_a_lost_count_is_proven_only_by_a_true_or_false_queue_verdict():
    assert lost_is_proven(True) and lost_is_proven(False)
    assert not lost_is_proven("unknown") and not lost_is_proven(None)
    # A row stored before the queue's verdict was kept reads the run's in its place; a queue
    # verdict, when there is one, wins over the run's.
    assert lost_is_proven(None, False) and not lost_is_proven(None, "unknown")
    assert not lost_is_proven("unknown", True)
