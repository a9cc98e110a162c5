"""The delayed-retry rule (RabbitMQ 4.3 quorum queues), its names and its section.

A quorum queue declared with x-delayed-retry-type, -min and -max (ms) holds a
returned message back until min(min x max(1, count), max) after the return,
where count is its delivery count (x-delivery-count) after the return
(rabbit_fifo:calculate_ready_at, 4.3.0-4.3.5; the 4.3.0 release notes give the
formula). Which returns are held depends on the type (rabbit_fifo:should_delay0)
and on whether the return counts as a failed delivery:
- a basic.reject with requeue is a failed delivery (rabbit_channel: modify,
  delivery_failed true): the count rises; held under "all" and "failed";
- a basic.nack with requeue is not (rabbit_channel: requeue, a plain return):
  the count stays, x-acquired-count rises; held under "all" and "returned";
- a consumer lost with the message (its channel or connection ended, the
  queue sees the process down) is a failed delivery (rabbit_fifo:handle_down,
  return_all(..., down)): held under "all" and "failed"; but a consumer on a
  node the leader lost contact with keeps its messages for
  consumer_disconnected_timeout (60 s) and then returns them as not failed
  (return_all(..., false)), or as failed when the node comes back and the
  process is found gone: which path a node's loss took is not in the history.
Past the delivery limit the queue dead-letters (or drops) the message. The
harness records the settings at setup as an observation `f "delayed-retry"`
(value: queue, type, min_ms, max_ms, delivery_limit); without it, no section.

Every return is judged or counted as not judged with its reason. A return is a
client op `ok` f "reject" or "nack" (kind REJECT, NACK), or a delivery the
consumer never settled (kind LOST): the next op of that message is not the
same consumer's ack, reject or nack. Its *moment* is the earliest the broker
could have returned it: a reject's or nack's own time (the client sends it
then; the broker applies it later, so the true delay is shorter than the one
measured and an early verdict stands); for a lost delivery, when nothing else
could have ended the consumer in between (no fault window overlaps the time
from the delivery to the consumer's end but kills of other nodes), the
invocation of the harness's own
close of that consumer (f "close", by the harness: its closes at the end of
the main phase and the planted crashes; the channel lives until then); when
the consumer's connection was lost (an `info` f "close" by the broker) and
the only faults overlapping were kills of the consumer's node, the kill's
invocation (the node cannot die before it). A kill of another node does not
count as a fault here: the consumer's channel lives on, and the queue treats
as lost (noconnection) only processes on the node it lost (rabbit_fifo,
`{down, Pid, noconnection}`); a new leader re-monitors the same consumer.
Anything else (a partition or another fault in between, a loss with no kill
of its node, no end at all, a next delivery before that moment) cannot be
bounded (not judged
"unbounded"); a delivery a consumer held when the broker cancelled it (a
consumer timeout: checkers.timeouts judges those) is not judged
"consumer_timeout".

For a judged return, the next delivery of the message must come no earlier
than its delay after the return's moment, less TOLERANCE_MS (the history's
clock is the harness's one monotonic clock, so it has no skew of its own; the
queue leader's wall clock at the return (Ra's system_time, kept monotonic per
queue) decides when the message is ready, and a leader change mid-delay hands
the ready time to another node's clock: a finding beside a fault is to be read
so); the delay counts only when the type holds that kind of return (a node's
loss under "failed" or "returned": either path is possible, not judged
"return_path"; a nack whose next delivery's count rose went back another way,
e.g. its consumer lost before the nack was applied: under a type other than
"all", not judged "return_path"). The next delivery must be flagged
redelivered, carry a count within the limit and no fewer than the message's
rejects so far (a reject raises the count and nothing lowers it; a lost
consumer and a nack raise it or not, so more is no violation: `count_low`);
a return never followed by a delivery must be dead-lettered (an op f
"dead-letter"), else it is gone (judged only when the drain completed). The
count is the next delivery's x-delivery-count where the broker set one, else
the rejects of the message so far (the least the rule allows). (RabbitMQ
4.3.6, every stored delayed-retry run: the count after a reject equalled the
rejects so far in all but a few returns after a kill, which were above.)
A reject's or nack's time bounds its moment only in histories whose client
records it before pika writes it (since commit 07e3ba1): in the two stored
runs recorded before (quorum-delayed-retry-healthy and quorum-delayed-retry
on 4.3.6, seed 4001) one reject and one nack, recorded 63 and 72 ms after
their delivery was read, came back 142 and 139 ms after against 200: the
recording, not the broker (from the delivery's read, both waited over 200).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

DELAYED_RETRY: Final = "delayed-retry"  # the harness's observation, and the section's key
SECTION: Final = "delayed_retry"
REJECT: Final = "reject"
NACK: Final = "nack"
LOST: Final = "lost"  # a delivery its consumer never settled: returned when the consumer ended
KINDS: Final = (REJECT, NACK, LOST)
TOLERANCE_MS: Final = 50
# What a judged return can be, violations first in the order they are reported.
EARLY, UNFLAGGED, PAST_LIMIT, GONE = "early", "unflagged", "past_limit", "gone"
COUNT_LOW: Final = "count_low"
VIOLATIONS: Final = (EARLY, UNFLAGGED, COUNT_LOW, PAST_LIMIT, GONE)
REDELIVERED, DEAD_LETTERED = "redelivered", "dead_lettered"
# Why a return is not judged.
NOT_JUDGED_DRAIN: Final = "drain_incomplete"
NOT_JUDGED_UNBOUNDED: Final = "unbounded"
NOT_JUDGED_TIMEOUT: Final = "consumer_timeout"
NOT_JUDGED_PATH: Final = "return_path"
NOT_JUDGED: Final = (NOT_JUDGED_DRAIN, NOT_JUDGED_UNBOUNDED, NOT_JUDGED_TIMEOUT, NOT_JUDGED_PATH)
# Which types hold back a return that is a failed delivery (the count rises) or not.
DELAYS_FAILED: Final = ("all", "failed")
DELAYS_RETURNED: Final = ("all", "returned")
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


def section(settings: Mapping[str, Any], counts: Mapping[tuple[str, str], int],
            examples: list[dict[str, Any]]) -> dict[str, Any]:
    """Takes the settings, the count of returns per (kind, outcome) (an outcome is a violation,
    REDELIVERED, DEAD_LETTERED, or why not judged) and examples of violations (each with its
    timeline). Returns the section: valid (false with a violation, "unknown" when nothing was
    judged, else true), judged, not judged (by reason), violations, the same per kind
    (`by_kind`: returns, judged, each outcome seen), examples, the tolerance and the note on
    clocks."""
    total: dict[str, int] = {}
    for (_, outcome), n in counts.items():
        total[outcome] = total.get(outcome, 0) + n
    violations = {k: total.get(k, 0) for k in VIOLATIONS}
    not_judged = {k: total.get(k, 0) for k in NOT_JUDGED}
    judged = sum(violations.values()) + total.get(REDELIVERED, 0) + total.get(DEAD_LETTERED, 0)
    bad = sum(violations.values())
    by_kind = {}
    for kind in KINDS:
        mine = {o: n for (k, o), n in counts.items() if k == kind and n}
        by_kind[kind] = {"returns": sum(mine.values()),
                         "judged": sum(n for o, n in mine.items() if o not in NOT_JUDGED),
                         "outcomes": dict(sorted(mine.items()))}
    return {"valid": False if bad else (True if judged else "unknown"),
            "settings": dict(settings), "tolerance_ms": TOLERANCE_MS,
            "returns": judged + sum(not_judged.values()), "judged": judged,
            "redelivered": total.get(REDELIVERED, 0),
            "dead_lettered": total.get(DEAD_LETTERED, 0),
            "not_judged": not_judged, "violation_count": bad, "violations": violations,
            "by_kind": by_kind, "examples": examples, "note": NOTE}
