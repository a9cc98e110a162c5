"""The store, browsable: store/index.html lists every run, newest first, and every matrix.

`write_index(store_root)` rewrites `<store>/index.html`: one row per run
directory `<store>/<test>/<timestamp>/` (time, test name, backend, the broker's
version with the other versions beneath it, verdict and why with the test's
strength beneath it, lost / duplicated / reordered counts, duration, a link to
its report); a valid run whose faults tested nothing reads "valid but weak"
(checkers.verdict), never "valid", and, when the store holds scenario
matrices (`<store>/matrix/<timestamp>/matrix.json`), a section linking a page
rendered for each (reports.matrix_page). A run without results.json (still
running, or it crashed before its check) is listed with the verdict "no
results". The page is templates/index.html.j2: self-contained like the
reports, relative links only, no scripts. `reports.report.render` calls
`write_index` after drawing a run that sits in a store.

`python -m reports.index [STORE]` rewrites the index (`make serve` does, before
serving the store).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from checkers.verdict import lost_is_proven
from history.files import write_atomic
from reports.html import Cell, badge_td, link_td, render_template, table, td
from reports.matrix_page import MATRIX_DIR, MATRIX_HTML, MatrixSummary, find_matrices
from reports.page import (
    NA,
    VERDICTS,
    as_dict,
    as_int,
    count,
    dup_text,
    parse_stamp,
    read_json_quietly,
    results_key,
    stamp_text,
    strength_of,
    version_cell_text,
)
from reports.report_results import verdict_sentence

log = logging.getLogger(__name__)

INDEX_HTML = "index.html"
REPORT_HTML = "report.html"
RUN_FILES = ("test.json", "history.jsonl", "results.json")
TAIL_BYTES = 65536
MAX_WHY = 120
# Verdict keys in the order the summary line counts them.
TALLY_ORDER = ("false", "unknown", "none", "weak", "true")


def history_seconds(path: Path) -> float | None:
    """Takes a history path. Returns the time of its last readable op in s, reading its tail only."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - TAIL_BYTES))
            tail = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        try:
            t = json.loads(line).get("time")
        except (ValueError, AttributeError):
            continue
        if isinstance(t, int):
            return t / 1e9
    return None


@dataclass(frozen=True)
class RunSummary:
    """One run as the index lists it. `verdict` is "true", "weak" (valid but weak), "false",
    "unknown" or "none"; `strength` the strength summary ("" for runs without one);
    `versions` what test.json (else results.json) says of the broker's versions."""

    rel: str
    test: str
    stamp: str
    backend: str
    verdict: str
    sentence: str
    lost: int | None = None
    lost_proven: bool = True
    duplicated: int | None = None
    unflagged: int | None = None
    reordered: int | None = None
    duration: str = NA
    has_report: bool = False
    strength: str = ""
    versions: dict[str, Any] = field(default_factory=dict)


def summarise_run(store_root: Path, run_dir: Path) -> RunSummary:
    """Takes the store root and a run directory in it. Returns its summary."""
    info = as_dict(read_json_quietly(run_dir / "test.json"))
    results = read_json_quietly(run_dir / "results.json")
    queue = as_dict(results.get("queue")) if isinstance(results, dict) else {}
    ordering = as_dict(results.get("ordering")) if isinstance(results, dict) else {}
    if isinstance(results, dict):
        verdict = results_key(results)
        sentence = verdict_sentence(results)
    else:
        verdict = "none"
        if (run_dir / "results.json").is_file():
            sentence = "Unreadable results.json."
        elif info.get("error"):
            sentence = f"No results: {info['error']}"
        else:
            sentence = "No results.json: the run is still going, or ended before its check."
    phases = info.get("phase_seconds")
    if isinstance(results, dict) and isinstance(phases, dict) and phases:
        duration = f"{sum(v for v in phases.values() if isinstance(v, int | float)):.0f} s"
    else:
        so_far = history_seconds(run_dir / "history.jsonl")
        duration = f"{so_far:.0f} s so far" if so_far is not None else NA
    return RunSummary(
        rel=run_dir.relative_to(store_root).as_posix(),
        test=str(info.get("name") or run_dir.parent.name),
        stamp=run_dir.name,
        backend=str(info.get("backend") or NA),
        verdict=verdict,
        sentence=sentence,
        lost=as_int(queue.get("lost_count")),
        lost_proven=lost_is_proven(queue.get("valid")),
        duplicated=as_int(queue.get("duplicated_count")),
        unflagged=as_int(queue.get("unflagged_duplicated_count")),
        reordered=as_int(ordering.get("violation_count")),
        duration=duration,
        has_report=(run_dir / REPORT_HTML).is_file(),
        strength=st.line() if (st := strength_of(results)) is not None else "",
        versions=as_dict(info.get("versions")) or as_dict(as_dict(results).get("versions")),
    )


def find_runs(store_root: Path) -> list[RunSummary]:
    """Takes the store root. Returns a summary of every run directory in it, newest first."""
    runs: list[RunSummary] = []
    if not store_root.is_dir():
        return runs
    for test_dir in store_root.iterdir():
        if (test_dir.name.startswith(".") or test_dir.name == MATRIX_DIR
                or test_dir.is_symlink() or not test_dir.is_dir()):
            continue
        for run_dir in test_dir.iterdir():
            if run_dir.is_symlink() or not run_dir.is_dir() or run_dir.name.startswith("."):
                continue
            if not any((run_dir / f).is_file() for f in RUN_FILES):
                continue
            try:
                runs.append(summarise_run(store_root, run_dir))
            except OSError as err:  # a run removed while listing
                log.warning("skipping %s: %s", run_dir, err)
    epoch = datetime.min.replace(tzinfo=UTC)
    runs.sort(key=lambda r: (parse_stamp(r.stamp) or epoch, r.rel), reverse=True)
    return runs


def why(sentence: str, limit: int = MAX_WHY) -> str:
    """Takes a verdict sentence. Returns it without its "Invalid: " head, cut to `limit`."""
    text = sentence.split(": ", 1)[1] if ": " in sentence[:20] else sentence
    text = text[:1].upper() + text[1:]
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _lost_cell(r: RunSummary) -> Cell:
    if r.lost is None:
        return td("-", num=True)
    # Messages a drain could not read back are not proven lost: bracketed, as in the matrix.
    return td(f"{r.lost:,}" if r.lost_proven or r.lost == 0 else f"({r.lost:,})", num=True)


def run_rows(runs: list[RunSummary]) -> list[list[Cell]]:
    """Takes run summaries. Returns the index table's rows of cells."""
    rows = []
    for r in runs:
        target = f"{r.rel}/{REPORT_HTML}" if r.has_report else f"{r.rel}/"
        version, others = version_cell_text(r.versions)
        rows.append([
            # Date over time: the version column took the width a one-line time had.
            td(stamp_text(r.stamp).replace(" ", "\n", 1), cls="stamp"),
            td(r.test),
            td(r.backend),
            td(version, note=others),
            badge_td(r.verdict, title=r.sentence),
            td(why(r.sentence), cls="why", note=r.strength),
            _lost_cell(r),
            td(dup_text(r.duplicated, r.unflagged), num=True),
            td(count(r.reordered) if r.reordered is not None else "-", num=True),
            td(r.duration, num=True),
            link_td(target, "report" if r.has_report else "files (no report)"),
        ])
    return rows


def _matrix_rows(matrices: list[MatrixSummary]) -> list[list[Cell]]:
    return [[
        td(stamp_text(m.stamp), cls="nowrap"),
        td(count(m.rows), num=True),
        td(m.judgement_text),
        td(m.exit_code if m.exit_code is not None else NA, num=True),
        link_td(f"{m.rel}/{MATRIX_HTML}", "matrix"),
    ] for m in matrices]


def index_html(runs: list[RunSummary], matrices: list[MatrixSummary]) -> str:
    """Takes run and matrix summaries (newest first). Returns the store index page
    (templates/index.html.j2)."""
    tally: dict[str, int] = {}
    for r in runs:
        tally[r.verdict] = tally.get(r.verdict, 0) + 1
    return render_template(
        "index.html.j2",
        runs=len(runs),
        tally=", ".join(f"{tally[k]} {VERDICTS[k][0]}" for k in TALLY_ORDER if k in tally),
        run_table=table(
            ["time (UTC)", "test", "backend", "version", "verdict", "why", "lost", "duplicated",
             "reordered", "duration", "report"],
            run_rows(runs), len(runs), wide=True, num_cols=[6, 7, 8, 9]) if runs else None,
        matrix_table=table(
            ["time (UTC)", "scenario runs", "judgements", "exit code", "page"],
            _matrix_rows(matrices), len(matrices), num_cols=[1, 3]) if matrices else None,
    )


def write_index(store_root: Path) -> Path:
    """Takes the store root. Rewrites its index.html (and each matrix's page). Returns the
    index's path."""
    store_root = Path(store_root)
    store_root.mkdir(parents=True, exist_ok=True)
    runs = find_runs(store_root)
    matrices = find_matrices(store_root)
    path = write_atomic(store_root / INDEX_HTML, index_html(runs, matrices))
    log.info("store index %s: %d runs, %d matrices", path, len(runs), len(matrices))
    return path


def main(argv: list[str] | None = None) -> int:
    """Rewrites the index of the store given (default: ./store). Returns 0."""
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    write_index(Path(args[0]) if args else Path("store"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
