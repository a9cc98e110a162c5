"""The scenario matrix's judgement, rows, table and exit code (no cluster)."""

import json
from pathlib import Path

import pytest

from harness import matrix
from harness.cli import main


@pytest.mark.parametrize(("expect", "valid", "judgement"), [
    (True, True, matrix.AS_EXPECTED),
    (True, False, matrix.FINDING),
    (None, False, matrix.MEASURED),
    (None, True, matrix.MEASURED),
    (True, "unknown", matrix.UNKNOWN),
    (None, "unknown", matrix.UNKNOWN),
    (True, None, matrix.UNKNOWN),
])
def test_judge(expect, valid, judgement):
    assert matrix.judge(expect, valid) == judgement


RESULTS = {
    "valid": False,
    "queue": {"attempt_count": 100, "acknowledged_count": 98, "lost_count": 3,
              "unexpected_count": 0, "duplicated_count": 2, "unflagged_duplicated_count": 1,
              "recovered_count": 1},
    "ordering": {"violation_count": 4},
    "run": {"problems": []},
}


def test_row_takes_the_counts_from_results():
    row = matrix.make_row("kill", True, 1, 123.456, Path("/s/kill/x"), RESULTS)
    assert (row.attempts, row.acknowledged, row.lost, row.duplicated, row.unflagged_duplicated,
            row.recovered, row.ordering_violations) == (100, 98, 3, 2, 1, 1, 4)
    assert row.wall_s == 123.5 and row.judgement == matrix.FINDING


def test_row_of_a_run_that_never_checked_is_unknown_and_says_why():
    row = matrix.make_row("kill", True, 2, 5, Path("/s"), None, "cluster never formed")
    assert row.valid is None and row.lost is None
    assert row.judgement == matrix.UNKNOWN and row.problems == ("cluster never formed",)


def test_exit_code_orders_unknown_over_finding_over_success():
    ok = matrix.make_row("a", True, 0, 1, Path("."), {**RESULTS, "valid": True})
    measured = matrix.make_row("b", None, 1, 1, Path("."), RESULTS)
    finding = matrix.make_row("c", True, 1, 1, Path("."), RESULTS)
    unknown = matrix.make_row("d", True, 2, 1, Path("."), None, "boom")
    assert matrix.exit_code([ok, measured]) == 0
    assert matrix.exit_code([ok, measured, finding]) == 1
    assert matrix.exit_code([finding, unknown]) == 2
    assert matrix.exit_code([]) == 2


def test_write_leaves_a_table_and_json(tmp_path):
    rows = [matrix.make_row("partition", True, 0, 110, Path("/r/p"), {**RESULTS, "valid": True}),
            matrix.make_row("mirrored-partition", None, 1, 130, Path("/r/m"), RESULTS),
            matrix.make_row("kill", True, 2, 9, Path("/r/k"), None, "boot timed out")]
    js, md = matrix.write(rows, tmp_path / "m")
    doc = json.loads(js.read_text())
    assert doc["exit_code"] == 2
    assert [r["judgement"] for r in doc["rows"]] == ["as expected", "measured", "unknown"]
    text = md.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("| scenario |") and len(lines[2].split("|")) == len(lines[0].split("|"))
    assert "| mirrored-partition | loss possible | False | measured | 100 | 98 | 3 | 0 | 2 (1) |" in text
    assert "- kill: boot timed out" in text


def test_cli_rejects_unknown_scenarios_before_anything_starts(capsys):
    assert main(["matrix", "--scenarios", "healthy,nope"]) == 2
    assert "unknown scenarios: nope" in capsys.readouterr().err


def test_cli_validates_every_spec_before_anything_starts(capsys):
    assert main(["matrix", "--scenarios", "healthy,kill", "--time-limit", "-1"]) == 2
    assert "time limit" in capsys.readouterr().err
    assert main(["matrix", "--scenario", "healthy"]) == 2
