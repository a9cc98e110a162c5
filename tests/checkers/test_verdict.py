"""The verdict word (checkers.verdict): a valid run that tested nothing is "valid but weak"."""

from __future__ import annotations

from typing import Any

import pytest

from checkers.verdict import is_weak, verdict_word

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
