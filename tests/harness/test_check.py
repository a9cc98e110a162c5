"""harness.check: the run section, and checking a stored run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import check, store
from tests.checkers.histories import Builder

UNHEALTHY = {
    "healthy": False, "seconds": 300.0,
    "actions": [{"node": "n1", "action": "kill-restart", "reason": "x", "outcome": "done"}],
    "last_status": [
        {"node": "rabbit@n1", "running": False, "running_nodes": [], "partitions": {},
         "error": "nodedown"},
        {"node": "rabbit@n2", "running": True, "running_nodes": ["rabbit@n2", "rabbit@n3"],
         "partitions": {}, "error": None},
        {"node": "rabbit@n3", "running": True, "running_nodes": ["rabbit@n2", "rabbit@n3"],
         "partitions": {"rabbit@n3": ["rabbit@n1"]}, "error": None},
    ],
}


def test_an_incomplete_drain_is_the_queue_sections_business() -> None:
    # The queue section reads the drain's end from the history; counting it here too would make
    # a run with nothing lost unknown.
    r = check.run_section({"interrupted": False, "error": None,
                           "drain": {"complete": False, "errors": {"n1": "timeout"}}})
    assert r == {"valid": True, "problems": [], "recovery_actions": 0, "unhealthy_nodes": [],
                 "unrecoverable_nodes": []}


def test_a_cluster_that_never_recovered_is_named() -> None:
    r = check.run_section({"recovery": UNHEALTHY})
    assert r["valid"] == "unknown" and r["recovery_actions"] == 1
    assert r["unhealthy_nodes"] == [
        {"node": "rabbit@n1", "why": "not running: nodedown"},
        {"node": "rabbit@n2", "why": "sees only rabbit@n2, rabbit@n3 running"},
        {"node": "rabbit@n3", "why": "partitioned from rabbit@n1"},
    ]
    (problem,) = r["problems"]
    assert "did not recover" in problem and "rabbit@n1 not running: nodedown" in problem


def test_unknown_for_an_interrupted_failed_or_unrecorded_run() -> None:
    assert check.run_section({"interrupted": True})["valid"] == "unknown"
    assert check.run_section({"error": "boom"})["problems"] == ["run error: boom"]
    assert check.run_section({"recovery": {"healthy": False}})["problems"] == [
        "cluster did not recover after the faults"]
    assert check.run_section({"recovery": {"healthy": True, "actions": []}})["valid"] is True
    assert check.run_section(None)["valid"] == "unknown"


def stored_run(tmp_path: Path, test_info: dict[str, Any], lost: bool) -> Path:
    tmp_path.mkdir(parents=True)
    with Builder(tmp_path / store.HISTORY) as b:
        b.publish(1, 0)
        b.publish(1, 1)
        b.consume(5, "1-0")
        if not lost:
            b.consume(5, "1-1")
        b.drain_end("incomplete", complete=False, reason="queue not drained: timeout")
    (tmp_path / store.TEST).write_text(json.dumps(test_info))
    return tmp_path


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_check_run_with_an_incomplete_drain(tmp_path: Path) -> None:
    info = {"interrupted": False, "error": None, "drain": {"complete": False},
            "recovery": {"healthy": True, "actions": []}, "spec": {"check": {}}}
    r = check.check_run(stored_run(tmp_path / "a", info, lost=False))
    assert r["valid"] is True and r["run"]["valid"] is True
    assert json.loads((tmp_path / "a" / store.RESULTS).read_text()) == r
    r = check.check_run(stored_run(tmp_path / "b", info, lost=True))
    assert r["valid"] == "unknown" and r["queue"]["valid"] == "unknown"
    assert "queue not drained: timeout" in r["queue"]["reason"]
    assert check.exit_code(r) == 2


def test_the_liveness_bound_comes_from_the_spec_with_defaults_for_older_runs() -> None:
    bound = check.liveness_bound({"spec": {"broker": {"net_ticktime": 20},
                                           "recovery_timeout_s": 100.0}})
    assert bound is not None
    assert (bound.net_ticktime_s, bound.grace_s, bound.recovery_timeout_s) == (20.0, 60.0, 100.0)
    assert bound.bound_ns == 85_000_000_000  # 1.25 x 20 + min(3 x 20, 100)
    older = check.liveness_bound({"spec": {"check": {}}})  # the defaults: 10 s, 30 s, 240 s
    assert older is not None and older.bound_ns == 42_500_000_000
    assert check.liveness_bound(None) is None and check.liveness_bound({}) is None


def test_a_liveness_section_counts_in_the_verdict_only_when_false() -> None:
    unknown = {"valid": "unknown", "composes_only_when_false": True}
    assert check.compose_valid({"queue": {"valid": True}, "liveness": unknown}) is True
    assert check.compose_valid({"queue": {"valid": True},
                                "liveness": {**unknown, "valid": False}}) is False


def test_the_verdict_summary_prints_the_liveness_line() -> None:
    from harness.cli import summary

    lines = summary({"valid": True, "queue": {"valid": True}, "liveness": {
        "valid": "unknown", "composes_only_when_false": True,
        "summary": "unknown: the main phase ran 0.1 s after the last heal, less than the "
                   "bound (42.5 s)"}}).splitlines()
    assert lines[-1] == ("liveness: unknown: the main phase ran 0.1 s after the last heal, less "
                         "than the bound (42.5 s)  [unknown (counts only when false)]")
    lines = summary({"valid": False, "liveness": {"valid": False, "summary": "1 finding(s)"}}
                    ).splitlines()
    assert lines[-1] == "liveness: 1 finding(s)  [False]"
