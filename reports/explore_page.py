"""The explore page: `<store>/explore/<time>/explore.html`, drawn from its explore.json alone.

harness.explore records a search in explore.json (its seed, the varied
settings, every step: the candidate's schedule and its runs, each with its
variant, release line, verdict, what it reached and its run directory; the
coverage cells; the variants a release line cannot run). This draws it
(templates/explore.html.j2): the coverage table (runs that reached each
effect, by fault kind), and when `--vary` held each schedule fixed across
settings, the verdicts side by side, a line per candidate and a column per
variant ("not applicable" with the release's reason where it cannot run, "-"
where it did not); then a line per run linking to its report, relatively, and a line per
finding the search shrank (`explore --shrink`), linking its shrink page.
explore.json is read leniently: a missing field reads "-".
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from history.files import write_atomic
from reports.html import Cell, Table, badge_td, link_td, render_template, table, td
from reports.page import NA, read_json_quietly

log = logging.getLogger(__name__)

EXPLORE_JSON = "explore.json"
EXPLORE_MD = "explore.md"
EXPLORE_HTML = "explore.html"
REPORT_HTML = "report.html"
LINE_KEY = "broker.rabbitmq"  # a varied release line (harness.matrix RABBITMQ_KEY)
# A run's verdict word (checkers.verdict) -> its badge (reports.page VERDICTS).
BADGE = {"valid": "true", "valid but weak": "weak", "invalid": "false", "unknown": "unknown"}


def _runs(doc: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any], Mapping[str, Any]]]:
    """Returns (step number, step, run) for every run of the record, in order."""
    out: list[tuple[int, Mapping[str, Any], Mapping[str, Any]]] = []
    for step in doc.get("steps") or []:
        if not isinstance(step, dict):
            continue
        for run in step.get("runs") or []:
            if isinstance(run, dict):
                out.append((int(step.get("number") or 0), step, run))
    return out


def variant_of(run: Mapping[str, Any], varies_line: bool) -> str:
    """Takes a run (or a not-applicable entry) and whether the release line was varied. Returns
    its column: its variant, with its release line when that was varied ("-" for none)."""
    parts = [str(run.get("variant") or "")]
    if varies_line:
        parts.append(f"RabbitMQ {run.get('rabbitmq') or NA}")
    return ", ".join(p for p in parts if p) or "-"


def candidate_name(number: int) -> str:
    """Takes a step's number. Returns its candidate's name (harness.explore's)."""
    return f"candidate-{number:03d}"


def variants_table(doc: Mapping[str, Any]) -> Table | None:
    """Takes explore.json's content. Returns the verdicts side by side (module docstring), None
    when nothing was varied."""
    vary = [d[0] for d in doc.get("vary") or [] if isinstance(d, list) and d]
    if not vary:
        return None
    line = LINE_KEY in vary
    cells: dict[tuple[str, str], Cell] = {}
    for number, _step, run in _runs(doc):
        word = str(run.get("verdict") or "unknown")
        cells[(candidate_name(number), variant_of(run, line))] = badge_td(
            BADGE.get(word, "unknown"), word)
    for na in doc.get("not_applicable") or []:
        if isinstance(na, dict):
            cells[(str(na.get("scenario")), variant_of(na, line))] = td(
                f"not applicable: {na.get('reason') or NA}")
    names = list(dict.fromkeys(n for n, _c in cells))
    columns = list(dict.fromkeys(c for _n, c in cells))
    rows = [[td(n), *(cells.get((n, c), td("-")) for c in columns)] for n in names]
    return table(["candidate", *columns], rows, len(rows), wide=True)


def coverage_table(doc: Mapping[str, Any]) -> Table | None:
    """Takes explore.json's content. Returns its coverage table: a line per effect or notice
    mark (the marks last), a column per fault kind, each cell the runs that reached it; None
    before any run reached anything."""
    found: dict[tuple[str, str], Any] = {}
    for c in doc.get("coverage") or []:
        if isinstance(c, dict):
            found[(str(c.get("effect")), str(c.get("fault_kind")))] = c.get("runs")
    if not found:
        return None
    marks = {"noticed", "noticed-after-heal", "not-noticed", "notice-unknown"}
    kinds = sorted({k for _e, k in found})
    effects = sorted({e for e, _k in found}, key=lambda e: (e in marks, e))
    rows = [[td(e), *(td(found.get((e, k)), num=True) for k in kinds)] for e in effects]
    return table(["effect \\ fault kind", *kinds], rows, len(rows),
                 num_cols=range(1, len(kinds) + 1))


def _schedule(step: Mapping[str, Any]) -> str:
    items = [i for i in step.get("schedule") or [] if isinstance(i, dict)]
    return "; ".join(f"{i.get('start_s')} s {i.get('entry')} {i.get('duration_s')} s"
                     for i in items) or NA


def runs_table(out_dir: Path, doc: Mapping[str, Any]) -> Table:
    """Takes the page's directory and explore.json's content. Returns a line per run: its
    candidate, variant, verdict, schedule, what it reached, how many cells it reached first,
    and a relative link to its report (else its directory)."""
    rows: list[Sequence[Cell]] = []
    for number, step, run in _runs(doc):
        word = str(run.get("verdict") or "unknown")
        rows.append([
            td(candidate_name(number)), td(run.get("variant") or "-"),
            badge_td(BADGE.get(word, "unknown"), word, note=run.get("error")),
            td(_schedule(step)), td(", ".join(map(str, run.get("reached") or [])) or "-"),
            td(len(run.get("new_cells") or []), num=True), _link(out_dir, run.get("run_dir"))])
    return table(["candidate", "variant", "verdict", "schedule", "reached", "new", "run"], rows,
                 len(rows), wide=True, num_cols=[5])


def _link(out_dir: Path, run_dir: Any) -> Cell:
    if not run_dir:
        return td(NA)
    target = Path(str(run_dir))
    report = target / REPORT_HTML
    if report.is_file():
        return link_td(os.path.relpath(report, out_dir), "report")
    return link_td(os.path.relpath(target, out_dir) + "/", "run directory")


def shrinks_table(out_dir: Path, doc: Mapping[str, Any]) -> Table | None:
    """Takes an explore directory and its explore.json content. Returns a line per finding the
    search shrank (`explore --shrink`): the finding's run, what the shrink came to, its
    replays, and links to its page and minimal scenario file; None when none was shrunk."""
    rows: list[list[Cell]] = []
    for x in doc.get("shrinks") or []:
        if not isinstance(x, dict):
            continue
        page = Path(str(x.get("dir") or "")) / "shrink.html"
        minimal = x.get("minimal")
        rows.append([
            _link(out_dir, x.get("finding")), td(x.get("status") or NA),
            td(x.get("replays", NA), num=True),
            link_td(os.path.relpath(page, out_dir), "shrink page") if x.get("dir") else td(NA),
            link_td(os.path.relpath(str(minimal), out_dir), "minimal.toml") if minimal
            else td(NA)])
    if not rows:
        return None
    return table(["finding", "shrink", "replays", "page", "minimal scenario"], rows, len(rows),
                 num_cols=[2])


def explore_html(out_dir: Path, doc: Mapping[str, Any]) -> str:
    """Takes an explore directory and its explore.json content. Returns its page."""
    return render_template(
        "explore.html.j2", name=out_dir.name, seed=doc.get("seed", NA),
        runs=doc.get("runs", NA), exit_code=doc.get("exit_code", NA),
        interrupted=bool(doc.get("interrupted")),
        vary=[f"{d[0]}={','.join(map(str, d[1]))}" for d in doc.get("vary") or []
              if isinstance(d, list) and len(d) == 2],
        files=[f for f in (EXPLORE_JSON, EXPLORE_MD) if (out_dir / f).is_file()],
        coverage=coverage_table(doc), variants=variants_table(doc),
        run_table=runs_table(out_dir, doc), shrinks=shrinks_table(out_dir, doc))


def write_explore_page(out_dir: Path) -> Path | None:
    """Takes an explore directory. Writes its explore.html from its explore.json. Returns the
    page's path, None when explore.json is missing or not a JSON object."""
    doc = read_json_quietly(out_dir / EXPLORE_JSON)
    if not isinstance(doc, dict):
        log.warning("no readable %s in %s", EXPLORE_JSON, out_dir)
        return None
    return write_atomic(out_dir / EXPLORE_HTML, explore_html(out_dir, doc))
