"""Results: the sections of results.json, from the facts the Spark jobs count.

The Spark jobs reduce a history to plain facts: counts, bounded samples,
per-window latency quantiles. The functions here turn those facts into the
sections of shared/DESIGN.md and decide their validity. `compose` merges
sections like Jepsen's checker/compose: false beats "unknown" beats true, and
a section whose checker raised becomes {"valid": "unknown", "error": ...}. A
section marked FALSE_ONLY (liveness) counts only when it is false.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from checkers.explain import explanations
from checkers.faults import window_dict
from checkers.model import NO_REASON, ns_to_ms, share
from checkers.options import CheckOptions
from checkers.phases import DrainState
from history.faults import FaultWindow

log = logging.getLogger(__name__)

Valid = bool | str
UNKNOWN: Final = "unknown"
# A section carrying this key set true composes only when false: its true or "unknown" leaves
# the verdict to the others (the liveness section: a run too short after its last heal cannot
# say whether the queue came back, and that is no reason to doubt its other sections).
FALSE_ONLY: Final = "composes_only_when_false"

QUEUE_COUNTS: Final = (
    "attempt_count",
    "acknowledged_count",
    "ok_count",
    "lost_count",
    "unexpected_count",
    "duplicated_count",
    "redelivered_duplicated_count",
    "unflagged_duplicated_count",
    "recovered_count",
    "delivered_failed_count",
    "fail_count",
    "info_count",
    "delivery_count",
    "lost_unacked_count",
    "unflagged_after_ack_count",
    "unflagged_redelivered_count",
    "acked_delivery_count",
    "dead_lettered_count",
    "dropped_by_design_count",
    "dead_lettered_delivered_count",
)
QUEUE_SAMPLES: Final = (
    "lost",
    "unexpected",
    "duplicated",
    "redelivered_duplicated",
    "unflagged_duplicated",
    "recovered",
    "delivered_failed",
    "lost_unacked",
    "unflagged_after_ack",
    "unflagged_redelivered",
    "dead_lettered_delivered",
)


def merge_valid(valids: Sequence[Any]) -> Valid:
    """Takes validity values. Returns false if any is false, else "unknown" if any is not true, else true."""
    if any(v is False for v in valids):
        return False
    if any(v is not True for v in valids):
        return UNKNOWN
    return True


def counted(section: Any) -> bool:
    """Takes a results section. Returns whether its "valid" counts in the whole verdict: unless
    the section composes only when false (FALSE_ONLY), always; then only when it is false."""
    if not isinstance(section, Mapping):
        return True
    return section.get("valid") is False or section.get(FALSE_ONLY) is not True


def check_safe(name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Takes a section name and a thunk computing it. Returns the section, or an unknown one if it raised."""
    try:
        return fn()
    except Exception as e:  # a broken checker must not hide the others' verdicts
        log.warning("checker %s failed", name, exc_info=True)
        return {
            "valid": UNKNOWN,
            "error": f"{type(e).__name__}: {e}",
            "trace": traceback.format_exc(limit=8),
        }


def compose(sections: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """Takes named sections. Returns results.json: {"valid": merged, **sections}; a section that
    composes only when false (FALSE_ONLY) counts only then."""
    return {"valid": merge_valid([s.get("valid") for s in sections.values() if counted(s)]),
            **sections}


def queue_section(
    counts: Mapping[str, int],
    samples: Mapping[str, list[str]],
    drain: DrainState,
    options: CheckOptions,
    *,
    fail_reasons: Mapping[str, int] | None = None,
    acks_recorded: bool = False,
    dropped: tuple[Mapping[str, int], Mapping[str, list[str]]] | None = None,
    dead_lettering: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Takes the queue counts (QUEUE_COUNTS), sorted id samples (QUEUE_SAMPLES), the drain's
    outcome, the options, the failed publishes counted by error text, whether the history
    records acks, the messages dropped by design counted by reason and each reason's example
    ids, and the harness's observation of where the queue dead-letters (None: nowhere).
    Returns the "queue" section.

    Invalid (false) for unexpected messages, for lost ones once the drain
    completed, and for duplicates (unflagged ones, and the unflagged-after-ack
    ones among them, by default; flagged ones if the options say so). A
    message delivered after its publish failed (nack) is reported, never
    invalid; so is a message dropped by design (dead-lettered, read back).
    Without a completed drain (when required) lost messages cannot be
    told from ones still queued: the section is then "unknown" with a reason,
    unless another anomaly makes it false; with nothing lost the drain cannot
    change the verdict, so it is not needed. So too when the queue dropped
    messages by design into the user's own dead-letter exchange, which the
    harness does not read (`unaccounted`).
    """
    invalid = invalidating(counts, options)
    lost = counts["lost_count"] > 0
    elsewhere = unaccounted(dead_lettering)
    valid, reason = _loss_verdict(lost, bool(invalid), lost_proven(drain, options), drain,
                                  elsewhere)
    anomalies = (["lost"] if lost else []) + (
        ["lost_unacked"] if counts["lost_unacked_count"] else []) + invalid
    section: dict[str, Any] = {"valid": valid, **({"reason": reason} if reason else {}),
                               "anomalies": anomalies, "drain_complete": drain.complete,
                               "drain_reason": drain.reason, "acks_recorded": acks_recorded}
    section.update({k: int(counts[k]) for k in QUEUE_COUNTS})
    section.update({k: list(samples.get(k, [])) for k in QUEUE_SAMPLES})
    section["fail_reasons"] = dict(fail_reasons or {})
    reasons, examples = dropped or ({}, {})
    section["dropped_by_design_reasons"] = dict(reasons)
    section["dropped_by_design_examples"] = {k: list(v) for k, v in examples.items()}
    section["dead_lettering"] = dict(dead_lettering) if dead_lettering is not None else None
    first = next((v[0] for v in examples.values() if v), None)
    section["explanations"] = explanations(
        counts, {**samples, "dropped_by_design": [first] if first else []}, drain.complete,
        unaccounted=elsewhere, dropped_reasons=reasons)
    return section


def log_reads_part(facts: Mapping[str, Any]) -> dict[str, Any]:
    """Takes how the consumers of a log read it whole (checkers.spark_queue.log_reads). Returns
    the queue section's `log_reads`: the facts and a statement. Reported, never judged: each
    consumer reads every message by design (so the section's duplicates are not anomalies
    there: workloads.kinds.stream), and RabbitMQ promises streams at-least-once delivery, so a
    message read twice within one subscription breaks no promise; it is counted for a reader to
    weigh (a reader handed an offset it had read)."""
    subs, several = int(facts["subscriptions"]), int(facts["read_by_several_count"])
    repeated = int(facts["repeated_in_subscription_count"])
    return {**facts, "statement": (
        f"every consumer reads the log whole from its first offset: {several:,} of "
        f"{int(facts['read_count']):,} messages read were read by more than one of its "
        f"{subs} subscription(s), by design; {repeated:,} read more than once within one "
        "subscription")}


def invalidating(counts: Mapping[str, int], options: CheckOptions) -> list[str]:
    """Takes the queue counts and the options. Returns the anomalies present that make the
    section false whatever the drain proved (unexpected messages, the duplicates the options
    count), in the section's order."""
    rules = (("unexpected", "unexpected_count", True),
             ("unflagged_duplicated", "unflagged_duplicated_count",
              options.unflagged_duplicates_invalid),
             ("unflagged_after_ack", "unflagged_after_ack_count",
              options.unflagged_duplicates_invalid),
             ("unflagged_redelivered", "unflagged_redelivered_count",
              options.unflagged_redeliveries_invalid),
             ("redelivered_duplicated", "redelivered_duplicated_count",
              options.flagged_duplicates_invalid))
    return [name for name, key, counted in rules if counts[key] and counted]


def _loss_verdict(lost: bool, invalid: bool, drained: bool, drain: DrainState,
                  elsewhere: str | None) -> tuple[Valid, str | None]:
    """Takes whether messages are missing, whether another anomaly makes the section false,
    whether the drain proved the queue empty, the drain and where else messages may have gone.
    Returns the section's validity and, when unknown, why."""
    if invalid or (lost and drained and elsewhere is None):
        return False, None
    if lost and not drained:
        return UNKNOWN, (f"{drain.reason}: lost messages cannot be told from messages still "
                         f"queued")
    if lost:
        return UNKNOWN, f"{elsewhere}: lost messages cannot be told from messages dropped"
    return True, None


def unaccounted(dead_lettering: Mapping[str, Any] | None) -> str | None:
    """Takes the harness's observation of where the queue dead-letters (or None). Returns why
    a message never read back may have been dropped by design rather than lost (the queue has
    a limit and dead-letters to the user's exchange, which the harness does not read), else
    None."""
    if not dead_lettering or dead_lettering.get("by") != "user" \
            or not dead_lettering.get("limits"):
        return None
    limits = ", ".join(str(x) for x in dead_lettering["limits"])
    return (f"the queue drops messages by design ({limits}) into the user's dead-letter "
            f"exchange {dead_lettering.get('exchange')!r}, which the harness does not read")


def lost_proven(drain: DrainState, options: CheckOptions,
                dead_lettering: Mapping[str, Any] | None = None) -> bool:
    """Takes the drain's outcome, the options and the harness's observation of where the queue
    dead-letters. Returns whether a message never read back counts as lost: the drain proved
    the queue empty, or the options do not require it; and no limit dropped messages where
    the harness does not read them (`unaccounted`)."""
    return (drain.complete or not options.require_drain) and unaccounted(dead_lettering) is None


def top_reasons(reasons: Mapping[str | None, int], limit: int) -> dict[str, int]:
    """Takes counts by error text (None for none) and a limit. Returns the `limit` most
    frequent, most frequent first (ties by text), None named NO_REASON."""
    named: dict[str, int] = {}
    for k, n in reasons.items():
        key = NO_REASON if k is None else k
        named[key] = named.get(key, 0) + int(n)
    return dict(sorted(named.items(), key=lambda kv: (-kv[1], kv[0]))[:limit])


@dataclass(frozen=True)
class Delivery:
    """One delivery as ordering examples show it."""

    id: str
    seq: int
    index: int
    time: int
    redelivered: bool

    def as_dict(self) -> dict[str, Any]:
        """Returns the JSON-able form, time in ms."""
        return {"id": self.id, "seq": self.seq, "index": self.index,
                "time_ms": ns_to_ms(self.time), "redelivered": self.redelivered}


@dataclass(frozen=True)
class Violation:
    """Two deliveries of one publisher's messages in one stream (checkers.spark_order), out of order.
    `consumer` is the later delivery's consumer; `boundary` the phase boundary nearest the
    later delivery (checkers.holds.nearest_boundary; None: the history has none)."""

    consumer: str
    publisher: int
    earlier: Delivery
    later: Delivery
    boundary: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """Returns the JSON-able form."""
        return {"consumer": self.consumer, "publisher": self.publisher,
                "earlier": self.earlier.as_dict(), "later": self.later.as_dict(),
                "phase_boundary": self.boundary}


def ordering_section(
    strict: bool,
    *,
    deliveries_checked: int,
    violation_count: int,
    consumers_affected_count: int,
    consumers_affected: list[str],
    examples: list[Violation],
    flagged_violation_count: int = 0,
    flagged_examples: Sequence[Violation] = (),
    unconfirmed_reorder_count: int = 0,
    unconfirmed_examples: Sequence[Violation] = (),
    held_reorder_count: int = 0,
    held_examples: Sequence[Violation] = (),
    near_boundary_count: int = 0,
    near_boundary_ms: float | None = None,
    by_priority: bool = False,
) -> dict[str, Any]:
    """Takes the ordering facts (checkers.spark_order defines them). Returns the "ordering" section,
    valid iff violation_count is zero; `by_priority` says whether its streams were split by
    message priority."""
    return {
        "valid": violation_count == 0,
        "strict": strict,
        "deliveries_checked": deliveries_checked,
        "violation_count": violation_count,
        "consumers_affected_count": consumers_affected_count,
        "consumers_affected": consumers_affected,
        "examples": [v.as_dict() for v in examples],
        "flagged_violation_count": flagged_violation_count,
        "flagged_examples": [v.as_dict() for v in flagged_examples],
        "unconfirmed_reorder_count": unconfirmed_reorder_count,
        "unconfirmed_examples": [v.as_dict() for v in unconfirmed_examples],
        "held_reorder_count": held_reorder_count,
        "held_examples": [v.as_dict() for v in held_examples],
        "near_boundary_count": near_boundary_count,
        "near_boundary_ms": near_boundary_ms,
        "by_priority": by_priority,
    }


@dataclass(frozen=True)
class BucketStats:
    """Publishes invoked in one stretch of time, their outcomes and confirmed latencies (ns)."""

    invoked: int = 0
    ok: int = 0
    fail: int = 0
    info: int = 0
    p50: int | None = None
    p95: int | None = None
    p99: int | None = None
    max: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """Returns the JSON-able form: counts, shares and latency quantiles in ms."""
        return {
            "invoked": self.invoked,
            "ok": self.ok,
            "fail": self.fail,
            "info": self.info,
            "ok_share": share(self.ok, self.invoked),
            "fail_share": share(self.fail, self.invoked),
            "info_share": share(self.info, self.invoked),
            "latency_ms": {
                "p50": ns_to_ms(self.p50),
                "p95": ns_to_ms(self.p95),
                "p99": ns_to_ms(self.p99),
                "max": ns_to_ms(self.max),
            },
        }


@dataclass(frozen=True)
class Gap:
    """The longest stretch [start, end) (ns) of the main phase without a confirmed publish."""

    start: int
    end: int

    def as_dict(self) -> dict[str, Any]:
        """Returns the JSON-able form in ms."""
        return {"ms": ns_to_ms(self.end - self.start), "from_ms": ns_to_ms(self.start),
                "to_ms": ns_to_ms(self.end)}


def perf_section(
    main_phase: tuple[int, int],
    overall: BucketStats,
    healthy: BucketStats,
    windows: Sequence[FaultWindow],
    window_stats: Sequence[BucketStats],
    first_confirm_after: Sequence[int | None],
    longest_gap: Gap,
) -> dict[str, Any]:
    """Takes the perf facts (windows in order, with their stats and the first confirm
    time at or after each window's end). Returns the "perf" section, valid true."""
    ws = []
    for w, st, first in zip(windows, window_stats, first_confirm_after, strict=True):
        d = window_dict(w)
        d.update(st.as_dict())
        d["recovery_ms"] = None if first is None else ns_to_ms(first - w.end_ns)
        ws.append(d)
    return {
        "valid": True,
        "main_phase": {"start_ms": ns_to_ms(main_phase[0]), "end_ms": ns_to_ms(main_phase[1])},
        "overall": overall.as_dict(),
        "healthy": healthy.as_dict(),
        "longest_without_confirm": longest_gap.as_dict(),
        "windows": ws,
    }


def longest_gap(confirms_sorted: Sequence[int], start: int, end: int) -> Gap:
    """Takes ascending confirm times and a phase [start, end]. Returns the longest stretch
    without a confirm (the earliest of equals), counting the phase's edges as boundaries."""
    best = Gap(start, start)
    prev = start
    for t in confirms_sorted:
        if t < start or t > end:
            continue
        if t - prev > best.end - best.start:
            best = Gap(prev, t)
        prev = t
    if end - prev > best.end - best.start:
        best = Gap(prev, end)
    return best


# Why a delivery of a priority run was not judged (checkers.spark_priority), in the section's
# order: the first four on its own, the last two by the messages that overtook it.
PRIORITY_NOT_JUDGED: Final = ("returned", "prefetch", "priority_unknown", "no_settlement",
                              "within_skew", "competing")


# What the section says of its skew margin (checkers.spark_priority.SKEW_MARGIN_NS).
PRIORITY_SKEW_WHY: Final = (
    "a higher message counts as ready only when its confirm was recorded more than the margin "
    "before the consumer's previous ack: an ack is recorded after its socket write, a confirm "
    "by another client thread as it reads it, so closer records do not say which the broker "
    "saw first (within_skew: set aside, not judged)")


def _priority_head(observed: Mapping[str, Any]) -> dict[str, Any]:
    """Takes the harness's `priorities` observation. Returns what a priority section says of the
    run whatever it judged: the queue, release line, levels and whether it serves them
    strictly, and single active consumer."""
    return {"queue": observed.get("queue"), "line": observed.get("line"),
            "levels": observed.get("levels"), "strict": bool(observed.get("strict")),
            "single_active_consumer": bool(observed.get("single_active_consumer"))}


def priority_not_applicable(observed: Mapping[str, Any], reason: str) -> dict[str, Any]:
    """Takes the `priorities` observation and why the rule does not apply (a line that serves
    priorities at a ratio, or has none; no message with a priority). Returns the "priority"
    section: "unknown", composing only when false (so never), with that reason."""
    return {"valid": UNKNOWN, FALSE_ONLY: True, "applicable": False,
            "reason": f"not applicable: {reason}", **_priority_head(observed)}


def priority_section(observed: Mapping[str, Any], *, delivery_count: int, judged_count: int,
                     violation_count: int, not_judged: Mapping[str, int],
                     unconfirmed_set_aside_count: int, skew_margin_ns: int,
                     examples: Sequence[Mapping[str, Any]],
                     within_skew_examples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Takes the `priorities` observation and the priority facts (checkers.spark_priority
    defines them). Returns the "priority" section: false with any violation, else true when it
    judged a delivery, else "unknown" (it judged none; a delivery not judged, one set aside by
    the skew margin included, is never a pass). It composes only when false: a run whose
    deliveries it cannot judge is no less valid."""
    reasons = {k: int(not_judged.get(k, 0)) for k in PRIORITY_NOT_JUDGED}
    valid: Valid = False if violation_count else True if judged_count else UNKNOWN
    reason = None if valid is not UNKNOWN else "no delivery could be judged"
    return {"valid": valid, FALSE_ONLY: True, "applicable": True, "reason": reason,
            **_priority_head(observed), "delivery_count": delivery_count,
            "judged_count": judged_count, "violation_count": violation_count,
            "not_judged_count": sum(reasons.values()), "not_judged": reasons,
            "unconfirmed_set_aside_count": unconfirmed_set_aside_count,
            "skew_margin_ms": ns_to_ms(skew_margin_ns), "skew_margin_reason": PRIORITY_SKEW_WHY,
            "examples": [dict(e) for e in examples],
            "within_skew_examples": [dict(e) for e in within_skew_examples]}
