"""The checker's side of fault windows: a nemesis completion without its invocation breaks the
contract, and how a window reads in results.json. The windows themselves come from
history.faults (tests/history/test_faults.py)."""

from __future__ import annotations

from typing import Any

from checkers.faults import END_OF_HISTORY, fault_windows, window_dict
from history import NEMESIS, Op, OpType


def nem(t: int, type_: OpType, f: str, value: Any = None) -> Op:
    return Op(type=type_, process=NEMESIS, f=f, value=value, time=t)


def test_a_completion_without_its_invocation_is_named_by_position() -> None:
    good = [nem(1, "invoke", "kill"), nem(2, "info", "kill"), nem(3, "invoke", "heal"),
            nem(4, "info", "heal")]
    assert fault_windows(good, 10)[1] is None
    windows, problem = fault_windows([nem(1, "invoke", "kill"), nem(2, "info", "start"),
                                      nem(3, "info", "kill")], 10)
    assert problem == (1, "nemesis info 'start' without its invocation")
    assert [(w.f, w.start_ns, w.end_ns) for w in windows] == [("kill", 3, 10)]


def test_window_dict_in_milliseconds_and_end_of_history() -> None:
    (w,) = fault_windows([nem(5_000_000, "invoke", "kill"),
                          nem(7_000_000, "info", "kill", {"nodes": ["n2", "n1"]})],
                         12_500_000)[0]
    assert window_dict(w) == {
        "f": "kill", "stop_f": "start", "target": ["n1", "n2"], "start_ms": 7.0,
        "end_ms": 12.5, "duration_ms": 5.5, "closed_by": END_OF_HISTORY}
    (w,) = fault_windows([nem(1, "invoke", "start-partition"), nem(2, "info", "start-partition"),
                          nem(3, "invoke", "stop-partition"), nem(4, "info", "stop-partition")],
                         10)[0]
    assert (window_dict(w)["target"], window_dict(w)["closed_by"]) == (None, "stop-partition")
