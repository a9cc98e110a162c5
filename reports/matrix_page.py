"""Scenario matrix pages: `<store>/matrix/<timestamp>/matrix.html`, drawn from its matrix.json.

The page (templates/matrix.html.j2) shows each row (one scenario run:
expectation, seed, the broker's version (the row's `versions`, led by its
`rabbitmq` release line; "—" when the row has neither; no column when no row
has one), verdict with the test's strength beneath it when the matrix records
one, judgement, counts, a link to its report when the run is in this store),
the per-scenario summaries when the matrix has them (with their release line
and variant once these differ), and the problems it noted. A matrix over
several release lines or variants opens with its `side_by_side` table as
matrix.json holds it (a column per release line, or per value of the first
varied setting; "not applicable: <reason>" where a release cannot run a
variant); a matrix.json from before that field shows none. A valid run whose
faults tested nothing reads "valid but weak" (checkers.verdict), never
"valid"; its row says why. matrix.json is read
leniently (harness.matrix writes it; its fields grow): a field that is missing
reads "-", an expectation is taken from `expect` (text) or `expect_valid`
(true: valid; null: loss possible). Runs are found by the last two parts of
their recorded directory, so a store copied elsewhere still links.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from checkers.verdict import lost_is_proven
from history.files import write_atomic
from reports.html import Cell, badge_td, link_td, render_template, table, td
from reports.page import (
    NA,
    as_dict,
    count,
    dup_text,
    parse_stamp,
    read_json_quietly,
    row_strength,
    row_versions,
    stamp_text,
    verdict_of,
    version_cell_text,
)

log = logging.getLogger(__name__)

MATRIX_DIR = "matrix"
MATRIX_JSON = "matrix.json"
MATRIX_MD = "matrix.md"
MATRIX_HTML = "matrix.html"
REPORT_HTML = "report.html"
INDEX_HTML = "index.html"
ROW_COUNTS = ("attempts", "acknowledged")
ROW_COUNTS_AFTER = ("recovered", "ordering_violations", "wall_s")
SUMMARY_FIELDS = ("runs", "valid", "invalid", "unknown", "rate", "min_rate", "verdict")
# Shown after "unknown" when the matrix counts weak runs (harness.matrix, issue 19).
WEAK_FIELD = "weak"
# A summary's release line and variant (harness.matrix.Summary), with their headers.
SUMMARY_WHICH = {"rabbitmq": "RabbitMQ", "variant": "variant"}


@dataclass(frozen=True)
class MatrixSummary:
    """One scenario matrix: where it is, when, how many rows, their judgements, its exit code."""

    rel: str
    stamp: str
    rows: int
    judgements: dict[str, int]
    exit_code: int | None

    @property
    def judgement_text(self) -> str:
        """Returns the judgements as text: "2 as expected, 1 FINDING"."""
        return ", ".join(f"{n} {j}" for j, n in sorted(self.judgements.items())) or "none"


def expectation(row: dict[str, Any]) -> str:
    """Takes a matrix row. Returns what was expected of it, as text."""
    if isinstance(row.get("expect"), str) and row["expect"]:
        return str(row["expect"])
    if "expect_valid" in row:
        return "valid" if row["expect_valid"] else "loss possible"
    return NA


def run_link(store_root: Path, from_dir: Path, run_dir: Any) -> str | None:
    """Takes the store root, the linking page's directory and a recorded run directory. Returns
    a relative link to the run's report (or its directory), or None when it is not in the store."""
    if not isinstance(run_dir, str) or not run_dir:
        return None
    parts = Path(run_dir).parts[-2:]
    if len(parts) != 2:
        return None
    target = store_root.joinpath(*parts)
    if not target.is_dir():
        return None
    report = target / REPORT_HTML
    if report.is_file():
        return os.path.relpath(report, from_dir)
    return os.path.relpath(target, from_dir) + "/"


def _cell(x: Any) -> str:
    if isinstance(x, bool) or x is None:
        return "-" if x is None else str(x).lower()
    if isinstance(x, int | float):
        return count(x)
    if isinstance(x, dict):
        return ", ".join(f"{k} {v}" for k, v in x.items()) or "-"
    return str(x) or "-"


def strength_text(r: dict[str, Any]) -> str:
    """Takes a matrix row. Returns what its verdict cell says beneath the badge: why a weak run
    is weak, then its strength summary; the summary alone for a strong run; "" for a row that
    says nothing of strength (older matrices)."""
    st = row_strength(r)
    if st is None:
        return ""
    why = st.reason.rstrip(".") if st.weak else ""
    return "; ".join(x for x in (why, st.summary) if x)


def lost_text(r: dict[str, Any]) -> str:
    """Takes a row as matrix.json keeps it. Returns its lost count, "(unproven)" beside it when
    no drain proved it (checkers.verdict.lost_is_proven: the queue's verdict, or for rows stored
    before it was kept the run's, neither true nor false)."""
    lost = r.get("lost")
    if isinstance(lost, int) and lost and not lost_is_proven(r.get("queue_valid"), r.get("valid")):
        return f"{count(lost)} (unproven)"
    return _cell(lost)


def _row_cells(store_root: Path, matrix_dir: Path, r: dict[str, Any],
               with_version: bool) -> list[Cell]:
    st = row_strength(r)
    key = "weak" if st is not None and st.weak else verdict_of(r.get("valid"))
    to = run_link(store_root, matrix_dir, r.get("run_dir"))
    version, others = version_cell_text(row_versions(r))
    return [
        td(r.get("scenario") or NA),
        td(expectation(r)),
        td(_cell(r.get("seed")), num=True),
        *([td(version, note=others)] if with_version else []),
        # The strength sits under the verdict: a column of its own overflowed the page.
        badge_td(key, note=strength_text(r)),
        td(r.get("judgement") or NA),
        *(td(_cell(r.get(k)), num=True) for k in ROW_COUNTS),
        td(lost_text(r), num=True),
        td(dup_text(r.get("duplicated"), r.get("unflagged_duplicated")), num=True),
        *(td(_cell(r.get(k)), num=True) for k in ROW_COUNTS_AFTER),
        link_td(to, "report") if to else td("not in this store"),
    ]


def _summaries(doc: dict[str, Any]) -> Any:
    summaries = [s for s in doc.get("summaries") or [] if isinstance(s, dict)]
    if not summaries:
        return None
    fields = list(SUMMARY_FIELDS)
    if any(WEAK_FIELD in s for s in summaries):
        fields.insert(fields.index("unknown") + 1, WEAK_FIELD)
    # A summary per scenario, release line and variant: which, once they differ.
    which = [k for k in SUMMARY_WHICH if len({str(s.get(k) or "") for s in summaries}) > 1]
    rows = [[td(s.get("scenario") or NA), *(td(s.get(k) or "-") for k in which),
             td(expectation(s)), *(td(_cell(s.get(k)), num=k != "verdict") for k in fields),
             td(_cell(s.get("judgements")))] for s in summaries]
    first = 2 + len(which)
    return table(["scenario", *(SUMMARY_WHICH[k] for k in which), "expected",
                  *(k.replace("_", " ") for k in fields), "judgements"],
                 rows, len(rows), wide=True, num_cols=range(first, first + len(fields) - 1))


def _list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def side_by_side(data: Any) -> dict[str, Any] | None:
    """Takes matrix.json's `side_by_side` (harness.matrix.side_by_side: the varied `column`,
    its `titles`, and `lines` of `scenario`, `expect` and `cells`; missing or malformed in an
    older matrix.json). Returns what the templates' side-by-side section draws, the `column`
    and a table with a line per scenario and a column per value, each cell's text as the
    matrix wrote it, never judged again; None when there is no such table."""
    d = as_dict(data)
    titles = [str(t) for t in _list(d.get("titles")) if t is not None]
    lines = [x for x in _list(d.get("lines")) if isinstance(x, dict)]
    if not titles or not lines:
        return None
    rows = []
    for line in lines:
        cells = _list(line.get("cells"))[:len(titles)]
        cells += [None] * (len(titles) - len(cells))  # a missing cell reads NA
        rows.append([td(line.get("scenario")), td(line.get("expect")), *(td(c) for c in cells)])
    return {"column": str(d.get("column") or NA),
            "table": table(["scenario", "expected", *titles], rows, len(rows))}


def matrix_html(store_root: Path, matrix_dir: Path, doc: dict[str, Any]) -> str:
    """Takes the store root, a matrix directory and its matrix.json content. Returns its page
    (templates/matrix.html.j2)."""
    rows_in = [r for r in doc.get("rows") or [] if isinstance(r, dict)]
    # A version column once some row names one (matrices from before versions look as they did).
    with_version = any(row_versions(r) for r in rows_in)
    rows = [_row_cells(store_root, matrix_dir, r, with_version) for r in rows_in]
    problems = [f"{r.get('scenario')}: {'; '.join(map(str, r['problems']))}"
                for r in rows_in if isinstance(r.get("problems"), list) and r["problems"]]
    problems += [p for p in doc.get("problems") or [] if isinstance(p, str)]
    code = doc.get("exit_code")
    files = [MATRIX_JSON] + ([MATRIX_MD] if (matrix_dir / MATRIX_MD).is_file() else [])
    return render_template(
        "matrix.html.j2",
        name=matrix_dir.name,
        when=stamp_text(matrix_dir.name),
        index_link="../../" + INDEX_HTML,
        runs=len(rows),
        exit_code=code if isinstance(code, int) else NA,
        files=files,
        rows=table(["scenario", "expected", "seed", *(["version"] if with_version else []),
                    "verdict", "judgement", "attempts", "acked", "lost", "dup (unfl.)",
                    "recovered", "order viol.", "wall s", "run"], rows, wide=True,
                   num_cols=[2, *(n + with_version for n in (5, 6, 7, 8, 9, 10, 11))]),
        summaries=_summaries(doc),
        side_by_side=side_by_side(doc.get("side_by_side")),
        problems=problems,
    )


def write_matrix_page(store_root: Path, matrix_dir: Path) -> MatrixSummary | None:
    """Takes the store root and a matrix directory. Writes its matrix.html. Returns its summary,
    or None when its matrix.json is missing or not a JSON object."""
    doc = read_json_quietly(matrix_dir / MATRIX_JSON)
    if not isinstance(doc, dict):
        log.warning("no readable %s in %s", MATRIX_JSON, matrix_dir)
        return None
    write_atomic(matrix_dir / MATRIX_HTML, matrix_html(store_root, matrix_dir, doc))
    judgements: dict[str, int] = {}
    rows = [as_dict(r) for r in doc.get("rows") or [] if isinstance(r, dict)]
    for r in rows:
        j = str(r.get("judgement") or "unknown")
        judgements[j] = judgements.get(j, 0) + 1
    code = doc.get("exit_code")
    return MatrixSummary(matrix_dir.relative_to(store_root).as_posix(), matrix_dir.name,
                         len(rows), judgements, code if isinstance(code, int) else None)


def find_matrices(store_root: Path) -> list[MatrixSummary]:
    """Takes the store root. Renders every matrix page. Returns their summaries, newest first."""
    base = store_root / MATRIX_DIR
    if not base.is_dir():
        return []
    out = []
    for d in base.iterdir():
        if d.is_dir() and not d.is_symlink() and (d / MATRIX_JSON).is_file():
            try:
                summary = write_matrix_page(store_root, d)
            except OSError as err:
                log.warning("cannot render the matrix page of %s: %s", d, err)
                continue
            if summary is not None:
                out.append(summary)
    epoch = datetime.min.replace(tzinfo=UTC)
    out.sort(key=lambda m: (parse_stamp(m.stamp) or epoch, m.rel), reverse=True)
    return out
