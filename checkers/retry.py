"""The delayed-retry rule (RabbitMQ 4.3 quorum queues), its names and its section.

A quorum queue declared with x-delayed-retry-type, -min and -max (ms) makes a
returned message ready again only after min(min x its delivery count, max).
The delivery count (x-delivery-count) rises on a basic.reject and on a
consumer lost with the message, not on a basic.nack with requeue; past the
delivery limit the queue dead-letters (or drops) the message. The harness
records the settings at setup as an observation `f "delayed-retry"` (value:
queue, type, min_ms, max_ms, delivery_limit); without it there is no section.

For every *return* the section can judge, a client op `ok` f "reject" (the
consumer's basic.reject with requeue), the next delivery of that message must
come no earlier than its delay after the reject, less TOLERANCE_MS (the
history's clock is the harness's one monotonic clock, so it has no skew of
its own; the queue leader's wall clock decides when the message is ready, and
a leader change mid-delay may move it: a finding beside a fault is to be read
so), be flagged redelivered, carry a delivery count within the limit, and
carry no fewer counted returns than the message's rejects so far (a reject
raises the count and nothing lowers it; a consumer lost with the message
raises it too, so more is no violation: `count_low` when the broker's
x-delivery-count is below the rejects so far, judged where the broker gave a
count); a return never followed by a delivery must be dead-lettered (an op f
"dead-letter"), else it is gone (judged only when the drain completed). The
count is the next delivery's x-delivery-count where the broker set one, else
the rejects of the message so far. (RabbitMQ 4.3.6, every stored delayed-retry
run: the count after a reject equalled the rejects so far in all but a few
returns after a kill, which were above.) A nack's return is not judged: whether and
how long the broker delays it is not stated plainly enough to judge
(not_judged "nack"); nor is a message held by a cancelled consumer (its return
moment is its channel's end: not judged in this version).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

DELAYED_RETRY: Final = "delayed-retry"  # the harness's observation, and the section's key
SECTION: Final = "delayed_retry"
REJECT: Final = "reject"
NACK: Final = "nack"
TOLERANCE_MS: Final = 50
# What a judged return can be, violations first in the order they are reported.
EARLY, UNFLAGGED, PAST_LIMIT, GONE = "early", "unflagged", "past_limit", "gone"
COUNT_LOW: Final = "count_low"
VIOLATIONS: Final = (EARLY, UNFLAGGED, COUNT_LOW, PAST_LIMIT, GONE)
REDELIVERED, DEAD_LETTERED = "redelivered", "dead_lettered"
# Why a return is not judged.
NOT_JUDGED_NACK, NOT_JUDGED_DRAIN = "nack", "drain_incomplete"
NOTE: Final = ("the queue leader's wall clock decides when a delayed message is ready again; a "
               "leader change during a delay may move it, so read an early redelivery beside "
               "a fault with that in mind")


def settings_of(events: Iterable[Any]) -> dict[str, Any] | None:
    """Takes harness events in order (f, value). Returns the value of the last delayed-retry
    observation, or None when the harness recorded none (no delayed retry, or an older run)."""
    found = None
    for e in events:
        if e.f == DELAYED_RETRY and isinstance(e.value, dict):
            found = e.value
    return found


def section(settings: Mapping[str, Any], counts: Mapping[str, int],
            examples: list[dict[str, Any]]) -> dict[str, Any]:
    """Takes the settings, the count of returns per outcome (a violation, REDELIVERED,
    DEAD_LETTERED, or why not judged)
    and examples of violations (each with its timeline). Returns the section: valid (false with
    a violation, "unknown" when nothing was judged, else true), judged, not judged, violations,
    examples, the tolerance and the note on clocks."""
    violations = {k: counts.get(k, 0) for k in VIOLATIONS}
    not_judged = {k: counts.get(k, 0) for k in (NOT_JUDGED_NACK, NOT_JUDGED_DRAIN)}
    judged = sum(violations.values()) + counts.get(REDELIVERED, 0) + counts.get(DEAD_LETTERED, 0)
    bad = sum(violations.values())
    return {"valid": False if bad else (True if judged else "unknown"),
            "settings": dict(settings), "tolerance_ms": TOLERANCE_MS,
            "returns": judged + sum(not_judged.values()), "judged": judged,
            "redelivered": counts.get(REDELIVERED, 0),
            "dead_lettered": counts.get(DEAD_LETTERED, 0),
            "not_judged": not_judged, "violation_count": bad, "violations": violations,
            "examples": examples, "note": NOTE}
