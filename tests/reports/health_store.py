"""A planted run with the harness's health: health.jsonl's memory samples (before, through and
after the main phase), results.json's health section as the check writes it (harness.health),
test.json's main phase on the wall clock, and a history with a partition of n3 from about 2 s
to 5 s for the shading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.checkers.histories import Builder

RUN = "20261127T180000.000000Z"
START = 1_795_800_000.0  # the history's time 0 (test.json's history_start_unix)
MIB = 1024 * 1024
# (seconds after START, controller MiB, workers MiB, workers): the main phase is 1 s to 8 s, so
# the first sample is before it and the last (the check's Spark workers) after it.
SAMPLES: tuple[tuple[float, int, int, int], ...] = (
    (0.0, 100, 0, 0), (2.0, 110, 0, 0), (4.0, 120, 50, 1), (6.0, 130, 60, 1),
    (8.0, 140, 70, 1), (10.0, 300, 900, 3))


def health(**changes: Any) -> dict[str, Any]:
    """results.json's health section, a memory judged flat (with the figures the check gave,
    both together and each process apart: planted, never the samples' own), the history
    complete and the verdict in time; `changes` replace fields."""
    return {"memory": "flat", "samples": 4, "first_mb": 110.0, "last_mb": 210.0,
            "max_mb": 210.0, "slope_mb_per_h": 12.3, "growth_mb": 0.1, "most_workers": 1,
            "by_process": {"controller": {"first_mb": 110.0, "last_mb": 140.0, "max_mb": 140.0,
                                          "slope_mb_per_h": 4.5},
                           "workers": {"first_mb": 0.0, "last_mb": 70.0, "max_mb": 70.0,
                                       "slope_mb_per_h": 7.8}},
            "history_ops": 170, "history_lines": 170, "history_complete": True,
            "verdict_after_main_s": 41.5, "verdict_bound_s": 120.0, "verdict_in_time": True,
            **changes}


def results(section: dict[str, Any] | None) -> dict[str, Any]:
    """A valid run's results, with the health section given (None: none)."""
    out: dict[str, Any] = {
        "valid": True,
        "queue": {"valid": True, "attempt_count": 80, "acknowledged_count": 80, "ok_count": 80,
                  "lost_count": 0, "unexpected_count": 0, "duplicated_count": 0,
                  "recovered_count": 0, "drain_complete": True}}
    if section is not None:
        out["health"] = section
    return out


def sample_lines(samples: tuple[tuple[float, int, int, int], ...] = SAMPLES) -> str:
    """Returns health.jsonl's text for the samples, as harness.health writes it."""
    return "".join(json.dumps({"at_unix": START + t, "controller_rss": c * MIB,
                               "workers_rss": w * MIB, "workers": n}) + "\n"
                   for t, c, w, n in samples)


def make_run(store: Path, section: dict[str, Any] | None = None, samples: bool = True) -> Path:
    """Writes the planted run under store/health/RUN: its history, test.json, results.json with
    the health section given (None: `health()`; {} : none) and health.jsonl (unless `samples`
    is false). Returns its directory."""
    run = store / "health" / RUN
    run.mkdir(parents=True)
    with Builder(run / "history.jsonl") as b:
        b.phase("main", "start")
        for k in range(80):
            b.at(100 * k).publish(1, k)
            b.at(100 * k + 20).deliver(5, f"1-{k}")
            b.ack(5, f"1-{k}")
            if k == 20:
                b.at(2050).nemesis("start-partition", {"n3": ["n1", "n2"]}, node="n3")
            if k == 50:
                b.at(5050).nemesis("stop-partition", None)
        b.at(8000).phase("main", "end")
    chosen = health() if section is None else section
    (run / "results.json").write_text(json.dumps(results(chosen or None)), encoding="utf-8")
    (run / "test.json").write_text(json.dumps({
        "name": "health", "seed": 1, "history_start_unix": START,
        "main_started_unix": START + 1.0, "main_ended_unix": START + 8.0}), encoding="utf-8")
    if samples:
        (run / "health.jsonl").write_text(sample_lines(), encoding="utf-8")
    return run
