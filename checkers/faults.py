"""Fault windows as the checker reads and reports them: the one algorithm is history.faults.

The checker collects the (few) nemesis ops on the driver as `history.Op`s and
hands them to `history.faults.WindowTracker`, which turns them into windows
(its module docstring has the rules). What is the checker's own: a nemesis
completion without an open invocation of its f breaks the contract
(`fault_windows` says where), and how a window is written into results.json
(`window_dict`: an open window is closed by "end-of-history").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from history import Op
from history.faults import FaultWindow, WindowTracker

END_OF_HISTORY: Final = "end-of-history"


def fault_windows(ops: Sequence[Op], end_time: int) -> tuple[list[FaultWindow],
                                                             tuple[int, str] | None]:
    """Takes nemesis ops in file order and the history's last time (ns). Returns the fault
    windows (history.faults) and, when a completion has no open invocation of its f, its
    position in `ops` and what is wrong (else None)."""
    tracker = WindowTracker()
    problem = None
    for pos, op in enumerate(ops):
        tracker.feed(op)
        if problem is None and tracker.unpaired:
            problem = pos, f"nemesis {op.type} {op.f!r} without its invocation"
    return tracker.finish(end_time), problem


def window_dict(w: FaultWindow) -> dict[str, Any]:
    """Takes a fault window. Returns its JSON-able description for results.json (times in ms)."""
    return {
        "f": w.f,
        "stop_f": w.stop_f,
        "target": list(w.target) if w.target is not None else None,
        "start_ms": round(w.start_ns / 1e6, 3),
        "end_ms": round(w.end_ns / 1e6, 3),
        "duration_ms": round((w.end_ns - w.start_ns) / 1e6, 3),
        "closed_by": w.closed_by or END_OF_HISTORY,
    }
