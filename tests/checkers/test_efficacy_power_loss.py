"""A power loss's efficacy (issue 32) on planted histories: its entry carries what each node's
layer dropped, and a run whose power losses dropped nothing is weak, however noticed."""

from __future__ import annotations

from typing import Any

from checkers.broker_log import LogCoverage, LogEvent
from checkers.efficacy import Evidence, judge_faults, strength
from history import Op
from history.faults import fault_windows

S = 1_000_000_000


def power_loss(start_s: int, dropped: dict[str, tuple[int, int]], index: int = 1) -> list[Op]:
    nodes = sorted(dropped)
    value = {"fault": "power-loss", "nodes": nodes,
             "dropped": {n: {"bytes": b, "files": f, "namespace": 0, "paths": []}
                         for n, (b, f) in dropped.items()}}
    return [Op(type="invoke", process="nemesis", f="start-power-loss", time=start_s * S,
               index=index),
            Op(type="info", process="nemesis", f="start-power-loss", time=start_s * S,
               index=index + 1, value=value, node=nodes[0]),
            Op(type="invoke", process="nemesis", f="stop-power-loss", time=(start_s + 10) * S,
               index=index + 2),
            Op(type="info", process="nemesis", f="stop-power-loss", time=(start_s + 10) * S,
               index=index + 3, value={"fault": "power-loss", "nodes": nodes}, node=nodes[0])]


def evidence(*down: tuple[int, str]) -> Evidence:
    """The survivors' logs: n3 sees each killed node go down (noticed)."""
    events = [LogEvent(t * S, "n3", "node-down", "distribution", f"n3/rabbit.log:{t}",
                       f"node 'rabbit@{node}' down: connection_closed", node) for t, node in down]
    return Evidence(events, {"n3": LogCoverage("n3", 0, 200 * S)}, 10.0)


def judged(ops: list[Op], ev: Evidence, at_risk: int = 50) -> list[dict[str, Any]]:
    windows = fault_windows(ops)
    return judge_faults(windows, [{"at_risk": at_risk}] * len(windows), [], ev)


def test_the_entry_says_what_each_node_dropped_and_a_drop_makes_it_strong() -> None:
    ops = power_loss(10, {"n1": (8192, 2), "n2": (0, 0)})
    [f] = judged(ops, evidence((11, "n1")))
    assert f["kind"] == "power-loss" and f["noticed"] is True
    assert f["dropped"] == {"nodes": {"n1": {"bytes": 8192, "files": 2},
                                      "n2": {"bytes": 0, "files": 0}},
                            "bytes": 8192, "files": 2}
    st = strength([f], evidence())
    assert st["weak"] is False and st["dropped_bytes"] == 8192


def test_power_losses_that_dropped_nothing_make_a_weak_run() -> None:
    ops = power_loss(10, {"n1": (0, 0)}) + power_loss(40, {"n2": (0, 0)}, index=5)
    faults = judged(ops, evidence((11, "n1"), (41, "n2")))
    assert [f["noticed"] for f in faults] == [True, True]
    st = strength(faults, evidence())
    assert st["weak"] is True and st["dropped_bytes"] == 0
    assert st["reason"] == ("none of the 2 power losses dropped an unsynced write on any node: "
                            "the layers held nothing unsynced, so each was no more than a kill")


def test_one_power_loss_that_dropped_something_is_enough() -> None:
    ops = power_loss(10, {"n1": (0, 0)}) + power_loss(40, {"n2": (4096, 1)}, index=5)
    st = strength(judged(ops, evidence((11, "n1"), (41, "n2"))), evidence())
    assert st["weak"] is False and st["dropped_bytes"] == 4096


def test_a_vanished_file_counts_though_no_byte_was_dropped() -> None:
    st = strength(judged(power_loss(10, {"n1": (0, 1)}), evidence((11, "n1"))), evidence())
    assert st["weak"] is False


def test_other_faults_have_no_dropped_entry_and_no_figure() -> None:
    ops = [Op(type="invoke", process="nemesis", f="kill", time=10 * S, index=1),
           Op(type="info", process="nemesis", f="kill", time=10 * S, index=2,
              value={"fault": "kill", "nodes": ["n1"]}, node="n1"),
           Op(type="invoke", process="nemesis", f="start", time=20 * S, index=3),
           Op(type="info", process="nemesis", f="start", time=20 * S, index=4,
              value={"fault": "kill", "nodes": ["n1"]}, node="n1")]
    [f] = judged(ops, evidence((11, "n1")))
    assert "dropped" not in f
    assert strength([f], evidence())["dropped_bytes"] is None


def test_the_entry_names_the_layers_model_when_they_said_it() -> None:
    ops = power_loss(10, {"n1": (8192, 2), "n2": (0, 0)})
    for n in ("n1", "n2"):
        ops[1].value["dropped"][n]["model"] = "ext4, writeback 30 s"
    [f] = judged(ops, evidence((11, "n1")))
    assert f["dropped"]["model"] == "ext4, writeback 30 s"


def test_the_entry_lists_each_dropped_file_with_its_ages_and_the_oldest() -> None:
    ops = power_loss(10, {"n1": (762, 1), "n2": (64, 1)})
    value = ops[1].value
    assert isinstance(value, dict)
    ff = {"path": "feature_flags", "bytes": 762, "vanished": True, "first_unsynced_s": 33.0,
          "last_write_s": 33.0}
    wal = {"path": "quorum/1.wal", "bytes": 64, "vanished": False, "first_unsynced_s": 0.1,
           "last_sync_s": 0.1, "durable_s": 0.1, "durable_by": "fsync"}
    value["dropped"]["n1"].update(paths=[ff], oldest_unsynced_s=33.0, kept=2,
                                  kept_paths=[{"path": "k", "size": 1, "last_write_s": 40.0}])
    value["dropped"]["n2"].update(paths=[wal], oldest_unsynced_s=0.1, kept=0, kept_paths=[])
    [f] = judged(ops, evidence((11, "n1")))
    assert f["dropped"]["oldest_unsynced_s"] == 33.0
    assert f["dropped"]["nodes"]["n1"] == {
        "bytes": 762, "files": 1, "oldest_unsynced_s": 33.0, "paths": [ff], "kept": 2,
        "kept_paths": [{"path": "k", "size": 1, "last_write_s": 40.0}]}
    assert f["dropped"]["nodes"]["n2"] == {"bytes": 64, "files": 1, "oldest_unsynced_s": 0.1,
                                           "paths": [wal], "kept": 0}
