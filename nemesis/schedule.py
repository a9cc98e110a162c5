"""The schedule: the healthy and faulty periods the nemesis options make, from the test seed.

The schedule alternates a healthy period of `interval_s` and a fault period
of `duration_s`, starting healthy, like Jepsen's `(gen/stagger interval
(gen/flip-flop start stop))` with a fixed interval. Each fault is drawn from
`faults` (repeat a name to weight it) with a Random seeded from the test seed
alone, so one seed gives one sequence of faults however the faults
themselves go; with `order="cycle"` the faults are played in the order
given, over and over (a fixed sequence such as "restart a mirror, then kill
the master"). With no faults the schedule is healthy periods only.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from nemesis.options import NemesisOptions


@dataclass(frozen=True)
class Step:
    """One period of the schedule: healthy, or a named fault, for some seconds."""

    kind: Literal["healthy", "fault"]
    seconds: float
    fault: str | None = None


def schedule_rng(seed: int | str) -> random.Random:
    """Takes the test seed. Returns the Random that draws the schedule's faults."""
    return random.Random(f"{seed}:schedule")


def fault_rng(seed: int | str) -> random.Random:
    """Takes the test seed. Returns the Random faults use to pick nodes and shapes."""
    return random.Random(f"{seed}:faults")


def schedule(options: NemesisOptions, rng: random.Random) -> Iterator[Step]:
    """Takes options and a Random. Yields healthy and fault steps, alternating, forever.

    With no faults, yields only healthy steps.
    """
    k = 0
    while True:
        yield Step("healthy", options.interval_s)
        if options.faults:
            if options.order == "cycle":
                entry = options.faults[k % len(options.faults)]
                k += 1
            else:
                entry = rng.choice(options.faults)
            yield Step("fault", options.duration_s, entry)


def plan(options: NemesisOptions, seed: int | str, count: int) -> list[Step]:
    """Takes options, the test seed and a count. Returns the schedule's first `count` steps."""
    steps = schedule(options, schedule_rng(seed))
    return [next(steps) for _ in range(count)]
