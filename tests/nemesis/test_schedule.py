"""Tests for nemesis.schedule: the seeded schedule of healthy and fault periods."""

from __future__ import annotations

from nemesis.options import NemesisOptions
from nemesis.schedule import Step, plan

NODES = ["n1", "n2", "n3"]


def test_plan_alternates_healthy_and_fault_starting_healthy() -> None:
    opts = NemesisOptions(faults=("kill", "pause"), interval_s=2, duration_s=3)
    steps = plan(opts, 1, 10)
    assert [s.kind for s in steps] == ["healthy", "fault"] * 5
    assert all(s.seconds == 2 for s in steps[::2])
    assert all(s.seconds == 3 and s.fault in ("kill", "pause") for s in steps[1::2])
    assert steps[0] == Step("healthy", 2)


def test_same_seed_same_sequence_other_seed_other_sequence() -> None:
    opts = NemesisOptions(faults=("kill", "pause", "partition-halves", "partition-one"))
    assert plan(opts, 123, 40) == plan(opts, 123, 40)
    assert plan(opts, "abc", 40) == plan(opts, "abc", 40)
    assert plan(opts, 123, 40) != plan(opts, 124, 40)
    assert len({s.fault for s in plan(opts, 123, 40) if s.fault}) > 1


def test_a_repeated_name_weighs_more() -> None:
    opts = NemesisOptions(faults=("kill", "kill", "kill", "pause"))
    faults = [s.fault for s in plan(opts, 0, 800) if s.fault]
    assert faults.count("kill") > 2 * faults.count("pause")


def test_no_faults_is_a_control_run() -> None:
    opts = NemesisOptions(faults=()).validate(NODES)
    assert {s.kind for s in plan(opts, 0, 5)} == {"healthy"}
