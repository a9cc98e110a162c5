"""Harness phase events: did the drain complete, and when was the main phase.

The harness records each phase's start and end as an `info` op of process
"harness", f "phase", value {"phase": name, "state": "start"|"end"} (a drain
that could not finish ends with another state, e.g. "incomplete"). Both
checker engines collect these few events and ask this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HarnessEvent:
    """One harness op: its time (ns), f and decoded value."""

    time: int
    f: str
    value: Any


def phase_of(e: HarnessEvent) -> tuple[Any, Any] | None:
    """Takes a harness event. Returns (phase, state) for a phase event, else None."""
    if e.f != "phase" or not isinstance(e.value, dict):
        return None
    return e.value.get("phase"), e.value.get("state")


def drain_complete(events: Iterable[HarnessEvent]) -> bool:
    """Takes harness events. Returns whether one says the drain ended (phase=drain, state=end)."""
    return any(phase_of(e) == ("drain", "end") for e in events)


def main_phase(events: Iterable[HarnessEvent], first: int, last: int) -> tuple[int, int]:
    """Takes harness events in order and the history's first and last times (ns). Returns the
    main phase [start, end]: its first start and end events, else the history's edges."""
    evs = list(events)
    start = next((e.time for e in evs if phase_of(e) == ("main", "start")), first)
    end = next((e.time for e in evs if phase_of(e) == ("main", "end")), last)
    return start, end
