"""The run part of the report: faults with their availability, the spec, and the run's files.

`faults_data` is one row per fault window of the history (coloured by its
kind, from history.faults), joined with the perf checker's per-window stats
from results.json (publishes, confirmed share, latency, time to the first
confirm after the fault). When results.json has a `faults` section, a table
before it says for the same windows whether RabbitMQ noticed each fault, what
it caused and how many messages were at risk (reports.report_strength), under
the test's strength (two tables: in one, fourteen columns overflow the page).
`spec_data` reads test.json into a readable table (seed, nodes, versions, time
limit, queue, partition handling, faults, phase times, recovery, drain,
history size) and lists every other setting behind a fold. `files_data`
links history.jsonl, results.json, test.json, harness.log and each node's
logs. Older test.json layouts (flat keys) are read too; a value nowhere to be
found reads "n/a" with the reason. They are plain data; the `*_section`
functions draw them (templates/report/faults.html.j2, test.html.j2,
files.html.j2), as the page does.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from history.faults import HEAL, kind_for_start, kind_named
from reports.history_scan import NS_PER_S, FaultWindow, HistoryScan
from reports.html import Cell, Note, Para, Table, render_template, swatch_td, table, td, th
from reports.page import NA, as_dict, count, seconds, size, versions_line
from reports.report_strength import (
    StrengthNote,
    fault_cells,
    faults_of,
    match_fault,
    strength_note,
)

log = logging.getLogger(__name__)

LINKED_FILES = ("history.jsonl", "results.json", "test.json", "harness.log")
MAX_NODE_FILES = 50
NOT_IN_SPEC = "n/a (not in test.json)"


@dataclass(frozen=True)
class RunFiles:
    """Which files of the run directory exist: top-level files with sizes, per-node files."""

    files: tuple[tuple[str, int], ...] = ()
    nodes: dict[str, list[tuple[str, int]]] = field(default_factory=dict)


def list_run_files(run_dir: Path) -> RunFiles:
    """Takes a run directory. Returns which linkable files and node log files it holds."""
    files = tuple(
        (name, (run_dir / name).stat().st_size)
        for name in LINKED_FILES
        if (run_dir / name).is_file()
    )
    nodes: dict[str, list[tuple[str, int]]] = {}
    nodes_dir = run_dir / "nodes"
    if nodes_dir.is_dir():
        for node in sorted(p for p in nodes_dir.iterdir() if p.is_dir()):
            found: list[tuple[str, int]] = []
            for root, _dirs, fnames in os.walk(node):
                for fname in sorted(fnames):
                    p = Path(root) / fname
                    found.append((str(p.relative_to(node)), p.stat().st_size))
                if len(found) >= MAX_NODE_FILES:
                    break
            nodes[node.name] = sorted(found)[:MAX_NODE_FILES]
    return RunFiles(files, nodes)


# --- faults -------------------------------------------------------------------------------


def grudge_text(grudge: dict[str, Any]) -> str:
    """Takes a partition's grudge {node: [nodes it cannot reach]}. Returns it as text, each cut
    pair said once, the most isolated nodes first: "n1 cut from n2, n3"."""
    said: set[frozenset[str]] = set()
    parts = []
    by_cuts = sorted(grudge.items(), key=lambda kv: -len(kv[1]) if isinstance(kv[1], list) else -1)
    for node, cut in by_cuts:
        peers = [str(p) for p in (cut if isinstance(cut, list) else [cut])]
        new = [p for p in peers if frozenset((str(node), p)) not in said]
        said.update(frozenset((str(node), p)) for p in peers)
        if new:
            parts.append(f"{node} cut from {', '.join(new)}")
    return "; ".join(parts)


def target_text(w: FaultWindow) -> str:
    """Returns what a fault hit: its grudge, its nodes or its node, as short text."""
    v = w.value if isinstance(w.value, dict) else {}
    grudge = v.get("grudge")
    if isinstance(grudge, dict) and grudge:
        return grudge_text(grudge)
    for key in ("nodes", "targets", "target", "node"):
        t = v.get(key)
        if isinstance(t, list) and t:
            return ", ".join(map(str, t))
        if t:
            return str(t)
    if w.node:
        return w.node
    if w.value is not None and not isinstance(w.value, dict):
        return str(w.value)
    return "-"


def _match_perf(w: FaultWindow, perf_windows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Finds the perf checker's window for a report window: same start f, start within 1 ms."""
    for p in perf_windows:
        start = p.get("start_ms")
        if p.get("f") == w.f and isinstance(start, int | float) and \
                abs(start - w.start_ns / 1e6) <= 1.0:
            return p
    return None


def _pct(x: Any) -> str:
    return f"{100 * x:.1f} %" if isinstance(x, int | float) and not isinstance(x, bool) else NA


def _ms(x: Any) -> str:
    if not isinstance(x, int | float) or isinstance(x, bool):
        return NA
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def _stats_cells(stats: dict[str, Any] | None, why_not: str) -> list[Cell]:
    if stats is None:
        return [td(why_not, cls="meaning")] + [td(NA, num=True)] * 5
    lat = as_dict(stats.get("latency_ms"))
    rec = stats.get("recovery_ms")
    recovered = (f"{rec / 1000:.3f}" if isinstance(rec, int | float) and not isinstance(rec, bool)
                 else "never" if "recovery_ms" in stats else "-")
    return [
        td(count(stats.get("invoked")), num=True),
        td(_pct(stats.get("ok_share")), num=True),
        td(_pct(stats.get("info_share")), num=True),
        td(_pct(stats.get("fail_share")), num=True),
        td(f"{_ms(lat.get('p50'))} / {_ms(lat.get('p99'))}", num=True),
        td(recovered, num=True),
    ]


@dataclass(frozen=True)
class Faults:
    """The Faults section as data: whether results.json tells what RabbitMQ noticed (then the
    strength lines and the table of what was noticed, or a Note when there were no faults);
    whether there is no fault record at all (no history, no perf windows); whether the
    nemesis did nothing; the availability table; the heals; the nemesis actions that failed
    ("" for none)."""

    told: bool
    strength: StrengthNote | None = None
    noticed: Table | Note | None = None
    no_record: bool = False
    nothing: bool = False
    table: Table | None = None
    heals: tuple[Para, ...] = ()
    failures: str = ""


def faults_data(scan: HistoryScan | None, results: Any) -> Faults:
    """Takes the history scan (None without a history) and results.json's content. Returns the
    Faults section: when results.json says, the test's strength and, per fault, whether
    RabbitMQ noticed it, its effects and the messages at risk; then baseline rows (no fault,
    whole main phase) and one row per fault window with its availability and time to recover;
    then the heals and failed nemesis ops."""
    told = faults_of(results)
    windows = scan.windows if scan is not None else []
    noticed = None if told is None else _noticed_table(windows, told)
    strength = None if told is None else strength_note(results)
    perf = results.get("perf") if isinstance(results, dict) else None
    perf = perf if isinstance(perf, dict) else {}
    perf_windows = [w for w in perf.get("windows") or [] if isinstance(w, dict)]
    if scan is None and not perf_windows:
        return Faults(told is not None, strength, noticed, no_record=True)
    why_not = ("not checked (no results.json)" if not isinstance(results, dict)
               else "no perf section in results.json" if not perf
               else "no matching window in the perf results")
    rows = _baseline_rows(perf, why_not)
    rows += [_window_row(w, perf_windows, why_not) for w in windows]
    if scan is not None:
        rows += [_perf_only_row(pw, why_not) for pw in _unmatched(perf_windows, windows)]
    failures = "; ".join(
        f"{op.f} at {seconds(op.time)} s: {op.error or 'no error given'}"
        for op in scan.nemesis_failures) if scan is not None else ""
    headers = ["fault", "target", "from s", "to s", "ended by", "publishes", "confirmed",
               "unknown", "failed", "p50 / p99 ms", "recovered after s"]
    return Faults(
        told=told is not None, strength=strength, noticed=noticed,
        nothing=not windows and not perf_windows,
        table=table(headers, rows, len(rows), wide=True, num_cols=[2, 3, 5, 6, 7, 8, 9, 10]),
        heals=tuple(_heal_line(h) for h in scan.heals) if scan is not None else (),
        failures=failures,
    )


def _baseline_rows(perf: dict[str, Any], why_not: str) -> list[list[Cell]]:
    """Takes the perf section and why a window has no figures. Returns the availability
    table's baseline rows: no fault in effect, and the whole main phase, when perf has them."""
    rows: list[list[Cell]] = []
    for key, label in (("healthy", "no fault in effect"), ("overall", "whole main phase")):
        stats = perf.get(key)
        if isinstance(stats, dict):
            rows.append([td(label), td("-"), td("-", num=True), td("-", num=True), td("-"),
                         *_stats_cells(stats, why_not)[:5], td("-", num=True)])
    return rows


def _window_row(w: FaultWindow, perf_windows: list[dict[str, Any]], why_not: str) -> list[Cell]:
    """Takes a fault window of the history, the perf windows and why a window has no figures.
    Returns the window's row of the availability table, with its perf window's figures."""
    kind = kind_named(w.kind)
    name = w.fault + (f" (start failed: {w.error})" if w.error else "")
    return [
        swatch_td(kind.colour, name),
        td(target_text(w)),
        td(seconds(w.start_ns), num=True),
        td(seconds(w.end_ns), num=True),
        td(w.closed_by or "end of history"),
        *_stats_cells(_match_perf(w, perf_windows), why_not),
    ]


def _perf_only_row(pw: dict[str, Any], why_not: str) -> list[Cell]:
    """Takes a perf window no window of the history matches and why a window has no figures.
    Returns its row of the availability table, marked as the perf checker's only."""
    start = pw.get("start_ms")
    end = pw.get("end_ms")
    k = kind_for_start(str(pw.get("f")))
    colour = k.colour if k is not None else kind_named(str(pw.get("f"))).colour
    target = pw.get("target")
    return [
        swatch_td(colour, f"{pw.get('f')} (perf checker only)"),
        td(", ".join(map(str, target)) if isinstance(target, list) else "-"),
        td(f"{start / 1000:.3f}" if isinstance(start, int | float) else NA, num=True),
        td(f"{end / 1000:.3f}" if isinstance(end, int | float) else NA, num=True),
        td(pw.get("closed_by") or "-"),
        *_stats_cells(pw, why_not),
    ]


def faults_section(scan: HistoryScan | None, results: Any) -> str:
    """Takes the history scan and results.json's content. Returns the Faults section's HTML
    (templates/report/faults.html.j2 with `faults_data`)."""
    return render_template("report/faults.html.j2", faults=faults_data(scan, results))


def _noticed_table(windows: list[FaultWindow], told: list[dict[str, Any]]) -> Table | Note:
    """Takes the history's fault windows and results.json's faults. Returns a table with one
    row per fault, in the availability table's order: whether RabbitMQ noticed it, what it
    caused, how many messages were at risk; then faults results.json has and the history not."""
    taken: set[int] = set()
    rows = []
    for w in windows:
        kind = kind_named(w.kind)
        rows.append([
            swatch_td(kind.colour, w.fault), td(target_text(w)),
            td(seconds(w.start_ns), num=True), td(seconds(w.end_ns), num=True),
            *fault_cells(match_fault(w.f, w.start_ns / 1e6, told, taken)),
        ])
    for i, fault in enumerate(told):
        if i in taken:
            continue
        k = kind_for_start(str(fault.get("f")))
        colour = k.colour if k is not None else kind_named(str(fault.get("kind"))).colour
        target = fault.get("target")
        start, end = fault.get("start_ms"), fault.get("end_ms")
        rows.append([
            swatch_td(colour, f"{fault.get('fault') or fault.get('f') or 'fault'} "
                              "(results.json only)"),
            td(", ".join(map(str, target)) if isinstance(target, list) and target else "-"),
            td(f"{start / 1000:.3f}" if isinstance(start, int | float) else NA, num=True),
            td(f"{end / 1000:.3f}" if isinstance(end, int | float) else NA, num=True),
            *fault_cells(fault),
        ])
    if not rows:
        return Note("No faults: nothing for RabbitMQ to notice.")
    return table(["fault", "target", "from s", "to s", "noticed (after its start, by)",
                  "effects (s since the history began)", "at risk"], rows, len(rows),
                 wide=True, num_cols=[2, 3])


def _unmatched(perf_windows: list[dict[str, Any]], windows: list[FaultWindow]) -> list[dict[str, Any]]:
    matched = [_match_perf(w, perf_windows) for w in windows]
    return [p for p in perf_windows if not any(p is m for m in matched)]


def _heal_line(h: FaultWindow) -> Para:
    took = (h.end_ns - h.start_ns) / NS_PER_S
    text = (f"{HEAL.label.capitalize()}: from {seconds(h.start_ns)} to {seconds(h.end_ns)} s "
            f"({took:.3f} s)")
    if h.error:
        text += f"; it reported: {h.error}"
    return Para(f"{text}.", swatch=HEAL.colour)


# --- spec ---------------------------------------------------------------------------------


def _get(d: Any, *paths: str) -> Any:
    """Returns the first value found at one of the dotted paths, or None."""
    for path in paths:
        cur = d
        for part in path.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
            if cur is None:
                break
        if cur is not None:
            return cur
    return None


def _num(x: Any, unit: str = "") -> str:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return NOT_IN_SPEC
    return f"{x:g}{unit}"


def _list(x: Any) -> str:
    if isinstance(x, list | tuple):
        return ", ".join(str(v) for v in x) if x else "none"
    return str(x) if x not in (None, "") else "none"


def _nodes_text(info: dict[str, Any]) -> str:
    nodes = info.get("nodes")
    if isinstance(nodes, dict) and nodes:
        return f"{len(nodes)}: " + ", ".join(f"{n} ({ip})" for n, ip in nodes.items())
    if isinstance(nodes, list) and nodes:
        return f"{len(nodes)}: " + ", ".join(map(str, nodes))
    n = _get(info, "spec.nodes", "nodes")
    return str(n) if isinstance(n, int) else NOT_IN_SPEC


def _queue_text(info: dict[str, Any]) -> str:
    q = _get(info, "spec.queue", "queue")
    if not isinstance(q, dict):
        return NOT_IN_SPEC
    qtype = q.get("type", "?")
    parts = [f"{qtype} queue {q.get('name', '')!s}".strip()]
    parts.append("durable" if q.get("durable", True) else "transient")
    # The kind said at run time what of its settings to show (test.json's queue_description);
    # a run from before it did, only the settings every kind has.
    said = info.get("queue_description")
    parts += [str(x) for x in said] if isinstance(said, list) else _common_queue_settings(q)
    if q.get("single_active_consumer"):
        parts.append("single active consumer")
    return ", ".join(parts)


def _common_queue_settings(q: dict[str, Any]) -> list[str]:
    """Takes test.json's queue section. Returns the phrases for the settings every queue kind
    has (a delivery limit, a max length and its overflow), for runs whose test.json has no
    queue_description."""
    limit, length = q.get("delivery_limit"), q.get("max_length")
    return (([f"delivery limit {limit}"] if limit is not None else [])
            + ([f"max length {length} ({q.get('overflow') or 'drop-head'})"]
               if length is not None else []))


def _workload_text(info: dict[str, Any]) -> str:
    w = _get(info, "spec.workload")
    if not isinstance(w, dict):
        other = info.get("workload")
        return str(other) if isinstance(other, str) else NOT_IN_SPEC
    c = w.get("client") if isinstance(w.get("client"), dict) else {}
    parts = [f"{w.get('publishers', '?')} publishers", f"{w.get('consumers', '?')} consumers",
             f"{w.get('rate', '?')} publishes/s"]
    if c:
        parts.append("confirms" if c.get("confirms", True) else "no confirms")
        parts.append("persistent" if c.get("persistent", True) else "transient messages")
        parts.append(f"prefetch {c.get('prefetch')}")
        parts.append(f"publish timeout {c.get('publish_timeout_s')} s")
        if c.get("crash_after"):
            parts.append(f"consumers crash after {c['crash_after']} deliveries")
    return ", ".join(parts)


def _nemesis_text(info: dict[str, Any]) -> str:
    n = _get(info, "spec.nemesis", "nemesis_options", "nemesis")
    if not isinstance(n, dict):
        return NOT_IN_SPEC
    faults = n.get("faults")
    if isinstance(faults, list | tuple) and not faults:
        return "none (no faults)"
    schedule = n.get("schedule")
    if n.get("order") == "once" and isinstance(schedule, list):
        return "played once: " + ", ".join(  # (start_s, entry, duration_s) items
            f"{x[1]} at {x[0]} s for {x[2]} s" for x in schedule
            if isinstance(x, list | tuple) and len(x) == 3)
    interval = n.get("interval_s", n.get("interval"))
    duration = n.get("duration_s", n.get("duration"))
    parts = [_list(faults)]
    # An entry may set its own (kill@leader:duration=10): the spec's are then the defaults.
    own = isinstance(faults, list | tuple) and any(":" in str(f) for f in faults)
    if interval is not None:
        parts.append(f"{'by default ' if own else ''}after {interval} s healthy")
    if duration is not None:
        parts.append(f"each for {duration} s")
    if n.get("targets"):
        parts.append(f"targets {n['targets']}")
    return ", ".join(parts)


def _check_text(info: dict[str, Any]) -> str:
    c = _get(info, "spec.check")
    if not isinstance(c, dict):
        return NOT_IN_SPEC
    return ", ".join([
        "strict order" if c.get("strict_order") else "order of first deliveries",
        "unflagged duplicates invalid" if c.get("unflagged_duplicates_invalid", True)
        else "unflagged duplicates allowed",
        "flagged duplicates invalid" if c.get("flagged_duplicates_invalid")
        else "flagged duplicates allowed",
    ])


def _phases_text(info: dict[str, Any]) -> str:
    ph = info.get("phase_seconds")
    if not isinstance(ph, dict) or not ph:
        return NOT_IN_SPEC
    total = sum(v for v in ph.values() if isinstance(v, int | float))
    return ", ".join(f"{k} {v:g} s" for k, v in ph.items()) + f" (total {total:.1f} s)"


def _recovery_text(info: dict[str, Any], scan: HistoryScan | None) -> str:
    rec = info.get("recovery")
    parts = []
    if isinstance(rec, dict):
        took = rec.get("seconds")
        took_text = f"{took:.1f}" if isinstance(took, int | float) else "?"
        parts.append(("healthy" if rec.get("healthy") else "NOT healthy")
                     + f" after {took_text} s")
    events = [op for op in (scan.events if scan is not None else [])
              if op.f.startswith("recover")]
    for op in events:
        v = op.value if isinstance(op.value, dict) else {}
        parts.append(f"{op.f} {v.get('node', op.node or '?')}: {v.get('action', '?')} "
                     f"({v.get('outcome', '?')}) at {seconds(op.time)} s")
    if not events and isinstance(rec, dict):
        actions = rec.get("actions") or []
        parts.append(f"{len(actions)} recovery actions" if actions else "no recovery action")
    return "; ".join(parts) if parts else NOT_IN_SPEC


def _drain_text(info: dict[str, Any]) -> str:
    d = info.get("drain")
    if not isinstance(d, dict):
        return NOT_IN_SPEC
    delivered = as_dict(d.get("delivered"))
    total = sum(v for v in delivered.values() if isinstance(v, int))
    parts = ["complete" if d.get("complete") else "NOT complete"]
    parts.append(f"{total:,} delivered" + (" (" + ", ".join(
        f"{n} {v:,}" for n, v in delivered.items()) + ")" if delivered else ""))
    errors = as_dict(d.get("errors"))
    if errors:
        parts.append("errors: " + "; ".join(f"{n}: {m}" for n, m in errors.items()))
    if d.get("reason"):
        parts.append(str(d["reason"]))
    return ", ".join(parts)


def _placement_text(p: Any) -> str:
    if not isinstance(p, dict) or not p:
        return "unknown"
    others = p.get("members") or p.get("mirrors") or []
    return f"leader {p.get('leader') or 'none'}, replicas {_list(others)}"


def _outcome_text(info: dict[str, Any], results: Any) -> str:
    parts = ["interrupted" if info.get("interrupted") else "ran to the end"]
    if info.get("error"):
        parts.append(f"error: {info['error']}")
    run = results.get("run") if isinstance(results, dict) else None
    problems = run.get("problems") if isinstance(run, dict) else None
    if problems:
        parts.append("problems: " + "; ".join(map(str, problems)))
    unbooted = run.get("unrecoverable_nodes") if isinstance(run, dict) else None
    for u in unbooted if isinstance(unbooted, list) else []:
        if isinstance(u, dict) and u.get("text"):
            parts.append(str(u["text"]))
    return ", ".join(parts)


def _history_text(info: dict[str, Any], scan: HistoryScan | None) -> str:
    if scan is None:
        n = info.get("history_ops")
        return f"{count(n)} ops (history.jsonl missing)" if isinstance(n, int) else "no history"
    text = f"{scan.op_count:,} ops over {scan.end_ns / NS_PER_S:.1f} s"
    if scan.bad_lines:
        text += f", {scan.bad_lines:,} unreadable lines"
    if scan.unfinished:
        text += f", {scan.unfinished:,} client ops never completed"
    return text


def spec_rows(info: dict[str, Any], scan: HistoryScan | None, results: Any) -> list[tuple[str, str]]:
    """Takes test.json's content, the history scan and results.json's content. Returns the spec
    table's (label, text) rows; no text is empty."""
    versions = as_dict(info.get("versions"))
    broker = _get(info, "spec.broker")
    handling = _get(info, "spec.broker.partition_handling", "partition_handling")
    ticktime = broker.get("net_ticktime") if isinstance(broker, dict) else None
    rows = [
        ("test", str(info.get("name") or NOT_IN_SPEC)
         + (f": {_get(info, 'spec.description')}" if _get(info, "spec.description") else "")),
        ("started", str(_get(info, "start_time", "started_at") or NOT_IN_SPEC)),
        ("backend", str(info.get("backend") or NOT_IN_SPEC)),
        ("seed", str(_get(info, "seed", "spec.seed") if _get(info, "seed", "spec.seed")
                     is not None else NOT_IN_SPEC)),
        ("nodes", _nodes_text(info)),
        ("versions", versions_line(versions) or NOT_IN_SPEC),
        ("time limit", _num(_get(info, "spec.time_limit_s", "time_limit_s", "time_limit"), " s")),
        ("queue", _queue_text(info)),
        ("partition handling", str(handling or ("none: the release line has none"
                                                if isinstance(broker, dict) and "partition_handling"
                                                in broker else NOT_IN_SPEC))
         + (f" (net_ticktime {ticktime} s)" if ticktime else "")),
        ("workload", _workload_text(info)),
        ("nemesis faults", _nemesis_text(info)),
        ("checking", _check_text(info)),
        ("phase times", _phases_text(info)),
        ("recovery", _recovery_text(info, scan)),
        ("drain", _drain_text(info)),
        ("queue placement", "at start: " + _placement_text(info.get("placement_at_start"))
         + "; after recovery: " + _placement_text(info.get("placement_after_recovery"))
         if "placement_at_start" in info else NOT_IN_SPEC),
        ("history", _history_text(info, scan)),
        ("outcome", _outcome_text(info, results)),
    ]
    return [(k, v if v.strip() else NA) for k, v in rows]


def _leaves(d: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Flattens test.json into (dotted key, text) leaves; lists of objects are summarised."""
    out: list[tuple[str, str]] = []
    if isinstance(d, dict):
        if not d:
            return [(prefix.rstrip("."), "none")]
        for k, v in d.items():
            out += _leaves(v, f"{prefix}{k}.")
        return out
    key = prefix.rstrip(".")
    if isinstance(d, list):
        if any(isinstance(x, dict | list) for x in d):
            return [(key, f"{len(d)} entries")]
        return [(key, _list(d))]
    if d is None:
        return [(key, "none")]
    if d == "":
        return [(key, '"" (empty)')]
    return [(key, str(d))]


def phases_table(scan: HistoryScan | None) -> Table | None:
    """Takes the history scan. Returns a table of the harness phases with their times, or None."""
    if scan is None or not scan.phases:
        return None
    rows = [
        [td(p.phase), td(seconds(p.start_ns), num=True),
         td(seconds(p.end_ns) + ("" if p.ended else " (history ends)"), num=True),
         td(f"{(p.end_ns - p.start_ns) / NS_PER_S:.3f}", num=True)]
        for p in scan.phases
    ]
    return table(["phase", "start s", "end s", "duration s"], rows, num_cols=[1, 2, 3])


@dataclass(frozen=True)
class SpecPart:
    """The Test section as data: why test.json could not be read ("" when it was), the spec
    table, the phases (None without them), and every recorded setting (None without a
    test.json object) with how many there are."""

    problem: str
    table: Table
    phases: Table | None = None
    settings: Table | None = None
    settings_count: int = 0


def spec_data(spec: Any, spec_error: str | None, present: bool, scan: HistoryScan | None,
              results: Any) -> SpecPart:
    """Takes test.json's content, why it could not be read, whether it exists, the scan and
    results.json's content. Returns the Test section: the spec table, the phases and, folded,
    every recorded setting."""
    problem = ("No test.json: the spec of this run is unknown." if not present
               else f"test.json is unreadable: {spec_error}" if spec_error is not None
               else "test.json is not a JSON object." if not isinstance(spec, dict) else "")
    if isinstance(spec, dict):
        rows = spec_rows(spec, scan, results)
    else:
        rows = [("history", _history_text({}, scan))]
    leaves = _leaves(spec) if isinstance(spec, dict) else []
    return SpecPart(
        problem=problem,
        table=table(None, ([th(k), td(v)] for k, v in rows), wide=True),
        phases=phases_table(scan),
        settings=(table(["setting", "value"], ([td(k), td(v)] for k, v in leaves), len(leaves),
                        wide=True) if isinstance(spec, dict) else None),
        settings_count=len(leaves),
    )


# --- files --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FilesPart:
    """The Files section as data: the run's top-level files with their sizes, the plots, and
    each node's files (link, name, size)."""

    files: tuple[tuple[str, str], ...]
    plots: tuple[str, ...]
    nodes: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...]


def files_data(files: RunFiles, plots: list[str]) -> FilesPart:
    """Takes the run's files and the plot file names. Returns the Files section: links to the
    history, results, spec, log, plots and each node's logs."""
    return FilesPart(
        files=tuple((name, size(n)) for name, n in files.files),
        plots=tuple(plots),
        nodes=tuple((node, tuple((f"nodes/{node}/{n}", n, size(s)) for n, s in names))
                    for node, names in files.nodes.items()),
    )

