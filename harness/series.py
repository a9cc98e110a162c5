"""A series of runs: several scenarios, each repeated, round by round, with a table kept as it goes.

`Series` hands out the runs in rounds (every scenario once, then again), so a
series cut short still covers every scenario about equally, and run i of
every scenario uses the seed `base_seed + i`: a scenario and its safe twin in
one series play the same seeded fault schedule. After each run it rewrites
matrix.json and matrix.md in `store/matrix/<time>/` (harness.matrix), so the
raw rows survive an interrupted series and tables can be rebuilt from them.
`extra` holds further top-level fields for matrix.json (the nightly's retries,
skipped runs and budget). Given the settings a series varies (`vary`, the keys
of `matrix --vary`; harness.vary), each row says its run's values of them.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clusters.releases import DEFAULT_LINE
from harness import matrix, vary
from harness.matrix import Expectation
from harness.spec import SpecError, TestSpec, spec_from_dict
from history.files import write_atomic
from workloads.queue_spec import settings_that_matter

SEED_RANGE = 2**31


class Series:
    """Takes (name, spec, expectation or None for valid) entries, a repeat count, the store root,
    an optional base seed (drawn when None) and the keys of the settings its entries vary."""

    def __init__(self, entries: Sequence[tuple[str, TestSpec, Expectation | None]], repeat: int,
                 store_root: Path, base_seed: int | None = None,
                 varied: Sequence[str] = ()) -> None:
        if repeat < 1:
            raise ValueError(f"repeat must be >= 1, got {repeat}")
        self.entries = list(entries)
        self.repeat = repeat
        self.base_seed = (random.SystemRandom().randrange(SEED_RANGE) if base_seed is None
                          else base_seed)
        self.expectations = {n: e or Expectation() for n, _s, e in self.entries}
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        self.out_dir = store_root / "matrix" / stamp
        self.rows: list[matrix.Row] = []
        self.round = 0
        self.varied = tuple(varied)
        self.extra: dict[str, Any] = {"vary": list(self.varied)} if self.varied else {}

    def runs(self) -> Iterator[tuple[str, TestSpec]]:
        """Yields (name, spec with its seed) for every run, round by round."""
        for k in range(self.repeat):
            self.round = k
            seed = (self.base_seed + k) % SEED_RANGE
            for name, spec, _e in self.entries:
                yield name, dataclasses.replace(spec, seed=seed)

    def record(self, name: str, spec: TestSpec, code: int, wall_s: float, outcome: Any,
               infrastructure: str | None = None, tries: int = 1) -> matrix.Row:
        """Takes a finished run (its exit code, wall time and RunOutcome), why it is an
        infrastructure error (None when it is not) and which try of it this was. Adds its row,
        rewrites the series' table. Returns the row."""
        row = self.make_row(name, spec, code, wall_s, outcome, infrastructure, tries)
        self.rows.append(row)
        self.write()
        return row

    def make_row(self, name: str, spec: TestSpec, code: int, wall_s: float, outcome: Any,
                 infrastructure: str | None = None, tries: int = 1) -> matrix.Row:
        """Takes what `record` takes. Returns the run's row without recording it."""
        variant = vary.row_variant(spec, self.varied)
        return matrix.make_row(
            name, matrix.expectation_of(self.expectations, name, variant), code, wall_s,
            outcome.run_dir, outcome.results, outcome.error, seed=spec.seed,
            infrastructure=infrastructure, tries=tries, rabbitmq=spec.broker.rabbitmq,
            variant=variant)

    def write(self, code: int | None = None) -> None:
        """Rewrites matrix.json (with `extra`) and matrix.md; `code` overrides the exit code
        recorded there."""
        matrix.write(self.rows, self.summaries(), self.out_dir, self.extra, code)

    def summaries(self) -> list[matrix.Summary]:
        """Returns each scenario's summary so far."""
        return matrix.summarize(self.rows, self.expectations)

    def exit_code(self) -> int:
        """Returns the series' exit code (2 when it was cut short)."""
        if len(self.rows) < self.repeat * len(self.entries):
            return 2
        return matrix.exit_code(self.rows, self.summaries())


# Spec fields that differ between runs of one scenario without making it another scenario.
# What a run of a scenario may differ in and still be a run of it: its seed and store, and the
# scenario's description (prose, reworded as the lines change, never a setting).
RUN_FIELDS = ("seed", "store", "description")


def same_scenario(stored: dict[str, Any], current: TestSpec) -> bool:
    """Takes a run's stored spec (test.json "spec") and a scenario's current spec. Returns whether
    the run is of the scenario as it is defined now (seed, store and Spark master aside). The
    stored spec is read as a spec (fields added since take their defaults, retired ones are
    ignored); one that no longer reads is not the same scenario."""
    def norm(spec: TestSpec) -> dict[str, Any]:
        # Compared as run: fault durations resolved from net_ticktime, and a queue's settings
        # without those its kind never reads (a quorum queue has no ha-sync-mode).
        resolved = spec.resolved()
        d = {k: v for k, v in resolved.to_dict().items() if k not in RUN_FIELDS}
        d["check"] = {k: v for k, v in d["check"].items() if k != "spark_master"}
        d["queue"] = settings_that_matter(resolved.queue)
        if not resolved.nemesis.faults:
            d["nemesis"]["duration_s"] = None  # no fault to last: a control run
        return json.loads(json.dumps(d))
    try:
        then = spec_from_dict(stored)
    except (SpecError, TypeError, ValueError):
        return False
    return norm(then) == norm(current)


# An archive (measurements/*.jsonl, kept in the repository) holds one line per run: its matrix
# row, its stored spec and its results without the per-message stories, so a detection table can
# be rebuilt in a later session from a fresh checkout, where the store of the runs is gone.
ARCHIVE_DROP = ("details", "explanations", "examples")
ARCHIVE_LIST_CAP = 20


def _compact(value: Any) -> Any:
    """Returns results without the stories and with every list cut to ARCHIVE_LIST_CAP items
    (every count stays)."""
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items() if k not in ARCHIVE_DROP}
    if isinstance(value, list):
        return [_compact(v) for v in value[:ARCHIVE_LIST_CAP]]
    return value


def _stored(run_dir: Path, name: str) -> dict[str, Any] | None:
    path = run_dir / name
    return json.loads(path.read_text()) if path.exists() else None


# Where archived runs lived: an archived row's run directory is relative to the store.
STORE = Path(__file__).resolve().parent.parent / "store"


def _relative(run_dir: str, store: Path) -> str:
    """Returns a run directory relative to the store it lives in (as archived), else as given."""
    path = Path(run_dir)
    try:
        return str(path.resolve().relative_to(store.resolve()))
    except ValueError:
        return run_dir


def archive(matrix_files: Sequence[Path], out: Path,
            expectations: dict[str, Expectation] | None = None,
            store: Path = STORE) -> tuple[int, int]:
    """Takes matrix.json files (or archives), an archive path (.jsonl), each scenario's
    prediction and the store. Adds a line for each run they list that was not interrupted: its
    row (its run directory relative to the store), its spec (test.json) and its compacted
    results. A run the archive holds already (by run directory name) keeps its line, but takes
    its run directory's results when they changed since (judged again by `harness check
    RUN_DIR`). Given the predictions, every line's row is judged again from its results, so the
    archive says what each run shows as it stands now. Returns (lines added, lines changed)."""
    held: dict[str, dict[str, Any]] = {}
    if out.exists():
        held = {Path(r.run_dir).name: rec for r, rec in _archived_lines(out)}
    added = replaced = 0
    new: set[str] = set()
    for key, row, spec, _run_dir, results in _each_run_once(matrix_files):
        compact = None if results is None else json.loads(json.dumps(_compact(results)))
        if key not in held:
            held[key] = {"row": dataclasses.asdict(row), "spec": spec, "results": compact}
            added += 1
            new.add(key)
        elif compact is not None and held[key].get("results") != compact:
            held[key] = {**held[key], "results": compact}
            replaced += 1
    for key, rec in held.items():
        before = _said(rec["row"])
        rec["row"] = _rejudged(rec, expectations, store)
        if key not in new and _said(rec["row"]) != before:
            replaced += 1
    if added or replaced:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, "".join(json.dumps(rec, sort_keys=True) + "\n"
                                  for rec in held.values()))
    return added, replaced


def _said(row: dict[str, Any]) -> str:
    """Takes an archived row. Returns what it says, as text to compare: a field it gains empty
    (a Row field added since it was archived) says nothing new."""
    return json.dumps({k: v for k, v in row.items() if v is not None}, sort_keys=True)


def _rejudged(rec: dict[str, Any], expectations: dict[str, Expectation] | None,
              store: Path) -> dict[str, Any]:
    """Takes an archive line, the predictions (None: keep the row's judgement) and the store.
    Returns its row, judged again from its results and with its run directory relative to the
    store."""
    row = _stored_variant(_row_of(rec["row"]), rec.get("spec"))
    results = rec.get("results")
    if expectations is not None and results is not None and row.judgement != matrix.ERROR:
        again = matrix.make_row(row.scenario,
                                matrix.expectation_of(expectations, row.scenario, row.variant),
                                row.exit_code, row.wall_s, row.run_dir, results, seed=row.seed,
                                infrastructure=row.infrastructure, tries=row.tries,
                                rabbitmq=row.rabbitmq, variant=row.variant)
        row = dataclasses.replace(  # what the run said when it ended (its error) stays
            again, problems=tuple(dict.fromkeys(again.problems + row.problems)))
    row = dataclasses.replace(row, run_dir=_relative(row.run_dir, store))
    return json.loads(json.dumps(dataclasses.asdict(row)))


def _row_of(r: dict[str, Any]) -> matrix.Row:
    """Takes a row as stored (JSON). Returns the Row."""
    return matrix.Row(**{**r, "problems": tuple(r.get("problems", ()))})


def _stored_variant(row: matrix.Row, spec: dict[str, Any] | None) -> matrix.Row:
    """Takes a stored row and its stored spec. Returns the row with its variant naming the
    clients that stayed and a metadata store other than its line's default (rows made before
    their variant said so did not), so that such runs stay apart from their scenario's."""
    stay = ((spec or {}).get("workload") or {}).get("stay")
    store = ((spec or {}).get("broker") or {}).get("metadata_store")
    said = vary.with_stay(row.variant, stay)
    return dataclasses.replace(row, variant=vary.with_store(said, store, row.rabbitmq))


def _archived_lines(path: Path) -> list[tuple[matrix.Row, dict[str, Any]]]:
    """Takes an archive (.jsonl). Returns (row, the line's record) for each run in it."""
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            row = _row_of(rec["row"])
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}:{n}: not an archived run ({e})") from e
        out.append((row, rec))
    return out


def read_archive(path: Path) -> list[tuple[matrix.Row, dict[str, Any] | None,
                                           dict[str, Any] | None]]:
    """Takes an archive (.jsonl). Returns (row, stored spec, results) for each run in it."""
    return [(row, rec.get("spec"), rec.get("results")) for row, rec in _archived_lines(path)]


def _runs(path: Path) -> Iterator[tuple[matrix.Row, dict[str, Any] | None, Path | None,
                                        dict[str, Any] | None]]:
    """Yields (row, stored spec, run directory if it still exists, stored results) for every run
    a matrix.json or an archive lists."""
    if path.suffix == ".jsonl":
        for row, spec, results in read_archive(path):
            run_dir = STORE / row.run_dir  # an absolute run_dir (older lines) stays as it is
            yield (_stored_variant(row, spec), spec, run_dir if run_dir.is_dir() else None,
                   results)
        return
    for row in matrix.read_rows(path):
        run_dir = Path(row.run_dir)
        test = _stored(run_dir, "test.json")
        if test is not None and test.get("interrupted"):
            continue  # an interrupted run (a series cut short) measured nothing
        spec = None if test is None else test.get("spec") or {}
        yield (_stored_variant(row, spec), spec, run_dir if run_dir.is_dir() else None,
               _stored(run_dir, "results.json"))


def _each_run_once(matrix_files: Sequence[Path]) -> Iterator[
        tuple[str, matrix.Row, dict[str, Any] | None, Path | None, dict[str, Any] | None]]:
    """Yields (run directory name, row, stored spec, run directory if it still exists, stored
    results) for every run the matrix.json files or archives list, once each (the first listing
    wins)."""
    seen: set[str] = set()
    for path in matrix_files:
        for row, spec, run_dir, results in _runs(path):
            key = Path(row.run_dir).name
            if key not in seen:
                seen.add(key)
                yield key, row, spec, run_dir, results


def listed(matrix_files: Sequence[Path]) -> list[dict[str, Any]]:
    """Takes matrix.json files or archives. Returns every run they list, once, as an archive
    line holds it: {"row": its row as JSON, "spec": its stored spec, "results": its stored
    results (None when gone)}, for pages that count runs without judging them again (a finding
    report's replay rate, reports.finding_replays)."""
    return [{"row": json.loads(json.dumps(dataclasses.asdict(row))), "spec": spec,
             "results": results}
            for _key, row, spec, _run_dir, results in _each_run_once(matrix_files)]


def on_release(spec: TestSpec, broker: dict[str, Any]) -> TestSpec:
    """Takes a scenario's spec and a stored spec's broker section. Returns the spec on the
    stored release line and metadata store (3.10 and Mnesia when it names none)."""
    return dataclasses.replace(spec, broker=dataclasses.replace(
        spec.broker, rabbitmq=broker.get("rabbitmq", DEFAULT_LINE),
        metadata_store=broker.get("metadata_store")))


# A scenario's spec that a stored row's variant cannot be applied to (a setting since removed).
_UNREADABLE = TestSpec(name="unreadable")


def _as_run(current: TestSpec, stored: dict[str, Any], variant: str) -> TestSpec:
    """Takes a scenario's current spec, a run's stored spec and its Row's variant. Returns the
    current spec as that run would play it now: on its stored release line and metadata store
    and with its variant's settings (its clients staying, a queue kind varied: dimensions of a
    series, not of a scenario); _UNREADABLE when the variant names a setting that no longer
    exists."""
    current = on_release(current, stored.get("broker") or {})
    try:
        return vary.as_varied(current, variant)
    except SpecError:
        return _UNREADABLE


def rebuild(matrix_files: Sequence[Path], expectations: dict[str, Expectation],
            recheck: Any = None, specs: dict[str, TestSpec] | None = None,
            dropped: dict[str, int] | None = None) -> list[matrix.Row]:
    """Takes matrix.json files or archives (of one or several series), each scenario's
    prediction, an optional function run_dir -> results that checks a run again, optionally each
    scenario's current spec, and a dict to count in.

    Returns the rows of every run they list (a run listed twice counts once), judged afresh from
    each run's results (re-checked when `recheck` is given and its history is still there, else
    its stored results), so a table can be rebuilt across series and sessions. A run with no
    results keeps its recorded row. Given `specs`, a run made under an older definition of its
    scenario (its stored spec differs) is left out and counted in `dropped`, so a table speaks
    only of the scenarios as they are now.
    """
    rows = []
    for _key, old, stored, run_dir, results in _each_run_once(matrix_files):
        current = (specs or {}).get(old.scenario)
        if current is not None and stored is not None:
            current = _as_run(current, stored, old.variant)
        if current is not None and stored is not None and (
                current is _UNREADABLE or not same_scenario(stored, current)):
            if dropped is not None:
                dropped[old.scenario] = dropped.get(old.scenario, 0) + 1
            continue
        if recheck is not None and run_dir is not None and (run_dir / "history.jsonl").exists():
            results = recheck(run_dir)
        if results is None:
            rows.append(old)
            continue
        rows.append(matrix.make_row(
            old.scenario, matrix.expectation_of(expectations, old.scenario, old.variant),
            old.exit_code,
            old.wall_s, old.run_dir, results, seed=old.seed,
            infrastructure=old.infrastructure, tries=old.tries, rabbitmq=old.rabbitmq,
            variant=old.variant))
    return rows
