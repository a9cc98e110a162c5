"""A test store whose runs carry test strength (issue 19): tests/reports/fixture_store.py's
store, with the fixture's literal faults, strength and incidents sections
(tests/harness/fixtures/make_run.py) added to two runs: the invalid run is strong (both
faults noticed), the valid one weak (neither noticed). A second scenario matrix holds rows
as harness.matrix writes them since issue 19 (the judgement "weak", `strength`,
`weak_reason`, a `weak` count per scenario)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.harness.fixtures.make_run import strength_sections
from tests.reports.fixture_store import INVALID, VALID, make_store

STRENGTH_MATRIX = "20261123T150000.000000Z"
STRONG_SUMMARY = "faults noticed 2 of 2, failovers 2, most messages at risk 14"
WEAK_SUMMARY = "faults noticed 0 of 2, failovers 0, most messages at risk 14"
WEAK_REASON = "neither of 2 faults was noticed by RabbitMQ"


def _add(run: Path, weak: bool) -> None:
    results: dict[str, Any] = json.loads((run / "results.json").read_text())
    results.update(strength_sections(weak=weak))
    (run / "results.json").write_text(json.dumps(results))


def matrix_rows() -> list[dict[str, Any]]:
    """Returns the strength matrix's rows: a weak run, a strong valid one, a strong finding,
    and a row of an older matrix (no strength fields)."""
    base = {"exit_code": 0, "wall_s": 98.5, "attempts": 211, "acknowledged": 208, "lost": 0,
            "unexpected": 0, "duplicated": 2, "unflagged_duplicated": 0, "recovered": 1,
            "ordering_violations": 0, "problems": [], "expect": "valid", "tries": 1,
            "infrastructure": None}
    return [
        {**base, "scenario": VALID[0], "seed": 3, "valid": True, "judgement": "weak",
         "run_dir": f"/elsewhere/store/{VALID[0]}/{VALID[1]}", "strength": WEAK_SUMMARY,
         "weak_reason": WEAK_REASON, "exit_code": 2},
        {**base, "scenario": "quorum-partition", "seed": 4, "valid": True,
         "judgement": "as expected", "run_dir": "/elsewhere/store/quorum-partition/x",
         "strength": STRONG_SUMMARY, "weak_reason": None},
        {**base, "scenario": INVALID[0], "seed": 5, "valid": False, "judgement": "FINDING",
         "lost": 2, "run_dir": f"/elsewhere/store/{INVALID[0]}/{INVALID[1]}",
         "strength": STRONG_SUMMARY, "weak_reason": None, "exit_code": 1},
        {k: v for k, v in {**base, "scenario": "old", "seed": 6, "valid": True,
                           "judgement": "as expected", "run_dir": ""}.items()
         if k not in ("tries", "infrastructure")},
    ]


def make_strength_store(store: Path) -> dict[str, Path]:
    """Builds the store under `store`. Returns the run directories by verdict (as
    fixture_store.make_store; "valid" is the weak run) and "matrix", the strength matrix."""
    runs = make_store(store)
    _add(runs["invalid"], weak=False)
    _add(runs["valid"], weak=True)
    matrix = store / "matrix" / STRENGTH_MATRIX
    matrix.mkdir(parents=True)
    summaries = [
        {"scenario": VALID[0], "expect": "valid", "min_rate": 1.0, "runs": 1, "valid": 1,
         "invalid": 0, "unknown": 0, "weak": 1, "held": 0, "judgements": {"weak": 1},
         "rate": 0.0, "verdict": "weak"},
        {"scenario": INVALID[0], "expect": "valid", "min_rate": 1.0, "runs": 1, "valid": 0,
         "invalid": 1, "unknown": 0, "weak": 0, "held": 0, "judgements": {"FINDING": 1},
         "rate": 0.0, "verdict": "FINDING"},
    ]
    (matrix / "matrix.json").write_text(json.dumps({
        "exit_code": 2, "problems": [f"{VALID[0]}: 1 of 1 runs were weak"],
        "summaries": summaries, "rows": matrix_rows()}))
    return {**runs, "matrix": matrix}
