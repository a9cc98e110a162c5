"""The shrink page: a finding's original and minimal tests side by side, with their incidents.

Reads only stored files: a shrink directory's shrink.json, original.toml and
minimal.toml (harness.shrink writes them) and, through the run directories
shrink.json names, each run's results.json (its `incidents`, harness.incidents).
The original's incidents are the finding's own; the minimal test's are those
of its first failing replay. The page is a Jinja2 template
(templates/shrink.html.j2) with autoescaping on, fed plain data
(`side_by_side`, `incidents_of`): nothing from a file reaches the page
unescaped. `write_page(shrink_dir)` draws it again at any time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from harness import store
from harness.scenario_file import ScenarioFileError, read_scenario
from harness.spec import TestSpec
from history.files import write_atomic

PAGE = "shrink.html"
TEMPLATES = Path(__file__).resolve().parent / "templates"
ENV = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=True, undefined=StrictUndefined,
                  trim_blocks=True, lstrip_blocks=True)
DROPPED = "dropped"


@dataclass(frozen=True)
class Line:
    """One line of the side-by-side table: what it is, the original's and the minimal's."""

    what: str
    original: str
    minimal: str

    @property
    def changed(self) -> bool:
        """Returns whether the minimal test differs from the original there."""
        return self.original != self.minimal


def _fault(item: Sequence[Any]) -> str:
    start, entry, duration = item
    return f"{float(start):g} s: {entry} for {float(duration):g} s"


def side_by_side(original: TestSpec, minimal: TestSpec | None) -> list[Line]:
    """Takes the original and the minimal spec (None: none yet). Returns the table's lines:
    each original fault beside what became of it (the minimal's faults are the original's,
    some dropped, in order, so they are matched by entry in order), the main phase and the
    workload's shape."""
    kept = list(minimal.nemesis.schedule) if minimal is not None else []
    lines: list[Line] = []
    for i, item in enumerate(original.nemesis.schedule):
        match = next((k for k, m in enumerate(kept) if m[1] == item[1]), None)
        became = "-" if minimal is None else DROPPED if match is None else _fault(kept[match])
        if match is not None:
            kept = kept[match + 1:]
        lines.append(Line(f"fault {i + 1}", _fault(item), became))
    for name, get in _SHAPE:
        lines.append(Line(name, get(original), "-" if minimal is None else get(minimal)))
    return lines


_SHAPE: tuple[tuple[str, Any], ...] = (
    ("main phase", lambda s: f"{s.time_limit_s:g} s"),
    ("backlog", lambda s: str(s.workload.backlog)),
    ("publishers", lambda s: f"{s.workload.publishers} at {s.workload.rate:g}/s"),
    ("consumers", lambda s: str(s.workload.consumers)),
    ("queue", lambda s: s.queue.type),
    ("seed", lambda s: str(s.seed)),
)


def incidents_of(run_dir: str | Path | None) -> list[dict[str, Any]]:
    """Takes a run directory (None: none). Returns its results.json's incidents, each as the
    page shows it (summary, span, counts, timeline), [] when there are none to read."""
    path = Path(run_dir) / store.RESULTS if run_dir else None
    if path is None or not path.is_file():
        return []
    try:
        found = json.loads(path.read_text()).get("incidents")
    except (OSError, ValueError, AttributeError):
        return []
    out = []
    for inc in found if isinstance(found, list) else []:
        if not isinstance(inc, dict):
            continue
        out.append({
            "id": inc.get("id"), "summary": str(inc.get("summary") or ""),
            "span": f"{_s(inc.get('start_ms'))}-{_s(inc.get('end_ms'))} s",
            "counts": ", ".join(f"{k} {v}" for k, v in (inc.get("counts") or {}).items()),
            "timeline": [{"at": _s(e.get("at_ms")), "what": str(e.get("what") or ""),
                          "node": str(e.get("node") or ""), "text": str(e.get("text") or "")}
                         for e in inc.get("timeline") or [] if isinstance(e, dict)]})
    return out


def _s(ms: Any) -> str:
    return "?" if ms is None else f"{float(ms) / 1000:.1f}"


def _first_failing(trial: Mapping[str, Any] | None) -> str | None:
    runs = (trial or {}).get("runs") or []
    return next((r.get("run_dir") for r in runs if r.get("fails")), None)


def _spec(path: Path) -> TestSpec | None:
    try:
        return read_scenario(path) if path.is_file() else None
    except ScenarioFileError:
        return None


def page_data(shrink_dir: Path) -> dict[str, Any]:
    """Takes a shrink directory. Returns what the page shows, read from its files alone."""
    record = json.loads((shrink_dir / "shrink.json").read_text())
    original = _spec(shrink_dir / "original.toml")
    minimal = _spec(shrink_dir / "minimal.toml") if record.get("minimal") else None
    trials = record.get("trials") or []
    first = next((t for t in trials if t.get("reduction") == "original"), None)
    kept = [t for t in trials if t.get("kept")]
    last = kept[-1] if kept and minimal is not None else None
    return {
        "title": f"Shrinking {Path(record.get('finding', '')).name}",
        "record": record,
        "lines": side_by_side(original, minimal) if original is not None else [],
        "original_rate": first["rate"] if first else "-",
        "minimal_rate": record.get("minimal_rate") or "-",
        "original_incidents": incidents_of(record.get("finding")),
        "minimal_incidents": incidents_of(_first_failing(last)),
        "minimal_run": _first_failing(last) or "",
        "trials": trials,
    }


def render_page(shrink_dir: Path) -> str:
    """Takes a shrink directory. Returns its page's HTML."""
    return ENV.get_template("shrink.html.j2").render(**page_data(shrink_dir))


def write_page(shrink_dir: Path) -> Path:
    """Takes a shrink directory. Writes its shrink.html (atomically). Returns the path."""
    return write_atomic(shrink_dir / PAGE, render_page(shrink_dir))
