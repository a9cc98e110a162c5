"""The command line: `python -m harness run|matrix|nightly|explore|shrink|table|archive|check|report|finding|clean|scenarios`.

Only this module prints. Bad options exit 2 with a clear message before
anything starts; a run exits 0 valid, 1 invalid, 2 unknown or error. A run
prints its seed when it starts and when it ends, shows its progress live on
stderr (harness.progress) and rewrites the store's index afterwards;
`run --replay RUN_DIR` repeats a stored run (its spec and seed; options
given override them); `run --scenario-file F` runs a scenario file
(harness.scenario_file), such as the scenario.toml every run writes. `check`
judges a stored run (or a bare history) again; it is the one command that
checks. `nightly` is the scenario matrix within a time budget, with JUnit XML
and an HTML page for CI (harness.nightly). `matrix --scenario-file F --vary
queue.type=quorum,mirrored` holds one test's faults fixed and varies settings
(harness.vary). `explore` and `shrink` are harness.campaign_cli's, `finding` (a stored
finding's Markdown report) harness.finding_cli's. Every
option that sets the spec or that several commands share is a row of
harness.options's table, which makes the parsers and the spec; adding one is
one row there.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from checkers.verdict import is_weak
from clusters.spark_master import check_spark_master
from harness import campaign_cli, finding_cli, options
from harness.errors import HarnessError
from harness.scenario_file import read_scenario
from harness.spec import SpecError, TestSpec, spec_from_dict

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
_console: logging.StreamHandler[Any] | None = None  # the console's log handler, once set up


class UsageError(HarnessError):
    """A command-line mistake: exit 2 with the message."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse exits 2 itself; keep our wording
        raise UsageError(message)


def check_overrides(a: argparse.Namespace) -> dict[str, Any]:
    """Takes parsed `check` options. Returns the CheckOptions fields they set (None: not set),
    from the table's options of `check` that set a field of the spec's check."""
    return {o.field.removeprefix("check."): o.given(a) for o in options.taken_by("check")
            if o.field is not None and o.field.startswith("check.")}


def replay_spec(run_dir: Path) -> TestSpec:
    """Takes a stored run's directory. Returns its spec with its seed, from test.json.

    Raises UsageError when there is no test.json or its spec is malformed.
    """
    test_json = run_dir / "test.json"
    if not test_json.is_file():
        raise UsageError(f"cannot replay {run_dir}: it has no test.json (not a run directory)")
    try:
        info = json.loads(test_json.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"cannot replay {run_dir}: test.json is not readable JSON: {e}") from e
    data = info.get("spec") if isinstance(info, dict) else None
    if not isinstance(data, dict):
        raise UsageError(f"cannot replay {run_dir}: test.json has no spec")
    try:
        spec = spec_from_dict(data)
        seed = spec.seed if spec.seed is not None else info.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise SpecError(f"no integer seed (found {seed!r})")
        spec = dataclasses.replace(spec, seed=seed)
        spec.validate()
    except (SpecError, TypeError, ValueError, AttributeError) as e:
        raise UsageError(f"cannot replay {run_dir}: malformed spec in test.json: {e}") from e
    return spec


def spec_from_args(a: argparse.Namespace) -> TestSpec:
    """Takes parsed options. Returns the validated TestSpec with its seed. Raises SpecError.

    The base is the replayed run's spec (`--replay`), else the scenario file's, else the
    scenario's, else the default.
    """
    spec = unchecked_spec(a)
    spec.validate()
    check_spark_master(spec.check.spark_master)  # a master that does not answer: exit 2 now
    return spec.with_seed()


def _base_spec(a: argparse.Namespace) -> TestSpec:
    """Returns what the options start from: the replayed run's spec, else the scenario file's,
    else the scenario's, else the default."""
    from harness.scenarios import scenario

    replay = getattr(a, "replay", None)
    scenario_file = getattr(a, "scenario_file", None)
    return (replay_spec(replay) if replay is not None
            else read_scenario(scenario_file) if scenario_file is not None
            else scenario(a.scenario) if a.scenario else TestSpec())


def unchecked_spec(a: argparse.Namespace) -> TestSpec:
    """Takes parsed options. Returns the TestSpec they say (`spec_from_args`), its queue kind's
    check rules and fault durations applied, not yet validated. Raises SpecError."""
    spec = options.apply_options(_base_spec(a), a)
    if getattr(a, "consume_rate", None) is None and spec.workload.consumers == 0:
        # A publish-only main phase: there is no consume rate to keep.
        spec = options.set_field(spec, "workload.consume_rate", None)
    return spec.for_queue().resolved()


def add_check_options(p: argparse.ArgumentParser) -> None:
    """Adds the options of `check` to a parser: what to check, where, and how to judge it."""
    p.add_argument("path", type=Path, metavar="RUN_DIR|HISTORY",
                   help="a run directory (its test.json gives the check's options; its "
                        "results.json is rewritten), or a history.jsonl, or a Parquet history "
                        "made by --parquet")
    p.add_argument("--out", type=Path,
                   help="write results.json here instead (a bare history: only if given)")
    options.add_options(p, "check")


def build_parser() -> argparse.ArgumentParser:
    """Returns the parser of every subcommand, each command's options from the table
    (harness.options) and its own."""
    p = _Parser(prog="python -m harness", description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging on the console")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    r = sub.add_parser("run", help="run a test against a fresh local cluster")
    options.add_options(r, "run")
    r.add_argument("--replay", type=Path, metavar="RUN_DIR",
                   help="repeat a stored run: its spec and seed (so the same seeded fault "
                        "schedule); other options override them")
    c = sub.add_parser("check", help="check a stored run again and rewrite its results.json "
                                     "(or check a bare history)")
    add_check_options(c)
    rp = sub.add_parser("report", help="draw the plots and report.html of a stored run")
    rp.add_argument("run_dir", type=Path)
    m = sub.add_parser("matrix", help="run several scenarios in turn and tabulate their verdicts")
    m.add_argument("--with-twins", action="store_true",
                   help="add each scenario's safe twin (run with the same seeds)")
    options.add_options(m, "matrix")
    n = sub.add_parser("nightly", help="the scenario matrix within a time budget, with JUnit "
                                       "XML and an HTML page (nightly CI)")
    n.add_argument("--budget", type=float, default=60.0,
                   help="minutes; no run starts that is expected to end past it (default 60)")
    n.add_argument("--no-twins", action="store_true",
                   help="do not add each scenario's safe twin (added by default)")
    options.add_options(n, "nightly")
    _add_table_parsers(sub)
    campaign_cli.add_parsers(sub, options.add_options, options.csv)
    finding_cli.add_parser(sub)
    sub.add_parser("clean", help="remove every namespace, link and broker process a run left")
    sc = sub.add_parser("scenarios", help="list the named scenarios")
    sc.add_argument("--write", type=Path, metavar="DIR",
                    help="write each as a scenario file, DIR/<name>.toml, instead")
    return p


def _add_table_parsers(sub: Any) -> None:
    """Adds `table` and `archive`: tables rebuilt from stored series, and their archive."""
    t = sub.add_parser("table", help="rebuild the detection table of stored series (matrix.json "
                                     "files or archives, measurements/*.jsonl), judging each "
                                     "run from its results again")
    t.add_argument("matrix_files", type=Path, nargs="+", metavar="MATRIX_OR_ARCHIVE")
    t.add_argument("--recheck", action="store_true", help="check every run's history again first")
    options.add_options(t, "table")
    t.add_argument("--out", type=Path, help="where to write matrix.json/md (default: beside)")
    t.add_argument("--pairs", action="store_true",
                   help="also print each unsafe scenario beside its safe twin (README's table)")
    t.add_argument("--variant", help="only the runs of this variant, as rows name it (e.g. "
                                     "workload.stay=both: the clients that stay)")
    ar = sub.add_parser("archive", help="append the runs of stored series to an archive (one "
                                        "line per run: row, spec, results without the stories) "
                                        "that `table` reads when the store is gone; a run judged "
                                        "again since (`check RUN_DIR`) has its results replaced")
    ar.add_argument("matrix_files", type=Path, nargs="+")
    ar.add_argument("--out", type=Path, required=True, help="the archive, e.g. "
                    "measurements/detection.jsonl")


def _setup_logging(verbose: bool) -> None:
    global _console
    root = logging.getLogger()
    root.setLevel(logging.DEBUG)
    console = logging.StreamHandler(sys.stderr)
    _console = console
    console.setLevel(logging.DEBUG if verbose else logging.INFO)
    console.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s",
                                           "%H:%M:%S"))
    if not verbose:
        # pika logs every refused connect and reset with a traceback; the workload logs one line
        # per retired process instead. The run's harness.log still gets pika's records.
        console.addFilter(lambda r: not r.name.startswith("pika"))
    root.addHandler(console)
    for noisy in ("pika", "py4j", "matplotlib", "paramiko", "urllib3", "docker"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def strength_exit(code: int, results: dict[str, Any] | None, required: bool) -> int:
    """Takes a run's exit code, its results and whether strength is required. Returns 2 for a
    weak valid run when it is, else the code (shared/DESIGN.md: a weak run exits 0 unless the
    user asked for strength)."""
    return 2 if required and code == 0 and is_weak(results) else code


def summary(results: dict[str, Any]) -> str:
    """Takes results. Returns the verdict and counts as a few lines for the terminal."""
    q = results.get("queue", {})
    o = results.get("ordering", {})
    why = q.get("dropped_by_design_reasons") or {}
    dropped = f" ({', '.join(f'{r} {n}' for r, n in why.items())})" if why else ""
    counts = [
        f"{k.removesuffix('_count')} {q[k]}{extra}" for k, extra in (
            ("attempt_count", ""), ("acknowledged_count", ""), ("ok_count", ""),
            ("lost_count", f" ({q.get('lost_unacked_count', 0)} unacked)"),
            ("unexpected_count", ""),
            ("duplicated_count", f" ({q.get('unflagged_duplicated_count', 0)} unflagged)"),
            ("unflagged_after_ack_count", ""), ("recovered_count", ""),
            ("delivered_failed_count", " (delivered after a nack)"),
            ("dropped_by_design_count", dropped),
        ) if k in q
    ]
    error = f"error: {q['error']}" if q.get("error") else ""
    found = results.get("strength")
    strength: dict[str, Any] = found if isinstance(found, dict) else {}
    weak = f" (valid but weak: {strength.get('reason')})" if is_weak(results) else ""
    lines = [
        f"valid: {results.get('valid')}{weak}",
        "queue: " + (", ".join(counts) or error) + f"  [{q.get('valid')}]",
    ]
    if "violation_count" in o:
        lines.append(f"ordering: violations {o['violation_count']}, flagged reorders "
                     f"{o.get('flagged_violation_count', 0)}, unconfirmed reorders "
                     f"{o.get('unconfirmed_reorder_count', 0)}, held reorders "
                     f"{o.get('held_reorder_count', 0)}, violations near a phase boundary "
                     f"{o.get('near_boundary_count', 0)}"
                     f"{', judged per priority' if o.get('by_priority') else ''}"
                     f"  [{o.get('valid')}]")
    elif o:
        lines.append(f"ordering: error: {o.get('error')}  [{o.get('valid')}]")
    overall = (results.get("perf") or {}).get("overall")
    if overall:
        lat = overall.get("latency_ms") or {}
        lines.append(f"perf: ok share {overall.get('ok_share')}, confirm latency p50 "
                     f"{lat.get('p50')} ms, p99 {lat.get('p99')} ms, "
                     f"{len(results['perf'].get('windows', []))} fault windows")
    live = results.get("liveness")
    if isinstance(live, dict) and live:
        said = live.get("summary") or (f"error: {live['error']}" if live.get("error") else "")
        note = " (counts only when false)" if live.get("valid") not in (True, False) else ""
        lines.append(f"liveness: {said}  [{live.get('valid')}{note}]")
    lines += _priority_line(results.get("priority"))
    if strength.get("summary"):
        lines.append(f"strength: {strength['summary']}"
                     + ("  [weak: not a pass]" if strength.get("weak") else ""))
    run = results.get("run", {})
    if run.get("problems"):
        lines.append("run: " + "; ".join(run["problems"]))
    lines += [f"run: {u['text']}" for u in run.get("unrecoverable_nodes") or []
              if isinstance(u, dict) and u.get("text")]
    return "\n".join(lines)


def _priority_line(section: Any) -> list[str]:
    """Takes results' priority section (None when the run published no priorities). Returns its
    summary line: why it does not apply, or what it judged, in a list (empty without it)."""
    if not isinstance(section, dict) or not section:
        return []
    if section.get("error") or section.get("applicable") is False:
        said = section.get("reason") or f"error: {section.get('error')}"
    else:
        skewed = (section.get("not_judged") or {}).get("within_skew")
        said = (f"judged {section.get('judged_count')}, violations "
                f"{section.get('violation_count')}, not judged "
                f"{section.get('not_judged_count')}"
                + (f" ({skewed} within the {section.get('skew_margin_ms')} ms skew margin)"
                   if skewed else ""))
    note = " (counts only when false)" if section.get("valid") is not False else ""
    return [f"priority: {said}  [{section.get('valid')}{note}]"]


def _require_root(specs: Sequence[TestSpec] = ()) -> None:
    if os.geteuid() != 0 and (not specs or any(s.backend.kind == "local" for s in specs)):
        raise UsageError("the local cluster needs root (network namespaces and iptables)")


def _refresh_index(store_root: Path) -> None:
    """Rewrites the store's index.html when reports.index exists; skips quietly when not."""
    try:
        from reports.index import write_index
    except ModuleNotFoundError as e:
        if e.name != "reports.index":
            log.warning("store index not rewritten: %s", e)
        return
    except ImportError as e:
        log.warning("store index not rewritten: %s", e)
        return
    try:
        write_index(store_root)
    except Exception:
        log.exception("rewriting the store index failed")


def _run_and_report(spec: TestSpec, replay_of: str | None = None,
                    progress: bool = True) -> tuple[int, Any]:
    """Runs a validated spec with live progress, draws its report, rewrites the store index
    and prints its seed and verdict. Returns (code, outcome)."""
    from harness.progress import RunProgress, showing
    from harness.runner import run_test
    from reports.report import render

    again = f" (replay of {replay_of})" if replay_of else ""
    print(f"run {spec.name}: seed {spec.seed}{again}", flush=True)
    watch = RunProgress(spec.time_limit_s)
    show = showing(watch, sys.stderr, _console) if progress else contextlib.nullcontext()
    with show:
        code, outcome = run_test(spec, _store_root(spec), observer=watch, replay_of=replay_of)
        if outcome.results is not None:
            watch.stage("report")
            try:
                render(outcome.run_dir)
            except Exception:
                log.exception("report failed")
    _refresh_index(_store_root(spec))
    if outcome.results is not None:
        print(summary(outcome.results))
    elif outcome.error:
        print(f"error: {outcome.error}", file=sys.stderr)
    print(f"seed: {spec.seed} (repeat it: python -m harness run --replay {outcome.run_dir})")
    print(f"run directory: {outcome.run_dir}", flush=True)
    return code, outcome


def _cmd_run(a: argparse.Namespace) -> int:
    replay_of = None
    if a.replay is not None:
        if a.repeat is not None or a.scenario:
            raise UsageError("--replay repeats one stored run with its own spec; it takes "
                             "neither --repeat nor --scenario")
        replay_of = str(a.replay.resolve())
    if a.scenario_file is not None and (a.scenario or a.replay is not None):
        raise UsageError("--scenario-file is the run's spec; it takes neither --scenario nor "
                         "--replay")
    spec = spec_from_args(a)
    for warning in spec.warnings():
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    if a.repeat is None:
        _require_root([spec])
        code, outcome = _run_and_report(spec, replay_of, progress=not a.no_progress)
        return strength_exit(code, outcome.results, a.require_strength)
    from harness.scenarios import SCENARIOS

    known = SCENARIOS.get(a.scenario) if a.scenario else None
    expect = known.expect if known else None
    return _series([(spec.name, spec, expect)], a)


def _store_root(spec: TestSpec) -> Path:
    return Path(spec.store) if os.path.isabs(spec.store) else PROJECT_ROOT / spec.store


def _matrix_names(a: argparse.Namespace, with_twins: bool) -> list[tuple[str | None, Any]]:
    """Takes the options of `matrix` or `nightly`. Returns (scenario name, expectation) for every
    scenario asked for (all by default), each followed by its safe twin if asked; a scenario
    file is one entry, (None, None): its own name, predicted valid."""
    from harness.scenarios import SCENARIOS

    if a.scenario:
        raise UsageError(f"{a.cmd} takes --scenarios a,b,... (not --scenario)")
    if getattr(a, "scenario_file", None) is not None:
        if a.scenarios or with_twins:
            raise UsageError("--scenario-file is the matrix's one test; it takes neither "
                             "--scenarios nor --with-twins")
        return [(None, None)]
    names = list(a.scenarios or _default_names(a))
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise UsageError(f"unknown scenarios: {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    if with_twins:
        names = list(dict.fromkeys(x for n in names for x in (n, SCENARIOS[n].twin) if x))
    return [(n, SCENARIOS[n].expect) for n in names]


def _default_names(a: argparse.Namespace) -> list[str]:
    """Takes the options of `matrix` or `nightly`. Returns the scenarios run when --scenarios
    names none: with --stay-variants the partition and leader-kill ones
    (scenarios.staying_candidates), else every one."""
    from harness.scenarios import SCENARIOS, staying_candidates

    return staying_candidates() if getattr(a, "stay_variants", None) else list(SCENARIOS)


def _stay_entries(a: argparse.Namespace, spec: TestSpec, variant: str, expect: Any
                  ) -> tuple[list[tuple[str, TestSpec, Any]], list[Any]]:
    """Takes the options, a validated spec of the matrix, the variant it is (harness.vary
    `label`) and its expectation. Returns (name, spec, expectation) for it under each client mode
    --stay-variants asks (only itself without the option) and, as matrix.NotApplicable, each mode
    it cannot take."""
    from harness import vary
    from harness.matrix import NotApplicable

    modes = getattr(a, "stay_variants", None)
    if not modes:
        return [(spec.name, spec, expect)], []
    made, refused = vary.stay_modes(spec.name, spec, modes)
    return ([(spec.name, s, expect) for s in made],
            [NotApplicable(spec.name, spec.broker.rabbitmq, why, vary.with_stay(variant, mode))
             for mode, why in refused])


def _matrix_entries(a: argparse.Namespace, with_twins: bool
                    ) -> tuple[list[tuple[str, TestSpec, Any]], list[Any]]:
    """Takes the options of `matrix` or `nightly`. Returns (name, validated spec, expectation)
    for every scenario asked for (`_matrix_names`), on every release line asked for
    (`--rabbitmq 3.10,4.0`), every variant of the settings `--vary` varies (harness.vary) and
    every client mode --stay-variants asks, and the variants that cannot run
    (matrix.NotApplicable, with the release's reason or the mode's)."""
    from harness import vary
    from harness.matrix import NotApplicable

    dims = vary.parse_vary(getattr(a, "vary", None) or ())
    lines = a.rabbitmq or (None,)
    entries, not_applicable = [], []
    for name, expect in _matrix_names(a, with_twins):  # every spec validated before any run
        for line in lines:  # a scenario's lines side by side, so a cut series still pairs them
            a.rabbitmq, a.scenario = (None if line is None else (line,)), name
            base = unchecked_spec(a)
            runnable, refused = vary.expand(base.name, base, dims)
            for spec, v in runnable:
                made, cannot = _stay_entries(a, spec.with_seed(), vary.label(v), expect)
                entries += made
                not_applicable += cannot
            modes = getattr(a, "stay_variants", None) or ("none",)
            not_applicable += [NotApplicable(base.name, vary.apply(base, v).broker.rabbitmq,
                                             why, vary.with_stay(vary.label(v), mode))
                               for v, why in refused for mode in modes]
    a.scenario, a.rabbitmq = None, (None if lines == (None,) else lines)
    if not entries:
        raise UsageError("no scenario asked for can run on the release(s) asked for: "
                         + "; ".join(f"{n.scenario} on {n.rabbitmq}" for n in not_applicable))
    check_spark_master(entries[0][1].check.spark_master)
    return entries, not_applicable


def _cmd_matrix(a: argparse.Namespace) -> int:
    entries, not_applicable = _matrix_entries(a, a.with_twins)
    return _series(entries, a, not_applicable)


def _cmd_nightly(a: argparse.Namespace) -> int:
    from harness import matrix
    from harness.nightly import INDEX_HTML, JUNIT_XML, Nightly

    if not a.budget > 0:
        raise UsageError(f"--budget must be > 0 minutes, got {a.budget:g}")
    from harness.nightly import OVERHEAD_S, last_nightly_runs, nights_needed, rotation
    from harness.scenarios import SCENARIOS

    entries, not_applicable = _matrix_entries(a, not a.no_twins)
    _require_root([s for _, s, _ in entries])
    root = _store_root(entries[0][1])
    entries = rotation(entries, {n: sc.twin for n, sc in SCENARIOS.items()},
                       last_nightly_runs(root))
    nights = nights_needed([s.time_limit_s + OVERHEAD_S for _, s, _ in entries], a.budget * 60)
    print("rotation: unsafe/safe pairs first, least recently run first; "
          + (f"every scenario runs within {nights} night(s) at {a.budget:g} min"
             if nights else f"a run alone needs more than {a.budget:g} min"), flush=True)
    nightly = Nightly(entries, a.budget * 60, root, base_seed=a.seed)
    nightly.series.extra["not_applicable"] = [dataclasses.asdict(n) for n in not_applicable]
    if getattr(a, "stay_variants", None):
        nightly.series.extra["stay_variants"] = list(a.stay_variants)
    out = nightly.out_dir
    print(f"nightly: {len(entries)} scenario run(s) within {a.budget:g} min, seed "
          f"{nightly.series.base_seed}; results: {out}", flush=True)

    def run_one(name: str, spec: TestSpec, tries: int) -> tuple[int, Any]:
        again = ", second try" if tries > 1 else ""
        print(f"=== {name} (seed {spec.seed}{again}; {nightly.remaining_s() / 60:.0f} min of "
              f"budget left): {spec.description}", flush=True)
        return _run_and_report(spec, progress=not a.no_progress)

    lines, a.rabbitmq = a.rabbitmq, (a.rabbitmq[:1] if a.rabbitmq else None)
    explore = unchecked_spec(a)  # the budget left explores the default test on the first line
    a.rabbitmq = lines
    code = nightly.execute(run_one, lambda line: print(line, flush=True), explore)
    print(matrix.summary_table(nightly.summaries()), end="")
    for problem in matrix.problems(nightly.summaries()):
        print(f"- {problem}")
    for s in nightly.skipped:
        said = f" ({s.variant})" if s.variant else ""
        print(f"- skipped {s.scenario}{said} (seed {s.seed}): {s.reason}")
    print(f"junit: {out / JUNIT_XML}\npage: {out / INDEX_HTML}\ntable: {out / 'matrix.md'}")
    print(f"nightly exit code {code}", flush=True)
    return code


def _series(entries: list[tuple[str, TestSpec, Any]], a: argparse.Namespace,
            not_applicable: Sequence[Any] = ()) -> int:
    """Runs each (name, spec, expectation) `--repeat` times, round by round, and prints and stores
    the table after every run (with the scenarios a release line cannot run, said once).
    Returns the series' exit code."""
    from harness import vary
    from harness.series import Series

    repeat = 1 if a.repeat is None else a.repeat
    if repeat < 1:
        raise UsageError(f"--repeat must be >= 1, got {repeat}")
    _require_root([s for _, s, _ in entries])
    varied = [k for k, _v in vary.parse_vary(getattr(a, "vary", None) or ())]
    from_file = getattr(a, "scenario_file", None) is not None
    seed = a.seed if a.seed is not None or not from_file else entries[0][1].seed
    series = Series(entries, repeat, _store_root(entries[0][1]), base_seed=seed, varied=varied)
    series.extra["not_applicable"] = [dataclasses.asdict(n) for n in not_applicable]
    if getattr(a, "stay_variants", None):
        series.extra["stay_variants"] = list(a.stay_variants)
    for n in not_applicable:
        said = f" ({n.variant})" if n.variant else ""
        print(f"not applicable: {n.scenario}{said} on RabbitMQ {n.rabbitmq}: {n.reason}",
              flush=True)
    print(f"series: {len(entries)} scenario(s) x {repeat} run(s), seeds from {series.base_seed}; "
          f"table: {series.out_dir / 'matrix.md'}", flush=True)
    for name, spec in series.runs():
        print(f"=== {name} (seed {spec.seed}, run {series.round + 1} of {repeat}): "
              f"{spec.description}", flush=True)
        t0 = time.monotonic()
        code, outcome = _run_and_report(spec, progress=not a.no_progress)
        series.record(name, spec, code, time.monotonic() - t0, outcome)
        if outcome.interrupted:
            print("series interrupted: the remaining runs did not happen", file=sys.stderr)
            break
    _print_summaries(series.summaries(), series.extra)
    print(f"table: {series.out_dir / 'matrix.md'}")
    return series.exit_code()


def _print_summaries(summaries: Sequence[Any], extra: dict[str, Any]) -> None:
    """Prints a series' tables: side by side (when matrix.side_by_side_of finds something to
    set so), the summary, and what did not hold."""
    from harness import matrix

    side = matrix.side_by_side_of(summaries, extra)
    if side:
        print(matrix.variant_markdown(side), end="")
    print(matrix.summary_table(summaries), end="")
    for problem in matrix.problems(summaries):
        print(f"- {problem}")


def _require_files(paths: list[Path]) -> None:
    """Raises UsageError naming the paths that do not exist."""
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise UsageError(f"no such file: {', '.join(missing)}")


def _refused(rows: Sequence[Any], specs: dict[str, TestSpec]) -> list[Any]:
    """Takes a table's rows and each scenario's spec. Returns, when the rows span several
    release lines, every scenario of theirs that one of those lines cannot run (a mirrored
    queue on 4.0), as matrix.NotApplicable with the release's reason, so a table rebuilt from
    archives says "not applicable" where a series would have, never "-"."""
    from harness.matrix import NotApplicable
    from harness.series import on_release
    from harness.vary import as_varied

    lines = sorted({r.rabbitmq for r in rows})
    if len(lines) < 2:
        return []
    out = []
    for name, variant in dict.fromkeys((r.scenario, r.variant) for r in rows
                                       if r.scenario in specs):
        for line in lines:
            try:
                why = as_varied(on_release(specs[name], {"rabbitmq": line}), variant).refusal()
            except SpecError:
                continue  # a variant of a setting since removed: its rows say what they can
            if why:
                out.append(NotApplicable(name, line, why, variant))
    return out


def _cmd_table(a: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from harness import matrix
    from harness.check import check_run
    from harness.scenarios import SCENARIOS
    from harness.series import rebuild

    _require_files(a.matrix_files)
    expectations = {n: sc.expect for n, sc in SCENARIOS.items()}
    dropped: dict[str, int] = {}
    rows = rebuild(a.matrix_files, expectations,
                   recheck=(lambda d: check_run(d)) if a.recheck else None,
                   specs={n: sc.spec for n, sc in SCENARIOS.items()}, dropped=dropped)
    for name, n in sorted(dropped.items()):
        print(f"left out {n} run(s) of {name} made under an older definition of it")
    if a.scenarios:
        rows = [r for r in rows if r.scenario in a.scenarios]
    if a.variant is not None:
        rows = [r for r in rows if r.variant == a.variant]
        if not rows:
            raise UsageError(f"no run of variant {a.variant!r} in "
                             f"{', '.join(map(str, a.matrix_files))}")
    summaries = matrix.summarize(rows, expectations)
    stamp = f"table-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    first = a.matrix_files[0]
    out = a.out or (first.parent.parent / stamp if first.name == "matrix.json"
                    else Path("store") / "matrix" / stamp)
    refused = _refused(rows, {n: sc.spec for n, sc in SCENARIOS.items()})
    extra = {"not_applicable": [dataclasses.asdict(n) for n in refused]}
    _js, md = matrix.write(rows, summaries, out, extra)
    _print_summaries(summaries, extra)
    if a.pairs:
        print("\n" + matrix.pair_table(summaries, {n: sc.twin for n, sc in SCENARIOS.items()}),
              end="")
    print(f"table: {md}")
    return matrix.exit_code(rows, summaries)


def _cmd_check(a: argparse.Namespace) -> int:
    from checkers import convert_to_parquet
    from harness.check import check_history_file, check_options, check_run, exit_code

    path: Path = a.path
    run = path.is_dir() and (path / "history.jsonl").is_file()
    parquet = path.is_dir() and (path / "_checkers.json").is_file()
    if not (run or parquet or path.is_file()):
        raise UsageError(f"{path} is not a run directory (it has no history.jsonl), a history "
                         f"file or a Parquet history")
    check_spark_master(a.spark_master)
    overrides = check_overrides(a)
    history = path / "history.jsonl" if run else path
    if a.parquet is not None:
        if parquet:
            raise UsageError(f"{path} is a Parquet history already")
        history = convert_to_parquet(history, a.parquet, spark_master=a.spark_master,
                                     options=check_options(None, overrides))
    if run:
        results = check_run(path, spark_master=a.spark_master, overrides=overrides,
                            history=history, out=a.out)
    else:
        results = check_history_file(history, a.spark_master, overrides=overrides, out=a.out)
    print(summary(results))
    return strength_exit(exit_code(results), results, a.require_strength)


def _cmd_report(a: argparse.Namespace) -> int:
    from reports.report import render

    if not (a.run_dir / "history.jsonl").exists():
        raise UsageError(f"{a.run_dir} has no history.jsonl")
    for p in render(a.run_dir):
        print(p)
    return 0


def _cmd_finding(a: argparse.Namespace) -> int:
    print(finding_cli.finding(a.run_dir, a.replays, a.out))
    return 0


def _cmd_clean(_a: argparse.Namespace) -> int:
    from harness.cleanup import clean_all

    for line in clean_all():
        print(line)
    return 0


def _cmd_scenarios(a: argparse.Namespace) -> int:
    from harness.scenario_file import write_catalogue
    from harness.scenarios import SCENARIOS, not_applicable

    if a.write is not None:
        for path in write_catalogue(a.write, {n: sc.spec for n, sc in SCENARIOS.items()}):
            print(path)
        return 0

    for name, sc in SCENARIOS.items():
        print(f"{name:32} {sc.spec.description}")
        twin = f" (safe twin: {sc.twin})" if sc.twin else ""
        print(f"{'':32} predicts {sc.expect.describe()}: {sc.expect_text}{twin}")
        where: dict[str, list[str]] = {}
        for line, why in not_applicable(sc.spec):
            where.setdefault(why, []).append(line)
        for why, lines in where.items():
            print(f"{'':32} not applicable on RabbitMQ {', '.join(lines)}: {why}")
    return 0


def _cmd_archive(a: argparse.Namespace) -> int:
    from harness.scenarios import SCENARIOS
    from harness.series import archive

    _require_files(a.matrix_files)
    if a.out.suffix != ".jsonl":
        raise UsageError(f"an archive is a .jsonl file, not {a.out}")
    added, replaced = archive(a.matrix_files, a.out,
                              {n: sc.expect for n, sc in SCENARIOS.items()})
    print(f"archived {added} run(s) in {a.out}; {replaced} run(s) judged again since: their "
          "results or judgements replaced")
    return 0


# Spec fields by their own names (duration_s), and the options that set them, for error messages.
FLAGS = options.flags_by_name()


def name_the_options(message: str) -> str:
    """Takes an error message. Returns it with the spec's field names (duration_s) followed by
    the option that sets them (--nemesis-duration): a name with an underscore wherever the
    message says it, any other where the message begins "NAME must" (a fault entry's own
    duration= or interval= is named by its entry already, a scenario file's key by the file)."""
    if message.startswith(("fault entry", "scenario file")):
        return message
    for name, flag in FLAGS.items():
        said = rf"\b{re.escape(name)}\b(?! \()" if "_" in name else rf"^{re.escape(name)}(?= must)"
        message = re.sub(said, f"{name} ({flag})", message)
    return message


def _tools(a: argparse.Namespace) -> campaign_cli.Tools:
    """Takes parsed options. Returns what explore and shrink take from the CLI: every run a
    normal stored run, reported, with live progress unless --no-progress."""
    def run_spec(spec: TestSpec) -> tuple[int, Any]:
        return _run_and_report(spec, progress=not a.no_progress)

    return campaign_cli.Tools(spec_from_args, run_spec, _require_root, _store_root,
                              lambda line: print(line, flush=True))


def _cmd_explore(a: argparse.Namespace) -> int:
    return campaign_cli.cmd_explore(a, _tools(a))


def _cmd_shrink(a: argparse.Namespace) -> int:
    return campaign_cli.cmd_shrink(a, _tools(a))


COMMANDS = {"run": _cmd_run, "matrix": _cmd_matrix, "nightly": _cmd_nightly, "table": _cmd_table,
            "explore": _cmd_explore, "shrink": _cmd_shrink,
            "archive": _cmd_archive, "check": _cmd_check, "report": _cmd_report,
            "finding": _cmd_finding,
            "clean": _cmd_clean, "scenarios": _cmd_scenarios}


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI. Returns the exit code."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        a = build_parser().parse_args(argv)
        _setup_logging(a.verbose)
        return COMMANDS[a.cmd](a)
    except (UsageError, SpecError) as e:
        print(f"error: {name_the_options(str(e))}", file=sys.stderr)
        return 2
    except (ValueError, RuntimeError) as e:  # a malformed history, a held lock, a dead cluster
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
