"""The shrink page: a finding's original and minimal tests side by side, with their incidents.

Reads only stored files: a shrink directory's shrink.json (harness.shrink writes
it) and, through the run directories shrink.json names, each run's results.json
(its `incidents`, harness.incidents). The original and the minimal test come in
as plain data, a `Shape` each (their fault schedules and workload settings),
which harness.shrink reads from original.toml and minimal.toml: this room never
imports the code that ran the tests. The original's incidents are the
finding's own; the minimal test's are those of its first failing replay. The
page is a Jinja2 template (templates/shrink.html.j2) with autoescaping on, fed
plain data (`side_by_side`, `incidents_of`): nothing from a file reaches the
page unescaped; the minimal scenario file is shown as stored, beside a link to it.
`write_page(shrink_dir, original, minimal)` draws it again at
any time (harness.shrink.write_page reads the shapes and calls it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from history.files import write_atomic

PAGE = "shrink.html"
RESULTS = "results.json"
ENV = Environment(loader=PackageLoader("reports", "templates"), autoescape=True,
                  undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
DROPPED = "dropped"

Fault = tuple[float, str, float]


@dataclass(frozen=True)
class Shape:
    """A test as the page compares it, plain data: its fault schedule ((start s, entry,
    duration s) in order) and its workload's settings ((what, value) in the table's order:
    main phase, backlog, publishers, consumers, queue, clients that stay, seed)."""

    schedule: tuple[Fault, ...]
    settings: tuple[tuple[str, str], ...]


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


def side_by_side(original: Shape, minimal: Shape | None) -> list[Line]:
    """Takes the original's and the minimal test's shapes (None: none yet). Returns the table's
    lines:
    each original fault beside what became of it (the minimal's faults are the original's,
    some dropped, in order, so they are matched by entry in order), the main phase and the
    workload's shape."""
    kept = list(minimal.schedule) if minimal is not None else []
    lines: list[Line] = []
    for i, item in enumerate(original.schedule):
        match = next((k for k, m in enumerate(kept) if m[1] == item[1]), None)
        became = "-" if minimal is None else DROPPED if match is None else _fault(kept[match])
        if match is not None:
            kept = kept[match + 1:]
        lines.append(Line(f"fault {i + 1}", _fault(item), became))
    theirs = dict(minimal.settings) if minimal is not None else {}
    for name, value in original.settings:
        lines.append(Line(name, value, "-" if minimal is None else theirs.get(name, "-")))
    return lines


def incidents_of(run_dir: str | Path | None) -> list[dict[str, Any]]:
    """Takes a run directory (None: none). Returns its results.json's incidents, each as the
    page shows it (summary, span, counts, timeline), [] when there are none to read."""
    path = Path(run_dir) / RESULTS if run_dir else None
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


def file_text(path: Path) -> str | None:
    """Takes a scenario file's path. Returns its text as stored (None when it cannot be read):
    the page shows the file a user would run."""
    try:
        return path.read_text(encoding="utf-8") if path.is_file() else None
    except (OSError, UnicodeDecodeError):
        return None


def page_data(shrink_dir: Path, original: Shape | None, minimal: Shape | None
              ) -> dict[str, Any]:
    """Takes a shrink directory and the original's and the minimal test's shapes (None: not
    known). Returns what the page shows."""
    record = json.loads((shrink_dir / "shrink.json").read_text())
    minimal = minimal if record.get("minimal") else None
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
        "minimal_file": file_text(shrink_dir / "minimal.toml") if minimal is not None else None,
        "trials": trials,
    }


def render_page(shrink_dir: Path, original: Shape | None, minimal: Shape | None) -> str:
    """Takes what `page_data` takes. Returns the page's HTML."""
    return ENV.get_template("shrink.html.j2").render(**page_data(shrink_dir, original, minimal))


def write_page(shrink_dir: Path, original: Shape | None, minimal: Shape | None) -> Path:
    """Takes what `page_data` takes. Writes the directory's shrink.html (atomically). Returns
    the path."""
    return write_atomic(shrink_dir / PAGE, render_page(shrink_dir, original, minimal))
