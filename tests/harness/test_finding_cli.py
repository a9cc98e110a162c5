"""`python -m harness finding RUN_DIR [--replays FILE ...] [--out PATH]`: the finding report from the
command line. Exit 0 printing the page's path; exit 2 with a clear message for a run with nothing
to report or a --replays file that is not there; the replay rate from a planted matrix.json and a
planted archive; a scenario file rebuilt for a run older than scenario files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from tests.reports.finding_store import SAC, copy_finding, plant_run, planted_results

OWN = "20270115T080000.000000Z"


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["finding", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def row(run_dir: str, line: str, valid: Any, seed: int = 1) -> dict[str, Any]:
    """A matrix row of the planted scenario, as matrix.json holds it."""
    return {"scenario": "planted", "expect": "valid", "judgement": "as expected", "valid": valid,
            "exit_code": 0 if valid is True else 1, "wall_s": 60.0, "run_dir": run_dir,
            "seed": seed, "rabbitmq": line, "variant": "",
            "versions": {"rabbitmq": {"4.3": "4.3.6", "4.0": "4.0.5"}[line]}}


def planted_series(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The planted run (listed in the matrix, as a series would), two more runs of it on 4.3 (one
    showing the duplicate, one valid) in a matrix.json, and an archive of two runs on 4.0 whose
    run directories are gone (one showing it). Returns (run, matrix.json, archive)."""
    store = tmp_path / "store" / "planted"
    own = plant_run(store / OWN)
    again = plant_run(store / "20270116T080000.000000Z")
    valid = plant_run(store / "20270117T080000.000000Z",
                      results={"valid": True, "queue": {"valid": True, "anomalies": []}})
    matrix = tmp_path / "matrix.json"
    matrix.write_text(json.dumps({"rows": [row(str(own), "4.3", False, seed=7),
                                           row(str(again), "4.3", False),
                                           row(str(valid), "4.3", True)]}))
    archive = tmp_path / "archive.jsonl"
    archive.write_text("".join(json.dumps(x) + "\n" for x in (
        {"row": row("planted/gone-1", "4.0", False), "spec": {}, "results": planted_results()},
        {"row": row("planted/gone-2", "4.0", True), "spec": {},
         "results": {"valid": True, "queue": {"valid": True, "anomalies": []}}})))
    return own, matrix, archive


def test_writes_finding_md_and_prints_its_path(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    run = plant_run(tmp_path / "run")
    code, out, _ = run_cli([str(run)], capsys)
    assert (code, out) == (0, f"{run / 'finding.md'}\n")
    page = (run / "finding.md").read_text()
    assert page.startswith("# A message delivered again without the redelivered flag: planted on "
                           "RabbitMQ 4.3.6\n")
    assert page.rstrip().endswith("Replay rate: not measured (give --replays with the series' "
                                  "matrix.json files or archives).")
    code, out, _ = run_cli([str(run), "--out", str(tmp_path / "f.md")], capsys)
    assert (code, out) == (0, f"{tmp_path / 'f.md'}\n")
    assert (tmp_path / "f.md").read_bytes() == (run / "finding.md").read_bytes()


def test_replay_rate_from_a_matrix_and_an_archive(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    run, matrix, archive = planted_series(tmp_path)
    code, _out, err = run_cli([str(run), "--replays", str(matrix), str(archive)], capsys)
    assert code == 0, err
    page = (run / "finding.md").read_text()
    assert ("Replay rate: reproduced 1 of 2 on RabbitMQ 4.0.5; reproduced 2 of 3 on RabbitMQ "
            "4.3.6 (this run among them).") in page


@pytest.mark.parametrize("results, says", [
    (None, "has no results.json: nothing to report"),
    ({"valid": True, "queue": {"valid": True}}, "is not a finding: its results say valid True"),
    ({"valid": "unknown", "queue": {"valid": "unknown"}}, "results say valid 'unknown'"),
])
def test_nothing_to_report_exits_2_with_why(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            results: dict[str, Any] | None, says: str) -> None:
    run = plant_run(tmp_path / "run", results=results or {"valid": False})
    if results is None:
        (run / "results.json").unlink()
    code, out, err = run_cli([str(run)], capsys)
    assert code == 2 and out == "" and says in err
    assert not (run / "finding.md").exists()


def test_a_missing_replays_file_exits_2(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    run = plant_run(tmp_path / "run")
    code, _out, err = run_cli([str(run), "--replays", str(tmp_path / "none.json")], capsys)
    assert code == 2 and f"no such file: {tmp_path / 'none.json'}" in err


def test_a_run_older_than_scenario_files_gets_one_rebuilt(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = copy_finding(SAC, tmp_path)
    assert run_cli([str(run)], capsys)[0] == 0
    page = (run / "finding.md").read_text()
    assert "The run stored no scenario.toml (it predates them); this one was rebuilt" in page
    assert "# Rebuilt from the run's test.json (quorum-sac-fifo, seed 3001)" in page
    assert '[[nemesis.schedule]]\n# hit n2\nstart_s = 10.002\nfault = "kill"' in page
    assert '[[nemesis.schedule]]\n# hit n1\nstart_s = 40.721\nfault = "kill"' in page
    assert not (run / "scenario.toml").exists()  # the page carries it; the run is left as stored


def test_a_run_whose_only_finding_is_a_stalled_hand_over_gets_its_page(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.reports.finding_store import plant_hand_over

    run = plant_hand_over(tmp_path / "store" / "planted-sac" / OWN)
    code, out, err = run_cli([str(run)], capsys)
    assert (code, err) == (0, "")
    assert out.strip() == str(run / "finding.md")
    page = (run / "finding.md").read_text()
    assert "### Stalled hand-over: the broker ended the active consumer `c5` at 7.200 s" in page
    assert "| 22.000000 | 08:00:22.000 | delivered (consume) | 6 | c6 |" in page
