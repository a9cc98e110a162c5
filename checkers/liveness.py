"""Liveness after the heal: did confirms and deliveries resume, per queue and node, in time?

The worst incidents are often queues that never come back: a quorum queue
stuck after a partition, publishers whose confirms never return, consumers
never fed again. This module judges, from facts the Spark job counts per
queue and node (checkers.spark_liveness: the node a client was connected to,
as the history records it on each op), whether publishing (confirms: `ok`
publish completions) and consuming (deliveries of the main phase, acked when
the history records acks) resumed within a bound after the *last heal*: the
end of the last fault window (history.faults), in the main phase, the only
phase in which the workload's clients run.

The bound (`LivenessBound`) is RabbitMQ's failure detection plus the harness's
own patience: 1.25 x net_ticktime (a peer silent that long is declared down,
so a link the heal restored may still be judged by it until then), plus the
grace the harness's recovery gives a node that stays unhealthy before it
restarts it (harness.recovery, at most its recovery timeout). A node still
not serving past it is one the harness itself would be mending.

The rules, with H the last heal, B the bound and M the main phase's end:

- confirms through node n *resumed* when a publish through n was confirmed in
  [H, H + B]. They *did not resume* (false) when none was, and a publish
  through n completed `fail` or `info` (a nack, a return, no confirm within
  the client's timeout, a broken connection, no answer until the run's end)
  at or after H + B, before any confirm: a client was still being refused
  there past the bound
  ("resumed-late" when confirms came later, "not-resumed" when never).
  Anything else is unknown, with its reason: the main phase ended before
  H + B; no client published through n after the heal (a refused connection
  leaves no op, so a node refusing every connection looks the same); the
  clients left n before the bound; the first confirm came past the bound to a
  client that was not refused before it.
- deliveries through n *resumed* when a consumer there was fed in [H, H + B]
  (and acked what it was fed afterwards). A consumer that waits leaves no op,
  so no node's deliveries are ever judged false; the queue's are: they *did
  not resume* when no consumer anywhere was fed in [H, H + B] although the
  main phase ran past it, consumers were running (they were fed before the
  heal) and the queue held confirmed messages nobody had consumed at H + B.
- not applicable: a run without faults, a fault never healed.

The section's `valid` is false when any judgement is, true when every queue
confirmed and delivered again within the bound (nodes without a client after
the heal do not make it unknown), else "unknown". It composes with the
others *only when false* (`results.FALSE_ONLY`): a run whose main phase ends
at its last heal (the nemesis fills the main phase with faults) cannot say
whether the queue came back, and that is no reason to doubt its other
sections; a queue seen not to come back is a failure.

The harness's own restarts (harness.recovery, f "recover-node" and
"recover-queue") come after the main phase: they do not change what the
clients saw, and the section lists them, per node, as the sign that a node
did not come back whole by itself within the harness's grace. Pure: no Spark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from checkers.model import ns_to_ms
from checkers.phases import HarnessEvent, phase_start
from checkers.results import FALSE_ONLY
from checkers.traces import MEND_FS
from history.faults import FaultWindow

NS: Final = 1_000_000_000
# RabbitMQ declares a silent peer down after 0.75-1.25 x net_ticktime.
DETECTION_FACTOR: Final = 1.25
FORMULA: Final = "1.25 x net_ticktime + min(grace, recovery_timeout)"
# A publish completed `info` for this reason was never asked to be confirmed: no refusal.
CONFIRMS_OFF: Final = "confirms off"

RESUMED: Final = "resumed"
LATE: Final = "resumed-late"
STALLED: Final = "not-resumed"
UNKNOWN: Final = "unknown"
NA: Final = "not-applicable"
VALID_OF: Final[Mapping[str, bool | str]] = {
    RESUMED: True, LATE: False, STALLED: False, UNKNOWN: "unknown", NA: "unknown"}


@dataclass(frozen=True)
class LivenessBound:
    """What the bound is derived from (seconds): the broker's net_ticktime, the grace the
    harness's recovery gives an unhealthy node before it restarts it, and the recovery's
    overall timeout; `source` says where they were read."""

    net_ticktime_s: float
    grace_s: float
    recovery_timeout_s: float
    source: str = "test.json"

    @property
    def detection_s(self) -> float:
        """Returns how long RabbitMQ may take to declare a silent peer down (1.25 x tick)."""
        return DETECTION_FACTOR * self.net_ticktime_s

    @property
    def bound_ns(self) -> int:
        """Returns the bound in ns: detection plus the grace (at most the recovery timeout)."""
        return round((self.detection_s + min(self.grace_s, self.recovery_timeout_s)) * NS)

    def as_dict(self) -> dict[str, Any]:
        """Returns the bound, its formula, its inputs and a sentence deriving it."""
        patience = min(self.grace_s, self.recovery_timeout_s)
        return {
            "bound_ms": ns_to_ms(self.bound_ns), "formula": FORMULA,
            "net_ticktime_s": self.net_ticktime_s, "detection_s": self.detection_s,
            "grace_s": self.grace_s, "recovery_timeout_s": self.recovery_timeout_s,
            "source": self.source,
            "derivation": (
                f"RabbitMQ declares a silent peer down within 1.25 x net_ticktime "
                f"({DETECTION_FACTOR:g} x {self.net_ticktime_s:g} s = {self.detection_s:g} s); "
                f"the harness's recovery then gives a node that stays unhealthy "
                f"{self.grace_s:g} s before it restarts it (its whole recovery at most "
                f"{self.recovery_timeout_s:g} s): {self.detection_s:g} + {patience:g} = "
                f"{self.detection_s + patience:g} s after the last heal, a node not serving is "
                f"one the harness itself would be mending"),
        }


@dataclass(frozen=True)
class NodeFacts:
    """What the Spark job counts for one queue and node (times in ns; None: no such op).

    Publishes: the last confirm before the heal and the first at or after it;
    how many were invoked at or after it in the main phase; how many completed
    refused (fail, or info other than CONFIRMS_OFF) at or after it, the last of
    them, and the first at or after heal + bound. Deliveries (f consume, main
    phase): the last before the heal, the first after it whose consumer acked
    afterwards (any delivery, in a history without acks), and how many came after
    it; deliveries of the drain, for the record.
    """

    queue: str | None
    node: str | None
    confirm_before: int | None = None
    confirm_after: int | None = None
    publishes_after: int = 0
    refused_after: int = 0
    last_refused: int | None = None
    refused_past_bound: int | None = None
    delivery_before: int | None = None
    delivery_after: int | None = None
    deliveries_after: int = 0
    drain_deliveries: int = 0


@dataclass(frozen=True)
class Timeline:
    """The run's clock as liveness reads it (ns): the last heal, the bound, the main phase's end."""

    heal: int
    bound: int
    main_end: int

    @property
    def ran_after(self) -> int:
        """Returns how long the main phase ran after the last heal (ns, never below 0)."""
        return max(0, self.main_end - self.heal)

    @property
    def judged(self) -> bool:
        """Returns whether the main phase ran at least the bound after the last heal."""
        return self.ran_after >= self.bound

    def rel(self, t: int | None) -> float | None:
        """Takes a time (ns) or None. Returns it in ms after the last heal (negative before)."""
        return None if t is None else ns_to_ms(t - self.heal)


def _secs(ns: int | None) -> str:
    return "?" if ns is None else f"{ns / NS:.1f} s"


def _too_short(tl: Timeline) -> str:
    return (f"the main phase ran only {_secs(tl.ran_after)} after the last heal, less than the "
            f"bound ({_secs(tl.bound)}): the clients stopped before it")


def judge_confirms(f: NodeFacts, tl: Timeline) -> dict[str, Any]:
    """Takes a queue and node's facts and the timeline. Returns whether confirms through the
    node resumed (the module's rules): status, valid, reason and timeline (ms after the heal)."""
    first, refused = f.confirm_after, f.refused_past_bound
    out: dict[str, Any] = {
        "last_before_ms": tl.rel(f.confirm_before), "first_after_ms": tl.rel(first),
        "publishes_after": f.publishes_after, "refused_after": f.refused_after,
        "last_refused_ms": tl.rel(f.last_refused), "refused_past_bound_ms": tl.rel(refused)}
    if first is not None and first - tl.heal <= tl.bound:
        status, why = RESUMED, f"confirmed again {_secs(first - tl.heal)} after the last heal"
    elif refused is not None and (first is None or refused < first):
        status = LATE if first is not None else STALLED
        why = (f"no confirm within the bound ({_secs(tl.bound)}); a publish through it still "
               f"ended unconfirmed (nacked, returned, timed out, its connection lost, or "
               f"unanswered until the run's end) {_secs(refused - tl.heal)} after the last heal, "
               + (f"and the first confirm came only {_secs(first - tl.heal)} after it"
                  if first is not None else
                  f"and none was confirmed in the {_secs(tl.ran_after)} the main phase ran on"))
    elif first is not None:
        status = UNKNOWN
        why = (f"its first confirm after the heal came {_secs(first - tl.heal)} after it, past the "
               f"bound, but no publish through it was refused past the bound: whether it served "
               f"sooner cannot be said")
    elif not tl.judged:
        status, why = UNKNOWN, _too_short(tl)
    elif f.publishes_after == 0:
        status, why = UNKNOWN, ("no client published through it after the last heal (a refused "
                                "connection leaves no op)")
    elif f.last_refused is None:
        status, why = UNKNOWN, ("the publishes through it after the last heal were neither "
                                "confirmed nor refused")
    else:
        status = UNKNOWN
        why = (f"its clients were refused until {_secs(f.last_refused - tl.heal)} after the last "
               f"heal, before the bound, and no client published through it after the bound")
    return {"status": status, "valid": VALID_OF[status], "reason": why, **out}


def judge_deliveries(f: NodeFacts, tl: Timeline) -> dict[str, Any]:
    """Takes a queue and node's facts and the timeline. Returns whether deliveries through the
    node resumed: "resumed" or "unknown" (a waiting consumer leaves no op), with the timeline."""
    first = f.delivery_after
    out: dict[str, Any] = {
        "last_before_ms": tl.rel(f.delivery_before), "first_after_ms": tl.rel(first),
        "deliveries_after": f.deliveries_after, "drain_deliveries": f.drain_deliveries}
    if first is not None and first - tl.heal <= tl.bound:
        status, why = RESUMED, f"a consumer was fed again {_secs(first - tl.heal)} after the heal"
    elif first is not None:
        status, why = UNKNOWN, (f"first fed {_secs(first - tl.heal)} after the last heal, past the "
                                f"bound; a consumer waiting before then leaves no op")
    elif not tl.judged:
        status, why = UNKNOWN, _too_short(tl)
    else:
        status, why = UNKNOWN, ("no consumer was fed through it after the last heal; whether one "
                                "was waiting there cannot be told (a waiting consumer leaves no op)")
    return {"status": status, "valid": VALID_OF[status], "reason": why, **out}


def judge_queue_deliveries(facts: Sequence[NodeFacts], tl: Timeline,
                           held: int | None) -> dict[str, Any]:
    """Takes one queue's facts (every node), the timeline and how many confirmed messages nobody
    had consumed at heal + bound (None: not counted). Returns whether any consumer of the queue
    was fed again within the bound (the module's rules)."""
    firsts = [f.delivery_after for f in facts if f.delivery_after is not None]
    first = min(firsts) if firsts else None
    before = [f.delivery_before for f in facts if f.delivery_before is not None]
    out: dict[str, Any] = {"last_before_ms": tl.rel(max(before) if before else None),
                           "first_after_ms": tl.rel(first), "held_at_bound": held}
    if first is not None and first - tl.heal <= tl.bound:
        status, why = RESUMED, f"consumers were fed again {_secs(first - tl.heal)} after the heal"
    elif not tl.judged:
        status, why = UNKNOWN, _too_short(tl)
    elif not before:
        status, why = NA, "no consumer was fed in the main phase before the last heal"
    elif not held:
        status, why = UNKNOWN, ("the queue held no confirmed, unconsumed message when the bound "
                                "ran out: there was nothing to deliver" if held == 0 else
                                "what the queue held when the bound ran out was not counted")
    else:
        status = LATE if first is not None else STALLED
        why = (f"consumers ran, and {held} confirmed messages waited, yet no consumer was fed "
               f"within the bound ({_secs(tl.bound)}) after the last heal; "
               + (f"the first delivery came only {_secs(first - tl.heal)} after it"
                  if first is not None else
                  f"none was fed in the {_secs(tl.ran_after)} the main phase ran on"))
    return {"status": status, "valid": VALID_OF[status], "reason": why, **out}


def mends_after(harness: Sequence[HarnessEvent], heal: int) -> list[dict[str, Any]]:
    """Takes the harness events and the last heal (ns). Returns the harness's own restarts after
    it (MEND_FS), each {f, node, action, outcome, at_ms, after_heal_ms} (when it began)."""
    out = []
    for e in harness:
        if e.f not in MEND_FS or not isinstance(e.value, dict) or e.time < heal:
            continue
        took = e.value.get("seconds")
        began = e.time - round(float(took) * NS) if isinstance(took, int | float) else e.time
        out.append({"f": e.f, "node": e.value.get("node") or e.node,
                    "action": e.value.get("action"), "outcome": e.value.get("outcome"),
                    "at_ms": ns_to_ms(began), "after_heal_ms": ns_to_ms(began - heal)})
    return out


def _not_applicable(reason: str, bound: LivenessBound | None) -> dict[str, Any]:
    return {"valid": "unknown", FALSE_ONLY: True, "status": NA, "reason": reason,
            **_bound_fields(bound), "queues": [], "findings": [],
            "summary": f"not applicable: {reason}"}


def _bound_fields(bound: LivenessBound | None) -> dict[str, Any]:
    if bound is None:
        return {"bound_ms": None, "bound": None}
    return {"bound_ms": ns_to_ms(bound.bound_ns), "bound": bound.as_dict()}


def last_heal(windows: Sequence[FaultWindow]) -> FaultWindow | None:
    """Takes the fault windows. Returns the one that ended last (the last heal), or None."""
    return max(windows, key=lambda w: (w.end_ns, w.start_ns)) if windows else None


def timeline(windows: Sequence[FaultWindow], main_phase: tuple[int, int],
             bound: LivenessBound | None) -> Timeline | None:
    """Takes the fault windows, the main phase and the bound's inputs. Returns the timeline to
    judge by, or None when there is none (no fault, a fault never healed, no bound)."""
    w = last_heal(windows)
    if w is None or bound is None or any(x.closed_by is None for x in windows):
        return None
    return Timeline(w.end_ns, bound.bound_ns, main_phase[1])


def liveness_section(facts: Sequence[NodeFacts], windows: Sequence[FaultWindow],
                     main_phase: tuple[int, int], harness: Sequence[HarnessEvent],
                     bound: LivenessBound | None, held: int | None) -> dict[str, Any]:
    """Takes the Spark job's facts per queue and node, the fault windows, the main phase
    [start, end] (ns), the harness events, the bound's inputs (None: not known) and the
    confirmed messages nobody had consumed at heal + bound. Returns the "liveness" section."""
    if not windows:
        return _not_applicable("no fault was played, so nothing had to come back", bound)
    never = [w for w in windows if w.closed_by is None]
    if never:
        return _not_applicable(f"the fault {never[0].fault} was never healed (no stop or heal "
                               f"op): there is no last heal to judge from", bound)
    if bound is None:
        sec = _not_applicable("net_ticktime and the harness's recovery settings are unknown (no "
                              "test.json): there is no bound", None)
        sec["status"] = UNKNOWN
        sec["summary"] = f"unknown: {sec['reason']}"
        return sec
    w, tl = last_heal(windows), timeline(windows, main_phase, bound)
    assert w is not None and tl is not None
    mends = mends_after(harness, tl.heal)
    facts = _with_fault_nodes(facts, windows)
    queues = []
    findings = []
    for queue in sorted({f.queue for f in facts}, key=lambda q: (q is None, q or "")):
        mine = sorted((f for f in facts if f.queue == queue), key=lambda f: (f.node is None,
                                                                            f.node or ""))
        nodes: list[dict[str, Any]] = []
        for f in mine:
            confirms_n = judge_confirms(f, tl)
            mended = [m for m in mends if m["node"] == f.node]
            nodes.append({"node": f.node, "confirms": confirms_n,
                          "deliveries": judge_deliveries(f, tl), "mended": mended})
            if confirms_n["valid"] is False:
                findings.append(_finding(queue, f.node, "confirms", confirms_n, tl, bound, mended))
        confirms = _queue_confirms(nodes)
        deliveries = judge_queue_deliveries(mine, tl, held)
        if deliveries["valid"] is False:
            findings.append(_finding(queue, None, "deliveries", deliveries, tl, bound, mends))
        queues.append({"queue": queue, "confirms": confirms, "deliveries": deliveries,
                       "nodes": nodes})
    valid = _valid(queues)
    section: dict[str, Any] = {
        "valid": valid, FALSE_ONLY: True, "status": _status(valid),
        **_bound_fields(bound),
        "last_heal_ms": ns_to_ms(tl.heal), "last_heal": {"fault": w.fault,
                                                         "closed_by": w.closed_by},
        "main_end_ms": ns_to_ms(tl.main_end), "main_after_heal_ms": ns_to_ms(tl.ran_after),
        "judged": tl.judged, "drain_after_heal_ms": tl.rel(phase_start(harness, "drain")),
        "queues": queues, "findings": findings, "mends": mends,
        "mends_statement": _mends_statement(mends),
    }
    section["summary"] = summary_line(section)
    return section


def _with_fault_nodes(facts: Sequence[NodeFacts], windows: Sequence[FaultWindow]
                      ) -> list[NodeFacts]:
    """Adds an empty row for each node a fault hit that no client of the (one) queue named."""
    out = list(facts)
    queues = {f.queue for f in facts}
    if len(queues) != 1:
        return out
    (queue,) = queues
    known = {f.node for f in facts}
    hit = sorted({n for w in windows for n in (w.target or ())} - {n for n in known if n})
    return out + [NodeFacts(queue, n) for n in hit]


def _queue_confirms(nodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Takes a queue's node verdicts. Returns the queue's: resumed when some node confirmed
    again within the bound, else the worst node's."""
    verdicts = [n["confirms"] for n in nodes]
    resumed = [n["node"] for n in nodes if n["confirms"]["status"] == RESUMED]
    if resumed:
        return {"status": RESUMED, "valid": True, "nodes": resumed}
    failing = [n["node"] for n in nodes if n["confirms"]["valid"] is False]
    if failing:
        return {"status": STALLED, "valid": False, "nodes": failing}
    reasons = sorted({v["reason"] for v in verdicts})
    return {"status": UNKNOWN, "valid": "unknown", "nodes": [],
            "reason": "; ".join(reasons) or "no client published after the last heal"}


def _valid(queues: Sequence[Mapping[str, Any]]) -> bool | str:
    """False if any judgement is; true if every queue confirmed again and delivered again (or
    had no consumers); else unknown."""
    every = [q["confirms"]["valid"] for q in queues] + [q["deliveries"]["valid"] for q in queues]
    every += [n["confirms"]["valid"] for q in queues for n in q["nodes"]]
    if any(v is False for v in every):
        return False
    if queues and all(q["confirms"]["valid"] is True
                      and (q["deliveries"]["valid"] is True or q["deliveries"]["status"] == NA)
                      for q in queues):
        return True
    return "unknown"


def _status(valid: bool | str) -> str:
    if valid is True:
        return RESUMED
    if valid is False:
        return STALLED
    return UNKNOWN


def _finding(queue: str | None, node: str | None, what: str, verdict: Mapping[str, Any],
             tl: Timeline, bound: LivenessBound, mends: Sequence[Mapping[str, Any]]
             ) -> dict[str, Any]:
    """Returns a finding: what did not resume where, with its timeline (ms, absolute and after
    the heal) and what the harness did about it."""
    where = f"through {node}" if node is not None else "anywhere"
    text = (f"{what} of queue {queue} {where} "
            + ("resumed only late" if verdict["status"] == LATE else "did not resume")
            + f" after the last heal: {verdict['reason']}")
    if mends:
        text += ("; the harness then restarted " + ", ".join(
            f"{m['node'] or 'every node'} ({m['action'] or m['f']}, "
            f"{(m['after_heal_ms'] or 0) / 1000:.1f} s after the heal)" for m in mends)
            + " to mend the cluster")
    return {"queue": queue, "node": node, "what": what, "status": verdict["status"],
            "last_heal_ms": ns_to_ms(tl.heal), "bound_ms": ns_to_ms(bound.bound_ns),
            "last_before_ms": verdict.get("last_before_ms"),
            "first_after_ms": verdict.get("first_after_ms"),
            "main_after_heal_ms": ns_to_ms(tl.ran_after), "mended": list(mends),
            "statement": text}


def _mends_statement(mends: Sequence[Mapping[str, Any]]) -> str:
    if not mends:
        return "The harness restarted no node after the last heal."
    return ("After the main phase the harness restarted " + "; ".join(
        f"{m['node'] or 'every node'} by {m['action'] or m['f']} "
        f"{(m['after_heal_ms'] or 0) / 1000:.1f} s after the last heal" for m in mends)
        + ": the cluster did not come back whole by itself within the harness's grace.")


def summary_line(section: Mapping[str, Any]) -> str:
    """Takes a liveness section. Returns one line saying what it found, for the terminal."""
    bound = section.get("bound_ms")
    within = f"within {bound / 1000:g} s" if isinstance(bound, int | float) else "in time"
    findings = section.get("findings") or []
    if findings:
        heal = section.get("last_heal_ms")
        said = "; ".join(
            f"{f['what']} {'through ' + str(f['node']) if f['node'] is not None else 'anywhere'}"
            f"{' of queue ' + str(f['queue']) if len(section.get('queues') or []) > 1 else ''} "
            + ("resumed only late" if f["status"] == LATE else "stuck after a heal"
               if f["status"] == "stuck" else "never resumed")
            for f in findings)
        at = f" of the last heal at {heal / 1000:.1f} s" if isinstance(heal, int | float) else ""
        return f"{len(findings)} finding(s), {within}{at}: {said}"
    if section.get("valid") is True:
        return f"confirms and deliveries resumed {within} of the last heal"
    queues = section.get("queues") or []
    reasons = sorted({q["confirms"].get("reason") or q["deliveries"].get("reason")
                      for q in queues if q["confirms"]["valid"] is not True
                      or q["deliveries"]["valid"] is not True} - {None})
    if not section.get("judged", True) and isinstance(section.get("main_after_heal_ms"),
                                                      int | float):
        return (f"unknown: the main phase ran {section['main_after_heal_ms'] / 1000:.1f} s after "
                f"the last heal, less than the bound ({within.removeprefix('within ')})")
    return "unknown: " + ("; ".join(reasons) if reasons else str(section.get("reason")))
