"""Nemesis options: which faults, how often, for how long, against which nodes, how hard.

`NemesisOptions` is a frozen dataclass (serialised into test.json with
`to_dict`, read back with `from_dict`); `validate` raises NemesisConfigError
for anything that cannot run. nemesis.schedule turns the options into the
periods the interpreter plays. An empty `faults` is a control run: the
nemesis only waits.

A fault entry may name its own targets after an `@`: `kill@leader`,
`stop@follower`, `pause@n2` (several nodes joined by `+`: `kill@n1+n3`);
without one it takes the options' `targets`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from nemesis.errors import NemesisConfigError
from nemesis.faults import make_fault
from nemesis.targets import validate_targets

log = logging.getLogger(__name__)

PacketScope = Literal["peers", "all"]
Order = Literal["random", "cycle"]
ORDERS: tuple[str, ...] = ("random", "cycle")
PACKET_SCOPES: tuple[str, ...] = ("peers", "all")
# A tbf bucket smaller than one full Ethernet frame would drop every large packet.
MIN_BURST_BYTES = 1600


@dataclass(frozen=True)
class NemesisOptions:
    """Which faults, how often, for how long, against which nodes, and how hard.

    - faults: fault entries, a fault name (see nemesis.faults) with optional targets
      ("kill@leader"); empty for no faults
    - order: "random" (each fault drawn at random) or "cycle" (in the order given, repeated)
    - interval_s: healthy seconds before each fault; duration_s: seconds each fault lasts
    - targets: target spec for faults that pick nodes (see nemesis.targets)
    - packet_loss: probability a packet is dropped, per direction; packet_scope:
      "peers" (cluster traffic only) or "all" (everything on the interface, clients too)
    - bandwidth_kbit, bandwidth_burst_bytes, bandwidth_latency_ms: the tbf limit
    - delay_ms, jitter_ms: netem delay; duplicate_pct, reorder_pct: netem shares in %
    - command_timeout_s: hard timeout of each iptables/tc command
    - heal_wait_s: how long heal waits for a fault action in flight before healing anyway
    """

    faults: tuple[str, ...] = ("partition-random-halves",)
    order: Order = "random"
    interval_s: float = 10.0
    duration_s: float = 10.0
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
    command_timeout_s: float = 5.0
    heal_wait_s: float = 120.0

    def validate(self, nodes: Sequence[str] | None = None) -> NemesisOptions:
        """Takes, when known, the cluster's node names. Returns self.

        Raises NemesisConfigError for an unknown fault (listing the known
        ones), a negative or non-finite time, an out-of-range setting, and,
        given the nodes, target names not in the cluster or a fault needing
        more nodes than there are.
        """
        if isinstance(self.faults, str) or not isinstance(self.faults, tuple):
            raise NemesisConfigError(f"faults must be a tuple of fault names, got {self.faults!r}")
        faults = []
        for entry in dict.fromkeys(self.faults):
            name, targets = parse_entry(entry)
            faults.append(make_fault(name))
            if targets is not None:
                validate_targets(targets, nodes)
        if self.order not in ORDERS:
            raise NemesisConfigError(f"order must be one of {', '.join(ORDERS)}, got {self.order!r}")
        for name in ("interval_s", "duration_s", "heal_wait_s"):
            _non_negative(name, getattr(self, name))
        _positive("command_timeout_s", self.command_timeout_s)
        validate_targets(self.targets, nodes)
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
        if self.reorder_pct and not self.delay_ms and "netem-reorder" in self.fault_names():
            raise NemesisConfigError("netem-reorder needs delay_ms > 0 (netem reorders by delay)")
        if nodes is not None:
            for fault in faults:
                if len(nodes) < fault.info.min_nodes:
                    raise NemesisConfigError(
                        f"fault {fault.info.name!r} needs at least {fault.info.min_nodes} "
                        f"nodes; the cluster has {len(nodes)}"
                    )
        return self

    def needs_queue(self) -> tuple[str, ...]:
        """Returns what in these options asks where the queue leader is (empty when nothing)."""
        names = []
        for entry in dict.fromkeys(self.faults):
            name, targets = parse_entry(entry)
            if make_fault(name).info.needs_queue or targets in QUEUE_SELECTORS:
                names.append(entry)
        if self.targets in QUEUE_SELECTORS and self.faults:
            names.append(f"targets={self.targets}")
        return tuple(names)

    def fault_names(self) -> tuple[str, ...]:
        """Returns the fault names of the entries, without their targets, each once."""
        return tuple(dict.fromkeys(parse_entry(e)[0] for e in self.faults))

    def targets_of(self, entry: str) -> str:
        """Takes a fault entry. Returns the target spec it acts on."""
        return parse_entry(entry)[1] or self.targets

    def to_dict(self) -> dict[str, Any]:
        """Returns the options as JSON-able data (faults as a list)."""
        d = asdict(self)
        d["faults"] = list(self.faults)
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
        return NemesisOptions(**data).validate()


# Target selectors that ask the broker where the queue lives.
QUEUE_SELECTORS: frozenset[str] = frozenset({"leader", "follower", "followers"})


def parse_entry(entry: str) -> tuple[str, str | None]:
    """Takes a fault entry such as "kill" or "kill@leader" or "pause@n1+n3". Returns (fault
    name, its own target spec or None)."""
    name, sep, targets = entry.partition("@")
    return name, (targets.replace("+", ",") if sep else None)


def _non_negative(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise NemesisConfigError(f"{name} must be a finite number, got {value!r}")
    if value < 0:
        raise NemesisConfigError(f"{name} must be >= 0, got {value!r}")


def _positive(name: str, value: float) -> None:
    _non_negative(name, value)
    if value == 0:
        raise NemesisConfigError(f"{name} must be > 0, got {value!r}")
