"""A store for tests, made of the fixture run (tests/harness/fixtures/run, checked by the real
checker) and a few variations of it: a valid run, an unknown one, one still running (no
results.json), and a scenario matrix naming them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

FIXTURE_RUN = Path(__file__).resolve().parents[1] / "harness" / "fixtures" / "run"

INVALID = ("partition", "20261123T101500.000000Z")
VALID = ("healthy", "20261123T110000.000000Z")
UNKNOWN = ("mirrored-partition", "20261123T120000.000000Z")
RUNNING = ("kill", "20261123T130000.000000Z")
MATRIX = "20261123T140000.000000Z"


def copy_run(store: Path, test: str, stamp: str) -> Path:
    """Copies the fixture run to store/<test>/<stamp>/, with its name set. Returns it."""
    run = store / test / stamp
    shutil.copytree(FIXTURE_RUN, run)
    info = json.loads((run / "test.json").read_text())
    info["name"] = test
    info["spec"]["name"] = test
    (run / "test.json").write_text(json.dumps(info, indent=2))
    return run


def _results(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "results.json").read_text())
    return data


def make_store(store: Path) -> dict[str, Path]:
    """Builds the test store under `store`. Returns the run directories by verdict."""
    invalid = copy_run(store, *INVALID)

    valid = copy_run(store, *VALID)
    r = _results(valid)
    r["valid"] = r["queue"]["valid"] = r["ordering"]["valid"] = True
    r["queue"].update(anomalies=[], lost=[], lost_count=0, unflagged_duplicated=[],
                      unflagged_duplicated_count=0, duplicated=r["queue"]["redelivered_duplicated"],
                      duplicated_count=r["queue"]["redelivered_duplicated_count"])
    r["ordering"].update(violation_count=0, consumers_affected_count=0, consumers_affected=[],
                         examples=[])
    (valid / "results.json").write_text(json.dumps(r))

    unknown = copy_run(store, *UNKNOWN)
    r = _results(unknown)
    r["valid"] = r["queue"]["valid"] = r["run"]["valid"] = "unknown"
    r["ordering"].update(valid=True, violation_count=0, consumers_affected_count=0,
                         consumers_affected=[], examples=[])
    r["queue"].update(anomalies=["lost"], drain_complete=False, reason=(
        "the drain did not complete (no harness event phase=drain state=end): lost messages "
        "cannot be told from messages still queued"))
    r["run"]["problems"] = ["drain did not complete"]
    (unknown / "results.json").write_text(json.dumps(r))

    running = copy_run(store, *RUNNING)
    (running / "results.json").unlink()
    lines = (running / "history.jsonl").read_text().splitlines(keepends=True)
    (running / "history.jsonl").write_text("".join(lines[: len(lines) // 2]))

    matrix = store / "matrix" / MATRIX
    matrix.mkdir(parents=True)
    rows = []
    for (test, stamp), valid_, expect, judgement in (
        (INVALID, False, True, "FINDING"),
        (VALID, True, True, "as expected"),
        (UNKNOWN, "unknown", None, "unknown"),
    ):
        rows.append({
            "scenario": test, "expect_valid": expect, "valid": valid_, "exit_code": 0,
            "wall_s": 98.5, "run_dir": f"/elsewhere/store/{test}/{stamp}", "attempts": 211,
            "acknowledged": 208, "lost": 2 if valid_ is False else 0, "unexpected": 0,
            "duplicated": 3, "unflagged_duplicated": 1, "recovered": 1,
            "ordering_violations": 2, "problems": ["drain did not complete"]
            if valid_ == "unknown" else [], "judgement": judgement,
        })
    rows.append({"scenario": "gone", "expect": "valid", "seed": 7, "valid": None,
                 "exit_code": 2, "wall_s": 3.0, "run_dir": "/elsewhere/store/gone/20261123T000000Z",
                 "problems": ["cluster would not start"], "judgement": "unknown"})
    summaries = [{"scenario": "gone", "expect": "valid", "min_rate": 1.0, "runs": 1, "valid": 0,
                  "invalid": 0, "unknown": 1, "judgements": {"unknown": 1}, "rate": 0.0,
                  "verdict": "unknown"}]
    (matrix / "matrix.json").write_text(json.dumps({
        "exit_code": 2, "problems": ["gone: never ran"], "summaries": summaries, "rows": rows}))
    (matrix / "matrix.md").write_text("| scenario |\n|---|\n")
    return {"invalid": invalid, "valid": valid, "unknown": unknown, "running": running}
