"""The consumer-timeout rule, its names and its section.

A consumer that holds a delivery past its timeout (x-consumer-timeout, the
queue's argument, a policy, or rabbitmq.conf's consumer_timeout) has its
unacknowledged messages returned, and the broker ends the consumer one of two
ways (RabbitMQ's consumers guide): a client advertising the
consumer_cancel_notify capability is sent basic.cancel (4.3), which
workloads.clients records as an ok op f "cancel" by "broker" with what it held
(`holding`); a client that does not advertise it has its channel closed with
406 PRECONDITION_FAILED, recorded as an info op f "close" by "broker" with the
`reply_code`, `reply_text` and `holding`. Both are a *timed-out consumer's
end* here (`how`: CANCELLED or CLOSED_406); a cancel sent to a client that did
not advertise the capability (`consumer_cancel_notify` false in the
observation) is a violation of its own (`cancel_without_capability`), and a
406 close of a client that advertised it is counted, not judged (RabbitMQ
4.4's channel closes a cancelled consumer's channel with 406 when a delivery it
still held times out: rabbitmq-server discussion 18207). The harness records the setting at
setup as an observation `f "consumer-timeout"` (value: queue, timeout_ms, and
whether the queue has a single active consumer); without it there is no
section.

Judged, for each timed-out consumer's end: nothing was delivered to that
consumer (its process and tag: one channel per process) after the end
(`delivered_after_cancel`); and each message it held was delivered again
flagged redelivered (`redelivered`), or dead-lettered, after the delivery the
consumer held it by (its last delivery to that consumer before the end), else
`unflagged` or `lost` (lost judged only when the drain completed, else not
judged). After that delivery, not after the end: the broker returns the held
messages as it sends the cancel, and another client process may record a
redelivery before the cancelled consumer's process records the cancel
(quorum-consumer-timeout-healthy on 4.3.6, seed 4001: 0.4 ms before, twice in
29 cancels).

A held message that was never delivered again but that its consumer
acknowledged after the end is `acked_after_end`, counted apart and not judged
as returned: RabbitMQ 4.3 returns only the messages whose timeout passed
(`rabbit_fifo`'s `evaluate_consumer_timeout` filters the consumer's checked-out
messages by their deadline) and sends the cancel; the others stay checked out
to the consumer, whose channel is still open, and its ack settles them
(`complete_and_checkout`). The harness's `holding` names every unacknowledged
delivery at the end, including one that arrived a moment before it
(quorum-consumer-timeout-khepri-minority on 4.3.6, seed 4003: 2-176 delivered
0.09 ms before the cancel was recorded, acked 2 ms after it, never back).

The hand-over (a queue with a single active consumer, `single_active_consumer`
in the observation): RabbitMQ's consumers guide says that when the active
consumer is cancelled or its channel closed, the queue activates another of its
consumers, and that a timed-out consumer is so ended. So after each timed-out
consumer's end, while the queue held ready messages (those the consumer held,
returned by the end, and those confirmed before it and not yet delivered, or
a ready count above 0 in a depth sample the harness took before the deadline),
another consumer must be fed (its first main-phase delivery after the ended
consumer's last one) within the run's liveness bound (checkers.liveness:
RabbitMQ's failure detection plus the harness's recovery grace), counted from
the end, or from the heal of a fault in effect within the bound (each such
fault restarts the count at its end, as liveness counts from the last heal).
The workload's consumers that the broker ended retire and their slot
subscribes again, as a new process, on the next node half a second later
(workloads.queue_workload), so the queue always has standby consumers. A
hand-over is `handed_over` when a delivery came by the deadline; else
`nothing_ready` when no message was ready (not judged), `run_ended` when the
main phase ended before the deadline (not judged), else `stalled`: a
violation, with its timeline.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from checkers.model import ns_to_ms

CONSUMER_TIMEOUT: Final = "consumer-timeout"  # the harness's observation
SECTION: Final = "consumer_timeout"
DELIVERED_AFTER_CANCEL, UNFLAGGED, LOST = "delivered_after_cancel", "unflagged", "lost"
VIOLATIONS: Final = (DELIVERED_AFTER_CANCEL, UNFLAGGED, LOST)
REDELIVERED, DEAD_LETTERED, NOT_JUDGED_DRAIN = "redelivered", "dead_lettered", "drain_incomplete"
# A held message its consumer acknowledged after the end, never delivered again: the broker
# kept it checked out and took the ack (4.3 returns only the messages past their timeout).
ACKED_AFTER_END: Final = "acked_after_end"
# How the broker ended a timed-out consumer: basic.cancel, or its channel closed with 406.
CANCELLED, CLOSED_406 = "cancel", "channel_close_406"
PRECONDITION_FAILED: Final = 406
# A broker's basic.cancel to a client that did not advertise consumer_cancel_notify.
CANCEL_UNADVERTISED: Final = "cancel_without_capability"
# A single active consumer's hand-over after a timed-out consumer's end (the module docstring).
HANDED_OVER, STALLED, NOTHING_READY, RUN_ENDED = (
    "handed_over", "stalled", "nothing_ready", "run_ended")
DEPTH: Final = "depth"  # the harness's queue depth samples (harness.placement)
DEPTH_LIMIT: Final = 10  # depth samples a judgement keeps at most
EACH_LIMIT: Final = 1000  # ends the hand-over's `each` list keeps at most (in history order)
RESUBSCRIBE: Final = ("a consumer the broker ended retires; its slot subscribes again, as a new "
                      "process on the next node, half a second later (workloads.queue_workload)")


@dataclass(frozen=True)
class HandOverFacts:
    """What the Spark job finds for one timed-out consumer's end on a single-active-consumer
    queue (times ns; None: no such op): the end (history index, time, process, consumer tag,
    `how`), how many messages it held and how many were confirmed before it and not yet
    delivered (`waiting`), the first main-phase delivery to another consumer after the ended
    consumer's last one (`next_*`), and the consumers the history shows live then (fed before
    the end, not yet ended; a standby never fed has no op until it ends)."""

    index: int
    time: int
    process: str
    consumer: str
    how: str
    held: int
    waiting: int
    next_index: int | None = None
    next_time: int | None = None
    next_process: str | None = None
    next_consumer: str | None = None
    live: tuple[str, ...] = ()


def hand_over_deadline(end_ns: int, bound_ns: int, windows: Sequence[tuple[int, int]]) -> int:
    """Takes a timed-out consumer's end, the bound (ns) and the run's fault windows (start,
    end), in any order. Returns the deadline of its hand-over: the bound after the end, or
    after the heal of each fault in effect before the deadline so far (each pushes the count's
    start to its end)."""
    start = end_ns
    for w_start, w_end in sorted(windows):
        if w_start <= start + bound_ns and w_end > start:
            start = w_end
    return start + bound_ns


def depth_samples(events: Iterable[Any]) -> list[tuple[int, int]]:
    """Takes harness events in order (time, f, value). Returns the queue depth samples the
    harness took (f "depth", harness.placement) as (time ns, ready: the most any node
    reported), those without a ready count left out."""
    out = []
    for e in events:
        v = e.value if e.f == DEPTH and isinstance(e.value, dict) else {}
        ready = v.get("ready")
        if isinstance(ready, int) and not isinstance(ready, bool):
            out.append((e.time, ready))
    return out


def judge_hand_over(f: HandOverFacts, bound_ns: int, windows: Sequence[tuple[int, int]],
                    main_end: int, depth: Sequence[tuple[int, int]] = ()) -> dict[str, Any]:
    """Takes one end's facts, the bound (ns), the fault windows, the main phase's end and the
    harness's depth samples (time ns, ready). Returns its judgement (the module docstring):
    {"status", "index", "ms", "process", "consumer", "how", "held", "waiting",
    "deadline_ms", "delay_ms": the end to the next delivery (None without one), "next": that
    delivery or None, "live": the consumers live, "depth": the samples from the end to the
    deadline, each {"ms", "ready"}}. Messages were ready when the end held or left some
    waiting, or a depth sample in that span counted some ready."""
    deadline = hand_over_deadline(f.time, bound_ns, windows)
    seen = [{"ms": ns_to_ms(t), "ready": n} for t, n in depth if f.time <= t <= deadline]
    if f.next_time is not None and f.next_time <= deadline:
        status = HANDED_OVER
    elif f.held + f.waiting == 0 and not any(d["ready"] for d in seen):
        status = NOTHING_READY
    elif main_end < deadline:
        status = RUN_ENDED
    else:
        status = STALLED
    nxt = None if f.next_index is None else {
        "index": f.next_index, "ms": None if f.next_time is None else ns_to_ms(f.next_time),
        "process": f.next_process, "consumer": f.next_consumer}
    return {"status": status, "index": f.index, "ms": ns_to_ms(f.time), "process": f.process,
            "consumer": f.consumer, "how": f.how, "held": f.held, "waiting": f.waiting,
            "deadline_ms": ns_to_ms(deadline),
            "delay_ms": None if f.next_time is None else ns_to_ms(max(0, f.next_time - f.time)),
            "next": nxt, "live": list(f.live), "depth": seen[:DEPTH_LIMIT]}


def hand_over_section(facts: Iterable[HandOverFacts], bound: Any,
                      windows: Sequence[tuple[int, int]], main_end: int, example_size: int,
                      depth: Sequence[tuple[int, int]] = ()) -> dict[str, Any]:
    """Takes the facts of every timed-out consumer's end on a single-active-consumer queue,
    the liveness bound (checkers.liveness.LivenessBound, or None: unknown), the fault windows,
    the main phase's end, how many examples to give and the harness's depth samples
    (depth_samples). Returns the `hand_over` part: counts
    per status, the delays of the judged ones (max, median, ms), the bound, what the workload
    does after an end, the stalled ones with their timelines (judge_hand_over), and each end's
    status and delay (`each`, at most EACH_LIMIT)."""
    if bound is None:
        return {"applies": True, "judged": 0, "stalled": 0,
                "reason": "the liveness bound is unknown (no test.json beside the history)"}
    judged = [judge_hand_over(f, bound.bound_ns, windows, main_end, depth) for f in facts]
    count = {k: sum(1 for j in judged if j["status"] == k)
             for k in (HANDED_OVER, STALLED, NOTHING_READY, RUN_ENDED)}
    delays = [j["delay_ms"] for j in judged
              if j["status"] == HANDED_OVER and j["delay_ms"] is not None]
    return {"applies": True, "bound": bound.as_dict(), "after_an_end": RESUBSCRIBE,
            "judged": count[HANDED_OVER] + count[STALLED], "handed_over": count[HANDED_OVER],
            "stalled": count[STALLED],
            "not_judged": {NOTHING_READY: count[NOTHING_READY], RUN_ENDED: count[RUN_ENDED]},
            "delay_ms": {"max": max(delays, default=None),
                         "median": statistics.median(delays) if delays else None},
            "stalled_examples": [j for j in judged if j["status"] == STALLED][:example_size],
            "each": [{k: j[k] for k in ("index", "ms", "consumer", "how", "status", "delay_ms")}
                     for j in judged[:EACH_LIMIT]]}


def settings_of(events: Iterable[Any]) -> dict[str, Any] | None:
    """Takes harness events in order (f, value). Returns the value of the last
    consumer-timeout observation, or None when the harness recorded none."""
    found = None
    for e in events:
        if e.f == CONSUMER_TIMEOUT and isinstance(e.value, dict):
            found = e.value
    return found


def section(settings: Mapping[str, Any], ends: Mapping[str, int], counts: Mapping[str, int],
            examples: list[dict[str, Any]],
            hand_over: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Takes the settings, the timed-out consumers' ends by how (CANCELLED, CLOSED_406), the
    count per outcome (of held messages; of deliveries after an end), examples of violations
    and, on a single-active-consumer queue, the `hand_over` part (hand_over_section). Returns
    the section: valid false with a violation or a stalled hand-over; "unknown" when no end
    was judged, or when the queue's hand-overs apply and none was judged; else true."""
    violations = {k: counts.get(k, 0) for k in VIOLATIONS}
    stalled = hand_over.get("stalled", 0) if hand_over else 0
    # A client that did not advertise consumer_cancel_notify is owed a channel close, not a
    # basic.cancel it said it does not take (RabbitMQ's consumer cancel notification guide).
    uninvited = ends.get(CANCELLED, 0) if settings.get("consumer_cancel_notify") is False else 0
    bad = sum(violations.values()) + stalled + uninvited
    judged = counts.get(REDELIVERED, 0) + counts.get(DEAD_LETTERED, 0) + violations[UNFLAGGED] \
        + violations[LOST]
    n_ends = sum(ends.values())
    unjudged_hand_over = not hand_over.get("judged") if hand_over else False
    valid: bool | str = False if bad else (
        True if n_ends and not unjudged_hand_over else "unknown")
    out = {"valid": valid, "settings": dict(settings),
           "broker_cancels": ends.get(CANCELLED, 0),
           "broker_channel_closes": ends.get(CLOSED_406, 0),
           "ended_by": {CANCELLED: ends.get(CANCELLED, 0), CLOSED_406: ends.get(CLOSED_406, 0)},
           "held_judged": judged,
           "redelivered": counts.get(REDELIVERED, 0),
           "dead_lettered": counts.get(DEAD_LETTERED, 0),
           ACKED_AFTER_END: counts.get(ACKED_AFTER_END, 0),
           "not_judged": {NOT_JUDGED_DRAIN: counts.get(NOT_JUDGED_DRAIN, 0)},
           "violation_count": bad,
           "violations": {**violations, STALLED: stalled, CANCEL_UNADVERTISED: uninvited},
           "examples": examples}
    if hand_over:
        out["hand_over"] = dict(hand_over)
    return out
