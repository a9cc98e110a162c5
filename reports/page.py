"""What every page of reports/ says the same way: verdict words and colours, counts, times,
sizes, a run's strength, its versions, and the atomic write of a page.

Plain data only: the HTML is the templates' (reports.html, reports/templates/).
Tables never hold an empty cell: a missing value is written as `NA` or a short
phrase saying why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from checkers.verdict import is_weak

NA = "n/a"

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


def as_dict(x: Any) -> dict[str, Any]:
    """Takes anything. Returns it when it is a dict, else an empty dict."""
    return x if isinstance(x, dict) else {}


def valid_key(valid: Any) -> str:
    """Takes a "valid" value. Returns "true", "false" or "unknown"."""
    if valid is True:
        return "true"
    if valid is False:
        return "false"
    return "unknown"


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


def as_number(x: Any) -> float | None:
    """Takes anything. Returns it as a float when it is an int or a float (not a bool), else
    None."""
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


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
