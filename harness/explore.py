"""Explore: a search over configurations and fault schedules on a budget of runs or hours, guided
by what earlier runs provoked.

Each step draws a pool of candidates (harness.explore_space; candidate j of
step i from a Random seeded "<seed>:explore:<i>:<j>"), scores each with the
guide, and runs the best (the first drawn on a tie) through the function the
caller hands in: the CLI's is a normal stored run (harness.runner.run_test),
so every run has its run directory, results, scenario.toml and report. Given
variants (`--vary`, harness.vary), the chosen candidate runs once per variant,
its schedule held fixed, and the verdicts sit side by side in explore.md.

What a run provoked: for each fault of its results.json `faults`, its
effects' kinds (failover, leader-election, promotion,
unsynchronised-promotion, pause-minority, autoheal-restart, node-restart,
master-stopped-without-synchronised-mirror, metadata-store-leader-elected,
connections-dropped, ...) and a mark of whether RabbitMQ noticed it
(`NOTICE_MARKS`: noticed, noticed-after-heal, not-noticed, notice-unknown).
Each (effect or mark, fault kind) pair is a cell of the coverage table, which
counts the runs that reached it.

The guide is a bandit over features with novelty as its reward. A
candidate's features are, for each scheduled fault, its fault name, its target,
its duration band and the gap before it, plus its configuration choices.
After a run each fault's reward is the number of coverage cells it reached
first (no earlier run had), plus FINDING_BONUS for each fault of an invalid
run; each of the fault's features is credited with it, each configuration
feature with the run's total. A feature's score is UCB1 over that reward,

    (reward + 1) / (tries + 1) + sqrt(2 ln(runs + 1) / (tries + 1)),

the novelty it has yielded per try, counted from an optimistic 1 so that
untried features come first, plus UCB1's bonus, so a feature tried rarely is
tried again. A candidate's score is the mean of its features'. So schedules
whose fault kinds, targets and duration bands lately reached effects not seen
before are preferred, and those that only reach what is known fade. A pool of
one is plain random search.

The record, rewritten after every run, is store/explore/<time>/: explore.json
(the seed, the space, every step: its pool's scores, the chosen candidate's
scenario file candidates/NNN.toml, each run's variant, run directory, exit
code, verdict and faults with their effects, the new cells and reward; the
coverage), explore.md and explore.html (the coverage table, the verdicts
side by side when variants ran, a line per run linking to its report). Each run is also a matrix row (`Explorer.rows`,
a run that failed for infrastructure reasons judged an error, never a
finding), which the nightly's JUnit file and page show. Nothing here prints: the caller hands in the
function that runs one spec and the one that prints a line.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from checkers.verdict import verdict_word
from harness import matrix, store, vary
from harness.explore_space import Candidate, Space, candidate_rng, draw_candidate
from harness.outcomes import Crashed, infrastructure_failure
from harness.scenario_file import write_scenario
from harness.spec import TestSpec
from history.files import write_atomic
from reports.explore_page import write_explore_page

log = logging.getLogger(__name__)

# What runs one spec: spec -> (exit code, outcome with run_dir, results, error).
RunSpec = Callable[[TestSpec], tuple[int, Any]]
Cell = tuple[str, str]  # (effect kind or notice mark, fault kind)

FINDING_BONUS = 2.0
OVERHEAD_S = 70.0  # a run's set-up, recovery, drain, check and report before any is timed
NOTICE_MARKS: Mapping[Any, str] = {True: "noticed", False: "not-noticed",
                                   "unknown": "notice-unknown"}
EXPLORE_JSON = "explore.json"
EXPLORE_MD = "explore.md"


def fault_marks(fault: Mapping[str, Any]) -> list[str]:
    """Takes one entry of results.json `faults`. Returns what it provoked: its effects' kinds
    and its notice mark, each once."""
    noticed = fault.get("noticed")
    mark = NOTICE_MARKS[noticed] if noticed in (True, False) else NOTICE_MARKS["unknown"]
    if noticed is True and fault.get("noticed_when") == "after_heal":
        mark = "noticed-after-heal"
    kinds = [str(e.get("kind")) for e in fault.get("effects") or () if isinstance(e, dict)]
    return list(dict.fromkeys([*kinds, mark]))


def run_faults(results: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Takes a run's results (None: none). Returns each fault's name, kind, target, notice and
    what it provoked (`fault_marks`), in order."""
    faults = (results or {}).get("faults")
    if not isinstance(faults, list):
        return []
    return [{"fault": str(f.get("fault") or f.get("f")), "kind": str(f.get("kind")),
             "target": f.get("target"), "noticed": f.get("noticed"),
             "marks": fault_marks(f)} for f in faults if isinstance(f, dict)]


@dataclass
class Coverage:
    """Which (effect or mark, fault kind) cells runs reached, and how many runs reached each."""

    runs: dict[Cell, int] = field(default_factory=dict)

    def add(self, faults: Sequence[Mapping[str, Any]]) -> list[set[Cell]]:
        """Takes one run's faults (`run_faults`). Counts the cells it reached. Returns, for each
        fault, the cells it reached first (no earlier run had; a cell two of its faults reach
        is the first one's)."""
        new: list[set[Cell]] = []
        reached: set[Cell] = set()
        for f in faults:
            cells = {(m, str(f["kind"])) for m in f["marks"]}
            new.append({c for c in cells - reached if c not in self.runs})
            reached |= cells
        for c in reached:
            self.runs[c] = self.runs.get(c, 0) + 1
        return new

    def grid(self) -> tuple[list[str], list[tuple[str, list[int | None]]]]:
        """Returns the coverage as a grid: the fault kinds (its columns), and a line per effect
        or mark (the effects first, then the notice marks) with the runs that reached each of
        its cells (None: none)."""
        kinds = sorted({k for _e, k in self.runs})
        effects = sorted({e for e, _k in self.runs}, key=lambda e: (e in NOTICE_MARKS.values(), e))
        return kinds, [(e, [self.runs.get((e, k)) for k in kinds]) for e in effects]

    def table(self) -> str:
        """Returns the coverage as a Markdown table: a line per effect or mark, a column per
        fault kind, each cell the runs that reached it ("-" none)."""
        kinds, lines = self.grid()
        head = ["effect \\ fault kind", *kinds]
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for e, counts in lines:
            cells = ["-" if n is None else str(n) for n in counts]
            out.append("| " + " | ".join([e, *cells]) + " |")
        return "\n".join(out) + "\n" if lines else "no fault reached anything yet\n"

    def to_list(self) -> list[dict[str, Any]]:
        """Returns the cells as [{effect, fault_kind, runs}] (explore.json)."""
        return [{"effect": e, "fault_kind": k, "runs": n}
                for (e, k), n in sorted(self.runs.items())]


@dataclass
class Guide:
    """The bandit over features (module docstring): tries and reward per feature."""

    tries: dict[tuple[str, str], int] = field(default_factory=dict)
    reward: dict[tuple[str, str], float] = field(default_factory=dict)
    runs: int = 0

    def feature_score(self, arm: tuple[str, str]) -> float:
        """Takes a feature. Returns its UCB1 score over novelty."""
        n = self.tries.get(arm, 0)
        mean = (self.reward.get(arm, 0.0) + 1.0) / (n + 1)
        return mean + math.sqrt(2.0 * math.log(self.runs + 1) / (n + 1))

    def score(self, candidate: Candidate) -> float:
        """Takes a candidate. Returns the mean score of its features."""
        arms = candidate.arms()
        return sum(self.feature_score(a) for a in arms) / len(arms) if arms else 0.0

    def credit(self, candidate: Candidate, rewards: Sequence[float]) -> None:
        """Takes a candidate that ran and each scheduled fault's reward. Credits the features."""
        self.runs += 1
        for item, r in zip(candidate.items, rewards, strict=False):
            for arm in (("fault", item.fault), ("target", item.target), ("band", item.band),
                        ("gap", item.gap)):
                self._add(arm, r)
        for arm in candidate.config:
            self._add(arm, sum(rewards))

    def _add(self, arm: tuple[str, str], r: float) -> None:
        self.tries[arm] = self.tries.get(arm, 0) + 1
        self.reward[arm] = self.reward.get(arm, 0.0) + r

    def to_dict(self) -> dict[str, Any]:
        """Returns each feature's tries, reward and score (explore.json)."""
        return {f"{k}={v}": {"tries": n, "reward": self.reward.get((k, v), 0.0),
                             "score": round(self.feature_score((k, v)), 4)}
                for (k, v), n in sorted(self.tries.items())}


def item_rewards(candidate: Candidate, faults: Sequence[Mapping[str, Any]],
                 new: Sequence[set[Cell]], invalid: bool) -> list[float]:
    """Takes a candidate, its run's faults (`run_faults`), the cells each reached first and
    whether the run was invalid. Returns each scheduled fault's reward: the new cells of the
    results' faults matched to it by name, in order, plus FINDING_BONUS when invalid."""
    rewards = [FINDING_BONUS if invalid else 0.0 for _ in candidate.items]
    names = [item.fault for item in candidate.items]
    i = 0
    for f, cells in zip(faults, new, strict=True):
        j = next((k for k in range(i, len(names)) if names[k] == f["fault"]), None)
        if j is None:
            continue  # a fault the schedule does not hold (the history's own): no feature
        rewards[j] += len(cells)
        i = j + 1
    return rewards


@dataclass(frozen=True)
class Budget:
    """How much the explorer may spend: at most `runs` runs and `hours` hours (None: no limit of
    that kind; at least one must be given)."""

    runs: int | None = None
    hours: float | None = None

    def __post_init__(self) -> None:
        if self.runs is None and self.hours is None:
            raise ValueError("an explore needs a budget: a number of runs, hours, or both")
        if (self.runs is not None and self.runs < 1) or (self.hours is not None
                                                         and not self.hours > 0):
            raise ValueError("the budget must be at least one run and more than 0 hours")


def schedule_text(candidate: Candidate) -> str:
    """Returns a candidate's schedule in one line: each fault's start, entry, duration, band."""
    return "; ".join(f"{i.start_s:g}s {i.entry} {i.duration_s:g}s ({i.band}, {i.gap})"
                     for i in candidate.items)


def workload_text(spec: TestSpec) -> str:
    """Returns a spec's queue and workload shape in one line."""
    w = spec.workload
    rate = "unlimited" if w.consume_rate is None else f"{w.consume_rate:g}/s"
    return (f"{spec.queue.type}, {spec.broker.handling or 'no partition handling'}; "
            f"backlog {w.backlog}, "
            f"{w.publishers} publishers at {w.rate:g}/s window {w.client.window}, "
            f"{w.consumers} consumers at {rate} prefetch {w.client.prefetch}"
            + (", paused in faults" if w.pause_consumers_in_faults else "")
            + ("" if w.stay == "none" else f"; clients that stay: {w.stay}"))


class Explorer:
    """Takes the base spec, the search space, the explore seed, the store root, the budget, the
    pool size, the varied dimensions (`--vary`, harness.vary: each candidate runs once per
    variant) and a monotonic clock (module docstring)."""

    def __init__(self, base: TestSpec, space: Space, seed: int, store_root: Path, budget: Budget,
                 pool: int = 8, dims: Sequence[tuple[str, tuple[str, ...]]] = (),
                 clock: Callable[[], float] = time.monotonic,
                 stop_at_finding: bool = False) -> None:
        if pool < 1:
            raise ValueError(f"the pool must hold at least one candidate, got {pool}")
        self.base, self.seed, self.budget, self.pool = base, seed, budget, pool
        self.dims = list(dims)
        varied_kinds = dict(self.dims).get("queue.type", ())  # candidates must suit them too
        self.space = dataclasses.replace(
            space, also_kinds=(*space.also_kinds, *varied_kinds)).fitted(base)
        self.variants = vary.variants(self.dims)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        self.out_dir = store_root / "explore" / stamp
        self.coverage, self.guide = Coverage(), Guide()
        self.steps: list[dict[str, Any]] = []
        self.rows: list[matrix.Row] = []
        self.not_applicable: list[matrix.NotApplicable] = []
        self.walls: list[tuple[float, float]] = []  # (wall s, time limit s) of each run
        self.interrupted = False
        # Whether the search ends at its first invalid run (to shrink it: `explore --shrink`).
        self.stop_at_finding = stop_at_finding
        self.shrinks: list[dict[str, Any]] = []  # what became of the findings shrunk
        self.clock = clock
        self._t0 = clock()

    def choose(self, number: int) -> tuple[Candidate, list[float]]:
        """Takes a step's number. Returns the best-scored candidate of its pool and every pool
        member's score, in drawing order (the first best on a tie)."""
        pool = [draw_candidate(self.base, self.space, candidate_rng(self.seed, number, j))
                for j in range(self.pool)]
        scores = [round(self.guide.score(c), 6) for c in pool]
        return pool[scores.index(max(scores))], scores

    def runs_done(self) -> int:
        """Returns how many runs the explorer has made."""
        return sum(len(s["runs"]) for s in self.steps)

    def estimate_s(self, spec: TestSpec) -> float:
        """Takes a spec. Returns the seconds its run is expected to take: its time limit plus
        the median overhead earlier runs showed beyond theirs (OVERHEAD_S before any)."""
        over = [wall - limit for wall, limit in self.walls]
        return spec.time_limit_s + max(0.0, statistics.median(over) if over else OVERHEAD_S)

    def affordable(self, specs: Sequence[TestSpec]) -> str | None:
        """Takes the specs of a step. Returns why the budget cannot hold them all, or None."""
        if self.budget.runs is not None and self.runs_done() + len(specs) > self.budget.runs:
            return f"{self.runs_done()} of {self.budget.runs} runs made"
        if self.budget.hours is not None:
            left = self.budget.hours * 3600 - (self.clock() - self._t0)
            need = sum(self.estimate_s(s) for s in specs)
            if left < need:
                return f"{max(0.0, left):.0f} s of the budget left, the next step needs {need:.0f} s"
        return None

    def execute(self, run_spec: RunSpec, say: Callable[[str], None]) -> int:
        """Takes the function that runs one spec and the one that prints a line. Explores until
        the budget is spent or the run is interrupted, keeping the record current. Returns the
        exit code: 1 when a run was invalid, else 2 when no run got a verdict, else 0."""
        self._t0 = self.clock()
        self.write()
        number = 0
        while not self.interrupted:
            candidate, scores = self.choose(number)
            specs, refused = self._variant_specs(number, candidate)
            if not specs:
                say(f"explore: candidate {number} has no variant that can run; stopping")
                break
            why = self.affordable([s for s, _v in specs])
            if why is not None:
                say(f"explore: budget spent ({why})")
                break
            self.not_applicable += refused
            self._step(number, candidate, scores, specs, run_spec, say)
            number += 1
            if self.stop_at_finding and self.findings():
                say(f"explore: a finding at candidate {number - 1}; the search stops there")
                break
        self.write()
        return self.exit_code()

    def _variant_specs(self, number: int, candidate: Candidate
                       ) -> tuple[list[tuple[TestSpec, vary.Variant]], list[matrix.NotApplicable]]:
        """Takes a step's number and its candidate. Returns (spec, variant) for each variant
        that can run it, and those that cannot, as not applicable, with why."""
        out, refused = [], []
        for variant in self.variants:
            spec = vary.apply(candidate.spec, variant)
            why = spec.refusal()
            if why is None:
                try:
                    spec.validate()
                except ValueError as e:
                    why = f"cannot run: {e}"
            if why is None:
                out.append((spec, variant))
            else:
                refused.append(matrix.NotApplicable(_name(number), spec.broker.rabbitmq, why,
                                                    vary.label(variant)))
        return out, refused

    def _step(self, number: int, candidate: Candidate, scores: list[float],
              specs: Sequence[tuple[TestSpec, vary.Variant]], run_spec: RunSpec,
              say: Callable[[str], None]) -> None:
        """Runs a candidate once per variant, learns from the runs and records the step."""
        (self.out_dir / "candidates").mkdir(parents=True, exist_ok=True)
        path = write_scenario(candidate.spec, self.out_dir / "candidates" / f"{number:03d}.toml",
                              header=f"Explore {self.out_dir.name}, seed {self.seed}, candidate "
                                     f"{number}: {schedule_text(candidate)}")
        say(f"=== candidate {number} (score {max(scores):.3f} of {len(scores)} drawn): "
            f"{schedule_text(candidate)}; {workload_text(candidate.spec)}")
        step: dict[str, Any] = {
            "number": number, "scenario_file": str(path), "score": max(scores),
            "pool_scores": scores, "schedule": [dataclasses.asdict(i) for i in candidate.items],
            "config": dict(candidate.config), "workload": workload_text(candidate.spec),
            "time_limit_s": candidate.spec.time_limit_s, "seed": candidate.spec.seed, "runs": []}
        rewards = [0.0 for _ in candidate.items]
        for spec, variant in specs:
            run = self._run(number, spec, variant, run_spec)
            step["runs"].append(run)
            for i, r in enumerate(item_rewards(candidate, run["faults"], run.pop("_new"),
                                               run["verdict"] == "invalid")):
                rewards[i] += r
            said = ", ".join(f"{k}={v}" for k, v in variant)
            say(f"    {said or 'run'}: {run['verdict']}; reached "
                f"{', '.join(run['reached']) or 'nothing'}; new {len(run['new_cells'])}")
            if self.interrupted:
                break
        self.guide.credit(candidate, rewards)
        step["rewards"] = rewards
        self.steps.append(step)
        self.write()

    def _run(self, number: int, spec: TestSpec, variant: vary.Variant,
             run_spec: RunSpec) -> dict[str, Any]:
        """Runs one spec (a crash is an error outcome, Ctrl-C stops the explorer after it).
        Returns its record, with the cells each fault reached first under "_new"."""
        t0 = self.clock()
        try:
            code, outcome = run_spec(spec)
        except KeyboardInterrupt:
            self.interrupted = True
            code, outcome = 2, Crashed("interrupted", interrupted=True)
        except Exception as err:  # one broken run must not end the search
            log.exception("explore run of candidate %s failed", number)
            code, outcome = 2, Crashed(f"{type(err).__name__}: {err}")
        wall = self.clock() - t0
        self.interrupted |= bool(getattr(outcome, "interrupted", False))
        self.walls.append((wall, spec.time_limit_s))
        results = getattr(outcome, "results", None)
        faults = run_faults(results)
        new = self.coverage.add(faults)
        said = vary.with_stay(vary.label(variant), spec.workload.stay)  # a staying candidate:
        self.rows.append(matrix.make_row(  # valid, and settled after the heals
            _name(number), matrix.expectation_of({}, _name(number), said), code, wall,
            getattr(outcome, "run_dir", ""), results, getattr(outcome, "error", None),
            seed=spec.seed, rabbitmq=spec.broker.rabbitmq, variant=said,
            infrastructure=infrastructure_failure(outcome)))
        return {"variant": vary.label(variant), "rabbitmq": spec.broker.rabbitmq,
                "run_dir": str(getattr(outcome, "run_dir", "")), "exit_code": code,
                "verdict": verdict_word(results), "error": getattr(outcome, "error", None),
                "wall_s": round(wall, 1), "faults": faults,
                "reached": sorted({m for f in faults for m in f["marks"]}),
                "new_cells": sorted([list(c) for cells in new for c in cells]), "_new": new}

    def findings(self) -> list[str]:
        """Returns the run directories of the invalid runs, in the order they ran."""
        return [r["run_dir"] for s in self.steps for r in s["runs"] if r["verdict"] == "invalid"]

    def record_shrink(self, shrink: Mapping[str, Any]) -> None:
        """Takes what a shrink of one of the findings came to (its directory, finding, status,
        minimal scenario file and rate, replays). Keeps it in the record and rewrites it."""
        self.shrinks.append(dict(shrink))
        self.write()

    def exit_code(self) -> int:
        """Returns 1 when a run was invalid, else 2 when no run got a verdict (or none ran),
        else 0."""
        verdicts = [r["verdict"] for s in self.steps for r in s["runs"]]
        if "invalid" in verdicts:
            return 1
        return 0 if any(v != "unknown" for v in verdicts) else 2

    def to_dict(self) -> dict[str, Any]:
        """Returns the explorer's record (explore.json)."""
        return {"seed": self.seed, "budget": dataclasses.asdict(self.budget), "pool": self.pool,
                "space": dataclasses.asdict(self.space), "vary": [list(d) for d in self.dims],
                "base": self.base.to_dict(), "runs": self.runs_done(),
                "interrupted": self.interrupted, "exit_code": self.exit_code(),
                "steps": self.steps, "coverage": self.coverage.to_list(),
                "features": self.guide.to_dict(), "shrinks": self.shrinks,
                "not_applicable": [dataclasses.asdict(n) for n in self.not_applicable]}

    def write(self) -> tuple[Path, Path]:
        """Rewrites explore.json, explore.md and explore.html (reports.explore_page, from
        explore.json). Returns the first two's paths."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        js, md = self.out_dir / EXPLORE_JSON, self.out_dir / EXPLORE_MD
        store.write_json(js, self.to_dict())
        write_atomic(md, self.markdown())
        write_explore_page(self.out_dir)
        return js, md

    def markdown(self) -> str:
        """Returns explore.md: the coverage table, the variants side by side when there are
        several, and a line per run."""
        head = (f"# Explore {self.out_dir.name}\n\nseed {self.seed}, pool {self.pool}, "
                f"{self.runs_done()} runs; repeat: python -m harness explore --seed {self.seed} "
                f"(the same candidates while the runs provoke the same)\n\n"
                f"## Coverage: runs that reached each effect, by fault kind\n\n"
                f"{self.coverage.table()}\n")
        if len(self.variants) > 1:
            summaries = matrix.summarize(self.rows, {})
            column = self.dims[0][0]
            head += ("## One schedule across variants\n\n"
                     + matrix.variant_table(summaries, self.not_applicable, column) + "\n")
        lines = ["| step | variant | verdict | schedule | workload | reached | new | run |",
                 "|---|---|---|---|---|---|---|---|"]
        for s in self.steps:
            sched = "; ".join(f"{i['start_s']:g}s {i['entry']} {i['duration_s']:g}s"
                              for i in s["schedule"])
            for r in s["runs"]:
                lines.append(f"| {s['number']} | {r['variant'] or '-'} | {r['verdict']} | "
                             f"{sched} | {s['workload']} | {', '.join(r['reached']) or '-'} | "
                             f"{len(r['new_cells'])} | {r['run_dir']} |")
        shrunk = "".join(
            f"- {x['finding']}: {x['status']}; {x['replays']} replays; "
            f"{x.get('minimal') or 'no minimal scenario'} ({x['dir']}/shrink.html)\n"
            for x in self.shrinks)
        return (head + "## Runs\n\n" + "\n".join(lines) + "\n"
                + (f"\n## Findings shrunk\n\n{shrunk}" if shrunk else ""))


def _name(number: int) -> str:
    return f"candidate-{number:03d}"

