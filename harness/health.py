"""The harness's own health over a run: its memory, its history's completeness, its verdict's delay.

A long run (an hour of staying clients and mixed faults) must not cost the
harness what it measures: memory that grows with the run's length would end
it early or slow its clients, a history missing ops would judge a different
run, and a verdict that comes long after the main phase is a check that
cannot keep up. So:

- `MemorySampler`, a thread started with the run and stopped after its check,
  writes every `interval_s` (10 s) one line to the run directory's
  health.jsonl (store.HEALTH): the wall clock (`at_unix`), the resident
  memory of the controller (this process, `controller_rss`) and of its worker
  processes (`workers_rss`, `workers`: its descendants that are the harness's
  own: the lazyfs daemons, Spark's JVM and Python workers; the brokers and
  their tools are the system under test, never counted). Each line is one
  unbuffered write: a run cut short keeps what was sampled. Nothing goes into
  the history, which holds ops only.
- `health_section` (results.json's `health`, written by the check beside the
  checker's sections; information, never part of the verdict: it has no
  `valid`) judges the memory of the main phase (test.json's
  `main_started_unix` and `main_ended_unix`): the least-squares slope of the
  harness's memory (controller and workers) over its samples, and the growth
  that slope makes over the phase. The memory *grew* when that growth
  exceeds both GROWTH_FLOOR_MB and GROWTH_SHARE of the phase's median (a
  Python process's resident memory moves by a few MiB as it allocates and
  frees; a leak grows with time), else it is *flat*; *unknown* with fewer
  than MIN_SAMPLES samples in the phase. The history is *complete* when its
  file holds one line per op the run wrote (test.json's `history_ops`). The
  verdict's delay is the time from the main phase's end to the first check's
  end (test.json's `verdict_after_main_s`, recorded by the runner), and
  whether it is within VERDICT_BOUND_S (issue 33: two minutes).
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final

import psutil

from harness import store
from history.health import MIB, Sample, read_samples

log = logging.getLogger(__name__)

INTERVAL_S: Final = 10.0
MIN_SAMPLES: Final = 3
GROWTH_FLOOR_MB: Final = 32.0
GROWTH_SHARE: Final = 0.10
VERDICT_BOUND_S: Final = 120.0
# Process names of the harness's own workers among its descendants (the brokers' are Erlang's).
WORKER_PREFIXES: Final = ("python", "java")


def is_worker(name: str) -> bool:
    """Takes a process name. Returns whether a descendant of that name is the harness's own
    worker (WORKER_PREFIXES), not a broker or a tool of the system under test."""
    return name.lower().startswith(WORKER_PREFIXES)


def sample(process: psutil.Process | None = None,
           clock: Callable[[], float] = time.time) -> Sample:
    """Takes the controller's process (default this one) and a wall clock. Returns its memory
    and its workers' now; a descendant that ends while it is read is left out."""
    me = process or psutil.Process(os.getpid())
    rss = workers = 0
    for child in me.children(recursive=True):
        try:
            if is_worker(child.name()):
                rss += child.memory_info().rss
                workers += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return Sample(clock(), me.memory_info().rss, rss, workers)


class MemorySampler:
    """Takes the run directory, the interval (s) and a function that takes one sample. Started,
    it appends a sample to health.jsonl at once and every interval until stopped (and once more
    as it stops); a sample that fails is logged and skipped, never the run's failure."""

    def __init__(self, run_dir: Path, interval_s: float = INTERVAL_S,
                 take: Callable[[], Sample] = sample) -> None:
        self.path = run_dir / store.HEALTH
        self.interval_s = interval_s
        self.take = take
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)

    def start(self) -> None:
        """Starts sampling."""
        self._thread.start()

    def stop(self) -> None:
        """Stops sampling, after a last sample."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            while True:
                self._write(fd)
                if self._stop.wait(self.interval_s):
                    self._write(fd)
                    return
        finally:
            os.close(fd)

    def _write(self, fd: int) -> None:
        try:
            s = self.take()
            os.write(fd, (json.dumps(s.__dict__) + "\n").encode())
        except (OSError, psutil.Error) as e:
            log.warning("memory sample skipped: %s", e)


def slope_per_hour(points: Sequence[tuple[float, float]]) -> float:
    """Takes (seconds, MiB) points, at least two at different times. Returns the least-squares
    slope in MiB per hour."""
    mean_t = statistics.fmean(t for t, _m in points)
    mean_m = statistics.fmean(m for _t, m in points)
    num = sum((t - mean_t) * (m - mean_m) for t, m in points)
    den = sum((t - mean_t) ** 2 for t, _m in points)
    return num / den * 3600.0


def memory_judgement(samples: Iterable[Sample], start: float | None,
                     end: float | None) -> dict[str, Any]:
    """Takes the samples and the main phase's start and end (unix s; None: unknown). Returns the
    memory part of the health section: the phase's samples, the harness's memory at its first
    and last and its most (MiB), the slope (MiB/h) and the growth it makes over the phase,
    `memory`: "flat", "grew" or "unknown" (module docstring), and `by_process`: the same
    figures (first, last, most, slope) of the controller and of its workers apart, which
    judge nothing (the judgement is of both together)."""
    inside = [s for s in samples if start is not None and end is not None
              and start <= s.at_unix <= end]
    out: dict[str, Any] = {"memory": "unknown", "samples": len(inside)}
    if len(inside) < MIN_SAMPLES or inside[-1].at_unix <= inside[0].at_unix:
        out["memory_reason"] = (f"{len(inside)} memory samples in the main phase (needs "
                                f"{MIN_SAMPLES})")
        return out
    points = [(s.at_unix - inside[0].at_unix, s.total_mb) for s in inside]
    slope = slope_per_hour(points)
    growth = slope * (points[-1][0]) / 3600.0
    median = statistics.median(m for _t, m in points)
    grew = growth > max(GROWTH_FLOOR_MB, GROWTH_SHARE * median)
    out.update(memory="grew" if grew else "flat", **_figures(points, slope),
               growth_mb=round(growth, 1), most_workers=max(s.workers for s in inside),
               by_process={"controller": _figures([(s.at_unix - inside[0].at_unix,
                                                    s.controller_rss / MIB) for s in inside]),
                           "workers": _figures([(s.at_unix - inside[0].at_unix,
                                                 s.workers_rss / MIB) for s in inside])})
    return out


def _figures(points: Sequence[tuple[float, float]],
             slope: float | None = None) -> dict[str, float]:
    """Takes (seconds, MiB) points, at least two at different times, and their slope when it is
    known already. Returns the memory at the first and the last and the most (MiB), and the
    least-squares slope (MiB/h), rounded."""
    return {"first_mb": round(points[0][1], 1), "last_mb": round(points[-1][1], 1),
            "max_mb": round(max(m for _t, m in points), 1),
            "slope_mb_per_h": round(slope_per_hour(points) if slope is None else slope, 1)}


def history_lines(path: Path) -> int | None:
    """Takes a history.jsonl. Returns how many lines it holds (None when it is not there)."""
    if not path.exists():
        return None
    count = 0
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            count += chunk.count(b"\n")
    return count


def health_section(run_dir: Path, test_info: dict[str, Any] | None) -> dict[str, Any] | None:
    """Takes a run directory and its test.json's content. Returns results.json's `health`
    section (module docstring), None for a run without memory samples (one made before the
    sampler, or a bare history)."""
    samples = read_samples(run_dir)
    if not samples:
        return None
    info = test_info or {}
    out = memory_judgement(samples, info.get("main_started_unix"), info.get("main_ended_unix"))
    written, lines = info.get("history_ops"), history_lines(run_dir / store.HISTORY)
    out.update(history_ops=written, history_lines=lines,
               history_complete=None if written is None or lines is None else lines == written)
    delay = info.get("verdict_after_main_s")
    out.update(verdict_after_main_s=delay, verdict_bound_s=VERDICT_BOUND_S,
               verdict_in_time=None if delay is None else delay <= VERDICT_BOUND_S)
    return out


def record_verdict_delay(run_dir: Path, results: dict[str, Any],
                         clock: Callable[[], float] = time.time) -> dict[str, Any]:
    """Takes a run directory whose first check just ended, its results and a wall clock.
    Records in test.json how long after the main phase's end the verdict came
    (`verdict_after_main_s`; not for a run whose main phase never ended), and writes results
    with their `health` section made again with it. Returns the results."""
    test_path = run_dir / store.TEST
    info = store.read_json(test_path) if test_path.exists() else None
    ended = (info or {}).get("main_ended_unix")
    if info is None or ended is None:
        return results
    info["verdict_after_main_s"] = round(clock() - float(ended), 1)
    store.write_json(test_path, info)
    section = health_section(run_dir, info)
    if section is None:
        return results
    results = {**results, "health": section}
    store.write_json(run_dir / store.RESULTS, results)
    return results
