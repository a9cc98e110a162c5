"""The nemesis interpreter: plays the schedule against a cluster, records it, and heals.

Like Jepsen's interpreter for the nemesis process, it is the one place that
turns the schedule's steps into fault actions and the fault actions into
history ops. `NemesisInterpreter.run` (in its own thread via `start`) walks the schedule: it
waits out a healthy period on the stop event, starts a fault, waits out the
fault period, stops the fault, and so on until the event is set; then it stops
the fault in hand and returns. A schedule played once (`order="once"`) is
played on the clock from the moment `run` begins: each fault is started at its
`start_s` and stopped `duration_s` later, and the interpreter returns after the
last (healthy to the end); the clock starts when `start` is called, just after
the main phase begins. Every start and stop is an `invoke` op followed
by an `info` op in the history (process "nemesis"; Jepsen records nemesis
completions as info because their effect is never certain); a start's
invocation names the fault (`{"fault": NAME}`) and, when it is not the bare
name, the entry it plays (`"entry": "kill@leader"`), so the schedule as played
can be read back from the history (nemesis.played). A start that
raises is recorded as an `info` with an `error` field, and the fault is then
stopped at once (it may have half-happened), as Jepsen's flip-flop generator
would.

`heal` ends everything: it sets the stop event, waits (up to `heal_wait_s`)
for a fault action in flight, stops the active fault, then runs every healer
its faults use on every node (resume, open the network, remove qdiscs, start
brokers, revive drained nodes, add back removed quorum members, set memory and
disk limits back), logging and going on past failures, and records an invoke/info pair
with f "heal". It is idempotent and safe in a `finally` after Ctrl-C. One lock
orders fault actions and heals, so nothing the interpreter does can land
after a heal.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any

from clusters.base import Broker, Cluster, QueueAdmin
from history import NEMESIS, Op, OpType, Recorder
from nemesis.errors import NemesisConfigError
from nemesis.faults import make_fault
from nemesis.healers import HEALERS
from nemesis.options import NemesisOptions, cut_allowance
from nemesis.protocol import Fault, FaultContext, Preflight, describe_error
from nemesis.schedule import fault_rng, schedule, schedule_rng

log = logging.getLogger(__name__)

HEAL_F = "heal"


def sole_node(description: dict[str, Any]) -> str | None:
    """Takes a fault description. Returns its one node, or None when it hit several or none."""
    nodes = description.get("nodes")
    if isinstance(nodes, list) and len(nodes) == 1 and isinstance(nodes[0], str):
        return nodes[0]
    return None


class NemesisInterpreter:
    """Plays the nemesis schedule in a thread, recording each fault; heals on demand.

    Takes the cluster, its broker, the history, the options, the test seed,
    the queue and the admin that says where it lives (needed by
    `partition-leader` and targets "leader" or "follower(s)") and the event
    that stops it (a new one when None). Raises NemesisConfigError when the
    options do not fit the cluster.
    """

    def __init__(
        self,
        cluster: Cluster,
        broker: Broker,
        history: Recorder,
        options: NemesisOptions,
        seed: int | str,
        queue: str | None = None,
        stop_event: threading.Event | None = None,
        *,
        admin: QueueAdmin | None = None,
    ) -> None:
        options.validate([n.name for n in cluster.nodes])
        needing = options.needs_queue()
        if needing and queue is None:
            raise NemesisConfigError(f"{', '.join(needing)} need(s) a queue name")
        if needing and admin is None:
            raise NemesisConfigError(
                f"{', '.join(needing)} need(s) a queue admin to ask where the queue lives")
        self.options = options
        self.history = history
        self.seed = seed
        self.stop_event = stop_event if stop_event is not None else threading.Event()
        self.error: Exception | None = None
        self._ctx = FaultContext(cluster, broker, options, queue, cancel=self.stop_event,
                                 admin=admin)
        # One fault instance and one context per entry: "kill@leader" and "kill" differ in
        # targets, and each entry acts with its own options.
        entries = {e.text: e for e in options.entries()}
        self._faults: dict[str, Fault] = {t: make_fault(e.fault) for t, e in entries.items()}
        self._ctxs: dict[str, FaultContext] = {
            t: dataclasses.replace(self._ctx, options=options.resolve(e))
            for t, e in entries.items()}
        self._steps = schedule(options, schedule_rng(seed))
        self._rng = fault_rng(seed)
        # Orders fault actions against heal; reentrant so heal may run inside a fault's thread.
        self._lock = threading.RLock()
        self._active: Fault | None = None
        self._active_ctx: FaultContext = self._ctx
        self._active_node: str | None = None
        self._thread: threading.Thread | None = None
        self._deadline: float | None = None
        self._began: float | None = None  # when `start` was called: a schedule's clock

    @property
    def active(self) -> str | None:
        """Returns the name of the fault now in effect, or None."""
        fault = self._active
        return None if fault is None else fault.info.name

    def setup(self) -> None:
        """Checks, before the test, that every node can host every configured fault.

        Creates the iptables chains where partitions or packet loss are
        configured and probes for netem where netem faults are. Raises
        FaultUnsupported (e.g. no netem on a node's kernel), FaultError or
        RemoteError when a node cannot.
        """
        for entry, fault in self._faults.items():
            if isinstance(fault, Preflight):
                fault.preflight(self._ctxs[entry])

    def start(self, deadline: float | None = None) -> threading.Thread:
        """Takes, optionally, when the main phase ends (time.monotonic()): no fault starts that
        could not last its duration by then (less `_slack`: the schedule's own steps take a
        moment), so every fault played is about as long as asked (a fault cut short may heal
        before RabbitMQ notices it). Starts `run` in a daemon thread named "nemesis". Returns
        the thread."""
        if self._thread is not None:
            raise RuntimeError("the nemesis interpreter was already started")
        self._deadline = deadline
        self._began = time.monotonic()
        self._thread = threading.Thread(target=self.run, name="nemesis", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        """Asks the interpreter to stop: sets its stop event. Returns at once."""
        self.stop_event.set()

    def join(self, timeout: float | None = None) -> bool:
        """Takes an optional timeout. Waits for the thread. Returns True when it has finished."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def run(self) -> None:
        """Plays the schedule until the stop event is set, then stops the active fault.

        Blocks; `start` runs it in a thread. An unexpected error ends the run
        and is kept in `self.error`.
        """
        log.info("nemesis running: faults %s, seed %s", list(self.options.faults), self.seed)
        # A schedule played once ends its steps on this clock (Step.end_s): from `start`, not
        # from when this thread got going (which may be late on a busy host).
        t0 = self._began if self._began is not None else time.monotonic()
        try:
            for step in self._steps:
                if self.stop_event.is_set():
                    break
                ends = None if step.end_s is None else t0 + step.end_s
                if step.kind == "healthy" or step.fault is None:
                    self.stop_event.wait(step.seconds if ends is None
                                         else max(0.0, ends - time.monotonic()))
                elif self._deadline is not None and \
                        (ends if ends is not None else time.monotonic() + step.seconds) \
                        - _slack(step.seconds) > self._deadline:
                    log.info("nemesis: no time left for %s's %g s; healthy to the end",
                             step.fault, step.seconds)
                    self.stop_event.wait(max(0.0, self._deadline - time.monotonic()))
                    break
                else:
                    self._fault_period(step.fault, step.seconds, ends)
        except Exception as e:
            log.exception("nemesis stopped by an error")
            self.error = e
        with self._lock:
            self._stop_active()
        log.info("nemesis stopped")

    def heal(self) -> dict[str, Any]:
        """Ends every fault on every node and records it as f "heal". Returns what each healer did.

        Sets the stop event first so no new fault starts. Never raises for a
        node that fails to heal (it is logged and reported in the op's error).
        """
        self.stop_event.set()
        acquired = self._lock.acquire(timeout=self.options.heal_wait_s)
        if not acquired:
            log.warning(
                "a fault action is still running after %.0fs; healing anyway",
                self.options.heal_wait_s,
            )
        try:
            return self._heal()
        finally:
            if acquired:
                self._lock.release()

    def _heal(self) -> dict[str, Any]:
        names = list(self._faults)
        self._record("invoke", HEAL_F, {"faults": names, "active": self.active})
        self._stop_active()
        by_kind = {fault.info.heals: fault for fault in self._faults.values()}
        healed: dict[str, Any] = {}
        failures: list[str] = []
        for kind in HEALERS:
            fault = by_kind.get(kind)
            if fault is None:
                continue
            try:
                outcome = fault.heal_all(self._ctx)
            except Exception as e:
                log.exception("healer %s failed", kind)
                outcome = {"*": f"error: {describe_error(e)}"}
            healed[kind] = outcome
            failures += [f"{kind} on {n}: {s}" for n, s in outcome.items() if s.startswith("error")]
        value = {"faults": names, "healed": healed}
        error = f"heal failed: {'; '.join(failures)}" if failures else None
        self._record("info", HEAL_F, value, error=error)
        if failures:
            log.error("heal incomplete: %s", "; ".join(failures))
        else:
            log.info("healed: %s", ", ".join(healed) or "nothing to heal")
        return value

    def _fault_period(self, entry: str, seconds: float, ends: float | None = None) -> None:
        """Plays one fault: for `seconds` once started, or until `ends` (time.monotonic())."""
        with self._lock:
            if self.stop_event.is_set():
                return
            started = self._start_fault(self._faults[entry], self._ctxs[entry], entry)
        if started:
            self.stop_event.wait(seconds if ends is None else max(0.0, ends - time.monotonic()))
        with self._lock:
            self._stop_active()

    def _start_fault(self, fault: Fault, ctx: FaultContext, entry: str) -> bool:
        info = fault.info
        asked: dict[str, Any] = {"fault": info.name}
        if entry != info.name:
            asked["entry"] = entry
        self._record("invoke", info.start_f, asked, strict=True)
        # Active before acting: a start that fails half-way still gets stopped.
        self._active, self._active_node, self._active_ctx = fault, None, ctx
        log.info("nemesis: %s (%s)", info.name, info.start_f)
        try:
            description = fault.start(ctx, self._rng)
        except Exception as e:
            log.warning("fault %s failed to start: %s", info.name, describe_error(e))
            self._record("info", info.start_f, {"fault": info.name}, error=describe_error(e))
            return False
        self._active_node = sole_node(description)
        self._record("info", info.start_f, description, node=self._active_node)
        return True

    def _stop_active(self) -> None:
        fault, node = self._active, self._active_node
        if fault is None:
            return
        info = fault.info
        self._record("invoke", info.stop_f, {"fault": info.name}, node=node)
        log.info("nemesis: end %s (%s)", info.name, info.stop_f)
        try:
            description = fault.stop(self._active_ctx)
        except Exception as e:
            log.warning("fault %s failed to stop: %s", info.name, describe_error(e))
            self._record(
                "info", info.stop_f, {"fault": info.name}, node=node, error=describe_error(e)
            )
        else:
            self._record("info", info.stop_f, description, node=node)
        self._active, self._active_node = None, None

    def _record(
        self,
        type_: OpType,
        f: str,
        value: dict[str, Any],
        *,
        node: str | None = None,
        error: str | None = None,
        strict: bool = False,
    ) -> None:
        op = Op(type=type_, process=NEMESIS, f=f, value=value, node=node, error=error)
        try:
            self.history.append(op)
        except Exception:
            if strict:
                raise
            log.exception("could not record nemesis op %s %s", type_, f)


def _slack(seconds: float) -> float:
    """Takes a fault's duration. Returns by how much the main phase's end may cut it
    (nemesis.options.cut_allowance, which an explicit schedule is validated against)."""
    return cut_allowance(seconds)
