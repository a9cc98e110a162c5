"""The scenario matrix: run named scenarios one after another and tabulate what each found.

A row holds a scenario's verdict beside what the documentation leads us to
expect (`Scenario.expect_valid`). The matrix is judged by those
expectations: a scenario expected safe that is invalid is a *finding* (exit
1); a scenario whose verdict is unknown, or that could not run, makes the
matrix unknown (exit 2); a scenario where loss is documented as possible is
*measured* whatever it found. The table is written as matrix.json and
matrix.md in the store, for nightly CI to keep.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# How a row compares with its expectation.
AS_EXPECTED = "as expected"
FINDING = "FINDING"
MEASURED = "measured"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Row:
    """One scenario's run, as the matrix reports it."""

    scenario: str
    expect_valid: bool | None
    valid: bool | str | None
    exit_code: int
    wall_s: float
    run_dir: str
    attempts: int | None = None
    acknowledged: int | None = None
    lost: int | None = None
    unexpected: int | None = None
    duplicated: int | None = None
    unflagged_duplicated: int | None = None
    recovered: int | None = None
    ordering_violations: int | None = None
    problems: tuple[str, ...] = ()

    @property
    def judgement(self) -> str:
        return judge(self.expect_valid, self.valid)


def judge(expect_valid: bool | None, valid: bool | str | None) -> str:
    """Takes the expectation (True: safe; None: loss possible) and the verdict. Returns how they
    compare: unknown, a finding, as expected, or measured."""
    if valid not in (True, False):
        return UNKNOWN
    if expect_valid is None:
        return MEASURED
    return AS_EXPECTED if valid == expect_valid else FINDING


def make_row(scenario: str, expect_valid: bool | None, exit_code: int, wall_s: float,
             run_dir: Path, results: dict[str, Any] | None, error: str | None = None) -> Row:
    """Takes a scenario's name, expectation, exit code, wall time, run directory and results
    (None when it never got to a check) and its error. Returns its Row."""
    r = results or {}
    q = r.get("queue", {})
    o = r.get("ordering", {})
    problems = tuple(r.get("run", {}).get("problems", ()))
    if error:
        problems += (error,)
    return Row(
        scenario=scenario, expect_valid=expect_valid, valid=r.get("valid"), exit_code=exit_code,
        wall_s=round(wall_s, 1), run_dir=str(run_dir),
        attempts=q.get("attempt_count"), acknowledged=q.get("acknowledged_count"),
        lost=q.get("lost_count"), unexpected=q.get("unexpected_count"),
        duplicated=q.get("duplicated_count"),
        unflagged_duplicated=q.get("unflagged_duplicated_count"),
        recovered=q.get("recovered_count"), ordering_violations=o.get("violation_count"),
        problems=problems,
    )


def exit_code(rows: list[Row]) -> int:
    """Takes the rows. Returns 2 if any is unknown, else 1 if any is a finding, else 0."""
    judgements = {row.judgement for row in rows}
    if not rows or UNKNOWN in judgements:
        return 2
    return 1 if FINDING in judgements else 0


def _cell(v: object) -> str:
    return "-" if v is None else str(v)


def table(rows: list[Row]) -> str:
    """Takes the rows. Returns them as a Markdown table."""
    head = ["scenario", "expected", "valid", "judgement", "attempts", "acked", "lost",
            "unexpected", "dup (unflagged)", "recovered", "order viol.", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        expected = "valid" if row.expect_valid else "loss possible"
        dup = (f"{row.duplicated} ({row.unflagged_duplicated})"
               if row.duplicated is not None else "-")
        cells = [row.scenario, expected, _cell(row.valid), row.judgement, _cell(row.attempts),
                 _cell(row.acknowledged), _cell(row.lost), _cell(row.unexpected), dup,
                 _cell(row.recovered), _cell(row.ordering_violations), f"{row.wall_s:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {row.scenario}: {'; '.join(row.problems)}" for row in rows if row.problems]
    if notes:
        lines += ["", "Problems:", *notes]
    return "\n".join(lines) + "\n"


def write(rows: list[Row], out_dir: Path) -> tuple[Path, Path]:
    """Takes the rows and a directory. Writes matrix.json and matrix.md there. Returns both."""
    out_dir.mkdir(parents=True, exist_ok=True)
    js, md = out_dir / "matrix.json", out_dir / "matrix.md"
    doc = {"exit_code": exit_code(rows),
           "rows": [{**asdict(row), "judgement": row.judgement} for row in rows]}
    js.write_text(json.dumps(doc, indent=2) + "\n")
    md.write_text(table(rows))
    return js, md
