"""The plot of the harness's own memory over a run, drawn from health.jsonl's samples.

`plot_health` -> health.png: the resident memory of the controller, of its
worker processes and of both (MiB), sample by sample (reports.report_health
reads them), on the history's time axis (seconds since the test started:
test.json's `history_start_unix`), with the main phase's start and end as
dotted lines and, with a history, the fault windows shaded as the other plots
shade them (reports.plots). It judges nothing: whether the memory grew is
results.json's health section's word, which the caption and the page give.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.lines import Line2D

from history.health import Sample
from reports.history_scan import HistoryScan
from reports.plots import _decorate, _legend, _new_axes, _no_data, _save
from reports.report_health import MainPhase

FILE_NAME = "health.png"
HEADING = "The harness's memory"
CAPTION = ("The harness's own resident memory, a sample every 10 s (health.jsonl): its "
           "controller, its worker processes (lazyfs, Spark's JVM and Python workers; never the "
           "brokers) and both together; the main phase between the dotted lines, fault periods "
           "shaded. Whether it grew is results.json's health section's judgement, above.")
SERIES: tuple[tuple[str, str, str], ...] = (
    ("controller", "controller_mb", "#1f77b4"),
    ("workers", "workers_mb", "#ff7f0e"),
    ("both", "total_mb", "#2ca02c"),
)
PHASE_COLOUR = "#000000"  # apart from the drain's grey dashes (reports.plots)


def plot_health(samples: Sequence[Sample], phase: MainPhase, scan: HistoryScan | None,
                path: Path, title: str) -> Path:
    """Takes health.jsonl's samples, the main phase, the history's scan (None: no history, so
    no fault shading), the PNG path and a title. Returns the path, after drawing each series
    of SERIES over time (s since the history's start, else since the first sample)."""
    origin = phase.origin if phase.origin is not None else (
        samples[0].at_unix if samples else 0.0)
    fig, ax = _new_axes(f"{title}: the harness's resident memory ({len(samples):,} samples)")
    ax.set_ylabel("resident memory (MiB)")
    if phase.origin is None:
        ax.set_xlabel("Time since the first sample (s)")
    xs = [s.at_unix - origin for s in samples]
    handles: list[Any] = []
    for label, attr, colour in SERIES:
        ys = [getattr(s, attr) for s in samples]
        if ys:
            ax.plot(xs, ys, color=colour, marker="o", markersize=3, linewidth=1.4, zorder=3)
            handles.append(Line2D([], [], color=colour, marker="o", markersize=3,
                                  label=f"{label} (peak {max(ys):,.0f} MiB)"))
    for at in (phase.start, phase.end):
        if at is not None:
            ax.axvline(at - origin, color=PHASE_COLOUR, linestyle=":", linewidth=1.4, zorder=2)
    if phase.start is not None or phase.end is not None:
        handles.append(Line2D([], [], color=PHASE_COLOUR, linestyle=":", linewidth=1.4,
                              label="main phase: start, end"))
    if not samples:
        _no_data(ax, "health.jsonl holds no sample")
    ax.set_ylim(bottom=0)
    if scan is not None and phase.origin is not None:
        handles += _decorate(ax, scan)  # it sets the history's span; the samples go on to the check
        ax.set_xlim(0, max([ax.get_xlim()[1], *(x * 1.01 for x in xs)]))
    _legend(ax, handles, fontsize="x-small")
    return _save(fig, path)
