"""The `finding` command: a Markdown report of a stored finding that a RabbitMQ maintainer can act on.

`python -m harness finding RUN_DIR [--replays FILE ...] [--out PATH]` writes
RUN_DIR/finding.md (reports.finding draws it from what the run stored). What
only the harness knows it hands over as plain data: the runs that the series'
matrix.json files or archives list (harness.series.listed), for the replay
rate; and, for a run that stored no scenario.toml (runs older than scenario
files), one rebuilt from test.json's spec and the faults its history shows as
played (harness.scenario_file), so the page always says how to run it again.
A run with nothing to report raises ValueError, which the CLI prints before
exiting 2. harness.cli registers the command; this module imports nothing of it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.scenario_file import dumps_scenario, played_spec
from harness.series import listed
from harness.spec import SpecError, spec_from_dict
from history import HARNESS, NEMESIS, iter_history
from reports.finding import SCENARIO, TEST, refusal, write
from reports.finding_history import PHASE, history_file

log = logging.getLogger(__name__)


def add_parser(sub: Any) -> None:
    """Takes the CLI's subparsers. Adds `finding`."""
    f = sub.add_parser("finding", help="write RUN_DIR/finding.md, a Markdown report of a stored "
                                       "finding a RabbitMQ maintainer can act on (exit 2 when "
                                       "the run holds none)")
    f.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    f.add_argument("--replays", type=Path, nargs="+", metavar="FILE", default=None,
                   help="matrix.json files or archives (measurements/*.jsonl) of series that "
                        "ran the scenario again: the page counts, per release line, the runs "
                        "that showed the same anomaly (else: replay rate not measured)")
    f.add_argument("--out", type=Path, help="where to write (default: RUN_DIR/finding.md)")


def finding(run_dir: Path, replays: Sequence[Path] | None = None,
            out: Path | None = None) -> Path:
    """Takes a run directory, the --replays files (None: not given) and where to write.
    Writes the finding report. Returns its path. Raises ValueError when the run holds no
    finding or a replay file is missing or unreadable."""
    why = refusal(run_dir)
    if why is not None:
        raise ValueError(why)
    records = None if replays is None else _replays(replays)
    return write(run_dir, out, records, rebuilt_scenario(run_dir))


def _replays(files: Sequence[Path]) -> list[dict[str, Any]]:
    """Takes the --replays files. Returns the runs they list. Raises ValueError for a file
    missing or not a matrix.json or archive."""
    missing = [str(p) for p in files if not p.is_file()]
    if missing:
        raise ValueError(f"no such file: {', '.join(missing)}")
    try:
        return listed(files)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"--replays takes matrix.json files or archives (.jsonl): {e}") from e


def rebuilt_scenario(run_dir: Path) -> str | None:
    """Takes a run directory. Returns, when it stored no scenario.toml, one rebuilt from
    test.json's spec and the faults its history shows as played; None when it stored one or
    nothing can be rebuilt (logged)."""
    if (run_dir / SCENARIO).is_file() or not (run_dir / TEST).is_file():
        return None
    try:
        info = json.loads((run_dir / TEST).read_text(encoding="utf-8"))
        spec = spec_from_dict(info["spec"])
        if spec.seed is None and isinstance(info.get("seed"), int):
            spec = dataclasses.replace(spec, seed=info["seed"])
        history = history_file(run_dir)
        ops = [] if history is None else [
            op for op in iter_history(history)
            if op.process == NEMESIS or (op.process == HARNESS and op.f == PHASE)]
        played, notes = played_spec(spec, ops)
    except (OSError, KeyError, TypeError, ValueError, SpecError) as e:
        log.warning("could not rebuild a scenario file for %s: %s", run_dir, e)
        return None
    header = (f"Rebuilt from the run's {TEST} ({spec.name}, seed {spec.seed}): its faults as "
              "its history shows them played.\nRun it again: python -m harness run "
              f"--scenario-file {SCENARIO}.")
    return dumps_scenario(played, header, notes)
