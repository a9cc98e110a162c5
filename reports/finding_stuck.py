"""A finding's stuck clients: a publish the broker left unsettled on an open channel past the
liveness bound after a heal, or a staying consumer it never fed again while its queue held
ready messages (checkers.settlement).

The liveness section's `settlement` part keeps each stuck client as a finding
with its own timeline: for a publish, its id, process, publisher, node, queue,
the queue's leader at the heal, the heal, the bound, the channel's last confirm
before the heal, the publish's send and completion (how: "run-ended" when the
harness closed the channel at the run's end with it still in flight) and the
channel's later publishes with their fates; for a consumer, its process, node,
queue, its last delivery before the heal, its first after it and its end.
`stuck` returns those results.json keeps (at most MAX_SHOWN) and a note on any
left out; `ids` the message ids whose ops the page shows; `lines` writes one as
Markdown: results.json's facts of it in words, how far its send lies from the
nearest phase boundary and fault start (a finding at a boundary is suspect),
then its ops from the history with exact times, with the nemesis's, the
harness's phase and placement ops and its process's ends from NEAR_NS before
its send (a consumer: the heal) to NEAR_NS after its completion (the deadline).
Nothing here judges: the status and every figure are the checker's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from history import Op
from reports import markdown as md
from reports.finding_examples import ops_part
from reports.finding_hand_over import faults_between
from reports.finding_history import (
    DELIVERIES,
    NEAR_NS,
    Scan,
    distance_text,
    fault_words,
    leader_samples,
    with_context,
)
from reports.finding_history import (
    seconds_text as _s,
)
from reports.page import as_dict
from reports.page import as_number as _num

MAX_SHOWN = 5
MS = 1_000_000
# results.json's completion kinds (checkers.settlement) -> what became of the publish, in words.
COMPLETION: dict[str, str] = {
    "confirmed": "confirmed (basic.ack), late",
    "refused": "refused (basic.nack or basic.return), late",
    "connection-closed": "its connection or channel closed, late",
    "run-ended": "still unsettled when the harness closed its channel at the run's end",
    "client-gave-up": "still unsettled when its publisher's own confirm deadline passed",
    "never-completed": "never completed in the history",
}


def _settlement(results: Any) -> dict[str, Any]:
    return as_dict(as_dict(as_dict(results).get("liveness")).get("settlement"))


def stuck(results: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """Takes results.json's content. Returns its stuck clients (at most MAX_SHOWN, as the checker
    kept them: publishes first) and notes on those left out."""
    s = _settlement(results)
    kept = [f for f in s.get("findings") or [] if isinstance(f, dict)]
    shown = kept[:MAX_SHOWN]
    total = sum(n for n in (s.get("stuck_channels"), s.get("stuck_consumers"))
                if isinstance(n, int) and not isinstance(n, bool))
    more = max(total, len(kept)) - len(shown)
    notes = [f"liveness: {more} more stuck client(s) than shown here (results.json keeps "
             f"{len(kept)})"] if more > 0 else []
    return shown, notes


def ids(found: Sequence[Mapping[str, Any]]) -> set[str]:
    """Takes stuck clients. Returns the ids of their stuck publishes and of their channels'
    later publishes."""
    out = set()
    for f in found:
        tl = as_dict(f.get("timeline"))
        for x in (tl.get("stuck"), *(tl.get("later") or [])):
            i = as_dict(x).get("id")
            if isinstance(i, str):
                out.add(i)
    return out


def _after(ms: Any, since: Any) -> str:
    a, b = _num(ms), _num(since)
    return "" if a is None or b is None else f", {(a - b) / 1000:.1f} s after the heal"


def heading(f: Mapping[str, Any]) -> str:
    """Takes a stuck client. Returns its heading (Markdown)."""
    heal = md.text(_s(f.get("heal_ms")))
    if f.get("what") == "consumer":
        return (f"Stuck consumer: process {md.text(f.get('process'))} through "
                f"{md.text(f.get('node'))}, not fed within the bound after the heal at {heal}")
    first = as_dict(as_dict(f.get("timeline")).get("stuck"))
    return (f"Stuck publish: {md.code(first.get('id'))} of publisher "
            f"{md.text(f.get('publisher'))} through {md.text(f.get('node'))}, unsettled past the "
            f"bound after the heal at {heal}")


def nearest_fault_start(results: Any, ms: Any) -> str:
    """Takes results.json's content and a time (ms). Returns the closest fault start to it in
    words ("14.2 ms before partition-one on n3 began"), or "none" without faults."""
    t = _num(ms)
    starts = [(abs(t - a), t - a, as_dict(f)) for f in as_dict(results).get("faults") or []
              if t is not None and (a := _num(as_dict(f).get("start_ms"))) is not None]
    if not starts:
        return "none"
    _d, signed, f = min(starts, key=lambda x: x[0])
    where = "before" if signed < 0 else "after"
    return f"{abs(signed):,.1f} ms {where} {fault_words(f)} began"


def facts(f: Mapping[str, Any], results: Any, s: Scan | None) -> list[tuple[str, str]]:
    """Takes a stuck client, results.json's content and the history's scan (None: none).
    Returns what results.json says of it, as (label, text)."""
    tl = as_dict(f.get("timeline"))
    heal, bound = f.get("heal_ms"), f.get("bound_ms")
    leader = _leader_words(f, s)
    if f.get("what") == "consumer":
        deadline = (_num(heal) or 0) + (_num(bound) or 0) if _num(heal) is not None else None
        return [
            ("the consumer", f"process {f.get('process')} through {f.get('node')} on queue "
                             f"{f.get('queue')}"),
            ("last fed before the heal", _s(tl.get("last_fed_before_ms"))),
            ("the heal", f"{_s(heal)}; the queue's leader then: {leader}"),
            ("deadline", f"{_s(deadline)}: the liveness bound ({_s(bound)}) after the heal"),
            ("first fed after the heal", _s(tl.get("first_fed_after_ms"))
             + _after(tl.get("first_fed_after_ms"), heal)
             if tl.get("first_fed_after_ms") is not None else "never, in the main phase"),
            ("its end", _s(tl.get("ended_ms")) if tl.get("ended_ms") is not None
             else "none in the history"),
            ("faults from the heal to the deadline", faults_between(results, heal, deadline)),
        ]
    first = as_dict(tl.get("stuck"))
    sent, done = first.get("sent_ms"), first.get("completed_ms")
    kind = str(first.get("completion"))
    counts = as_dict(tl.get("later_counts"))
    later = (", ".join(f"{n} {k}" for k, n in counts.items()) if counts else
             "none: the channel published nothing more after it (a staying publisher sends "
             "no more while its window of messages in flight is full)")
    sent_ms = _num(sent)
    boundary = distance_text(int(sent_ms * MS), s.phases) \
        if s is not None and sent_ms is not None else ""
    deadline = max(_num(sent) or 0.0, _num(heal) or 0.0) + (_num(bound) or 0.0)
    return [
        ("the publish", f"{first.get('id')} (process {f.get('process')}, publisher "
                        f"{f.get('publisher')}) through {f.get('node')} to queue "
                        f"{f.get('queue')}, sent at {_s(sent)}"),
        ("its send against the run's boundaries",
         f"{boundary or 'no phase boundary in the history'}; "
         f"{nearest_fault_start(results, sent)}"),
        ("last confirm on its channel before the heal", _s(tl.get("last_confirm_before_ms"))
         if tl.get("last_confirm_before_ms") is not None else "none"),
        ("the heal", f"{_s(heal)}; the queue's leader then: {leader}"),
        ("deadline", f"{_s(deadline)}: the liveness bound ({_s(bound)}) after the heal, or "
                     "after its send if later"),
        ("what became of it", f"{COMPLETION.get(kind, kind)}, at {_s(done)}"
         + _after(done, heal) if done is not None else COMPLETION.get(kind, kind)),
        ("stuck on its channel", f"{f.get('stuck')} publish(es)"),
        ("its channel's later publishes", later),
        ("faults from its send to its completion", faults_between(results, sent, done)),
        ("read back", _read_back(str(first.get("id")), results, s, kind)),
    ]


def _leader_words(f: Mapping[str, Any], s: Scan | None) -> str:
    """Takes a stuck client and the scan. Returns the queue's leader at its heal as the checker
    names it, with when the harness sampled it (its last sample at or before the heal, and
    the next one after: between samples the leader may have moved)."""
    leader = f.get("leader_at_heal")
    if not leader:
        return "not sampled before the heal"
    heal = _num(f.get("heal_ms"))
    samples = [(t, q, n) for t, q, n in leader_samples(s) if q in ("", f.get("queue"))] \
        if s is not None else []
    if heal is None or not samples:
        return str(leader)
    before = [x for x in samples if x[0] <= heal * MS]
    after = [x for x in samples if x[0] > heal * MS]
    said = f"{leader} (the harness's last sample before the heal" + (
        f", at {before[-1][0] / 1e9:.3f} s" if before else "")
    said += f"; its next, {after[0][2]} at {after[0][0] / 1e9:.3f} s)" if after else ")"
    return said


# What the broker said of a stuck publish at last, by its completion (COMPLETION), where it
# said anything: a late answer is not silence.
LATE_ANSWER: dict[str, str] = {
    "confirmed": "the broker confirmed it, late (a confirmed message never read: the queue "
                 "section counts it)",
    "refused": "the broker refused it, late",
    "connection-closed": "its connection or channel closed, late",
}


def _read_back(mid: str, results: Any, s: Scan | None, completion: str) -> str:
    """Takes a stuck publish's id, results.json's content, the scan and how the publish
    completed (COMPLETION's keys). Returns whether a consumer or the drain read the message
    back, in words."""
    if s is None:
        return "unknown: the run stored no history"
    reads = [op for op in s.by_id.get(mid, []) if op.f in DELIVERIES and op.type == "ok"]
    if reads:
        first = reads[0]
        return (f"yes, {len(reads)} time(s): first by process {first.process} ({first.f}) "
                f"through {first.node} at {first.time / 1e9:.3f} s: the queue took it, its "
                "confirm never came")
    complete = as_dict(as_dict(results).get("queue")).get("drain_complete")
    said = LATE_ANSWER.get(completion,
                           "the broker never said so (no confirm, nack or close)")
    return ("never: no consumer read it, nor did the drain, which completed: the queue does "
            f"not hold it, and {said}"
            if complete is True else
            "not by a consumer; the drain did not complete, so whether the queue holds it is "
            "unknown")


def _span(f: Mapping[str, Any]) -> tuple[int, int] | None:
    """Takes a stuck client. Returns the span (ns) its table covers: NEAR_NS before the send (a
    consumer: the heal) to NEAR_NS after the completion (a consumer: the deadline)."""
    tl = as_dict(f.get("timeline"))
    if f.get("what") == "consumer":
        lo, hi = _num(f.get("heal_ms")), None
        if lo is not None:
            hi = lo + (_num(f.get("bound_ms")) or 0.0)
    else:
        first = as_dict(tl.get("stuck"))
        lo, hi = _num(first.get("sent_ms")), _num(first.get("completed_ms"))
    if lo is None:
        return None
    return int(lo * MS) - NEAR_NS, int((hi if hi is not None else lo) * MS) + NEAR_NS


def ops_of(f: Mapping[str, Any], s: Scan) -> list[Op]:
    """Takes a stuck client and the scan. Returns, in history order, its publishes' ops and,
    within its span (`_span`), its process's ends, the nemesis's completed ops and the
    harness's phase boundaries and placement samples."""
    own = [op for i in sorted(ids([f])) for op in s.by_id.get(i, [])]
    return with_context(own, s, _span(f), (e for e in s.ends if e.process == f.get("process")))


def lines(f: Mapping[str, Any], results: Any, s: Scan | None,
          start_unix: float | None) -> list[str]:
    """Takes a stuck client, results.json's content, the history's scan (None: no history) and
    the wall clock at history time 0. Returns its Markdown."""
    out = [f"### {heading(f)}", "", "Kind: `liveness` (settlement after a heal: stuck).", ""]
    if isinstance(f.get("statement"), str):
        out += [md.text(f["statement"]), ""]
    out += [f"- {md.text(k)}: {md.text(v)}" for k, v in facts(f, results, s)]
    out.append("")
    what = ("its publishes' ops, and from 2 s before its send to 2 s after its completion the "
            "faults, the harness's phases and placement samples and its process's ends"
            if f.get("what") != "consumer" else
            "from 2 s before the heal to 2 s after the deadline the faults, the harness's "
            "phases and placement samples and its process's ends")
    return out + ops_part(s, lambda scan: ops_of(f, scan), start_unix, "client",
                          f"Its ops from the history: {what}:")
