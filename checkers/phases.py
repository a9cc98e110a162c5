"""Harness phase events: did the drain complete (and if not, why), and when was the main phase.

The harness records each phase's start and end as an `info` op of process
"harness", f "phase", value {"phase": name, "state": "start"|"end"}. The
drain's end also carries `"complete": true|false` and, when false, a
`"reason"`; a drain that could not finish may also end with another state
(e.g. "incomplete"). The checker collects these few events on the driver and
asks this module.

The drain is complete iff its end event (the last drain event whose state is
not "start") has state "end" and a `complete` that is absent (older runs) or
true. Anything else - no end event, `complete: false`, another state - is an
incomplete drain, and `DrainState.reason` says which, quoting the event's
own `reason` when it has one.

One more rule, for a drain that ends "complete" because no node has the queue
any more: if the drain's own consume on some node was refused with a 404 that
says the queue is there but cannot be reached ("failed to perform operation on
queue ... due to timeout", "home node ... is down or inaccessible", "process
is stopped by supervisor": anything but "no queue"), its evidence contradicts
itself, and the queue's emptiness is unproven. (Runs before the depth was asked
of the queue's record and process took "absent" from list_queues, which leaves
out, silently, a queue whose process hangs: a mirrored queue's master hung
after autoheal was called gone with thousands of messages in it.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from checkers.model import DEAD_LETTERING, PRIORITIES


@dataclass(frozen=True)
class HarnessEvent:
    """One harness op: its time (ns), f and decoded value, and the node it names, where it
    sits in the file (checkers.spark_io.loc) and its index, where known."""

    time: int
    f: str
    value: Any
    node: str | None = None
    loc: int | None = None
    index: int | None = None


# A consume refused because the queue's record exists but its process cannot be reached.
_THERE_BUT_UNREACHABLE = re.compile(r"NOT_FOUND - (?!no queue\b)")


@dataclass(frozen=True)
class DrainState:
    """Whether the drain completed; when it did not, why (a sentence for results.json)."""

    complete: bool
    reason: str | None = None


def phase_of(e: HarnessEvent) -> tuple[Any, Any] | None:
    """Takes a harness event. Returns (phase, state) for a phase event, else None."""
    if e.f != "phase" or not isinstance(e.value, dict):
        return None
    return e.value.get("phase"), e.value.get("state")


def drain_state(events: Iterable[HarnessEvent]) -> DrainState:
    """Takes harness events in history order. Returns the drain's outcome (see the module docstring)."""
    end = None
    for e in events:
        ph = phase_of(e)
        if ph is not None and ph[0] == "drain" and ph[1] != "start":
            end = e.value
    if end is None:
        return DrainState(False, "the drain did not complete (no drain-end event, phase=drain "
                                 "state=end, in the history)")
    state, complete, reason = end.get("state"), end.get("complete"), end.get("reason")
    if state == "end" and complete in (None, True):
        return _contradicted(end) or DrainState(True)
    why = f": {reason}" if reason not in (None, "") else ""
    if state == "end":
        return DrainState(False, f"the drain did not complete (its end event says "
                                 f"complete={json.dumps(complete)}){why}")
    return DrainState(False, f"the drain did not complete (its end event has state "
                             f"{state!r}){why}")


def _contradicted(end: dict[str, Any]) -> DrainState | None:
    """Takes a complete drain's end event. Returns an incomplete DrainState when the drain took
    the queue for gone on every node while a node refused its consume as there but unreachable,
    else None."""
    depth, errors = end.get("depth"), end.get("errors")
    if not isinstance(depth, dict) or not depth or not isinstance(errors, dict):
        return None
    if any(not isinstance(d, dict) or d.get("exists") is not False for d in depth.values()):
        return None
    refused = {n: e for n, e in errors.items()
               if isinstance(e, str) and _THERE_BUT_UNREACHABLE.search(e)}
    if not refused:
        return None
    node, error = sorted(refused.items())[0]
    said = re.sub(r"[\"')]+$", "", error[error.index("NOT_FOUND"):])
    return DrainState(False, f"the drain took the queue for gone on every node, but {node} "
                             f"refused its consume as there and unreachable ({said}): the "
                             "queue's emptiness is unproven")


def drain_complete(events: Iterable[HarnessEvent]) -> bool:
    """Takes harness events. Returns whether the drain completed (see `drain_state`)."""
    return drain_state(events).complete


def main_phase(events: Iterable[HarnessEvent], first: int, last: int) -> tuple[int, int]:
    """Takes harness events in order and the history's first and last times (ns). Returns the
    main phase [start, end]: its first start and end events, else the history's edges."""
    evs = list(events)
    start = next((e.time for e in evs if phase_of(e) == ("main", "start")), first)
    end = next((e.time for e in evs if phase_of(e) == ("main", "end")), last)
    return start, end


def dead_lettering(events: Iterable[HarnessEvent]) -> dict[str, Any] | None:
    """Takes harness events in order. Returns the value of the last `dead-lettering`
    observation (where the queue dead-letters: by "harness" or "user", under which limits),
    or None when the harness recorded none (the queue dead-letters nowhere, or an older run)."""
    found = None
    for e in events:
        if e.f == DEAD_LETTERING and isinstance(e.value, dict):
            found = e.value
    return found


def priorities_observed(events: Iterable[HarnessEvent]) -> dict[str, Any] | None:
    """Takes harness events in order. Returns the value of the last `priorities` observation
    (the run's publishers gave messages priorities: the queue, its release line's levels and
    whether it serves them strictly, the consumers' prefetch), or None when there is none (no
    priorities, or an older run)."""
    found = None
    for e in events:
        if e.f == PRIORITIES and isinstance(e.value, dict):
            found = e.value
    return found


def phase_start(events: Iterable[HarnessEvent], phase: str) -> int | None:
    """Takes harness events in order and a phase name. Returns the time (ns) of the phase's
    first start event, or None."""
    return next((e.time for e in events if phase_of(e) == (phase, "start")), None)


def phase_start_index(events: Iterable[HarnessEvent], phase: str) -> int | None:
    """Takes harness events in order and a phase name. Returns the index of the phase's first
    start event, or None (none, or its index unknown)."""
    return next((e.index for e in events if phase_of(e) == (phase, "start")), None)
