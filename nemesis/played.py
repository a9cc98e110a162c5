"""The schedule as played: a history's nemesis ops read back into an explicit schedule.

Whatever schedule a run drew (random, cycle) or was given (once), its
history says which faults the nemesis started and when: each start is an
`invoke` of the fault's start f whose value names the fault (and the entry
it played, `"entry"`, when that is not the bare name), and it ends at the
invocation of its stop f, or of "heal", or at the main phase's end. The
interpreter plays one fault at a time, so the ops pair in order.

`played_schedule` turns them into (start_s, entry, duration_s) items: start
from the main phase's start (the harness's `phase` op), duration from the
start's invocation to the stop's, both in milliseconds, each entry without
timing of its own (the item says when). Played once with the same seed,
those items start the same faults at the same offsets, and the faults draw
their nodes (a `one` target, a partition's random halves) from the same
seeded Random in the same order, so they hit the same nodes. A history
written before starts named their entry maps each fault name to the first
entry of the options playing it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from history import HARNESS, NEMESIS, Op
from nemesis.errors import NemesisConfigError
from nemesis.faults import INFO
from nemesis.options import TIMING_KEYS, NemesisOptions, ScheduledFault

log = logging.getLogger(__name__)

HEAL_F = "heal"
NS = 1_000_000_000
# Milliseconds: what a scenario file keeps; the shortest fault it can say.
DIGITS = 3
SHORTEST_S = 10.0 ** -DIGITS


@dataclass(frozen=True)
class PlayedFault:
    """One fault as played: its entry, its start and end (ns of history time), and the nodes
    its start said it hit (None when it did not say or failed)."""

    entry: str
    start_ns: int
    end_ns: int
    nodes: tuple[str, ...] | None = None


def main_phase(ops: Iterable[Op]) -> tuple[int | None, int | None]:
    """Takes a history's ops. Returns the main phase's (start, end) times in ns, None where the
    history has no such phase op."""
    start = end = None
    for op in ops:
        if op.process == HARNESS and op.f == "phase" and isinstance(op.value, dict) \
                and op.value.get("phase") == "main":
            if op.value.get("state") == "start" and start is None:
                start = op.time
            elif op.value.get("state") == "end" and end is None:
                end = op.time
    return start, end


def played_faults(ops: Iterable[Op], options: NemesisOptions) -> list[PlayedFault]:
    """Takes a history's ops (in order) and the options the run played. Returns each fault the
    nemesis started, in order, with when it started and ended (the module's docstring)."""
    ops = list(ops)
    _start, main_end = main_phase(ops)
    out: list[PlayedFault] = []
    open_: tuple[str, str, int] | None = None  # (entry, stop f, start ns)
    nodes: tuple[str, ...] | None = None
    last = ops[-1].time if ops else 0
    for op in ops:
        if op.process != NEMESIS:
            continue
        name = op.value.get("fault") if isinstance(op.value, dict) else None
        info = INFO.get(name) if isinstance(name, str) else None
        if open_ is not None:
            entry, stop_f, t = open_
            if op.type == "invoke" and (op.f == HEAL_F or (op.f == stop_f and name == entry_fault(
                    entry))):
                out.append(PlayedFault(entry, t, op.time, nodes))
                open_ = None
            elif op.type != "invoke" and info is not None and op.f == info.start_f \
                    and not op.error:
                hit = op.value.get("nodes")
                nodes = tuple(str(n) for n in hit) if isinstance(hit, list) else None
            continue
        if op.type == "invoke" and info is not None and op.f == info.start_f:
            told = op.value.get("entry")
            entry = told if isinstance(told, str) else entry_for(info.name, options)
            open_, nodes = (untimed(entry), info.stop_f, op.time), None
    if open_ is not None:
        entry, _stop, t = open_
        out.append(PlayedFault(entry, t, max(t, main_end if main_end is not None else last),
                               nodes))
    return out


def played_schedule(ops: Iterable[Op], options: NemesisOptions, until_s: float | None = None
                    ) -> tuple[ScheduledFault, ...] | None:
    """Takes a history's ops, the options the run played and, optionally, the main phase's
    length. Returns the faults as played, as (start_s, entry, duration_s) items from the main
    phase's start, in milliseconds; None when the history has no main phase (nothing was
    played).

    Given the phase's length, no fault is said to end past it: one that did had a start
    action still running at the phase's end (a rolling restart) and was stopped once it
    finished, which is what playing it again does too.
    """
    ops = list(ops)
    origin, _end = main_phase(ops)
    if origin is None:
        return None
    items: list[ScheduledFault] = []
    for fault in played_faults(ops, options):
        start = round(max(0, fault.start_ns - origin) / NS, DIGITS)
        end = round(max(0, fault.end_ns - origin) / NS, DIGITS)
        if until_s is not None:
            end = min(end, max(start, round(until_s, DIGITS)))
        items.append((start, fault.entry, max(SHORTEST_S, round(end - start, DIGITS))))
    return tuple(items)


def played_options(ops: Iterable[Op], options: NemesisOptions, until_s: float | None = None
                   ) -> NemesisOptions | None:
    """Takes a history's ops, the options the run played and, optionally, the main phase's
    length. Returns options that play its faults once as they were played (every other option
    kept; `played_schedule`); None when nothing was played because the main phase never
    began."""
    items = played_schedule(ops, options, until_s)
    if items is None:
        return None
    rest = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)
            if f.name not in ("faults", "order", "schedule")}
    return NemesisOptions.played_once(items, **rest)


def entry_fault(entry: str) -> str:
    """Takes a fault entry. Returns its fault's name."""
    return entry.split(":", 1)[0].split("@", 1)[0].strip()


def entry_for(name: str, options: NemesisOptions) -> str:
    """Takes a fault name and the options a run played. Returns the first of their entries that
    plays it (the bare name when none does: a history of other options)."""
    try:
        matches = [e.text for e in options.entries() if e.fault == name]
    except NemesisConfigError:
        matches = []
    if len(matches) > 1:
        log.warning("the history does not say which of %s it played; taking %s",
                    ", ".join(matches), matches[0])
    return matches[0] if matches else name


def untimed(entry: str) -> str:
    """Takes a fault entry. Returns it without its own duration= and interval= (a scheduled
    item says when it plays); the rest as written."""
    head, *parts = entry.split(":")
    kept = [p for p in parts if p.partition("=")[0].strip() not in TIMING_KEYS]
    return ":".join([head, *kept])
