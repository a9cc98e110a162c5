"""How often a finding came back: the runs of its scenario that a series stored, per release line.

Takes the runs matrix.json files or archives list (the harness hands them
over as an archive line holds them, `{"row": ..., "results": ...}`, each run
once: harness.series.listed) and counts, per release line and variant, the
runs of the finding's scenario, and among them those that show the finding's
kind of anomaly (reports.finding_rules.shows: from a run's results, else its
matrix row): "reproduced 3 of 5 on RabbitMQ 4.0.5". When the finding's own
run is among them (by its directory's name, else by its seed and a directory
stamped within STAMP_SLACK_S of test.json's start time) only its variant is
counted; otherwise each variant of the scenario is counted apart. Runs that
ended in an infrastructure error are left out of the count; runs whose kind
cannot be told (results gone, a row that does not count the kind) are said
apart, never counted as a miss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePath
from typing import Any

from reports.finding_rules import shows
from reports.page import as_dict, parse_stamp

STAMP_SLACK_S = 2.0
ERROR = "error"  # harness.matrix's judgement of an infrastructure error
DEFAULT_LINE = "3.10"  # the line of rows stored before there was a choice (harness.matrix.Row)


@dataclass(frozen=True)
class Own:
    """The finding's run as a series would list it: scenario, directory name, seed, start."""

    scenario: str
    name: str
    seed: int | None
    start: datetime | None


@dataclass(frozen=True)
class ReplayRate:
    """One release line (and variant): runs counted, those showing the kind, those that could
    not be told, infrastructure errors left out, and whether the finding's run is counted."""

    line: str
    versions: tuple[str, ...]
    variant: str
    shown: int
    runs: int
    untold: int
    errors: int
    includes_own: bool

    def sentence(self) -> str:
        """Returns the rate in words: "reproduced 3 of 5 on RabbitMQ 4.0.5 (...)"."""
        on = ", ".join(self.versions) if self.versions else self.line
        out = f"reproduced {self.shown} of {self.runs} on RabbitMQ {on}"
        notes = [] if self.versions else ["the nodes' version not recorded"]
        notes += [f"variant {self.variant}"] if self.variant else []
        if self.includes_own:
            notes.append("this run among them")
        if self.untold:
            notes.append(f"{self.untold} more could not be told: results gone, and the matrix "
                         "row does not count this kind")
        if self.errors:
            notes.append(f"{self.errors} infrastructure error(s) not counted")
        return out + (f" ({'; '.join(notes)})" if notes else "")


def is_own(row: dict[str, Any], own: Own) -> bool:
    """Takes a matrix row (a dict) and the finding's run. Returns whether the row is that run."""
    name = PurePath(str(row.get("run_dir") or "")).name
    if row.get("scenario") != own.scenario or not name:
        return False
    if name == own.name:
        return True
    stamp = parse_stamp(name)
    return (own.seed is not None and row.get("seed") == own.seed and stamp is not None
            and own.start is not None
            and abs((stamp - own.start).total_seconds()) <= STAMP_SLACK_S)


def replay_rates(records: Sequence[dict[str, Any]], own: Own, kind: str) -> list[ReplayRate]:
    """Takes the listed runs ({"row", "results"} each), the finding's run and its kind.
    Returns one rate per release line and variant of the scenario, by line then variant."""
    rows = [(as_dict(r.get("row")), r.get("results")) for r in records]
    rows = [(row, res) for row, res in rows if row.get("scenario") == own.scenario]
    mine = next((row for row, _res in rows if is_own(row, own)), None)
    if mine is not None:
        variant = mine.get("variant") or ""
        rows = [(row, res) for row, res in rows if (row.get("variant") or "") == variant]
    groups: dict[tuple[str, str], list[tuple[dict[str, Any], Any]]] = {}
    for row, res in rows:
        key = (str(row.get("rabbitmq") or DEFAULT_LINE), str(row.get("variant") or ""))
        groups.setdefault(key, []).append((row, res))
    return [_rate(line, variant, members, mine, kind)
            for (line, variant), members in sorted(groups.items())]


def _rate(line: str, variant: str, members: list[tuple[dict[str, Any], Any]],
          mine: dict[str, Any] | None, kind: str) -> ReplayRate:
    """Takes a release line, a variant, its runs (row, results), the finding's own row (or
    None) and the kind. Returns their rate."""
    judged = [shows(kind, res, row) for row, res in members if not _is_error(row)]
    versions = sorted({str(as_dict(row.get("versions")).get("rabbitmq"))
                       for row, _res in members if as_dict(row.get("versions")).get("rabbitmq")})
    return ReplayRate(line=line, versions=tuple(versions), variant=variant,
                      shown=sum(1 for j in judged if j is True),
                      runs=sum(1 for j in judged if j is not None),
                      untold=sum(1 for j in judged if j is None),
                      errors=sum(1 for row, _res in members if _is_error(row)),
                      includes_own=any(row is mine for row, _res in members))


def _is_error(row: dict[str, Any]) -> bool:
    """Takes a matrix row. Returns whether its run ended in an infrastructure error."""
    return bool(row.get("infrastructure")) or row.get("judgement") == ERROR
