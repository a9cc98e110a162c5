"""Small HTML helpers shared by the run report and the store index.

Every page is one self-contained file: inline CSS, no scripts, relative links
only, every piece of text from a run escaped (`e`). Tables never hold an empty
cell: a missing value is written as `NA` or a short phrase saying why. The
layout fits a 1280-px-wide window: a 1200-px column, tables that wrap long
words, images scaled to the column.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

from checkers.verdict import is_weak

NA = "n/a"
MAX_TABLE_ROWS = 500

# verdict key -> (banner text, colour)
VERDICTS: dict[str, tuple[str, str]] = {
    "true": ("valid", "#2e7d32"),
    # A valid run whose faults tested nothing (checkers.verdict): never a pass, so never green.
    "weak": ("valid but weak", "#6a1b9a"),
    "false": ("INVALID", "#c62828"),
    "unknown": ("unknown", "#ef6c00"),
    "unchecked": ("not checked", "#757575"),
    "none": ("no results", "#757575"),
}
# Run and matrix directory names in the store: UTC timestamps.
STAMP_FORMATS = ("%Y%m%dT%H%M%S.%fZ", "%Y%m%dT%H%M%SZ")

CSS = """
* { box-sizing: border-box; }
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 1.5em auto;
       max-width: 1200px; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { margin: 0 0 0.1em 0; overflow-wrap: anywhere; }
h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; padding-bottom: 0.15em; }
h3 { margin: 1.2em 0 0.3em 0; }
.sub { color: #555; margin: 0 0 0.4em 0; overflow-wrap: anywhere; }
.banner { border-radius: 0.3em; padding: 0.6em 1em; margin: 0.6em 0 1em 0; color: #fff;
          display: flex; align-items: center; gap: 1em; }
.banner .verdict { font-size: 2em; font-weight: bold; white-space: nowrap; }
.banner p { margin: 0; font-size: 1.1em; }
.badge { display: inline-block; color: #fff; padding: 0 0.45em; border-radius: 0.2em;
         font-weight: bold; white-space: nowrap; }
table { border-collapse: collapse; margin: 0.4em 0 1em 0; max-width: 100%; }
table.wide { width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.22em 0.5em; text-align: left; vertical-align: top;
         overflow-wrap: break-word; }
td.nowrap { white-space: nowrap; }
td.why { color: #555; font-size: 0.9em; }
.cell-note { display: block; color: #555; font-size: 0.88em; font-weight: normal; }
.strength { margin: -0.4em 0 1em 0; }
.strength.weak { border-left: 4px solid #6a1b9a; padding: 0.1em 0 0.1em 0.8em; }
td.weak-cell { color: #6a1b9a; font-weight: 600; }
tr.mend td { background: #fff8e1; }
h4 { margin: 0.8em 0 0.2em 0; }
th { background: #f3f3f3; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
th.num { text-align: right; }
tr.bad td { color: #b71c1c; font-weight: 600; }
td.meaning { color: #555; }
td.sub-row { padding-left: 1.6em; }
tr.group th { background: #e8eef6; }
code { font-family: Menlo, Consolas, monospace; font-size: 0.9em; }
.ids code { display: inline-block; margin: 0 0.3em 0.2em 0; background: #f4f4f4;
            padding: 0 0.25em; border-radius: 0.15em; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; margin-right: 0.35em;
          vertical-align: -0.1em; border-radius: 0.1em; }
.nav { margin: 0.2em 0 0.6em 0; }
.note { color: #555; font-style: italic; }
.anomaly { border-left: 4px solid #c62828; padding: 0.1em 0 0.1em 0.8em; margin: 0.8em 0; }
.anomaly.allowed { border-left-color: #9e9e9e; }
.anomaly.unproven { border-left-color: #ef6c00; }
.anomaly h3 { margin-top: 0.2em; }
figure { margin: 0.6em 0 1.2em 0; }
figure img { display: block; width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { color: #555; font-size: 0.92em; margin-top: 0.2em; }
details { margin: 0.4em 0 1em 0; }
summary { cursor: pointer; color: #1f4e8c; }
ul.files { padding-left: 1.2em; }
ul.files li { margin: 0.15em 0; overflow-wrap: anywhere; }
"""


def as_dict(x: Any) -> dict[str, Any]:
    """Takes anything. Returns it when it is a dict, else an empty dict."""
    return x if isinstance(x, dict) else {}


def e(x: Any) -> str:
    """Takes anything. Returns its text, HTML-escaped (quotes too)."""
    return escape(str(x), quote=True)


def href(rel: str) -> str:
    """Takes a relative path. Returns it URL-quoted and escaped, for an href or src."""
    return escape(quote(rel), quote=True)


def link(rel: str, text: str) -> str:
    """Takes a relative path and a text. Returns an <a> to it."""
    return f'<a href="{href(rel)}">{e(text)}</a>'


def td(x: Any, num: bool = False, cls: str | None = None) -> str:
    """Takes a value (escaped here; an empty one becomes NA). Returns a <td>."""
    text = str(x) if x is not None and str(x).strip() else NA
    classes = " ".join(c for c in ("num" if num else None, cls) if c)
    return f'<td class="{classes}">{e(text)}</td>' if classes else f"<td>{e(text)}</td>"


def td_note(text: Any, note: Any = None, num: bool = False, cls: str | None = None) -> str:
    """Takes a value and a note beneath it (both escaped here; an empty value becomes NA, an
    empty note is left out). Returns a <td>."""
    main = str(text) if text is not None and str(text).strip() else NA
    under = (f'<span class="cell-note">{e(note)}</span>'
             if note is not None and str(note).strip() else "")
    classes = " ".join(c for c in ("num" if num else None, cls) if c)
    attr = f' class="{classes}"' if classes else ""
    return f"<td{attr}>{e(main)}{under}</td>"


def td_html(inner: str, num: bool = False) -> str:
    """Takes cell HTML, already escaped. Returns a <td>."""
    return f'<td class="num">{inner}</td>' if num else f"<td>{inner}</td>"


def table(
    headers: Iterable[str] | None,
    rows: Iterable[Iterable[str]],
    total: int | None = None,
    *,
    wide: bool = False,
    num_cols: Iterable[int] = (),
    row_classes: Iterable[str | None] | None = None,
) -> str:
    """Takes header texts (or None), rows of cell HTML (already escaped), how many rows there
    are in all, whether the table spans the column, and which header columns are numeric.

    Returns a table of at most MAX_TABLE_ROWS rows, noting how many of `total` were left out.
    """
    nums = set(num_cols)
    out = ['<table class="wide">' if wide else "<table>"]
    if headers is not None:
        cells = (
            f'<th class="num">{e(h)}</th>' if i in nums else f"<th>{e(h)}</th>"
            for i, h in enumerate(headers)
        )
        out.append("<tr>" + "".join(cells) + "</tr>")
    classes = iter(row_classes) if row_classes is not None else None
    n = 0
    for row in rows:
        cls = next(classes, None) if classes is not None else None
        if n >= MAX_TABLE_ROWS:
            break
        attr = f' class="{cls}"' if cls else ""
        out.append(f"<tr{attr}>" + "".join(row) + "</tr>")
        n += 1
    out.append("</table>")
    if total is not None and total > n:
        out.append(f'<p class="note">{total - n:,} more rows not shown.</p>')
    return "".join(out)


def valid_key(valid: Any) -> str:
    """Takes a "valid" value. Returns "true", "false" or "unknown"."""
    if valid is True:
        return "true"
    if valid is False:
        return "false"
    return "unknown"


def badge(key: str, text: str | None = None) -> str:
    """Takes a verdict key (VERDICTS) and optionally its text. Returns a coloured badge."""
    default, colour = VERDICTS.get(key, VERDICTS["unknown"])
    return f'<span class="badge" style="background:{colour}">{e(text or default)}</span>'


def swatch(colour: str) -> str:
    """Takes a CSS colour. Returns a small square of it."""
    return f'<span class="swatch" style="background:{e(colour)}"></span>'


def page(title: str, body: Iterable[str]) -> str:
    """Takes the page title and body parts (HTML). Returns the whole document."""
    head = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # No favicon request: a served store would log a 404 for every page.
        '<link rel="icon" href="data:,">'
        f"<title>{e(title)}</title><style>{CSS}</style></head><body>"
    )
    return head + "\n".join(p for p in body if p) + "\n</body></html>\n"


def write_atomic(path: Path, text: str) -> Path:
    """Writes text to path through a temporary file and a rename. Returns the path."""
    # A name of its own per writer: two runs may rewrite the store's index at once.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def count(x: Any) -> str:
    """Takes a count. Returns it with thousands separators, or NA when it is not a number."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return NA
    return f"{x:,}" if isinstance(x, int) or float(x).is_integer() else f"{x:,.3g}"


def seconds(ns: int) -> str:
    """Takes nanoseconds. Returns seconds with three decimals."""
    return f"{ns / 1e9:.3f}"


def size(n: int) -> str:
    """Takes a byte count. Returns it in B, KB, MB or GB."""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def verdict_of(valid: Any) -> str:
    """Takes a "valid" value, None when there is none. Returns a VERDICTS key."""
    return "none" if valid is None else valid_key(valid)


def results_key(results: Any) -> str:
    """Takes results.json's content (None or anything else when there is none). Returns its
    VERDICTS key: "weak" for a valid but weak run, else "true", "false" or "unknown"; "none"
    when it is not a JSON object."""
    if not isinstance(results, dict):
        return "none"
    return "weak" if is_weak(results) else valid_key(results.get("valid"))


@dataclass(frozen=True)
class Strength:
    """What a run's strength section says, as the pages show it: whether it is weak, why, and
    the one-line summary ("faults noticed 1 of 6, failovers 1, most messages at risk 2,846")."""

    weak: bool
    reason: str
    summary: str

    def line(self) -> str:
        """Returns "Test strength: <summary>." for a page."""
        return f"Test strength: {self.summary.rstrip('.')}." if self.summary else ""


def _summary_of(s: dict[str, Any]) -> str:
    said = s.get("summary")
    if isinstance(said, str) and said.strip():
        return said.strip()
    parts = []
    if as_int(s.get("faults")) is not None and as_int(s.get("noticed")) is not None:
        parts.append(f"faults noticed {s['noticed']:,} of {s['faults']:,}")
    if as_int(s.get("failovers")) is not None:
        parts.append(f"failovers {s['failovers']:,}")
    if as_int(s.get("max_at_risk")) is not None:
        parts.append(f"most messages at risk {s['max_at_risk']:,}")
    return ", ".join(parts)


def strength_of(results: Any) -> Strength | None:
    """Takes results.json's content. Returns its strength section as a Strength, or None when
    it has none (older runs). `weak` is the verdict's (checkers.verdict.is_weak): only a valid
    run is called weak."""
    s = results.get("strength") if isinstance(results, dict) else None
    if not isinstance(s, dict):
        return None
    return Strength(is_weak(results), str(s.get("reason") or "").strip(), _summary_of(s))


def row_strength(row: Any) -> Strength | None:
    """Takes a matrix row (a dict from matrix.json, or a harness.matrix.Row). Returns its
    strength, read leniently: `strength` (harness.matrix's summary text, or results.json's
    whole section), `weak_reason` (set only for a weak run), the judgement "weak", and the
    flat fields `weak`, `strength_reason` and `strength_summary`. None when the row says
    nothing of strength (older matrices)."""
    def get(key: str) -> Any:
        return row.get(key) if isinstance(row, dict) else getattr(row, key, None)

    s = get("strength")
    nested = s if isinstance(s, dict) else {}
    weak = (get("weak") is True or nested.get("weak") is True or get("judgement") == "weak"
            or bool(get("weak_reason")))
    reason = get("weak_reason") or get("strength_reason") or nested.get("reason") or ""
    summary = get("strength_summary") or (s if isinstance(s, str) else "") or (
        _summary_of(nested) if nested else "")
    if not (weak or reason or summary or nested or get("weak") is False):
        return None
    # Only a valid run is weak (checkers.verdict): an invalid one's finding says more.
    weak = weak and get("valid") in (True, None)
    return Strength(weak, str(reason).strip(), str(summary).strip())


def parse_stamp(name: str) -> datetime | None:
    """Takes a run or matrix directory name (a UTC timestamp). Returns its time, or None."""
    for fmt in STAMP_FORMATS:
        try:
            return datetime.strptime(name, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def stamp_text(name: str) -> str:
    """Takes a directory name. Returns its time as "2026-11-23 10:15:00", else the name."""
    t = parse_stamp(name)
    return t.strftime("%Y-%m-%d %H:%M:%S") if t is not None else name


def read_json_quietly(path: Path) -> Any:
    """Takes a path. Returns its JSON, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def as_int(x: Any) -> int | None:
    """Takes anything. Returns it when it is an int (not a bool), else None."""
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def dup_text(dup: Any, unflagged: Any) -> str:
    """Takes a duplicate count and its unflagged share. Returns "3 (1)", "3" or "-"."""
    d, u = as_int(dup), as_int(unflagged)
    if d is None:
        return "-"
    return f"{d:,} ({u:,})" if u is not None else f"{d:,}"


# --- versions (test.json's and results.json's "versions": rabbitmq, erlang, and what grows) ---

MAX_VERSION_ITEMS = 6
# What a page shows where a run or a matrix row says nothing of its versions.
NO_VERSION = "—"


def version_value(v: Any) -> str:
    """Takes one version's value. Returns it as text: a list's items (the first few, then how
    many more), a dict's "key value" pairs, anything else as it is."""
    if isinstance(v, dict):
        v = [f"{k} {x}" for k, x in v.items()]
    if isinstance(v, list | tuple):
        shown = ", ".join(str(x) for x in v[:MAX_VERSION_ITEMS])
        more = len(v) - MAX_VERSION_ITEMS
        return shown + (f", … {more} more" if more > 0 else "")
    return str(v)


def versions_of(x: Any) -> list[tuple[str, str]]:
    """Takes a "versions" dict (anything else reads as none). Returns each key, in words, with
    its value as text, in the dict's order; keys without a value are left out."""
    if not isinstance(x, dict):
        return []
    return [(str(k).replace("_", " "), version_value(v)) for k, v in x.items()
            if v not in (None, "", [], {})]


def versions_line(x: Any) -> str:
    """Takes a "versions" dict. Returns every version it names, "rabbitmq 3.10.8, erlang
    Erlang/OTP 25.2.3", or "" when it names none."""
    return ", ".join(f"{k} {v}" for k, v in versions_of(x))


def row_versions(row: Any) -> dict[str, Any]:
    """Takes a matrix row (a dict from matrix.json, or a harness.matrix.Row). Returns its
    versions, read leniently: its `versions` dict, led by its `rabbitmq` release line when
    the dict has no rabbitmq key; {} when it has neither (older matrices)."""
    def get(key: str) -> Any:
        return row.get(key) if isinstance(row, dict) else getattr(row, key, None)

    found = get("versions")
    versions = dict(found) if isinstance(found, dict) else {}
    line = get("rabbitmq")
    if "rabbitmq" not in versions and isinstance(line, str | int | float) and str(line).strip():
        versions = {"rabbitmq": str(line), **versions}
    return versions


def version_cell_text(versions: Any) -> tuple[str, str]:
    """Takes a "versions" dict. Returns what a table's version cell says: the RabbitMQ version
    (else the first named), and beneath it the others; (NO_VERSION, "") when it names none."""
    items = versions_of(versions)
    if not items:
        return NO_VERSION, ""
    lead = next((i for i, (k, _v) in enumerate(items) if k == "rabbitmq"), 0)
    main = items.pop(lead)
    return (main[1] if main[0] == "rabbitmq" else f"{main[0]} {main[1]}"), \
        ", ".join(f"{k} {v}" for k, v in items)
