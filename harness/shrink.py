"""Shrinking a finding: the smallest test that still fails, and how often it does.

A finding is a stored run whose results say `valid: false`. The shrinker
starts from what the run played (its scenario.toml: its spec and seed, its
faults as an explicit schedule played once; else test.json and its history)
and tries reductions. The cluster is not deterministic, so every candidate is
replayed up to `replays` times (default 3) with the same seed, and a
reduction is kept only if it failed in at least `min_fails` of them (default
2 of 3). Its replays stop early once the rate is reached or can no longer be.

A replay *fails* when its results say valid false with an anomaly class the
original showed (harness.incidents.anomaly_classes: lost, unflagged
duplicates, reordered, ...), so a reduction that fails another way is not
taken for the same finding (`any_anomaly` accepts any invalid run).

Before shrinking, the original is replayed the same way: a finding that does
not reproduce at the rate is not shrunk (the record says so). Then, greedily,
the reductions in order, each tried candidate by candidate; the first kept
becomes the test and the search starts again from the first reduction; it
ends when a whole sweep keeps nothing or the budget (`max_runs` replays) is
spent:

1. fewer faults: drop one scheduled fault (the last first; none left is a
   test too: the finding then needs no fault);
2. shorter faults: halve one fault's duration (not below MIN_FAULT_S),
   the later faults moved up by what it lost;
3. shorter main phase: halve the healthy time before each fault and after
   the last (not below MIN_LEAD_S before the first, MIN_TAIL_S after the last);
4. smaller workload: halve the backlog, one publisher fewer, one consumer
   fewer, half the publish rate (not below MIN_RATE);
5. fewer staying clients: clients that retire at their first unknown
   outcome where they stayed through faults (`--stay`), then only the
   publishers or only the consumers staying where both did.

A stuck publish or consumer after a heal (the liveness section's settlement,
checkers.settlement) is a class of its own ("stuck publish", "stuck
consumer"), so a finding of clients that stay is replayed as that finding.

The minimal test is then replayed until it has `confirm` replays in all
(default 5), and its rate is all its replays: "4 of 5". The record is
store/shrink/<time>/: original.toml, minimal.toml (its head says the rate),
shrink.json (every candidate: its reduction, schedule, replays with run
directory and verdict, kept or not) and shrink.html (reports.shrink_page,
from these files alone: `write_page` draws it again). Nothing here prints: the caller hands in the
function that runs one spec and the one that prints a line.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from checkers.verdict import verdict_word
from harness import store
from harness.incidents import anomaly_classes
from harness.outcomes import Crashed
from harness.scenario_file import (
    RUN_FILE,
    ScenarioFileError,
    nemesis_ops,
    played_spec,
    read_scenario,
    write_scenario,
)
from harness.spec import SpecError, TestSpec, spec_from_dict
from nemesis.options import NemesisOptions, ScheduledFault
from reports import shrink_page
from reports.shrink_page import Shape

log = logging.getLogger(__name__)

# What runs one spec: spec -> (exit code, outcome with run_dir, results, error).
RunSpec = Callable[[TestSpec], tuple[int, Any]]
MIN_FAULT_S = 1.0
MIN_LEAD_S = 1.0
MIN_TAIL_S = 10.0
MIN_RATE = 20.0
SHRINK_JSON = "shrink.json"
ORIGINAL_TOML = "original.toml"
MINIMAL_TOML = "minimal.toml"


@dataclass(frozen=True)
class Rule:
    """How a candidate is judged: replayed up to `replays` times, kept when at least
    `min_fails` of them failed; `confirm` replays of the minimal test in all; `max_runs`
    replays at most; `any_anomaly`: any invalid run fails, not only the original's classes."""

    replays: int = 3
    min_fails: int = 2
    confirm: int = 5
    max_runs: int = 60
    any_anomaly: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.min_fails <= self.replays:
            raise ValueError(f"the rate must be 1 <= failures <= replays, got {self.min_fails} "
                             f"of {self.replays}")
        if self.max_runs < self.replays or self.confirm < 0:
            raise ValueError("the budget must hold one candidate's replays; confirm >= 0")


# -- the stored finding -------------------------------------------------------------------------

def finding_spec(run_dir: Path) -> tuple[TestSpec, dict[str, Any]]:
    """Takes a stored run's directory. Returns the spec it played (scenario.toml, else test.json
    with its faults as played from history.jsonl) and its results.

    Raises SpecError when the run has no results, is not invalid, or its spec does not read.
    """
    results_path = run_dir / store.RESULTS
    if not results_path.is_file():
        raise SpecError(f"{run_dir} has no {store.RESULTS}: nothing to shrink")
    results = json.loads(results_path.read_text())
    if results.get("valid") is not False:
        raise SpecError(f"{run_dir} is not a finding: its results say valid "
                        f"{results.get('valid')!r}, and only an invalid run is shrunk")
    if (run_dir / RUN_FILE).is_file():
        return read_scenario(run_dir / RUN_FILE), results
    info = json.loads((run_dir / store.TEST).read_text())
    spec = spec_from_dict(info["spec"])
    spec = dataclasses.replace(spec, seed=spec.seed if spec.seed is not None else info.get("seed"))
    played, _notes = played_spec(spec, nemesis_ops(run_dir / store.HISTORY))
    return played.resolved(), results


# -- reductions ---------------------------------------------------------------------------------

def with_schedule(spec: TestSpec, items: Sequence[ScheduledFault],
                  tail_s: float | None = None) -> TestSpec:
    """Takes a spec, a schedule and the main phase's time after the last heal (None: the
    spec's own, at least MIN_TAIL_S). Returns the spec playing that schedule once, its time
    limit the last heal plus the tail."""
    old_end = max((s + d for s, _e, d in spec.nemesis.schedule), default=0.0)
    tail = tail_s if tail_s is not None else max(MIN_TAIL_S, spec.time_limit_s - old_end)
    items = tuple((round(s, 3), e, round(d, 3)) for s, e, d in items)
    end = max((s + d for s, _e, d in items), default=0.0)
    keep = {f.name: getattr(spec.nemesis, f.name) for f in dataclasses.fields(NemesisOptions)
            if f.name not in ("faults", "order", "schedule")}
    return dataclasses.replace(spec, time_limit_s=round(end + tail, 3),
                               nemesis=NemesisOptions.played_once(items, **keep))


Reduction = Callable[[TestSpec], Iterator[tuple[str, TestSpec]]]


def fewer_faults(spec: TestSpec) -> Iterator[tuple[str, TestSpec]]:
    """Yields the spec without one of its scheduled faults, the last first."""
    items = list(spec.nemesis.schedule)
    for i in reversed(range(len(items))):
        yield (f"drop fault {i + 1} ({items[i][1]})",
               with_schedule(spec, items[:i] + items[i + 1:]))


def _shorter(seconds: float, least: float) -> list[float]:
    """Returns shorter times to try for `seconds`, boldest first: the least, a half, three
    quarters (each at least `least`, each once, each shorter)."""
    tries = [least, round(seconds / 2, 1), round(seconds * 3 / 4, 1)]
    return [t for t in dict.fromkeys(max(least, t) for t in tries) if t < seconds]


def shorter_faults(spec: TestSpec) -> Iterator[tuple[str, TestSpec]]:
    """Yields the spec with one fault shorter (the later ones moved up), the longest fault
    first, each the boldest cut first (`_shorter`)."""
    items = list(spec.nemesis.schedule)
    for i in sorted(range(len(items)), key=lambda i: -items[i][2]):
        _start, entry, duration = items[i]
        for shorter in _shorter(duration, MIN_FAULT_S):
            cut = duration - shorter
            moved = [(s - cut if k > i else s, e, shorter if k == i else d)
                     for k, (s, e, d) in enumerate(items)]
            yield (f"fault {i + 1} ({entry}) {duration:g} s -> {shorter:g} s",
                   with_schedule(spec, moved))


def _gaps(items: Sequence[ScheduledFault]) -> list[float]:
    """Returns the healthy time before each scheduled fault."""
    ends = [0.0] + [s + d for s, _e, d in items]
    return [s - end for (s, _e, _d), end in zip(items, ends, strict=False)]


def shorter_main_phase(spec: TestSpec) -> Iterator[tuple[str, TestSpec]]:
    """Yields the spec with less healthy time before each fault and after the last: as little
    as allowed first, then half."""
    items = list(spec.nemesis.schedule)
    gaps = _gaps(items)
    tail = spec.time_limit_s - max((s + d for s, _e, d in items), default=0.0)
    for share in (0.0, 0.5):
        new_gaps = [max(MIN_LEAD_S if k == 0 else 0.0, min(g, round(g * share, 1)))
                    for k, g in enumerate(gaps)]
        new_tail = max(MIN_TAIL_S, min(tail, round(tail * share, 1)))
        moved, at = [], 0.0
        for (_s, e, d), g in zip(items, new_gaps, strict=True):
            moved.append((at + g, e, d))
            at += g + d
        if sum(new_gaps) < sum(gaps) or new_tail < tail:
            yield (f"main phase {spec.time_limit_s:g} s -> {at + new_tail:g} s",
                   with_schedule(spec, moved, new_tail))


def smaller_workload(spec: TestSpec) -> Iterator[tuple[str, TestSpec]]:
    """Yields the spec with a smaller workload: no backlog, then half of it; one publisher,
    then one fewer; a consumer fewer; half the rate."""
    w = spec.workload
    changes: list[tuple[str, dict[str, Any]]] = []
    for backlog in dict.fromkeys((0, w.backlog // 2 if w.backlog >= 200 else 0)):
        if backlog < w.backlog:
            changes.append((f"backlog {w.backlog} -> {backlog}", {"backlog": backlog}))
    for publishers in dict.fromkeys((1, w.publishers - 1)):
        if 1 <= publishers < w.publishers:
            changes.append((f"publishers {w.publishers} -> {publishers}",
                            {"publishers": publishers}))
    if w.consumers > 0:
        fewer: dict[str, Any] = {"consumers": w.consumers - 1}
        if w.consumers == 1:
            fewer.update(consume_rate=None, pause_consumers_in_faults=False)
        changes.append((f"consumers {w.consumers} -> {w.consumers - 1}", fewer))
    if w.rate / 2 >= MIN_RATE:
        changes.append((f"rate {w.rate:g}/s -> {w.rate / 2:g}/s", {"rate": w.rate / 2}))
    for what, change in changes:
        yield what, dataclasses.replace(spec, workload=dataclasses.replace(w, **change))


def fewer_staying_clients(spec: TestSpec) -> Iterator[tuple[str, TestSpec]]:
    """Yields the spec with fewer clients that stay through faults (`--stay`): none (every
    client a Jepsen process, retired at its first unknown outcome), then, from both, only the
    publishers or only the consumers. A finding that needs them keeps its mode in the minimal
    scenario file; one that does not drops it."""
    stay = spec.workload.stay
    fewer = {"both": ("none", "publishers", "consumers"), "publishers": ("none",),
             "consumers": ("none",)}.get(stay, ())
    for mode in fewer:
        yield (f"clients that stay: {stay} -> {mode}",
               dataclasses.replace(spec, workload=dataclasses.replace(spec.workload, stay=mode)))


REDUCTIONS: tuple[tuple[str, Reduction], ...] = (
    ("fewer faults", fewer_faults), ("shorter faults", shorter_faults),
    ("shorter main phase", shorter_main_phase), ("smaller workload", smaller_workload),
    ("fewer staying clients", fewer_staying_clients))


# -- the search -----------------------------------------------------------------------------------

STUCK_PUBLISH = "stuck publish"
STUCK_CONSUMER = "stuck consumer"


def finding_classes(results: Any) -> set[str]:
    """Takes results. Returns the classes a replay must show again to be the same finding: the
    anomaly classes of the incidents (harness.incidents.anomaly_classes), and STUCK_PUBLISH or
    STUCK_CONSUMER when the liveness section's settlement found a channel or a consumer stuck
    after a heal."""
    if not isinstance(results, dict):
        return set()
    out = anomaly_classes(results)
    settlement = (results.get("liveness") or {}).get("settlement") or {}
    if settlement.get("stuck_channels"):
        out.add(STUCK_PUBLISH)
    if settlement.get("stuck_consumers"):
        out.add(STUCK_CONSUMER)
    return out


@dataclass
class Trial:
    """One candidate and its replays: what reduction made it, its spec, each replay's record,
    and whether it was kept."""

    reduction: str
    what: str
    spec: TestSpec
    runs: list[dict[str, Any]] = field(default_factory=list)
    kept: bool = False

    @property
    def fails(self) -> int:
        """Returns how many of its replays failed."""
        return sum(1 for r in self.runs if r["fails"])

    def rate(self) -> str:
        """Returns its reproduction rate, "2 of 3"."""
        return f"{self.fails} of {len(self.runs)}"

    def to_dict(self) -> dict[str, Any]:
        """Returns the trial as shrink.json records it."""
        return {"reduction": self.reduction, "what": self.what, "kept": self.kept,
                "rate": self.rate(), "fails": self.fails, "replays": len(self.runs),
                "time_limit_s": self.spec.time_limit_s,
                "schedule": [list(i) for i in self.spec.nemesis.schedule],
                "workload": dataclasses.asdict(self.spec.workload), "runs": self.runs}


class Shrinker:
    """Takes a finding's run directory, the rule and the store root (module docstring)."""

    def __init__(self, run_dir: Path, rule: Rule, store_root: Path) -> None:
        self.run_dir = Path(run_dir)
        self.original, self.results = finding_spec(self.run_dir)
        self.classes = finding_classes(self.results)
        self.rule = rule
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        self.out_dir = store_root / "shrink" / stamp
        self.trials: list[Trial] = []
        self.minimal: Trial | None = None
        self.status = "shrinking"
        self.interrupted = False
        self.tried: set[str] = set()  # every spec tried, as JSON

    def fails(self, results: Any) -> bool:
        """Takes a replay's results. Returns whether it fails as the finding did (module
        docstring)."""
        if not isinstance(results, dict) or results.get("valid") is not False:
            return False
        return self.rule.any_anomaly or bool(finding_classes(results) & self.classes)

    def spent(self) -> int:
        """Returns how many replays the search has made."""
        return sum(len(t.runs) for t in self.trials)

    def replay(self, trial: Trial, run_spec: RunSpec) -> None:
        """Replays a trial's spec once and records it (a crash is a replay that did not fail;
        Ctrl-C stops the shrinker after it)."""
        try:
            code, outcome = run_spec(trial.spec)
        except KeyboardInterrupt:
            self.interrupted = True
            return
        except Exception as err:  # a broken replay must not end the search
            log.exception("replay failed")
            code, outcome = 2, Crashed(f"{type(err).__name__}: {err}")
        error = getattr(outcome, "error", None)
        self.interrupted |= bool(getattr(outcome, "interrupted", False))
        results = getattr(outcome, "results", None)
        trial.runs.append({"run_dir": str(getattr(outcome, "run_dir", "")), "exit_code": code,
                           "verdict": verdict_word(results), "fails": self.fails(results),
                           "anomalies": sorted(anomaly_classes(results or {})),
                           "error": error})

    def trial(self, reduction: str, what: str, spec: TestSpec, run_spec: RunSpec) -> Trial:
        """Replays a candidate until it reaches the rule's rate, can no longer reach it, or the
        budget or an interruption stops it. Returns the trial, recorded."""
        t = Trial(reduction, what, spec)
        self.trials.append(t)
        need = self.rule.min_fails
        while len(t.runs) < self.rule.replays and not self.interrupted:
            if self.spent() >= self.rule.max_runs:
                break
            self.replay(t, run_spec)
            if t.fails >= need or t.fails + self.rule.replays - len(t.runs) < need:
                break
        t.kept = t.fails >= need
        return t

    def sweep(self, current: Trial, run_spec: RunSpec, say: Callable[[str], None]
              ) -> Trial | None:
        """Takes the smallest test so far. Applies each reduction in turn for as long as one of
        its candidates still fails at the rate. Returns the smallest test the sweep reached,
        None when it kept nothing (or the budget or an interruption stopped it first)."""
        reached = None
        for reduction, reduce in REDUCTIONS:
            while (kept := self.first_kept(reduction, reduce(current.spec), run_spec,
                                           say)) is not None:
                current = reached = kept
        return reached

    def first_kept(self, reduction: str, candidates: Iterator[tuple[str, TestSpec]],
                   run_spec: RunSpec, say: Callable[[str], None]) -> Trial | None:
        """Takes a reduction's name and its candidates. Tries them in order (a spec tried
        before is not tried again). Returns the first that fails at the rate, else None."""
        for what, spec in candidates:
            key = json.dumps(spec.to_dict(), sort_keys=True, default=str)
            if key in self.tried:
                continue
            if self.interrupted or self.spent() + self.rule.replays > self.rule.max_runs:
                return None
            self.tried.add(key)
            t = self.trial(reduction, what, spec, run_spec)
            say(f"  {reduction}: {what}: fails {t.rate()} -> {'kept' if t.kept else 'dropped'}")
            if t.kept:
                return t
        return None

    def execute(self, run_spec: RunSpec, say: Callable[[str], None]) -> int:
        """Takes the function that runs one spec and the one that prints a line. Replays the
        finding, shrinks it, confirms the minimal test and writes the record. Returns 1 when a
        minimal test fails at the rate, 2 when the finding does not reproduce (or nothing
        could be replayed)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        write_scenario(self.original, self.out_dir / ORIGINAL_TOML,
                       f"The finding {self.run_dir}, as it was played.")
        say(f"shrink {self.run_dir}: anomalies {', '.join(sorted(self.classes)) or '-'}; "
            f"replaying it up to {self.rule.replays} times")
        current = self.trial("original", "the finding as played", self.original, run_spec)
        if not current.kept:
            self.status = (f"the finding does not reproduce at the rate: it failed "
                           f"{current.rate()}, needs {self.rule.min_fails} of "
                           f"{self.rule.replays}")
            self.write()
            return 2
        while (found := self.sweep(current, run_spec, say)) is not None:
            current = found
        while len(current.runs) < self.rule.confirm and not self.interrupted:
            self.replay(current, run_spec)
        self.minimal = current
        self.status = ("interrupted: the smallest test so far" if self.interrupted
                       else f"minimal: fails {current.rate()}")
        self.write()
        return 1 if current.fails >= self.rule.min_fails else 2

    def to_dict(self) -> dict[str, Any]:
        """Returns the shrinker's record (shrink.json)."""
        m = self.minimal
        return {"finding": str(self.run_dir), "anomalies": sorted(self.classes),
                "rule": dataclasses.asdict(self.rule), "status": self.status,
                "replays": self.spent(), "original": ORIGINAL_TOML,
                "minimal": MINIMAL_TOML if m is not None else None,
                "minimal_rate": m.rate() if m is not None else None,
                "trials": [t.to_dict() for t in self.trials]}

    def summary(self) -> dict[str, Any]:
        """Returns what the shrink came to, for a record that links it (explore.json
        `shrinks`): its directory, the finding, its status, the minimal scenario file's path
        and rate (None without one) and the replays made."""
        m = self.minimal
        return {"dir": str(self.out_dir), "finding": str(self.run_dir), "status": self.status,
                "minimal": str(self.out_dir / MINIMAL_TOML) if m is not None else None,
                "rate": m.rate() if m is not None else None, "replays": self.spent()}

    def write(self) -> Path:
        """Writes minimal.toml (when there is one) and shrink.json, then the page. Returns the
        page's path."""
        m = self.minimal
        if m is not None:
            write_scenario(m.spec, self.out_dir / MINIMAL_TOML,
                           f"Shrunk from the finding {self.run_dir}: fails {m.rate()} replays "
                           f"({', '.join(sorted(self.classes))}).\nRun it: python -m harness run "
                           f"--scenario-file {MINIMAL_TOML}")
        store.write_json(self.out_dir / SHRINK_JSON, self.to_dict())
        return write_page(self.out_dir)


_SETTINGS: tuple[tuple[str, Callable[[TestSpec], str]], ...] = (
    ("main phase", lambda s: f"{s.time_limit_s:g} s"),
    ("backlog", lambda s: str(s.workload.backlog)),
    ("publishers", lambda s: f"{s.workload.publishers} at {s.workload.rate:g}/s"),
    ("consumers", lambda s: str(s.workload.consumers)),
    ("queue", lambda s: s.queue.type),
    ("clients that stay", lambda s: s.workload.stay),
    ("seed", lambda s: str(s.seed)),
)


def shape_of(spec: TestSpec) -> Shape:
    """Takes a spec. Returns what the shrink page compares of it, as plain data."""
    return Shape(tuple((float(a), str(e), float(d)) for a, e, d in spec.nemesis.schedule),
                 tuple((name, get(spec)) for name, get in _SETTINGS))


def page_shapes(shrink_dir: Path) -> tuple[Shape | None, Shape | None]:
    """Takes a shrink directory. Returns the shapes of its original.toml and minimal.toml, None
    for one absent or unreadable."""
    def read(name: str) -> Shape | None:
        try:
            path = shrink_dir / name
            return shape_of(read_scenario(path)) if path.is_file() else None
        except ScenarioFileError:
            return None
    return read(ORIGINAL_TOML), read(MINIMAL_TOML)


def write_page(shrink_dir: Path) -> Path:
    """Takes a shrink directory. Draws its shrink.html again from its files. Returns the path."""
    return shrink_page.write_page(shrink_dir, *page_shapes(shrink_dir))
