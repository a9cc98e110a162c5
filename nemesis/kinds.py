"""Fault kinds: the one declaration of how each kind of fault shows in a history.

A fault kind is what the history can tell apart: the nemesis f that starts
it, the f that stops it, a label for people and a colour for plots. Several
named faults share a kind (every `partition-*` fault is a "partition";
`packet-loss`, `bandwidth` and the netem faults are "packet"). `heal` is a
kind of its own: its op ends every fault still in effect.

Pure data and stdlib only, so that anything (the report, the plots, the
checkers) can read it without the nemesis's machinery. An f of the form
`start-X` not declared here is read as kind X, stopped by `stop-X`, with a
stable colour of its own (`kind_for_start`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class FaultKind:
    """One kind of fault: its name, the fs that start and stop it, a label and a colour.

    `stop_f` is None for heal, which stops nothing of its own but ends every
    open fault (`ends_all`).
    """

    name: str
    start_f: str
    stop_f: str | None
    label: str
    colour: str
    ends_all: bool = False


PARTITION: Final = FaultKind("partition", "start-partition", "stop-partition",
                             "network partition", "#1f77b4")
KILL: Final = FaultKind("kill", "kill", "start", "kill (SIGKILL)", "#9467bd")
STOP: Final = FaultKind("stop", "stop", "start", "graceful stop", "#8c564b")
PAUSE: Final = FaultKind("pause", "pause", "resume", "pause (SIGSTOP)", "#17becf")
PACKET: Final = FaultKind("packet", "start-packet", "stop-packet",
                          "packet loss / delay / limit", "#e377c2")
ROLLING_RESTART: Final = FaultKind("rolling-restart", "start-rolling-restart",
                                   "stop-rolling-restart", "rolling restart", "#7f7f7f")
FULL_RESTART: Final = FaultKind("full-restart", "start-full-restart", "stop-full-restart",
                                "full restart", "#393b79")
HEAL: Final = FaultKind("heal", "heal", None, "heal (ends every fault)", "#bcbd22",
                        ends_all=True)

KINDS: Final[tuple[FaultKind, ...]] = (
    PARTITION, KILL, STOP, PAUSE, PACKET, ROLLING_RESTART, FULL_RESTART, HEAL,
)
BY_START: Final[dict[str, FaultKind]] = {k.start_f: k for k in KINDS}
BY_NAME: Final[dict[str, FaultKind]] = {k.name: k for k in KINDS}
STOP_FS: Final[frozenset[str]] = frozenset(k.stop_f for k in KINDS if k.stop_f is not None)

# Colours for kinds not declared above, picked by a stable hash of the name.
EXTRA_COLOURS: Final = ("#ff7f0e", "#aec7e8", "#c5b0d5", "#c49c94", "#dbdb8d", "#9edae5")


def _extra_colour(name: str) -> str:
    return EXTRA_COLOURS[zlib.crc32(name.encode()) % len(EXTRA_COLOURS)]


def kind_for_start(f: str) -> FaultKind | None:
    """Takes a nemesis f. Returns the kind it starts (heal included), or None when it starts
    nothing: a stop f, or any other f. An undeclared `start-X` is kind X, stopped by `stop-X`."""
    kind = BY_START.get(f)
    if kind is not None:
        return kind
    if f.startswith("start-") and len(f) > len("start-") and f not in STOP_FS:
        name = f[len("start-"):]
        return FaultKind(name, f, "stop-" + name, name, _extra_colour(name))
    return None


def kind_named(name: str) -> FaultKind:
    """Takes a kind's name. Returns its declaration; an undeclared name gets a stable colour."""
    kind = BY_NAME.get(name)
    if kind is not None:
        return kind
    return FaultKind(name, "start-" + name, "stop-" + name, name, _extra_colour(name))


def stop_f_for(start_f: str) -> str | None:
    """Takes a nemesis f. Returns the f that stops the fault it starts, or None."""
    kind = kind_for_start(start_f)
    return None if kind is None else kind.stop_f
