"""The nightly's page: `<store>/matrix/<time>/index.html`, its scenarios and its runs.

The nightly (harness.nightly) runs scenarios within a time budget and says in
its own words what each run showed; this draws them (templates/nightly.html.j2)
from plain records: a `ScenarioLine` per scenario (its runs, how many held,
how many were weak, the rate it needs, its verdict, its losses, its wall
time), a `RunLine` per run or skipped run (seed, the broker's versions or "—",
a verdict badge, the sentence, wall time, a relative link to its report), the
problems, and a `RetryLine` per first try retried after an infrastructure
failure. A nightly over several release lines shows them side by side first,
the table matrix.json keeps (`side_by_side`, drawn as the matrix page draws
it). A weak run (valid, but its faults tested nothing) carries the weak badge,
never a pass's. A tally says how many runs were as expected, findings,
missed, weak, infrastructure errors, without a verdict and skipped, each
apart. When the budget left paid for an explore, an `ExploreSection` draws it
below the scenarios: its runs as `RunLine`s, its coverage table (runs that
reached each effect, by fault kind) and a link to its own record. Plain HTML,
relative links, no scripts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reports.html import Cell, badge_td, link_td, render_template, table, td
from reports.matrix_page import side_by_side as side_by_side_section
from reports.page import NA, version_cell_text

REPORT_HTML = "report.html"
JUNIT_XML = "junit.xml"
FILES = ("matrix.json", "matrix.md", JUNIT_XML, "matrix.html")


@dataclass(frozen=True)
class ScenarioLine:
    """One scenario of the nightly: its prediction, runs, how many held and were weak, the rate
    it needs, its verdict (a VERDICTS key for the badge and the verdict's words), its lost
    min / median / max ("-" for none) and its median wall time."""

    scenario: str
    expect: str
    runs: int
    held: int
    weak: int
    min_rate: float
    verdict_key: str
    verdict: str
    lost: str
    wall_s_median: float


@dataclass(frozen=True)
class RunLine:
    """One run (or a run not started): scenario, seed, the broker's versions, its badge (a
    VERDICTS key and the words on it, "" for the key's own), what it showed, its wall time
    (None: not run) and its run directory ("" for none)."""

    scenario: str
    seed: int | None
    verdict_key: str
    verdict: str
    said: str
    wall_s: float | None = None
    run_dir: str = ""
    versions: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RetryLine:
    """A first try retried after an infrastructure failure: scenario, seed, why, where it ran."""

    scenario: str
    seed: int | None
    reason: str
    run_dir: str = ""


@dataclass(frozen=True)
class ExploreSection:
    """The explore the nightly's budget left paid for: its record's directory, seed, tally
    ((what, runs) pairs), runs, and coverage: the fault kinds (columns) and a line per effect
    with the runs that reached each cell (None: none)."""

    out_dir: str
    seed: int
    tally: Sequence[tuple[str, int]]
    runs: Sequence[RunLine]
    kinds: Sequence[str]
    coverage: Sequence[tuple[str, Sequence[int | None]]]


def report_link(out_dir: Path, run_dir: str, text: str = "report") -> tuple[str | None, str]:
    """Takes the page's directory, a run directory and the link's text. Returns where to link,
    relatively (the run's report, else its directory; None when there is no run directory),
    and the link's text."""
    if not run_dir:
        return None, "no run directory"
    target = Path(run_dir)
    report = target / REPORT_HTML
    if report.is_file():
        return os.path.relpath(report, out_dir), text
    return os.path.relpath(target, out_dir) + "/", "run directory"


def _run_cells(out_dir: Path, r: RunLine) -> list[Cell]:
    version, others = version_cell_text(dict(r.versions))
    to, text = report_link(out_dir, r.run_dir)
    return [
        td(r.scenario), td(r.seed, num=True), td(version, note=others),
        badge_td(r.verdict_key, r.verdict or None), td(r.said),
        td(f"{r.wall_s:.0f}" if r.wall_s is not None else NA, num=True),
        td(NA) if r.wall_s is None else link_td(to, text) if to else td(text),
    ]


RUN_HEADERS = ["scenario", "seed", "version", "judgement", "what it showed", "wall s", "report"]


def _explore(out_dir: Path, ex: ExploreSection | None) -> dict[str, Any] | None:
    """Returns what the template shows of an explore (None for none): its link, seed, tally,
    run table and coverage table."""
    if ex is None:
        return None
    rows = [_run_cells(out_dir, r) for r in ex.runs]
    cov = [[td(effect), *(td(n, num=True) for n in counts)] for effect, counts in ex.coverage]
    record = os.path.relpath(Path(ex.out_dir) / "explore.html", out_dir)
    return {"record": record, "seed": ex.seed, "tally": list(ex.tally),
            "runs": table(RUN_HEADERS, rows, len(rows), wide=True, num_cols=[1, 5]),
            "coverage": table(["effect \\ fault kind", *ex.kinds], cov, len(cov),
                              num_cols=range(1, len(ex.kinds) + 1)) if cov else None}


def nightly_html(out_dir: Path, scenarios: Sequence[ScenarioLine], runs: Sequence[RunLine],
                 skipped: int, problems: Sequence[str], retries: Sequence[RetryLine],
                 code: int, facts: Mapping[str, str],
                 tally: Sequence[tuple[str, int]] = (),
                 explore: ExploreSection | None = None,
                 side_by_side: Mapping[str, Any] | None = None) -> str:
    """Takes the output directory, the scenarios, the runs (those skipped last), how many were
    skipped, the problems, the retried first tries, the exit code, a few facts to show
    (budget, time used, seed), the scenario runs' tally ((what, runs) pairs), the explore
    the budget left paid for (None: none) and the table putting release lines side by side,
    as matrix.json's `side_by_side` holds it (None: one line). Returns the page."""
    sums = [[
        td(s.scenario), td(s.expect), td(s.runs, num=True), td(f"{s.held}/{s.runs}", num=True),
        td(s.weak, num=True), td(f"{s.min_rate:.0%}", num=True),
        badge_td(s.verdict_key, s.verdict), td(s.lost, num=True),
        td(f"{s.wall_s_median:.0f}", num=True),
    ] for s in scenarios]
    rows = [_run_cells(out_dir, r) for r in runs]
    return render_template(
        "nightly.html.j2",
        name=out_dir.name,
        runs=len(runs) - skipped,
        skipped=skipped,
        code=code,
        facts=list(facts.items()),
        files=[f for f in FILES if f != "matrix.html" or (out_dir / f).is_file()],
        scenarios=table(["scenario", "expected", "runs", "held", "weak", "needs", "verdict",
                         "lost min / median / max", "wall s (median)"], sums, len(sums),
                        num_cols=[2, 3, 4, 5, 7, 8]) if sums else None,
        run_table=table(RUN_HEADERS, rows, len(rows), wide=True, num_cols=[1, 5]),
        problems=list(problems),
        retries=[(r, report_link(out_dir, r.run_dir, "first try")) for r in retries],
        tally=list(tally),
        explore=_explore(out_dir, explore),
        side_by_side=side_by_side_section(side_by_side),
    )
