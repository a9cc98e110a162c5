"""Did each fault bite? Per-fault efficacy and the run's test strength, from the broker's evidence.

A valid verdict is only as strong as its faults. For every fault window this
module says (results.json `faults`, shared/DESIGN.md "Test strength"):

- `noticed`: whether RabbitMQ noticed it, by which detector and how long after
  it began (checkers.broker_log has the detectors and their log lines). A
  detection counts for a window when it comes from a node's log between the
  fault's start and its heal ("during"), or within `late_margin_ns` after the
  heal and before the next fault ("after_heal": a late net_tick_timeout then
  partitions a healed cluster). A distribution detection must be about the
  fault: for a partition, between two nodes the grudge cuts apart; for a
  fault on nodes (kill, stop, pause, packet faults, RabbitMQ's own operations),
  about one of them; so must a resource alarm ("alarm") and an operation carried
  out ("operation": a drain, a member deleted). A Raft election (or a leader
  handing over or leaving) in the window counts whatever the fault, and so does
  a node's own recovery finding at its next boot that it had not stopped
  cleanly ("recovery": its message store rebuilt for want of a clean stop's
  file summary; the one notice a power loss of every node leaves, where no peer
  is up to log it). `unknown`
  when no node's log covers the fault's start (logs missing), never `noticed`;
- `effects`: what it caused, each with its time, node and evidence: pauses and
  autoheal restarts, leader elections (a failover when another node leads
  afterwards), mirror promotions (synchronised or not, from the placement
  samples), nodes booting again, nodes drained, quorum members removed, leaders
  handing over, publishes cut and publishes blocked (from the history: the
  publishers' connections the broker blocked, and the publishes left unknown
  because they were), and a node that would not boot again after it
  ("node-did-not-boot", from the harness's record: checkers.unrecoverable);
- `at_risk`: confirmed, unconsumed messages when it began (the Spark count over
  the history, checkers.spark_risk) and the nearest depth sample before it.
- `dropped` (a power loss only): what each target's unsynced layer dropped, from the
  fault's start op (nemesis.faults.disk): `{node: {"bytes", "files"}}`, the totals, and
  `model`, the layers' durability model in words (e.g. "ext4, writeback 30 s": what was lost
  is what that model loses; absent when the layers did not say, before it was recorded); where
  the layers said them, each node's `oldest_unsynced_s` (the age at the cut of the oldest write
  it dropped; the largest over the nodes beside the totals), its dropped files (`paths`, each
  with its ages: first and last unsynced write, last fsync, directory fsync, data last durable
  and how) and how many files written since it kept whole (`kept`, the latest in
  `kept_paths`): a file lost though written long before the cut (as a layer without writeback
  loses it) is one a real kernel would have written back, one written just before it is lost
  on any.

`strength` sums them up (and counts the effects by kind): a run is *weak* when
it had faults and none was noticed, or when no noticed fault found anything at
risk, or when it had power losses and none of them dropped a byte on any node (the
layer held nothing unsynced: the loss tested nothing a kill would not); a run with no
faults is a control. A weak run is never a pass
(checkers.verdict). Pure: no Spark, no files.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from checkers.broker_log import LogCoverage, LogEvent
from checkers.phases import HarnessEvent, phase_of
from checkers.traces import MEND_FS
from checkers.unrecoverable import did_not_boot, unrecoverable_nodes
from history import BLOCKED
from history.faults import FaultWindow, kind_named

NS: Final = 1_000_000_000
MS: Final = 1_000_000
# Effects that hand a queue to another node.
FAILOVER_KINDS: Final = frozenset({"failover", "promotion", "unsynchronised-promotion"})
# Log event kinds that are effects, and the name results.json gives each.
EFFECT_KINDS: Final[Mapping[str, str]] = {
    "pause-minority": "pause-minority",
    "autoheal-restart": "autoheal-restart",
    "no-synchronised-mirror": "master-stopped-without-synchronised-mirror",
    "node-start": "node-restart",
    "metadata-leader": "metadata-store-leader-elected",
    "node-drained": "node-drained",
    "member-deleted": "member-removed",
    "leader-removed": "member-removed",
    "leader-handover": "leader-handover",
    "wal-checksum-failed": "wal-checksum-failed",
    "segment-checksum-failed": "segment-checksum-failed",
    "queue-recovered-unclean": "queue-recovered-after-unclean-shutdown",
}
PLURAL: Final[Mapping[str, str]] = {
    "partition": "partitions", "kill": "kills", "stop": "stops", "pause": "pauses",
    "packet": "packet faults", "rolling-restart": "rolling restarts",
    "full-restart": "full restarts", "leader-transfer": "leader transfers",
    "member-remove": "member removals", "maintenance": "drains", "alarm": "resource alarms",
    "power-loss": "power losses", "disk-corrupt": "disk corruptions",
}


@dataclass(frozen=True)
class Evidence:
    """What the broker's side of a run says: its log events and the span each node's logs cover
    (checkers.broker_log.read_events), net_ticktime, and the queue's leader when the run began
    (None when unknown)."""

    events: Sequence[LogEvent] = ()
    coverage: Mapping[str, LogCoverage] = field(default_factory=dict)
    net_ticktime_s: float | None = None
    initial_leader: str | None = None

    def detection_range_s(self) -> tuple[float, float] | None:
        """Returns the distribution's detection time of a silent peer, (0.75, 1.25) x
        net_ticktime in seconds, or None when net_ticktime is unknown."""
        t = self.net_ticktime_s
        return None if t is None else (0.75 * t, 1.25 * t)

    def late_margin_ns(self) -> int:
        """Returns how long after a heal a detection still counts as the fault's: a tick check
        pending at the heal fires within half a tick, and TCP's retransmission backoff can
        hold the first packets back a little longer (2 s)."""
        t = self.net_ticktime_s if self.net_ticktime_s is not None else 60.0
        return int((0.5 * t + 2.0) * NS)


def _ms(ns: int | float) -> float:
    return round(ns / MS, 3)


def _cut(window: FaultWindow) -> Callable[[str, str | None], bool]:
    """Returns whether a detection logged by `node` about `peer` is about this fault."""
    value = window.value if isinstance(window.value, dict) else {}
    grudge = value.get("grudge")
    target = set(window.target or ())
    if window.kind == "partition" and isinstance(grudge, dict):
        drops = {str(a): {str(b) for b in bs} for a, bs in grudge.items() if isinstance(bs, list)}

        def cut(node: str, peer: str | None) -> bool:
            if peer is None:
                return True
            return peer in drops.get(node, set()) or node in drops.get(peer, set())
        return cut
    if window.kind in ("rolling-restart", "full-restart") or not target:
        return lambda _node, _peer: True
    # A fault on nodes: a line by or about one of them (a node losing 90% of its packets
    # declares its peers down itself; a killed or paused one cannot).
    return lambda node, peer: peer is None or peer in target or node in target


def _covered(window: FaultWindow, coverage: Mapping[str, LogCoverage]) -> bool:
    return any(c.first_ns <= window.start_ns <= c.last_ns for c in coverage.values())


@dataclass(frozen=True)
class _Span:
    begin: int  # when the fault was invoked: it may bite from then on
    start: int  # when its start completed: delays are measured from here
    end: int
    late_end: int
    horizon: int


def _harness_acts(harness: Sequence[HarnessEvent]) -> list[int]:
    """Returns when the harness itself began to act on the brokers (a mend: MEND_FS, recorded at its end
    with how many `seconds` it took; the teardown), in time order: what follows is no fault's
    doing."""
    acts = []
    for h in harness:
        if h.f in MEND_FS:
            took = h.value.get("seconds") if isinstance(h.value, dict) else None
            acts.append(h.time - int(float(took) * NS) if isinstance(took, int | float) else h.time)
        elif phase_of(h) == ("teardown", "start"):
            acts.append(h.time)
    return sorted(acts)


def _spans(windows: Sequence[FaultWindow], ev: Evidence, acts: Sequence[int]) -> list[_Span]:
    """Each window's own stretch of time: from its invocation to its heal, how late a detection
    may come (before the next fault starts), and how far its effects reach (to the next fault's
    start, at most 3 x net_ticktime + 30 s past its heal); nothing reaches past the harness's
    first own act on the brokers after the heal (`acts`: a mend, the teardown)."""
    tick = ev.net_ticktime_s if ev.net_ticktime_s is not None else 60.0
    reach = int((3 * tick + 30) * NS)
    begins = [w.start_ns if w.invoke_ns is None else min(w.invoke_ns, w.start_ns)
              for w in windows]
    spans = []
    for i, w in enumerate(windows):
        following = begins[i + 1] if i + 1 < len(windows) else None
        act = next((t for t in acts if t >= w.end_ns), None)
        nxt = min((t for t in (following, act) if t is not None), default=None)
        late = w.end_ns + ev.late_margin_ns()
        horizon = w.end_ns + reach
        if nxt is not None and nxt > w.start_ns:
            late, horizon = min(late, nxt), min(horizon, nxt)
        spans.append(_Span(begins[i], w.start_ns, w.end_ns, max(late, w.end_ns),
                           max(horizon, w.end_ns)))
    return spans


def _detection(e: LogEvent, start: int) -> dict[str, Any]:
    return {"detector": e.detector, "kind": e.kind, "at_ms": e.at_ms,
            "after_ms": _ms(max(0, e.time_ns - start)), "node": e.node, "peer": e.peer,
            "evidence": e.evidence, "text": e.text}


def _noticed(window: FaultWindow, span: _Span, ev: Evidence
             ) -> tuple[bool | str, int | None, str | None, list[dict[str, Any]]]:
    """Returns (noticed, ns after the start, "during"/"after_heal", the first detection of each
    detector)."""
    if not ev.coverage or not _covered(window, ev.coverage):
        return "unknown", None, None, []
    cut = _cut(window)  # a Raft election in the window is about the fault whatever it cut
    first: dict[str, LogEvent] = {}
    for e in ev.events:
        if e.detector is None or not span.begin <= e.time_ns <= span.late_end:
            continue
        if e.detector not in first and (e.detector in ("raft", "recovery")
                                        or cut(e.node, e.peer)):
            first[e.detector] = e
    if not first:
        return False, None, None, []
    earliest = min(first.values(), key=lambda e: e.time_ns)
    when = "during" if earliest.time_ns <= span.end else "after_heal"
    found = [_detection(e, span.start) for e in sorted(first.values(), key=lambda e: e.time_ns)]
    return True, max(0, earliest.time_ns - span.start), when, found


def _effect(kind: str, node: str | None, at_ns: int, evidence: str, text: str) -> dict[str, Any]:
    return {"kind": kind, "node": node, "at_ms": _ms(at_ns), "evidence": evidence, "text": text}


def _placements(harness: Sequence[HarnessEvent]) -> list[HarnessEvent]:
    return [h for h in harness if h.f == "placement" and isinstance(h.value, dict)]


def _synchronised(node: str, at: int, placements: Sequence[HarnessEvent]) -> bool | None:
    """Returns whether `node` was a synchronised mirror in the last placement sample before
    `at`, None when no sample says."""
    before = [p for p in placements if p.time < at]
    if not before:
        return None
    return node in (before[-1].value.get("synchronised_mirrors") or [])


def _promotion(e: LogEvent, placements: Sequence[HarnessEvent]) -> dict[str, Any]:
    """A mirror's own "Promoting mirror ... to leader" line, synchronised or not by the last
    placement sample before it."""
    synced = _synchronised(e.node, e.time_ns, placements)
    kind = "unsynchronised-promotion" if synced is False else "promotion"
    said = {True: "a synchronised mirror in the sample before",
            False: "not a synchronised mirror in the sample before",
            None: "no placement sample says whether it was synchronised"}[synced]
    return _effect(kind, e.node, e.time_ns, e.evidence, f"{e.node} promoted to master: {said}")


def _promotions(span: _Span, placements: Sequence[HarnessEvent]) -> list[dict[str, Any]]:
    """A mirrored queue's master (a placement with mirrors) moving to another node between two
    placement samples inside the span (for runs whose logs do not say): synchronised if the new
    master was a synchronised mirror in the sample before."""
    out = []
    for before, after in itertools.pairwise(placements):
        if not span.begin <= after.time < span.horizon:
            continue
        old, new = before.value.get("leader"), after.value.get("leader")
        mirrored = before.value.get("mirrors") or after.value.get("mirrors")
        if not mirrored or not old or not new or old == new:
            continue  # a quorum queue's leader moves by election, told by its members' logs
        synced = new in (before.value.get("synchronised_mirrors") or [])
        kind = "promotion" if synced else "unsynchronised-promotion"
        text = (f"master moved from {old} to {new}, "
                f"{'a synchronised mirror' if synced else 'a mirror that was not synchronised'} "
                f"in the sample before")
        out.append(_effect(kind, new, after.time, "placement sample", text))
    return out


class _Leaders:
    """Follows a quorum queue's leader through its elections, to tell a failover (another node
    leads) from a re-election."""

    def __init__(self, initial: str | None) -> None:
        self.leader = initial

    def elected(self, e: LogEvent) -> dict[str, Any]:
        before, self.leader = self.leader, e.node
        took = before is not None and before != e.node
        kind = "failover" if took else "leader-election"
        text = (f"{e.node} leads in term {e.term} (took over from {before})" if took
                else f"{e.node} leads in term {e.term}")
        return _effect(kind, e.node, e.time_ns, e.evidence, text)


def _log_effects(span: _Span, ev: Evidence, leaders: _Leaders,
                 placements: Sequence[HarnessEvent]) -> list[dict[str, Any]]:
    out = []
    for e in ev.events:
        if e.kind == "leader-elected" and e.time_ns < span.horizon:
            effect = leaders.elected(e)  # every election moves the leader, in or out of spans
            if span.begin <= e.time_ns:
                out.append(effect)
            continue
        if not span.begin <= e.time_ns < span.horizon:
            continue
        if e.kind == "promotion":
            out.append(_promotion(e, placements))
            continue
        name = EFFECT_KINDS.get(e.kind)
        if name is not None:
            out.append(_effect(name, e.node, e.time_ns, e.evidence, e.text))
    return out


def _blocked(span: _Span, held: int | None, harness: Sequence[HarnessEvent]
             ) -> dict[str, Any] | None:
    """The publishes a resource alarm held: the publishers' connections the broker blocked in
    the span (harness observations f "blocked") and the publishes left unknown because they
    were (`held`, the Spark count); None when there were none."""
    blocks = [h for h in harness if h.f == BLOCKED and span.begin <= h.time < span.horizon]
    if not blocks and not held:
        return None
    nodes = sorted({str(h.node) for h in blocks if h.node})
    reasons = sorted({str(h.value.get("reason")) for h in blocks
                      if isinstance(h.value, dict) and h.value.get("reason")})
    said = [f"{len(blocks)} publisher connection{'s' if len(blocks) != 1 else ''} blocked"
            + (f" ({', '.join(reasons)})" if reasons else "")
            + (f" on {', '.join(nodes)}" if nodes else "")]
    if held:
        said.append(f"{held} publishes ended unknown while blocked")
    first = blocks[0] if blocks else None
    return _effect("publishes-blocked", nodes[0] if len(nodes) == 1 else None,
                   first.time if first else span.start, "history", "; ".join(said))


def _once(effects: Sequence[dict[str, Any]], within_ms: float = 2000.0) -> list[dict[str, Any]]:
    """Returns the effects without repeats: the same kind on the same node again within
    `within_ms` (RabbitMQ logs pause_minority's line twice, a few ms apart)."""
    out: list[dict[str, Any]] = []
    last: dict[tuple[str, Any], float] = {}
    for e in effects:
        key = (e["kind"], e["node"])
        if key in last and e["at_ms"] - last[key] <= within_ms:
            continue
        last[key] = e["at_ms"]
        out.append(e)
    return out


def _depth_before(t: int, harness: Sequence[HarnessEvent]) -> dict[str, Any] | None:
    best = None
    for h in harness:
        if h.f != "depth" or not isinstance(h.value, dict) or h.time > t:
            continue
        if h.value.get("ready") is None:
            continue
        best = h
    if best is None:
        return None
    return {"ready": best.value.get("ready"), "unacked": best.value.get("unacked"),
            "at_ms": _ms(best.time), "source": "depth sample"}


def _evidence_sentence(window: FaultWindow, noticed: bool | str, after: int | None,
                       when: str | None, found: Sequence[Mapping[str, Any]],
                       ev: Evidence) -> str:
    lasted = (window.end_ns - window.start_ns) / NS
    if noticed == "unknown":
        return "no node's log covers this fault's start: whether RabbitMQ noticed it is unknown"
    if noticed is True and after is not None:
        first = found[0]
        late = " (after the heal)" if when == "after_heal" else ""
        return (f"noticed {after / NS:.1f} s in{late} by the {first['detector']} detector: "
                f"{first['node']} {first['evidence']}")
    rng = ev.detection_range_s()
    if kind_named(window.kind).silent and rng is not None:
        return (f"no node logged a detection: it healed after {lasted:.1f} s; with net_ticktime "
                f"{ev.net_ticktime_s:g} s detection takes {rng[0]:g}-{rng[1]:g} s")
    return f"no node logged a detection in the {lasted:.1f} s it lasted or just after"


def dropped_of(window: FaultWindow) -> dict[str, Any] | None:
    """Takes a fault window. Returns what a power loss dropped, per node (bytes and files) and
    in total, from its start op's value; None for a fault that drops nothing by design, or a
    power loss whose start recorded no report (it failed before)."""
    value = window.value if isinstance(window.value, dict) else {}
    per = value.get("dropped")
    if not isinstance(per, dict):
        return None
    nodes = {str(n): _node_dropped(d) for n, d in sorted(per.items()) if isinstance(d, dict)}
    out: dict[str, Any] = {"nodes": nodes, "bytes": sum(d["bytes"] for d in nodes.values()),
                           "files": sum(d["files"] for d in nodes.values())}
    oldest = [d["oldest_unsynced_s"] for d in nodes.values() if "oldest_unsynced_s" in d]
    if oldest:
        out["oldest_unsynced_s"] = max(oldest)
    models = sorted({str(d["model"]) for d in per.values() if isinstance(d, dict)
                     and d.get("model")})
    if models:
        out["model"] = "; ".join(models)
    return out


def _node_dropped(d: Mapping[str, Any]) -> dict[str, Any]:
    """Takes what one node's layer dropped, as the start op recorded it
    (nemesis.faults.disk.dropped_summary). Returns its bytes and files, and where the layer
    said them: the oldest dropped write's age at the cut, the files it dropped with their ages,
    how many written since it kept and the latest written of them."""
    out: dict[str, Any] = {"bytes": int(d.get("bytes") or 0), "files": int(d.get("files") or 0)}
    if d.get("oldest_unsynced_s") is not None:
        out["oldest_unsynced_s"] = float(d["oldest_unsynced_s"])
    for key in ("paths", "kept_paths"):
        if d.get(key):
            out[key] = [dict(p) for p in d[key] if isinstance(p, dict)]
    if d.get("kept") is not None:
        out["kept"] = int(d["kept"])
    return out


def damaged_of(window: FaultWindow) -> dict[str, Any] | None:
    """Takes a fault window. Returns what a disk corruption damaged, per node (files, bytes,
    bits, and each damage: path, mode, offset, length) and in total, from its start op's value;
    None for a fault that damages nothing by design, or one whose start recorded nothing (it
    failed before)."""
    value = window.value if isinstance(window.value, dict) else {}
    per = value.get("damaged")
    if not isinstance(per, dict):
        return None
    nodes = {str(n): {"files": int(d.get("files") or 0), "bytes": int(d.get("bytes") or 0),
                      "bits": int(d.get("bits") or 0), "paths": list(d.get("paths") or [])}
             for n, d in sorted(per.items()) if isinstance(d, dict)}
    return {"mode": value.get("mode"), "nodes": nodes,
            "files": sum(d["files"] for d in nodes.values()),
            "bytes": sum(d["bytes"] for d in nodes.values())}


def _disk_weakness(faults: Sequence[Mapping[str, Any]]) -> str | None:
    """Takes the `faults` list. Returns why its disk faults were all no more than kills (no
    power loss dropped anything, no corruption damaged anything), or None (one did something,
    or there were none)."""
    losses = [f for f in faults if isinstance(f.get("dropped"), dict)]
    hurt = [f for f in faults if isinstance(f.get("damaged"), dict)]
    if any(f["dropped"]["bytes"] or f["dropped"]["files"] for f in losses) or any(
            f["damaged"]["files"] for f in hurt):
        return None
    why = []
    if losses:
        why.append(f"none of the {len(losses)} power loss{'es' if len(losses) > 1 else ''} "
                   f"dropped an unsynced write on any node: the layers held nothing unsynced")
    if hurt:
        why.append(f"none of the {len(hurt)} disk corruption{'s' if len(hurt) > 1 else ''} "
                   f"damaged a file: no file of the queue's was found on the nodes hit")
    return "; ".join(why) + ", so each was no more than a kill" if why else None


def _damaged_bytes(faults: Sequence[Mapping[str, Any]]) -> int | None:
    """Takes the `faults` list. Returns the bytes its disk corruptions damaged, None without
    one."""
    hurt = [f for f in faults if isinstance(f.get("damaged"), dict)]
    return sum(int(f["damaged"]["bytes"]) for f in hurt) if hurt else None


def judge_faults(windows: Sequence[FaultWindow], facts: Sequence[Mapping[str, Any]],
                 harness: Sequence[HarnessEvent], ev: Evidence | None) -> list[dict[str, Any]]:
    """Takes the fault windows in start order, the Spark facts per window
    (checkers.spark_risk.risk_facts; empty when not computed), the harness events (depth and
    placement samples, publishers blocked) and the broker's evidence (None: no logs to read).
    Returns the results.json `faults` list (module docstring)."""
    ev = ev or Evidence()
    spans = _spans(windows, ev, _harness_acts(harness))
    placements = _placements(harness)
    leaders = _Leaders(ev.initial_leader or _first_leader(placements))
    out = []
    for i, (w, span) in enumerate(zip(windows, spans, strict=True)):
        noticed, after, when, found = _noticed(w, span, ev)
        effects = _log_effects(span, ev, leaders, placements)
        if not any(e["kind"] in FAILOVER_KINDS for e in effects):
            effects += _promotions(span, placements)
        fact = facts[i] if i < len(facts) else {}
        cut = fact.get("unknown_publishes")
        if cut:
            effects.append(_effect("connections-dropped", None, w.start_ns, "history",
                                   f"{cut} publishes ended unknown (info) during the fault: "
                                   f"a connection lost or a confirm that never came"))
        blocked = _blocked(span, fact.get("blocked_publishes"), harness)
        if blocked is not None:
            effects.append(blocked)
        effects = _once(sorted(effects, key=lambda x: (x["at_ms"], x["kind"])))
        out.append({
            "index": i, "f": w.f, "fault": w.fault, "kind": w.kind,
            "target": list(w.target) if w.target else None,
            "start_ms": _ms(w.start_ns), "end_ms": _ms(w.end_ns),
            "duration_ms": _ms(w.end_ns - w.start_ns),
            "noticed": noticed, "noticed_ms": None if after is None else _ms(after),
            "noticed_when": when, "detections": found, "effects": effects,
            "at_risk": {"count": fact.get("at_risk"), "source": "history",
                        "depth": _depth_before(w.start_ns, harness)},
            "evidence": _evidence_sentence(w, noticed, after, when, found, ev),
        })
        dropped = dropped_of(w)
        if dropped is not None:
            out[-1]["dropped"] = dropped
        damaged = damaged_of(w)
        if damaged is not None:
            out[-1]["damaged"] = damaged
    _add_did_not_boot(out, windows, harness)
    return out


def _add_did_not_boot(faults: list[dict[str, Any]], windows: Sequence[FaultWindow],
                      harness: Sequence[HarnessEvent]) -> None:
    """Adds to the fault that hit it each node recorded as one that would not boot again
    (checkers.unrecoverable): the last fault begun before the record whose targets name the
    node, else the last fault begun before it (a fault on the whole cluster)."""
    for node in unrecoverable_nodes(harness):
        at = int(node["at_s"] * NS)
        before = [i for i, w in enumerate(windows) if w.start_ns <= at]
        hit = [i for i in before if node["node"] in (windows[i].target or ())]
        chosen = hit[-1] if hit else before[-1] if before else None
        if chosen is not None:
            faults[chosen]["effects"].append(did_not_boot(node))


def _first_leader(placements: Sequence[HarnessEvent]) -> str | None:
    return next((str(p.value["leader"]) for p in placements if p.value.get("leader")), None)


def _kinds_text(faults: Sequence[Mapping[str, Any]]) -> str:
    kinds = list(dict.fromkeys(str(f["kind"]) for f in faults))
    n = len(faults)
    if len(kinds) == 1:
        word = kinds[0] if n == 1 else PLURAL.get(kinds[0], f"{kinds[0]} faults")
        return f"{n} {word}"
    return f"{n} faults"


def _effect_counts(faults: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Takes the `faults` list. Returns how many effects of each kind they had, by kind."""
    effects: dict[str, int] = {}
    for f in faults:
        for e in f["effects"]:
            effects[str(e["kind"])] = effects.get(str(e["kind"]), 0) + 1
    return dict(sorted(effects.items()))


def strength(faults: Sequence[Mapping[str, Any]], ev: Evidence | None) -> dict[str, Any]:
    """Takes the `faults` list and the evidence. Returns the `strength` section: counts, whether
    the run is weak and why, and a one-line summary (module docstring)."""
    ev = ev or Evidence()
    n = len(faults)
    noticed = [f for f in faults if f["noticed"] is True]
    late = sum(1 for f in noticed if f["noticed_when"] == "after_heal")
    unknown = sum(1 for f in faults if f["noticed"] == "unknown")
    failovers = sum(1 for f in faults for e in f["effects"] if e["kind"] in FAILOVER_KINDS)
    risks = [f["at_risk"]["count"] for f in faults if f["at_risk"]["count"] is not None]
    noticed_risks = [f["at_risk"]["count"] for f in noticed if f["at_risk"]["count"] is not None]
    most = max(risks) if risks else None
    rng = ev.detection_range_s()
    losses = [f for f in faults if isinstance(f.get("dropped"), dict)]
    disk_weak = _disk_weakness(faults)
    reason = ""
    if n == 0:
        weak, reason = False, "no faults: a control run"
    elif unknown == n:
        weak = True
        reason = (f"whether RabbitMQ noticed any of {_kinds_text(faults)} is unknown: no node "
                  f"log covers them")
    elif not noticed:
        weak = True
        reason = f"none of {_kinds_text(faults)} was noticed by RabbitMQ"
        short = [f for f in faults if kind_named(str(f["kind"])).silent]
        if short and rng is not None and len(short) == n:
            lasted = sorted({round(f["duration_ms"] / 1000) for f in short})
            each = (f"each healed after {lasted[0]} s" if len(lasted) == 1
                    else f"each healed after {lasted[0]}-{lasted[-1]} s")
            reason += (f": {each}; with net_ticktime {ev.net_ticktime_s:g} s detection takes "
                       f"{rng[0]:g}-{rng[1]:g} s")
    elif disk_weak is not None:
        weak, reason = True, disk_weak
    elif noticed_risks and max(noticed_risks) == 0:
        weak = True
        reason = ("nothing was at risk when the noticed faults began: no confirmed message was "
                  "waiting to be consumed")
    else:
        weak = False
    effects = _effect_counts(faults)
    unbooted = effects.get("node-did-not-boot", 0)
    summary = "no faults: a control run" if n == 0 else (
               f"faults noticed {len(noticed)} of {n}"
               + (f" ({late} only after the heal)" if late else "")
               + (f", {unknown} unknown" if unknown else "")
               + f", failovers {failovers}, most messages at risk "
               + (f"{most:,}" if most is not None else "unknown")
               + (f", {unbooted} node{'s' if unbooted > 1 else ''} did not boot again"
                  if unbooted else ""))
    return {"faults": n, "noticed": len(noticed), "noticed_after_heal": late,
            "unknown": unknown, "failovers": failovers, "effects": effects,
            "max_at_risk": most, "weak": weak,
            "dropped_bytes": (sum(int(f["dropped"]["bytes"]) for f in losses) if losses
                              else None),
            "damaged_bytes": _damaged_bytes(faults),
            "control": n == 0, "reason": reason, "summary": summary,
            "detection_s": list(rng) if rng is not None else None,
            "net_ticktime": ev.net_ticktime_s}
