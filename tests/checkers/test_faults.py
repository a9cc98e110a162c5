"""Fault windows from nemesis ops: the pairing table, targets, heal and end of history."""

from __future__ import annotations

from typing import Any

from checkers.faults import (
    END_OF_HISTORY,
    FaultWindow,
    NemesisOp,
    fault_windows,
    pairing_problem,
    stop_f_for,
)


def ops(*spec: tuple[int, str, str, Any]) -> list[NemesisOp]:
    return [NemesisOp(i, i, t, type_, f, value) for i, (t, type_, f, value) in enumerate(spec)]


def info(t: int, f: str, value: Any = None) -> tuple[int, str, str, Any]:
    return (t, "info", f, value)


def test_stop_f_table() -> None:
    assert [stop_f_for(f) for f in ("start-partition", "kill", "stop", "pause", "start-packet",
                                    "start-rolling-restart", "start", "heal", "resume")] == [
        "stop-partition", "start", "start", "resume", "stop-packet", "stop-rolling-restart",
        None, None, None]


def test_window_opens_and_closes_at_info_completions() -> None:
    w = fault_windows(ops((5, "invoke", "start-partition", {}), info(7, "start-partition"),
                          (9, "invoke", "stop-partition", {}), info(12, "stop-partition")), 100)
    assert w == [FaultWindow("start-partition", "stop-partition", 7, 12, "stop-partition",
                             None, None)]


def test_start_closes_kill_and_stop_windows_of_its_node_only() -> None:
    w = fault_windows(ops(info(1, "kill", {"nodes": ["n1"]}), info(2, "stop", {"nodes": ["n2"]}),
                          info(3, "start", {"nodes": ["n2"]}), info(4, "start", {"nodes": ["n1"]})),
                      100)
    assert [(x.f, x.start, x.end, x.target) for x in w] == [
        ("kill", 1, 4, ("n1",)), ("stop", 2, 3, ("n2",))]


def test_target_from_node_field_and_unknown_target_matches_any() -> None:
    o = [NemesisOp(0, 0, 1, "info", "pause", {"fault": "pause"}, node="n3"),
         NemesisOp(1, 1, 2, "info", "resume", {})]
    (w,) = fault_windows(o, 10)
    assert (w.target, w.end, w.closed_by) == (("n3",), 2, "resume")


def test_heal_closes_everything_and_end_of_history_closes_the_rest() -> None:
    w = fault_windows(ops(info(1, "start-partition"), info(2, "pause", {"nodes": ["n1"]}),
                          info(5, "heal"), info(6, "start-packet")), 50)
    assert [(x.f, x.end, x.closed_by) for x in w] == [
        ("start-partition", 5, "heal"), ("pause", 5, "heal"), ("start-packet", 50, END_OF_HISTORY)]


def test_invocations_and_failed_starts_open_nothing() -> None:
    assert fault_windows(ops((1, "invoke", "kill", {}), (2, "fail", "kill", {})), 10) == []


def test_a_stop_without_open_window_is_harmless() -> None:
    assert fault_windows(ops(info(1, "stop-partition"), info(2, "resume")), 10) == []


def test_pairing_problem() -> None:
    good = ops((1, "invoke", "kill", {}), info(2, "kill"), (3, "invoke", "heal", {}), info(4, "heal"))
    assert pairing_problem(good) is None
    assert pairing_problem(ops((1, "invoke", "kill", {}), info(2, "start"))) == (
        1, "nemesis info 'start' without its invocation")
