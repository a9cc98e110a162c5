"""The schedule: the healthy and faulty periods the nemesis options make, from the test seed.

Each fault entry is one of Jepsen's combined-nemesis packages: its own
`(gen/stagger interval (gen/flip-flop start stop))`, a healthy period of its
`interval` then a fault period of its `duration` (each the entry's own, else
the options'). The schedule composes the entries one after another, starting
healthy, so that one fault is in effect at a time (Jepsen's `gen/mix` may
overlap packages; here each window of the history is one fault's). Which
entry plays next is drawn from `faults` (repeat an entry to weight it) with a
Random seeded from the test seed alone, so one seed gives one sequence of
faults however the faults themselves go; with `order="cycle"` the entries
are played in the order given, over and over (a fixed sequence such as
"restart a mirror, then kill the master"). With no faults the schedule is
healthy periods of the options' `interval_s` only.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Literal

from nemesis.options import AUTO_DURATION_S, NemesisOptions


@dataclass(frozen=True)
class Step:
    """One period of the schedule: healthy, or a named fault, for some seconds; in a schedule
    played once, also when it ends (`end_s`, seconds from the schedule's start)."""

    kind: Literal["healthy", "fault"]
    seconds: float
    fault: str | None = None
    end_s: float | None = None


def schedule_rng(seed: int | str) -> random.Random:
    """Takes the test seed. Returns the Random that draws the schedule's faults."""
    return random.Random(f"{seed}:schedule")


def fault_rng(seed: int | str) -> random.Random:
    """Takes the test seed. Returns the Random faults use to pick nodes and shapes."""
    return random.Random(f"{seed}:faults")


def schedule(options: NemesisOptions, rng: random.Random) -> Iterator[Step]:
    """Takes (validated) options and a Random. Yields healthy and fault steps, alternating,
    forever: before each fault, its entry's interval; the fault, for its entry's duration.

    With no faults, yields only healthy steps. With order "once", yields the explicit
    schedule's steps (`once`) and ends.
    """
    if options.order == "once":
        yield from once(options)
        return
    resolved = {entry: options.resolve(entry) for entry in dict.fromkeys(options.faults)}
    k = 0
    while True:
        if not options.faults:
            yield Step("healthy", options.interval_s)
            continue
        if options.order == "cycle":
            entry = options.faults[k % len(options.faults)]
            k += 1
        else:
            entry = rng.choice(options.faults)
        own = resolved[entry]
        yield Step("healthy", own.interval_s)
        yield Step("fault", AUTO_DURATION_S if own.duration_s is None else own.duration_s, entry)


def once(options: NemesisOptions) -> Iterator[Step]:
    """Takes options with an explicit schedule. Yields, for each item, the healthy step up to
    its start and its fault step, each with its `end_s`; nothing after the last."""
    end = 0.0
    for start, entry, duration in options.schedule:
        yield Step("healthy", max(0.0, start - end), None, start)
        end = start + duration
        yield Step("fault", duration, entry, end)


def plan(options: NemesisOptions, seed: int | str, count: int) -> list[Step]:
    """Takes options, the test seed and a count. Returns the schedule's first `count` steps
    (fewer when it ends first: a schedule played once)."""
    return list(islice(schedule(options, schedule_rng(seed)), count))
