"""The runner's time after the last heal (harness.runner.Run.after_heal, TestSpec.after_heal_s):
the workload runs on until confirms and deliveries are back or the limit passes, and test.json
says which. A Run without a cluster: its history, its watch and its spec only."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest

from checkers.resume_watch import ResumeWatch
from harness import store
from harness.progress import ObservedHistory
from harness.runner import Run
from harness.spec import SpecError, TestSpec
from history import NEMESIS, Op


def _run(tmp_path: Path, spec: TestSpec) -> Run:
    run = Run.__new__(Run)
    run.spec = spec
    run.watch = ResumeWatch()
    run.history = ObservedHistory(tmp_path / store.HISTORY, run.watch.observe)
    run.test_info = {"after_heal": {"limit_s": spec.after_heal_limit_s()}}
    return run


def _fault_then_heal(run: Run) -> None:
    for f in ("start-partition", "stop-partition"):
        for t in ("invoke", "info"):
            run.history.append(Op(type=t, process=NEMESIS, f=f, node="n3",
                                  value={"fault": "partition-one", "nodes": ["n3"]}))


def _client(run: Run, f: str, type_: str = "ok", node: str = "n1", pid: int = 1) -> None:
    run.history.append(Op(type=type_, process=pid, f=f, value="1-0", node=node, queue="q",
                          phase="main"))


def test_the_default_limit_is_the_liveness_bound_plus_a_publish_and_a_reconnection():
    spec = TestSpec()
    assert spec.liveness_bound().bound_ns == 42_500_000_000  # 1.25 x 10 s + 30 s of grace
    assert spec.after_heal_limit_s() == 42.5 + 5.0 + 3.0
    assert dataclasses.replace(spec, after_heal_s=7.0).after_heal_limit_s() == 7.0
    with pytest.raises(SpecError, match="after_heal_s must be >= 0"):
        dataclasses.replace(spec, after_heal_s=-1.0).validate()


def test_the_workload_runs_on_until_everything_is_back(tmp_path):
    run = _run(tmp_path, dataclasses.replace(TestSpec(), after_heal_s=30.0))
    _client(run, "consume", node="n2", pid=9)  # fed before the fault
    _fault_then_heal(run)

    def back() -> None:
        time.sleep(0.3)
        _client(run, "publish", "invoke")
        _client(run, "publish")
        _client(run, "consume", node="n2", pid=9)
        _client(run, "ack", node="n2", pid=9)

    t = threading.Thread(target=back)
    t.start()
    t0 = time.monotonic()
    run.after_heal()
    t.join()
    info = run.test_info["after_heal"]
    assert info["ended"] == "resumed" and time.monotonic() - t0 < 5
    assert 0.2 < info["ran_s"] < 5 and info["last_heal_s"] is not None


def test_a_queue_that_never_comes_back_is_given_the_whole_limit(tmp_path):
    run = _run(tmp_path, dataclasses.replace(TestSpec(), after_heal_s=1.0))
    _client(run, "consume", node="n2", pid=9)
    _fault_then_heal(run)
    _client(run, "publish", "invoke")  # never confirmed
    run.after_heal()
    info = run.test_info["after_heal"]
    assert info["ended"] == "limit" and 0.9 <= info["after_heal_s"] < 2.0


@pytest.mark.parametrize("spec_kw, faults, ended", [
    ({}, False, "no healed fault"),
    ({"after_heal_s": 0.0}, True, "off"),
])
def test_no_time_is_added_without_a_healed_fault_or_when_asked(tmp_path, spec_kw, faults, ended):
    run = _run(tmp_path, dataclasses.replace(TestSpec(), **spec_kw))
    if faults:
        _fault_then_heal(run)
    t0 = time.monotonic()
    run.after_heal()
    assert run.test_info["after_heal"]["ended"] == ended
    assert run.test_info["after_heal"]["ran_s"] == 0.0 and time.monotonic() - t0 < 0.5


def test_staying_clients_are_given_the_bound_even_when_everything_is_back(tmp_path):
    spec = dataclasses.replace(TestSpec(), recovery_timeout_s=0.5,
                               broker=dataclasses.replace(TestSpec().broker, net_ticktime=1))
    staying = dataclasses.replace(spec, workload=dataclasses.replace(spec.workload, stay="both"))
    assert spec.after_heal_floor_s() == 0.0 and staying.after_heal_floor_s() == 2.75
    assert dataclasses.replace(staying, after_heal_s=0.0).after_heal_floor_s() == 0.0
    run = _run(tmp_path, dataclasses.replace(staying, after_heal_s=30.0))
    _fault_then_heal(run)
    _client(run, "publish", "invoke")
    _client(run, "publish")  # confirms back at once: a retiring run would stop here
    run.after_heal()
    info = run.test_info["after_heal"]
    assert info["ended"] == "resumed" and 2.7 <= info["after_heal_s"] < 4.0


def test_a_staying_publisher_must_wait_at_least_the_bound_for_a_confirm():
    w = dataclasses.replace(TestSpec().workload, stay="publishers", confirm_deadline_s=42.0)
    with pytest.raises(SpecError, match=r"--confirm-deadline 42 s is shorter than the liveness "
                                        r"bound 42.5 s"):
        dataclasses.replace(TestSpec(), workload=w).validate()
    dataclasses.replace(TestSpec(), workload=dataclasses.replace(w, stay="consumers")).validate()
    dataclasses.replace(TestSpec(), workload=dataclasses.replace(w, confirm_deadline_s=43.0)
                        ).validate()
