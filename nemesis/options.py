"""Nemesis options: which faults, how often, for how long, against which nodes, how hard.

`NemesisOptions` is a frozen dataclass (serialised into test.json with
`to_dict`, read back with `from_dict`); `validate` raises NemesisConfigError
for anything that cannot run. nemesis.schedule turns the options into the
periods the interpreter plays. An empty `faults` is a control run: the
nemesis only waits.

The options compose faults the way Jepsen's combined nemesis composes its
packages: each fault entry carries its own options, and the options' own
fields are the defaults of every entry that does not set them. An entry is
text (it is what test.json records and what `--nemesis` takes):

    NAME[@TARGETS][:KEY=VALUE]...

- `NAME`: a fault (nemesis.faults)
- `@TARGETS`: the nodes it acts on, for faults that take targets: a selector
  (`kill@leader`, `stop@follower`) or node names joined by `+` (`pause@n1+n3`)
- `:duration=S`, `:interval=S`: seconds the fault lasts, and healthy seconds
  before it (`kill@leader:duration=10:interval=20`)
- `:OPTION=VALUE`: one of the fault's own options, by its field name here
  (`packet-loss@n2:packet_loss=0.5`, `netem-delay:delay_ms=250:jitter_ms=0`)

`FaultEntry.parse` reads one, `resolve` gives the options an entry plays
with. An entry with no `@` and no option is a bare fault name, as before.

An explicit schedule, played once (`order="once"`, `schedule`): each item is
`(start_s, entry, duration_s)`, the fault entry started `start_s` seconds
into the main phase and stopped `duration_s` seconds after it was started,
rather than drawn from the seed; healthy before, between and after. The items
are in order of start and never overlap (one fault is in effect at a time, as
in the drawn schedules); an entry there carries no `duration=` or `interval=`
of its own (the item says when); `faults` is then the schedule's entries, each
once, in order of first play (`played_once` builds such options). Given the
main phase's length, `validate` refuses an item that would end past it by
more than the interpreter lets the phase's end cut a fault (`cut_allowance`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from nemesis.errors import NemesisConfigError, ScheduleError
from nemesis.faults import fault_info
from nemesis.targets import validate_targets

log = logging.getLogger(__name__)

PacketScope = Literal["peers", "all"]
CorruptMode = Literal["bitflip", "truncate"]
CORRUPT_MODES: tuple[str, ...] = ("bitflip", "truncate")
# The most bits a bitflip may be expected to flip (nemesis.faults.corrupt.MAX_FLIPS caps them).
MAX_EXPECTED_FLIPS = 4096
Order = Literal["random", "cycle", "once"]
ORDERS: tuple[str, ...] = ("random", "cycle", "once")
# One item of an explicit schedule: (start_s into the main phase, fault entry, duration_s).
ScheduledFault = tuple[float, str, float]
# How much two scheduled faults may overlap by rounding alone (a file keeps milliseconds).
OVERLAP_TOLERANCE_S = 1e-6
PACKET_SCOPES: tuple[str, ...] = ("peers", "all")
# A tbf bucket smaller than one full Ethernet frame would drop every large packet.
MIN_BURST_BYTES = 1600
# What a fault lasts when nothing says (duration_s None) and no spec has set it from the
# cluster's net_ticktime: twice the harness's default net_ticktime (10 s), past its
# 7.5-12.5 s detection of a silent peer.
AUTO_DURATION_S = 20.0
# The keys every fault entry takes, and the option each sets.
TIMING_KEYS: Mapping[str, str] = {"duration": "duration_s", "interval": "interval_s"}


@dataclass(frozen=True)
class NemesisOptions:
    """Which faults, how often, for how long, against which nodes, and how hard.

    - faults: fault entries (see the module's docstring): a fault name (see nemesis.faults)
      with optional targets and options of its own ("kill@leader:duration=10"); empty for none
    - order: "random" (each fault drawn at random), "cycle" (in the order given, repeated) or
      "once" (the explicit `schedule`, played once)
    - schedule: with order "once", (start_s, fault entry, duration_s) items: each fault's start
      in seconds into the main phase and how long it lasts (the module's docstring); else empty
    - interval_s: healthy seconds before each fault; duration_s: seconds each fault lasts,
      None for "long enough for RabbitMQ to notice it": the test spec sets it from the
      cluster's failure-detection time (harness.spec: 2 x net_ticktime); a nemesis used
      without a spec plays AUTO_DURATION_S
    - targets: target spec for faults that pick nodes (see nemesis.targets)
    - packet_loss: probability a packet is dropped, per direction; packet_scope:
      "peers" (cluster traffic only) or "all" (everything on the interface, clients too)
    - bandwidth_kbit, bandwidth_burst_bytes, bandwidth_latency_ms: the tbf limit
    - delay_ms, jitter_ms: netem delay; duplicate_pct, reorder_pct: netem shares in %
    - corrupt_mode: how disk-corrupt damages a queue file: "bitflip" (bits of a chunk flipped,
      each with corrupt_probability, at least one) or "truncate" (its last corrupt_bytes cut);
      corrupt_bytes: the chunk's size
    - command_timeout_s: hard timeout of each iptables/tc command
    - heal_wait_s: how long heal waits for a fault action in flight before healing anyway

    Every field but faults, order, schedule and heal_wait_s is a default an entry may override.
    """

    faults: tuple[str, ...] = ("partition-random-halves",)
    order: Order = "random"
    interval_s: float = 10.0
    duration_s: float | None = None
    targets: str = "one"
    packet_loss: float = 0.2
    packet_scope: PacketScope = "peers"
    bandwidth_kbit: int = 1024
    bandwidth_burst_bytes: int = 32768
    bandwidth_latency_ms: int = 400
    delay_ms: float = 100.0
    jitter_ms: float = 20.0
    duplicate_pct: float = 5.0
    reorder_pct: float = 25.0
    corrupt_mode: CorruptMode = "bitflip"
    corrupt_bytes: int = 4096
    corrupt_probability: float = 0.001
    command_timeout_s: float = 5.0
    heal_wait_s: float = 120.0
    schedule: tuple[ScheduledFault, ...] = ()

    @staticmethod
    def played_once(schedule: Sequence[ScheduledFault], **options: Any) -> NemesisOptions:
        """Takes (start_s, fault entry, duration_s) items and any other options. Returns options
        that play them once (order "once", `faults` the items' entries), not yet validated."""
        items = tuple((start, entry, duration) for start, entry, duration in schedule)
        return NemesisOptions(faults=tuple(dict.fromkeys(e for _s, e, _d in items)),
                              order="once", schedule=items, **options)

    def drawn(self) -> NemesisOptions:
        """Returns these options drawing their faults from the seed (order "random") rather than
        playing a schedule once: what faults or an order given over a schedule ask for. Options
        that play no schedule are returned as they are."""
        if self.order != "once":
            return self
        return dataclasses.replace(self, order="random", schedule=())

    def validate(self, nodes: Sequence[str] | None = None,
                 time_limit_s: float | None = None) -> NemesisOptions:
        """Takes, when known, the cluster's node names and the main phase's length. Returns self.

        Raises NemesisConfigError for an unknown fault (listing the known
        ones), a malformed entry, a negative or non-finite time, an
        out-of-range setting (the defaults' or an entry's own), a bad
        explicit schedule (`check_schedule`), and, given the nodes, target
        names not in the cluster or a fault needing more nodes than there are.
        """
        if isinstance(self.faults, str) or not isinstance(self.faults, tuple):
            raise NemesisConfigError(f"faults must be a tuple of fault names, got {self.faults!r}")
        self.check_schedule(time_limit_s, nodes)  # first: its errors say which item is wrong
        entries = [FaultEntry.parse(e) for e in dict.fromkeys(self.faults)]
        for entry in entries:
            if entry.targets is not None:
                validate_targets(entry.targets, nodes)
        if self.order not in ORDERS:
            raise NemesisConfigError(f"order must be one of {', '.join(ORDERS)}, got {self.order!r}")
        self._check_values()
        validate_targets(self.targets, nodes)
        for entry in entries:
            try:
                self.resolve(entry)._check_values(entry.fault)
            except NemesisConfigError as e:
                raise NemesisConfigError(
                    e.args[0] if not entry.settings else f"fault entry {entry.text!r}: {e}"
                ) from None
        if nodes is not None:
            for entry in entries:
                info = fault_info(entry.fault)
                if len(nodes) < info.min_nodes:
                    raise NemesisConfigError(
                        f"fault {info.name!r} needs at least {info.min_nodes} "
                        f"nodes; the cluster has {len(nodes)}"
                    )
        return self

    def check_schedule(self, time_limit_s: float | None = None,
                       nodes: Sequence[str] | None = None) -> None:
        """Takes, when known, the main phase's length and the cluster's node names. Returns None
        when the explicit schedule can be played: order "once" and a schedule go together; each
        item is (start >= 0, a fault entry without timing of its own whose targets and settings
        fit the cluster, duration > 0); the items are in order and do not overlap; none ends past
        the time limit by more than `cut_allowance`; `faults` is the schedule's entries.

        Raises ScheduleError (a NemesisConfigError) saying which item (`index`, from 0) is wrong
        and why.
        """
        if not isinstance(self.schedule, tuple):
            raise ScheduleError(f"schedule must be a tuple of (start_s, entry, duration_s) items, "
                                f"got {self.schedule!r}")
        if self.order != "once":
            if self.schedule:
                raise ScheduleError(f"a schedule is played with order 'once', not "
                                    f"{self.order!r}")
            return
        self._check_values()
        end = 0.0
        previous = ""
        for i, item in enumerate(self.schedule):
            start, entry, duration = _item(i, item)
            where = f"scheduled fault {i + 1} ({entry})"
            parsed = FaultEntry.parse(entry)
            timing = [k for k, f in TIMING_KEYS.items() if f in dict(parsed.settings)]
            if timing:
                raise ScheduleError(f"{where}: a scheduled fault's start_s and duration_s say "
                                    f"when it plays; its entry takes no {', '.join(timing)}", i)
            try:
                self._check_entry(parsed, nodes)
            except NemesisConfigError as e:
                raise ScheduleError(f"{where}: {e}", i) from None
            if start + OVERLAP_TOLERANCE_S < end:
                raise ScheduleError(
                    f"{where} starts at {start:g} s, before scheduled fault {i} ({previous}) "
                    f"ends at {end:g} s: faults play one at a time, in order of start", i)
            end, previous = start + duration, entry
            if time_limit_s is not None and end - cut_allowance(duration) > time_limit_s:
                raise ScheduleError(
                    f"{where} ends at {end:g} s, past the main phase's {time_limit_s:g} s: the "
                    f"nemesis would not play it (a fault may lose at most "
                    f"{cut_allowance(duration):g} s to the phase's end)", i)
        derived = tuple(dict.fromkeys(entry for _s, entry, _d in self.schedule))
        if self.faults != derived:
            raise ScheduleError(f"with order 'once' the faults are the schedule's entries "
                                f"({', '.join(derived) or 'none'}), not "
                                f"{', '.join(self.faults) or 'none'}")

    def _check_entry(self, entry: FaultEntry, nodes: Sequence[str] | None) -> None:
        """Raises NemesisConfigError when an entry's targets, its resolved settings or, given the
        nodes, the cluster's size do not fit it."""
        if entry.targets is not None:
            validate_targets(entry.targets, nodes)
        self.resolve(entry)._check_values(entry.fault)
        info = fault_info(entry.fault)
        if nodes is not None and len(nodes) < info.min_nodes:
            raise NemesisConfigError(f"fault {info.name!r} needs at least {info.min_nodes} "
                                     f"nodes; the cluster has {len(nodes)}")

    def timed_entries(self) -> tuple[tuple[FaultEntry, float | None], ...]:
        """Returns each fault entry to be played with how long it lasts, each pair once: the
        scheduled items' with order "once", else every entry's own duration (None: not set)."""
        if self.order == "once":
            return tuple(dict.fromkeys((FaultEntry.parse(e), float(d))
                                       for _s, e, d in self.schedule))
        return tuple((e, self.resolve(e).duration_s) for e in self.entries())

    def _check_values(self, fault: str | None = None) -> None:
        """Raises NemesisConfigError for a time or setting out of range; given a fault's name,
        also for a setting that fault cannot play with."""
        _non_negative("heal_wait_s", self.heal_wait_s)
        _positive("interval_s", self.interval_s)
        if self.duration_s is not None:
            _positive("duration_s", self.duration_s)
        _positive("command_timeout_s", self.command_timeout_s)
        if not 0 < self.packet_loss <= 1:
            raise NemesisConfigError(
                f"packet_loss is a probability in (0, 1], got {self.packet_loss!r}"
            )
        if self.packet_scope not in PACKET_SCOPES:
            raise NemesisConfigError(
                f"packet_scope must be one of {', '.join(PACKET_SCOPES)}, got {self.packet_scope!r}"
            )
        for name in ("bandwidth_kbit", "bandwidth_latency_ms"):
            _positive(name, getattr(self, name))
        if self.bandwidth_burst_bytes < MIN_BURST_BYTES:
            raise NemesisConfigError(
                f"bandwidth_burst_bytes must hold a full packet (>= {MIN_BURST_BYTES}), "
                f"got {self.bandwidth_burst_bytes!r}"
            )
        for name in ("delay_ms", "jitter_ms"):
            _non_negative(name, getattr(self, name))
        for name in ("duplicate_pct", "reorder_pct"):
            value = getattr(self, name)
            _non_negative(name, value)
            if value > 100:
                raise NemesisConfigError(f"{name} is a percentage, got {value!r}")
        self._check_corruption()
        if fault == "netem-reorder" and self.reorder_pct and not self.delay_ms:
            raise NemesisConfigError("netem-reorder needs delay_ms > 0 (netem reorders by delay)")

    def _check_corruption(self) -> None:
        """Raises NemesisConfigError for a disk corruption's setting out of range."""
        if self.corrupt_mode not in CORRUPT_MODES:
            raise NemesisConfigError(f"corrupt_mode must be one of {', '.join(CORRUPT_MODES)}, "
                                     f"got {self.corrupt_mode!r}")
        _positive("corrupt_bytes", self.corrupt_bytes)
        if not 0 < self.corrupt_probability <= 1:
            raise NemesisConfigError(f"corrupt_probability is a probability in (0, 1], got "
                                     f"{self.corrupt_probability!r}")
        expected = self.corrupt_bytes * 8 * self.corrupt_probability
        if self.corrupt_mode == "bitflip" and expected > MAX_EXPECTED_FLIPS:
            raise NemesisConfigError(
                f"corrupt_bytes x 8 x corrupt_probability is the bits a bitflip flips, each "
                f"recorded: at most {MAX_EXPECTED_FLIPS}, got {expected:g}")

    def entries(self) -> tuple[FaultEntry, ...]:
        """Returns the fault entries, parsed, each once, in order."""
        return tuple(FaultEntry.parse(e) for e in dict.fromkeys(self.faults))

    def resolve(self, entry: str | FaultEntry) -> NemesisOptions:
        """Takes a fault entry. Returns the options it plays with: its own targets and
        settings in place of these options' ones."""
        e = entry if isinstance(entry, FaultEntry) else FaultEntry.parse(entry)
        own: dict[str, Any] = dict(e.settings)
        if e.targets is not None:
            own["targets"] = e.targets
        return dataclasses.replace(self, **own) if own else self

    def needs_queue(self) -> tuple[str, ...]:
        """Returns what in these options asks where the queue leader is (empty when nothing)."""
        names = []
        for entry in self.entries():
            if fault_info(entry.fault).needs_queue or entry.targets in QUEUE_SELECTORS:
                names.append(entry.text)
        if self.targets in QUEUE_SELECTORS and self.faults:
            names.append(f"targets={self.targets}")
        return tuple(names)

    def fault_names(self) -> tuple[str, ...]:
        """Returns the fault names of the entries, without their targets, each once."""
        return tuple(dict.fromkeys(parse_entry(e)[0] for e in self.faults))

    def to_dict(self) -> dict[str, Any]:
        """Returns the options as JSON-able data (faults as a list)."""
        d = asdict(self)
        d["faults"] = list(self.faults)
        d["schedule"] = [list(item) for item in self.schedule]
        return d

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> NemesisOptions:
        """Takes options as data (e.g. from test.json). Returns them, validated without a cluster.

        Raises NemesisConfigError for unknown keys or bad values.
        """
        known = {f.name for f in fields(NemesisOptions)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise NemesisConfigError(
                f"unknown nemesis option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        data = dict(d)
        if "faults" in data and isinstance(data["faults"], list):
            data["faults"] = tuple(data["faults"])
        if "schedule" in data and isinstance(data["schedule"], list):
            data["schedule"] = tuple(tuple(x) if isinstance(x, list) else x
                                     for x in data["schedule"])
        return NemesisOptions(**data).validate()


# Target selectors that ask the broker where the queue lives.
QUEUE_SELECTORS: frozenset[str] = frozenset({"leader", "follower", "followers"})
# Each option an entry may set, and the type its text is read as.
_TYPES: Mapping[str, type] = {
    f.name: float if f.name == "duration_s" else type(f.default)
    for f in fields(NemesisOptions) if f.name not in ("faults", "order", "schedule")
}


def cut_allowance(seconds: float) -> float:
    """Takes a fault's duration. Returns by how much the main phase's end may cut it: 5% or a
    second, whichever is more (a scenario of 10 s healthy, 20 s faulty, twice, in 60 s plays both
    faults although the nemesis's own steps take a few hundred ms)."""
    return max(1.0, 0.05 * seconds)


def _item(i: int, item: Any) -> ScheduledFault:
    """Returns a schedule item checked: (start_s >= 0, entry text, duration_s > 0)."""
    if not isinstance(item, tuple) or len(item) != 3:
        raise ScheduleError(f"scheduled fault {i + 1} must be (start_s, entry, duration_s), "
                            f"got {item!r}", i)
    start, entry, duration = item
    if not isinstance(entry, str):
        raise ScheduleError(f"scheduled fault {i + 1}: its fault is an entry like kill@n2, got "
                            f"{entry!r}", i)
    try:
        _non_negative("start_s", start)
        _positive("duration_s", duration)
        FaultEntry.parse(entry)
    except NemesisConfigError as e:
        raise ScheduleError(f"scheduled fault {i + 1} ({entry}): {e}", i) from None
    return float(start), entry, float(duration)


@dataclass(frozen=True)
class FaultEntry:
    """One fault of the options with its own options: `kill@leader:duration=10:interval=20`.

    `targets` is its own target spec (node names joined by commas), None for the options'
    `targets`; `settings` are (NemesisOptions field, value) pairs it sets for itself alone;
    `text` is the entry as written.
    """

    text: str
    fault: str
    targets: str | None = None
    settings: tuple[tuple[str, Any], ...] = ()

    @staticmethod
    def parse(text: str) -> FaultEntry:
        """Takes an entry such as "kill", "kill@leader", "pause@n1+n3" or
        "kill@leader:duration=10:interval=20". Returns it parsed.

        Raises NemesisConfigError for an unknown fault, targets given to a fault that picks its
        own nodes, an option the fault does not take (naming those it does), a repeated option,
        or a value that is not of the option's type.
        """
        if not isinstance(text, str):
            raise NemesisConfigError(f"a fault entry is text like kill@leader, got {text!r}")
        head, *parts = text.split(":")
        name, targets = parse_entry(head)
        info = fault_info(name.strip())
        if targets is not None and not info.takes_targets:
            raise NemesisConfigError(
                f"fault entry {text!r}: {info.name} picks its own nodes and takes no targets")
        keys = {**TIMING_KEYS, **{o: o for o in info.options}}
        settings: dict[str, Any] = {}
        for part in parts:
            key, sep, value = (x.strip() for x in part.partition("="))
            if not sep or not key or not value:
                raise NemesisConfigError(
                    f"fault entry {text!r}: {part!r} is not KEY=VALUE (e.g. duration=10)")
            field = keys.get(key)
            if field is None:
                raise NemesisConfigError(
                    f"fault entry {text!r}: {info.name} takes no option {key!r}; "
                    f"it takes {', '.join(keys)}")
            if field in settings:
                raise NemesisConfigError(f"fault entry {text!r}: {key} is given twice")
            settings[field] = _value(text, key, value, _TYPES[field])
        return FaultEntry(text, info.name, targets, tuple(settings.items()))


def _value(entry: str, key: str, text: str, kind: type) -> Any:
    if kind is str:
        return text
    try:
        value = kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise NemesisConfigError(
            f"fault entry {entry!r}: {key} must be {what}, got {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise NemesisConfigError(f"fault entry {entry!r}: {key} must be a finite number")
    return value


def parse_entry(entry: str) -> tuple[str, str | None]:
    """Takes a fault entry such as "kill", "kill@leader" or "pause@n1+n3:duration=5". Returns
    (fault name, its own target spec or None); its options are left aside."""
    name, sep, targets = entry.split(":", 1)[0].partition("@")
    return name, (targets.replace("+", ",") if sep else None)


def _non_negative(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise NemesisConfigError(f"{name} must be a finite number, got {value!r}")
    if value < 0:
        raise NemesisConfigError(f"{name} must be >= 0, got {value!r}")


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise NemesisConfigError(f"{name} must be a finite number, got {value!r}")
    if value <= 0:
        raise NemesisConfigError(f"{name} must be > 0, got {value!r}")
