"""The one verdict word a run's results earn, for every page, table and CI file that shows one.

results.json's top-level "valid" (shared/DESIGN.md) says whether the checkers found an
anomaly; its "strength" section (issue 19) says whether the faults tested anything. A valid
run whose faults RabbitMQ never noticed, or that had nothing at risk when its faults began,
is *valid but weak*: it is never a pass. Results without a strength section (older runs)
read as they always did. `verdict_word` gives the word, `is_weak` the question alone.
It sits with the checkers, whose results it reads: the harness's exit codes and matrix
judgements and every page of reports/ ask it the same question.
"""

from __future__ import annotations

from typing import Any, Literal

Word = Literal["valid", "valid but weak", "invalid", "unknown"]

VALID: Word = "valid"
WEAK: Word = "valid but weak"
INVALID: Word = "invalid"
UNKNOWN: Word = "unknown"


def is_weak(results: Any) -> bool:
    """Takes results.json's content (anything). Returns whether the run is valid but weak: its
    top-level "valid" is true and its strength section says weak. An invalid or unknown run is
    never called weak: its own verdict says more."""
    if not isinstance(results, dict) or results.get("valid") is not True:
        return False
    strength = results.get("strength")
    return isinstance(strength, dict) and strength.get("weak") is True


def verdict_word(results: Any) -> Word:
    """Takes results.json's content (anything). Returns "valid", "valid but weak", "invalid" or
    "unknown" (no results, or results that are not an object, are unknown)."""
    if not isinstance(results, dict):
        return UNKNOWN
    valid = results.get("valid")
    if valid is False:
        return INVALID
    if valid is True:
        return WEAK if is_weak(results) else VALID
    return UNKNOWN
