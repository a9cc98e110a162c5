"""Live progress of a run, read from what the history records as it is recorded.

`RunProgress` watches every op the run appends (the runner hands its
`observe` to an `ObservedHistory`, a HistoryWriter that passes each stamped op
on): it counts ops by (f, type) and remembers the phase, the fault in effect
and the latest queue depth. That is O(1) per op under one small lock held for
a dict update, and never a second read of history.jsonl. `snapshot()` freezes
the counts for display; `format_status` turns one into a line.

`LiveStatus` shows it on the stream the CLI gives it (stderr): on a terminal,
one line redrawn in place with a carriage return, and log records written
through it (`write`) clear and redraw that line so they never collide; on
anything else (a CI log) a plain line every `plain_every_s` seconds. Nothing
here prints on its own: the CLI owns the stream and decides when to show it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from history import HARNESS, NEMESIS, HistoryWriter, Op

log = logging.getLogger(__name__)

TTY_EVERY_S = 0.5
PLAIN_EVERY_S = 10.0
CLEAR_LINE = "\r\x1b[2K"


class RunObserver(Protocol):
    """What the runner tells about a run while it happens."""

    def observe(self, op: Op) -> None:
        """Takes an op just written to the history (stamped). Must be fast and never raise."""
        ...

    def stage(self, name: str) -> None:
        """Takes the name of a step the history does not record (e.g. "check")."""
        ...


class ObservedHistory(HistoryWriter):
    """A HistoryWriter that hands every op it wrote to an observer.

    Takes the path and the observer's callable (e.g. `RunProgress.observe`). An
    observer that raises is logged once and then ignored: it never costs an op.
    """

    def __init__(self, path: Path, observe: Callable[[Op], None],
                 start_ns: int | None = None) -> None:
        super().__init__(path, start_ns)
        self._observe: Callable[[Op], None] | None = observe

    def append(self, op: Op) -> Op:
        """Takes an op without index/time. Returns it stamped, once written and observed."""
        stamped = super().append(op)
        observe = self._observe
        if observe is not None:
            try:
                observe(stamped)
            except Exception:
                log.exception("progress observer failed; progress display stops")
                self._observe = None
        return stamped


@dataclass(frozen=True)
class Snapshot:
    """The progress of a run at one moment. Times are seconds of the monotonic clock's
    difference; counts are ops of the history so far."""

    ops: int = 0
    elapsed_s: float = 0.0
    phase: str | None = None
    phase_s: float = 0.0
    main_s: float | None = None
    time_limit_s: float | None = None
    publishes: dict[str, int] = field(default_factory=dict)
    consumed: int = 0
    drained: int = 0
    acked: int = 0
    fault: str | None = None
    fault_node: str | None = None
    fault_s: float | None = None
    faults_started: int = 0
    ready: int | None = None
    unacked: int | None = None
    depth_age_s: float | None = None


class RunProgress:
    """Counts a run's ops as they are recorded (a RunObserver).

    Takes the run's time limit in seconds (for "elapsed / limit" in the main
    phase) and a monotonic clock (for tests).
    """

    def __init__(self, time_limit_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.time_limit_s = time_limit_s
        self._clock = clock
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}
        self._ops = 0
        self._started = clock()
        self._phase: str | None = None
        self._phase_at = self._started
        self._main_at: float | None = None
        self._main_end: float | None = None
        self._fault: str | None = None
        self._fault_f: str | None = None
        self._fault_node: str | None = None
        self._fault_at: float | None = None
        self._faults = 0
        self._depth: tuple[int | None, int | None, float] | None = None

    def observe(self, op: Op) -> None:
        """Takes an op just recorded. Counts it; follows phases, faults and depth."""
        with self._lock:
            key = (op.f, op.type)
            self._counts[key] = self._counts.get(key, 0) + 1
            self._ops += 1
            if op.process == HARNESS:
                self._harness(op)
            elif op.process == NEMESIS:
                self._nemesis(op)

    def stage(self, name: str) -> None:
        """Takes a step the history does not record ("check", "report"). Shows it as the phase."""
        with self._lock:
            self._phase, self._phase_at = name, self._clock()

    def _harness(self, op: Op) -> None:
        v = op.value if isinstance(op.value, dict) else {}
        if op.f == "phase" and isinstance(v.get("phase"), str):
            now = self._clock()
            if v.get("state") == "start":
                self._phase, self._phase_at = v["phase"], now
                if v["phase"] == "main":
                    self._main_at = now
            elif v["phase"] == "main":
                self._main_end = now
        elif op.f == "depth":
            ready, unacked = v.get("ready"), v.get("unacked")
            self._depth = (ready if isinstance(ready, int) else None,
                           unacked if isinstance(unacked, int) else None, self._clock())

    def _nemesis(self, op: Op) -> None:
        # The nemesis runs one fault at a time: an invoke naming a fault starts it when none is
        # in effect, and an invoke of another f naming the same fault (its stop f) ends it.
        # This needs no table of start/stop names, so a new fault kind shows by itself.
        v = op.value if isinstance(op.value, dict) else {}
        name = v.get("fault")
        if op.f == "heal":
            if op.type != "invoke":
                self._fault = None
            return
        if op.type == "invoke" and isinstance(name, str):
            if self._fault is None:
                self._fault, self._fault_f, self._fault_node = name, op.f, None
                self._fault_at = self._clock()
                self._faults += 1
            elif name == self._fault and op.f != self._fault_f:
                self._fault = None
        elif op.type == "info" and self._fault is not None and op.f == self._fault_f:
            self._fault_node = op.node  # the start's description: the one node it hit, if one

    def count(self, f: str, type_: str) -> int:
        """Takes an f and an op type. Returns how many such ops were recorded."""
        with self._lock:
            return self._counts.get((f, type_), 0)

    def snapshot(self) -> Snapshot:
        """Returns the progress now."""
        with self._lock:
            now = self._clock()
            c = self._counts
            main_s = None
            if self._main_at is not None:
                main_s = (self._main_end or now) - self._main_at
            depth = self._depth
            return Snapshot(
                ops=self._ops, elapsed_s=now - self._started, phase=self._phase,
                phase_s=now - self._phase_at, main_s=main_s, time_limit_s=self.time_limit_s,
                publishes={t: c.get(("publish", t), 0) for t in ("invoke", "ok", "fail", "info")},
                consumed=c.get(("consume", "ok"), 0), drained=c.get(("drain", "ok"), 0),
                acked=c.get(("ack", "ok"), 0),
                fault=self._fault, fault_node=self._fault_node if self._fault else None,
                fault_s=(now - self._fault_at if self._fault and self._fault_at is not None
                         else None),
                faults_started=self._faults,
                ready=depth[0] if depth else None, unacked=depth[1] if depth else None,
                depth_age_s=now - depth[2] if depth else None,
            )


def _clock_text(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 60}:{s % 60:02d}" if s >= 60 else f"{s}s"


def _n(x: int) -> str:
    return f"{x / 1000:.1f}k" if x >= 10000 else str(x)


def format_status(s: Snapshot) -> str:
    """Takes a snapshot. Returns it as one line: phase and times, publishes ok/fail/info,
    deliveries, the fault in effect and the latest queue depth."""
    parts = []
    phase = s.phase or "starting"
    if phase == "main" and s.main_s is not None and s.time_limit_s:
        parts.append(f"main {_clock_text(s.main_s)}/{_clock_text(s.time_limit_s)}")
    else:
        parts.append(f"{phase} {_clock_text(s.phase_s)}")
    parts.append(f"run {_clock_text(s.elapsed_s)}")
    p = s.publishes
    parts.append(f"publish ok {_n(p.get('ok', 0))} fail {_n(p.get('fail', 0))} "
                 f"info {_n(p.get('info', 0))}")
    delivered = f"delivered {_n(s.consumed)}"
    if s.drained:
        delivered += f" drained {_n(s.drained)}"
    parts.append(delivered)
    if s.fault is not None:
        where = f" {s.fault_node}" if s.fault_node else ""
        since = f" {_clock_text(s.fault_s)}" if s.fault_s is not None else ""
        parts.append(f"fault {s.fault}{where}{since}")
    elif s.faults_started:
        parts.append(f"no fault ({s.faults_started} so far)")
    if s.ready is not None or s.unacked is not None:
        ready = "?" if s.ready is None else _n(s.ready)
        unacked = "?" if s.unacked is None else _n(s.unacked)
        parts.append(f"depth {ready} ready {unacked} unacked")
    return " | ".join(parts)


class LiveStatus:
    """Shows a RunProgress on a stream while a run goes on.

    Takes the progress, the stream (the CLI's stderr), whether it is a terminal
    (default: asked of the stream, and TERM is not "dumb"), and how often to
    show it as a plain line otherwise. `write` is a stream for the console's
    log records, so they interleave cleanly with the status line.
    """

    def __init__(self, progress: RunProgress, stream: TextIO, tty: bool | None = None,
                 plain_every_s: float = PLAIN_EVERY_S) -> None:
        self.progress = progress
        self.stream = stream
        if tty is None:
            tty = bool(getattr(stream, "isatty", lambda: False)()) \
                and os.environ.get("TERM") != "dumb"
        self.tty = tty
        self.every_s = TTY_EVERY_S if tty else plain_every_s
        self._lock = threading.Lock()
        self._shown = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)

    def _width(self) -> int:
        return max(20, shutil.get_terminal_size((120, 24)).columns - 1)

    def _draw(self) -> None:
        line = format_status(self.progress.snapshot())
        with self._lock:
            if self.tty:
                line = line[: self._width()]
                self.stream.write(CLEAR_LINE + line)
                self._shown = line
            else:
                self.stream.write(f"progress: {line}\n")
            self.stream.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self._draw()
            except (OSError, ValueError):  # the stream went away: stop showing, never fail
                return

    def write(self, text: str) -> int:
        """Takes text for the stream (a log record). Writes it above the status line."""
        with self._lock:
            if self.tty and self._shown:
                self.stream.write(CLEAR_LINE)
            self.stream.write(text)
            if self.tty and self._shown and text.endswith("\n"):
                self.stream.write(self._shown)
            return len(text)

    def flush(self) -> None:
        """Flushes the stream."""
        with self._lock:
            self.stream.flush()

    def start(self) -> None:
        """Starts showing the progress."""
        self._thread.start()

    def stop(self) -> None:
        """Stops showing it and clears the status line."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
        with self._lock:
            if self.tty and self._shown:
                self.stream.write(CLEAR_LINE)
                self.stream.flush()
            self._shown = ""


@contextlib.contextmanager
def showing(progress: RunProgress, stream: TextIO, handler: logging.StreamHandler[Any] | None,
            tty: bool | None = None, plain_every_s: float = PLAIN_EVERY_S) -> Iterator[LiveStatus]:
    """Takes the progress, the stream to show it on, the console's log handler (its records
    then go through the status, None when there is none) and the display options. Shows the
    progress for the duration of the block. Yields the LiveStatus."""
    live = LiveStatus(progress, stream, tty, plain_every_s)
    old = handler.setStream(live) if handler is not None else None  # type: ignore[arg-type]
    live.start()
    try:
        yield live
    finally:
        live.stop()
        if handler is not None and old is not None:
            handler.setStream(old)
