"""Liveness after the heal, watched live: has everything the check will judge resumed yet?

The liveness check (checkers.liveness) judges, after the run, whether confirms
and deliveries resumed within a bound B after the last heal H; it can say so
only for what the main phase saw, so a main phase that ends at its last heal
leaves it "unknown". The runner therefore keeps the workload running after the
last heal (harness.runner, the spec's `after_heal_s`), and ends that tail as
soon as the verdict can no longer be "unknown" for want of time: when, by the
check's own rules, every judgement that could still come out false has come
out "resumed". `ResumeWatch` follows the ops as they are recorded and says when:

- the last heal: the end of the last fault window (history.faults'
  `WindowTracker`, the one algorithm the check reads), none while a window is
  open;
- confirms resumed: a publish was confirmed at or after H, and through every
  node a publish was invoked through at or after H (a node whose clients are
  still refused is waited for: past H + B its refusals make the check's
  "not-resumed"); skipped when the clients publish without confirms;
- deliveries resumed: no consumer was fed before H (the check says "not
  applicable"), or some consumer fed at or after H acked at or after that
  delivery;
- metadata served again (a run with the metadata probe, workloads.metadata_probe):
  every node a probe op was invoked through since the last fault began had a
  declare answered ok at or after H (checkers.metadata's rule; a node still
  refusing is waited for, as a publisher's is, and so is one whose probe is
  still waiting on a declaration sent while it was cut off: on khepri-minority-
  leader, 4.3 seed 4001, the cut-off node's only probe op in the tail was one
  Khepri answered 30 s after it was sent, and a watch that counted only ops sent
  after H ended the run 14.8 s after the heal, its metadata verdict unknown).

Nodes no client publishes through after the heal are not waited for: the check
calls them unknown whatever the tail's length (a refused connection leaves no
op). Pure and thread-safe: no Spark, no cluster.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from history import NEMESIS, PROBE_FS, Op
from history.faults import WindowTracker

Kind = Literal["invoke", "confirm", "consume", "ack", "probe", "served"]
_KINDS: Final[dict[tuple[str, str], Kind]] = {
    ("invoke", "publish"): "invoke", ("ok", "publish"): "confirm",
    ("ok", "consume"): "consume", ("ok", "ack"): "ack",
    **{("invoke", f): "probe" for f in PROBE_FS}, ("ok", "declare"): "served"}


@dataclass(frozen=True)
class _Seen:
    time: int
    kind: Kind
    node: str | None
    process: int


class ResumeWatch:
    """Follows a run's ops (`observe`, from any thread) and tells when confirms and deliveries
    resumed after the last heal (`resumed`; `wait` until then or a deadline)."""

    def __init__(self, confirms: bool = True) -> None:
        """Takes whether the clients publish with confirms (without, none are waited for)."""
        self.confirms = confirms
        self._lock = threading.Lock()
        self._tracker = WindowTracker()
        self._heal: int | None = None
        self._open = False
        # The client ops since the latest fault started (those before it are all before any
        # heal to come), and whether a consumer was fed before it.
        self._seen: list[_Seen] = []
        self._fed_earlier = False

    def observe(self, op: Op) -> None:
        """Takes an op as recorded (stamped). Keeps what the rules need of it."""
        pid = op.process
        kind = _KINDS.get((op.type, op.f)) if isinstance(pid, int) else None
        with self._lock:
            if kind is not None and isinstance(pid, int):
                self._seen.append(_Seen(op.time, kind, op.node, pid))
            elif op.process == NEMESIS:
                self._nemesis(op)

    def _nemesis(self, op: Op) -> None:
        self._tracker.feed(op)
        windows = self._tracker.finish(op.time)
        opened = any(w.closed_by is None for w in windows)
        if opened and not self._open:  # a fault began: what came before it is before any heal
            self._fed_earlier |= any(s.kind == "consume" for s in self._seen)
            self._seen = []
        self._open = opened
        closed = [w.end_ns for w in windows if w.closed_by is not None]
        if closed and not opened:  # checkers.liveness.last_heal: the window that ended last
            self._heal = max(closed)

    @property
    def last_heal_ns(self) -> int | None:
        """Returns the last heal (ns, history time), None before any or while a fault is on."""
        with self._lock:
            return None if self._open else self._heal

    def resumed(self) -> bool:
        """Returns whether confirms and deliveries resumed after the last heal (the module's
        rules); False while there is no last heal."""
        with self._lock:
            heal = None if self._open else self._heal
            if heal is None:
                return False
            after = [s for s in self._seen if s.time >= heal]
            fed_before = self._fed_earlier or any(
                s.kind == "consume" and s.time < heal for s in self._seen)
            probed = {s.node for s in self._seen if s.kind == "probe"}
        return _confirms_resumed(after, self.confirms) and (
            not fed_before or _deliveries_resumed(after)) and _metadata_served(after, probed)

    def wait(self, now: Callable[[], int], deadline_ns: int, poll_s: float = 0.5,
             stop: threading.Event | None = None) -> bool:
        """Takes the history's clock, a deadline on it (ns), how often to look and an event that
        cuts the wait short. Waits until `resumed` or the deadline. Returns `resumed()`."""
        stop = stop or threading.Event()
        while not self.resumed():
            left = (deadline_ns - now()) / 1e9
            if left <= 0 or stop.wait(min(poll_s, left)):
                return self.resumed()
        return True


def _confirms_resumed(after: list[_Seen], confirms: bool) -> bool:
    if not confirms:
        return True
    confirmed = {s.node for s in after if s.kind == "confirm"}
    invoked = {s.node for s in after if s.kind == "invoke"}
    return bool(confirmed) and invoked <= confirmed


def _metadata_served(after: list[_Seen], probed: set[str | None]) -> bool:
    return probed <= {s.node for s in after if s.kind == "served"}


def _deliveries_resumed(after: list[_Seen]) -> bool:
    first: dict[int, int] = {}
    for s in after:
        if s.kind == "consume":
            first.setdefault(s.process, s.time)
        elif s.kind == "ack" and s.process in first and s.time >= first[s.process]:
            return True
    return False
