"""Every anomaly explained: for each sampled anomalous message, what happened to it and around it.

The checker counts and samples anomalous message ids (lost, duplicated,
unexpected, recovered, ...). `explain` takes those samples and tells, per
message: the publishing process and node, when it was invoked and how and
when it completed; the faults active then (from the nemesis's ops); the
queue's leader or master at that time (from the sampled placement); every
delivery (node, consumer, redelivered flag, acked, phase); and the broker log
lines of that stretch of time that matter (partitions detected, autoheal
decisions and restarts, promotions, a master stopping with no synchronised
mirror, nodes going down, pause_minority). `tell` reads the traces the Spark
check gathered (checkers.traces: the sampled ids' ops and the few nemesis and
harness ops), never the history; `explain` gathers the same traces from a
history in one plain pass, for a history the check did not read. Whether the
history records acks is the queue check's word (`acks_recorded`), not
guessed from the sampled messages (which may all be lost).

Broker logs carry wall-clock timestamps; test.json's `history_start_unix` (the
wall clock at history time 0) lines them up with the history (older runs fall
back on `start_time`, good to a second).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from checkers.traces import MEND_FS, Traces, traces_from_file
from history import Op
from history.faults import FaultWindow, fault_windows

log = logging.getLogger(__name__)

NS = 1_000_000_000
# How far around a message's life log lines are looked for.
LOG_MARGIN_S = 5.0
MAX_LOG_LINES = 12

# What in a RabbitMQ 3.10 log line is worth showing beside an anomaly, and what to call it.
LOG_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (label, re.compile(rx, re.I)) for label, rx in (
        ("partition detected", r"running_partitioned_network|partial partition detected"),
        ("autoheal", r"autoheal"),
        ("no synchronised mirror", r"no synchronised mirror"),
        ("promotion", r"promoting (mirror|slave)|promoted to master|becoming master"),
        ("mirror sync", r"synchronising: \d+ messages|all mirrors already synced"),
        ("node down", r"node .* down|nodedown|lost contact with"),
        ("pause_minority", r"minority|awaiting recovery|pause_minority"),
        ("leader change", r"detected a new leader|leader (elected|changed)|became leader"),
        ("queue recovery", r"recovering .* messages|discarding"),
    )
)
# Which kinds of line say most about a loss, first; at most PER_LABEL of each kind are kept.
LABEL_ORDER = ("autoheal", "no synchronised mirror", "promotion", "partition detected",
               "pause_minority", "leader change", "queue recovery", "node down", "mirror sync")
PER_LABEL = 3
_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+[+-]\d\d:\d\d) \[(\w+)\] \S+ (.*)$")


@dataclass(frozen=True)
class LogLine:
    """One broker log line that matters: when (history ns), where, what kind, its text, and
    where it came from (`evidence`: its file under nodes/ and line number, "n1/rabbit.log:88")."""

    time_ns: int
    node: str
    label: str
    text: str
    evidence: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Returns the JSON-able form, time in seconds since the history started."""
        return {"t_s": round(self.time_ns / NS, 3), "node": self.node, "label": self.label,
                "text": self.text[:300], "evidence": self.evidence}


def read_log_lines(nodes_dir: Path, start_unix: float) -> list[LogLine]:
    """Takes a run's nodes/ directory and the wall clock at history time 0. Returns the log
    lines matching LOG_PATTERNS from every node's rabbit*.log, in time order."""
    found = []
    for path in sorted(nodes_dir.glob("*/rabbit*.log")):
        node = path.parent.name
        with open(path, encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                m = _LOG_TIME.match(line.rstrip("\n"))
                if not m:
                    continue
                label = next((lb for lb, rx in LOG_PATTERNS if rx.search(m.group(3))), None)
                if label is None:
                    continue
                t = datetime.fromisoformat(m.group(1)).timestamp() - start_unix
                found.append(LogLine(int(t * NS), node, label, m.group(3).strip(),
                                     f"{node}/{path.name}:{lineno}"))
    return sorted(found, key=lambda x: x.time_ns)


def pick_lines(lines: Sequence[LogLine], limit: int = MAX_LOG_LINES) -> list[LogLine]:
    """Takes log lines in time order. Returns at most `limit`, the most telling kinds first
    (LABEL_ORDER), at most PER_LABEL of a kind (and one per node and kind a second), in time
    order."""
    seen: dict[tuple[str, str, int], LogLine] = {}
    for x in lines:
        seen.setdefault((x.label, x.node, x.time_ns // NS), x)
    by_label: dict[str, list[LogLine]] = {}
    for x in seen.values():
        by_label.setdefault(x.label, []).append(x)
    chosen: list[LogLine] = []
    for label in LABEL_ORDER:
        chosen += by_label.get(label, [])[:PER_LABEL]
    return sorted(chosen[:limit], key=lambda x: x.time_ns)


def _active(windows: Sequence[FaultWindow], t: int | None) -> list[str]:
    if t is None:
        return []
    out = []
    for w in windows:
        if w.start_ns <= t <= w.end_ns:
            nodes = w.value.get("nodes") if isinstance(w.value, dict) else None
            out.append(f"{w.fault} on {','.join(nodes)}" if nodes else w.fault)
    return out


def _leader_at(placements: Sequence[tuple[int, str | None]], t: int | None) -> str | None:
    leader = None
    for when, who in placements:
        if t is not None and when > t:
            break
        leader = who
    return leader


def explain(history_path: Path, samples: Mapping[str, Sequence[str]], *,
            nodes_dir: Path | None = None, start_unix: float | None = None,
            limit: int = 10) -> dict[str, list[dict[str, Any]]]:
    """Takes a history, the anomaly samples ({class: [ids]}), the run's nodes/ directory and the
    wall clock at history time 0 (both optional), and how many ids per class to explain.
    Returns `tell`'s stories, from traces read from the history in one plain pass
    (checkers.traces.traces_from_file: for a history the check did not gather them from)."""
    wanted = _wanted(samples, limit)
    if not wanted:
        return {}
    traces = traces_from_file(history_path, {i for v in wanted.values() for i in v})
    return tell(traces, wanted, log_lines(nodes_dir, start_unix))


def log_lines(nodes_dir: Path | None, start_unix: float | None) -> list[LogLine]:
    """Takes the run's nodes/ directory and the wall clock at history time 0 (either may be
    None). Returns `read_log_lines`, or none when either is missing."""
    if nodes_dir is None or start_unix is None or not nodes_dir.exists():
        return []
    return read_log_lines(nodes_dir, start_unix)


def _wanted(samples: Mapping[str, Sequence[str]], limit: int) -> dict[str, list[str]]:
    return {cls: list(ids)[:limit] for cls, ids in samples.items() if ids}


def tell(traces: Traces, samples: Mapping[str, Sequence[str]], lines: Sequence[LogLine] = (),
         *, limit: int = 10, acks_recorded: bool | None = None) -> dict[str, list[dict[str, Any]]]:
    """Takes the traces (checkers.traces: the sampled ids' ops, the nemesis and harness ops),
    the anomaly samples ({class: [ids]}, every id among the traced ones), the broker log lines
    (`read_log_lines`), how many ids per class to tell, and whether the history records acks
    (the queue check's `acks_recorded`; None: the traces' own word, the same rule).

    Returns {class: [one dict per explained id]}, each with "id", "publish" (process, node,
    invoke and completion time, type, error), "faults_at_publish", "faults_at_confirm",
    "leader_at_publish", "deliveries" (node, consumer, redelivered, acked, phase, t_s),
    "harness_mends_after_confirm" (the harness's own restarts after the broker confirmed it:
    a loss may be theirs) and "log" (the most telling broker log lines from LOG_MARGIN_S
    before the invoke to LOG_MARGIN_S after the last delivery, or to the end of the history).
    In a history without acks every delivery counts as acked ("acked" null).
    """
    wanted = _wanted(samples, limit)
    acks = traces.acks_recorded if acks_recorded is None else acks_recorded
    placements = [(op.time, op.value.get("leader")) for op in traces.harness
                  if op.f == "placement" and isinstance(op.value, dict)]
    mends: list[dict[str, Any]] = [
        {"f": op.f, "node": op.value.get("node") or op.node, "action": op.value.get("action"),
         "t_ns": op.time} for op in traces.harness
        if op.f in MEND_FS and isinstance(op.value, dict)]
    windows = fault_windows(traces.nemesis, end_ns=traces.end_ns)
    out: dict[str, list[dict[str, Any]]] = {}
    for cls, cls_ids in wanted.items():
        out[cls] = []
        for mid in cls_ids:
            pub, deliveries = _life(traces.ops.get(mid, ()))
            t_inv, t_done = pub.pop("invoke_ns", None), pub.pop("complete_ns", None)
            if not acks:  # an older history: every delivery counts as acked
                for d in deliveries:
                    d["acked"] = None
            first = t_inv if t_inv is not None else min((d["t_ns"] for d in deliveries),
                                                        default=0)
            last = max([d["t_ns"] for d in deliveries] + [t_done or 0, first])
            lo = first - int(LOG_MARGIN_S * NS)
            hi = (last + int(LOG_MARGIN_S * NS)) if deliveries else traces.end_ns
            near = [x.as_dict() for x in pick_lines([x for x in lines if lo <= x.time_ns <= hi])]
            mended = [{"t_s": round(m["t_ns"] / NS, 3), "node": m["node"], "action": m["action"],
                       "f": m["f"]} for m in mends if t_done is not None and m["t_ns"] > t_done]
            out[cls].append({
                "id": mid, "publish": pub,
                "faults_at_publish": _active(windows, t_inv),
                "faults_at_confirm": _active(windows, t_done),
                "leader_at_publish": _leader_at(placements, t_inv),
                "deliveries": [{k: v for k, v in d.items() if k != "t_ns"} for d in deliveries],
                "harness_mends_after_confirm": mended,
                "log": near,
            })
    return out


def _life(ops: Sequence[Op]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Takes one message's client ops in file order. Returns its publish (process, node, times,
    outcome) and its deliveries, each acked when an ack of its consumer follows it (first in,
    first out)."""
    pub: dict[str, Any] = {}
    deliveries: list[dict[str, Any]] = []
    pending_ack: dict[str | None, list[dict[str, Any]]] = {}
    for op in ops:
        if op.f == "publish":
            if op.type == "invoke":
                pub.update(process=op.process, node=op.node, invoke_s=round(op.time / NS, 3),
                           invoke_ns=op.time)
            else:
                pub.update(type=op.type, error=op.error, complete_s=round(op.time / NS, 3),
                           complete_ns=op.time)
        elif op.f in ("consume", "drain") and op.type == "ok":
            d = {"node": op.node, "consumer": op.consumer, "redelivered": op.redelivered,
                 "acked": False, "phase": op.phase, "t_s": round(op.time / NS, 3),
                 "t_ns": op.time}
            deliveries.append(d)
            pending_ack.setdefault(op.consumer, []).append(d)
        elif op.f == "ack":
            waiting = pending_ack.get(op.consumer)
            if waiting:
                waiting.pop(0)["acked"] = True
    return pub, deliveries


def _s(x: Any) -> str:
    return "-" if x is None else f"{x:g}" if isinstance(x, float) else str(x)


def readable(story: dict[str, Any]) -> dict[str, str]:
    """Takes one explained message (as `explain` returns it). Returns it as a few readable
    columns for results.json and the report: id, publish, faults, leader, deliveries, harness
    mends, broker log."""
    pub = story.get("publish") or {}
    published = (f"process {_s(pub.get('process'))} on {_s(pub.get('node'))} at "
                 f"{_s(pub.get('invoke_s'))} s: {_s(pub.get('type') or 'no completion')}"
                 + (f" at {_s(pub.get('complete_s'))} s" if pub.get("complete_s") is not None
                    else "") + (f" ({pub['error']})" if pub.get("error") else ""))
    faults = sorted(set(story.get("faults_at_publish", []) + story.get("faults_at_confirm", [])))
    deliveries = "; ".join(
        f"{d['node']} {d['consumer']} {'flagged' if d.get('redelivered') else 'unflagged'} "
        f"{'acked' if d.get('acked') else 'not acked' if d.get('acked') is False else ''}"
        f" at {_s(d.get('t_s'))} s ({d.get('phase')})".replace("  ", " ")
        for d in story.get("deliveries", [])) or "never delivered"
    mends = "; ".join(f"{m['node']} {m['action']} at {_s(m['t_s'])} s"
                      for m in story.get("harness_mends_after_confirm", [])) or "none"
    logs = " | ".join(f"{_s(x['t_s'])} s {x['node']} {x['label']}: {x['text'][:140]}"
                      for x in story.get("log", [])) or "none found"
    return {"id": str(story.get("id")), "published": published,
            "faults then": ", ".join(faults) or "none",
            "leader then": _s(story.get("leader_at_publish")), "deliveries": deliveries,
            "harness restarts after the confirm": mends, "broker log": logs}
