"""The report for a stored run: perf plots and one self-contained report.html.

`render(run_dir)` reads what the store holds (shared/DESIGN.md: test.json,
history.jsonl, results.json, harness.log, nodes/<node>/), any of which may be
missing, scans the history once (harness.plots, bounded memory), writes
latency.png, rate.png and report.html into the run directory, and returns the
written paths. `report_html` is the pure part: it takes the loaded inputs and
returns the page. The page has inline CSS, no scripts, and refers to the
images and files by relative names only, so a copied run directory stays
readable offline. Every piece of text from the run is escaped.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

from harness.plots import (
    DEFAULT_MAX_POINTS,
    NS_PER_S,
    FaultWindow,
    HistoryScan,
    fault_colour,
    plot_latency,
    plot_rate,
    scan_history,
)

log = logging.getLogger(__name__)

LATENCY_PNG = "latency.png"
RATE_PNG = "rate.png"
REPORT_HTML = "report.html"
LINKED_FILES = ("test.json", "history.jsonl", "results.json", "harness.log")

MAX_LIST_ITEMS = 20
MAX_JSON_CHARS = 400
MAX_TABLE_ROWS = 500
MAX_NODE_FILES = 50
# test.json keys shown first in the spec table, when present.
SPEC_KEYS_FIRST = ("name", "seed", "workload", "nemesis", "time_limit", "nodes", "cluster")

_NAV = (
    '<p class="nav"><a href="#test">test</a> · <a href="#results">results</a> · '
    '<a href="#nemesis">nemesis</a> · <a href="#events">harness events</a> · '
    '<a href="#plots">plots</a> · <a href="#history">history</a> · <a href="#files">files</a></p>'
)

_VERDICTS: dict[str, tuple[str, str]] = {
    # verdict key -> (text, colour)
    "true": ("valid", "#2e7d32"),
    "false": ("INVALID", "#c62828"),
    "unknown": ("unknown", "#ef6c00"),
    "unchecked": ("not checked", "#757575"),
}

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1300px; padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; word-break: break-all; }
.sub { color: #666; margin-top: 0; }
.verdict { display: inline-block; font-size: 2.4em; font-weight: bold; color: #fff;
           padding: 0.2em 0.8em; border-radius: 0.25em; margin: 0.3em 0; }
.badge { display: inline-block; color: #fff; padding: 0 0.5em; border-radius: 0.2em; font-weight: bold; }
table { border-collapse: collapse; margin: 0.5em 0 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font-family: Menlo, Consolas, monospace; font-size: 0.9em; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; margin-right: 0.4em; vertical-align: middle; }
.nav { margin: 0.2em 0 0.8em 0; }
.note { color: #666; font-style: italic; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
"""


@dataclass(frozen=True)
class Loaded:
    """A JSON file of the run: whether it exists, its data, or why it could not be read."""

    data: Any = None
    present: bool = False
    error: str | None = None


@dataclass(frozen=True)
class RunFiles:
    """Which files of the run directory exist: top-level files and per-node file lists."""

    files: tuple[str, ...] = ()
    nodes: dict[str, list[str]] = field(default_factory=dict)


def load_json(path: Path) -> Loaded:
    """Takes a path. Returns its decoded JSON, or a Loaded saying it is absent or unreadable."""
    if not path.exists():
        return Loaded()
    try:
        return Loaded(json.loads(path.read_text(encoding="utf-8")), present=True)
    except (OSError, ValueError) as e:
        log.warning("cannot read %s: %s", path, e)
        return Loaded(present=True, error=str(e))


def list_run_files(run_dir: Path) -> RunFiles:
    """Takes a run directory. Returns which linkable files and node log directories it holds."""
    files = tuple(name for name in LINKED_FILES if (run_dir / name).is_file())
    nodes: dict[str, list[str]] = {}
    nodes_dir = run_dir / "nodes"
    if nodes_dir.is_dir():
        for node in sorted(p for p in nodes_dir.iterdir() if p.is_dir()):
            names: list[str] = []
            for root, _dirs, fnames in os.walk(node):
                for fname in sorted(fnames):
                    names.append(str((Path(root) / fname).relative_to(node)))
                if len(names) >= MAX_NODE_FILES:
                    break
            nodes[node.name] = sorted(names)[:MAX_NODE_FILES]
    return RunFiles(files, nodes)


def verdict_key(results: Loaded) -> str:
    """Takes the loaded results. Returns "true", "false", "unknown" or "unchecked"."""
    if not results.present or results.error is not None or not isinstance(results.data, dict):
        return "unchecked"
    return _valid_key(results.data.get("valid", "unknown"))


def _valid_key(valid: Any) -> str:
    if valid is True:
        return "true"
    if valid is False:
        return "false"
    return "unknown"


# --- small HTML helpers -------------------------------------------------------------


def _e(x: Any) -> str:
    return escape(str(x), quote=True)


def _href(rel: str) -> str:
    return escape(quote(rel), quote=True)


def _compact(value: Any, limit: int = MAX_JSON_CHARS) -> str:
    try:
        text = json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text):,} chars)"


def _secs(ns: int) -> str:
    return f"{ns / NS_PER_S:.3f}"


def _badge(valid: Any) -> str:
    text, colour = _VERDICTS[_valid_key(valid)]
    return f'<span class="badge" style="background:{colour}">{_e(text)}</span>'


def _table(
    headers: Iterable[str] | None, rows: Iterable[Iterable[str]], total: int | None = None
) -> str:
    """Takes header texts (or None) and rows of cell HTML, already escaped.

    Returns a table of at most MAX_TABLE_ROWS rows, noting how many of `total` were left out.
    """
    out = ["<table>"]
    if headers is not None:
        out += ["<tr>", *(f"<th>{_e(h)}</th>" for h in headers), "</tr>"]
    n = 0
    for row in rows:
        if n >= MAX_TABLE_ROWS:
            break
        out.append("<tr>" + "".join(row) + "</tr>")
        n += 1
    out.append("</table>")
    if total is not None and total > n:
        out.append(f'<p class="note">{total - n:,} more rows not shown.</p>')
    return "".join(out)


def _td(x: Any, num: bool = False) -> str:
    return f'<td class="num">{_e(x)}</td>' if num else f"<td>{_e(x)}</td>"


def _value_cell(key: str, value: Any) -> str:
    """Returns a <td> for one field of a results section or spec: scalars plain, lists truncated."""
    if key == "valid":
        return f"<td>{_badge(value)}</td>"
    if isinstance(value, bool) or value is None:
        return _td(json.dumps(value))
    if isinstance(value, int | float):
        return _td(f"{value:,}" if isinstance(value, int) else f"{value:g}", num=True)
    if isinstance(value, str):
        return _td(value)
    if isinstance(value, list):
        shown = [
            _e(x) if isinstance(x, str | int | float) else f"<code>{_e(_compact(x))}</code>"
            for x in value[:MAX_LIST_ITEMS]
        ]
        more = len(value) - len(shown)
        tail = f' <span class="note">… {more:,} more</span>' if more > 0 else ""
        sep = (
            "<br>"
            if any(not isinstance(x, str | int | float) for x in value[:MAX_LIST_ITEMS])
            else ", "
        )
        return f"<td>{sep.join(shown)}{tail}</td>"
    return f"<td><code>{_e(_compact(value))}</code></td>"


def _field_rows(d: dict[str, Any]) -> list[list[str]]:
    """Orders a section's fields: valid, then scalars, then lists and objects."""

    def rank(item: tuple[str, Any]) -> int:
        k, v = item
        if k == "valid":
            return 0
        return 2 if isinstance(v, list | dict) else 1

    items = sorted(d.items(), key=rank)
    rows = []
    for k, v in items:
        label = f"{k} ({len(v):,})" if isinstance(v, list) else str(k)
        rows.append([f"<th>{_e(label)}</th>", _value_cell(str(k), v)])
    return rows


# --- sections -------------------------------------------------------------------------


def _verdict_section(results: Loaded) -> str:
    text, colour = _VERDICTS[verdict_key(results)]
    out = [f'<div class="verdict" style="background:{colour}">{_e(text)}</div>']
    if not results.present:
        out.append('<p class="note">No results.json: the run has not been checked.</p>')
    elif results.error is not None:
        out.append(f'<p class="note">results.json is unreadable: {_e(results.error)}</p>')
    elif not isinstance(results.data, dict):
        out.append('<p class="note">results.json is not a JSON object.</p>')
    else:
        sections = [(k, v) for k, v in results.data.items() if isinstance(v, dict)]
        if sections:
            out.append(
                _table(
                    ["checker", "valid"],
                    (
                        [_td(k), f"<td>{_badge(v.get('valid', 'unknown'))}</td>"]
                        for k, v in sections
                    ),
                )
            )
    return "".join(out)


def _spec_section(spec: Loaded) -> str:
    out = ['<h2 id="test">Test</h2>']
    if not spec.present:
        return out[0] + '<p class="note">No test.json.</p>'
    if spec.error is not None:
        return out[0] + f'<p class="note">test.json is unreadable: {_e(spec.error)}</p>'
    data = spec.data
    if isinstance(data, dict):
        flat = _flatten(data)
        first = [k for k in SPEC_KEYS_FIRST if k in flat]
        keys = first + [k for k in flat if k not in first]
        out.append(
            _table(
                ["field", "value"],
                ([f"<th>{_e(k)}</th>", _value_cell(k, flat[k])] for k in keys),
                len(keys),
            )
        )
    full = json.dumps(data, indent=2, sort_keys=True, default=str)
    out.append(f"<details><summary>Full test.json</summary><pre>{_e(full)}</pre></details>")
    return "".join(out)


def _flatten(d: dict[str, Any], prefix: str = "", depth: int = 0) -> dict[str, Any]:
    """Flattens nested objects two levels deep into dotted keys, for the spec table."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v and depth < 2:
            out.update(_flatten(v, key + ".", depth + 1))
        else:
            out[key] = v
    return out


def _results_section(results: Loaded) -> str:
    out = ['<h2 id="results">Results</h2>']
    if not results.present or results.error is not None or not isinstance(results.data, dict):
        return out[0] + '<p class="note">Not checked.</p>'
    others: dict[str, Any] = {}
    for name, section in results.data.items():
        if isinstance(section, dict):
            out.append(f"<h3>{_e(name)} {_badge(section.get('valid', 'unknown'))}</h3>")
            out.append(_table(["field", "value"], _field_rows(section)))
        elif name != "valid":
            others[name] = section
    if others:
        out.append("<h3>Other fields</h3>")
        out.append(_table(["field", "value"], _field_rows(others)))
    return "".join(out)


def _target(w: FaultWindow) -> str:
    """Returns what a fault hit: its grudge, its nodes or its node, as short text."""
    v = w.value if isinstance(w.value, dict) else {}
    grudge = v.get("grudge")
    if isinstance(grudge, dict) and grudge:
        return "; ".join(
            f"{n} cut from {', '.join(map(str, cut)) if isinstance(cut, list) else cut}"
            for n, cut in grudge.items()
        )
    for key in ("nodes", "targets", "target", "node"):
        t = v.get(key)
        if isinstance(t, list) and t:
            return ", ".join(map(str, t))
        if t:
            return str(t)
    if w.node:
        return w.node
    if w.value is not None and not isinstance(w.value, dict):
        return str(w.value)
    return ""


def _windows_section(scan: HistoryScan | None) -> str:
    out = ['<h2 id="nemesis">Nemesis</h2>']
    if scan is None:
        return out[0] + '<p class="note">No history.</p>'
    if not scan.windows:
        out.append('<p class="note">No faults.</p>')
    else:
        rows = []
        for i, w in enumerate(scan.windows, 1):
            fault = w.value.get("fault", w.f) if isinstance(w.value, dict) else w.f
            rows.append(
                [
                    _td(i, num=True),
                    f'<td><span class="swatch" style="background:{fault_colour(w.kind)}"></span>'
                    f"{_e(w.kind)}</td>",
                    _td(fault),
                    _td(_target(w)),
                    _td(_secs(w.start_ns), num=True),
                    _td(_secs(w.end_ns), num=True),
                    _td(f"{(w.end_ns - w.start_ns) / NS_PER_S:.3f}", num=True),
                    _td(w.closed_by or "end of history"),
                    f"<td><code>{_e(_compact(w.value, 200))}</code></td>",
                ]
            )
        headers = [
            "#",
            "kind",
            "fault",
            "target",
            "start s",
            "end s",
            "duration s",
            "ended by",
            "value",
        ]
        out.append(_table(headers, rows, len(rows)))
    if scan.nemesis_failures:
        out.append("<h3>Failed nemesis ops</h3>")
        rows = [
            [
                _td(_secs(op.time), num=True),
                _td(op.f),
                _td(op.error or ""),
                f"<td><code>{_e(_compact(op.value, 200))}</code></td>",
            ]
            for op in scan.nemesis_failures
        ]
        out.append(_table(["time s", "f", "error", "value"], rows, len(rows)))
    return "".join(out)


def _events_section(scan: HistoryScan | None) -> str:
    out = ['<h2 id="events">Harness events</h2>']
    if scan is None or not scan.events:
        return out[0] + '<p class="note">None recorded.</p>'
    rows = []
    for op in scan.events:
        if op.f == "phase" and isinstance(op.value, dict):
            what = f"{op.value.get('phase')} {op.value.get('state')}"
        else:
            what = _compact(op.value, 200) if op.value is not None else ""
        rows.append(
            [
                _td(_secs(op.time), num=True),
                _td(op.f),
                _td(what),
                _td(op.node or ""),
                _td(op.error or ""),
            ]
        )
    out.append(
        _table(["time s", "event", "value", "node", "error"], rows, len(rows) + scan.events_dropped)
    )
    if scan.phases:
        out.append("<h3>Phases</h3>")
        out.append(
            _table(
                ["phase", "start s", "end s", "duration s"],
                (
                    [
                        _td(p.phase),
                        _td(_secs(p.start_ns), num=True),
                        _td(_secs(p.end_ns) + ("" if p.ended else " (no end)"), num=True),
                        _td(f"{(p.end_ns - p.start_ns) / NS_PER_S:.3f}", num=True),
                    ]
                    for p in scan.phases
                ),
            )
        )
    return "".join(out)


def _quantile(sorted_ys: list[float], q: float) -> float:
    return sorted_ys[min(len(sorted_ys) - 1, int(len(sorted_ys) * q))]


def _history_section(scan: HistoryScan | None) -> str:
    out = ['<h2 id="history">History</h2>']
    if scan is None:
        return out[0] + '<p class="note">No history.jsonl.</p>'
    facts = [
        ("ops", f"{scan.op_count:,}"),
        ("duration s", _secs(scan.end_ns)),
        ("unreadable lines", f"{scan.bad_lines:,}"),
        ("client ops never completed", f"{scan.unfinished:,}"),
    ]
    out.append(_table(None, ([f"<th>{_e(k)}</th>", _td(v, num=True)] for k, v in facts)))
    if scan.client_counts:
        out.append("<h3>Client ops</h3>")
        rows = [
            [_td(f), _td(t), _td(f"{n:,}", num=True)]
            for (f, t), n in sorted(
                scan.client_counts.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))
            )
        ]
        out.append(_table(["f", "type", "count"], rows, len(rows)))
    if scan.latency:
        sampled = scan.latency_kept < scan.latency_seen
        note = (
            f" (from a sample of {scan.latency_kept:,} of {scan.latency_seen:,})" if sampled else ""
        )
        out.append(f"<h3>Latency, ms{_e(note)}</h3>")
        rows = []
        for (f, t), res in sorted(scan.latency.items()):
            ys = sorted(res.ys)
            if not ys:
                continue
            qs = [_quantile(ys, q) for q in (0.5, 0.95, 0.99)] + [ys[-1]]
            rows.append(
                [
                    _td(f),
                    _td(t),
                    _td(f"{res.seen:,}", num=True),
                    *(_td(f"{q:.1f}", num=True) for q in qs),
                ]
            )
        out.append(_table(["f", "completion", "ops", "p50", "p95", "p99", "max"], rows))
    return "".join(out)


def _plots_section(images: Iterable[str], errors: Iterable[str]) -> str:
    imgs = [f'<p><img src="{_href(name)}" alt="{_e(name)}"></p>' for name in images]
    imgs += [f'<p class="note">Plot failed: {_e(err)}</p>' for err in errors]
    body = "".join(imgs) if imgs else '<p class="note">No plots (no history).</p>'
    return '<h2 id="plots">Plots</h2>' + body


def _links_section(files: RunFiles) -> str:
    items = [f'<li><a href="{_href(name)}">{_e(name)}</a></li>' for name in files.files]
    for node, names in files.nodes.items():
        sub = "".join(f'<li><a href="{_href(f"nodes/{node}/{n}")}">{_e(n)}</a></li>' for n in names)
        items.append(
            f'<li><a href="{_href(f"nodes/{node}/")}">nodes/{_e(node)}/</a>'
            + (f"<ul>{sub}</ul>" if sub else "")
            + "</li>"
        )
    body = "<ul>" + "".join(items) + "</ul>" if items else '<p class="note">None.</p>'
    return '<h2 id="files">Files</h2>' + body


def report_html(
    *,
    name: str,
    when: str,
    spec: Loaded,
    results: Loaded,
    scan: HistoryScan | None,
    images: Iterable[str],
    files: RunFiles,
    plot_errors: Iterable[str] = (),
) -> str:
    """Takes the test name and time, the loaded test.json and results.json, the
    history scan (None without a history), the image file names, the run's
    files and why any plot could not be drawn.

    Returns the report page as one HTML string.
    """
    title = f"{name} — {when}" if when else name
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(name)}</h1>",
        f'<p class="sub">{_e(when)}</p>' if when else "",
        _NAV,
        _verdict_section(results),
        _spec_section(spec),
        _results_section(results),
        _windows_section(scan),
        _events_section(scan),
        _plots_section(images, plot_errors),
        _history_section(scan),
        _links_section(files),
        "</body></html>\n",
    ]
    return "\n".join(p for p in parts if p)


def _name_and_time(run_dir: Path, spec: Loaded) -> tuple[str, str]:
    data = spec.data if isinstance(spec.data, dict) else {}
    name = data.get("name") or run_dir.resolve().parent.name or "test"
    when: Any = None
    for key in ("start_time", "started_at", "start", "timestamp", "time"):
        if isinstance(data.get(key), str | int | float) and not isinstance(data.get(key), bool):
            when = data[key]
            break
    return str(name), str(when if when is not None else run_dir.resolve().name)


def render(run_dir: Path, *, max_points: int = DEFAULT_MAX_POINTS, seed: int = 0) -> list[Path]:
    """Takes a run directory (and the latency sample size and seed).

    Returns the paths written into it: latency.png and rate.png when there is a
    history.jsonl, and report.html. test.json and results.json may be missing.
    """
    run_dir = Path(run_dir)
    spec = load_json(run_dir / "test.json")
    results = load_json(run_dir / "results.json")
    name, when = _name_and_time(run_dir, spec)
    written: list[Path] = []
    scan: HistoryScan | None = None
    plot_errors: list[str] = []
    history = run_dir / "history.jsonl"
    if history.is_file():
        scan = scan_history(history, max_points=max_points, seed=seed)
        for plot, file_name in ((plot_latency, LATENCY_PNG), (plot_rate, RATE_PNG)):
            try:
                written.append(plot(scan, run_dir / file_name, name))
            except Exception as e:  # a plot that cannot be drawn must not cost the page
                log.exception("cannot draw %s", file_name)
                plot_errors.append(f"{file_name}: {type(e).__name__}: {e}")
    else:
        log.warning("no history at %s; report without plots", history)
    page = report_html(
        name=name,
        when=when,
        spec=spec,
        results=results,
        scan=scan,
        images=[p.name for p in written],
        plot_errors=plot_errors,
        files=list_run_files(run_dir),
    )
    out = run_dir / REPORT_HTML
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out)
    written.append(out)
    log.info("report for %s: %s", run_dir, ", ".join(p.name for p in written))
    return written
