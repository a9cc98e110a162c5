"""The explorer's search space: configurations, workload shapes and fault schedules, written once.

A candidate is a whole test: the queue kind, partition handling and client
mode (`--stay`: whether publishers and consumers stay through faults; each when
the space lets it vary), the workload's shape (backlog, publishers, consumers,
consume rate, prefetch, publisher window, rate) and an explicit schedule of 1
to `max_faults` faults played once (harness.scenario_file's
`[[nemesis.schedule]]`). Each scheduled fault is an entry NAME[@TARGET] from
the space's menu, lasting a *band* of multiples of net_ticktime (RabbitMQ
notices a silent peer after 0.75-1.25 x net_ticktime; `BANDS`: below it on
purpose, at its edge, above, long), after a *gap* since the previous fault's
heal (`GAPS`: back to back, while the cluster is still recovering, settled).
The interpreter plays one fault at a time, so overlapping faults are not in
the space; back to back (a gap under a tenth of a tick) is its nearest: the
next fault lands while the brokers still act on the last heal.

How it is drawn, and why so. Hypothesis draws a strategy only inside a test it
runs: `.example()` is not seedable (and warns outside tests), `find` shrinks
towards the simplest value, and a `@given` run cannot wait minutes for a
cluster between draws and let their results steer the next. So the space is
one function, `build(draw, base, space)`, whose every choice is a `Dim`
(`Pick`, `Whole`, `Real`), and a Dim is both a Hypothesis strategy
(`strategy()`) and a seeded draw (`sample(rng)`) over the same values.
`candidates(base, space)` is the Hypothesis strategy (st.composite over
`build`): the tests run it to show that every draw anywhere in the space,
edges included, makes a spec that validates. `draw_candidate(base, space,
rng)` is the explorer's: the same function over a random.Random seeded from
the recorded explore seed and the candidate's number, so a seed gives the
same candidates again. No Hypothesis internals are used.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from clusters.registry import backend
from clusters.releases import release
from harness.spec import SpecError, TestSpec
from harness.vary import rekinded
from nemesis.errors import NemesisConfigError
from nemesis.faults import fault_info
from nemesis.options import NemesisOptions
from nemesis.targets import leaves_a_majority, validate_targets
from workloads.kinds import KINDS
from workloads.queue_workload import STAYS

SEED_RANGE = 2**31
# Fault durations, as multiples of net_ticktime: (low, high). RabbitMQ declares a silent peer
# down after 0.75-1.25 x net_ticktime, so "below" heals before it can (weak on purpose: does
# anything happen anyway?), "edge" races the detector, "above" and "long" give it time to act.
BANDS: Mapping[str, tuple[float, float]] = {
    "below": (0.3, 0.7), "edge": (0.75, 1.25), "above": (1.5, 2.5), "long": (3.0, 4.0)}
# Healthy time before a fault, after the previous one's heal, as multiples of net_ticktime.
GAPS: Mapping[str, tuple[float, float]] = {
    "back-to-back": (0.0, 0.1), "recovering": (0.2, 1.0), "settled": (2.0, 3.0)}
LEAD = (0.5, 1.5)  # before the first fault (x net_ticktime), at least MIN_LEAD_S
TAIL = (1.0, 2.0)  # after the last heal, inside the main phase: late detections, recovery
MIN_LEAD_S = 3.0
MIN_TAIL_S = 10.0
MIN_FAULT_S = 1.0
DEFAULT_FAULTS: tuple[str, ...] = (
    "partition-one", "partition-leader", "partition-random-halves", "partition-majorities-ring",
    "partition-bridge", "kill", "stop", "pause", "packet-loss", "rolling-restart",
    "full-restart",
    # RabbitMQ's own operations (nemesis/faults/operations.py); the first two quorum queues only
    "leader-transfer", "member-remove", "maintenance", "memory-alarm", "disk-alarm")
DEFAULT_TARGETS: tuple[str, ...] = ("leader", "follower", "followers", "minority", "one")
# Selectors that need a replica besides the leader (a classic queue has none).
REPLICA_TARGETS = frozenset({"follower", "followers"})


# -- dimensions: one choice, two drivers ----------------------------------------------------------

@dataclass(frozen=True)
class Pick:
    """One of `values`."""

    values: tuple[Any, ...]

    def strategy(self) -> st.SearchStrategy[Any]:
        """Returns the Hypothesis strategy of this choice."""
        return st.sampled_from(self.values)

    def sample(self, rng: random.Random) -> Any:
        """Takes a Random. Returns one value, drawn from it."""
        return self.values[rng.randrange(len(self.values))]


@dataclass(frozen=True)
class Whole:
    """A whole number in [lo, hi]."""

    lo: int
    hi: int

    def strategy(self) -> st.SearchStrategy[int]:
        """Returns the Hypothesis strategy of this choice."""
        return st.integers(self.lo, self.hi)

    def sample(self, rng: random.Random) -> int:
        """Takes a Random. Returns one value, drawn from it."""
        return rng.randint(self.lo, self.hi)


@dataclass(frozen=True)
class Real:
    """A number in [lo, hi] on a grid of `step` (both drivers see the same finite values)."""

    lo: float
    hi: float
    step: float = 0.05

    def _at(self, k: int) -> float:
        return round(self.lo + k * self.step, 4)

    def _steps(self) -> int:
        return max(0, round((self.hi - self.lo) / self.step))

    def strategy(self) -> st.SearchStrategy[float]:
        """Returns the Hypothesis strategy of this choice."""
        return st.integers(0, self._steps()).map(self._at)

    def sample(self, rng: random.Random) -> float:
        """Takes a Random. Returns one value, drawn from it."""
        return self._at(rng.randint(0, self._steps()))


Dim = Pick | Whole | Real
Draw = Callable[[Dim], Any]


# -- the space --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Space:
    """What the explorer may vary: fault names and targets, at most `max_faults` faults a
    schedule, queue kinds and partition handlings (empty: the base spec's), and whether the
    workload's shape varies (`workload`). `also_kinds`: queue kinds the candidates must suit
    too without drawing them (those `--vary queue.type` puts them on)."""

    faults: tuple[str, ...] = DEFAULT_FAULTS
    targets: tuple[str, ...] = DEFAULT_TARGETS
    max_faults: int = 3
    queue_types: tuple[str, ...] = ()
    partition_handlings: tuple[str | None, ...] = ()
    workload: bool = True
    backlogs: tuple[int, ...] = (0, 500, 2000, 8000)
    consume_rates: tuple[float | None, ...] = (None, 25.0, 50.0, 150.0)
    prefetches: tuple[int, ...] = (1, 10, 100, 1000)
    windows: tuple[int, ...] = (1, 8, 64)
    rates: tuple[float, ...] = (100.0, 200.0, 400.0)
    also_kinds: tuple[str, ...] = ()
    # Set by `fitted`: the targets that leave a majority of the base's nodes untouched, the only
    # ones a fault that may hit a minority only (a disk corruption) is drawn with.
    minority_targets: tuple[str, ...] = ()
    # The client modes to draw (`--stay`: none, publishers, consumers, both; empty: the base's).
    stays: tuple[str, ...] = ()

    def fitted_stays(self, base: TestSpec) -> tuple[str, ...]:
        """Takes the base spec. Returns the client modes to draw: those its workload can take
        (no staying consumers where the base's consumers crash by design, no staying
        publishers whose confirm deadline is shorter than the liveness bound), the base's own
        where none are given. Raises SpecError for an unknown mode or none left."""
        unknown = [m for m in self.stays if m not in STAYS]
        if unknown:
            raise SpecError(f"unknown client mode(s) {', '.join(unknown)}; known: "
                            f"{', '.join(STAYS)}")
        w = base.workload
        short = w.confirm_deadline_s < base.liveness_bound().bound_ns / 1e9
        taken = tuple(m for m in self.stays
                      if not (m in ("consumers", "both") and w.client.crash_after)
                      and not (m in ("publishers", "both") and short))
        if self.stays and not taken:
            raise SpecError(f"no client mode of {', '.join(self.stays)} suits the test: its "
                            "consumers crash by design, or its --confirm-deadline is shorter "
                            "than the liveness bound")
        return taken or (w.stay,)

    def fitted(self, base: TestSpec) -> Space:
        """Takes the base spec. Returns the space with what the base cluster cannot play left out
        (faults needing more nodes, faults for other queue kinds than every one the candidates
        may have, faults its backend cannot host (a power loss needs the unsynced layer,
        clusters.registry's `unsynced_fs`), kinds its release removed, replica targets when a kind has
        no replicas, prefetches below a kind's least) and the base's own kind and partition
        handling where none are given. Raises SpecError for an unknown name or nothing left."""
        kinds = self.queue_types or (base.queue.type,)
        unknown = [k for k in kinds if k not in KINDS]
        if unknown:
            raise SpecError(f"unknown queue kind(s) {', '.join(unknown)}; known: "
                            f"{', '.join(KINDS)}")
        line = release(base.broker.rabbitmq)
        kinds = tuple(k for k in kinds if not line.refuses_kind(k))
        every_kind = {*kinds, *self.also_kinds}
        try:
            faults = tuple(f for f in self.faults if fault_info(f).min_nodes <= base.nodes
                           and every_kind <= set(fault_info(f).queue_kinds or every_kind)
                           and base.backend.kind in (fault_info(f).backends
                                                     or (base.backend.kind,))
                           and (not fault_info(f).needs_unsynced_fs
                                or backend(base.backend.kind).unsynced_fs))
            for target in self.targets:
                validate_targets(target.replace("+", ","),
                                 [f"n{i}" for i in range(1, base.nodes + 1)])
        except NemesisConfigError as e:
            raise SpecError(str(e)) from e
        if not kinds or not faults or self.max_faults < 1:
            raise SpecError("the explore space is empty: no queue kind the release runs, no "
                            "fault the cluster and every queue kind can play, or --max-faults "
                            "below 1")
        suited = [KINDS[k] for k in (*kinds, *self.also_kinds) if k in KINDS]
        replicated = all(k.replicated for k in suited)
        targets = tuple(t for t in self.targets if replicated or t not in REPLICA_TARGETS)
        few = tuple(t for t in targets or ("one",)
                    if leaves_a_majority(t.replace("+", ","), base.nodes))
        faults = tuple(f for f in faults if few or not fault_info(f).minority_only)
        least = max(k.min_prefetch for k in suited)
        handlings = self.partition_handlings or (base.broker.handling,)
        refused = [why for h in handlings if (why := line.partition_handling_refusal(h))]
        if refused:
            raise SpecError(refused[0])
        return dataclasses.replace(
            self, faults=faults, targets=targets or ("one",), queue_types=kinds,
            minority_targets=few, stays=self.fitted_stays(base),
            partition_handlings=handlings,
            prefetches=tuple(p for p in self.prefetches if p >= least) or (max(least, 1),))


@dataclass(frozen=True)
class Item:
    """One scheduled fault and where it sits in the space: its entry, start and duration (s),
    the band its duration came from and the gap before it ("lead" for the first)."""

    start_s: float
    entry: str
    duration_s: float
    band: str
    gap: str

    @property
    def fault(self) -> str:
        """Returns the fault's name."""
        return self.entry.split(":", 1)[0].split("@", 1)[0]

    @property
    def target(self) -> str:
        """Returns the entry's own target selector, "-" for a fault that picks its own nodes."""
        head = self.entry.split(":", 1)[0]
        return head.split("@", 1)[1] if "@" in head else "-"


@dataclass(frozen=True)
class Candidate:
    """A drawn test: its spec (schedule played once, seed set), its scheduled faults as
    `Item`s, and the configuration drawn (("queue.type", "quorum"), ...)."""

    spec: TestSpec
    items: tuple[Item, ...]
    config: tuple[tuple[str, str], ...] = ()

    def arms(self) -> list[tuple[str, str]]:
        """Returns the features the guide scores (harness.explore): each fault's name, target,
        duration band and gap, and each configuration choice."""
        out: list[tuple[str, str]] = []
        for item in self.items:
            out += [("fault", item.fault), ("target", item.target), ("band", item.band),
                    ("gap", item.gap)]
        return out + list(self.config)


# Settings a fault entry draws for itself (a fault's own options, nemesis.faults).
ENTRY_SETTINGS: Mapping[str, tuple[tuple[str, Dim], ...]] = {
    "packet-loss": (("packet_loss", Pick((0.3, 0.6, 0.9))),),
    "disk-corrupt": (("corrupt_mode", Pick(("bitflip", "truncate"))),),
}


def _entry(draw: Draw, space: Space) -> str:
    """Returns a fault entry drawn from the menu: NAME[@TARGET][:OPTION=VALUE]..."""
    name = draw(Pick(space.faults))
    info = fault_info(name)
    targets = space.minority_targets if info.minority_only else space.targets
    text = f"{name}@{draw(Pick(targets))}" if info.takes_targets else name
    for option, dim in ENTRY_SETTINGS.get(name, ()):
        text += f":{option}={draw(dim)}"
    return text


def _seconds(draw: Draw, bounds: tuple[float, float], tick: float, least: float) -> float:
    """Returns a time drawn as a multiple of net_ticktime within bounds, at least `least`."""
    return round(max(least, draw(Real(*bounds)) * tick), 1)


def _schedule(draw: Draw, space: Space, tick: float) -> tuple[tuple[Item, ...], float]:
    """Returns the scheduled faults and the main phase's length (the last heal plus a tail)."""
    items: list[Item] = []
    end = 0.0
    for i in range(draw(Whole(1, space.max_faults))):
        gap = "lead" if i == 0 else draw(Pick(tuple(GAPS)))
        wait = (_seconds(draw, LEAD, tick, MIN_LEAD_S) if i == 0
                else _seconds(draw, GAPS[gap], tick, 0.0))
        band = draw(Pick(tuple(BANDS)))
        duration = _seconds(draw, BANDS[band], tick, MIN_FAULT_S)
        start = round(end + wait, 1)
        items.append(Item(start, _entry(draw, space), duration, band, gap))
        end = start + duration
    return tuple(items), round(end + _seconds(draw, TAIL, tick, MIN_TAIL_S), 1)


def _workload(draw: Draw, base: TestSpec, space: Space) -> Any:
    """Returns the base's workload options with a drawn shape (the base's when the space keeps
    it fixed)."""
    w = base.workload
    if not space.workload:
        return w
    consumers = draw(Whole(0, 3))
    client = dataclasses.replace(w.client, prefetch=draw(Pick(space.prefetches)),
                                 window=draw(Pick(space.windows)))
    return dataclasses.replace(
        w, publishers=draw(Whole(1, 4)), consumers=consumers, rate=draw(Pick(space.rates)),
        backlog=draw(Pick(space.backlogs)),
        consume_rate=draw(Pick(space.consume_rates)) if consumers else None,
        pause_consumers_in_faults=bool(consumers) and draw(Pick((False, True))), client=client)


def build(draw: Draw, base: TestSpec, space: Space) -> Candidate:
    """Takes a draw (a Dim -> a value), the base spec and a fitted space (`Space.fitted`).
    Returns a candidate: the base with a drawn configuration, workload shape and schedule,
    named explore-<queue kind>, its seed drawn too (module docstring)."""
    kind = draw(Pick(space.queue_types))
    handling = draw(Pick(space.partition_handlings))
    items, limit = _schedule(draw, space, float(base.broker.net_ticktime))
    keep = {f.name: getattr(base.nemesis, f.name) for f in dataclasses.fields(NemesisOptions)
            if f.name not in ("faults", "order", "schedule")}
    nemesis = NemesisOptions.played_once([(i.start_s, i.entry, i.duration_s) for i in items],
                                         **keep)
    spec = dataclasses.replace(
        base, name=f"explore-{kind}", seed=draw(Whole(0, SEED_RANGE - 1)), time_limit_s=limit,
        broker=dataclasses.replace(base.broker, partition_handling=handling),
        queue=dataclasses.replace(base.queue, type=kind), workload=_workload(draw, base, space),
        nemesis=nemesis)
    # Drawn last, and only from a choice, so that a seed draws the candidates it drew before
    # the client mode was a dimension.
    stay = draw(Pick(space.stays)) if len(space.stays) > 1 else space.stays[0]
    spec = rekinded(base, dataclasses.replace(spec, workload=_staying(spec.workload, stay)))
    config = tuple((k, str(v)) for k, v, choices in (
        ("queue.type", kind, space.queue_types),
        ("broker.partition_handling", handling, space.partition_handlings),
        ("workload.stay", stay, space.stays)) if len(choices) > 1)
    return Candidate(spec, items, config)


def _staying(w: Any, stay: str) -> Any:
    """Takes workload options and a client mode. Returns the options with that mode; staying
    consumers are never paused in faults (a pause ends the subscription they keep)."""
    consumers_stay = stay in ("consumers", "both")
    return dataclasses.replace(w, stay=stay, pause_consumers_in_faults=(
        w.pause_consumers_in_faults and not consumers_stay))


def candidates(base: TestSpec, space: Space) -> st.SearchStrategy[Candidate]:
    """Takes the base spec and a space. Returns the Hypothesis strategy of its candidates."""
    fitted = space.fitted(base)

    @st.composite
    def strategy(data: st.DrawFn) -> Candidate:
        return build(lambda dim: data(dim.strategy()), base, fitted)

    return strategy()


def draw_candidate(base: TestSpec, space: Space, rng: random.Random) -> Candidate:
    """Takes the base spec, a space and a seeded Random. Returns the candidate it draws (the
    same Random state, the same candidate)."""
    return build(lambda dim: dim.sample(rng), base, space.fitted(base))


def candidate_rng(seed: int, number: int, slot: int = 0) -> random.Random:
    """Takes the explore seed, a step's number and a slot of its pool. Returns the Random that
    draws that candidate (independent of every other draw, so the record names it)."""
    return random.Random(f"{seed}:explore:{number}:{slot}")
