"""Message priorities: the distribution publishers draw each message's priority from.

A distribution is text, as the spec, test.json and a scenario file keep it
(`workload.priorities`): comma-separated entries `VALUE[:WEIGHT]`, where
VALUE is a priority (AMQP's 0-255) or `none` (the message is published
without the priority property) and WEIGHT a positive number (default 1).
"0,9" draws 0 or 9 alike; "none:2,1,9" draws no priority half the time.
`parse` reads it (raising PriorityError, a ValueError, at the boundary),
`levels` says which numbers it uses, so that the release line can refuse
those its quorum queues do not have (clusters.releases.Release
.refuses_priorities), and `PriorityDraw` draws from it, seeded.
"""

from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import dataclass

from workloads.errors import WorkloadError

NONE = "none"
# AMQP 0-9-1's priority property is an octet.
MAX_PRIORITY = 255


class PriorityError(WorkloadError, ValueError):
    """A priority distribution that cannot be read."""


@dataclass(frozen=True)
class Choice:
    """One entry of a distribution: a priority (None: no priority property) and its weight."""

    priority: int | None
    weight: float


def parse(text: str) -> tuple[Choice, ...]:
    """Takes a distribution's text ("none:2,1,9"). Returns its entries, in order. Raises
    PriorityError for an empty text, a value that is neither `none` nor 0-255, a weight that is
    not a positive number, or a value given twice."""
    entries = [e.strip() for e in text.split(",")]
    if not text.strip() or any(not e for e in entries):
        raise PriorityError(f"priorities {text!r}: expected VALUE[:WEIGHT],... with VALUE 0-"
                            f"{MAX_PRIORITY} or {NONE}")
    out: list[Choice] = []
    for entry in entries:
        value, _, weight = entry.partition(":")
        out.append(Choice(_priority(value.strip(), text), _weight(weight.strip(), entry)))
    seen = [c.priority for c in out]
    twice = sorted({NONE if p is None else str(p) for p in seen if seen.count(p) > 1})
    if twice:
        raise PriorityError(f"priorities {text!r}: {', '.join(twice)} given more than once")
    return tuple(out)


def _priority(value: str, text: str) -> int | None:
    if value == NONE:
        return None
    if not value.isdigit() or int(value) > MAX_PRIORITY:
        raise PriorityError(f"priorities {text!r}: {value!r} is not a priority (0-"
                            f"{MAX_PRIORITY}, or {NONE} for a message without one)")
    return int(value)


def _weight(weight: str, entry: str) -> float:
    if not weight:
        return 1.0
    try:
        w = float(weight)
    except ValueError:
        w = float("nan")
    if not w > 0 or w == float("inf"):
        raise PriorityError(f"priority entry {entry!r}: the weight must be a positive number")
    return w


def levels(text: str | None) -> list[int]:
    """Takes a distribution's text (None: no priorities). Returns the priorities it draws, in
    ascending order (`none` is not one). Raises PriorityError."""
    if text is None:
        return []
    return sorted({c.priority for c in parse(text) if c.priority is not None})


class PriorityDraw:
    """Draws priorities from a distribution, with its own seeded generator (one per publisher,
    so that a seed replays each publisher's draws)."""

    def __init__(self, choices: tuple[Choice, ...], rng: random.Random) -> None:
        self._values = [c.priority for c in choices]
        self._cumulative = list(itertools.accumulate(c.weight for c in choices))
        self._rng = rng

    def __call__(self) -> int | None:
        """Returns the next message's priority (None: publish it without one)."""
        if len(self._values) == 1:
            return self._values[0]
        x = self._rng.random() * self._cumulative[-1]
        return self._values[min(bisect.bisect_right(self._cumulative, x),
                                len(self._values) - 1)]
