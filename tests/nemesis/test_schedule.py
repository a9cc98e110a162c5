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


def test_a_seed_plays_the_same_faults_as_before_entries_had_options_of_their_own() -> None:
    # Plans printed by the schedule before fault entries took options (one interval and duration).
    opts = NemesisOptions(faults=("kill", "pause", "partition-halves", "kill@leader"),
                          interval_s=3, duration_s=4)
    assert [(s.kind, s.seconds, s.fault) for s in plan(opts, 2024, 12)] == [
        ("healthy", 3, None), ("fault", 4, "kill@leader"), ("healthy", 3, None),
        ("fault", 4, "kill"), ("healthy", 3, None), ("fault", 4, "partition-halves"),
        ("healthy", 3, None), ("fault", 4, "pause"), ("healthy", 3, None),
        ("fault", 4, "partition-halves"), ("healthy", 3, None), ("fault", 4, "kill")]
    partition = NemesisOptions(faults=("partition-random-halves", "partition-one"),
                               interval_s=10, duration_s=20)
    assert [s.fault for s in plan(partition, 5, 8)[1::2]] == [
        "partition-random-halves", "partition-random-halves", "partition-one", "partition-one"]


def test_each_entry_plays_its_own_interval_and_duration_the_rest_the_defaults() -> None:
    opts = NemesisOptions(faults=("partition-leader", "kill@leader:duration=10:interval=20"),
                          order="cycle", interval_s=15, duration_s=5).validate(NODES)
    assert plan(opts, 1, 8) == [
        Step("healthy", 15), Step("fault", 5, "partition-leader"),
        Step("healthy", 20.0), Step("fault", 10.0, "kill@leader:duration=10:interval=20"),
    ] * 2
    drawn = NemesisOptions(faults=("pause", "kill:duration=1"), interval_s=2, duration_s=3)
    for healthy, fault in zip(plan(drawn, 9, 40)[::2], plan(drawn, 9, 40)[1::2], strict=True):
        assert (healthy.seconds, fault.seconds) == ((2, 1.0) if fault.fault == "kill:duration=1"
                                                    else (2, 3))


def test_same_seed_same_faults_whatever_the_entries_own_timings() -> None:
    plain = NemesisOptions(faults=("kill", "pause", "partition-halves"))
    timed = NemesisOptions(faults=("kill:duration=1", "pause:interval=7", "partition-halves"))
    names = [s.fault.split(":")[0] for s in plan(timed, 3, 30) if s.fault]
    assert names == [s.fault for s in plan(plain, 3, 30) if s.fault]
