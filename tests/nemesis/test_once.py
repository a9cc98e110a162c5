"""Tests of explicit schedules played once: options, steps, the interpreter on the clock, and a
history's played faults read back as such a schedule (nemesis.played)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from history import HARNESS, NEMESIS, HistoryWriter, Op, read_history
from nemesis.errors import NemesisConfigError, ScheduleError
from nemesis.interpreter import NemesisInterpreter
from nemesis.options import NemesisOptions
from nemesis.played import played_faults, played_options, played_schedule, untimed
from nemesis.schedule import Step, plan
from tests.nemesis.fakes import FakeBroker, FakeCluster

pytestmark = pytest.mark.timeout(30)

NODES = ["n1", "n2", "n3"]
S = 1_000_000_000


def once(*items: tuple[float, str, float], **opts: Any) -> NemesisOptions:
    return NemesisOptions.played_once(items, **opts)


# -- options -------------------------------------------------------------------------------------

def test_played_once_derives_the_faults_and_validates() -> None:
    opts = once((5, "kill@n2", 10), (20, "partition-halves", 5), (30, "kill@n2", 1))
    assert opts.order == "once" and opts.faults == ("kill@n2", "partition-halves")
    assert opts.validate(NODES, time_limit_s=31) is opts
    assert [(e.text, d) for e, d in opts.timed_entries()] == [
        ("kill@n2", 10.0), ("partition-halves", 5.0), ("kill@n2", 1.0)]
    assert opts.to_dict()["schedule"] == [[5, "kill@n2", 10], [20, "partition-halves", 5],
                                          [30, "kill@n2", 1]]
    assert NemesisOptions.from_dict(opts.to_dict()) == opts
    assert once().validate(NODES).faults == ()  # an empty schedule: a control run


@pytest.mark.parametrize("items,message,index", [
    (((-1, "kill", 5),), "start_s must be >= 0", 0),
    (((0, "kill", 0),), "duration_s must be > 0", 0),
    (((0, "kill", float("nan")),), "duration_s must be a finite number", 0),
    (((0, "kill", "5"),), "duration_s must be a finite number", 0),
    (((0, "kill", 5), (4, "pause", 5)),
     "scheduled fault 2 (pause) starts at 4 s, before scheduled fault 1 (kill) ends at 5 s", 1),
    (((10, "kill", 5), (0, "pause", 5)), "before scheduled fault 1 (kill) ends at 15 s", 1),
    (((0, "partition-sideways", 5),), "unknown fault 'partition-sideways'", 0),
    (((0, "kill@n7", 5),), "scheduled fault 1 (kill@n7): targets 'n7' names n7", 0),
    (((0, "kill:duration=3", 5),), "its entry takes no duration", 0),
    (((0, "partition-majorities-ring", 5),), "needs at least 3 nodes", 0),
    (((0, "packet-loss:packet_loss=2", 5),), "packet_loss is a probability", 0),
    (((0, "kill", 5), (50, "pause", 20)), "ends at 70 s, past the main phase's 60 s", 1),
    (((0, "kill"),), "must be (start_s, entry, duration_s)", 0),
])
def test_bad_schedules_say_which_item_and_why(items: Any, message: str, index: int) -> None:
    opts = NemesisOptions(faults=(), order="once", schedule=items)
    nodes = ["n1", "n2"] if "majorities" in message or "at least 3" in message else NODES
    with pytest.raises(ScheduleError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        opts.validate(nodes, time_limit_s=60)
    assert e.value.index == index


def test_a_schedule_goes_with_order_once_and_its_own_faults() -> None:
    with pytest.raises(ScheduleError, match="played with order 'once', not 'random'"):
        NemesisOptions(schedule=((0, "kill", 5),)).validate(NODES)
    with pytest.raises(ScheduleError, match=r"faults are the schedule's entries \(kill\)"):
        NemesisOptions(faults=("pause",), order="once", schedule=((0, "kill", 5),)).validate()


def test_a_fault_the_phase_end_cuts_a_little_is_allowed_as_the_interpreter_allows() -> None:
    once((40, "kill", 20.5)).validate(NODES, time_limit_s=60)  # cut 0.5 s: within the slack
    with pytest.raises(NemesisConfigError, match="at most 1.1 s"):
        once((40, "kill", 22)).validate(NODES, time_limit_s=60)


def test_the_seeded_schedules_are_untouched_by_a_once_field() -> None:
    opts = NemesisOptions(faults=("kill", "pause"), interval_s=2, duration_s=3)
    assert opts.schedule == () and plan(opts, 1, 4)[0] == Step("healthy", 2)


# -- steps -----------------------------------------------------------------------------------------

def test_once_steps_wait_for_each_start_then_end() -> None:
    opts = once((5, "kill@n2", 10), (15, "pause", 2), (30, "kill@n2", 1))
    assert plan(opts, 99, 100) == [
        Step("healthy", 5, None, 5), Step("fault", 10, "kill@n2", 15),
        Step("healthy", 0, None, 15), Step("fault", 2, "pause", 17),
        Step("healthy", 13, None, 30), Step("fault", 1, "kill@n2", 31),
    ]
    assert plan(opts, 1, 100) == plan(opts, 2, 100)  # drawn from nothing


# -- the interpreter -------------------------------------------------------------------------------

class Rig:
    """An interpreter on a fake cluster with its history; `main` records a main phase start."""

    def __init__(self, tmp_path: Path, options: NemesisOptions, *, seed: int = 1,
                 name: str = "h.jsonl", size: int = 3) -> None:
        self.cluster = FakeCluster(size)
        self.broker = FakeBroker(names=[n.name for n in self.cluster.nodes])
        self.path = tmp_path / name
        self.history = HistoryWriter(self.path)
        self.options = options
        self.interpreter = NemesisInterpreter(self.cluster, self.broker, self.history, options,
                                              seed, "q", admin=self.broker)

    def main(self) -> None:
        self.history.append(Op(type="info", process=HARNESS, f="phase",
                               value={"phase": "main", "state": "start"}))

    def ops(self) -> list[Op]:
        return read_history(self.path)


def test_the_interpreter_plays_the_schedule_on_the_clock_then_stays_healthy(tmp_path) -> None:
    rig = Rig(tmp_path, once((0.3, "kill@n2", 0.4), (1.0, "pause@n1+n3", 0.3)))
    rig.main()
    rig.interpreter.start(deadline=time.monotonic() + 5)
    assert rig.interpreter.join(5)  # the schedule ends: the thread does not wait for the phase
    ops = rig.ops()
    nem = [o for o in ops if o.process == NEMESIS]
    assert [(o.type, o.f) for o in nem] == [
        ("invoke", "kill"), ("info", "kill"), ("invoke", "start"), ("info", "start"),
        ("invoke", "pause"), ("info", "pause"), ("invoke", "resume"), ("info", "resume")]
    invoked = [(o.time - ops[0].time) / S for o in nem if o.type == "invoke"]
    assert invoked == pytest.approx([0.3, 0.7, 1.0, 1.3], abs=0.1)  # on the clock, not after
    # each action: the stop is due duration_s after the start was due
    assert nem[0].value == {"fault": "kill", "entry": "kill@n2"} and nem[1].node == "n2"
    assert nem[5].value["nodes"] == ["n1", "n3"]
    assert rig.broker.all_running() and rig.interpreter.error is None


def test_a_bare_entry_is_recorded_by_its_name_alone(tmp_path) -> None:
    rig = Rig(tmp_path, once((0, "partition-halves", 0.05)))
    rig.interpreter.start()
    assert rig.interpreter.join(3)
    assert rig.ops()[0].value == {"fault": "partition-halves"}


def test_the_time_limit_refuses_what_it_would_cut_as_for_drawn_schedules(tmp_path) -> None:
    rig = Rig(tmp_path, once((0.1, "kill@n2", 5)))
    t0 = time.monotonic()
    rig.interpreter.start(deadline=t0 + 0.5)
    assert rig.interpreter.join(3)
    assert 0.4 < time.monotonic() - t0 < 2 and rig.ops() == []


def test_stopping_mid_schedule_ends_the_fault_in_hand(tmp_path) -> None:
    rig = Rig(tmp_path, once((0, "kill@n2", 60), (61, "pause", 1)))
    rig.interpreter.start()
    deadline = time.monotonic() + 5
    while rig.interpreter.active is None and time.monotonic() < deadline:
        time.sleep(0.005)
    rig.interpreter.stop()
    assert rig.interpreter.join(3)
    assert [(o.type, o.f) for o in rig.ops()] == [
        ("invoke", "kill"), ("info", "kill"), ("invoke", "start"), ("info", "start")]


# -- the schedule as played ------------------------------------------------------------------------

def nem(t: float, type_: str, f: str, value: dict[str, Any], **kw: Any) -> Op:
    return Op(type=type_, process=NEMESIS, f=f, value=value, time=int(t * S),  # type: ignore[arg-type]
              **kw)


def phase(t: float, state: str) -> Op:
    return Op(type="info", process=HARNESS, f="phase", value={"phase": "main", "state": state},
              time=int(t * S))


def test_a_histories_played_faults_become_a_schedule() -> None:
    opts = NemesisOptions(faults=("kill@leader:duration=10", "partition-random-halves",
                                  "pause"), targets="one")
    ops = [
        Op(type="info", process=HARNESS, f="phase", value={"phase": "setup", "state": "start"},
           time=0),
        phase(2.0, "start"),
        Op(type="invoke", process=0, f="publish", value="0-1", time=int(2.1 * S)),
        nem(12.0, "invoke", "kill", {"fault": "kill", "entry": "kill@leader:duration=10"}),
        nem(12.4, "info", "kill", {"fault": "kill", "nodes": ["n2"]}, node="n2"),
        nem(22.4, "invoke", "start", {"fault": "kill"}, node="n2"),
        nem(23.0, "info", "start", {"fault": "kill", "nodes": ["n2"]}, node="n2"),
        nem(33.0004, "invoke", "start-partition", {"fault": "partition-random-halves"}),
        nem(33.1, "info", "start-partition", {"fault": "partition-random-halves",
                                              "nodes": ["n1", "n2", "n3"]}, node="n1"),
        nem(53.1, "invoke", "stop-partition", {"fault": "partition-random-halves"}),
        nem(53.2, "info", "stop-partition", {"fault": "partition-random-halves"}),
        nem(60.0, "invoke", "pause", {"fault": "pause"}),  # a failed start: played all the same
        nem(60.1, "info", "pause", {"fault": "pause"}, error="FaultError: no"),
        nem(60.1, "invoke", "resume", {"fault": "pause"}),
        nem(60.2, "info", "resume", {"fault": "pause"}),
        nem(61.0, "invoke", "kill", {"fault": "kill", "entry": "kill@leader:duration=10"}),
        nem(61.2, "info", "kill", {"fault": "kill", "nodes": ["n1"]}, node="n1"),
        phase(62.0, "end"),
        nem(62.01, "invoke", "start", {"fault": "kill"}, node="n1"),
        Op(type="invoke", process=NEMESIS, f="heal", value={}, time=int(63 * S)),
    ]
    assert played_schedule(ops, opts) == (
        (10.0, "kill@leader", 10.4), (31.0, "partition-random-halves", 20.1),
        (58.0, "pause", 0.1), (59.0, "kill@leader", 1.01))
    assert [f.nodes for f in played_faults(ops, opts)] == [("n2",), ("n1", "n2", "n3"), None,
                                                          ("n1",)]
    again = played_options(ops, opts)
    assert again is not None and again.order == "once" and again.targets == "one"
    assert again.faults == ("kill@leader", "partition-random-halves", "pause")
    again.validate(NODES, time_limit_s=60)
    assert played_schedule(ops[:1], opts) is None and played_options(ops[:1], opts) is None


def test_a_fault_left_open_ends_at_the_heal_or_the_main_phases_end() -> None:
    opts = NemesisOptions(faults=("pause",))
    healed = [phase(0, "start"), nem(1, "invoke", "pause", {"fault": "pause"}),
              Op(type="invoke", process=NEMESIS, f="heal", value={}, time=4 * S)]
    assert played_schedule(healed, opts) == ((1.0, "pause", 3.0),)
    cut = [phase(0, "start"), nem(1, "invoke", "pause", {"fault": "pause"}), phase(9, "end")]
    assert played_schedule(cut, opts) == ((1.0, "pause", 8.0),)


def test_a_fault_whose_start_ran_past_the_phases_end_ends_there_as_replaying_it_would() -> None:
    opts = NemesisOptions(faults=("rolling-restart",), duration_s=5)
    ops = [phase(0, "start"),
           nem(50, "invoke", "start-rolling-restart", {"fault": "rolling-restart"}),
           nem(80, "info", "start-rolling-restart", {"fault": "rolling-restart"}),
           phase(80.1, "end"),
           nem(80.1, "invoke", "stop-rolling-restart", {"fault": "rolling-restart"})]
    assert played_schedule(ops, opts) == ((50.0, "rolling-restart", 30.1),)
    again = played_options(ops, opts, until_s=60)
    assert again is not None and again.schedule == ((50.0, "rolling-restart", 10.0),)
    again.validate(NODES, time_limit_s=60)


def test_an_older_history_maps_a_fault_to_the_first_entry_playing_it() -> None:
    opts = NemesisOptions(faults=("stop@follower:interval=15", "kill@leader"), order="cycle")
    ops = [phase(0, "start"), nem(15, "invoke", "stop", {"fault": "stop"}),
           nem(30, "invoke", "start", {"fault": "stop"}),
           nem(45, "invoke", "kill", {"fault": "kill"}),
           nem(60, "invoke", "start", {"fault": "kill"})]
    assert played_schedule(ops, opts) == ((15.0, "stop@follower", 15.0),
                                          (45.0, "kill@leader", 15.0))
    assert untimed("packet-loss@n2:duration=5:packet_loss=0.5:interval=2") == \
        "packet-loss@n2:packet_loss=0.5"


def test_replaying_the_played_schedule_with_the_seed_hits_the_same_nodes(tmp_path) -> None:
    """A drawn schedule, read back from its history and played once with the same seed, starts
    the same faults at the same offsets and they draw the same nodes and halves."""
    drawn = NemesisOptions(faults=("kill", "partition-random-halves", "pause"),
                           targets="random", interval_s=0.05, duration_s=0.1)
    first = Rig(tmp_path, drawn, seed=7, name="drawn.jsonl", size=5)
    first.main()
    first.interpreter.start()
    deadline = time.monotonic() + 10
    while len(played_faults(first.ops(), drawn)) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    first.interpreter.stop()
    assert first.interpreter.join(5)
    ops = first.ops()
    replay = played_options(ops, drawn)
    assert replay is not None and len(replay.schedule) >= 4
    second = Rig(tmp_path, replay.validate([f"n{i}" for i in range(1, 6)]), seed=7,
                 name="replay.jsonl", size=5)
    second.main()
    second.interpreter.start()
    assert second.interpreter.join(10)
    again = second.ops()
    assert [(f.entry, f.nodes) for f in played_faults(again, replay)] == \
        [(f.entry, f.nodes) for f in played_faults(ops, drawn)]
    grudges = [[o.value.get("grudge") for o in h if o.f == "start-partition" and o.type == "info"]
               for h in (ops, again)]
    assert grudges[0] == grudges[1]
    starts = [s for s, _e, _d in played_schedule(again, replay) or ()]
    planned = [s for s, _e, _d in replay.schedule]
    # Never early; late only by the scheduler's wake-up, which a loaded machine stretches.
    assert len(starts) == len(planned)
    assert all(p - 0.01 <= s <= p + 0.5 for s, p in zip(starts, planned, strict=True)), \
        (starts, planned)
