"""The one fault-window algorithm (history.faults): the stop table, targets, heal, the end of the
history, failed and unpaired completions."""

from __future__ import annotations

from typing import Any

from history import NEMESIS, Op, OpType
from history.faults import WindowTracker, fault_windows, target_of


def nem(t: int, type_: OpType, f: str, value: Any = None, node: str | None = None) -> Op:
    return Op(type=type_, process=NEMESIS, f=f, value=value, node=node, time=t)


def pair(t: int, f: str, value: Any = None, node: str | None = None) -> list[Op]:
    """An invocation at t and its info completion at t + 1."""
    return [nem(t, "invoke", f, {"fault": f}), nem(t + 1, "info", f, value, node)]


def test_target_is_the_value_nodes_else_the_node() -> None:
    assert target_of({"nodes": ["n3", "n1"]}, "n2") == ("n1", "n3")
    assert target_of({"nodes": "n2"}, None) == ("n2",)
    assert target_of({"nodes": []}, "n3") == ("n3",)
    assert target_of({"fault": "kill"}, None) is None


def test_start_closes_kill_and_stop_windows_of_its_node_only() -> None:
    ops = (pair(1, "kill", {"nodes": ["n1"]}) + pair(3, "stop", {"nodes": ["n2"]})
           + pair(5, "start", {"nodes": ["n2"]}) + pair(7, "start", {"nodes": ["n1"]}))
    assert [(w.f, w.start_ns, w.end_ns, w.target, w.closed_by) for w in fault_windows(ops)] == [
        ("kill", 2, 8, ("n1",), "start"), ("stop", 4, 6, ("n2",), "start")]


def test_an_unknown_target_matches_any() -> None:
    ops = pair(1, "pause", {"fault": "pause"}, node="n3") + pair(3, "resume", {})
    (w,) = fault_windows(ops)
    assert (w.target, w.end_ns, w.closed_by, w.stop_f) == (("n3",), 4, "resume", "resume")


def test_heal_closes_everything_and_the_end_of_the_history_the_rest() -> None:
    ops = (pair(1, "start-partition") + pair(3, "pause", {"nodes": ["n1"]}) + pair(5, "heal")
           + pair(7, "start-packet"))
    assert [(w.f, w.end_ns, w.closed_by) for w in fault_windows(ops, end_ns=50)] == [
        ("start-partition", 6, "heal"), ("pause", 6, "heal"), ("start-packet", 50, None)]


def test_windows_are_ordered_by_start_then_end_then_f() -> None:
    ops = [nem(0, "invoke", "kill"), nem(0, "invoke", "pause"), nem(1, "info", "kill"),
           nem(1, "info", "pause"), *pair(2, "resume"),
           Op(type="ok", process=1, f="consume", value="1-0", time=9)]
    assert [(w.f, w.start_ns, w.end_ns) for w in fault_windows(ops)] == [
        ("pause", 1, 3), ("kill", 1, 9)]


def test_invocations_failed_starts_and_stops_without_a_window_open_nothing() -> None:
    assert fault_windows([nem(1, "invoke", "kill"), nem(2, "fail", "kill")], 10) == []
    assert fault_windows(pair(1, "stop-partition") + pair(3, "resume"), 10) == []


def test_a_completion_pairs_with_the_earliest_open_invocation_of_its_f() -> None:
    tracker = WindowTracker()
    for op in [nem(1, "invoke", "kill", {"nodes": ["n1"]}), nem(2, "invoke", "kill"),
               nem(3, "info", "kill"), nem(4, "info", "kill"), nem(5, "info", "start")]:
        tracker.feed(op)
    assert [w.target for w in tracker.finish(10)] == [("n1",), None]
    assert [(op.f, op.time) for op in tracker.unpaired] == [("start", 5)]
