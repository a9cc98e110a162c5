"""Perf plots for a stored run, after Jepsen's checker/perf.clj, drawn from one history scan.

The scan (reports.history_scan, re-exported here) reads the history once in
bounded memory. Four plots share one time axis and one layout (same figure
width, same axes position, legend in the right margin), so that stacked in the
report their times line up:

- `plot_latency` -> latency.png: a point per completed client op, latency in
  ms on a log scale against time in s (ok/fail at their invocation, info where
  they ended);
- `plot_rate` -> rate.png: completions per second by f and type;
- `plot_depth` -> depth.png: sampled queue depth (ready and unacked, the
  largest any node reported), from `depth` ops;
- `plot_fates` -> fates.png: the checker's fates (results.json's fates:
  delivered in the main phase or the drain, duplicated, recovered, lost in
  red, ...) per bucket of publish time, one row per fate, fault periods
  shaded, queue depth beneath; the plot judges nothing itself;
- `plot_placement` -> placement.png: which node led the queue when, and which
  held its other replicas, from `placement` ops;
- `plot_priority_wait` -> priority.png (runs whose publishers gave priorities):
  a point per message, the time from its confirm to its first delivery in ms
  on a log scale against its confirm's time, coloured by the priority it was
  published with (the median of each in the legend).

Every plot shades fault windows in the colour of their kind (history.faults,
the one declaration of kinds), marks heals and hatches the drain phase, with
a legend. The report (reports.report) lists them, with their file names.
Matplotlib is used through its Agg canvas only.
"""

from __future__ import annotations

import logging
import math
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogFormatter, MaxNLocator

from checkers.fates import FATE_LABELS, FATE_ORDER
from history.faults import HEAL, kind_named
from history.files import replacing
from reports.history_scan import (
    DEFAULT_MAX_POINTS,
    NO_PRIORITY,
    NS_PER_MS,
    NS_PER_S,
    FaultWindow,
    HistoryScan,
    PlacementSample,
    fault_windows,
    scan_history,
)

log = logging.getLogger(__name__)

# More buckets than this are merged for the rate plot: a 1200 px wide plot cannot show more.
MAX_RATE_POINTS = 3_000
FAULT_ALPHA = 0.18
# Every figure: 12 in wide at 100 dpi, axes from 7% to 77% of the width, legend to the right.
FIG_WIDTH_IN = 12.0
DPI = 100
AXES_LEFT, AXES_RIGHT = 0.07, 0.77
MARGIN_TOP_IN, MARGIN_BOTTOM_IN = 0.45, 0.6

# Colours by completion type, as in Jepsen (but green for ok, as operators expect).
TYPE_COLOURS: dict[str, str] = {"ok": "#2ca02c", "fail": "#d62728", "info": "#ff9f00"}
# Delivery lines in the rate plot.
DELIVERY_COLOURS: dict[str, str] = {"consume": "#1f77b4", "drain": "#9467bd"}
DEPTH_COLOURS: dict[str, str] = {"ready": "#1f77b4", "unacked": "#ff7f0e", "error": "#d62728"}
PLACEMENT_COLOURS: dict[str, str] = {"leader": "#222222", "replica": "#9e9e9e"}
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
# The drain's rate beyond this multiple of the rest is left off the rate plot's scale.
DRAIN_OFF_SCALE = 3.0
# Client fs not drawn in the rate plot.
HIDDEN_RATE_FS = frozenset({"ack"})

Key = tuple[str, str]


def fault_colour(kind: str) -> str:
    """Takes a fault kind's name. Returns its shading colour (stable for unknown kinds too)."""
    return kind_named(kind).colour


def _plain(text: str) -> str:
    """Returns text with "$" escaped, so matplotlib shows it instead of parsing mathtext."""
    return text.replace("$", r"\$")


def _new_axes(title: str, height_in: float = 4.4) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(FIG_WIDTH_IN, height_in), dpi=DPI)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(
        left=AXES_LEFT,
        right=AXES_RIGHT,
        top=1 - MARGIN_TOP_IN / height_in,
        bottom=MARGIN_BOTTOM_IN / height_in,
    )
    ax = fig.add_subplot(1, 1, 1)
    ax.set_title(_plain(title))
    ax.set_xlabel("Time (s)")
    ax.grid(True, which="major", alpha=0.3)
    return fig, ax


def _decorate(ax: Axes, scan: HistoryScan) -> list[Any]:
    """Shades fault windows, marks heals and hatches the drain phase. Returns legend handles."""
    handles: list[Any] = []
    kinds: list[str] = []
    for w in scan.windows:
        ax.axvspan(
            w.start_ns / NS_PER_S,
            w.end_ns / NS_PER_S,
            color=fault_colour(w.kind),
            alpha=FAULT_ALPHA,
            linewidth=0,
            zorder=0,
        )
        if w.kind not in kinds:
            kinds.append(w.kind)
    for kind in kinds:
        k = kind_named(kind)
        handles.append(Patch(color=k.colour, alpha=FAULT_ALPHA + 0.1, label=_plain(k.label)))
    for h in scan.heals:
        ax.axvspan(h.start_ns / NS_PER_S, h.end_ns / NS_PER_S, color=HEAL.colour,
                   alpha=FAULT_ALPHA + 0.1, linewidth=0, zorder=0)
        ax.axvline(h.end_ns / NS_PER_S, color=HEAL.colour, linewidth=1.5, linestyle="-.")
    if scan.heals:
        handles.append(Line2D([], [], color=HEAL.colour, linewidth=1.5, linestyle="-.",
                              label=_plain(HEAL.label)))
    drains = [p for p in scan.phases if p.phase == "drain"]
    for p in drains:
        ax.axvspan(
            p.start_ns / NS_PER_S,
            p.end_ns / NS_PER_S,
            facecolor="none",
            edgecolor="#555555",
            hatch="//",
            linewidth=0,
            alpha=0.5,
            zorder=0,
        )
        ax.axvline(p.start_ns / NS_PER_S, color="#555555", linestyle="--", linewidth=1)
    if drains:
        handles.append(Patch(facecolor="none", edgecolor="#555555", hatch="//", label="drain"))
    ax.set_xlim(0, max(scan.end_ns / NS_PER_S, 1e-3) * 1.01)
    return handles


def _save(fig: Figure, path: Path) -> Path:
    with replacing(path) as tmp:
        fig.savefig(tmp, format="png")
    return path


def _legend(ax: Axes, handles: list[Any], fontsize: str = "small") -> None:
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=fontsize,
                  borderaxespad=0.0)


def _no_data(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666666")


def plot_latency(scan: HistoryScan, path: Path, title: str) -> Path:
    """Takes a scan, the PNG path and a title. Returns the path, after drawing the latency plot."""
    fig, ax = _new_axes(f"{title}: latency")
    ax.set_ylabel("Latency (ms)")
    handles: list[Any] = []
    fs = sorted({f for f, _ in scan.latency})
    markers = {f: _MARKERS[i % len(_MARKERS)] for i, f in enumerate(fs)}
    for f in fs:
        for typ in ("ok", "info", "fail"):
            res = scan.latency.get((f, typ))
            if res is None or not res.xs:
                continue
            ax.plot(
                res.xs,
                res.ys,
                linestyle="none",
                marker=markers[f],
                markersize=2.5 if res.seen > 5_000 else 4,
                alpha=0.5 if res.seen > 5_000 else 0.8,
                color=TYPE_COLOURS.get(typ, "#333333"),
                rasterized=True,
                zorder=2 if typ == "ok" else 3,
            )
            handles.append(
                Line2D(
                    [],
                    [],
                    linestyle="none",
                    marker=markers[f],
                    color=TYPE_COLOURS.get(typ, "#333333"),
                    label=_plain(f"{f} {typ} ({res.seen:,})"),
                )
            )
    if handles:
        ax.set_yscale("log")
        top = max(max(r.ys) for r in scan.latency.values() if r.ys)
        ax.set_ylim(top=top * 2)  # room above the slowest op, which otherwise sits on the frame
        # Plain numbers ("0.1", "10", "2000") rather than mathtext powers of ten.
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}"))
        ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.5)))
    else:
        _no_data(ax, "no completed client ops")
    if scan.latency_kept < scan.latency_seen:
        ax.set_title(
            _plain(
                f"{title}: latency (sample of {scan.latency_kept:,} of {scan.latency_seen:,} ops)"
            )
        )
    handles += _decorate(ax, scan)
    _legend(ax, handles)
    return _save(fig, path)


def _series_style(f: str, typ: str, i: int) -> tuple[str, str]:
    """Returns (label, colour) for a rate series."""
    if typ == "ok" and f in DELIVERY_COLOURS:
        return f, DELIVERY_COLOURS[f]
    if f == "publish" and typ in TYPE_COLOURS:
        return f"{f} {typ}", TYPE_COLOURS[typ]
    return f"{f} {typ}", f"C{i % 10}"


def rate_series(scan: HistoryScan) -> tuple[list[float], dict[Key, list[float]], float]:
    """Takes a scan. Returns (bucket midpoints in s, (f, type) -> ops/s per bucket, bucket width s).

    Buckets are merged when there are more than MAX_RATE_POINTS of them.
    """
    nb = scan.end_ns // scan.bucket_ns + 1
    merge = max(1, math.ceil(nb / MAX_RATE_POINTS))
    width_ns = scan.bucket_ns * merge
    n = nb // merge + 1
    xs = [(i + 0.5) * width_ns / NS_PER_S for i in range(n)]
    out: dict[Key, list[float]] = {}
    for key, counts in scan.rate.items():
        ys = [0.0] * n
        for b, c in counts.items():
            ys[min(b // merge, n - 1)] += c
        out[key] = [c * NS_PER_S / width_ns for c in ys]
    return xs, out, width_ns / NS_PER_S


def _rate_top(scan: HistoryScan, xs: list[float], series: dict[Key, list[float]]) -> float | None:
    """Returns a y limit that keeps the main phase readable when the drain, which reads the
    whole backlog at once, runs over DRAIN_OFF_SCALE times faster; None to keep the default."""
    drains = [(p.start_ns / NS_PER_S, p.end_ns / NS_PER_S) for p in scan.phases
              if p.phase == "drain"]
    if not drains:
        return None
    inside = [any(a <= x <= b for a, b in drains) for x in xs]
    outside_max = max((y for ys in series.values() for y, d in zip(ys, inside, strict=True)
                       if not d), default=0.0)
    overall = max((max(ys) for ys in series.values() if ys), default=0.0)
    if outside_max <= 0 or overall <= DRAIN_OFF_SCALE * outside_max:
        return None
    return outside_max * 1.3


def plot_rate(scan: HistoryScan, path: Path, title: str) -> Path:
    """Takes a scan, the PNG path and a title. Returns the path, after drawing the rate plot."""
    fig, ax = _new_axes(f"{title}: throughput")
    xs, series, width = rate_series(scan)
    # Acks follow their deliveries one for one: a line of their own would hide the deliveries.
    series = {k: v for k, v in series.items() if k[0] not in HIDDEN_RATE_FS}
    ax.set_ylabel(f"ops/s ({width:g} s buckets)")
    handles: list[Any] = []
    f_order = {"publish": 0, "consume": 1, "drain": 2}
    type_order = {"ok": 0, "fail": 1, "info": 2}
    keys = sorted(
        series,
        key=lambda k: (f_order.get(k[0], 4), k[0], type_order.get(k[1], 3), str(k[1])),
    )
    top = _rate_top(scan, xs, series)
    for i, (f, typ) in enumerate(keys):
        label, colour = _series_style(f, str(typ), i)
        peak = max(series[(f, typ)], default=0.0)
        if top is not None and peak > top:
            label += f" (peak {peak:,.0f}/s, off scale)"
        # Deliveries dashed: at a steady state they run level with publish ok.
        (line,) = ax.plot(
            xs,
            series[(f, typ)],
            color=colour,
            linewidth=1.4,
            linestyle="--" if f in DELIVERY_COLOURS else "-",
            label=_plain(label),
            zorder=2,
        )
        handles.append(line)
    if not handles:
        _no_data(ax, "no client completions")
    ax.set_ylim(bottom=0)
    if top is not None:
        ax.set_ylim(top=top)
    handles += _decorate(ax, scan)
    _legend(ax, handles)
    return _save(fig, path)


def plot_depth(scan: HistoryScan, path: Path, title: str) -> Path:
    """Takes a scan, the PNG path and a title. Returns the path, after drawing queue depth
    over time: ready and unacked messages (the largest any node reported) and, below the
    axis, a mark for each sample in which a node answered with an error."""
    fig, ax = _new_axes(f"{title}: queue depth")
    ax.set_ylabel("messages")
    handles: list[Any] = []
    samples = scan.depth
    for key, style in (("ready", "-"), ("unacked", "--")):
        pts = [(s.time_ns / NS_PER_S, getattr(s, key)) for s in samples]
        xs = [x for x, y in pts if y is not None]
        ys = [y for _x, y in pts if y is not None]
        if xs:
            (line,) = ax.plot(xs, ys, color=DEPTH_COLOURS[key], linestyle=style, linewidth=1.6,
                              marker="." if len(xs) < 200 else None, markersize=4,
                              label=f"{key} (max over nodes)", zorder=2)
            handles.append(line)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    failed = [(s.time_ns / NS_PER_S, ", ".join(s.errors)) for s in samples if s.errors]
    if failed:
        ax.plot([x for x, _ in failed], [0] * len(failed), linestyle="none", marker="x",
                color=DEPTH_COLOURS["error"], markersize=6, clip_on=False, zorder=3)
        handles.append(Line2D([], [], linestyle="none", marker="x", color=DEPTH_COLOURS["error"],
                              label=f"a node did not answer ({len(failed)})"))
    if not samples:
        _no_data(ax, "no depth samples")
    handles += _decorate(ax, scan)
    _legend(ax, handles)
    return _save(fig, path)


FATE_COLOURS: dict[str, str] = {
    "delivered": "#2ca02c", "delivered_in_drain": "#98df8a",
    "redelivered_duplicated": "#ffbb78", "unflagged_duplicated": "#ff7f0e",
    "recovered": "#1f77b4", "delivered_failed": "#9467bd", "unconfirmed": "#7f7f7f",
    "unproven": "#e6a0a0", "lost": "#d62728",
}
FATE_ROWS: dict[str, str] = {
    "delivered": "main", "delivered_in_drain": "drain", "redelivered_duplicated": "flagged dup",
    "unflagged_duplicated": "DUPLICATED", "recovered": "recovered",
    "delivered_failed": "after nack", "unconfirmed": "unconfirmed", "unproven": "unproven",
    "lost": "LOST",
}
# Legend labels wrap at this many characters, so the legend fits the right margin.
LEGEND_WRAP = 30


def _wrapped(label: str) -> str:
    return "\n".join(textwrap.wrap(_plain(label), LEGEND_WRAP)) or label


def plot_fates(scan: HistoryScan, path: Path, title: str) -> Path:
    """Takes a scan, the PNG path and a title. Returns the path, after drawing what the checker
    said became of the messages (results.json's fates, checkers.fates; none drawn when
    the results have none): one row per fate, a bar per bucket of publish time, its height
    the bucket's count against the row's largest (each row its own scale, so a handful of
    lost messages shows as plainly as a million delivered ones; totals in the legend); fault
    periods shaded; beneath, on the same time axis, the sampled queue depth."""
    height = 6.4
    fig = Figure(figsize=(FIG_WIDTH_IN, height), dpi=DPI)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=AXES_LEFT, right=AXES_RIGHT, top=1 - MARGIN_TOP_IN / height,
                        bottom=MARGIN_BOTTOM_IN / height, hspace=0.08)
    grid = fig.add_gridspec(2, 1, height_ratios=[3, 1])
    ax = fig.add_subplot(grid[0])
    below = fig.add_subplot(grid[1], sharex=ax)
    ax.grid(True, which="major", axis="x", alpha=0.3)
    ax.tick_params(labelbottom=False)
    fates = scan.fates
    scale = "" if fates is None else f" ({fates.bucket_s:g} s buckets, each row to its own scale)"
    ax.set_title(_plain(f"{title}: what became of the messages, by publish time{scale}"))
    rows = [f for f in FATE_ORDER if fates is not None and fates.series.get(f)]
    handles: list[Any] = []
    for y, fate in enumerate(rows):
        assert fates is not None
        pts = fates.series[fate]
        top = max(n for _t, n in pts)
        ax.bar([t for t, _n in pts], [0.8 * n / top for _t, n in pts], bottom=y - 0.4,
               width=fates.bucket_s, align="edge", color=FATE_COLOURS.get(fate, "#333333"),
               linewidth=0, zorder=3 if fate == "lost" else 2)
        total = fates.totals.get(fate, sum(n for _t, n in pts))
        handles.append(Patch(color=FATE_COLOURS.get(fate, "#333333"),
                             label=_wrapped(f"{FATE_LABELS.get(fate, fate)} ({total:,})")))
    ax.set_yticks(range(len(rows)), [FATE_ROWS.get(r, r) for r in rows], fontsize=8)
    ax.set_ylim(-0.6, max(len(rows), 1) - 0.4)
    if fates is None:
        _no_data(ax, "results.json has no message fates: check the run again "
                     "(python -m harness check RUN_DIR)")
    elif not rows:
        _no_data(ax, "no published messages")
    handles += _decorate(ax, scan)
    _legend(ax, handles, fontsize="x-small")
    below.set_ylabel("queue depth", fontsize=8)
    depth = [(s.time_ns / NS_PER_S, s.ready) for s in scan.depth if s.ready is not None]
    if depth:
        below.plot([x for x, _ in depth], [y for _, y in depth], color=DEPTH_COLOURS["ready"],
                   linewidth=1.4)
    below.set_ylim(bottom=0)
    _decorate(below, scan)
    below.set_xlabel("time (s) the message was published")
    return _save(fig, path)


def fates_missing(scan: HistoryScan) -> str | None:
    """Takes a scan. Returns why there is no fates plot to draw (no message published), or None."""
    published = scan.client_counts.get(("publish", "invoke"), 0)
    return None if published or scan.fates is not None else "no published messages in the history"


def _priority_order(label: str) -> tuple[int, int]:
    """Orders priority labels from the highest down, "none" where RabbitMQ 4.3 counts it (4,
    after a 4 of its own)."""
    return (-4, 1) if label == NO_PRIORITY else (-int(label), 0)


def plot_priority_wait(scan: HistoryScan, path: Path, title: str) -> Path:
    """Takes a scan, the PNG path and a title. Returns the path, after drawing the time from
    each message's confirm to its first delivery (ms, log scale) against its confirm's time,
    a colour per priority it was published with, highest first in the legend with its count
    and median; fault periods shaded."""
    fig, ax = _new_axes(f"{title}: time from confirm to first delivery, by priority")
    ax.set_ylabel("confirm to first delivery (ms)")
    handles: list[Any] = []
    labels = sorted(scan.priority_wait, key=_priority_order)
    cmap = colormaps["viridis"]
    for i, label in enumerate(labels):
        res = scan.priority_wait[label]
        colour = cmap(i / max(len(labels) - 1, 1) * 0.9)
        ax.plot(res.xs, res.ys, linestyle="none", marker=".", markersize=3 if res.seen > 5_000
                else 5, alpha=0.5 if res.seen > 5_000 else 0.8, color=colour, rasterized=True)
        ys = sorted(res.ys)
        median = ys[(len(ys) - 1) // 2] if ys else None
        name = "no priority" if label == NO_PRIORITY else f"priority {label}"
        handles.append(Line2D([], [], linestyle="none", marker="o", color=colour, label=_plain(
            f"{name} ({res.seen:,}; median {median:.3g} ms)" if median is not None
            else f"{name} ({res.seen:,})")))
    if labels:
        ax.set_yscale("log")
        top = max((max(r.ys) for r in scan.priority_wait.values() if r.ys), default=1.0)
        ax.set_ylim(top=top * 2)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}"))
        ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.5)))
    else:
        _no_data(ax, "no confirmed message was delivered")
    kept = sum(len(r.xs) for r in scan.priority_wait.values())
    seen = sum(r.seen for r in scan.priority_wait.values())
    if kept < seen or scan.priority_untracked:
        ax.set_title(_plain(f"{title}: time from confirm to first delivery, by priority "
                            f"(sample of {kept:,} of {seen + scan.priority_untracked:,})"))
    handles += _decorate(ax, scan)
    _legend(ax, handles)
    return _save(fig, path)


def priority_missing(scan: HistoryScan) -> str | None:
    """Takes a scan. Returns why there is no priority plot to draw (the run published no
    priorities, or none of its confirmed messages was delivered), or None."""
    if scan.priority_wait:
        return None
    if not scan.priorities_observed:
        return "the run published no priorities"
    return "no confirmed message was delivered"


def placement_nodes(placements: list[PlacementSample], others: Iterable[str] = ()) -> list[str]:
    """Takes placement samples and other node names (the cluster's). Returns every node named,
    in natural order (n2 < n10), so a node that never held the queue gets its (empty) row."""
    names = {n for p in placements for n in (p.leader, *p.members, *p.mirrors) if n}
    return sorted(names | set(others), key=_natural)


def _natural(name: str) -> tuple[str, int, str]:
    head = name.rstrip("0123456789")
    tail = name[len(head):]
    return head, int(tail) if tail else -1, name


@dataclass(frozen=True)
class Span:
    """One node's role over [start_s, end_s): "leader", "replica" or "unsynchronised"."""

    node: str
    role: str
    start_s: float
    end_s: float


def placement_spans(placements: list[PlacementSample], end_ns: int) -> list[Span]:
    """Takes placement samples in time order and the time the last one ends (ns). Returns each
    node's role spans: a sample holds until the next one."""
    spans: list[Span] = []
    for i, p in enumerate(placements):
        stop = placements[i + 1].time_ns if i + 1 < len(placements) else max(end_ns, p.time_ns)
        a, b = p.time_ns / NS_PER_S, stop / NS_PER_S
        if p.leader:
            spans.append(Span(p.leader, "leader", a, b))
        synced = set(p.synchronised)
        for n in p.replicas:
            unsynced = bool(p.mirrors) and n in p.mirrors and n not in synced
            spans.append(Span(n, "unsynchronised" if unsynced else "replica", a, b))
    return spans


def plot_placement(scan: HistoryScan, path: Path, title: str) -> Path:
    """Takes a scan, the PNG path and a title. Returns the path, after drawing one row per node:
    a thick dark bar while it led the queue (quorum leader or classic master), a thin grey bar
    while it held another replica (hollow: a mirror not synchronised). Placement is sampled
    during the main phase, so the last sample holds until the main phase ends."""
    nodes = placement_nodes(scan.placements, scan.nodes)
    height = MARGIN_TOP_IN + MARGIN_BOTTOM_IN + 0.9 + 0.42 * max(len(nodes), 1)
    fig, ax = _new_axes(f"{title}: queue leader and replicas", height_in=height)
    main = scan.phase("main")
    end_ns = main.end_ns if main is not None else scan.end_ns
    row = {n: i for i, n in enumerate(nodes)}
    handles: list[Any] = []
    roles_seen: set[str] = set()
    for s in placement_spans(scan.placements, end_ns):
        y = row[s.node]
        roles_seen.add(s.role)
        if s.role == "leader":
            ax.broken_barh([(s.start_s, s.end_s - s.start_s)], (y - 0.3, 0.6),
                           facecolors=PLACEMENT_COLOURS["leader"], zorder=2)
        elif s.role == "replica":
            ax.broken_barh([(s.start_s, s.end_s - s.start_s)], (y - 0.12, 0.24),
                           facecolors=PLACEMENT_COLOURS["replica"], zorder=2)
        else:
            ax.broken_barh([(s.start_s, s.end_s - s.start_s)], (y - 0.12, 0.24),
                           facecolors="white", edgecolors=PLACEMENT_COLOURS["replica"],
                           linewidth=1, zorder=2)
    changes = [p.time_ns / NS_PER_S for a, p in zip(scan.placements, scan.placements[1:],
                                                    strict=False) if a.leader != p.leader]
    for x in changes:
        ax.axvline(x, color=PLACEMENT_COLOURS["leader"], linewidth=0.8, linestyle=":", zorder=1)
    if "leader" in roles_seen:
        handles.append(Patch(color=PLACEMENT_COLOURS["leader"], label="leader / master"))
    if "replica" in roles_seen:
        handles.append(Patch(color=PLACEMENT_COLOURS["replica"], label="member / synced mirror"))
    if "unsynchronised" in roles_seen:
        handles.append(Patch(facecolor="white", edgecolor=PLACEMENT_COLOURS["replica"],
                             label="unsynchronised mirror"))
    if changes:
        handles.append(Line2D([], [], color=PLACEMENT_COLOURS["leader"], linewidth=0.8,
                              linestyle=":", label=f"leader change ({len(changes)})"))
    ax.set_yticks(range(len(nodes)), [_plain(n) for n in nodes])
    ax.set_ylim(len(nodes) - 0.4, -0.6)
    ax.grid(False, axis="y")
    if not nodes:
        _no_data(ax, "no placement samples")
    handles += _decorate(ax, scan)
    _legend(ax, handles)
    return _save(fig, path)


__all__ = [
    "DEFAULT_MAX_POINTS",
    "MAX_RATE_POINTS",
    "NS_PER_MS",
    "NS_PER_S",
    "FaultWindow",
    "HistoryScan",
    "fates_missing",
    "fault_colour",
    "fault_windows",
    "placement_nodes",
    "placement_spans",
    "plot_depth",
    "plot_fates",
    "plot_latency",
    "plot_placement",
    "plot_priority_wait",
    "plot_rate",
    "priority_missing",
    "rate_series",
    "scan_history",
]
