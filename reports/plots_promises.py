"""Plots of the checker's newer promises, drawn from the series results.json stores.

Each reads one section the history scan carries (`HistoryScan.checked`, as
the checker wrote it) and judges nothing: the outcome of each point is the
checker's own. They share the perf plots' time axis, layout and fault
shading (reports.plots):

- `plot_retry` -> retry.png: each return of the delayed-retry section's
  `delays` sample, its observed delay (reject to next delivery, ms) against
  the reject's time, beside its least delay min(min x count, max) less the
  tolerance, coloured by the checker's outcome;
- `plot_timeout` -> timeout.png: each held message of the consumer-timeout
  section's `held` sample, how long its consumer held it before the broker's
  cancel against the cancel's time, beside the timeout, coloured by what
  became of it (back flagged, dead-lettered, back unflagged, lost);
- `plot_metadata` -> metadata.png: per node of the metadata section's
  `timeline`, which probe outcomes (ok, refused 541, failed, no answer) came in
  each bucket of time, one lane per outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from reports.history_scan import HistoryScan
from reports.plots import _decorate, _legend, _new_axes, _no_data, _plain, _save

# The checkers' outcome names (checkers.retry, checkers.timeouts, checkers.metadata), coloured.
OUTCOME_COLOURS: dict[str, str] = {
    "redelivered": "#2ca02c", "dead_lettered": "#1f77b4", "early": "#d62728",
    "unflagged": "#ff7f0e", "count_low": "#e377c2", "past_limit": "#9467bd", "gone": "#8c0000", "lost": "#8c0000",
    "drain_incomplete": "#9e9e9e",
}
OUTCOME_LABELS: dict[str, str] = {
    "redelivered": "back flagged redelivered", "dead_lettered": "dead-lettered",
    "early": "early", "unflagged": "back unflagged",
    "count_low": "delivery count below its rejects", "past_limit": "past the delivery limit",
    "gone": "gone", "lost": "lost", "drain_incomplete": "not judged: drain incomplete",
}
PROBE_COLOURS: dict[str, str] = {"ok": "#2ca02c", "refused_541": "#d62728",
                                 "failed": "#9467bd", "no_answer": "#ff9f00"}
PROBE_LABELS: dict[str, str] = {"ok": "ok", "refused_541": "refused (541)",
                                "failed": "failed (other)", "no_answer": "no answer (info)"}
BOUND_COLOUR = "#555555"


def _sample(scan: HistoryScan, section: str, series: str) -> tuple[dict[str, Any], list[Any]]:
    """Takes a scan and a section's and its series' names. Returns the section and the series'
    sample ({} and [] when results.json has none)."""
    s = scan.checked.get(section)
    s = s if isinstance(s, dict) else {}
    found = s.get(series)
    sample = found.get("sample") if isinstance(found, dict) else None
    return s, sample if isinstance(sample, list) else []


def _of(section: Mapping[str, Any], series: str, kept: int) -> str:
    """Returns " (sample of K of N)" when the checker kept fewer points than there were."""
    found = section.get(series)
    total = found.get("of") if isinstance(found, dict) else None
    return f" (sample of {kept:,} of {total:,})" if isinstance(total, int) and total > kept else ""


def _points_by_outcome(ax: Any, points: list[tuple[float, float, str]]) -> list[Any]:
    """Draws (x, y, outcome) points, a colour per outcome. Returns their legend handles."""
    handles: list[Any] = []
    for outcome in OUTCOME_COLOURS:
        mine = [(x, y) for x, y, o in points if o == outcome]
        if not mine:
            continue
        colour = OUTCOME_COLOURS[outcome]
        ax.plot([x for x, _ in mine], [y for _, y in mine], linestyle="none", marker="o",
                markersize=4, color=colour, alpha=0.85, zorder=3)
        handles.append(Line2D([], [], linestyle="none", marker="o", color=colour,
                              label=_plain(f"{OUTCOME_LABELS[outcome]} ({len(mine):,})")))
    return handles


def plot_retry(scan: HistoryScan, path: Path, title: str) -> Path:
    """Takes a scan, the PNG path and a title. Returns the path, after drawing each sampled
    return's delay against the return's moment, with its least delay less the tolerance (a grey
    dash: a point below its dash is early), coloured by the checker's outcome."""
    section, sample = _sample(scan, "delayed_retry", "delays")
    tol = section.get("tolerance_ms") if isinstance(section.get("tolerance_ms"), int | float) \
        else 0
    fig, ax = _new_axes(f"{title}: delayed retry, delay of each return against its least delay"
                        + _of(section, "delays", len(sample)))
    ax.set_ylabel("return to next delivery (ms)")
    rows = [d for d in sample if isinstance(d, dict) and isinstance(d.get("ms"), int | float)
            and isinstance(d.get("delay_ms"), int | float)]
    handles: list[Any] = []
    bounds = [(d["ms"] / 1000, d["bound_ms"] - tol) for d in rows
              if isinstance(d.get("bound_ms"), int | float)]
    if bounds:
        ax.plot([x for x, _ in bounds], [y for _, y in bounds], linestyle="none", marker="_",
                markersize=14, markeredgewidth=2, color=BOUND_COLOUR, zorder=2)
        handles.append(Line2D([], [], linestyle="none", marker="_", markersize=14,
                              markeredgewidth=2, color=BOUND_COLOUR, label=_plain(
                                  f"least delay min(min x count, max) - {tol:g} ms")))
    handles += _points_by_outcome(ax, [(d["ms"] / 1000, d["delay_ms"], str(d.get("outcome")))
                                       for d in rows])
    if not rows:
        _no_data(ax, "no reject was followed by a delivery")
    ax.set_ylim(bottom=0)
    handles += _decorate(ax, scan)
    _legend(ax, handles, fontsize="x-small")
    return _save(fig, path)


def _missing(scan: HistoryScan, section: str, series: str) -> str | None:
    """Takes a scan, a results.json section and the series its plot reads. Returns why there is
    no plot (no such section; a section checked before it stored the series), or None."""
    if section not in scan.checked:
        return f"results.json has no {section} section"
    if series not in scan.checked[section]:
        return (f"results.json's {section} section has no {series} series (checked before it "
                "stored one): check the run again")
    return None


def retry_missing(scan: HistoryScan) -> str | None:
    """Takes a scan. Returns why there is no delayed-retry plot, or None."""
    return _missing(scan, "delayed_retry", "delays")


def plot_timeout(scan: HistoryScan, path: Path, title: str) -> Path:
    """Takes a scan, the PNG path and a title. Returns the path, after drawing, for each
    sampled held message, how long its consumer held it before the broker's cancel against
    the cancel's time, the timeout as a line, coloured by what the checker says became of
    it."""
    section, sample = _sample(scan, "consumer_timeout", "held")
    fig, ax = _new_axes(f"{title}: consumer timeout, how long each held message was held"
                        + _of(section, "held", len(sample)))
    ax.set_ylabel("delivery to broker cancel (ms)")
    rows = [h for h in sample if isinstance(h, dict) and isinstance(h.get("cancel_ms"), int | float)
            and isinstance(h.get("held_ms"), int | float)]
    handles: list[Any] = []
    settings = section.get("settings")
    timeout = settings.get("timeout_ms") if isinstance(settings, dict) else None
    if isinstance(timeout, int | float) and not isinstance(timeout, bool):
        ax.axhline(timeout, color=BOUND_COLOUR, linestyle="--", linewidth=1.5, zorder=2)
        handles.append(Line2D([], [], color=BOUND_COLOUR, linestyle="--", linewidth=1.5,
                              label=_plain(f"timeout ({timeout:,g} ms)")))
    handles += _points_by_outcome(ax, [(h["cancel_ms"] / 1000, h["held_ms"],
                                        str(h.get("outcome"))) for h in rows])
    if not rows:
        _no_data(ax, "the broker cancelled no consumer holding a message")
    top = max([h["held_ms"] for h in rows]
              + ([timeout] if isinstance(timeout, int | float) else []), default=0)
    ax.set_ylim(0, top * 1.15 if top > 0 else 1)
    handles += _decorate(ax, scan)
    _legend(ax, handles, fontsize="x-small")
    return _save(fig, path)


def timeout_missing(scan: HistoryScan) -> str | None:
    """Takes a scan. Returns why there is no consumer-timeout plot, or None."""
    return _missing(scan, "consumer_timeout", "held")


def _timeline(scan: HistoryScan) -> tuple[float, list[dict[str, Any]]]:
    """Returns the metadata timeline's bucket width (s) and its rows (node, t_ms, outcome)."""
    found = scan.checked.get("metadata", {}).get("timeline")
    tl: dict[str, Any] = found if isinstance(found, dict) else {}
    width = tl.get("bucket_ms")
    bucket = width if isinstance(width, int | float) and width > 0 else 1000
    rows = [r for r in tl.get("series") or [] if isinstance(r, dict)
            and isinstance(r.get("t_ms"), int | float) and r.get("outcome") in PROBE_COLOURS]
    return bucket / 1000, rows


def plot_metadata(scan: HistoryScan, path: Path, title: str) -> Path:
    """Takes a scan, the PNG path and a title. Returns the path, after drawing, per probed
    node, a band of four lanes (ok, refused 541, failed, no answer) filled in each bucket of
    time in which the probe of that node met that outcome, with its count in the legend."""
    bucket_s, rows = _timeline(scan)
    nodes = sorted({str(r.get("node")) for r in rows})
    cut = (" - the checker kept only the earliest buckets"
           if scan.checked["metadata"].get("timeline", {}).get("truncated") else "")
    fig, ax = _new_axes(f"{title}: metadata probe outcomes per node ({bucket_s:g} s buckets"
                        f"{cut})", height_in=max(2.6, 0.9 + 0.75 * len(nodes)))
    lanes = list(PROBE_COLOURS)
    handles: list[Any] = []
    for k, outcome in enumerate(lanes):
        mine = [r for r in rows if r["outcome"] == outcome]
        for y, node in enumerate(nodes):
            spans = [(r["t_ms"] / 1000, bucket_s) for r in mine if str(r.get("node")) == node]
            if spans:
                ax.broken_barh(spans, (y - 0.4 + 0.2 * k, 0.18), color=PROBE_COLOURS[outcome],
                               linewidth=0, zorder=3)
        if mine:
            n = sum(int(r.get("n") or 0) for r in mine)
            handles.append(Patch(color=PROBE_COLOURS[outcome],
                                 label=_plain(f"{PROBE_LABELS[outcome]} ({n:,})")))
    ax.set_yticks(range(len(nodes)), [_plain(n) for n in nodes])
    ax.set_ylim(-0.6, max(len(nodes), 1) - 0.4)
    ax.invert_yaxis()
    if not rows:
        _no_data(ax, "no probe op completed")
    handles += _decorate(ax, scan)
    _legend(ax, handles, fontsize="x-small")
    return _save(fig, path)


def metadata_missing(scan: HistoryScan) -> str | None:
    """Takes a scan. Returns why there is no metadata plot, or None."""
    return _missing(scan, "metadata", "timeline")
