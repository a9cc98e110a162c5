"""Scenario files: a whole run in one TOML file, read and written.

`python -m harness run --scenario-file F` starts from the spec a file says
(options given on the command line override it, as they do a `--scenario`);
every stored run writes `scenario.toml` beside its test.json, the run as it
was played (`write_run_scenario`); `python -m harness scenarios --write DIR`
writes the catalogue's scenarios as files.

The format is the test spec (harness.spec.TestSpec), field for field: the
top-level keys (name, description, nodes, time_limit_s, seed, ...) and one
table for each part, `[broker]`, `[queue]`, `[workload]` (its client's
settings in `[workload.client]`), `[nemesis]`, `[check]` and `[backend]`,
each key a field of that part by the name test.json gives it. A key left out
takes the spec's default. A setting that may be unset (a seed, a delivery
limit, the consume rate) is unset by leaving it out where that is its
default, else by the text "none" (`consume_rate = "none"`: consume as fast
as possible). Keys the spec does not have, and values of the wrong type, are
refused by name and line.

Faults are drawn from the seed (`[nemesis] faults = [...]`, `order` random
or cycle, as `--nemesis` takes them), or played once from an explicit
schedule: one `[[nemesis.schedule]]` table per fault, in order of start,
with `start_s` (seconds into the main phase), `fault` (a fault entry as
`--nemesis` takes it, NAME[@TARGETS][:OPTION=VALUE]..., without duration= or
interval=) and `duration_s`; healthy before, between and after; one fault at
a time (overlapping faults are refused). A schedule makes `order = "once"`
and its entries the `faults`. Targets drawn at random (`one`, a partition's
random halves) are drawn from the seed, so keep the seed to hit the same
nodes again. For example:

    name = "kill-then-partition"
    nodes = 3
    time_limit_s = 90.0
    seed = 4242

    [broker]
    partition_handling = "pause_minority"
    net_ticktime = 10
    rabbitmq = "3.10"
    metadata_store = "mnesia"

    [queue]
    type = "quorum"

    [workload]
    rate = 200.0

    [[nemesis.schedule]]
    start_s = 10.0
    fault = "kill@leader"
    duration_s = 15.0

    [[nemesis.schedule]]
    start_s = 45.0
    fault = "partition-one@n3"
    duration_s = 25.0

A run's `scenario.toml` is its full spec with its seed, its faults as they
were played (nemesis.played: each start and duration from its history, in
milliseconds, and a comment with the nodes each hit): run it and the same
faults start at the same offsets into the main phase.

A bad file raises ScenarioFileError (a SpecError: the CLI exits 2 before
anything starts) naming the file, the line where it can be told, the key and
what is wrong.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import tomllib
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from clusters.backend import BackendConfigError
from harness import store
from harness.spec import SpecError, TestSpec
from harness.toml_text import COMMENT, dumps
from history import Op
from history.files import write_atomic
from nemesis.errors import NemesisConfigError, ScheduleError
from nemesis.options import NemesisOptions
from nemesis.played import played_faults, played_options
from workloads.kinds.base import QueueConfigError
from workloads.queue_workload import WorkloadConfigError

log = logging.getLogger(__name__)

RUN_FILE = "scenario.toml"  # what every stored run writes beside test.json
NONE = "none"  # the text of an unset setting whose default is set
SCHEDULE_KEYS = ("start_s", "fault", "duration_s")


class ScenarioFileError(SpecError):
    """A scenario file that cannot make a test; the message names the file, line and key."""


# -- reading ---------------------------------------------------------------------------------------

def read_scenario(path: Path) -> TestSpec:
    """Takes a scenario file's path. Returns the spec it says (validated as the CLI would run
    it, but as written: the queue kind's check rules and fault durations are applied later).

    Raises ScenarioFileError for an unreadable file, TOML that does not parse, an unknown key,
    a value of the wrong type, or a spec that cannot run (overlapping faults, an unknown
    fault, targets the cluster lacks, ...).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioFileError(f"scenario file {path}: cannot read it: {e}") from e
    return loads_scenario(text, str(path))


def loads_scenario(text: str, source: str = "<scenario>") -> TestSpec:
    """Takes a scenario file's text and where it came from. Returns its spec (`read_scenario`)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioFileError(f"scenario file {source}: not valid TOML: {e}") from e
    lines = KeyLines(text)

    def fail(where: tuple[str | int, ...], message: str) -> ScenarioFileError:
        line = lines.line_of(where)
        at = f", line {line}" if line else ""
        return ScenarioFileError(f"scenario file {source}{at}: {_dotted(where)}: {message}")

    spec = _build(TestSpec, data, (), fail)
    try:
        spec.for_queue().resolved().validate()
    except (SpecError, ValueError) as e:
        cause = e.__cause__ if isinstance(e, SpecError) else e
        if isinstance(cause, ScheduleError) and cause.index is not None:
            raise fail(("nemesis", "schedule", cause.index), str(e)) from e
        part = next((name for kind, name in _PARTS if isinstance(cause, kind)), None)
        if part is not None:
            raise fail((part,), str(e)) from e
        raise ScenarioFileError(f"scenario file {source}: {e}") from e
    return spec


# Which table a part's own error is about.
_PARTS: tuple[tuple[type[Exception], str], ...] = (
    (NemesisConfigError, "nemesis"), (QueueConfigError, "queue"),
    (WorkloadConfigError, "workload"), (BackendConfigError, "backend"))


Fail = typing.Callable[[tuple[str | int, ...], str], ScenarioFileError]


def _build(cls: Any, data: Any, where: tuple[str | int, ...], fail: Fail) -> Any:
    """Returns an instance of a spec dataclass from its table, every value type-checked."""
    if not isinstance(data, dict):
        raise fail(where, f"must be a table of {cls.__name__} settings, got {_shown(data)}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    data = dict(data)
    if cls is NemesisOptions and "schedule" in data:
        data.setdefault("order", "once")
    kwargs: dict[str, Any] = {}
    for name, v in data.items():
        here = (*where, name)
        if name not in names:
            known = ", ".join(n for n in names if n != "schedule" or cls is NemesisOptions)
            raise fail(here, f"unknown key; {'the file' if not where else _dotted(where)} "
                             f"takes {known}")
        if cls is NemesisOptions and name == "schedule":
            kwargs[name] = _schedule(v, here, fail)
        else:
            kwargs[name] = _convert(v, hints[name], here, fail)
    if cls is NemesisOptions and "schedule" in kwargs and "faults" not in kwargs:
        kwargs["faults"] = tuple(dict.fromkeys(e for _s, e, _d in kwargs["schedule"]))
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise fail(where or ("(top level)",), str(e)) from e


def _schedule(v: Any, where: tuple[str | int, ...], fail: Fail) -> tuple[Any, ...]:
    """Returns [[nemesis.schedule]] tables as (start_s, entry, duration_s) items."""
    if not isinstance(v, list):
        raise fail(where, "must be [[nemesis.schedule]] tables, each with "
                          f"{', '.join(SCHEDULE_KEYS)}, got {_shown(v)}")
    items = []
    for i, item in enumerate(v):
        here = (*where, i)
        if not isinstance(item, dict):
            raise fail(here, f"must be a table with {', '.join(SCHEDULE_KEYS)}, got "
                             f"{_shown(item)}")
        unknown = sorted(set(item) - set(SCHEDULE_KEYS))
        if unknown:
            raise fail((*here, unknown[0]), f"unknown key; a scheduled fault takes "
                                            f"{', '.join(SCHEDULE_KEYS)}")
        missing = [k for k in SCHEDULE_KEYS if k not in item]
        if missing:
            raise fail(here, f"a scheduled fault needs {', '.join(missing)}")
        items.append((_convert(item["start_s"], float, (*here, "start_s"), fail),
                      _convert(item["fault"], str, (*here, "fault"), fail),
                      _convert(item["duration_s"], float, (*here, "duration_s"), fail)))
    return tuple(items)


def _convert(v: Any, hint: Any, where: tuple[str | int, ...], fail: Fail) -> Any:
    """Returns a TOML value as the spec's field type `hint` holds it; raises through `fail`
    naming the type it should have been."""
    if dataclasses.is_dataclass(hint):
        return _build(hint, v, where, fail)
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return _convert_union(v, hint, where, fail)
    if origin is typing.Literal:
        args = typing.get_args(hint)
        if v not in args:
            raise fail(where, f"must be one of {', '.join(map(str, args))}, got {_shown(v)}")
        return v
    if origin in (tuple, list):
        return _convert_sequence(v, hint, where, fail)
    return _convert_scalar(v, hint, where, fail)


def _convert_union(v: Any, hint: Any, where: tuple[str | int, ...], fail: Fail) -> Any:
    """Takes a TOML value and a union type. Returns the value as the first of the union's
    types that takes it (None for the text "none" when the union allows None); raises
    through `fail` when none does."""
    args = typing.get_args(hint)
    if v == NONE and type(None) in args:
        return None
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _convert(v, arg, where, fail)
        except ScenarioFileError:
            pass
    raise fail(where, f"must be {_describe(hint)}, got {_shown(v)}")


def _convert_sequence(v: Any, hint: Any, where: tuple[str | int, ...], fail: Fail) -> Any:
    """Takes a TOML value and a tuple or list type. Returns a tuple or list of the converted
    items (a fixed tuple item by item, one of its length); raises through `fail`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if not isinstance(v, list):
        raise fail(where, f"must be {_describe(hint)}, got {_shown(v)}")
    if origin is tuple and (len(args) != 2 or args[1] is not Ellipsis):
        if len(v) != len(args):
            raise fail(where, f"must be {_describe(hint)}, got {_shown(v)}")
        return tuple(_convert(x, a, (*where,), fail) for x, a in zip(v, args, strict=True))
    items = [_convert(x, args[0], where, fail) for x in v]
    return tuple(items) if origin is tuple else items


# What a TOML value must be to fill a field of each plain type (a Path is written as text).
_SCALARS: dict[Any, Callable[[Any], bool]] = {
    bool: lambda x: isinstance(x, bool),
    int: lambda x: isinstance(x, int) and not isinstance(x, bool),
    float: lambda x: isinstance(x, int | float) and not isinstance(x, bool),
    str: lambda x: isinstance(x, str),
    Path: lambda x: isinstance(x, str),
}


def _convert_scalar(v: Any, hint: Any, where: tuple[str | int, ...], fail: Fail) -> Any:
    """Takes a TOML value and a plain type (`_SCALARS`). Returns the value as that type holds
    it; raises through `fail` for a value of another type or a type no file can set."""
    ok = _SCALARS.get(hint)
    if ok is None:
        raise fail(where, f"cannot be set in a scenario file ({hint})")
    if not ok(v):
        raise fail(where, f"must be {_describe(hint)}, got {_shown(v)}")
    return float(v) if hint is float else Path(v) if hint is Path else v


def with_setting(spec: TestSpec, key: str, text: str) -> TestSpec:
    """Takes a spec, a scenario file's dotted key (queue.type, broker.rabbitmq,
    workload.client.prefetch) and a value as text, as a command line gives it. Returns the spec
    with that setting: text where the field takes text, else the TOML value the text spells
    ("10", "0.5", "true"; "none" unsets). Raises ScenarioFileError naming the key and what it
    takes (not validated: the caller validates the whole)."""
    def fail(where: tuple[str | int, ...], message: str) -> ScenarioFileError:
        return ScenarioFileError(f"setting {key}: {message}")

    def set_in(obj: Any, parts: list[str]) -> Any:
        names = [f.name for f in dataclasses.fields(obj)]
        if parts[0] not in names or parts[0] == "schedule":
            raise fail((), f"{type(obj).__name__} has no such setting; it takes "
                           f"{', '.join(n for n in names if n != 'schedule')}")
        current = getattr(obj, parts[0])
        if len(parts) > 1:
            if not dataclasses.is_dataclass(current):
                raise fail((), f"{parts[0]} is not a table")
            return dataclasses.replace(obj, **{parts[0]: set_in(current, parts[1:])})
        hint = typing.get_type_hints(type(obj))[parts[0]]
        return dataclasses.replace(obj, **{parts[0]: _text_value(text, hint, fail)})

    return typing.cast(TestSpec, set_in(spec, key.split(".")))


def _text_value(text: str, hint: Any, fail: Fail) -> Any:
    """Returns a setting's text as its field type holds it: as text when the type takes it, else
    as the TOML value it spells."""
    try:
        return _convert(text, hint, (), fail)
    except ScenarioFileError:
        pass
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        raise fail((), f"must be {_describe(hint)}, got {text!r}") from None
    return _convert(value, hint, (), fail)


def _describe(hint: Any) -> str:
    """Returns what a field type is called in an error message."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        said = [_describe(a) for a in args if a is not type(None)]
        return " or ".join(said + ([f'"{NONE}"'] if type(None) in args else []))
    if origin in (tuple, list):
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return f"a list of {len(args)} ({', '.join(_describe(a) for a in args)})"
        return f"a list of {_describe(args[0])}"
    if origin is typing.Literal:
        return "one of " + ", ".join(map(str, args))
    return {bool: "true or false", int: "a whole number", float: "a number", str: "text",
            Path: "a path (text)"}.get(hint, str(hint))


def _shown(v: Any) -> str:
    kind = {bool: "true/false", int: "a whole number", float: "a number", str: "text",
            list: "a list", dict: "a table"}.get(type(v), type(v).__name__)
    return f"{json.dumps(v, default=str)} ({kind})"


def _dotted(where: tuple[str | int, ...]) -> str:
    out = ""
    for part in where:
        out += f"[{part + 1}]" if isinstance(part, int) else ("." if out else "") + part
    return out or "(top level)"


class KeyLines:
    """Where each key and table of a TOML text is, line by line: enough to point at what is
    wrong (a key written as part of an inline table is found at its table's line)."""

    _HEADER = re.compile(r"^\s*(\[\[?)\s*([^\[\]]+?)\s*\]\]?\s*(#.*)?$")
    _KEY = re.compile(r"^\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')"
                      r"(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*=")

    def __init__(self, text: str) -> None:
        self.lines: dict[tuple[str | int, ...], int] = {}
        table: tuple[str | int, ...] = ()
        counts: dict[tuple[str, ...], int] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            header = self._HEADER.match(line)
            if header:
                path = tuple(_parts(header.group(2)))
                if header.group(1) == "[[":
                    counts[path] = counts.get(path, -1) + 1
                    table = (*path, counts[path])
                else:
                    table = path
                self.lines.setdefault(table, number)
                continue
            found = self._KEY.match(line)
            if found:
                self.lines.setdefault((*table, *_parts(found.group(1))), number)

    def line_of(self, where: tuple[str | int, ...]) -> int | None:
        """Takes a key's path (table names, array indices, key). Returns its line, else that of
        the nearest table holding it, else None."""
        for n in range(len(where), 0, -1):
            if where[:n] in self.lines:
                return self.lines[where[:n]]
        return None


def _parts(dotted: str) -> list[str]:
    return [p.strip().strip("\"'") for p in re.findall(r"\"[^\"]*\"|'[^']*'|[^.]+", dotted)]


# -- writing ---------------------------------------------------------------------------------------

def scenario_data(spec: TestSpec, notes: Iterable[str | None] = ()) -> dict[str, Any]:
    """Takes a spec and, optionally, a note for each scheduled fault. Returns the scenario
    file's data (`dumps` writes it): every recorded field, unset ones left out where that is
    their default, else "none"; a schedule as [[nemesis.schedule]] tables."""
    data = _plain(spec, json.loads(json.dumps(spec.to_dict(), default=str)))
    nemesis = data["nemesis"]
    if spec.nemesis.order == "once":
        nemesis.pop("faults", None)  # the schedule's entries
        notes = list(notes)
        nemesis["schedule"] = [
            {**({COMMENT: notes[i]} if i < len(notes) and notes[i] else {}),
             "start_s": float(start), "fault": entry, "duration_s": float(duration)}
            for i, (start, entry, duration) in enumerate(spec.nemesis.schedule)]
    else:
        nemesis.pop("schedule", None)
    return data


def _plain(obj: Any, data: dict[str, Any]) -> dict[str, Any]:
    """Returns a dataclass's to_dict data without the unset values TOML cannot hold."""
    out: dict[str, Any] = {}
    fields = {f.name: f for f in dataclasses.fields(obj)}
    for name, v in data.items():
        f = fields.get(name)
        current = getattr(obj, name) if f is not None else None
        if dataclasses.is_dataclass(current) and isinstance(v, dict):
            out[name] = _plain(current, v)
        elif v is None:
            if f is not None and f.default is not None:
                out[name] = NONE
        else:
            out[name] = v
    return out


def dumps_scenario(spec: TestSpec, header: str = "", notes: Iterable[str | None] = ()) -> str:
    """Takes a spec, a comment for the file's head and notes for its scheduled faults. Returns
    the scenario file's text."""
    return dumps(scenario_data(spec, notes), header or default_header(spec))


def default_header(spec: TestSpec) -> str:
    """Returns the comment a scenario file opens with."""
    return (f"Scenario {spec.name}: python -m harness run --scenario-file FILE (options given "
            f"override it); harness/scenario_file.py documents the format.")


def write_scenario(spec: TestSpec, path: Path, header: str = "",
                   notes: Iterable[str | None] = ()) -> Path:
    """Takes a spec, a path, and optionally the file's head comment and its faults' notes.
    Writes the scenario file (atomically). Returns the path."""
    return write_atomic(Path(path), dumps_scenario(spec, header, notes))


# -- a run's scenario ------------------------------------------------------------------------------

def played_spec(spec: TestSpec, ops: Iterable[Op]) -> tuple[TestSpec, list[str | None]]:
    """Takes a run's spec and its history's ops. Returns the spec with its faults as played (a
    schedule played once) and a note per fault saying the nodes it hit; the spec as it is when
    the main phase never began."""
    ops = list(ops)
    nemesis = played_options(ops, spec.nemesis, spec.time_limit_s)
    if nemesis is None:
        return spec, []
    notes = [f"hit {', '.join(f.nodes)}" if f.nodes else None
             for f in played_faults(ops, spec.nemesis)]
    return dataclasses.replace(spec, nemesis=nemesis), notes


# A line that may hold a nemesis op or a phase boundary: every client op names its phase
# ("phase":"main"), so the key alone would pick every line.
_NEMESIS_OR_PHASE = re.compile(rb'"nemesis"|"f"\s*:\s*"phase"')


def nemesis_ops(history: Path) -> list[Op]:
    """Takes a history file. Returns its nemesis ops and harness phase ops (only lines that may
    hold one are decoded: a history holds a line per message, 2.6 million in an hour)."""
    ops = []
    with open(history, "rb") as fh:
        for line in fh:
            if _NEMESIS_OR_PHASE.search(line):
                op = Op.from_dict(json.loads(line))
                if op.process == "nemesis" or op.f == "phase":
                    ops.append(op)
    return ops


def write_run_scenario(run_dir: Path, spec: TestSpec) -> Path | None:
    """Takes a run directory and the spec it ran. Writes its `scenario.toml`: the spec with its
    seed and the faults as played (from history.jsonl). Returns the path; None when it could
    not be written (logged: a run never fails for it)."""
    try:
        history = run_dir / store.HISTORY
        ops = nemesis_ops(history) if history.exists() else []
        played, notes = played_spec(spec, ops)
        header = (f"Run {run_dir.name} of {spec.name}, seed {spec.seed}: its faults as they were "
                  f"played, at their offsets into the main phase.\nRun it again: python -m "
                  f"harness run --scenario-file {RUN_FILE} (harness/scenario_file.py documents "
                  f"the format).")
        return write_scenario(played, run_dir / RUN_FILE, header, notes)
    except Exception:
        log.exception("could not write %s in %s", RUN_FILE, run_dir)
        return None


def write_catalogue(out_dir: Path, scenarios: Mapping[str, TestSpec]) -> list[Path]:
    """Takes a directory and named specs. Writes `<name>.toml` for each. Returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return [write_scenario(spec, out_dir / f"{name}.toml") for name, spec in scenarios.items()]
