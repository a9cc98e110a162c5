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


# Lines as RabbitMQ 4.3.6 logged them (store/classic-power-loss-all, 2026-11-28), and the two
# other shapes of "rebuilding indices from scratch" that say nothing of an unclean stop: the
# continuation line of the store's message about recovery terms (3.10.8 after an autoheal
# restart, tests/checkers/fixtures/broker_logs/mirrored-autoheal) and that message's first line.
STORE_REBUILT = ('Message store "628WB79CIFDYO9LJI6DKMI09L/msg_store_persistent": rebuilding '
                 'indices from scratch')
QUEUE_RECOVERED = ("Queue jepsen.queue in vhost / dropped 0/0/0 persistent messages and 0 "
                   "transient messages after unclean shutdown")


def test_a_node_s_own_recovery_after_an_unclean_stop_is_read_on_every_line() -> None:
    from checkers.broker_log import PATTERNS, parse_line
    for line, patterns in PATTERNS.items():
        store = parse_line(STORE_REBUILT, patterns)
        assert store is not None and (store[0].kind, store[0].detector) == (
            "unclean-restart", "recovery"), line
        queue = parse_line(QUEUE_RECOVERED, patterns)
        assert queue is not None and queue[0].kind == "queue-recovered-unclean", line
        assert queue[0].detector is None and queue[1].group("queue") == "jepsen.queue"
        assert parse_line("rebuilding indices from scratch", patterns) is None
        assert parse_line('Message store "628WB79CIFDYO9LJI6DKMI09L/msg_store_persistent" : '
                          "recovery terms differ from present", patterns) is None


def booted(*at: tuple[int, str], queue_on: str | None = None) -> Evidence:
    """Every node's own log and nothing else: each node's store rebuilt at its first boot (1 s)
    and at each boot given, the queue's index recovering on `queue_on`."""
    events = []
    for node in ("n1", "n2", "n3"):
        events.append(LogEvent(1 * S, node, "unclean-restart", "recovery", f"{node}/rabbit.log:141",
                               STORE_REBUILT))
    for t, node in at:
        events.append(LogEvent(t * S, node, "unclean-restart", "recovery",
                               f"{node}/rabbit.log:306", STORE_REBUILT))
        if node == queue_on:
            events.append(LogEvent(t * S + S // 10, node, "queue-recovered-unclean", None,
                                   f"{node}/rabbit.log:307", QUEUE_RECOVERED,
                                   queue="jepsen.queue"))
    cover = {n: LogCoverage(n, 0, 200 * S) for n in ("n1", "n2", "n3")}
    return Evidence(sorted(events, key=lambda e: e.time_ns), cover, 10.0)


def test_a_power_loss_of_every_node_is_noticed_by_the_nodes_own_recovery_at_boot() -> None:
    ops = power_loss(10, {"n1": (956226, 2), "n2": (0, 0), "n3": (0, 0)})
    ev = booted((21, "n1"), (21, "n2"), (22, "n3"), queue_on="n1")
    [f] = judged(ops, ev)
    assert f["noticed"] is True and f["noticed_when"] == "after_heal"
    assert f["noticed_ms"] == 11_000.0
    assert [(d["detector"], d["kind"], d["node"]) for d in f["detections"]] == [
        ("recovery", "unclean-restart", "n1")]
    assert [(e["kind"], e["node"], e["evidence"]) for e in f["effects"]
            if e["kind"] == "queue-recovered-after-unclean-shutdown"] == [
        ("queue-recovered-after-unclean-shutdown", "n1", "n1/rabbit.log:307")]
    st = strength([f], ev)
    assert st["weak"] is False and st["noticed"] == 1 and st["noticed_after_heal"] == 1


def test_the_store_rebuilt_at_a_node_s_first_boot_notices_no_fault() -> None:
    [f] = judged(power_loss(10, {"n1": (4096, 1)}), booted())
    assert f["noticed"] is False and f["detections"] == []
    st = strength([f], booted())
    assert st["weak"] is True and st["reason"] == "none of 1 power-loss was noticed by RabbitMQ"
