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
reports.nightly_page from this module's words): the summary table, the release
lines side by side when it ran several (matrix.side_by_side_of, the table
matrix.json keeps), and one row per run with the broker's versions, linking to
its report.html, relatively; a weak run (valid, but its faults tested nothing)
shows as "valid but weak", never as a pass, and every run with a strength says
it. What the CLI adds to matrix.json (`not_applicable`, `stay_variants`)
stays there. A run of a variant (`nightly --stay-variants`: its clients
staying) is a row, a line and a JUnit testcase of its own
(junit.case_class: "partition (workload.stay=both)"), skipped or not.

The budget the scenarios leave goes to `explore` (harness.explore) when the
CLI hands `execute` a base test: an Explorer seeded with the nightly's base
seed, its budget the time left (and at most one run per `overhead_s` of it, so
that runs failing at once cannot spin), its estimates learnt from the night's
runs. Its record is its own store/explore/<time>/; the nightly's files hold its
runs apart from the scenarios' (matrix.json `explore`, JUnit cases of
classname "explore.candidate-NNN", a section of the page with the coverage
table). An explored run has no prediction: invalid is a finding (exit 1),
no verdict or an infrastructure error exits 2 as a scenario's would, and a
weak one counts against nothing (the explorer draws faults below detection on
purpose). `tally` counts runs by what they showed, findings, weak runs,
infrastructure errors and skipped runs apart, for the page and the JUnit
suite's properties. Nothing here prints: the CLI hands in the function that
runs one test and the one that prints.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusters.releases import DEFAULT_LINE
from harness import junit, matrix, vary
from harness.matrix import Expectation, Row
from harness.outcomes import Crashed, infrastructure_failure
from harness.series import Series
from harness.spec import TestSpec
from history.files import write_atomic
from reports import nightly_page
from reports.page import row_versions

if TYPE_CHECKING:
    from harness.explore import Explorer

log = logging.getLogger(__name__)

OVERHEAD_S = 70.0
JUNIT_XML = nightly_page.JUNIT_XML
INDEX_HTML = "index.html"

# What runs one test: (scenario name, spec with its seed, try 1 or 2) -> (exit code, RunOutcome).
RunOne = Callable[[str, TestSpec, int], tuple[int, Any]]


@dataclass(frozen=True)
class Skipped:
    """A scenario run that was not started, with the seed it would have had, why, how long it
    was expected to take and its variant (a Row's: "workload.stay=both"; "" for none)."""

    scenario: str
    seed: int | None
    reason: str
    estimate_s: float | None = None
    variant: str = ""
    rabbitmq: str = DEFAULT_LINE


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


# What a run showed, each counted apart (`tally`), in the order the page and JUnit say them.
TALLY = ("as expected", "findings", "missed", "weak", "infrastructure errors", "no verdict",
         "skipped")
_TALLIED = {matrix.FINDING: "findings", matrix.MISSED: "missed",
            matrix.ERROR: "infrastructure errors", matrix.UNKNOWN: "no verdict"}


def tally(rows: Sequence[Row], skipped: Sequence[Skipped]) -> dict[str, int]:
    """Takes the rows of runs and the runs skipped. Returns how many runs showed each thing
    (`TALLY`): as expected (the prediction held and the run was not weak), findings (invalid
    against a prediction of valid), missed (a documented anomaly not shown), weak (valid, but
    its faults tested nothing), infrastructure errors, no verdict, and skipped (not started)."""
    out = dict.fromkeys(TALLY, 0)
    for row in rows:
        key = _TALLIED.get(row.judgement)
        out[key if key is not None else "weak" if junit.is_weak_row(row) else "as expected"] += 1
    out["skipped"] = len(skipped)
    return out


def explore_code(rows: Sequence[Row]) -> int:
    """Takes the rows of explored runs. Returns what they add to the nightly's exit code: 2
    when one had no verdict or an infrastructure error, else 1 when one was invalid, else 0
    (a weak explored run counts against nothing: the explorer means some to be)."""
    judgements = {r.judgement for r in rows}
    if judgements & {matrix.UNKNOWN, matrix.ERROR}:
        return 2
    return 1 if matrix.FINDING in judgements else 0


def nights_needed(estimates_s: Sequence[float], budget_s: float) -> int | None:
    """Takes each run's estimated seconds and a night's budget. Returns how many nights every
    run needs at that budget, rotating (None when a run alone exceeds the budget)."""
    if any(e > budget_s for e in estimates_s):
        return None
    return max(1, math.ceil(sum(estimates_s) / budget_s))


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
        self.explorer: Explorer | None = None  # the explore the budget left paid for

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

    def execute(self, run_one: RunOne, say: Callable[[str], None],
                explore: TestSpec | None = None) -> int:
        """Takes the function that runs one test, the one that prints a line and the base test
        of an explore (None: none). Runs every scenario the budget allows, retrying
        infrastructure failures once, then explores with the budget left (module docstring),
        and keeps the outputs current. Returns the exit code (0 as expected, 1 a finding, 2
        otherwise)."""
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
        if explore is not None and not self.interrupted:
            self._explore(explore, run_one, say)
        self.write()
        return self.exit_code()

    def _explore(self, base: TestSpec, run_one: RunOne, say: Callable[[str], None]) -> None:
        """Explores from `base` with the budget left (module docstring), keeping the outputs
        current after every run."""
        from harness.explore import Budget, Explorer  # it imports this module's Crashed
        from harness.explore_space import Space

        left = self.remaining_s()
        runs = math.floor(left / self.overhead_s) if self.overhead_s > 0 else 0
        if left <= 0 or runs < 1:
            say(f"explore: {max(0.0, left):.0f} s of the budget left, not enough to explore")
            return
        explorer = Explorer(base, Space(), self.series.base_seed, self.store_root,
                            Budget(runs=runs, hours=left / 3600), clock=self.clock)
        explorer.walls = [(r.wall_s, self.limits[r.scenario]) for r in self.series.rows
                          if r.judgement != matrix.ERROR and r.scenario in self.limits]
        self.explorer = explorer
        say(f"explore: the {left / 60:.1f} min left (at most {runs} runs), seed "
            f"{explorer.seed}; record: {explorer.out_dir}")

        def run_spec(spec: TestSpec) -> tuple[int, Any]:
            self.write()  # the outputs hold every finished run before the next starts
            return run_one(spec.name, spec, 1)

        explorer.execute(run_spec, say)
        self.interrupted |= explorer.interrupted
        say("coverage: runs that reached each effect, by fault kind\n"
            + explorer.coverage.table().rstrip())

    def _short_of_budget(self, left: float, name: str, spec: TestSpec) -> str:
        return (f"not started: {max(0.0, left):.0f} s of the budget left, the run needed "
                f"about {self.estimate_s(name, spec):.0f} s")

    def _skip(self, runs: Sequence[tuple[str, TestSpec]],
              reason: Callable[[str, TestSpec], str]) -> None:
        for name, spec in runs:
            self.skipped.append(Skipped(name, spec.seed, reason(name, spec),
                                        round(self.estimate_s(name, spec), 1),
                                        vary.row_variant(spec, self.series.varied),
                                        spec.broker.rabbitmq))

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

    def explore_rows(self) -> list[Row]:
        """Returns the rows of the explore's runs (none when there was no explore)."""
        return list(self.explorer.rows) if self.explorer is not None else []

    def exit_code(self) -> int:
        """Returns 2 when nothing ran or the nightly was interrupted, else the matrix's code
        (runs skipped for the budget do not count against it), raised to the explore's
        (`explore_code`)."""
        if self.interrupted or not self.series.rows:
            return 2
        return max(matrix.exit_code(self.series.rows, self.summaries()),
                   explore_code(self.explore_rows()))

    # -- outputs -----------------------------------------------------------------------

    def cases(self) -> list[junit.Case]:
        """Returns the JUnit cases: one per run, then one per skipped run."""
        out = [junit.case_for_row(row, self._retried.get(i))
               for i, row in enumerate(self.series.rows)]
        out += [junit.skipped_case(s.scenario, s.seed, s.reason, s.variant, s.rabbitmq)
                for s in self.skipped]
        out += [dataclasses.replace(junit.case_for_row(row), classname=f"explore.{row.scenario}")
                for row in self.explore_rows()]
        return out

    def explore_record(self) -> dict[str, Any] | None:
        """Returns what matrix.json says of the explore (None when there was none): its
        directory, seed, runs, exit code, coverage cells and rows."""
        ex = self.explorer
        if ex is None:
            return None
        return {"dir": str(ex.out_dir), "seed": ex.seed, "runs": ex.runs_done(),
                "interrupted": ex.interrupted, "exit_code": explore_code(ex.rows),
                "coverage": ex.coverage.to_list(), "rows": [asdict(r) for r in ex.rows]}

    def write(self) -> None:
        """Rewrites matrix.json/md, junit.xml and index.html in the output directory."""
        # Updated, not replaced: what the CLI put there (`not_applicable`) stays.
        self.series.extra |= {
            "nightly": {"budget_s": self.budget_s, "elapsed_s": round(self.elapsed_s(), 1),
                        "base_seed": self.series.base_seed,
                        "started": self.started.isoformat(timespec="seconds"),
                        "interrupted": self.interrupted},
            "retries": self.retries,
            "skipped": [asdict(s) for s in self.skipped],
            "tally": {"scenarios": tally(self.series.rows, self.skipped),
                      "explore": tally(self.explore_rows(), ()) if self.explorer else None},
            "explore": self.explore_record(),
        }
        self.series.write(self.exit_code())
        props = {"base_seed": str(self.series.base_seed), "budget_s": f"{self.budget_s:.0f}",
                 "exit_code": str(self.exit_code())}
        props.update({k.replace(" ", "_"): str(n) for k, n in
                      tally([*self.series.rows, *self.explore_rows()], self.skipped).items()})
        junit.write_junit(self.out_dir / JUNIT_XML, self.cases(), "nightly matrix",
                          self.started.isoformat(timespec="seconds"), props)
        write_atomic(self.out_dir / INDEX_HTML, self.html())

    def html(self) -> str:
        """Returns the nightly's page: its summary table and one row per run."""
        return nightly_html(self.out_dir, self.series.rows, self.summaries(), self.skipped,
                            self.retries, self._retried, self.exit_code(),
                            {"budget": f"{self.budget_s / 60:.0f} min",
                             "used": f"{self.elapsed_s() / 60:.1f} min",
                             "base seed": str(self.series.base_seed)},
                            explore_section(self.explorer),
                            matrix.side_by_side_of(self.summaries(), self.series.extra))


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


def _run_line(row: Row, said: str = "") -> nightly_page.RunLine:
    """A run's line on the page: its scenario (and variant), badge, what it showed
    (junit.sentence, then `said`), wall time, directory and versions."""
    return nightly_page.RunLine(junit.case_class(row.scenario, row.variant), row.seed, *_run_badge(row), junit.sentence(row) + said,
                                row.wall_s, row.run_dir, row_versions(row))


def explore_section(explorer: Explorer | None) -> nightly_page.ExploreSection | None:
    """Takes the nightly's explore (None: none). Returns its section of the page: its record,
    seed, tally, runs and coverage table."""
    if explorer is None:
        return None
    kinds, lines = explorer.coverage.grid()
    return nightly_page.ExploreSection(
        str(explorer.out_dir), explorer.seed, list(tally(explorer.rows, ()).items()),
        [_run_line(r) for r in explorer.rows], kinds, lines)


def nightly_html(out_dir: Path, rows: Sequence[Row], summaries: Sequence[matrix.Summary],
                 skipped: Sequence[Skipped], retries: Sequence[dict[str, Any]],
                 retried: dict[int, str], code: int, facts: dict[str, str],
                 explore: nightly_page.ExploreSection | None = None,
                 side_by_side: dict[str, Any] | None = None) -> str:
    """Takes the output directory, the rows, their summaries, the skipped runs, the retried
    first tries, which rows were second tries (and why), the exit code, a few facts to show
    (budget, time used, seed), the explore's section (None: none) and the table putting the
    release lines side by side (matrix.side_by_side_of; None: one line). Returns the page
    (reports.nightly_page), in the matrix's words: each judgement's badge, what each run
    showed (junit.sentence), the runs tallied by what they showed."""
    scenarios = [nightly_page.ScenarioLine(
        matrix.named(s.scenario, s.rabbitmq, s.variant), s.expect, s.runs, s.held, s.weak, s.min_rate, _summary_badge(s.verdict),
        s.verdict,
        "-" if s.lost_min is None else f"{s.lost_min} / {s.lost_median:g} / {s.lost_max}",
        s.wall_s_median) for s in summaries]
    runs = [_run_line(r, f" Retried once after: {retried[i]}."
                      if i in retried and r.judgement != matrix.ERROR else "")
            for i, r in enumerate(rows)]
    runs += [nightly_page.RunLine(junit.case_class(s.scenario, s.variant), s.seed, "unchecked",
                                  "skipped", s.reason) for s in skipped]
    again = [nightly_page.RetryLine(str(r.get("scenario")), r.get("seed"), str(r.get("reason")),
                                    str(r.get("run_dir") or "")) for r in retries]
    return nightly_page.nightly_html(out_dir, scenarios, runs, len(skipped),
                                     matrix.problems(summaries), again, code, facts,
                                     list(tally(rows, skipped).items()), explore,
                                     side_by_side)
