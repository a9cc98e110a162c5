"""A finding's messages as the history recorded them: their ops, the harness's own ops near them,
and how far each delivery lies from a phase boundary.

One pass over history.jsonl (or history.jsonl.gz, as archived findings keep
it; read with history.iter_history) keeps only what a finding report shows:
every client op of the example messages (publish invoke and completion,
deliveries, acks, dead letters), the harness's phase boundaries (`f "phase"`),
its queue placement samples (the leader then), the nemesis's ops, each
consumer's end (`f "cancel"` and `f "close"`, which newer histories record),
and any op whose history index results.json names (a stalled hand-over's next
delivery: reports.finding_hand_over).
`timeline` puts one example's ops in history order with the harness's and the
nemesis's ops within NEAR_NS of them, and every cancel or close of a consumer
holding one of the messages. `nearest_boundary` gives a time's signed distance
to the closest phase boundary: a delivery within SUSPECT_NS of one may have
been caused by the harness stopping its own clients, and the report says so.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from history import DEAD_LETTER, HARNESS, NEMESIS, Op, iter_history

HISTORY_NAMES = ("history.jsonl", "history.jsonl.gz")
DELIVERIES = ("consume", "drain", DEAD_LETTER)
ENDS = ("cancel", "close")  # a consumer's end, as newer histories record it
PHASE = "phase"
PLACEMENT = "placement"
MS = 1_000_000
NEAR_NS = 2_000 * MS
SUSPECT_NS = 1_000 * MS


def history_file(run_dir: Path) -> Path | None:
    """Takes a run directory. Returns its history (plain, else gzip-compressed), or None."""
    return next((run_dir / n for n in HISTORY_NAMES if (run_dir / n).is_file()), None)


@dataclass
class Scan:
    """What one pass kept: each example id's ops, the harness's, the nemesis's and the
    consumers' ends, each in history order, and the ops of the indices asked for."""

    by_id: dict[str, list[Op]] = field(default_factory=dict)
    by_index: dict[int, Op] = field(default_factory=dict)
    phases: list[Op] = field(default_factory=list)
    placements: list[Op] = field(default_factory=list)
    nemesis: list[Op] = field(default_factory=list)
    ends: list[Op] = field(default_factory=list)


def scan(ops: Iterable[Op], ids: Collection[str], indices: Collection[int] = ()) -> Scan:
    """Takes a history's ops, the example ids and the history indices whose ops are wanted.
    Returns what a finding report shows of it."""
    out = Scan(by_id={i: [] for i in ids})
    wanted = set(indices)
    for op in ops:
        if op.index in wanted:
            out.by_index[op.index] = op
        if op.process == HARNESS:
            if op.f == PHASE:
                out.phases.append(op)
            elif op.f == PLACEMENT:
                out.placements.append(op)
        elif op.process == NEMESIS:
            out.nemesis.append(op)
        elif op.f in ENDS:
            out.ends.append(op)
        elif isinstance(op.value, str) and op.value in out.by_id:
            out.by_id[op.value].append(op)
    return out


def scan_file(path: Path, ids: Collection[str], indices: Collection[int] = ()) -> Scan:
    """Takes a history file, the example ids and the indices wanted. Returns `scan` of it."""
    return scan(iter_history(path), ids, indices)


def _holding(op: Op) -> list[str]:
    held = op.extra.get("holding")
    return [str(x) for x in held] if isinstance(held, list) else []


def timeline(s: Scan, ids: Sequence[str]) -> list[Op]:
    """Takes a scan and one example's ids. Returns, in history order, their ops and, within
    NEAR_NS of any of them, the phase boundaries, the nemesis's completed ops and the ends of
    the consumers that received them; and every end of a consumer holding one of them."""
    own = [op for i in ids for op in s.by_id.get(i, [])]
    if not own:
        return []
    times = sorted(op.time for op in own)
    receivers = {op.process for op in own if op.f in DELIVERIES}

    def near(op: Op) -> bool:
        return any(abs(op.time - t) <= NEAR_NS for t in times)

    extra = [op for op in s.phases if near(op)]
    extra += [op for op in s.nemesis if op.type != "invoke" and near(op)]
    extra += [op for op in s.ends
              if (op.process in receivers and near(op)) or set(_holding(op)) & set(ids)]
    return sorted({op.index: op for op in own + extra}.values(), key=lambda o: o.index)


def boundary_label(op: Op) -> str:
    """Takes a phase op. Returns "main end", "drain start", ..."""
    v = op.value if isinstance(op.value, dict) else {}
    return f"{v.get('phase', '?')} {v.get('state', '?')}"


def nearest_boundary(t: int, phases: Sequence[Op]) -> tuple[int, Op] | None:
    """Takes a time (ns) and the phase ops. Returns (t minus the closest boundary's time, that
    boundary), the earlier one on a tie; None without boundaries."""
    if not phases:
        return None
    best = min(phases, key=lambda p: (abs(t - p.time), p.time))
    return t - best.time, best


def distance_text(t: int, phases: Sequence[Op]) -> str:
    """Takes a time (ns) and the phase ops. Returns its distance to the closest phase boundary
    in words ("901.1 ms before main end"), or "" without boundaries."""
    found = nearest_boundary(t, phases)
    if found is None:
        return ""
    d, p = found
    where = "before" if d < 0 else "after"
    return f"{abs(d) / MS:,.1f} ms {where} {boundary_label(p)}"


def suspects(ops: Iterable[Op], phases: Sequence[Op]) -> list[tuple[Op, int, Op]]:
    """Takes an example's ops and the phase ops. Returns (delivery, signed distance, boundary)
    for each delivery within SUSPECT_NS of a phase boundary; for a message never delivered, its
    publish completion is judged instead."""
    ops = list(ops)
    judged = [op for op in ops if op.f in DELIVERIES] or [
        op for op in ops if op.f == "publish" and op.type != "invoke"]
    out = []
    for op in judged:
        found = nearest_boundary(op.time, phases)
        if found is not None and abs(found[0]) <= SUSPECT_NS:
            out.append((op, found[0], found[1]))
    return out


def target_text(fault: dict[str, Any]) -> str:
    """Takes a results.json fault. Returns the nodes it hit ("n1, n2"), or ""."""
    target = fault.get("target")
    return ", ".join(map(str, target)) if isinstance(target, list) else str(target or "")


def fault_words(fault: dict[str, Any]) -> str:
    """Takes a results.json fault. Returns it in words: its kind and the nodes it hit
    ("partition-one on n1")."""
    on = target_text(fault)
    return f"{fault.get('fault') or fault.get('f')}" + (f" on {on}" if on else "")


def seconds_text(ms: Any) -> str:
    """Takes a time in ms. Returns it in seconds ("12.500 s"), or "an unknown time"."""
    return f"{float(ms) / 1000:.3f} s" if isinstance(ms, int | float) and \
        not isinstance(ms, bool) else "an unknown time"


def with_context(own: Iterable[Op], s: Scan, span: tuple[int, int] | None,
                 ends: Iterable[Op]) -> list[Op]:
    """Takes a finding part's own ops, the scan, the span (ns) its table covers (None: none)
    and the consumers' ends it shows. Returns, in history order and each once, its own ops
    and, within the span, those ends, the phase boundaries, the placement samples and the
    nemesis's completed ops."""
    near: list[Op] = []
    if span is not None:
        lo, hi = span
        near = [op for op in (*ends, *s.phases, *s.placements,
                              *(n for n in s.nemesis if n.type != "invoke"))
                if lo <= op.time <= hi]
    return sorted({op.index: op for op in (*own, *near)}.values(), key=lambda o: o.index)


def leader_samples(s: Scan) -> list[tuple[int, str, str]]:
    """Takes a scan. Returns each placement sample as (time ns, queue, leader), in order."""
    out = []
    for op in s.placements:
        v = op.value if isinstance(op.value, dict) else {}
        if v.get("leader"):
            out.append((op.time, str(v.get("queue") or ""), str(v["leader"])))
    return out
