"""The scenario matrix's judgement, rows, table and exit code (no cluster)."""

import json
from pathlib import Path

import pytest

from harness import matrix
from harness.cli import main

VALID = matrix.Expectation()
LOSS = matrix.loss()


def results(valid, lost=0, anomalies=(), queue_valid=None):
    return {"valid": valid, "queue": {"valid": valid if queue_valid is None else queue_valid,
                                      "lost_count": lost, "anomalies": list(anomalies)}}


@pytest.mark.parametrize(("expect", "res", "judgement"), [
    (VALID, results(True), matrix.AS_EXPECTED),
    (VALID, results(False, 3, ["lost"]), matrix.FINDING),
    (VALID, results("unknown"), matrix.UNKNOWN),
    (VALID, None, matrix.UNKNOWN),
    (LOSS, results(False, 3, ["lost"]), matrix.DETECTED),
    (LOSS, results(True), matrix.MISSED),
    # lost counted but the drain was not proven: no detection, no pass
    (LOSS, results("unknown", 3, ["lost"], queue_valid="unknown"), matrix.UNKNOWN),
    # invalid, but not for the predicted reason
    (LOSS, results(False, 0, ["unexpected"]), matrix.FINDING),
    (LOSS, None, matrix.UNKNOWN),
])
def test_judge(expect, res, judgement):
    assert matrix.judge(expect, res) == judgement


def test_an_expectation_must_be_a_rate_in_0_1():
    with pytest.raises(ValueError):
        matrix.Expectation("lost", 0)
    assert LOSS.describe() == "lost in >= 90% of runs" and VALID.describe() == "valid"


RESULTS = {
    "valid": False,
    "queue": {"valid": False, "anomalies": ["lost"], "attempt_count": 100,
              "acknowledged_count": 98, "lost_count": 3, "unexpected_count": 0,
              "duplicated_count": 2, "unflagged_duplicated_count": 1, "recovered_count": 1},
    "ordering": {"violation_count": 4},
    "run": {"problems": []},
}
OK = {**RESULTS, "valid": True, "queue": {**RESULTS["queue"], "valid": True, "anomalies": [],
                                          "lost_count": 0}}


def test_row_takes_the_counts_from_results():
    row = matrix.make_row("kill", VALID, 1, 123.456, Path("/s/kill/x"), RESULTS, seed=7)
    assert (row.attempts, row.acknowledged, row.lost, row.duplicated, row.unflagged_duplicated,
            row.recovered, row.ordering_violations) == (100, 98, 3, 2, 1, 1, 4)
    assert row.wall_s == 123.5 and row.judgement == matrix.FINDING and row.seed == 7


def test_row_of_a_run_that_never_checked_is_unknown_and_says_why():
    row = matrix.make_row("kill", VALID, 2, 5, Path("/s"), None, "cluster never formed")
    assert row.valid is None and row.lost is None
    assert row.judgement == matrix.UNKNOWN and row.problems == ("cluster never formed",)


def test_exit_code_orders_unknown_over_finding_over_success():
    ok = matrix.make_row("a", VALID, 0, 1, Path("."), OK)
    detected = matrix.make_row("b", LOSS, 1, 1, Path("."), RESULTS)
    finding = matrix.make_row("c", VALID, 1, 1, Path("."), RESULTS)
    unknown = matrix.make_row("d", VALID, 2, 1, Path("."), None, "boom")
    assert matrix.exit_code([ok, detected]) == 0
    assert matrix.exit_code([ok, detected, finding]) == 1
    assert matrix.exit_code([finding, unknown]) == 2
    assert matrix.exit_code([]) == 2


def test_a_loss_scenario_below_its_rate_is_a_harness_failure():
    exp = {"m": LOSS, "q": VALID}
    rows = ([matrix.make_row("m", LOSS, 1, 100 + k, Path("."), RESULTS) for k in range(8)]
            + [matrix.make_row("m", LOSS, 0, 90, Path("."), OK) for _ in range(2)]
            + [matrix.make_row("q", VALID, 0, 50, Path("."), OK) for _ in range(10)])
    m, q = matrix.summarize(rows, exp)
    assert (m.runs, m.valid, m.invalid, m.unknown, m.held, m.rate) == (10, 2, 8, 0, 8, 0.8)
    assert (m.lost_min, m.lost_median, m.lost_max) == (0, 3, 3)
    assert m.verdict == "insensitive" and q.verdict == "ok" and q.rate == 1.0
    assert matrix.exit_code(rows, [m, q]) == 2
    assert matrix.problems([m, q]) == [
        "m: expected lost but the harness showed it in 8 of 10 runs (needs 90%): "
        "not sensitive enough"]
    never = matrix.summarize([matrix.make_row("m", LOSS, 0, 1, Path("."), OK)], exp)
    assert "never showed it in 0 of 1" in matrix.problems(never)[0]
    nine = rows[:8] + rows[:1] + rows[8:9]
    assert matrix.summarize(nine, exp)[0].verdict == "ok"


def test_write_leaves_a_table_and_json_that_rows_can_be_read_back_from(tmp_path):
    rows = [matrix.make_row("partition", VALID, 0, 110, Path("/r/p"), OK, seed=3),
            matrix.make_row("mirrored-partition", LOSS, 1, 130, Path("/r/m"), RESULTS, seed=3),
            matrix.make_row("kill", VALID, 2, 9, Path("/r/k"), None, "boot timed out", seed=3)]
    sums = matrix.summarize(rows, {"mirrored-partition": LOSS})
    js, md = matrix.write(rows, sums, tmp_path / "m")
    doc = json.loads(js.read_text())
    assert doc["exit_code"] == 2
    assert [r["judgement"] for r in doc["rows"]] == ["as expected", "detected", "unknown"]
    assert [s["verdict"] for s in doc["summaries"]] == ["ok", "ok", "unknown"]
    assert matrix.read_rows(js) == rows
    text = md.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("| scenario |") and len(lines[2].split("|")) == len(lines[0].split("|"))
    assert "| mirrored-partition | lost | 3 | False | detected | 100 | 98 | 3 | 0 | 2 (1) |" in text
    assert "| mirrored-partition | lost | 1 | 0 | 1 | 0 | 0 | 1/1 | 90% | ok | 3 / 3 / 3 |" in text
    assert "- kill (seed 3): boot timed out" in text


def test_cli_rejects_unknown_scenarios_before_anything_starts(capsys):
    assert main(["matrix", "--scenarios", "healthy,nope"]) == 2
    assert "unknown scenarios: nope" in capsys.readouterr().err


def test_cli_validates_every_spec_before_anything_starts(capsys):
    assert main(["matrix", "--scenarios", "healthy,kill", "--time-limit", "-1"]) == 2
    assert "time limit" in capsys.readouterr().err
    assert main(["matrix", "--scenario", "healthy"]) == 2


def test_cli_refuses_a_repeat_below_one_before_anything_starts(capsys):
    assert main(["run", "--scenario", "healthy", "--repeat", "0"]) == 2
    assert "--repeat must be >= 1" in capsys.readouterr().err


def test_every_unsafe_scenario_predicts_a_loss_and_names_a_safe_twin_with_its_faults():
    from harness.scenarios import SCENARIOS

    unsafe = {n: s for n, s in SCENARIOS.items() if s.expect.anomaly}
    assert {"mirrored-master-partition", "mirrored-ignore-split-brain",
            "mirrored-unsynced-promotion", "mirrored-manual-sync-rejoin",
            "transient-node-restart", "nondurable-node-restart",
            "transient-full-restart"} <= set(unsafe)
    for name, sc in unsafe.items():
        if sc.twin is None:
            continue
        twin = SCENARIOS[sc.twin]
        assert twin.expect.anomaly is None, name
        same = ("faults", "order", "interval_s", "duration_s", "targets")
        assert ({k: getattr(twin.spec.nemesis, k) for k in same}
                == {k: getattr(sc.spec.nemesis, k) for k in same}), name


def test_pair_table_sets_each_unsafe_scenario_beside_its_safe_twin():
    exp = {"m": LOSS, "q": VALID, "t": LOSS}
    rows = ([matrix.make_row("m", LOSS, 1, 100, Path("."), results(False, n, ["lost"]))
             for n in (1200, 3400, 2100)]
            + [matrix.make_row("q", VALID, 0, 50, Path("."), results(True)) for _ in range(2)]
            + [matrix.make_row("q", VALID, 1, 50, Path("."), results(False, 1, ["lost"]))]
            + [matrix.make_row("q", VALID, 2, 50, Path("."), results("unknown"))]
            + [matrix.make_row("q", VALID, 0, 50, Path("."), WEAK_RESULTS)]
            + [matrix.make_row("t", LOSS, 0, 50, Path("."), results(True))])
    text = matrix.pair_table(matrix.summarize(rows, exp), {"m": "q", "t": "twin-never-run"})
    lines = text.splitlines()
    assert len(lines) == 4  # header, rule, m, t; the twin q has no line of its own
    # Runs whose results predate test strength are counted as not judged for it.
    assert lines[2] == ("| m | 3 | 3 | 0 | 0 (3 not judged) | 1,200 / 2,100 / 3,400 | q | 5 | 2 | 1 "
                        "| 1 (4 not judged) |")
    assert lines[3] == "| t | 1 | 0 | 0 | 0 (1 not judged) | 0 / 0 / 0 | twin-never-run | 0 | - | - | - |"


WEAK_RESULTS = {**results(True), "strength": {
    "weak": True, "reason": "none of 2 partitions was noticed by RabbitMQ",
    "summary": "faults noticed 0 of 2, failovers 0, most messages at risk 1,500"}}


def test_a_weak_run_is_neither_a_detection_nor_a_safe_pass():
    assert matrix.judge(VALID, WEAK_RESULTS) == matrix.WEAK
    assert matrix.judge(LOSS, WEAK_RESULTS) == matrix.WEAK  # not MISSED: it tested nothing
    assert matrix.judge(LOSS, {**results(False, 5, ["lost"]), "strength": WEAK_RESULTS["strength"]}
                        ) == matrix.DETECTED  # a shown loss is shown, however weak the faults
    row = matrix.make_row("q", VALID, 0, 50, Path("."), WEAK_RESULTS)
    assert row.weak_reason == "none of 2 partitions was noticed by RabbitMQ"
    assert row.strength == "faults noticed 0 of 2, failovers 0, most messages at risk 1,500"
    rows = [row, matrix.make_row("q", VALID, 0, 50, Path("."), results(True))]
    [s] = matrix.summarize(rows, {"q": VALID})
    assert (s.runs, s.held, s.weak, s.verdict) == (2, 1, 1, matrix.WEAK)
    assert matrix.exit_code(rows, [s]) == 2
    assert matrix.problems([s]) == ["q: 1 of 2 runs were weak (RabbitMQ noticed none of their "
                                    "faults, or nothing was at risk): they tested nothing"]


def _row(scenario, line, res, expect=LOSS):
    return matrix.make_row(scenario, expect, 0, 60.0, f"store/{scenario}/x", res, seed=1,
                           rabbitmq=line)


def test_each_release_line_is_summarised_apart_and_shown_side_by_side(tmp_path):
    rows = [_row("quorum-ignore", "3.10", results(True), VALID),
            _row("quorum-ignore", "4.0", results(True), VALID),
            _row("quorum-ignore", "4.0", results(False, 2, ["lost"]), VALID),
            _row("transient-node-restart", "3.10", results(False, 9, ["lost"]))]
    summaries = matrix.summarize(rows, {"quorum-ignore": VALID, "transient-node-restart": LOSS})
    assert [(s.scenario, s.rabbitmq, s.runs, s.held) for s in summaries] == [
        ("quorum-ignore", "3.10", 1, 1), ("quorum-ignore", "4.0", 2, 1),
        ("transient-node-restart", "3.10", 1, 1)]
    na = [matrix.NotApplicable("mirrored-master-partition", "4.0",
                               "classic queue mirroring was removed in RabbitMQ 4.0")]
    text = matrix.variant_table(summaries, na, matrix.RABBITMQ_KEY)
    lines = text.splitlines()
    assert lines[0] == "| scenario | expected | RabbitMQ 3.10 | RabbitMQ 4.0 |"
    assert "| quorum-ignore | valid | 1/1 ok | 1/2 FINDING |" in lines
    assert "| transient-node-restart | lost | 1/1 ok | - |" in lines
    assert ("| mirrored-master-partition | - | - | not applicable: classic queue mirroring was "
            "removed in RabbitMQ 4.0 |") in lines
    # matrix.md leads with the side-by-side table; rows read back keep their line
    js, md = matrix.write(rows, summaries, tmp_path,
                          extra={"not_applicable": [vars(n) for n in na]})
    assert md.read_text().startswith("| scenario | expected | RabbitMQ 3.10 | RabbitMQ 4.0 |")
    assert "quorum-ignore (RabbitMQ 4.0)" in md.read_text()
    assert [r.rabbitmq for r in matrix.read_rows(js)] == ["3.10", "4.0", "4.0", "3.10"]


def test_the_side_by_side_data_is_the_markdown_table_s_content_and_matrix_json_keeps_it(
        tmp_path):
    rows = [_row("quorum-ignore", "3.10", results(True), VALID),
            _row("quorum-ignore", "4.0", results(False, 2, ["lost"]), VALID),
            _row("transient-node-restart", "3.10", results(False, 9, ["lost"]))]
    summaries = matrix.summarize(rows, {"quorum-ignore": VALID, "transient-node-restart": LOSS})
    na = [matrix.NotApplicable("mirrored-master-partition", "4.0", "mirroring was removed")]
    data = matrix.side_by_side(summaries, na)
    assert data == {
        "column": "broker.rabbitmq", "values": ["3.10", "4.0"],
        "titles": ["RabbitMQ 3.10", "RabbitMQ 4.0"],
        "lines": [
            {"scenario": "quorum-ignore", "expect": "valid", "cells": ["1/1 ok", "0/1 FINDING"]},
            {"scenario": "transient-node-restart", "expect": "lost", "cells": ["1/1 ok", "-"]},
            {"scenario": "mirrored-master-partition", "expect": "-",
             "cells": ["-", "not applicable: mirroring was removed"]}]}
    # one builder, two renderings: the Markdown table is this data, line by line
    assert matrix.variant_table(summaries, na) == matrix.variant_markdown(data)
    assert matrix.variant_table(summaries, na).splitlines()[2:] == [
        "| " + " | ".join([x["scenario"], x["expect"], *x["cells"]]) + " |"
        for x in data["lines"]]
    js, _md = matrix.write(rows, summaries, tmp_path / "two",
                           extra={"not_applicable": [vars(n) for n in na]})
    assert json.loads(js.read_text())["side_by_side"] == data
    # one line, nothing varied, nothing that could not run: nothing side by side
    one = matrix.summarize(rows[2:], {"transient-node-restart": LOSS})
    js, md = matrix.write(rows[2:], one, tmp_path / "one")
    assert "side_by_side" not in json.loads(js.read_text())
    assert md.read_text().startswith("| scenario | expected | runs |")


def test_a_row_stored_before_release_lines_reads_as_3_10(tmp_path):
    row = {k: v for k, v in vars(_row("kill", "3.10", results(True), VALID)).items()
           if k != "rabbitmq"}
    (tmp_path / "matrix.json").write_text(json.dumps({"rows": [row]}))
    assert matrix.read_rows(tmp_path / "matrix.json")[0].rabbitmq == "3.10"


def test_matrix_on_two_lines_runs_each_scenario_on_both_and_says_what_cannot_run(
        monkeypatch, capsys, tmp_path):
    import harness.cli as cli
    ran = []

    def fake_series(entries, a, not_applicable=()):
        ran.extend((n, s.broker.rabbitmq) for n, s, _e in entries)
        ran.extend(("n/a", n.scenario, n.rabbitmq, n.reason[:40]) for n in not_applicable)
        return 0

    monkeypatch.setattr(cli, "_series", fake_series)
    assert main(["matrix", "--scenarios", "quorum-ignore,mirrored-master-partition",
                 "--rabbitmq", "3.10,4.0"]) == 0
    assert ran == [("quorum-ignore", "3.10"), ("quorum-ignore", "4.0"),
                   ("mirrored-master-partition", "3.10"),
                   ("n/a", "mirrored-master-partition", "4.0",
                    "classic queue mirroring was removed in R")]
    assert main(["matrix", "--scenarios", "mirrored-master-partition", "--rabbitmq", "4.0"]) == 2
    assert "no scenario asked for can run" in capsys.readouterr().err
    assert main(["run", "--rabbitmq", "3.10,4.0"]) == 2
    assert "a run tests one RabbitMQ release" in capsys.readouterr().err


def unbooted_results(*, unrecoverable=True, also_false=None):
    """Results shaped as a stored power-loss run's (classic-power-loss-all on 4.3): its nodes
    did not boot again, the drain proved nothing, the liveness section says the queue did not
    come back (it composes only when false), and the run's verdict is false."""
    res = {
        "valid": False,
        "queue": {"valid": "unknown", "lost_count": 3017, "acknowledged_count": 3994,
                  "attempt_count": 3997, "anomalies": [],
                  "reason": "the drain did not complete: n1 did not boot again"},
        "liveness": {"valid": False, "composes_only_when_false": True,
                     "findings": [{"status": "not-resumed", "what": "deliveries"}]},
        "ordering": {"valid": True, "violation_count": 0},
        "run": {"valid": True, "problems": [], "unrecoverable_nodes": (
            [{"node": "n1", "text": "n1 did not boot"}] if unrecoverable else [])},
    }
    if also_false:
        res[also_false] = {"valid": False}
    return res


def test_a_run_false_only_because_its_nodes_did_not_boot_again_is_unknown_not_a_finding():
    assert matrix.judge(VALID, unbooted_results()) == matrix.UNKNOWN
    assert matrix.judge(LOSS, unbooted_results()) == matrix.UNKNOWN  # no loss proven either
    # Without a node that failed to boot, the queue not coming back is the finding it was.
    assert matrix.judge(VALID, unbooted_results(unrecoverable=False)) == matrix.FINDING
    # Another section false (one that composes always) is a finding whatever booted.
    assert matrix.judge(VALID, unbooted_results(also_false="ordering")) == matrix.FINDING
    # A queue section with a verdict keeps it: false is a finding, nodes booted or not.
    proven = unbooted_results()
    proven["queue"] = {**proven["queue"], "valid": False, "anomalies": ["lost"]}
    assert matrix.judge(VALID, proven) == matrix.FINDING
    assert matrix.judge(LOSS, proven) == matrix.DETECTED


def test_the_table_counts_an_unbooted_run_as_unknown_with_its_unproven_loss(tmp_path):
    rows = [matrix.make_row("classic-power-loss-all", VALID, 1, 629, tmp_path / "a",
                            unbooted_results(), seed=4001, rabbitmq="4.3"),
            matrix.make_row("classic-power-loss-all", VALID, 0, 600, tmp_path / "b", OK,
                            seed=4002, rabbitmq="4.3")]
    assert [r.judgement for r in rows] == [matrix.UNKNOWN, matrix.AS_EXPECTED]
    assert rows[0].queue_valid == "unknown" and rows[0].lost_proven is None
    [s] = matrix.summarize(rows, {})
    assert (s.runs, s.valid, s.invalid, s.unknown, s.held) == (2, 1, 0, 1, 1)
    assert s.verdict == matrix.UNKNOWN and s.judgements == {matrix.UNKNOWN: 1,
                                                           matrix.AS_EXPECTED: 1}
    assert (s.lost_min, s.lost_max) == (0, 0)  # 3017 unproven messages are no loss
    line = matrix.summary_table([s]).splitlines()[2]
    assert "| 2 | 1 | 0 | 1 |" in line and "FINDING" not in line and "| unknown |" in line
    assert "| 3017 (unproven) |" in matrix.table(rows)
    assert matrix.problems([s]) == ["classic-power-loss-all (RabbitMQ 4.3): 1 of 2 runs had "
                                    "no verdict"]
    assert matrix.exit_code(rows, [s]) == 2
    # Rows read back from matrix.json keep the queue's verdict.
    js, _md = matrix.write(rows, [s], tmp_path / "m")
    assert matrix.read_rows(js)[0].lost_proven is None


def _staying(line, seed, valid, publishes, consumers):
    res = {**results(valid), "liveness": {"valid": valid, "settlement": {
        "valid": valid, "publishes": publishes, "consumers": consumers}}}
    exp = matrix.expectation_of({}, "stream-partition", "workload.stay=both")
    return matrix.make_row("stream-partition", exp, 0 if valid else 1, 200.0,
                           f"store/s/{line}-{seed}", res,
                           seed=seed, rabbitmq=line, variant="workload.stay=both")


def test_a_staying_variant_s_cell_gives_its_seeds_and_what_settled_across_the_heals():
    rows = [_staying("4.3", 4003, False, {"settled": 10, "stuck": 2}, {"not-judged": 4}),
            _staying("4.3", 4002, True, {"settled": 1000}, {"not-judged": 4}),
            _staying("3.10", 4001, True, {"settled": 5}, {"fed": 2, "ended": 1}),
            _row("stream-partition", "3.10", results(True), VALID)]
    assert rows[0].settlement == {"publishes": {"settled": 10, "stuck": 2},
                                  "consumers": {"not-judged": 4}}
    assert rows[3].settlement is None  # no heal judged: nothing to say
    summaries = matrix.summarize(rows, {})
    assert [s.settlement for s in summaries[:2]] == [
        {"publishes": {"settled": 1010, "stuck": 2}, "consumers": {"not-judged": 8}},
        {"publishes": {"settled": 5}, "consumers": {"ended": 1, "fed": 2}}]
    data = matrix.side_by_side(summaries)
    assert data["lines"] == [
        {"scenario": "stream-partition (workload.stay=both)",
         "expect": "valid, " + matrix.SETTLED_TEXT,
         "cells": ["1/2 FINDING (seeds 4002,4003; publishes across a heal: 1,010 settled, "
                   "2 stuck; consumers through a heal: 8 not-judged)",
                   "1/1 ok (seeds 4001; publishes across a heal: 5 settled; consumers through "
                   "a heal: 1 ended, 2 fed)"]},
        # a scenario run without the staying clients keeps its plain cell
        {"scenario": "stream-partition", "expect": "valid", "cells": ["-", "1/1 ok"]}]
    assert data["values"] == ["4.3", "3.10"]  # in the order they first appear


def test_table_of_one_variant_prints_its_side_by_side_cells(tmp_path, capsys):
    rows = [_staying("4.3", 4002, True, {"settled": 7}, {"fed": 2}),
            _staying("3.10", 4001, True, {"settled": 5}, {"fed": 1}),
            _row("stream-partition", "4.3", results(True), VALID)]
    js, _md = matrix.write(rows, matrix.summarize(rows, {}), tmp_path / "m")
    code = main(["table", str(js), "--variant", "workload.stay=both", "--out",
                 str(tmp_path / "t")])
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[0] == "| scenario | expected | RabbitMQ 4.3 | RabbitMQ 3.10 |"
    assert ("| stream-partition (workload.stay=both) | valid, " + matrix.SETTLED_TEXT +
            " | 1/1 ok (seeds 4002; publishes across a heal: 7 settled; consumers through a "
            "heal: 2 fed) | 1/1 ok (seeds 4001; publishes across a heal: 5 settled; consumers "
            "through a heal: 1 fed) |") in out.splitlines()
    assert "| stream-partition | valid |" not in out  # the other runs are left out
    assert main(["table", str(js), "--variant", "workload.stay=nope"]) == 2
    assert "no run of variant 'workload.stay=nope'" in capsys.readouterr().err
