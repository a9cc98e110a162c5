"""Metadata after the heal: what the probe of each node met in each fault, and whether every
node served metadata again (a declare answered) within the bound after the last heal.

RabbitMQ's Khepri metadata store is a Raft store: a node cut off with a
minority cannot change metadata, and RabbitMQ documents that a declaration
there times out (the connection closed with 541 INTERNAL_ERROR, or no answer
within the client's timeout). Refusals during a fault are therefore reported,
never violations. What must hold is that the minority serves metadata again
after the heal. The metadata probe (workloads.metadata_probe) asks each node,
about once a second: a new connection, then declare, bind and delete of a fresh
quorum queue; this module judges its ops from facts the Spark job counts
(checkers.spark_metadata). Pure: no Spark.

The rules, with H the last heal (the end of the last fault window, as
checkers.liveness reads it), B the liveness bound (checkers.liveness
`LivenessBound`) and M the main phase's end:

- A probe op is a client op with f "connect", "declare", "bind" or "delete";
  its completion is the first op of its process after its invocation (a probe
  process has one op in flight). A completion is *refused* when it is `fail`
  or `info`.
- Per node and fault window: the completions whose invocation (else the
  completion itself, without one) falls in [start, end] of the window, counted
  by type and by f, and their errors grouped by type and text (probe queue
  names read "<probe queue>", Erlang pids "<pid>"), with the reply code a
  `fail` error begins with ("541 INTERNAL_ERROR - ..."); most frequent first,
  the first MAX_ERRORS of them (`more_errors` counts the other texts). The
  completions in no window are counted the same way in `outside_faults`.
- After the heal, per node: the node *served* when a declare through it
  completed ok in [H, H + B]. It was *not served* (false) when none did, and a
  probe op through it was refused at or after H + B before any declare was
  answered ok: "served-late" when one was answered later, "not-served" when
  never ("the minority never served metadata again"). Anything else is
  unknown, with its reason: the main phase ended before H + B; no probe op was
  invoked through the node after the heal; its first declare answered came
  past the bound although nothing through it was refused past the bound.
- Not applicable (valid "unknown"): no fault, a fault never healed; unknown
  without a bound.

For the report's plot the section also carries `timeline`: per node, its
completions counted per bucket of time (`bucket_ms`, at least a second, at
most TIMELINE_BUCKETS buckets up to the main phase's end or the last probe
op, the later) by outcome: `ok`, `refused_541` (a `fail` whose error begins
with 541), `failed` (another `fail`), `no_answer` (`info`); past 20,000 rows
(many nodes) only the earliest are kept, and `truncated` says so.

The section's `valid` is false when any node's is, true when every probed
node served within the bound, else "unknown". Like liveness it composes only
when false (`results.FALSE_ONLY`). The section is absent when the run has no
probe op.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from checkers.faults import window_dict
from checkers.liveness import LivenessBound, Timeline, last_heal, timeline
from checkers.model import METADATA_PROBE, ns_to_ms
from checkers.phases import HarnessEvent
from checkers.results import FALSE_ONLY
from history.faults import FaultWindow

SECTION: Final = "metadata"
NS: Final = 1_000_000_000
SERVED: Final = "served"
LATE: Final = "served-late"
NEVER: Final = "not-served"
UNKNOWN: Final = "unknown"
NA: Final = "not-applicable"
VALID_OF: Final[Mapping[str, bool | str]] = {
    SERVED: True, LATE: False, NEVER: False, UNKNOWN: "unknown", NA: "unknown"}
TYPES: Final = ("ok", "fail", "info")
# Error texts listed per node and window (the rest are counted in `more_errors`).
MAX_ERRORS: Final = 5
# What is read out of an error's text when it is grouped (Java and Python regex alike): a
# probe queue's name after its prefix, an Erlang pid; a reply code at its head.
NAME_TAIL: Final = r"[A-Za-z0-9_.@-]+"
ERLANG_PID: Final = r"<[0-9]+\.[0-9]+\.[0-9]+>"
REPLY_CODE: Final = r"^([0-9]{3}) "
PROBE_QUEUE: Final = "<probe queue>"
PID: Final = "<pid>"
# The window index of a completion in no fault window.
OUTSIDE: Final = -1
# The timeline's outcomes, and how many buckets it has over the main phase at most.
PROBE_OUTCOMES: Final = ("ok", "refused_541", "failed", "no_answer")
TIMELINE_BUCKETS: Final = 600


def timeline_bucket_ns(end_ns: int) -> int:
    """Takes the end of the span to cover (ns). Returns the timeline's bucket width (ns): a
    whole number of seconds, at least one, so that the span has at most TIMELINE_BUCKETS."""
    return max(1, -(-max(end_ns, 0) // (TIMELINE_BUCKETS * NS))) * NS


@dataclass(frozen=True)
class ProbeNodeFacts:
    """What the Spark job counts for one node (times in ns; None: no such op).

    Completions by type; the last declare answered ok before H and the first at or after it;
    probe ops invoked in [H, M]; completions refused at or after H, the last of them and the
    first at or after H + B.
    """

    node: str | None
    ok: int = 0
    fail: int = 0
    info: int = 0
    served_before: int | None = None
    first_served: int | None = None
    probes_after: int = 0
    refused_after: int = 0
    last_refused: int | None = None
    refused_past_bound: int | None = None


@dataclass(frozen=True)
class ProbeCount:
    """How many completions of one node in one window (OUTSIDE: none) had this f, type and
    error (grouped: `error` as normalized, None for an ok; `reply_code` read from it)."""

    window: int
    node: str | None
    f: str
    type: str
    error: str | None
    reply_code: int | None
    count: int


def metadata_probe_observed(events: Sequence[HarnessEvent]) -> dict[str, Any] | None:
    """Takes harness events in order. Returns the value of the first `metadata-probe`
    observation (the probe's nodes, interval, timeout and queue name prefix), or None when the
    harness recorded none (no probe ran)."""
    return next((e.value for e in events if e.f == METADATA_PROBE and isinstance(e.value, dict)),
                None)


def _secs(ns: int | None) -> str:
    return "?" if ns is None else f"{ns / NS:.1f} s"


def judge_node(f: ProbeNodeFacts, tl: Timeline) -> dict[str, Any]:
    """Takes a node's facts and the timeline. Returns whether it served metadata again within
    the bound (the module's rules): status, valid, reason and its timeline (ms after H)."""
    first, refused = f.first_served, f.refused_past_bound
    out: dict[str, Any] = {
        "last_served_before_ms": tl.rel(f.served_before), "first_served_ms": tl.rel(first),
        "probes_after": f.probes_after, "refused_after": f.refused_after,
        "last_refused_ms": tl.rel(f.last_refused), "refused_past_bound_ms": tl.rel(refused)}
    if first is not None and first - tl.heal <= tl.bound:
        status, why = SERVED, f"a declare was answered {_secs(first - tl.heal)} after the last heal"
    elif refused is not None and (first is None or refused < first):
        status = LATE if first is not None else NEVER
        why = (f"a probe op through it was still refused {_secs(refused - tl.heal)} after the "
               f"last heal, past the bound ({_secs(tl.bound)}); "
               + (f"the first declare was answered only {_secs(first - tl.heal)} after it"
                  if first is not None else
                  f"no declare was answered in the {_secs(tl.ran_after)} the main phase ran on"))
    elif first is not None:
        status, why = UNKNOWN, (f"the first declare was answered {_secs(first - tl.heal)} after "
                                f"the last heal, past the bound, but nothing through it was "
                                f"refused past the bound: whether it served sooner cannot be said")
    elif not tl.judged:
        status, why = UNKNOWN, (f"the main phase ran only {_secs(tl.ran_after)} after the last "
                                f"heal, less than the bound ({_secs(tl.bound)}), and no declare "
                                f"was answered yet")
    elif f.probes_after == 0:
        status, why = UNKNOWN, "no probe op was invoked through it after the last heal"
    else:
        status, why = UNKNOWN, ("no declare was answered after the last heal, and nothing "
                                "through it was refused past the bound")
    return {"status": status, "valid": VALID_OF[status], "reason": why, **out}


def _counts_by_node(rows: Sequence[ProbeCount]) -> list[dict[str, Any]]:
    """Takes one window's count rows. Returns per node (by name) its completions by type, by f
    and type, and its errors (the module's rules)."""
    out = []
    for node in sorted({r.node for r in rows}, key=lambda n: (n is None, n or "")):
        mine = [r for r in rows if r.node == node]
        by_type = {t: sum(r.count for r in mine if r.type == t) for t in TYPES}
        ops: dict[str, dict[str, int]] = {}
        for r in mine:
            ops.setdefault(r.f, dict.fromkeys(TYPES, 0))[r.type] += r.count
        errors: dict[tuple[str, str, int | None], int] = {}
        for r in mine:
            if r.type != "ok":
                key = (r.type, r.error or "", r.reply_code)
                errors[key] = errors.get(key, 0) + r.count
        ranked = sorted(errors.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1]))
        out.append({"node": node, **by_type, "ops": dict(sorted(ops.items())),
                    "errors": [{"type": t, "error": e, "reply_code": c, "count": n}
                               for (t, e, c), n in ranked[:MAX_ERRORS]],
                    "more_errors": max(0, len(ranked) - MAX_ERRORS)})
    return out


def windows_breakdown(counts: Sequence[ProbeCount], windows: Sequence[FaultWindow]
                      ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Takes the count rows and the fault windows. Returns (each window with its fault's
    description and its nodes' counts, the nodes' counts outside every window)."""
    out = []
    for i, w in enumerate(windows):
        out.append({"window": i, "fault": w.fault, **window_dict(w),
                    "nodes": _counts_by_node([r for r in counts if r.window == i])})
    return out, _counts_by_node([r for r in counts if r.window == OUTSIDE])


def _bound_fields(bound: LivenessBound | None) -> dict[str, Any]:
    if bound is None:
        return {"bound_ms": None, "bound": None}
    return {"bound_ms": ns_to_ms(bound.bound_ns), "bound": bound.as_dict()}


def _totals(f: ProbeNodeFacts) -> dict[str, Any]:
    return {"node": f.node, "ok": f.ok, "fail": f.fail, "info": f.info}


def metadata_section(facts: Sequence[ProbeNodeFacts], counts: Sequence[ProbeCount],
                     windows: Sequence[FaultWindow], main_phase: tuple[int, int],
                     bound: LivenessBound | None, observed: Mapping[str, Any]
                     ) -> dict[str, Any]:
    """Takes the Spark job's facts per node and count rows, the fault windows, the main phase
    [start, end] (ns), the bound's inputs (None: not known) and the harness's observation of
    the probe. Returns the "metadata" section (the module's rules)."""
    facts = sorted(facts, key=lambda f: (f.node is None, f.node or ""))
    per_window, outside = windows_breakdown(counts, windows)
    section: dict[str, Any] = {
        FALSE_ONLY: True, **_bound_fields(bound),
        "probe": {k: observed.get(k) for k in ("nodes", "interval_s", "timeout_s")},
        "windows": per_window, "outside_faults": outside, "findings": []}
    never = [w for w in windows if w.closed_by is None]
    tl = timeline(windows, main_phase, bound)
    if not windows or never or tl is None:
        reason = ("no fault was played, so nothing had to come back" if not windows else
                  f"the fault {never[0].fault} was never healed: there is no last heal to "
                  f"judge from" if never else
                  "net_ticktime and the harness's recovery settings are unknown (no "
                  "test.json): there is no bound")
        status = UNKNOWN if windows and not never else NA
        section.update(valid="unknown", status=status, reason=reason,
                       nodes=[_totals(f) for f in facts], summary=f"{status}: {reason}")
        return section
    w = last_heal(windows)
    assert w is not None
    nodes = [{**_totals(f), "after_heal": judge_node(f, tl)} for f in facts]
    findings = [_finding(n, tl) for n in nodes if n["after_heal"]["valid"] is False]
    verdicts = [n["after_heal"]["valid"] for n in nodes]
    valid: bool | str = (False if False in verdicts else
                         True if verdicts and all(v is True for v in verdicts) else "unknown")
    section.update(
        valid=valid, status=SERVED if valid is True else NEVER if valid is False else UNKNOWN,
        last_heal_ms=ns_to_ms(tl.heal), last_heal={"fault": w.fault, "closed_by": w.closed_by},
        main_after_heal_ms=ns_to_ms(tl.ran_after), judged=tl.judged, nodes=nodes,
        findings=findings)
    section["summary"] = summary_line(section)
    return section


def _finding(node: Mapping[str, Any], tl: Timeline) -> dict[str, Any]:
    v = node["after_heal"]
    said = ("served metadata again only late" if v["status"] == LATE
            else "never served metadata again")
    return {"node": node["node"], "status": v["status"], "last_heal_ms": ns_to_ms(tl.heal),
            "bound_ms": ns_to_ms(tl.bound), "first_served_ms": v["first_served_ms"],
            "refused_past_bound_ms": v["refused_past_bound_ms"],
            "statement": f"{node['node']} {said} after the last heal: {v['reason']}"}


def summary_line(section: Mapping[str, Any]) -> str:
    """Takes a metadata section. Returns one line saying what it found, for the terminal."""
    bound = section.get("bound_ms")
    within = f"within {bound / 1000:g} s" if isinstance(bound, int | float) else "in time"
    nodes = section.get("nodes") or []
    refused = sum(n.get("fail", 0) + n.get("info", 0) for n in nodes)
    findings = section.get("findings") or []
    if findings:
        return "; ".join(f["statement"] for f in findings)
    if section.get("valid") is True:
        return (f"every probed node ({len(nodes)}) served metadata again {within} of the last "
                f"heal; {refused} probe op(s) refused or unanswered in all")
    reasons = sorted({n["after_heal"]["reason"] for n in nodes
                      if n.get("after_heal", {}).get("valid") is not True})
    return "unknown: " + ("; ".join(reasons) if reasons else str(section.get("reason")))
