"""The consumer-timeout rule, its names and its section.

A consumer that holds a delivery past its timeout (x-consumer-timeout, the
queue's argument, a policy, or rabbitmq.conf's consumer_timeout) has its
unacknowledged messages returned; on 4.3 a client advertising
consumer_cancel_notify is sent basic.cancel, which workloads.clients records
as an ok op f "cancel" by "broker" with what it held (`holding`). The harness
records the setting at setup as an observation `f "consumer-timeout"`
(value: queue, timeout_ms); without it there is no section.

Judged, for each broker cancel: nothing was delivered to that consumer (its
process and tag) after the cancel (`delivered_after_cancel`); and each
message it held was delivered again flagged redelivered (`redelivered`), or
dead-lettered, after the delivery the consumer held it by (its last delivery
to that consumer before the cancel), else `unflagged` or `lost` (lost judged
only when the drain completed, else not judged). After that delivery, not
after the cancel: the broker returns the held messages as it sends the
cancel, and another client process may record a redelivery before the
cancelled consumer's process records the cancel (quorum-consumer-timeout-
healthy on 4.3.6, seed 4001: 0.4 ms before, twice in 29 cancels). Not judged in this
version: a channel the broker closed instead (406, clients without the
capability: its close op names no held messages), and the hand-over of a
single active consumer after a timeout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

CONSUMER_TIMEOUT: Final = "consumer-timeout"  # the harness's observation
SECTION: Final = "consumer_timeout"
DELIVERED_AFTER_CANCEL, UNFLAGGED, LOST = "delivered_after_cancel", "unflagged", "lost"
VIOLATIONS: Final = (DELIVERED_AFTER_CANCEL, UNFLAGGED, LOST)
REDELIVERED, DEAD_LETTERED, NOT_JUDGED_DRAIN = "redelivered", "dead_lettered", "drain_incomplete"


def settings_of(events: Iterable[Any]) -> dict[str, Any] | None:
    """Takes harness events in order (f, value). Returns the value of the last
    consumer-timeout observation, or None when the harness recorded none."""
    found = None
    for e in events:
        if e.f == CONSUMER_TIMEOUT and isinstance(e.value, dict):
            found = e.value
    return found


def section(settings: Mapping[str, Any], cancels: int, counts: Mapping[str, int],
            examples: list[dict[str, Any]]) -> dict[str, Any]:
    """Takes the settings, the broker's cancels, the count per outcome (of held messages; of
    deliveries after a cancel) and examples of violations. Returns the section: valid (false
    with a violation, "unknown" when nothing was judged, else true)."""
    violations = {k: counts.get(k, 0) for k in VIOLATIONS}
    bad = sum(violations.values())
    judged = counts.get(REDELIVERED, 0) + counts.get(DEAD_LETTERED, 0) + violations[UNFLAGGED] \
        + violations[LOST]
    return {"valid": False if bad else (True if cancels else "unknown"),
            "settings": dict(settings), "broker_cancels": cancels, "held_judged": judged,
            "redelivered": counts.get(REDELIVERED, 0),
            "dead_lettered": counts.get(DEAD_LETTERED, 0),
            "not_judged": {NOT_JUDGED_DRAIN: counts.get(NOT_JUDGED_DRAIN, 0)},
            "violation_count": bad, "violations": violations, "examples": examples}
