"""Fault kinds and fault windows: the one declaration of how faults show in a history.

A fault kind is what the history can tell apart: the nemesis f that starts
it, the f that stops it, a label for people and a colour for plots. Several
named faults share a kind (every `partition-*` fault is a "partition";
`packet-loss`, `bandwidth` and the netem faults are "packet"; `memory-alarm`
and `disk-alarm` are "alarm"). RabbitMQ's own operations done as faults have
their own fs: `transfer-leader` / `check-leader`, `remove-member` /
`add-member`, `drain-node` / `revive-node`, `start-alarm` / `stop-alarm`.
`heal` is a kind of its own: its op ends every fault still in effect.

Pure data and stdlib only, so that anything (the report, the plots, the
checkers, the explanations) can read it without the nemesis's machinery. An f
of the form `start-X` not declared here is read as kind X, stopped by `stop-X`,
with a stable colour of its own (`kind_for_start`).

`fault_windows` (and `WindowTracker`, fed op by op) is the one algorithm that
turns the nemesis's ops into the spans during which each fault was in effect;
the checkers, the plots, the report and the explanations all read it. The
rules: the nemesis records each action as an invocation and a completion of
the same f (a completion pairs with the earliest open invocation of its f). A
window opens at the completion (not `fail`) of a start f and closes at the
completion (not `fail`) of its kind's stop f whose target is compatible (see
`FaultWindow.target`: either unknown, or the two share a node), or of "heal",
which ends every open window, or at the end of the history. A `fail`
completion changes nothing: the fault certainly did not happen (or stop).
Windows are ordered by start, then end, then f.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from history import NEMESIS, Op


@dataclass(frozen=True)
class FaultKind:
    """One kind of fault: its name, the fs that start and stop it, a label and a colour.

    `stop_f` is None for heal, which stops nothing of its own but ends every
    open fault (`ends_all`). `silent`: RabbitMQ can notice the fault only by the
    silence it makes (no connection closes), through its tick (0.75-1.25 x
    net_ticktime) or a quorum queue's election timeout, so a shorter fault may heal
    unnoticed; a kill, a stop or a restart closes connections and is noticed at once.
    """

    name: str
    start_f: str
    stop_f: str | None
    label: str
    colour: str
    ends_all: bool = False
    silent: bool = False


PARTITION: Final = FaultKind("partition", "start-partition", "stop-partition",
                             "network partition", "#1f77b4", silent=True)
KILL: Final = FaultKind("kill", "kill", "start", "kill (SIGKILL)", "#9467bd")
STOP: Final = FaultKind("stop", "stop", "start", "graceful stop", "#8c564b")
PAUSE: Final = FaultKind("pause", "pause", "resume", "pause (SIGSTOP)", "#17becf", silent=True)
PACKET: Final = FaultKind("packet", "start-packet", "stop-packet",
                          "packet loss / delay / limit", "#e377c2", silent=True)
ROLLING_RESTART: Final = FaultKind("rolling-restart", "start-rolling-restart",
                                   "stop-rolling-restart", "rolling restart", "#7f7f7f")
FULL_RESTART: Final = FaultKind("full-restart", "start-full-restart", "stop-full-restart",
                                "full restart", "#393b79")
# RabbitMQ's own operations, done to it as an operator would (nemesis.faults.operations).
LEADER_TRANSFER: Final = FaultKind("leader-transfer", "transfer-leader", "check-leader",
                                   "quorum leader transfer", "#637939")
MEMBER_REMOVE: Final = FaultKind("member-remove", "remove-member", "add-member",
                                 "quorum member removed", "#8c6d31")
MAINTENANCE: Final = FaultKind("maintenance", "drain-node", "revive-node",
                               "maintenance mode (drain)", "#7b4173")
ALARM: Final = FaultKind("alarm", "start-alarm", "stop-alarm",
                         "resource alarm (memory / disk)", "#843c39")
# A broker killed and its node's unsynced writes dropped (nemesis.faults.disk).
POWER_LOSS: Final = FaultKind("power-loss", "start-power-loss", "stop-power-loss",
                              "power loss (kill, unsynced writes dropped)", "#ad494a")
# A stopped broker's queue files damaged on disk, bits flipped or a tail cut (nemesis.faults.disk).
DISK_CORRUPT: Final = FaultKind("disk-corrupt", "start-disk-corrupt", "stop-disk-corrupt",
                                "disk corruption (kill, queue files damaged)", "#e7969c")
HEAL: Final = FaultKind("heal", "heal", None, "heal (ends every fault)", "#bcbd22",
                        ends_all=True)

KINDS: Final[tuple[FaultKind, ...]] = (
    PARTITION, KILL, STOP, PAUSE, PACKET, ROLLING_RESTART, FULL_RESTART,
    LEADER_TRANSFER, MEMBER_REMOVE, MAINTENANCE, ALARM, POWER_LOSS, DISK_CORRUPT, HEAL,
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


@dataclass(frozen=True)
class FaultWindow:
    """A time span during which one nemesis fault was in effect.

    `f` is the nemesis f that started it, `value` the start's value (its
    completion's, else its invocation's), `closed_by` the f that ended it
    ("stop-partition", "heal", ...) or None when the history ended first,
    `error` the start completion's error (the fault may have half-happened),
    `invoke_ns` when the start was invoked (the fault may bite from then on:
    a kill's victim is gone before the kill op completes), None when unknown.
    For a heal, the span runs from its invocation to its completion.
    """

    f: str
    start_ns: int
    end_ns: int
    value: Any = None
    node: str | None = None
    closed_by: str | None = None
    error: str | None = None
    invoke_ns: int | None = None

    @property
    def kind(self) -> str:
        """Returns the fault kind's name, e.g. "partition" for start-partition."""
        k = kind_for_start(self.f)
        return self.f if k is None else k.name

    @property
    def stop_f(self) -> str | None:
        """Returns the f that stops this fault (None for a heal)."""
        return _stop_of(self.f)

    @property
    def target(self) -> tuple[str, ...] | None:
        """Returns the nodes the fault hit (`target_of` its value and node), or None."""
        return target_of(self.value, self.node)

    @property
    def fault(self) -> str:
        """Returns the named fault (value["fault"], e.g. "partition-halves"), else the kind."""
        v = self.value.get("fault") if isinstance(self.value, dict) else None
        return str(v) if v else self.kind


def target_of(value: Any, node: str | None) -> tuple[str, ...] | None:
    """Takes a nemesis op's value and node. Returns the nodes it names: value["nodes"] (a list,
    sorted; or one name), else its node; None when it names none (it then matches any)."""
    if isinstance(value, dict):
        nodes = value.get("nodes")
        if isinstance(nodes, list) and nodes:
            return tuple(sorted(str(n) for n in nodes))
        if isinstance(nodes, str):
            return (nodes,)
    return (node,) if node else None


def _compatible(a: tuple[str, ...] | None, b: tuple[str, ...] | None) -> bool:
    return a is None or b is None or bool(set(a) & set(b))


@dataclass
class _OpenFault:
    f: str
    start_ns: int
    value: Any
    node: str | None
    error: str | None
    invoke_ns: int | None = None


class WindowTracker:
    """Builds fault windows from nemesis ops fed one at a time, in history order (the module
    docstring says how). `heals` are the heals' own spans, invocation to completion;
    `failures` the failed completions; `unpaired` the completions without an open invocation
    of their f (a history breaking the contract: the checkers refuse it)."""

    def __init__(self) -> None:
        self._open: list[_OpenFault] = []
        self._invokes: dict[str, deque[Op]] = {}
        self._closed: list[FaultWindow] = []
        self.heals: list[FaultWindow] = []
        self.failures: list[Op] = []
        self.unpaired: list[Op] = []

    def feed(self, op: Op) -> None:
        """Takes one op; ignores all but the nemesis's."""
        if op.process != NEMESIS:
            return
        if op.type == "invoke":
            self._invokes.setdefault(op.f, deque()).append(op)
            return
        waiting = self._invokes.get(op.f)
        invoke = waiting.popleft() if waiting else None
        if invoke is None:
            self.unpaired.append(op)
        if op.type == "fail":
            self.failures.append(op)
            return
        # The completion's value and node, else its invocation's.
        value = op.value if op.value is not None or invoke is None else invoke.value
        node = op.node if op.node is not None or invoke is None else invoke.node
        kind = kind_for_start(op.f)
        if kind is not None and kind.ends_all:
            self._close(lambda _w: True, op)
            start = op.time if invoke is None else min(invoke.time, op.time)
            self.heals.append(FaultWindow(op.f, start, op.time, value, node, op.f, op.error))
        elif kind is not None:
            self._open.append(_OpenFault(op.f, op.time, value, node, op.error,
                                         None if invoke is None else invoke.time))
        else:
            target = target_of(value, node)
            self._close(lambda w: _stop_of(w.f) == op.f
                        and _compatible(target_of(w.value, w.node), target), op)

    def _close(self, which: Callable[[_OpenFault], bool], op: Op) -> None:
        keep: list[_OpenFault] = []
        for w in self._open:
            if which(w):
                end = max(op.time, w.start_ns)
                self._closed.append(
                    FaultWindow(w.f, w.start_ns, end, w.value, w.node, op.f, w.error, w.invoke_ns)
                )
            else:
                keep.append(w)
        self._open = keep

    def finish(self, end_ns: int) -> list[FaultWindow]:
        """Takes the end of the history (ns). Returns all windows, open ones closed there, by start."""
        windows = self._closed + [
            FaultWindow(w.f, w.start_ns, max(end_ns, w.start_ns), w.value, w.node, None, w.error,
                        w.invoke_ns)
            for w in self._open
        ]
        return sorted(windows, key=lambda w: (w.start_ns, w.end_ns, w.f))


def _stop_of(start_f: str) -> str | None:
    kind = kind_for_start(start_f)
    return None if kind is None else kind.stop_f


def fault_windows(ops: Iterable[Op], end_ns: int | None = None) -> list[FaultWindow]:
    """Takes ops in history order and optionally the end of the history (ns).

    Returns the fault windows (heals not included) ordered by start; a window
    still open at the end closes at `end_ns`, by default the latest op time seen.
    """
    tracker = WindowTracker()
    last = 0
    for op in ops:
        last = max(last, op.time)
        tracker.feed(op)
    return tracker.finish(last if end_ns is None else end_ns)
