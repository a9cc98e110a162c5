"""The test-strength part of the report: did RabbitMQ notice each fault, and the incidents.

results.json's `faults` (one entry per fault window: noticed or not, when, by which detector,
what it caused, which messages were at risk), `strength` (is the run weak?) and `incidents`
(the anomalies grouped by the faults that caused them) are read here into plain data:
`fault_cells` gives one fault's three cells (noticed, effects, at risk) for the report's table
of what RabbitMQ noticed (reports.report_run), `strength_note` the lines above that table, and
`incidents_data` each incident once, with its timeline, its broker-log lines, its messages per
class and a few example ids (`incidents_section` draws them, templates/report/incidents.html.j2).
Text from the run (node names, log lines, evidence) reaches the page as text: the templates
escape it. Results of another shape degrade to "n/a" or are left out, never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reports.html import Cell, Note, Table, code_td, codes_td, table, td
from reports.page import NA, as_dict, count, strength_of
from reports.page import as_number as _num

log = logging.getLogger(__name__)

MAX_EFFECTS = 6
MAX_EXAMPLES = 10
MAX_TIMELINE = 40
MAX_LOG_LINES = 30
# How much of a detection's log line the fault table quotes (the incident quotes it whole).
MAX_LINE = 120
# How the fault table matches a results.json fault to a history window: same f, start within.
MATCH_MS = 1.0

# An effect's kind -> how to say it about its node (compact, for the fault table).
EFFECT_WORDS: dict[str, str] = {
    "autoheal-restart": "autoheal restarted {node}",
    "pause-minority": "{node} paused (pause_minority)",
    "promotion": "{node} promoted",
    "unsynchronised-promotion": "{node} promoted (unsynchronised)",
    "leader-election": "{node} elected leader",
    "node-restart": "{node} restarted",
    "node-down": "{node} seen down",
    "connections-dropped": "connections dropped on {node}",
    "publishes-blocked": "publishes blocked on {node}",
    "node-drained": "{node} drained",
    "member-removed": "{node}'s quorum member removed",
    "leader-handover": "{node} handed leadership over",
    "node-did-not-boot": "{node} did not boot again",
}


def _s(ms: Any, digits: int = 1) -> str:
    """Takes a time in ms. Returns it in seconds ("12.1"), or NA."""
    v = _num(ms)
    return NA if v is None else f"{v / 1000:.{digits}f}"


def _words(kind: Any) -> str:
    return str(kind or "").replace("_", " ").replace("-", " ").strip() or NA


# --- the fault table's columns -------------------------------------------------------------


def faults_of(results: Any) -> list[dict[str, Any]] | None:
    """Takes results.json's content. Returns its faults section's entries, or None when it has
    none (older runs: the fault table keeps its old columns)."""
    faults = results.get("faults") if isinstance(results, dict) else None
    if not isinstance(faults, list):
        return None
    return [f for f in faults if isinstance(f, dict)]


def match_fault(f: str, start_ms: float, faults: Sequence[dict[str, Any]],
                taken: set[int]) -> dict[str, Any] | None:
    """Takes a history window's start f and time (ms), the results' faults and the positions
    already matched. Returns the fault entry with the same f starting within MATCH_MS, and
    marks it taken; None when there is none."""
    for i, x in enumerate(faults):
        start = _num(x.get("start_ms"))
        if i not in taken and x.get("f") == f and start is not None \
                and abs(start - start_ms) <= MATCH_MS:
            taken.add(i)
            return x
    return None


def _first_detection(fault: dict[str, Any]) -> dict[str, Any] | None:
    found = [d for d in fault.get("detections") or [] if isinstance(d, dict)]
    timed = [d for d in found if _num(d.get("at_ms")) is not None]
    if timed:
        return min(timed, key=lambda d: float(d["at_ms"]))
    return found[0] if found else None


def noticed_text(fault: dict[str, Any]) -> tuple[str, str]:
    """Takes a results.json fault. Returns (what the noticed column says, the note beneath):
    "7.0 s, distribution", "after heal, 1.5 s late", "not noticed" or "unknown"; the note is
    the fault's evidence sentence and where the first detection was read."""
    noticed = fault.get("noticed")
    first = _first_detection(fault)
    by = str(first.get("detector")) if first and first.get("detector") else ""
    delay = _num(fault.get("noticed_ms"))
    if noticed is True:
        if fault.get("noticed_when") == "after_heal":
            duration = _num(fault.get("duration_ms"))
            if duration is None:
                start, end = _num(fault.get("start_ms")), _num(fault.get("end_ms"))
                duration = end - start if start is not None and end is not None else None
            late = delay - duration if delay is not None and duration is not None else None
            text = "after heal" + (f", {late / 1000:.1f} s late" if late is not None else "")
        else:
            text = f"{delay / 1000:.1f} s" if delay is not None else "noticed"
        text += f", {by}" if by else ""
    elif noticed is False:
        text = "not noticed"
    else:
        text = "unknown"
    notes = [str(fault["evidence"]).strip().rstrip(".") + "."] if fault.get("evidence") else []
    if first and (first.get("evidence") or first.get("text")):
        where = str(first.get("evidence") or "")
        line = str(first.get("text") or "").strip()
        line = line if len(line) <= MAX_LINE else line[:MAX_LINE - 1] + "…"
        notes.append(f"{where}: {line}" if where and line else where or line)
    return text, " ".join(notes)


def effect_phrase(effect: dict[str, Any]) -> str:
    """Takes one effect ({kind, node, at_ms, ...}). Returns it in a few words with its time:
    "n2 promoted (unsynchronised) at 12.1 s"."""
    kind = str(effect.get("kind") or "")
    node = str(effect.get("node") or "a node")
    pattern = EFFECT_WORDS.get(kind)
    said = pattern.format(node=node) if pattern else f"{_words(kind)} ({node})" \
        if effect.get("node") else _words(kind)
    at = _num(effect.get("at_ms"))
    return said + (f" at {at / 1000:.1f} s" if at is not None else "")


def effects_text(fault: dict[str, Any]) -> str:
    """Takes a results.json fault. Returns its effects, compact and in time order: "n2 promoted
    (unsynchronised) at 12.1 s; autoheal restarted n1 at 41.2 s", or "none seen"."""
    effects = [x for x in fault.get("effects") or [] if isinstance(x, dict)]
    if not effects:
        return "none seen" if isinstance(fault.get("effects"), list) else NA
    effects.sort(key=lambda x: _num(x.get("at_ms")) or 0.0)
    said = [effect_phrase(x) for x in effects[:MAX_EFFECTS]]
    more = len(effects) - len(said)
    return "; ".join(said) + (f"; {more} more" if more > 0 else "")


def dropped_text(fault: dict[str, Any]) -> str | None:
    """Takes a results.json fault. Returns what a power loss dropped, in total and per node
    ("dropped 12,288 unsynced bytes in 3 files (n1: 8,192 B in 2; n2: 4,096 B in 1)"), and
    the age at the cut of the oldest write it dropped where the layers said it ("; the oldest
    written 33.0 s before the cut"), or None for a fault without a `dropped` entry."""
    dropped = fault.get("dropped")
    if not isinstance(dropped, dict):
        return None
    nodes = as_dict(dropped.get("nodes"))
    each = "; ".join(f"{n}: {count(d.get('bytes'))} B in {count(d.get('files'))}"
                     for n, d in sorted(nodes.items()) if isinstance(d, dict))
    oldest = _num(dropped.get("oldest_unsynced_s"))
    return (f"dropped {count(dropped.get('bytes'))} unsynced bytes in "
            f"{count(dropped.get('files'))} files" + (f" ({each})" if each else "")
            + (f"; the oldest written {oldest:.1f} s before the cut" if oldest is not None
               else ""))


def at_risk_text(fault: dict[str, Any]) -> tuple[str, str]:
    """Takes a results.json fault. Returns (the at-risk count, the note beside it: where the
    count came from and the depth sample nearest the fault's start)."""
    risk = fault.get("at_risk")
    if not isinstance(risk, dict):
        return NA, ""
    n = risk.get("count")
    text = count(n) if _num(n) is not None else "unknown"
    notes = [f"from the {risk['source']}"] if risk.get("source") else []
    depth = risk.get("depth")
    if isinstance(depth, dict):
        parts = []
        if _num(depth.get("ready")) is not None:
            parts.append(f"{count(depth['ready'])} ready")
        if _num(depth.get("unacked")) is not None:
            parts.append(f"{count(depth['unacked'])} unacked")
        at = f" at {_s(depth.get('at_ms'))} s" if _num(depth.get("at_ms")) is not None else ""
        source = str(depth.get("source") or "depth sample")
        if parts:
            notes.append(f"{source}: {' + '.join(parts)}{at}")
    return text, "; ".join(notes)


def fault_cells(fault: dict[str, Any] | None) -> list[Cell]:
    """Takes a results.json fault (None: the window has none). Returns the fault table's three
    cells for it: noticed, effects, at risk."""
    if fault is None:
        return [td("no entry in results.json", cls="why"), td(NA), td(NA)]
    noticed, why = noticed_text(fault)
    risk, source = at_risk_text(fault)
    cls = "weak-cell" if fault.get("noticed") is False else None
    # Not a numeric (nowrap) cell: the note beside the count must wrap.
    effects, dropped = effects_text(fault), dropped_text(fault)
    if dropped is not None:  # a power loss: what its layers dropped first, then the effects
        effects = f"{dropped}; {effects}"
    return [td(noticed, cls=cls, note=why), td(effects), td(risk, note=source)]


@dataclass(frozen=True)
class StrengthNote:
    """The lines above the fault table: the strength summary (`line`), whether the run is weak
    and why (`reason`, said as the page says it), and how soon RabbitMQ's distribution can
    notice a lost peer (`detection`: the lower and upper bound in s and the net_ticktime
    said in brackets; None when results.json does not say)."""

    weak: bool
    line: str
    reason: str
    detection: tuple[str, str, str] | None = None


def strength_note(results: Any) -> StrengthNote | None:
    """Takes results.json's content. Returns the lines above the fault table; None for results
    without a strength section."""
    st = strength_of(results)
    if st is None:
        return None
    raw = as_dict(as_dict(results).get("strength"))
    if st.weak:
        reason = st.reason + ("." if st.reason and not st.reason.endswith(".") else "")
    else:
        reason = f" {st.reason.rstrip('.')}." if st.reason else ""
    window = raw.get("detection_s")
    tick = _num(raw.get("net_ticktime"))
    detection = None
    if isinstance(window, list) and len(window) == 2 and all(_num(x) is not None
                                                              for x in window):
        lo, hi = float(window[0]), float(window[1])
        tick_text = f" (net_ticktime {tick:g} s)" if tick is not None else ""
        detection = (f"{lo:g}", f"{hi:g}", tick_text)
    return StrengthNote(st.weak, st.line(), reason, detection)


# --- incidents ------------------------------------------------------------------------------


def incidents_of(results: Any) -> list[dict[str, Any]] | None:
    """Takes results.json's content. Returns its incidents, or None when it has none (older
    runs: the anomaly section keeps its per-message view)."""
    incidents = results.get("incidents") if isinstance(results, dict) else None
    if not isinstance(incidents, list):
        return None
    return [x for x in incidents if isinstance(x, dict)]


def incident_anchor(incident: dict[str, Any], position: int) -> str:
    """Takes an incident and its position. Returns its anchor id on the page ("incident-1")."""
    n = incident.get("id")
    ident = n if isinstance(n, int) and not isinstance(n, bool) else position + 1
    return f"incident-{ident}"


def incident_title(incident: dict[str, Any], position: int) -> str:
    """Takes an incident and its position. Returns its heading: "Incident 1: <summary>"."""
    n = incident.get("id")
    ident = n if isinstance(n, int) and not isinstance(n, bool) else position + 1
    summary = str(incident.get("summary") or "").strip()
    if not summary:
        counts = as_dict(incident.get("counts"))
        summary = ", ".join(f"{count(v)} {_words(k)}" for k, v in counts.items()
                            if _num(v)) or "no messages counted"
    return f"Incident {ident}: {summary}"


def _fault_names(incident: dict[str, Any], faults: Sequence[dict[str, Any]]) -> str:
    idx = incident.get("faults")
    if not isinstance(idx, list):
        return ""
    if not idx:
        return "No fault in reach: these anomalies fall outside every fault's window."
    said = []
    for i in idx:
        fault = faults[i] if isinstance(i, int) and 0 <= i < len(faults) else None
        if fault is None:
            said.append(f"fault {i} (not in results.json)")
            continue
        target = fault.get("target")
        on = f" on {', '.join(map(str, target))}" if isinstance(target, list) and target else ""
        name = fault.get("fault") or fault.get("f") or "fault"
        said.append(f"{name}{on} from {_s(fault.get('start_ms'))} to "
                    f"{_s(fault.get('end_ms'))} s")
    return "Faults: " + "; ".join(said) + "."


def _class_rows(incident: dict[str, Any]) -> list[list[Cell]]:
    counts = as_dict(incident.get("counts"))
    examples = as_dict(incident.get("examples"))
    rows = []
    for name in dict.fromkeys([*counts, *examples]):
        n = counts.get(name)
        ids = examples.get(name)
        ids = ids if isinstance(ids, list) else []
        v = _num(n)
        total = int(v) if v is not None else len(ids)
        shown = ids[:MAX_EXAMPLES]
        cell = (codes_td(shown, total - len(shown), cls="ids") if shown
                else td("no example ids in results.json", cls="why"))
        rows.append([td(_words(name)), td(count(n) if v is not None else NA, num=True), cell])
    return rows


def _timeline_rows(incident: dict[str, Any]) -> tuple[list[list[Cell]], list[str | None], int]:
    steps = [x for x in incident.get("timeline") or [] if isinstance(x, dict)]
    steps.sort(key=lambda x: _num(x.get("at_ms")) or 0.0)
    rows, classes = [], []
    for x in steps[:MAX_TIMELINE]:
        what = str(x.get("what") or "")
        mend = what == "mend"
        rows.append([td(_s(x.get("at_ms"), 3), num=True),
                     td(_words(what), note="the harness's own restart" if mend else None),
                     td(x.get("node") or "-"), td(x.get("text") or "-")])
        classes.append("mend" if mend else None)
    return rows, classes, len(steps)


def _log_rows(incident: dict[str, Any]) -> tuple[list[list[Cell]], int]:
    lines = [x for x in incident.get("log_lines") or [] if isinstance(x, dict)]
    rows = [[td(f"{float(x['t_s']):.3f}" if _num(x.get("t_s")) is not None else NA, num=True),
             td(x.get("node") or "-"), td(x.get("label") or "-"),
             code_td(x.get("text") or "-"), td(x.get("evidence") or "-")]
            for x in lines[:MAX_LOG_LINES]]
    return rows, len(lines)


@dataclass(frozen=True)
class Incident:
    """One incident as the page tells it: its block's class and anchor, its heading, the
    sentence of its span and faults ("" for none), its messages per class (a Table, or a Note
    when none are counted), its timeline and its broker-log lines (Tables, None when it has
    none), and a Note when it read the broker's log and found nothing."""

    cls: str
    anchor: str
    title: str
    said: str
    classes: Table | Note
    timeline: Table | None
    log: Table | None
    no_log: Note | None


def incident_data(incident: dict[str, Any], position: int,
                  faults: Sequence[dict[str, Any]], allowed: frozenset[str]) -> Incident:
    """Takes an incident, its position, the results' faults and the anomaly classes that do
    not count against a run. Returns what its block shows: heading, the faults it follows,
    messages per class with example ids, its timeline and its broker-log lines, each once."""
    counts = as_dict(incident.get("counts"))
    bad = any(_num(v) and k not in allowed for k, v in counts.items())
    span = ""
    if _num(incident.get("start_ms")) is not None and _num(incident.get("end_ms")) is not None:
        span = f"From {_s(incident['start_ms'])} to {_s(incident['end_ms'])} s. "
    classes = _class_rows(incident)
    steps, step_classes, n_steps = _timeline_rows(incident)
    logs, n_logs = _log_rows(incident)
    return Incident(
        cls="anomaly incident" if bad else "anomaly incident allowed",
        anchor=incident_anchor(incident, position),
        title=incident_title(incident, position),
        said=span + _fault_names(incident, faults),
        classes=(table(["messages", "count", "examples"], classes, len(classes), num_cols=[1])
                 if classes else Note("No messages counted.")),
        timeline=(table(["s", "what", "node", "detail"], steps, n_steps, wide=True,
                        num_cols=[0], row_classes=step_classes) if steps else None),
        log=(table(["s", "node", "what", "line", "where"], logs, n_logs, wide=True,
                   num_cols=[0]) if logs else None),
        no_log=(Note("No broker log line of this stretch says anything about it.")
                if not logs and isinstance(incident.get("log_lines"), list) else None),
    )


def incidents_data(results: Any, allowed: frozenset[str]) -> list[Incident]:
    """Takes results.json's content and the anomaly classes that do not count against a run.
    Returns its incidents as the page tells them, each once; [] when there are none."""
    faults = faults_of(results) or []
    return [incident_data(x, i, faults, allowed) for i, x in enumerate(incidents_of(results) or [])]


def incidents_by_class(results: Any) -> dict[str, list[tuple[str, str, int]]]:
    """Takes results.json's content. Returns, per anomaly class, the incidents that hold some
    of its messages: (anchor id, "incident 1", how many)."""
    out: dict[str, list[tuple[str, str, int]]] = {}
    for i, x in enumerate(incidents_of(results) or []):
        anchor = incident_anchor(x, i)
        label = anchor.replace("-", " ")
        for name, n in as_dict(x.get("counts")).items():
            if _num(n):
                out.setdefault(str(name), []).append((anchor, label, int(n)))
    return out
