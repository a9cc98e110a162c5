"""Fault windows: when the nemesis had a fault in effect, read from its ops.

The nemesis records each action as an `invoke` and an `info` completion
(process "nemesis"). A fault window opens at the completion of a start f and
closes at the completion of the next matching stop f, or of "heal" (the
final heal ends every open fault), or at the end of the history. `PAIRS` is
the one table of start/stop fs; any other "start-X" is closed by "stop-X"
(e.g. start-rolling-restart / stop-rolling-restart).

A window remembers its target (the nodes it hit: `value["nodes"]`, else the
op's `node`). A stop closes every open window of its pair whose target is
compatible with its own: either target unknown, or the two share a node.
Both checker engines collect the (few) nemesis ops and call `fault_windows`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

log = logging.getLogger(__name__)

PAIRS: Final[dict[str, str]] = {
    "start-partition": "stop-partition",
    "kill": "start",
    "stop": "start",
    "pause": "resume",
    "start-packet": "stop-packet",
}
HEAL: Final = "heal"
END_OF_HISTORY: Final = "end-of-history"


@dataclass(frozen=True)
class NemesisOp:
    """One nemesis op as the checkers need it. `key` orders ops in the file (line or position)."""

    key: int
    index: int
    time: int
    type: str
    f: str
    value: Any = None
    node: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class FaultWindow:
    """A stretch of time [start, end) (ns) during which a fault was in effect."""

    f: str
    stop_f: str
    start: int
    end: int
    closed_by: str
    target: tuple[str, ...] | None
    value: Any = None


def stop_f_for(start_f: str) -> str | None:
    """Takes a nemesis f. Returns the f that ends it, or None when it does not start a fault."""
    if start_f in PAIRS:
        return PAIRS[start_f]
    if start_f.startswith("start-"):
        return "stop-" + start_f[len("start-"):]
    return None


def target_of(op: NemesisOp) -> tuple[str, ...] | None:
    """Takes a nemesis op. Returns the nodes it names (value["nodes"], else its node), or None."""
    if isinstance(op.value, dict):
        nodes = op.value.get("nodes")
        if isinstance(nodes, list) and nodes:
            return tuple(sorted(str(n) for n in nodes))
        if isinstance(nodes, str):
            return (nodes,)
    if op.node:
        return (op.node,)
    return None


def _compatible(a: tuple[str, ...] | None, b: tuple[str, ...] | None) -> bool:
    return a is None or b is None or bool(set(a) & set(b))


def pairing_problem(ops: Sequence[NemesisOp]) -> tuple[int, str] | None:
    """Takes nemesis ops in file order. Returns (position, message) of the first completion
    without an open invocation of the same f, or None when every completion has one."""
    open_fs: dict[str, int] = {}
    for pos, op in enumerate(ops):
        if op.type == "invoke":
            open_fs[op.f] = open_fs.get(op.f, 0) + 1
        elif open_fs.get(op.f, 0) > 0:
            open_fs[op.f] -= 1
        else:
            return pos, f"nemesis {op.type} {op.f!r} without its invocation"
    return None


def fault_windows(ops: Iterable[NemesisOp], end_time: int) -> list[FaultWindow]:
    """Takes nemesis ops in history order and the history's last time (ns).

    Returns the fault windows in the order they opened. Only `info` (or `ok`)
    completions count; invocations and `fail` completions do not open or close.
    """
    open_: list[tuple[NemesisOp, str, tuple[str, ...] | None]] = []
    done: list[FaultWindow] = []

    def close(i: int, at: int, by: str) -> None:
        op, stop, target = open_[i]
        done.append(FaultWindow(op.f, stop, op.time, max(at, op.time), by, target, op.value))

    for op in ops:
        if op.type not in ("info", "ok"):
            continue
        if op.f == HEAL:
            for i in range(len(open_)):
                close(i, op.time, HEAL)
            open_.clear()
            continue
        stop = stop_f_for(op.f)
        if stop is not None:
            open_.append((op, stop, target_of(op)))
            continue
        target = target_of(op)
        keep = []
        for i, (start, stop_f, start_target) in enumerate(open_):
            if stop_f == op.f and _compatible(start_target, target):
                close(i, op.time, op.f)
            else:
                keep.append((start, stop_f, start_target))
        open_ = keep
    for i in range(len(open_)):
        close(i, end_time, END_OF_HISTORY)
    done.sort(key=lambda w: (w.start, w.f))
    return done


def window_dict(w: FaultWindow) -> dict[str, Any]:
    """Takes a fault window. Returns its JSON-able description (times in ms)."""
    return {
        "f": w.f,
        "stop_f": w.stop_f,
        "target": list(w.target) if w.target is not None else None,
        "start_ms": round(w.start / 1e6, 3),
        "end_ms": round(w.end / 1e6, 3),
        "duration_ms": round((w.end - w.start) / 1e6, 3),
        "closed_by": w.closed_by,
    }
