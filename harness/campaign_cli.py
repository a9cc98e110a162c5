"""The `explore` and `shrink` commands: their options and what they do (harness.cli registers them).

`explore` searches configurations and fault schedules on a budget
(harness.explore, its space in harness.explore_space); `shrink RUN_DIR`
reduces a stored finding to a minimal scenario file (harness.shrink). They
take from the CLI, as `Tools`, what every command shares: the spec the options
say, the function that runs and reports one spec as a normal stored run, the
root check, the store's place and printing; so this module imports nothing of
harness.cli, and prints only through `Tools.say`.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import vary
from harness.explore import EXPLORE_MD, Budget, Explorer
from harness.explore_space import DEFAULT_FAULTS, DEFAULT_TARGETS, SEED_RANGE, Space
from harness.shrink import MINIMAL_TOML, Rule, Shrinker
from harness.spec import SpecError, TestSpec


@dataclass(frozen=True)
class Tools:
    """What the commands take from the CLI (module docstring)."""

    spec_from_args: Callable[[argparse.Namespace], TestSpec]
    run_spec: Callable[[TestSpec], tuple[int, Any]]
    require_root: Callable[[Sequence[TestSpec]], None]
    store_root: Callable[[TestSpec], Path]
    say: Callable[[str], None]


def add_parsers(sub: Any, add_options: Callable[..., None],
                csv: Callable[[str], tuple[str, ...]]) -> None:
    """Takes the CLI's subparsers, its function that adds the options a command takes from the
    table (harness.options `add_options`: parser, command, groups made already) and its
    comma-list reader. Adds `explore` and `shrink`."""
    x = sub.add_parser("explore", help="search configurations and fault schedules on a budget, "
                                       "guided by what earlier runs provoked")
    g = x.add_argument_group("explore")
    g.add_argument("--runs", type=int, help="at most this many runs")
    g.add_argument("--hours", type=float, help="at most this many hours (no run starts that "
                                               "the time left cannot hold)")
    g.add_argument("--pool", type=int, default=8,
                   help="candidates drawn a step; the guide runs the best (1: random search)")
    g.add_argument("--faults", type=csv, help=f"fault names to draw from (default: "
                                              f"{','.join(DEFAULT_FAULTS)})")
    g.add_argument("--targets", type=csv, help=f"target selectors of faults that take targets "
                                               f"(default: {','.join(DEFAULT_TARGETS)})")
    g.add_argument("--max-faults", type=int, default=3, help="faults a schedule (default 3)")
    g.add_argument("--queue-types", type=csv, help="queue kinds to draw (default: the test's)")
    g.add_argument("--partition-handlings", type=csv,
                   help="partition handlings to draw (default: the test's)")
    g.add_argument("--stays", type=csv,
                   help="client modes to draw, of --stay's (none,publishers,consumers,both; "
                        "default: the test's): whether publishers and consumers stay through "
                        "faults, each candidate's recorded in its scenario file")
    g.add_argument("--fixed-workload", action="store_true",
                   help="keep the test's workload shape instead of drawing one")
    g.add_argument("--shrink", action="store_true",
                   help="stop at the first finding and shrink it (as `shrink RUN_DIR` does, "
                        "with its default rule)")
    g.add_argument("--shrink-max-runs", type=int, default=Rule.max_runs,
                   help=f"replays that shrink may make ({Rule.max_runs})")
    add_options(x, "explore", {"explore": g})
    s = sub.add_parser("shrink", help="reduce a stored finding (an invalid run) to a minimal "
                                      "scenario file that still fails at a stated rate")
    s.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    s.add_argument("--replays", type=int, default=3, help="replays of each candidate (3)")
    s.add_argument("--min-fails", type=int, default=2,
                   help="failed replays a candidate needs to be kept (2, of --replays)")
    s.add_argument("--confirm", type=int, default=5,
                   help="replays of the minimal test in all, for its rate (5)")
    s.add_argument("--max-runs", type=int, default=60, help="replays the search may make (60)")
    s.add_argument("--any-anomaly", action="store_true",
                   help="any invalid replay fails, not only one with the finding's anomalies")
    add_options(s, "shrink")


def explore_space(a: argparse.Namespace) -> Space:
    """Takes the options of `explore`. Returns its search space."""
    return Space(faults=a.faults or DEFAULT_FAULTS, targets=a.targets or DEFAULT_TARGETS,
                 max_faults=a.max_faults, queue_types=a.queue_types or (),
                 partition_handlings=a.partition_handlings or (),
                 workload=not a.fixed_workload, stays=a.stays or ())


def cmd_explore(a: argparse.Namespace, tools: Tools) -> int:
    """Runs `explore`. Returns its exit code (harness.explore)."""
    if a.nemesis is not None or a.nemesis_order is not None:
        raise SpecError("explore draws its own fault schedules: choose them with --faults, "
                        "--targets and --max-faults, not --nemesis")
    if a.scenario_file is not None and a.scenario:
        raise SpecError("--scenario-file and --scenario: one base test, please")
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(SEED_RANGE)
    base = tools.spec_from_args(a)
    dims = vary.parse_vary(a.vary or ())
    try:
        explorer = Explorer(base, explore_space(a), seed, tools.store_root(base),
                            Budget(a.runs, a.hours), a.pool, dims, stop_at_finding=a.shrink)
        rule = Rule(max_runs=a.shrink_max_runs)
    except ValueError as e:
        raise SpecError(str(e)) from e
    tools.require_root([base])
    budget = " and ".join(x for x in (f"{a.runs} runs" if a.runs else "",
                                      f"{a.hours:g} h" if a.hours else "") if x)
    tools.say(f"explore: seed {seed}, budget {budget}, pool {a.pool}; record: "
              f"{explorer.out_dir / EXPLORE_MD}")
    code = explorer.execute(tools.run_spec, tools.say)
    tools.say("coverage: runs that reached each effect, by fault kind\n"
              + explorer.coverage.table().rstrip())
    tools.say(f"explore: {explorer.runs_done()} runs, seed {seed} (repeat: --seed {seed}); "
              f"record: {explorer.out_dir / EXPLORE_MD}; exit code {code}")
    findings = explorer.findings()
    if a.shrink and findings and not explorer.interrupted:
        shrinker = Shrinker(Path(findings[0]), rule, explorer.out_dir.parent.parent)
        _shrink(shrinker, tools)
        explorer.record_shrink(shrinker.summary())
    return code


def cmd_shrink(a: argparse.Namespace, tools: Tools) -> int:
    """Runs `shrink RUN_DIR`. Returns its exit code (harness.shrink)."""
    run_dir = a.run_dir.resolve()
    try:
        rule = Rule(a.replays, a.min_fails, a.confirm, a.max_runs, a.any_anomaly)
    except ValueError as e:
        raise SpecError(str(e)) from e
    root = Path(a.store).resolve() if a.store else run_dir.parent.parent
    return _shrink(Shrinker(run_dir, rule, root), tools)


def _shrink(shrinker: Shrinker, tools: Tools) -> int:
    """Takes a shrinker (its store root: the finding's, where its replays go). Runs it and says
    what it came to. Returns its exit code (harness.shrink)."""
    root = shrinker.out_dir.parent.parent.resolve()
    if tools.store_root(shrinker.original).resolve() != root:  # replays beside the finding
        shrinker.original = dataclasses.replace(shrinker.original, store=str(root))
    tools.require_root([shrinker.original])
    code = shrinker.execute(tools.run_spec, tools.say)
    tools.say(f"shrink: {shrinker.status}; {shrinker.spent()} replays")
    if shrinker.minimal is not None:
        tools.say(f"minimal scenario: {shrinker.out_dir / MINIMAL_TOML} (python -m harness run "
                  f"--scenario-file {shrinker.out_dir / MINIMAL_TOML})")
    tools.say(f"page: {shrinker.out_dir / 'shrink.html'}")
    return code
