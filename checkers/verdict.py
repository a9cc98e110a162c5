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


def lost_is_proven(queue_valid: Any, run_valid: Any = None) -> bool:
    """Takes a queue section's verdict (results.json's queue "valid", a matrix row's
    `queue_valid`) and the run's own verdict, read in its place when the queue's is None (rows
    stored before the queue's verdict was kept). Returns whether a drain proved the lost count:
    a true or false verdict; "unknown" (the drain did not prove the queue empty) or none is
    not proof. The one rule for "(unproven)" beside a lost count: the matrix's table
    (harness.matrix.Row.lost_proven), its page (reports.matrix_page.lost_text) and the store's
    index (reports.index) all ask it."""
    said = run_valid if queue_valid is None else queue_valid
    return said is True or said is False
