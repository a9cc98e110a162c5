"""Incidents: the anomalies of a run grouped by the fault that let them happen, each told once.

A run with 2,400 lost messages under three partitions has a few stories, not
2,400. `assemble` groups the checker's anomalous messages into incidents
(results.json `"incidents"`, shared contract of issue 19), from results alone:

- which messages: the checker attributes each anomalous message to a fault
  window in Spark (checkers.fates: the first window, in start order, whose
  end is at or after the message's confirm; results.json's fates.by_fault
  holds the counts and a few example ids per window);
- which windows: windows that overlap in time belong to one incident (a kill
  during a partition is one story), and a group of windows makes an incident
  when some message of an anomaly class is attributed to it. The anomaly
  classes are the queue section's `anomalies` (lost, lost_unacked, unexpected,
  unflagged duplicates, ... as the check judged them), and "reordered" for
  ordering violations; other attributed classes (flagged duplicates, say) are
  counted in an incident that exists anyway, never make one. Anomalous
  messages attributed to no window (never published: unexpected; in a run
  without faults, all of them) form an incident with no faults;
- its timeline: each fault's start, when RabbitMQ noticed it, its effects and
  its heal (results `faults`, checkers.efficacy; without it, the perf
  section's windows give the start and heal), the first confirm after each
  heal (perf `recovery_ms`), and the harness's mends (results `mends`) and
  phase boundaries from the incident's start to the next incident's start
  (the last: to the end of the history);
- its broker-log lines, once for the incident: the most telling lines
  (harness.explain.pick_lines) from LOG_MARGIN_S before its start to
  LOG_MARGIN_S after its end.

`add_incidents` is what `harness check` calls: it reads the broker logs and
the phases (from the check's traces) and writes `results["incidents"]`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from checkers.fates import EXAMPLES, REORDERED
from checkers.traces import traces_of
from harness.explain import LOG_MARGIN_S, LogLine, log_lines, pick_lines
from history import Op

log = logging.getLogger(__name__)

# How each class is named in an incident's summary: (one, many).
WORDS: Final = {
    "lost": ("lost", "lost"),
    "lost_unacked": ("lost after an unacked delivery", "lost after an unacked delivery"),
    "unexpected": ("unexpected delivery", "unexpected deliveries"),
    "unflagged_duplicated": ("unflagged duplicate", "unflagged duplicates"),
    "redelivered_duplicated": ("flagged duplicate", "flagged duplicates"),
    "unflagged_after_ack": ("unflagged delivery after an ack", "unflagged deliveries after an ack"),
    REORDERED: ("reordering", "reorderings"),
}
# Effects worth naming in a summary, the most telling first.
TELLING_EFFECTS: Final = ("unsynchronised-promotion", "promotion", "leader-election",
                          "autoheal-restart", "pause-minority", "node-restart")


def phase_spans(harness: Sequence[Op]) -> list[dict[str, Any]]:
    """Takes the harness ops in file order. Returns each phase's span, {"phase", "start_ms",
    "end_ms"} (end null for a phase that never ended), in start order."""
    open_: dict[str, float] = {}
    out: list[dict[str, Any]] = []
    for op in harness:
        v = op.value if isinstance(op.value, dict) else None
        if op.f != "phase" or v is None:
            continue
        phase, state, at = str(v.get("phase")), v.get("state"), round(op.time / 1e6, 3)
        if state == "start":
            open_[phase] = at
        elif state is not None:
            out.append({"phase": phase, "start_ms": open_.pop(phase, at), "end_ms": at})
    out += [{"phase": p, "start_ms": s, "end_ms": None} for p, s in open_.items()]
    return sorted(out, key=lambda p: p["start_ms"])


def _section(results: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    found = results.get(name)
    return found if isinstance(found, dict) else {}


def _windows(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The fault windows in start order: results' faults, else the perf section's windows."""
    faults = results.get("faults")
    if isinstance(faults, list) and all(isinstance(f, dict) for f in faults):
        return list(faults)
    perf = results.get("perf")
    ws = perf.get("windows") if isinstance(perf, dict) else None
    return [dict(w, index=i) for i, w in enumerate(ws or []) if isinstance(w, dict)]


def _attributed(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The checker's by_fault entries (results.json fates.by_fault, checkers.fates)."""
    entries = _section(results, "fates").get("by_fault")
    return [e for e in entries or [] if isinstance(e, dict)]


def anomaly_classes(results: Mapping[str, Any]) -> set[str]:
    """Takes results. Returns the classes that make an incident: the queue section's anomalies,
    and "reordered" when the ordering section counts violations."""
    queue = _section(results, "queue")
    ordering = _section(results, "ordering")
    out = {str(a) for a in queue.get("anomalies") or []}
    if ordering.get("violation_count"):
        out.add(REORDERED)
    return out


def _groups(windows: Sequence[dict[str, Any]]) -> list[list[int]]:
    """Takes windows in start order. Returns the indexes of windows that overlap in time,
    chained, as groups in start order."""
    groups: list[list[int]] = []
    reach = None
    for i, w in enumerate(windows):
        start, end = float(w.get("start_ms") or 0), float(w.get("end_ms") or 0)
        if groups and reach is not None and start <= reach:
            groups[-1].append(i)
            reach = max(reach, end)
        else:
            groups.append([i])
            reach = end
    return groups


def _merge(entries: Sequence[dict[str, Any]]) -> tuple[dict[str, int], dict[str, list[str]]]:
    counts: dict[str, int] = {}
    examples: dict[str, list[str]] = {}
    for e in entries:
        for cls, n in (e.get("counts") or {}).items():
            counts[cls] = counts.get(cls, 0) + int(n)
        for cls, ids in (e.get("examples") or {}).items():
            have = examples.setdefault(cls, [])
            have += [i for i in ids if i not in have][:EXAMPLES - len(have)]
    return counts, examples


def _fault_events(w: Mapping[str, Any], perf_window: Mapping[str, Any] | None
                  ) -> list[dict[str, Any]]:
    """One window's timeline: start, noticed, effects, heal, the first confirm after it."""
    target = w.get("target")
    nodes = ", ".join(target) if isinstance(target, list) and target else None
    name = w.get("fault") or w.get("f") or "fault"
    out = [{"at_ms": w.get("start_ms"), "what": "fault start",
            "node": target[0] if isinstance(target, list) and len(target) == 1 else None,
            "text": f"{name} on {nodes}" if nodes else str(name)}]
    detections = w.get("detections") or []
    if w.get("noticed") is True and w.get("noticed_ms") is not None:
        first = detections[0] if detections else {}
        out.append({"at_ms": round(float(w["start_ms"]) + float(w["noticed_ms"]), 3),
                    "what": "noticed", "node": first.get("node"),
                    "text": (f"{first.get('detector')}: {first.get('text')}" if first
                             else "noticed") + (" (after the heal)"
                                                if w.get("noticed_when") == "after_heal" else "")})
    for e in w.get("effects") or []:
        out.append({"at_ms": e.get("at_ms"), "what": e.get("kind"), "node": e.get("node"),
                    "text": e.get("text") or ""})
    closed_by = w.get("closed_by") or (perf_window or {}).get("closed_by")
    out.append({"at_ms": w.get("end_ms"), "what": "heal", "node": None,
                "text": f"ended by {closed_by}" if closed_by else "the fault ended"})
    recovery = (perf_window or {}).get("recovery_ms")
    if recovery is not None and w.get("end_ms") is not None:
        out.append({"at_ms": round(float(w["end_ms"]) + float(recovery), 3), "what": "recovery",
                    "node": None, "text": f"first confirm {_duration(float(recovery))} after "
                                          f"the heal"})
    return out


def _duration(ms: float) -> str:
    return f"{ms:.3g} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def _mend_and_phase_events(results: Mapping[str, Any], phases: Sequence[Mapping[str, Any]],
                           lo: float, hi: float | None) -> list[dict[str, Any]]:
    """The mends and phase boundaries in [lo, hi) (hi None: no end)."""
    def inside(t: Any) -> bool:
        return t is not None and float(t) >= lo and (hi is None or float(t) < hi)

    mends = _section(results, "mends")
    out = [{"at_ms": round(float(m["t_s"]) * 1000, 3), "what": "mend", "node": m.get("node"),
            "text": f"{m.get('f')}: {m.get('action')}"}
           for m in mends.get("mends") or [] if isinstance(m, dict) and m.get("t_s") is not None
           and inside(float(m["t_s"]) * 1000)]
    for p in phases:
        for edge, key in (("starts", "start_ms"), ("ends", "end_ms")):
            if p.get("phase") != "main" and inside(p.get(key)):
                out.append({"at_ms": p[key], "what": "phase", "node": None,
                            "text": f"{p.get('phase')} phase {edge}"})
    return out


def _count_words(counts: Mapping[str, int], classes: Sequence[str]) -> str:
    parts = []
    for cls in classes:
        n = counts.get(cls, 0)
        one, many = WORDS.get(cls, (cls, cls))
        if n:
            parts.append(f"{n:,} {one if n == 1 else many}")
    return ", ".join(parts)


def _summary(counts: Mapping[str, int], classes: Sequence[str],
             faults: Sequence[Mapping[str, Any]]) -> str:
    what = _count_words(counts, classes) or "no anomalous message"
    if not faults:
        return f"{what} outside every fault window"
    first = faults[0]
    target = first.get("target")
    name = str(first.get("fault") or first.get("f"))
    during = f"{name} of {', '.join(target)}" if isinstance(target, list) and target else name
    more = f" and {len(faults) - 1} more fault{'s' if len(faults) > 2 else ''}" \
        if len(faults) > 1 else ""
    notes = []
    if first.get("noticed") is True and first.get("noticed_ms") is not None:
        notes.append(f"noticed {float(first['noticed_ms']) / 1000:.1f} s in"
                     + (", after the heal" if first.get("noticed_when") == "after_heal" else ""))
    elif first.get("noticed") is False:
        notes.append("not noticed by RabbitMQ")
    effects = [e for f in faults for e in f.get("effects") or []]
    for kind in TELLING_EFFECTS:
        hit = next((e for e in effects if e.get("kind") == kind), None)
        if hit is not None:
            notes.append(str(hit.get("text") or kind))
            break
    return f"{what} under the {during}{more}" + (f" ({'; '.join(notes)})" if notes else "")


def assemble(results: Mapping[str, Any], phases: Sequence[Mapping[str, Any]] = (),
             lines: Sequence[LogLine] = (), end_ms: float | None = None) -> list[dict[str, Any]]:
    """Takes results (queue, ordering, fates, and where present faults, perf, mends), the phase spans
    (`phase_spans`), the broker log lines (harness.explain.read_log_lines) and the history's
    last time (ms; None: unknown). Returns the incidents (module docstring), in time order, the
    one outside every fault last, ids from 1."""
    windows = _windows(results)
    attributed = _attributed(results)
    anomalies = anomaly_classes(results)
    perf = _section(results, "perf")
    perf_windows = [w for w in perf.get("windows") or [] if isinstance(w, dict)]
    found: list[tuple[list[int], dict[str, int], dict[str, list[str]]]] = []
    for group in _groups(windows):
        counts, examples = _merge([e for e in attributed if e.get("window") in group])
        if anomalies & {c for c, n in counts.items() if n}:
            found.append((group, counts, examples))
    counts, examples = _merge([e for e in attributed if e.get("window") is None])
    if anomalies & {c for c, n in counts.items() if n}:
        found.append(([], counts, examples))
    last_end = max((float(w.get("end_ms") or 0) for w in windows), default=0.0)
    out = []
    for k, (group, counts, examples) in enumerate(found):
        faults = [windows[i] for i in group]
        if faults:
            start = min(float(w.get("start_ms") or 0) for w in faults)
            end = max(float(w.get("end_ms") or 0) for w in faults)
        else:
            start, end = last_end, end_ms if end_ms is not None else last_end
        timeline: list[dict[str, Any]] = []
        for i in group:
            timeline += _fault_events(windows[i], perf_windows[i] if i < len(perf_windows)
                                      else None)
        nxt = found[k + 1][0] if k + 1 < len(found) else []
        hi = min(float(windows[i].get("start_ms") or 0) for i in nxt) if nxt else None
        timeline += _mend_and_phase_events(results, phases, start, hi)
        timeline.sort(key=lambda e: (e["at_ms"] is None, e["at_ms"] or 0))
        recovered = [e["at_ms"] for e in timeline if e["what"] == "recovery"]
        end = max([end, *recovered])
        margin = LOG_MARGIN_S * 1000
        near = [x for x in lines if start - margin <= x.time_ns / 1e6 <= end + margin]
        classes = [c for c in (*WORDS, *sorted(counts)) if c in counts]
        classes = list(dict.fromkeys(classes))
        out.append({
            "id": k + 1,
            "faults": [int(windows[i].get("index", i)) for i in group],
            "start_ms": round(start, 3), "end_ms": round(end, 3),
            "counts": {c: counts[c] for c in classes},
            "examples": {c: examples.get(c, []) for c in classes},
            "timeline": timeline,
            "log_lines": [x.as_dict() for x in pick_lines(near)],
            "summary": _summary(counts, [c for c in classes if c in anomalies], faults),
        })
    return out


def add_incidents(run_dir: Path, results: dict[str, Any],
                  test_info: Mapping[str, Any] | None) -> None:
    """Takes a run directory, its results (as the check returned them, with their traces) and
    test.json's content. Adds results["incidents"] (`assemble`), reading the node logs and the
    phases from the check's traces; logs and leaves it out if that fails (the verdict stands)."""
    info = test_info or {}
    start = info.get("history_start_unix")
    if start is None and info.get("start_time"):
        start = datetime.fromisoformat(str(info["start_time"])).timestamp()
    traces = traces_of(results)
    try:
        lines = log_lines(run_dir / "nodes", start)
        phases = phase_spans(traces.harness) if traces is not None else []
        end_ms = traces.end_ns / 1e6 if traces is not None else None
        results["incidents"] = assemble(results, phases, lines, end_ms)
    except (OSError, ValueError, TypeError, KeyError) as e:
        log.warning("could not group the anomalies into incidents: %s", e)


__all__ = ["add_incidents", "anomaly_classes", "assemble", "phase_spans"]
