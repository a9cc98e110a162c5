"""The nightly matrix: every chosen scenario once, within a time budget, with CI's outputs.

`Nightly.execute` runs the scenarios of a `Series` (one round: a scenario and
its safe twin share the seed) and judges each against its prediction
(harness.matrix). Before each run it estimates the run's duration: the wall
time of an earlier run of the same scenario, else the scenario's time limit
plus the overhead earlier runs showed beyond theirs (median), else plus
`OVERHEAD_S` (set-up, recovery, drain, check and report). When the budget left
is less than that, that run is *skipped* and the night goes on with the next (a
shorter one may fit). `rotation` orders a night's scenarios: the unsafe/safe
pairs first, then the rest, each group least recently run first (by the earlier
nightlies in the store), so that scenarios cut by one night's budget lead the
next night's, and every scenario runs within `nights_needed` nights.

A run that failed for infrastructure reasons (`infrastructure_failure`: the
cluster would not start, a node never recovered, a backend or harness error)
is retried once with the same seed; if the retry fails the same way it is an
*error* row (judgement "error", exit 2), never a finding. The first try is
kept in matrix.json under `retries`; the final row says `tries` and its
`infrastructure` reason. After every run `store/matrix/<time>/` holds
matrix.json (the matrix's fields plus `nightly`, `retries`, `skipped`),
matrix.md, junit.xml (harness.junit) and index.html (drawn by
reports.nightly_page from this module's words): the summary table and one row
per run with the broker's versions, linking to its report.html, relatively; a weak run (valid,
but its faults tested nothing) shows as "valid but weak", never as a pass, and
every run with a strength says it. Nothing here prints:
the CLI hands in the function that runs one test and the one that prints.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness import junit, matrix
from harness.matrix import Expectation, Row
from harness.series import Series
from harness.spec import TestSpec
from history.files import write_atomic
from reports import nightly_page
from reports.page import row_versions

log = logging.getLogger(__name__)

OVERHEAD_S = 70.0
JUNIT_XML = nightly_page.JUNIT_XML
INDEX_HTML = "index.html"

# What runs one test: (scenario name, spec with its seed, try 1 or 2) -> (exit code, RunOutcome).
RunOne = Callable[[str, TestSpec, int], tuple[int, Any]]


@dataclass
class Crashed:
    """The outcome of a run whose runner raised instead of returning one."""

    error: str
    run_dir: Path | str = ""
    results: dict[str, Any] | None = None
    interrupted: bool = False
    phase_times: dict[str, float] = field(default_factory=dict)
    crashed: bool = True


@dataclass(frozen=True)
class Skipped:
    """A scenario run that was not started, with the seed it would have had, and why."""

    scenario: str
    seed: int | None
    reason: str
    estimate_s: float | None = None


def last_nightly_runs(store_root: Path) -> dict[str, str]:
    """Takes the store root. Returns, per scenario, the start time (ISO) of the latest nightly
    that ran it, read from store/matrix/*/matrix.json files written by a nightly."""
    last: dict[str, str] = {}
    for path in sorted((store_root / "matrix").glob("*/matrix.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        started = (doc.get("nightly") or {}).get("started") if isinstance(doc, dict) else None
        if not started:
            continue
        for row in doc.get("rows") or []:
            name = row.get("scenario") if isinstance(row, dict) else None
            if name and started > last.get(name, ""):
                last[name] = started
    return last


def rotation(entries: Sequence[tuple[str, TestSpec, Any]], twins: Mapping[str, str | None],
             last: Mapping[str, str]) -> list[tuple[str, TestSpec, Any]]:
    """Takes a night's entries, each scenario's safe twin and when each last ran in a nightly.
    Returns them ordered: every unsafe scenario with a twin, followed by its twin, first; then
    the rest; each group least recently run first (never run: first of all), ties in the order
    given."""
    names = [n for n, _s, _e in entries]
    by_name: dict[str, list[tuple[str, TestSpec, Any]]] = {}
    for entry in entries:
        by_name.setdefault(entry[0], []).append(entry)
    pair_of = {n: t for n in names if (t := twins.get(n)) is not None and t in by_name}
    in_pair = set(pair_of) | set(pair_of.values())

    def when(group: list[str]) -> str:
        return min(last.get(n, "") for n in group)

    pairs = [[n, pair_of[n]] for n in dict.fromkeys(names) if n in pair_of]
    rest = [[n] for n in dict.fromkeys(names) if n not in in_pair]
    order = [n for group in sorted(pairs, key=when) + sorted(rest, key=when) for n in group]
    return [entry for n in dict.fromkeys(order) for entry in by_name[n]]


def nights_needed(estimates_s: Sequence[float], budget_s: float) -> int | None:
    """Takes each run's estimated seconds and a night's budget. Returns how many nights every
    run needs at that budget, rotating (None when a run alone exceeds the budget)."""
    if any(e > budget_s for e in estimates_s):
        return None
    return max(1, math.ceil(sum(estimates_s) / budget_s))


def infrastructure_failure(outcome: Any) -> str | None:
    """Takes a RunOutcome. Returns why the run failed for infrastructure reasons (the cluster
    would not start, a node never recovered, a backend or harness error), or None when it
    tested what it meant to (an interrupted run is not a failure of the infrastructure)."""
    if getattr(outcome, "interrupted", False):
        return None
    error = getattr(outcome, "error", None)
    if getattr(outcome, "crashed", False):
        return f"harness error: {error}"
    phases = getattr(outcome, "phase_times", None) or {}
    if error and "setup" not in phases:
        return f"the cluster would not start: {error}"
    results = getattr(outcome, "results", None) or {}
    problems = (results.get("run") or {}).get("problems") or ()
    if any("did not recover" in str(p) for p in problems):
        return "the cluster did not recover after the faults (a node never came back)"
    if error:
        return f"harness or backend error: {error}"
    return None


class Nightly:
    """Takes (name, spec, expectation) entries, the budget in seconds, the store root, an
    optional base seed, a monotonic clock and the default overhead of a run beyond its time
    limit."""

    def __init__(self, entries: Sequence[tuple[str, TestSpec, Expectation | None]],
                 budget_s: float, store_root: Path, base_seed: int | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 overhead_s: float = OVERHEAD_S) -> None:
        if budget_s <= 0:
            raise ValueError(f"the budget must be > 0 seconds, got {budget_s}")
        self.series = Series(entries, 1, store_root, base_seed)
        self.store_root = store_root
        self.budget_s = budget_s
        self.overhead_s = overhead_s
        self.clock = clock
        self.limits = {name: spec.time_limit_s for name, spec, _e in entries}
        self.retries: list[dict[str, Any]] = []
        self.skipped: list[Skipped] = []
        self.interrupted = False
        self.started = datetime.now(UTC)
        self._t0 = clock()
        self._retried: dict[int, str] = {}  # row index -> why its first try was retried

    @property
    def out_dir(self) -> Path:
        """Returns the directory of this nightly's outputs (store/matrix/<time>/)."""
        return self.series.out_dir

    def elapsed_s(self) -> float:
        """Returns the seconds since the nightly started."""
        return self.clock() - self._t0

    def remaining_s(self) -> float:
        """Returns the seconds of budget left."""
        return self.budget_s - self.elapsed_s()

    def estimate_s(self, name: str, spec: TestSpec) -> float:
        """Takes a scenario and its spec. Returns the seconds its run is expected to take: an
        earlier run of it, else its time limit plus the median overhead of earlier runs (or
        `overhead_s` before any)."""
        done = [r for r in self.series.rows if r.judgement != matrix.ERROR]
        same = [r.wall_s for r in done if r.scenario == name]
        if same:
            return max(same)
        overheads = [r.wall_s - self.limits.get(r.scenario, 0.0) for r in done]
        overhead = statistics.median(overheads) if overheads else self.overhead_s
        return spec.time_limit_s + max(0.0, overhead)

    def execute(self, run_one: RunOne, say: Callable[[str], None]) -> int:
        """Takes the function that runs one test and the one that prints a line. Runs every
        scenario the budget allows, retrying infrastructure failures once, and keeps the
        outputs current. Returns the exit code (0 as expected, 1 a finding, 2 otherwise)."""
        self._t0 = self.clock()
        self.write()
        pending = list(self.series.runs())
        for i, (name, spec) in enumerate(pending):
            need = self.estimate_s(name, spec)
            left = self.remaining_s()
            if left < need:
                # Skipped, and the night goes on: a shorter run after it may still fit.
                say(f"budget: {left:.0f} s left, {name} needs about {need:.0f} s: skipped")
                self._skip([(name, spec)], functools.partial(self._short_of_budget, left))
                continue
            before = len(self.series.rows)
            try:
                self._run(name, spec, run_one, say)
            except KeyboardInterrupt:
                self.interrupted = True
            if self.interrupted:
                say("nightly interrupted: the remaining runs did not happen")
                rest = pending[i + 1:] if len(self.series.rows) > before else pending[i:]
                self._skip(rest, lambda _n, _s: "not run: the nightly was interrupted")
                break
        self.write()
        return self.exit_code()

    def _short_of_budget(self, left: float, name: str, spec: TestSpec) -> str:
        return (f"not started: {max(0.0, left):.0f} s of the budget left, the run needed "
                f"about {self.estimate_s(name, spec):.0f} s")

    def _skip(self, runs: Sequence[tuple[str, TestSpec]],
              reason: Callable[[str, TestSpec], str]) -> None:
        for name, spec in runs:
            self.skipped.append(Skipped(name, spec.seed, reason(name, spec),
                                        round(self.estimate_s(name, spec), 1)))

    def _try(self, name: str, spec: TestSpec, run_one: RunOne,
             tries: int) -> tuple[int, Any, float]:
        t0 = self.clock()
        try:
            code, outcome = run_one(name, spec, tries)
        except KeyboardInterrupt:
            raise
        except Exception as err:  # one broken run must not end the nightly
            log.exception("run of %s failed", name)
            code, outcome = 2, Crashed(f"{type(err).__name__}: {err}")
        return code, outcome, self.clock() - t0

    def _run(self, name: str, spec: TestSpec, run_one: RunOne, say: Callable[[str], None]) -> None:
        code, outcome, wall = self._try(name, spec, run_one, 1)
        if getattr(outcome, "interrupted", False):
            self.interrupted = True
        reason = infrastructure_failure(outcome)
        if reason is None:
            self.series.record(name, spec, code, wall, outcome)
            self.write()
            return
        need = self.estimate_s(name, spec)
        if self.remaining_s() < need:
            say(f"{name}: infrastructure failure ({reason}); no budget left to retry it")
            self.series.record(name, spec, code, wall, outcome,
                               f"{reason} (not retried: the budget ran out)")
            self.write()
            return
        first = self.series.make_row(name, spec, code, wall, outcome, reason)
        self.retries.append({**asdict(first), "reason": reason})
        say(f"{name}: infrastructure failure ({reason}); retrying once with seed {spec.seed}")
        self.write()
        code, outcome, wall = self._try(name, spec, run_one, 2)
        if getattr(outcome, "interrupted", False):
            self.interrupted = True
        again = infrastructure_failure(outcome)
        self.series.record(name, spec, code, wall, outcome, again, tries=2)
        self._retried[len(self.series.rows) - 1] = reason
        self.write()

    def summaries(self) -> list[matrix.Summary]:
        """Returns each scenario's summary so far."""
        return self.series.summaries()

    def exit_code(self) -> int:
        """Returns 2 when nothing ran or the nightly was interrupted, else the matrix's code
        (runs skipped for the budget do not count against it)."""
        if self.interrupted or not self.series.rows:
            return 2
        return matrix.exit_code(self.series.rows, self.summaries())

    # -- outputs -----------------------------------------------------------------------

    def cases(self) -> list[junit.Case]:
        """Returns the JUnit cases: one per run, then one per skipped run."""
        out = [junit.case_for_row(row, self._retried.get(i))
               for i, row in enumerate(self.series.rows)]
        out += [junit.skipped_case(s.scenario, s.seed, s.reason) for s in self.skipped]
        return out

    def write(self) -> None:
        """Rewrites matrix.json/md, junit.xml and index.html in the output directory."""
        self.series.extra = {
            "nightly": {"budget_s": self.budget_s, "elapsed_s": round(self.elapsed_s(), 1),
                        "base_seed": self.series.base_seed,
                        "started": self.started.isoformat(timespec="seconds"),
                        "interrupted": self.interrupted},
            "retries": self.retries,
            "skipped": [asdict(s) for s in self.skipped],
        }
        self.series.write(self.exit_code())
        props = {"base_seed": str(self.series.base_seed), "budget_s": f"{self.budget_s:.0f}",
                 "exit_code": str(self.exit_code())}
        junit.write_junit(self.out_dir / JUNIT_XML, self.cases(), "nightly matrix",
                          self.started.isoformat(timespec="seconds"), props)
        write_atomic(self.out_dir / INDEX_HTML, self.html())

    def html(self) -> str:
        """Returns the nightly's page: its summary table and one row per run."""
        return nightly_html(self.out_dir, self.series.rows, self.summaries(), self.skipped,
                            self.retries, self._retried, self.exit_code(),
                            {"budget": f"{self.budget_s / 60:.0f} min",
                             "used": f"{self.elapsed_s() / 60:.1f} min",
                             "base seed": str(self.series.base_seed)})


# -- the page (reports.nightly_page draws it) ----------------------------------------------

_BADGE = {matrix.AS_EXPECTED: "true", matrix.DETECTED: "true", matrix.FINDING: "false",
          matrix.MISSED: "false", matrix.UNKNOWN: "unknown", matrix.ERROR: "unknown",
          matrix.WEAK: "weak"}


def _run_badge(row: Row) -> tuple[str, str]:
    """A run's judgement as a badge (its key and words): a weak run's in the weak colour and
    words, whatever its judgement."""
    if junit.is_weak_row(row):
        return "weak", ""
    return _BADGE.get(row.judgement, "unknown"), row.judgement


def _summary_badge(verdict: str) -> str:
    return ("true" if verdict == "ok" else "false" if verdict == matrix.FINDING
            else "weak" if verdict == matrix.WEAK else "unknown")


def nightly_html(out_dir: Path, rows: Sequence[Row], summaries: Sequence[matrix.Summary],
                 skipped: Sequence[Skipped], retries: Sequence[dict[str, Any]],
                 retried: dict[int, str], code: int, facts: dict[str, str]) -> str:
    """Takes the output directory, the rows, their summaries, the skipped runs, the retried
    first tries, which rows were second tries (and why), the exit code and a few facts to show
    (budget, time used, seed). Returns the page (reports.nightly_page), in the matrix's words:
    each judgement's badge, what each run showed (junit.sentence)."""
    scenarios = [nightly_page.ScenarioLine(
        s.scenario, s.expect, s.runs, s.held, s.weak, s.min_rate, _summary_badge(s.verdict),
        s.verdict,
        "-" if s.lost_min is None else f"{s.lost_min} / {s.lost_median:g} / {s.lost_max}",
        s.wall_s_median) for s in summaries]
    runs = [nightly_page.RunLine(
        r.scenario, r.seed, *_run_badge(r),
        junit.sentence(r) + (f" Retried once after: {retried[i]}."
                             if i in retried and r.judgement != matrix.ERROR else ""),
        r.wall_s, r.run_dir, row_versions(r)) for i, r in enumerate(rows)]
    runs += [nightly_page.RunLine(s.scenario, s.seed, "unchecked", "skipped", s.reason)
             for s in skipped]
    again = [nightly_page.RetryLine(str(r.get("scenario")), r.get("seed"), str(r.get("reason")),
                                    str(r.get("run_dir") or "")) for r in retries]
    return nightly_page.nightly_html(out_dir, scenarios, runs, len(skipped),
                                     matrix.problems(summaries), again, code, facts)
