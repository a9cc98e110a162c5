"""What the harness's own cancels and closes mean for the ordering check: when a cancelled
consumer still held messages, and how near a delivery is to a phase boundary.

RabbitMQ (AMQP 0-9-1) keeps a consumer's unacknowledged deliveries until its
channel closes (or its connection is lost), even after the consumer is
cancelled, and a single active consumer's cancel activates the next consumer
at once. So between a consumer's cancel and its channel's close the next
consumer may be fed later messages, and the held one comes back (flagged
redelivered) only after them. That order is the harness's doing (it cancels
every consumer it stops, checkers.model's consumer ends), not a broker's
broken promise.

A consumer's *hold window* runs from its cancel, the first of its cancel ops
that is an invoke (the harness's basic.cancel) or an ok (a cancel the broker
sent), to the end of its channel, the first of its close ops that is not an
invoke (the close's outcome, or a channel or connection seen closed), both
by history index and exclusive; without such a close op it runs to the end of
the history. Its end also admits a delivery recorded up to HOLD_SKEW_NS after
that close op's time: each client process records what it reads on its own
thread, so a delivery the broker sent before it took the close in (and before
the held message was back in the queue) may be recorded by another process
after the close's outcome was (quorum-sac-fifo on 4.3.6, seed 4005: 2.2 ms). A consumer whose channel had ended before its cancel has none,
nor one never cancelled. A message it *held* was delivered to it before its
cancel more often than it acked it (acks pair with deliveries first in, first
out; a history without any ack holds nothing, as every delivery counts as
acked). checkers.spark_order works out which messages were held and sets the
reorders they explain apart; this module is the pure part of it.

Phase boundaries: the harness's phase events (f "phase", start and end of
each phase) and its observation that it told the workers to stop (f
"stop-workers": the main phase's end op comes only once the workers and the
nemesis have finished, which may be a second later) are where the harness
starts and stops clients, so a finding clustered at one is suspect;
`nearest_boundary` says how far a delivery is from the nearest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from checkers.model import CANCEL, CLOSE, OUTCOME_CODES, PHASE, STOP_WORKERS, ns_to_ms
from checkers.phases import HarnessEvent, phase_of

# A violation whose later delivery lies this close to a phase boundary counts as near it.
NEAR_BOUNDARY_NS: Final = 1_000_000_000
# How much later than a cancelled consumer's close another client process may record a delivery
# the broker sent before that close (the module docstring): the clients' recording skew. Seen:
# 2.2 ms; 50 ms leaves room for a loaded machine's thread scheduling, and is far below the
# seconds a broker's reorder would stand out by.
HOLD_SKEW_NS: Final = 50_000_000

INVOKE, OK = OUTCOME_CODES["invoke"], OUTCOME_CODES["ok"]


@dataclass(frozen=True)
class HoldWindow:
    """A cancelled consumer (process, tag) and its hold window: from its cancel's index to its
    channel's end's index (None: not in the history), both exclusive, and that end's time (ns;
    None with it), which a delivery recorded up to HOLD_SKEW_NS later is still inside."""

    pid: int
    tag: str
    start: int
    end: int | None
    end_time: int | None = None


def hold_windows(ends: Iterable[tuple[int, str, str, int, int, int]]) -> list[HoldWindow]:
    """Takes consumer ends as (process, consumer tag, f, outcome code, index, time), in any
    order. Returns the hold window of each cancelled consumer whose channel had not ended before
    its cancel (the module docstring), by process and tag."""
    start: dict[tuple[int, str], int] = {}
    closed: dict[tuple[int, str], tuple[int, int]] = {}
    for pid, tag, f, code, index, time in ends:
        key = (pid, tag)
        if f == CANCEL and code in (INVOKE, OK):
            start[key] = min(start.get(key, index), index)
        elif f == CLOSE and code != INVOKE:
            closed[key] = min(closed.get(key, (index, time)), (index, time))
    out = []
    for key, s in sorted(start.items()):
        e, t = closed.get(key, (None, None))
        if e is None or e > s:
            out.append(HoldWindow(key[0], key[1], s, e, t))
    return out


@dataclass(frozen=True)
class Boundary:
    """A phase boundary: the harness's event `f` (PHASE or STOP_WORKERS) at `time` (ns), the
    phase it names and, for a phase event, its state."""

    time: int
    f: str
    phase: Any
    state: Any


def boundaries(events: Iterable[HarnessEvent]) -> list[Boundary]:
    """Takes harness events in history order. Returns the phase boundaries among them (phase
    events, and the workers told to stop), in order."""
    out = []
    for e in events:
        ph = phase_of(e)
        if ph is not None:
            out.append(Boundary(e.time, PHASE, ph[0], ph[1]))
        elif e.f == STOP_WORKERS:
            phase = e.value.get("phase") if isinstance(e.value, dict) else None
            out.append(Boundary(e.time, STOP_WORKERS, phase, None))
    return out


def nearest_boundary(time: int, bounds: Sequence[Boundary]) -> dict[str, Any] | None:
    """Takes a time (ns) and the phase boundaries in history order. Returns the nearest one as
    {"f", "phase", "state", "ms"}, `ms` the time's signed distance from it (negative: before
    it; of equals, the first boundary), or None without boundaries."""
    if not bounds:
        return None
    b = min(bounds, key=lambda b: abs(time - b.time))
    return {"f": b.f, "phase": b.phase, "state": b.state, "ms": ns_to_ms(time - b.time)}
