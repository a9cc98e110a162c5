"""The metadata section (checkers.metadata, checkers.spark_metadata) on planted histories: a
minority refusing during its partition and serving after the heal (valid), never serving again
(invalid, a finding), a run too short after the heal (unknown); each also worked out by
tests/checkers/oracle_metadata.py. Then the rules on literal facts, and the live watch
(checkers.resume_watch) waiting for the minority to serve again.

Bound as in tests/checkers/test_liveness.py: 4 s. Partition of n3 from 1 s to 5 s (heal at
5000.5 ms), probes of n1, n2 and n3 every 500 ms.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from checkers import CheckOptions, check_history, spark_io
from checkers.liveness import Timeline
from checkers.metadata import ProbeCount, ProbeNodeFacts, judge_node, windows_breakdown
from checkers.results import FALSE_ONLY
from checkers.resume_watch import ResumeWatch
from history import HARNESS, METADATA_PROBE, Op
from history.faults import FaultWindow
from tests.checkers import oracle
from tests.checkers.histories import write_lines
from tests.checkers.oracle_metadata import judge_metadata
from tests.checkers.test_arrow_json import assert_alike, line
from tests.checkers.test_liveness import BOUND, consume, history, partition, publish

S = 1_000_000_000
MS = 1_000_000
Planted = list[tuple[float, dict[str, Any]]]
KHEPRI = ("INTERNAL_ERROR - failed to declare queue '{q}' in vhost '/' because the operation "
          "timed out")
OBSERVED = (0.5, {"type": "info", "process": HARNESS, "f": METADATA_PROBE,
                  "value": {"nodes": ["n1", "n2", "n3"], "interval_s": 0.5, "timeout_s": 0.3,
                            "queue_prefix": "harness-probe-", "exchange": "amq.direct"}})


def probe_round(node: str, pid: int, k: int, at: float, declare: str = "ok",
                connect: str = "ok") -> Planted:
    """One probe round of `node` by process `pid` from `at` ms (an op every 10 ms): connect,
    then declare answered `declare` ("ok", "fail" with 541, "info" with no answer), then, when
    ok, bind and delete."""
    q = f"harness-probe-{node}-{k}"
    base = {"process": pid, "value": q, "node": node, "queue": q, "phase": "main"}
    out: Planted = []
    steps = [("connect", connect), ("declare", declare), ("bind", "ok"), ("delete", "ok")]
    for i, (f, outcome) in enumerate(steps):
        t = at + 10 * i
        out.append((t, {"type": "invoke", "f": f, **base}))
        error, extra = None, {}
        if outcome == "fail":
            error, extra = f"541 {KHEPRI.format(q=q)}", {"extra": {"reply_code": 541}}
        elif outcome == "info":
            error = "StreamLostError: no answer to queue.declare within 0.3s"
        out.append((t + 5, {"type": outcome, "f": f, **base, "error": error, **extra}))
        if outcome != "ok":
            break
    return out


def probes(until_ms: float, minority: dict[str, str], heal_serves_at: float | None) -> Planted:
    """Rounds of n1, n2 (always ok) and n3 every 500 ms from 100 ms to `until_ms`: n3's
    declare answered as `minority` says for rounds in the partition (1000-5000 ms: "fail" on
    even rounds, "info" on odd ones, as given), and after the heal "ok" from `heal_serves_at`
    on (None: never; before it, "info")."""
    out: Planted = [OBSERVED]
    pids = {"n1": 101, "n2": 102, "n3": 103}
    k, t = 0, 100.0
    while t < until_ms:
        k += 1
        for node in ("n1", "n2", "n3"):
            declare = "ok"
            if node == "n3" and 1000 <= t < 5000:
                declare = minority["even" if k % 2 == 0 else "odd"]
            elif node == "n3" and t >= 5000 and (heal_serves_at is None or t < heal_serves_at):
                declare = "info"
            out += probe_round(node, pids[node], k, t, declare)
            if declare == "info":
                pids[node] += 10  # retired after an unknown outcome
        t += 500
    return out


WORKLOAD: Planted = [*publish("n1", 1, 0, 50), *consume("n2", 9, "1-0", 60),
                     *publish("n1", 1, 1, 5600), *consume("n2", 9, "1-1", 5700)]
MINORITY = {"even": "fail", "odd": "info"}


def check(path: Path) -> dict[str, Any]:
    return check_history(path, options=CheckOptions(), liveness=BOUND)


def agree(path: Path, got: dict[str, Any]) -> None:
    want = judge_metadata(path, BOUND.bound_ns)
    assert want is not None
    assert oracle.mismatches(got, want) == []


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_a_minority_refusing_in_its_partition_and_serving_after_the_heal_is_valid(
        tmp_path: Path) -> None:
    path = history(tmp_path / "h.jsonl", [*WORKLOAD, *partition(1000, 5000),
                                          *probes(12_000, MINORITY, 6000)], 12_000)
    r = check(path)
    m = r["metadata"]
    agree(path, m)
    assert (r["valid"], m["valid"], m["status"], m[FALSE_ONLY]) == (True, True, "served", True)
    assert m["findings"] == [] and m["summary"].startswith("every probed node (3) served")
    n3 = next(n for n in m["nodes"] if n["node"] == "n3")
    assert n3["after_heal"]["status"] == "served"
    assert n3["after_heal"]["first_served_ms"] == 1114.5  # round at 6100: its declare at 6115
    (w,) = m["windows"]
    assert (w["fault"], w["target"], w["closed_by"]) == ("partition-one", ["n3"],
                                                          "stop-partition")
    by_node = {n["node"]: n for n in w["nodes"]}
    assert (by_node["n1"]["ok"], by_node["n1"]["fail"], by_node["n1"]["info"]) == (32, 0, 0)
    # n3's rounds at 1100-4600: 8, each a connect ok and a declare refused (4 fail, 4 info)
    assert (by_node["n3"]["ok"], by_node["n3"]["fail"], by_node["n3"]["info"]) == (8, 4, 4)
    assert by_node["n3"]["ops"]["declare"] == {"ok": 0, "fail": 4, "info": 4}
    assert by_node["n3"]["errors"] == [
        {"type": "fail", "reply_code": 541, "count": 4,
         "error": "541 " + KHEPRI.format(q="<probe queue>")},
        {"type": "info", "reply_code": None, "count": 4,
         "error": "StreamLostError: no answer to queue.declare within 0.3s"}]
    outside = {n["node"]: n for n in m["outside_faults"]}
    assert outside["n3"]["info"] == 2  # the rounds at 5100 and 5600, before it served again
    # the report's plot: per node, per second, completions by outcome
    tl = m["timeline"]
    assert tl["bucket_ms"] == 1000 and tl["truncated"] is False
    at = {(x["node"], x["t_ms"], x["outcome"]): x["n"] for x in tl["series"]}
    assert at[("n1", 1000, "ok")] == 8  # rounds at 1100 and 1600, four ops each
    # n3's rounds at 1100 (no answer) and 1600 (refused 541), each after a connect ok
    assert {k[2]: v for k, v in at.items() if k[:2] == ("n3", 1000)} == {
        "ok": 2, "refused_541": 1, "no_answer": 1}
    assert {k[2] for k in at if k[:2] == ("n3", 7000)} == {"ok"}



@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_the_report_shows_the_section_the_checker_wrote_with_its_plot(tmp_path: Path) -> None:
    import json

    from reports.report import render
    path = history(tmp_path / "history.jsonl", [*WORKLOAD, *partition(1000, 5000),
                                                *probes(12_000, MINORITY, 6000)], 12_000)
    r = check(path)
    (tmp_path / "results.json").write_text(json.dumps(r))
    assert "metadata.png" in [p.name for p in render(tmp_path, index=False)]
    page = (tmp_path / "report.html").read_text()
    assert '<div class="promise" id="metadata">' in page and '<img src="metadata.png"' in page
    assert r["metadata"]["summary"] in page


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_a_minority_that_never_serves_metadata_again_is_a_finding(tmp_path: Path) -> None:
    path = history(tmp_path / "h.jsonl", [*WORKLOAD, *partition(1000, 5000),
                                          *probes(12_000, MINORITY, None)], 12_000)
    r = check(path)
    m = r["metadata"]
    agree(path, m)
    assert (r["valid"], m["valid"], m["status"]) == (False, False, "not-served")
    (finding,) = m["findings"]
    assert finding["node"] == "n3" and finding["status"] == "not-served"
    assert "n3 never served metadata again after the last heal" in finding["statement"]
    assert finding["refused_past_bound_ms"] == 4114.5  # the round at 9100, past 9000.5
    assert r["queue"]["valid"] is True  # refusals of metadata lose no message


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_a_run_ending_before_the_bound_without_a_declare_answered_is_unknown(
        tmp_path: Path) -> None:
    path = history(tmp_path / "h.jsonl", [*WORKLOAD, *partition(1000, 5000),
                                          *probes(7000, MINORITY, None)], 7000)
    r = check(path)
    m = r["metadata"]
    agree(path, m)
    assert (m["valid"], m["status"], m["judged"]) == ("unknown", "unknown", False)
    n3 = next(n for n in m["nodes"] if n["node"] == "n3")
    assert "ran only 2.0 s after the last heal" in n3["after_heal"]["reason"]
    assert r["valid"] is not False  # composes only when false


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_the_section_is_absent_without_the_probe(tmp_path: Path) -> None:
    plain = history(tmp_path / "plain.jsonl", [*WORKLOAD, *partition(1000, 5000)], 12_000)
    assert "metadata" not in check(plain)
    said = history(tmp_path / "said.jsonl", [*WORKLOAD, *partition(1000, 5000), OBSERVED],
                   12_000)
    assert "metadata" not in check(said) and judge_metadata(said, BOUND.bound_ns) is None
    unsaid = history(tmp_path / "unsaid.jsonl", [*WORKLOAD, *partition(1000, 5000),
                                                 *probes(12_000, MINORITY, 6000)[1:]], 12_000)
    assert "metadata" not in check(unsaid)


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_without_a_fault_the_probe_is_counted_and_not_judged(tmp_path: Path) -> None:
    path = history(tmp_path / "h.jsonl", [*WORKLOAD[:4], *probes(1000, MINORITY, 0)], 1000)
    m = check(path)["metadata"]
    agree(path, m)
    assert (m["valid"], m["status"], m["windows"]) == ("unknown", "not-applicable", [])
    assert [n["ok"] for n in m["outside_faults"]] == [8, 8, 8]


@pytest.mark.spark
def test_pyarrow_keeps_a_probe_ops_f_node_and_error_as_spark_does(spark: Any,
                                                                  tmp_path: Path) -> None:
    lines = [line(type="invoke", process=4, f="connect", value=None, node="n3"),
             line(type="info", process=4, f="connect", value=None, node="n3",
                  error="AMQPConnectorStackTimeout: Timeout during AMQP handshake"),
             line(type="invoke", process=5, f="declare", value="harness-probe-n3-2", node="n3"),
             line(type="fail", process=5, f="declare", value="harness-probe-n3-2", node="n3",
                  error="541 INTERNAL_ERROR - timed out", reply_code=541),
             line(type="ok", process=5, f="delete", value="harness-probe-n3-2", node="n3",
                  queue="harness-probe-n3-2", phase="main")]
    lines = [ln.replace('"index":0', f'"index":{i}') for i, ln in enumerate(lines)]
    path = write_lines(tmp_path / "h.jsonl", lines)
    assert_alike(spark, path, tmp_path / "out")
    rows = spark_io.read_jsonl(spark, path).orderBy("_pos").collect()
    assert [(r["f"], r["node"], r["error"], r["cls"]) for r in rows][2:4] == [
        ("declare", "n3", None, None), ("declare", "n3", "541 INTERNAL_ERROR - timed out", None)]


# -- the rules on literal facts ------------------------------------------------------------------

TL = Timeline(heal=10 * S, bound=4 * S, main_end=30 * S)


def test_a_declare_answered_past_the_bound_without_a_refusal_then_is_unknown() -> None:
    j = judge_node(ProbeNodeFacts("n3", first_served=16 * S, probes_after=3), TL)
    assert (j["status"], j["valid"]) == ("unknown", "unknown")
    late = judge_node(ProbeNodeFacts("n3", first_served=20 * S, probes_after=30,
                                     refused_after=20, last_refused=19 * S,
                                     refused_past_bound=15 * S), TL)
    assert (late["status"], late["valid"]) == ("served-late", False)
    none = judge_node(ProbeNodeFacts("n3"), TL)
    assert none["reason"] == "no probe op was invoked through it after the last heal"


def test_errors_beyond_the_first_five_are_counted_apart() -> None:
    rows = [ProbeCount(0, "n3", "declare", "fail", f"5{i}0 E{i}", 500 + 10 * i, 10 - i)
            for i in range(7)]
    w = FaultWindow("start-partition", 0, S, {"fault": "partition-one", "nodes": ["n3"]},
                    closed_by="stop-partition")
    (win,), outside = windows_breakdown(rows, [w])
    (n3,) = win["nodes"]
    assert [e["count"] for e in n3["errors"]] == [10, 9, 8, 7, 6] and n3["more_errors"] == 2
    assert n3["fail"] == sum(range(4, 11)) and outside == []


# -- the live watch ------------------------------------------------------------------------------


def test_the_watch_waits_for_every_probed_node_to_serve_a_declare_after_the_heal() -> None:
    planted = [*WORKLOAD, *partition(1000, 5000), *probes(12_000, MINORITY, 8000)]
    watch = ResumeWatch()
    back = None
    for t, kw in sorted(planted, key=lambda x: x[0]):
        watch.observe(dataclasses.replace(Op(**kw), time=round(t * MS)))
        if back is None and watch.resumed():
            back = t
    assert back == 8115  # n3's first declare answered; n1, n2 and confirms were back before


def test_the_watch_waits_for_a_node_whose_only_probe_was_sent_while_it_was_cut_off() -> None:
    # khepri-minority-leader, 4.3 seed 4001: the cut-off node's declaration, sent during the
    # partition, was answered (541) by Khepri 30 s later, after the heal; no op of that node was
    # sent after the heal until then, and the node must still be waited for.
    healthy = [r for k, t in enumerate(range(100, 40_000, 500), 1) for node, pid in
               (("n1", 101), ("n2", 102)) for r in probe_round(node, pid, k, t)]
    cut_off = [(3000.0, {"type": "invoke", "f": "declare", "process": 103,
                         "value": "harness-probe-n3-6", "node": "n3",
                         "queue": "harness-probe-n3-6", "phase": "main"}),
               (33_000.0, {"type": "fail", "f": "declare", "process": 103,
                           "value": "harness-probe-n3-6", "node": "n3",
                           "queue": "harness-probe-n3-6", "phase": "main",
                           "error": "541 " + KHEPRI.format(q="harness-probe-n3-6")}),
               *probe_round("n3", 113, 7, 33_500)]
    planted = [*WORKLOAD, *partition(1000, 5000), OBSERVED, *healthy, *cut_off]
    watch = ResumeWatch()
    back = None
    for t, kw in sorted(planted, key=lambda x: x[0]):
        watch.observe(dataclasses.replace(Op(**kw), time=round(t * MS)))
        if back is None and watch.resumed():
            back = t
    assert back == 33_515  # n3's declaration after its refusal, not n1's and n2's at 5,100
