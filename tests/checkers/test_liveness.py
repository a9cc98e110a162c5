"""Liveness after the heal (checkers.liveness): the rules on literal facts, then small literal
histories through the Spark checker (checkers.spark_liveness), compared whole where it matters.

Bound in the Spark cases: net_ticktime 2 s (detection 2.5 s) + grace 1.5 s = 4 s.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from checkers import CheckOptions, check_history
from checkers.liveness import (
    LivenessBound,
    NodeFacts,
    Timeline,
    judge_confirms,
    judge_deliveries,
    judge_queue_deliveries,
    liveness_section,
)
from checkers.phases import HarnessEvent
from checkers.results import FALSE_ONLY, compose, counted
from history import HARNESS, NEMESIS
from history.faults import FaultWindow
from tests.checkers.histories import Builder

S = 1_000_000_000
BOUND = LivenessBound(net_ticktime_s=2.0, grace_s=1.5, recovery_timeout_s=240.0, source="test")
# Last heal at 10 s, bound 4 s, main phase to 30 s.
TL = Timeline(heal=10 * S, bound=4 * S, main_end=30 * S)


# -- the bound -------------------------------------------------------------------------------


def test_bound_is_detection_plus_grace_capped_by_the_recovery_timeout() -> None:
    assert BOUND.bound_ns == 4 * S
    assert LivenessBound(10.0, 30.0, 240.0).bound_ns == 42_500_000_000
    assert LivenessBound(10.0, 30.0, 20.0).bound_ns == 32_500_000_000  # timeout below grace
    d = LivenessBound(10.0, 30.0, 240.0).as_dict()
    assert d["bound_ms"] == 42500.0 and d["formula"] == (
        "1.25 x net_ticktime + min(grace, recovery_timeout)")
    assert "12.5 + 30 = 42.5 s" in d["derivation"]


# -- confirms per node -----------------------------------------------------------------------


def facts(**kw: Any) -> NodeFacts:
    return NodeFacts(queue="q", node="n1", **kw)


def test_confirms_resumed_within_the_bound() -> None:
    j = judge_confirms(facts(confirm_before=9 * S, confirm_after=12 * S, publishes_after=5), TL)
    assert (j["status"], j["valid"]) == ("resumed", True)
    assert (j["last_before_ms"], j["first_after_ms"]) == (-1000.0, 2000.0)


def test_confirms_never_resumed_when_refused_past_the_bound() -> None:
    j = judge_confirms(facts(confirm_before=9 * S, publishes_after=40, refused_after=40,
                             last_refused=29 * S, refused_past_bound=15 * S), TL)
    assert (j["status"], j["valid"]) == ("not-resumed", False)
    assert j["refused_past_bound_ms"] == 5000.0 and j["first_after_ms"] is None
    assert "none was confirmed in the 20.0 s the main phase ran on" in j["reason"]


def test_confirms_resumed_late_when_refused_past_the_bound_before_the_first_confirm() -> None:
    j = judge_confirms(facts(confirm_after=20 * S, publishes_after=40, refused_after=3,
                             last_refused=16 * S, refused_past_bound=15 * S), TL)
    assert (j["status"], j["valid"]) == ("resumed-late", False)
    assert "the first confirm came only 10.0 s after it" in j["reason"]


def test_confirms_past_the_bound_without_refusal_are_unknown() -> None:
    # A client that came to the node after the bound and was confirmed at once says nothing
    # of the node before it.
    j = judge_confirms(facts(confirm_after=20 * S, publishes_after=4), TL)
    assert (j["status"], j["valid"]) == ("unknown", "unknown")


def test_confirms_unknown_when_the_main_phase_ends_before_the_bound() -> None:
    short = Timeline(heal=10 * S, bound=4 * S, main_end=12 * S)
    j = judge_confirms(facts(publishes_after=9, refused_after=9, last_refused=11 * S), short)
    assert (j["status"], j["valid"]) == ("unknown", "unknown")
    assert j["reason"].startswith("the main phase ran only 2.0 s after the last heal")


def test_confirms_unknown_without_clients_after_the_heal() -> None:
    j = judge_confirms(facts(confirm_before=9 * S), TL)
    assert j["status"] == "unknown" and j["reason"].startswith("no client published through it")


def test_confirms_unknown_when_clients_left_before_the_bound() -> None:
    j = judge_confirms(facts(publishes_after=2, refused_after=2, last_refused=11 * S), TL)
    assert j["status"] == "unknown" and "before the bound" in j["reason"]


# -- deliveries ------------------------------------------------------------------------------


def test_node_deliveries_resumed_or_unknown_never_false() -> None:
    assert judge_deliveries(facts(delivery_after=11 * S, deliveries_after=3), TL)["valid"] is True
    for f in (facts(delivery_before=9 * S), facts(delivery_after=20 * S)):
        assert judge_deliveries(f, TL)["valid"] == "unknown"


def test_queue_deliveries_not_resumed_with_consumers_and_a_backlog() -> None:
    nodes = [facts(delivery_before=9 * S), NodeFacts("q", "n2")]
    j = judge_queue_deliveries(nodes, TL, held=120)
    assert (j["status"], j["valid"], j["held_at_bound"]) == ("not-resumed", False, 120)
    # Nothing to deliver, no consumers before the heal, a phase too short: never false.
    assert judge_queue_deliveries(nodes, TL, held=0)["valid"] == "unknown"
    assert judge_queue_deliveries([NodeFacts("q", "n2")], TL, held=120)["status"] == (
        "not-applicable")
    short = Timeline(heal=10 * S, bound=4 * S, main_end=12 * S)
    assert judge_queue_deliveries(nodes, short, held=None)["valid"] == "unknown"


# -- the section and its composition ---------------------------------------------------------


def window(end_s: float, closed_by: str | None = "stop-partition") -> FaultWindow:
    return FaultWindow("start-partition", 5 * S, int(end_s * S), value={"nodes": ["n3"]},
                       node="n3", closed_by=closed_by)


def test_section_not_applicable_without_faults_or_heal_or_bound() -> None:
    none = liveness_section([], [], (0, 30 * S), [], BOUND, None)
    assert (none["valid"], none["status"], none[FALSE_ONLY]) == ("unknown", "not-applicable", True)
    never = liveness_section([], [window(30, None)], (0, 30 * S), [], BOUND, None)
    assert never["status"] == "not-applicable" and "never healed" in never["reason"]
    unbound = liveness_section([], [window(10)], (0, 30 * S), [], None, None)
    assert unbound["status"] == "unknown" and unbound["bound_ms"] is None


def test_section_names_a_node_a_fault_hit_without_clients_and_lists_mends() -> None:
    mend = HarnessEvent(40 * S, "recover-node", {"node": "n1", "action": "restart-app",
                                                 "outcome": "done", "seconds": 2.0}, "n1")
    ok = [facts(confirm_after=11 * S, publishes_after=9, delivery_after=11 * S,
                delivery_before=9 * S)]
    sec = liveness_section(ok, [window(10)], (0, 30 * S), [mend], BOUND, 50)
    assert sec["valid"] is True and sec["findings"] == []
    (q,) = sec["queues"]
    assert [n["node"] for n in q["nodes"]] == ["n1", "n3"]
    assert q["nodes"][1]["confirms"]["reason"].startswith("no client published through it")
    assert q["nodes"][0]["mended"] == [{"f": "recover-node", "node": "n1",
                                        "action": "restart-app", "outcome": "done",
                                        "at_ms": 38000.0, "after_heal_ms": 28000.0}]
    assert "restarted n1 by restart-app 28.0 s after the last heal" in sec["mends_statement"]


def test_a_false_liveness_section_alone_makes_the_whole_false() -> None:
    live_unknown = {"valid": "unknown", FALSE_ONLY: True}
    live_false = {"valid": False, FALSE_ONLY: True}
    assert compose({"queue": {"valid": True}, "liveness": live_unknown})["valid"] is True
    assert compose({"queue": {"valid": True}, "liveness": live_false})["valid"] is False
    assert compose({"queue": {"valid": "unknown"}, "liveness": {"valid": True, FALSE_ONLY: True}}
                   )["valid"] == "unknown"
    assert not counted(live_unknown) and counted(live_false) and counted({"valid": "unknown"})


# -- through Spark ---------------------------------------------------------------------------


def history(path: Path, ops: list[tuple[float, dict[str, Any]]], main_end_ms: float,
            after: Sequence[tuple[float, dict[str, Any]]] = ()) -> Path:
    """Writes a run's history: main phase [0, main_end_ms] holding `ops` (time in ms, Op
    keywords) in time order, then `after` (harness ops after the main phase), then a complete
    drain."""
    with Builder(path) as b:
        b.at(0).phase("main", "start")
        for t, kw in sorted(ops, key=lambda x: x[0]):
            b.at(t).op(**kw)
        b.at(main_end_ms).phase("main", "end")
        for t, kw in after:
            b.at(t).op(**kw)
        b.at(main_end_ms + 5000)
        b.drained()
    return path


def publish(node: str, pid: int, seq: int, at: float, outcome: str | None = "ok",
            done: float | None = None) -> list[tuple[float, dict[str, Any]]]:
    """A publish through `node` invoked at `at` ms, completed `outcome` at `done` (at + 1)."""
    base = {"process": pid, "f": "publish", "value": f"{pid}-{seq}", "node": node,
            "queue": "q", "publisher": pid, "seq": seq, "phase": "main"}
    out = [(at, {"type": "invoke", **base})]
    if outcome is not None:
        out.append((at + 1 if done is None else done,
                    {"type": outcome, **base, "error": None if outcome == "ok" else "timeout"}))
    return out


def consume(node: str, pid: int, mid: str, at: float) -> list[tuple[float, dict[str, Any]]]:
    """A delivery of `mid` through `node` at `at` ms and its ack right after."""
    pub, seq = (int(x) for x in mid.split("-"))
    base = {"type": "ok", "process": pid, "value": mid, "node": node, "queue": "q",
            "publisher": pub, "seq": seq, "consumer": f"c{pid}", "redelivered": False,
            "phase": "main"}
    return [(at, {"f": "consume", **base}), (at + 0.5, {"f": "ack", **base})]


def partition(start: float, stop: float, node: str = "n3") -> list[tuple[float, dict[str, Any]]]:
    """A partition of `node` from start to stop (ms), as the nemesis records it."""
    ops = []
    for t, f in ((start, "start-partition"), (stop, "stop-partition")):
        ops.append((t, {"type": "invoke", "process": NEMESIS, "f": f,
                        "value": {"fault": "partition-one"}, "node": node}))
        ops.append((t + 0.5, {"type": "info", "process": NEMESIS, "f": f,
                              "value": {"fault": "partition-one", "nodes": [node]},
                              "node": node}))
    return ops


def live(path: Path) -> tuple[Any, dict[str, Any]]:
    r = check_history(path, options=CheckOptions(), liveness=BOUND)
    return r["valid"], r["liveness"]


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_spark_resumed(tmp_path: Path) -> None:
    # Heal at 1000.5 ms; n1 confirms again at 1501, the consumer on n2 is fed at 1600.
    ops = [*partition(100, 1000), *publish("n1", 1, 0, 50), *consume("n2", 9, "1-0", 60),
           *publish("n1", 1, 1, 1500), *consume("n2", 9, "1-1", 1600)]
    valid, sec = live(history(tmp_path / "h.jsonl", ops, 10_000))
    assert valid is True and sec["valid"] is True and sec["findings"] == []
    assert (sec["last_heal_ms"], sec["main_after_heal_ms"], sec["bound_ms"]) == (
        1000.5, 8999.5, 4000.0)
    (q,) = sec["queues"]
    n1, n2, n3 = q["nodes"]
    assert n1["confirms"] == {
        "status": "resumed", "valid": True, "reason": "confirmed again 0.5 s after the last heal",
        "last_before_ms": -949.5, "first_after_ms": 500.5, "publishes_after": 1,
        "refused_after": 0, "last_refused_ms": None, "refused_past_bound_ms": None}
    assert n2["deliveries"]["status"] == "resumed" and n2["deliveries"]["first_after_ms"] == 599.5
    assert n3["node"] == "n3" and n3["confirms"]["status"] == "unknown"  # the fault's node
    assert q["deliveries"]["status"] == "resumed"


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_spark_never_resumed_is_a_finding_and_makes_the_run_invalid(tmp_path: Path) -> None:
    # After the heal (1000.5 ms) every publish through n1 times out, past the bound too; the
    # consumer on n2, fed before, is never fed again while 1-1 waits; the harness restarts n1.
    ops = [*partition(100, 1000), *publish("n1", 1, 0, 50), *consume("n2", 9, "1-0", 60),
           *publish("n1", 1, 1, 900, done=950),  # confirmed before the heal, consumed by drain
           *publish("n1", 2, 0, 1200, "info", done=6200),
           *publish("n1", 3, 0, 6300, "info", done=11_300)]
    mend = {"node": "n1", "action": "restart-app", "outcome": "done", "seconds": 1.0}
    drained = {"type": "ok", "process": 20, "value": "1-1", "node": "n2", "queue": "q",
               "publisher": 1, "seq": 1, "consumer": "d20", "redelivered": False,
               "phase": "drain"}
    after: list[tuple[float, dict[str, Any]]] = [
        (13_000, {"type": "info", "process": HARNESS, "f": "recover-node", "value": mend,
                  "node": "n1"}),
        (14_000, {**drained, "f": "drain"}), (14_001, {**drained, "f": "ack"})]
    r = check_history(history(tmp_path / "h.jsonl", ops, 12_000, after),
                      options=CheckOptions(), liveness=BOUND)
    sec = r["liveness"]
    assert r["queue"]["valid"] is True  # nothing lost: the liveness section alone is false
    assert r["valid"] is False and sec["valid"] is False and sec["status"] == "not-resumed"
    # Each timed-out publish waited 5 s, past the 4 s bound, on a channel still open: stuck too
    # (checkers.settlement).
    assert sec["summary"] == ("4 finding(s), within 4 s of the last heal at 1.0 s: confirms "
                              "through n1 never resumed; deliveries anywhere never resumed; "
                              "publish through n1 stuck after a heal; publish through n1 stuck "
                              "after a heal")
    confirms, deliveries, *stuck = sec["findings"]
    assert [(f["what"], f["process"], f["timeline"]["stuck"]["id"]) for f in stuck] == [
        ("publish", 2, "2-0"), ("publish", 3, "3-0")]
    assert {k: confirms[k] for k in ("queue", "node", "what", "status", "last_heal_ms",
                                     "last_before_ms", "first_after_ms", "main_after_heal_ms",
                                     "bound_ms")} == {
        "queue": "q", "node": "n1", "what": "confirms", "status": "not-resumed",
        "last_heal_ms": 1000.5, "last_before_ms": -50.5, "first_after_ms": None,
        "main_after_heal_ms": 10999.5, "bound_ms": 4000.0}
    assert confirms["mended"][0]["after_heal_ms"] == 10999.5  # began 1 s before its op
    assert "the harness then restarted n1 (restart-app" in confirms["statement"]
    assert deliveries["what"] == "deliveries" and deliveries["node"] is None
    n2 = sec["queues"][0]["nodes"][1]
    assert n2["deliveries"]["drain_deliveries"] == 1
    assert sec["queues"][0]["deliveries"]["held_at_bound"] == 1


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_spark_too_short_and_no_fault_never_make_the_run_unknown(tmp_path: Path) -> None:
    # The main phase ends 1.5 s after the heal, before the 4 s bound: nothing confirmed yet.
    ops = [*partition(100, 1000), *publish("n1", 1, 0, 50), *consume("n2", 9, "1-0", 60),
           *publish("n1", 2, 0, 1200, "info", done=2400)]
    valid, sec = live(history(tmp_path / "short.jsonl", ops, 2500))
    assert valid is True and sec["valid"] == "unknown" and sec["judged"] is False
    assert sec["summary"] == ("unknown: the main phase ran 1.5 s after the last heal, less than "
                              "the bound (4 s)")
    quiet = [*publish("n1", 1, 0, 50), *consume("n2", 9, "1-0", 60)]
    valid, sec = live(history(tmp_path / "quiet.jsonl", quiet, 2500))
    assert valid is True and sec["status"] == "not-applicable"
