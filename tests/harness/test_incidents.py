"""Incidents assembled from literal results: grouping, timeline, log lines once, summaries."""

from __future__ import annotations

from typing import Any

from harness.explain import LogLine
from harness.incidents import anomaly_classes, assemble, phase_spans
from history import HARNESS, Op

MS = 1_000_000


def fault(index: int, start: float, end: float, **kw: Any) -> dict[str, Any]:
    return {"index": index, "f": "start-partition", "fault": "partition-one", "kind": "partition",
            "target": ["n1"], "start_ms": start, "end_ms": end, **kw}


def results(by_fault: list[dict[str, Any]] | None = None, **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "queue": {"anomalies": ["lost", "unflagged_duplicated"]},
        "ordering": {"violation_count": 0},
        "fates": {"by_fault": by_fault or []},
    }
    base.update(kw)
    return base


def entry(window: int | None, counts: dict[str, int],
          examples: dict[str, list[str]] | None = None) -> dict[str, Any]:
    return {"window": window, "start_ms": None, "end_ms": None, "counts": counts,
            "examples": examples or {c: [f"0-{n}"] for c, n in counts.items()}}


def test_overlapping_faults_make_one_incident_told_in_time_order() -> None:
    faults = [
        fault(0, 1000.0, 5000.0, noticed=True, noticed_ms=700.0, noticed_when="during",
              detections=[{"detector": "distribution", "node": "n2", "at_ms": 1700.0,
                           "text": "node n1 down"}],
              effects=[{"kind": "unsynchronised-promotion", "node": "n2", "at_ms": 2000.0,
                        "text": "n2 promoted unsynchronised"}], closed_by="stop-partition"),
        fault(1, 4000.0, 6000.0, f="kill", fault="kill", kind="kill", target=["n3"],
              noticed=False, closed_by="start"),
        fault(2, 9000.0, 9500.0, noticed=False),  # nothing attributed to it: no incident
    ]
    r = results(faults=faults,
                queue={"anomalies": ["lost"]}, by_fault=[
                    entry(0, {"lost": 2400, "redelivered_duplicated": 1},
                          {"lost": ["0-1", "0-2"], "redelivered_duplicated": ["0-9"]}),
                    entry(1, {"lost": 3}, {"lost": ["0-2", "0-3"]})],
                perf={"windows": [{"recovery_ms": 250.0}, {"recovery_ms": None}, {}]},
                mends={"mends": [{"t_s": 20.0, "f": "recover-node", "node": "n1",
                                  "action": "restart-app"}]})
    lines = [LogLine(1700 * MS, "n2", "node down", "node n1 down", "n2/rabbit.log:3"),
             LogLine(30_000 * MS, "n2", "promotion", "far too late", "n2/rabbit.log:9")]
    phases = [{"phase": "main", "start_ms": 0.0, "end_ms": 10000.0},
              {"phase": "drain", "start_ms": 21000.0, "end_ms": 22000.0}]
    (inc,) = assemble(r, phases, lines, end_ms=22000.0)
    assert inc["id"] == 1 and inc["faults"] == [0, 1]
    assert (inc["start_ms"], inc["end_ms"]) == (1000.0, 6000.0)
    # Counts are summed across the incident's windows; examples merged, each id once.
    assert inc["counts"] == {"lost": 2403, "redelivered_duplicated": 1}
    assert inc["examples"] == {"lost": ["0-1", "0-2", "0-3"], "redelivered_duplicated": ["0-9"]}
    assert [(e["at_ms"], e["what"]) for e in inc["timeline"]] == [
        (1000.0, "fault start"), (1700.0, "noticed"), (2000.0, "unsynchronised-promotion"),
        (4000.0, "fault start"), (5000.0, "heal"), (5250.0, "recovery"), (6000.0, "heal"),
        (20000.0, "mend"), (21000.0, "phase"), (22000.0, "phase")]
    assert inc["timeline"][1]["text"] == "distribution: node n1 down"
    assert inc["timeline"][0]["text"] == "partition-one on n1" and inc["timeline"][0]["node"] == "n1"
    # The broker's log once for the incident, from its own stretch only.
    assert inc["log_lines"] == [{"t_s": 1.7, "node": "n2", "label": "node down",
                                 "text": "node n1 down", "evidence": "n2/rabbit.log:3"}]
    assert inc["summary"] == ("2,403 lost under the partition-one of n1 and 1 more fault "
                              "(noticed 0.7 s in; n2 promoted unsynchronised)")


def test_each_separate_fault_is_its_own_incident_and_the_unattributed_come_last() -> None:
    r = results(faults=[fault(0, 1000.0, 2000.0), fault(1, 5000.0, 6000.0, noticed=False)],
                queue={"anomalies": ["unexpected", "unflagged_duplicated"]},
                ordering={"violation_count": 1},
                by_fault=[entry(0, {"reordered": 1}), entry(1, {"unflagged_duplicated": 1}),
                          entry(None, {"unexpected": 2})],
                mends={"mends": [{"t_s": 5.5, "f": "recover-node", "node": "n1",
                                  "action": "restart-app"}]})
    incidents = assemble(r, end_ms=9000.0)
    assert [(i["id"], i["faults"], i["counts"]) for i in incidents] == [
        (1, [0], {"reordered": 1}), (2, [1], {"unflagged_duplicated": 1}),
        (3, [], {"unexpected": 2})]
    assert incidents[0]["summary"] == "1 reordering under the partition-one of n1"
    assert incidents[1]["summary"] == ("1 unflagged duplicate under the partition-one of n1 "
                                       "(not noticed by RabbitMQ)")
    assert incidents[2]["summary"] == "2 unexpected deliveries outside every fault window"
    # The unattributed incident runs from the last fault's end to the history's end.
    assert (incidents[2]["start_ms"], incidents[2]["end_ms"]) == (6000.0, 9000.0)
    # A mend belongs to the incident whose stretch (to the next incident's start) holds it.
    assert [e["what"] for e in incidents[1]["timeline"]] == ["fault start", "mend", "heal"]
    assert "mend" not in [e["what"] for e in incidents[0]["timeline"]]


def test_allowed_classes_alone_make_no_incident_and_no_anomaly_none() -> None:
    flagged_only = results(faults=[fault(0, 1000.0, 2000.0)],
                           queue={"anomalies": []},
                           by_fault=[entry(0, {"redelivered_duplicated": 4})])
    assert assemble(flagged_only) == []
    assert assemble(results()) == []


def test_older_results_without_faults_take_the_perf_windows() -> None:
    r = results(queue={"anomalies": ["lost"]}, by_fault=[entry(0, {"lost": 1})],
                perf={"windows": [{"f": "kill", "target": ["n2"], "start_ms": 10.0,
                                   "end_ms": 20.0, "closed_by": "start", "recovery_ms": 5.0}]})
    (inc,) = assemble(r)
    assert inc["faults"] == [0] and inc["end_ms"] == 25.0
    assert [(e["what"], e["text"]) for e in inc["timeline"]] == [
        ("fault start", "kill on n2"), ("heal", "ended by start"),
        ("recovery", "first confirm 5 ms after the heal")]
    assert inc["summary"] == "1 lost under the kill of n2"


def test_anomaly_classes_are_the_checkers_own() -> None:
    assert anomaly_classes(results()) == {"lost", "unflagged_duplicated"}
    assert anomaly_classes(results(ordering={"violation_count": 2})) == {
        "lost", "unflagged_duplicated", "reordered"}


def test_phase_spans_pair_starts_with_ends() -> None:
    def ph(t_ms: int, phase: str, state: str) -> Op:
        return Op(type="info", process=HARNESS, f="phase", value={"phase": phase, "state": state},
                  time=t_ms * MS)

    ops = [ph(0, "main", "start"), ph(100, "main", "end"), ph(150, "drain", "start"),
           Op(type="info", process=HARNESS, f="depth", value={}, time=160 * MS),
           ph(200, "drain", "incomplete"), ph(300, "teardown", "start")]
    assert phase_spans(ops) == [
        {"phase": "main", "start_ms": 0.0, "end_ms": 100.0},
        {"phase": "drain", "start_ms": 150.0, "end_ms": 200.0},
        {"phase": "teardown", "start_ms": 300.0, "end_ms": None}]
