"""Tests for nemesis.interpreter: the recorded history, stopping, healing, errors, determinism."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clusters.remote import CommandTimeout, RemoteError
from history import NEMESIS, HistoryWriter, Op, read_history
from nemesis.errors import FaultUnsupported, NemesisConfigError
from nemesis.interpreter import NemesisInterpreter, sole_node
from nemesis.options import NemesisOptions
from tests.nemesis.fakes import FakeBroker, FakeCluster

pytestmark = pytest.mark.timeout(30)


class Rig:
    """An interpreter on a fake cluster, with its history."""

    def __init__(
        self,
        tmp_path: Path,
        faults: tuple[str, ...],
        *,
        size: int = 3,
        netem: bool = True,
        seed: int = 1,
        queue: str | None = "q",
        name: str = "history.jsonl",
        **opts: Any,
    ) -> None:
        self.cluster = FakeCluster(size, netem=netem)
        self.broker = FakeBroker(names=[n.name for n in self.cluster.nodes])
        self.path = tmp_path / name
        self.history = HistoryWriter(self.path)
        opts.setdefault("interval_s", 0.001)  # a fault's times must be > 0
        opts.setdefault("duration_s", 0.001)
        self.options = NemesisOptions(faults=faults, **opts)
        self.interpreter = NemesisInterpreter(
            self.cluster, self.broker, self.history, self.options, seed, queue,
            admin=self.broker,
        )

    def ops(self) -> list[Op]:
        return [op for op in read_history(self.path) if op.process == NEMESIS]

    def completions(self, f: str) -> list[Op]:
        return [op for op in self.ops() if op.type == "info" and op.f == f]


def wait_until(pred: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


def shape(ops: list[Op]) -> list[tuple[str, str]]:
    return [(op.type, op.f) for op in ops]


def test_records_invoke_info_pairs_then_stops(tmp_path: Path) -> None:
    rig = Rig(tmp_path, ("partition-halves",), interval_s=0.001, duration_s=0.001)
    rig.interpreter.start()
    wait_until(lambda: len(rig.completions("stop-partition")) >= 3)
    rig.interpreter.stop()
    assert rig.interpreter.join(5)
    ops = rig.ops()
    cycle = [
        ("invoke", "start-partition"),
        ("info", "start-partition"),
        ("invoke", "stop-partition"),
        ("info", "stop-partition"),
    ]
    assert len(ops) % 4 == 0 and shape(ops) == cycle * (len(ops) // 4)
    start = ops[1]
    assert ops[0].value == {"fault": "partition-halves"} and ops[0].node is None
    assert start.value["grudge"] == {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]}
    assert start.node == "n1" and ops[2].node == "n1" and ops[3].node == "n1"
    assert all(op.process == "nemesis" and op.error is None for op in ops)
    assert rig.cluster.all_clean()
    assert rig.interpreter.error is None


def test_stops_promptly_in_a_long_healthy_period(tmp_path: Path) -> None:
    rig = Rig(tmp_path, ("kill",), interval_s=600)
    rig.interpreter.start()
    time.sleep(0.05)
    t0 = time.monotonic()
    rig.interpreter.stop()
    assert rig.interpreter.join(2)
    assert time.monotonic() - t0 < 1
    assert rig.ops() == []


def test_stops_promptly_in_a_long_fault_and_ends_it(tmp_path: Path) -> None:
    rig = Rig(tmp_path, ("kill",), targets="n2", duration_s=600)
    stop = rig.interpreter.stop_event
    rig.interpreter.start()
    wait_until(lambda: rig.interpreter.active == "kill" and len(rig.completions("kill")) == 1)
    stop.set()
    assert rig.interpreter.join(2)
    assert shape(rig.ops()) == [
        ("invoke", "kill"),
        ("info", "kill"),
        ("invoke", "start"),
        ("info", "start"),
    ]
    assert rig.ops()[1].value == {"fault": "kill", "nodes": ["n2"]} and rig.ops()[1].node == "n2"
    assert rig.broker.all_running()
    assert rig.interpreter.active is None


def test_external_stop_event_is_used(tmp_path: Path) -> None:
    cluster = FakeCluster(3)
    event = threading.Event()
    interpreter = NemesisInterpreter(
        cluster,
        FakeBroker(),
        HistoryWriter(tmp_path / "h.jsonl"),
        NemesisOptions(faults=("pause",), interval_s=600),
        seed=3,
        queue=None,
        stop_event=event,
    )
    interpreter.start()
    event.set()
    assert interpreter.join(2)


START_FS = ("start-partition", "kill", "pause")


def first_starts(rig: Rig, count: int) -> list[Any]:
    def starts() -> list[Op]:
        return [o for o in rig.ops() if o.type == "info" and o.f in START_FS]

    rig.interpreter.start()
    wait_until(lambda: len(starts()) >= count)
    rig.interpreter.stop()
    assert rig.interpreter.join(5)
    return [o.value for o in starts()[:count]]


def test_same_seed_same_faults(tmp_path: Path) -> None:
    faults = ("partition-random-halves", "partition-majorities-ring", "kill", "pause")
    runs = [
        first_starts(
            Rig(tmp_path, faults, size=5, seed=11, targets="random", name=f"h{i}.jsonl"), 8
        )
        for i in range(2)
    ]
    assert runs[0] == runs[1]
    assert len({v["fault"] for v in runs[0]}) > 1


def test_failed_start_is_recorded_with_error_then_stopped_and_the_interpreter_goes_on(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, ("kill",), targets="n2")
    rig.broker.fail[("kill", "n2")] = RemoteError("kill -9 exited 1: no such process")
    rig.interpreter.start()
    wait_until(lambda: len(rig.completions("start")) >= 2)
    rig.interpreter.stop()
    assert rig.interpreter.join(5)
    ops = rig.ops()
    assert shape(ops[:4]) == [
        ("invoke", "kill"),
        ("info", "kill"),
        ("invoke", "start"),
        ("info", "start"),
    ]
    failed = ops[1]
    assert failed.value == {"fault": "kill"}
    assert (
        failed.error
        == "FaultError: kill failed on n2: RemoteError: kill -9 exited 1: no such process"
    )
    # n2 was never killed, so stopping the fault must not start it a second time.
    assert ops[3].error is None and ops[3].value["outcome"] == {"n2": "running"}
    assert rig.broker.of("start") == []
    assert rig.interpreter.error is None


def test_heal_stops_the_active_fault_heals_everything_and_is_idempotent(tmp_path: Path) -> None:
    rig = Rig(
        tmp_path,
        ("partition-halves", "bandwidth", "pause", "kill"),
        targets="all",
        duration_s=600,
    )
    rig.interpreter.start()
    wait_until(lambda: rig.interpreter.active is not None and len(rig.ops()) >= 2)
    active = rig.interpreter.active
    assert active is not None
    healed = rig.interpreter.heal()
    assert rig.interpreter.join(2)
    assert list(healed["healed"]) == ["pause", "iptables", "tc", "process"]
    ops = rig.ops()
    heal_invoke = next(o for o in ops if o.f == "heal")
    assert heal_invoke.value == {
        "faults": ["partition-halves", "bandwidth", "pause", "kill"],
        "active": active,
    }
    assert ops[-1].f == "heal" and ops[-1].type == "info" and ops[-1].error is None
    # The active fault was stopped, as its own pair, before the heal ends.
    stop_f = {
        "partition-halves": "stop-partition",
        "bandwidth": "stop-packet",
        "pause": "resume",
        "kill": "start",
    }[active]
    assert [o.f for o in ops].count(stop_f) == 2
    assert rig.cluster.all_clean() and rig.broker.all_running()

    again = rig.interpreter.heal()
    assert again["healed"]["iptables"] == dict.fromkeys(["n1", "n2", "n3"], "flushed")
    assert again["healed"]["process"] == dict.fromkeys(["n1", "n2", "n3"], "running")
    assert [o.f for o in rig.ops()].count("heal") == 4
    assert rig.cluster.all_clean() and rig.broker.all_running()


def test_heal_tries_every_node_and_reports_failures(tmp_path: Path) -> None:
    rig = Rig(tmp_path, ("partition-halves", "kill"), targets="n3")
    rig.broker.state["n3"] = "killed"
    rig.cluster.remote("n2").fail[("iptables",)] = CommandTimeout("iptables timed out after 5s")
    value = rig.interpreter.heal()
    assert value["healed"]["iptables"]["n2"].startswith("error: CommandTimeout")
    assert value["healed"]["iptables"]["n1"] == "flushed"
    assert value["healed"]["process"] == {"n1": "running", "n2": "running", "n3": "started"}
    last = rig.ops()[-1]
    assert last.f == "heal" and last.type == "info"
    assert last.error is not None and "iptables on n2" in last.error
    assert rig.broker.all_running()


def test_heal_after_ctrl_c_in_run(tmp_path: Path) -> None:
    rig = Rig(tmp_path, ("kill",), targets="all", duration_s=600)
    rig.broker.fail[("kill", "n2")] = KeyboardInterrupt()  # type: ignore[assignment]
    with pytest.raises(KeyboardInterrupt):
        rig.interpreter.run()
    assert rig.interpreter.active == "kill"
    rig.interpreter.heal()
    ops = rig.ops()
    assert shape(ops) == [
        ("invoke", "kill"),  # interrupted: no completion
        ("invoke", "heal"),
        ("invoke", "start"),
        ("info", "start"),
        ("info", "heal"),
    ]
    assert rig.broker.all_running()
    assert rig.interpreter.active is None
    # The lock was released: a second heal does not block.
    rig.interpreter.heal()


def test_heal_waits_for_a_fault_action_in_flight(tmp_path: Path) -> None:
    rig = Rig(tmp_path, ("kill",), targets="n2", duration_s=0.01)
    gate = threading.Event()
    rig.broker.start_gate = gate
    rig.interpreter.start()
    wait_until(lambda: rig.broker.of("start") == ["n2"])
    healer = threading.Thread(target=rig.interpreter.heal)
    healer.start()
    time.sleep(0.1)
    assert healer.is_alive()
    assert "heal" not in [o.f for o in rig.ops()]
    gate.set()
    healer.join(5)
    assert not healer.is_alive()
    assert rig.interpreter.join(5)
    fs = [(o.type, o.f) for o in rig.ops()]
    assert fs.index(("info", "start")) < fs.index(("invoke", "heal"))
    assert rig.broker.all_running() and rig.broker.of("start") == ["n2"]


def test_partition_leader_records_the_leader_node(tmp_path: Path) -> None:
    rig = Rig(tmp_path, ("partition-leader",), duration_s=600)
    rig.broker.leader = "n2"
    rig.interpreter.start()
    wait_until(lambda: len(rig.completions("start-partition")) == 1)
    rig.interpreter.stop()
    assert rig.interpreter.join(2)
    start = rig.completions("start-partition")[0]
    assert start.node == "n2" and start.value["leader"] == "n2"
    assert rig.cluster.all_clean()


def test_no_faults_only_waits_and_heals_nothing(tmp_path: Path) -> None:
    rig = Rig(tmp_path, (), interval_s=0.01)
    rig.interpreter.start()
    time.sleep(0.05)
    rig.interpreter.stop()
    assert rig.interpreter.join(2)
    assert rig.interpreter.heal() == {"faults": [], "healed": {}}
    assert shape(rig.ops()) == [("invoke", "heal"), ("info", "heal")]


def test_setup_probes_nodes_before_the_test(tmp_path: Path) -> None:
    rig = Rig(tmp_path, ("partition-one", "netem-delay"), netem=False)
    with pytest.raises(FaultUnsupported, match="not available on the kernel of node"):
        rig.interpreter.setup()
    ok = Rig(tmp_path, ("partition-one", "packet-loss", "kill", "netem-delay"), name="ok.jsonl")
    ok.interpreter.setup()
    for n in ok.cluster.nodes:
        assert ok.cluster.remote(n.name).jumps == [("OUTPUT", "RMQH-OUT"), ("INPUT", "RMQH-IN")]
    assert ok.ops() == []


def test_netem_fault_without_netem_is_recorded_as_unsupported(tmp_path: Path) -> None:
    rig = Rig(tmp_path, ("netem-delay",), netem=False, targets="n1")
    rig.interpreter.start()
    wait_until(lambda: len(rig.completions("start-packet")) >= 1)
    rig.interpreter.stop()
    assert rig.interpreter.join(2)
    error = rig.completions("start-packet")[0].error
    assert error is not None and error.startswith("FaultUnsupported: tc netem is not available")


@pytest.mark.parametrize(
    ("faults", "kwargs", "message"),
    [
        (("kill", "explode"), {}, "unknown fault 'explode'; known faults: partition-one"),
        (("partition-leader",), {"queue": None}, "partition-leader need"),
        (("kill",), {"queue": None, "targets": "leader"}, "targets=leader need"),
        (("kill",), {"targets": "n4"}, "n4"),
        (("partition-bridge",), {"size": 2}, "needs at least 3 nodes"),
    ],
)
def test_config_errors_at_construction(
    tmp_path: Path, faults: tuple[str, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(NemesisConfigError, match=message):
        Rig(tmp_path, faults, **kwargs)


def test_a_closed_history_ends_the_run_with_an_error(tmp_path: Path) -> None:
    rig = Rig(tmp_path, ("kill",))
    rig.history.close()
    rig.interpreter.run()
    assert isinstance(rig.interpreter.error, ValueError)
    assert rig.broker.of("kill") == []
    rig.interpreter.heal()  # still heals, logging that it cannot record


def test_start_twice_is_refused(tmp_path: Path) -> None:
    rig = Rig(tmp_path, ("kill",), interval_s=600)
    rig.interpreter.start()
    with pytest.raises(RuntimeError, match="already started"):
        rig.interpreter.start()
    rig.interpreter.stop()
    assert rig.interpreter.join(2)


def test_sole_node() -> None:
    assert sole_node({"nodes": ["n1"]}) == "n1"
    assert sole_node({"nodes": ["n1", "n2"]}) is None
    assert sole_node({"nodes": []}) is None
    assert sole_node({}) is None


def test_each_entry_acts_on_its_own_targets_in_cycle_order(tmp_path: Path) -> None:
    rig = Rig(tmp_path, ("stop@follower", "kill@leader"), order="cycle",
              interval_s=0.001, duration_s=0.001)
    rig.broker.leader, rig.broker.members = "n2", ["n1", "n2"]
    rig.interpreter.start()
    wait_until(lambda: len(rig.completions("start")) >= 4)
    rig.interpreter.stop()
    assert rig.interpreter.join(5)
    hits = [(op.f, op.value["nodes"]) for op in rig.ops()
            if op.type == "info" and op.f in ("stop", "kill")]
    assert hits[:4] == [("stop", ["n1"]), ("kill", ["n2"]), ("stop", ["n1"]), ("kill", ["n2"])]


def test_each_entry_acts_with_its_own_options_and_lasts_its_own_duration(tmp_path: Path) -> None:
    rig = Rig(tmp_path, ("kill:duration=0.001", "packet-loss@n2:packet_loss=0.5:duration=600"),
              order="cycle", targets="n1", packet_loss=0.1, duration_s=0.001)
    rig.interpreter.start()
    wait_until(lambda: rig.interpreter.active == "packet-loss"
               and len(rig.completions("start-packet")) == 1)
    time.sleep(0.05)  # the kill lasted 1 ms; the packet loss lasts 600 s
    assert rig.interpreter.active == "packet-loss"
    rig.interpreter.stop()
    assert rig.interpreter.join(2)
    assert rig.completions("kill")[0].value == {"fault": "kill", "nodes": ["n1"]}
    loss = rig.completions("start-packet")[0].value
    assert (loss["nodes"], loss["probability"]) == (["n2"], 0.5)


def test_faults_that_ask_where_the_queue_lives_need_its_admin(tmp_path: Path) -> None:
    with pytest.raises(NemesisConfigError, match=r"kill@leader need\(s\) a queue admin"):
        NemesisInterpreter(FakeCluster(3), FakeBroker(), HistoryWriter(tmp_path / "h.jsonl"),
                           NemesisOptions(faults=("kill@leader",)), seed=1, queue="q")


def test_no_fault_starts_that_the_main_phase_would_cut_short(tmp_path: Path) -> None:
    """A fault cut by the time limit may heal before RabbitMQ notices it: it is not played."""
    rig = Rig(tmp_path, ("kill",), targets="n2", interval_s=0.001, duration_s=5.0)
    t0 = time.monotonic()
    rig.interpreter.start(deadline=t0 + 0.5)
    assert rig.interpreter.join(3)
    assert 0.4 < time.monotonic() - t0 < 2  # healthy to the deadline, then done
    assert rig.ops() == []
    fits = Rig(tmp_path, ("kill",), targets="n2", interval_s=0.001, duration_s=0.05,
               name="fits.jsonl")
    fits.interpreter.start(deadline=time.monotonic() + 0.5)
    wait_until(lambda: len(fits.completions("kill")) >= 1)
    fits.interpreter.stop()
    assert fits.interpreter.join(3)


def test_a_fault_may_lose_a_little_of_its_length_to_the_main_phases_end() -> None:
    from nemesis.interpreter import _slack

    assert _slack(20.0) == 1.0 and _slack(100.0) == 5.0
