"""The harness's own health over a run (no cluster): its memory sampled into health.jsonl, judged
flat or grown over the main phase, its history's completeness and its verdict's delay."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness import health, store
from harness.health import (
    MIB,
    MemorySampler,
    Sample,
    health_section,
    is_worker,
    memory_judgement,
    read_samples,
    record_verdict_delay,
    slope_per_hour,
)


def samples(mbs, start=1000.0, every=10.0, workers_mb=0.0):
    return [Sample(start + k * every, int(mb * MIB), int(workers_mb * MIB), 1 if workers_mb else 0)
            for k, mb in enumerate(mbs)]


def test_the_slope_is_the_least_squares_fit_in_mib_per_hour():
    assert slope_per_hour([(0.0, 100.0), (1800.0, 110.0), (3600.0, 120.0)]) == pytest.approx(20.0)
    assert slope_per_hour([(0.0, 5.0), (10.0, 5.0)]) == 0.0


def test_memory_that_wanders_is_flat_and_memory_that_climbs_with_time_grew():
    hour = 360  # samples every 10 s over an hour
    wander = [200 + (7 if k % 3 else -5) for k in range(hour)]  # +-7 MiB noise, no trend
    flat = memory_judgement(samples(wander), 1000.0, 1000.0 + 3600)
    assert flat["memory"] == "flat" and flat["samples"] == hour
    assert abs(flat["growth_mb"]) < 5 and flat["first_mb"] == 195.0
    leak = [200 + k * 0.2 for k in range(hour)]  # 72 MiB over the hour
    grew = memory_judgement(samples(leak), 1000.0, 1000.0 + 3600)
    assert grew["memory"] == "grew" and grew["slope_mb_per_h"] == pytest.approx(72.0, abs=0.5)
    # A workers' leak counts too (the controller is flat, its worker process grows).
    workers = [Sample(1000.0 + 10 * k, 200 * MIB, int((100 + 0.2 * k) * MIB), 1)
               for k in range(hour)]
    leaking = memory_judgement(workers, 1000.0, 4600.0)
    assert leaking["memory"] == "grew"
    # Each process's own figures, apart: the controller flat at 200 MiB, the workers climbing.
    controller, worker = leaking["by_process"]["controller"], leaking["by_process"]["workers"]
    assert controller == {"first_mb": 200.0, "last_mb": 200.0, "max_mb": 200.0,
                          "slope_mb_per_h": 0.0}
    assert (worker["first_mb"], worker["last_mb"], worker["max_mb"]) == (100.0, 171.8, 171.8)
    assert worker["slope_mb_per_h"] == pytest.approx(72.0, abs=0.5)
    assert leaking["slope_mb_per_h"] == pytest.approx(worker["slope_mb_per_h"], abs=0.1)
    # Below the floor (32 MiB) a slow climb is flat; only the main phase's samples count.
    slow = [200 + k * 0.05 for k in range(hour)]
    assert memory_judgement(samples(slow), 1000.0, 4600.0)["memory"] == "flat"
    before = samples([50, 60, *wander], start=980.0)
    assert memory_judgement(before, 1000.0, 4600.0)["first_mb"] == 195.0
    too_few = memory_judgement(samples([200, 400]), 1000.0, 4600.0)
    assert too_few["memory"] == "unknown" and "2 memory samples" in too_few["memory_reason"]
    assert memory_judgement(samples(wander), None, None)["memory"] == "unknown"


def test_only_the_harness_s_own_descendants_are_its_workers():
    assert is_worker("python3") and is_worker("python3.12") and is_worker("java")
    assert not is_worker("beam.smp") and not is_worker("epmd") and not is_worker("ip")


CONTROLLER = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
subprocess.Popen(["sleep", "30"])
time.sleep(30)
"""


def test_a_sample_counts_a_process_and_its_python_children_not_others():
    # A controller of its own, so that no other child of the test process (an earlier test's
    # Spark JVM, a pytest-xdist worker's) is counted: one python child, one that is not.
    controller = subprocess.Popen([sys.executable, "-c", CONTROLLER])
    proc = psutil.Process(controller.pid)
    try:
        for _ in range(100):  # both children started, the python one exec'd
            kids = proc.children(recursive=True)
            if len(kids) == 2 and any(k.name().startswith("python") for k in kids):
                break
            time.sleep(0.05)
        s = health.sample(proc, clock=lambda: 5.0)
        assert s.at_unix == 5.0
        assert s.workers == 1 and s.workers_rss > 1 * MIB
        own = proc.memory_info().rss
        assert 0.5 * own < s.controller_rss < 2 * own
    finally:
        for p in [*proc.children(recursive=True), proc]:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        controller.wait()


def test_the_sampler_writes_a_line_at_once_every_interval_and_as_it_stops(tmp_path):
    calls = []

    def take():
        calls.append(1)
        return Sample(float(len(calls)), 100 * MIB, 0, 0)

    sampler = MemorySampler(tmp_path, interval_s=0.05, take=take)
    sampler.start()
    deadline = time.monotonic() + 30  # four samples, however loaded the machine
    while len(calls) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    sampler.stop()
    got = read_samples(tmp_path)
    assert len(got) == len(calls) >= 4
    assert [s.at_unix for s in got] == [float(k) for k in range(1, len(got) + 1)]
    # A torn last line (a run cut short) is left out; a run without samples has none.
    with (tmp_path / store.HEALTH).open("a") as f:
        f.write('{"at_unix": 9')
    assert len(read_samples(tmp_path)) == len(got)
    assert read_samples(tmp_path / "none") == []


def test_a_failed_sample_is_skipped_never_the_run_s_failure(tmp_path):
    def broken():
        raise psutil.AccessDenied(1)

    sampler = MemorySampler(tmp_path, interval_s=0.01, take=broken)
    sampler.start()
    time.sleep(0.05)
    sampler.stop()
    assert read_samples(tmp_path) == []


def run_dir(tmp_path: Path, ops: int, lines: int, **info) -> Path:
    run = tmp_path / "run"
    run.mkdir(parents=True)
    (run / store.HISTORY).write_text("".join(f'{{"index": {k}}}\n' for k in range(lines)))
    store.write_json(run / store.TEST, {"history_ops": ops, "main_started_unix": 1000.0,
                                        "main_ended_unix": 1000.0 + 3600, **info})
    (run / store.HEALTH).write_text("".join(
        json.dumps(s.__dict__) + "\n" for s in samples([200 + k % 2 for k in range(361)])))
    return run


def test_the_health_section_says_memory_history_and_verdict_delay(tmp_path):
    run = run_dir(tmp_path, ops=40, lines=40, verdict_after_main_s=95.0)
    section = health_section(run, store.read_json(run / store.TEST))
    assert section["memory"] == "flat" and section["samples"] == 361
    assert (section["history_ops"], section["history_lines"], section["history_complete"]) == \
        (40, 40, True)
    assert section["verdict_after_main_s"] == 95.0 and section["verdict_in_time"] is True
    assert "valid" not in section  # the harness's health is never part of RabbitMQ's verdict
    torn = run_dir(tmp_path / "torn", ops=40, lines=37)
    section = health_section(torn, store.read_json(torn / store.TEST))
    assert section["history_complete"] is False and section["verdict_in_time"] is None
    (torn / store.HEALTH).unlink()
    assert health_section(torn, store.read_json(torn / store.TEST)) is None


def test_the_verdict_s_delay_is_recorded_after_the_first_check(tmp_path):
    run = run_dir(tmp_path, ops=3, lines=3)
    results = {"valid": True, "queue": {"valid": True}}
    got = record_verdict_delay(run, results, clock=lambda: 1000.0 + 3600 + 130.04)
    assert store.read_json(run / store.TEST)["verdict_after_main_s"] == 130.0
    assert got["health"]["verdict_after_main_s"] == 130.0
    assert got["health"]["verdict_in_time"] is False  # beyond two minutes
    assert store.read_json(run / store.RESULTS) == got and got["valid"] is True
    # A run whose main phase never ended has no delay to tell.
    info = store.read_json(run / store.TEST)
    del info["main_ended_unix"], info["verdict_after_main_s"]
    store.write_json(run / store.TEST, info)
    assert record_verdict_delay(run, results) == results
    assert "verdict_after_main_s" not in store.read_json(run / store.TEST)


def test_a_check_adds_the_health_section_beside_the_checker_s(tmp_path, monkeypatch):
    import checkers
    from harness.check import check_run

    run = run_dir(tmp_path, ops=2, lines=2, verdict_after_main_s=40.0)
    monkeypatch.setattr(checkers, "check_history", lambda *a, **k: {
        "queue": {"valid": True}, "liveness": {"valid": True}})
    results = check_run(run)
    assert results["health"]["memory"] == "flat" and results["health"]["verdict_in_time"]
    assert results["valid"] is True
