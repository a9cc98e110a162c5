"""Perf plots for a stored run, after Jepsen's checker/perf.clj, in bounded memory.

`scan_history` reads `history.jsonl` once, line by line, and keeps only what
the plots and the report need: completion counts per (f, type) and time bucket,
a seeded reservoir sample of publish latencies per (f, type), the nemesis fault
windows, the harness phases and a capped list of harness events. Memory is
O(buckets + sample size + open ops), so a 10M-op history plots like a small one.
`fault_windows` is the pure helper that turns nemesis ops into windows.

`plot_latency` draws `latency.png` (a point per completed client op: latency
in ms on a log scale against time in s; ok/fail ops at their invocation time,
info ops at the time they ended) and `plot_rate` draws `rate.png` (completions
per second by f and type). Both shade fault windows, one colour per fault kind,
and mark the drain phase. Matplotlib is used through its Agg canvas only.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
from array import array
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogFormatter

from harness.history import HARNESS, NEMESIS, Op

log = logging.getLogger(__name__)

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
DEFAULT_BUCKET_NS = NS_PER_S
DEFAULT_MAX_POINTS = 200_000
DEFAULT_MAX_EVENTS = 1_000
# More buckets than this are merged for the rate plot: a 1200 px wide plot cannot show more.
MAX_RATE_POINTS = 3_000
# Log-scale axes cannot show a zero latency; clamp to 1 µs.
MIN_LATENCY_MS = 1e-3

HEAL = "heal"
# Fault starts whose stop is not simply "stop-<kind>": f -> (kind, stop f).
_SPECIAL_FAULTS: dict[str, tuple[str, str]] = {
    "kill": ("kill", "start"),
    "stop": ("stop", "start"),
    "pause": ("pause", "resume"),
}

# Per fault kind: shading colour. Unknown kinds cycle through _EXTRA_FAULT_COLOURS.
FAULT_COLOURS: dict[str, str] = {
    "partition": "#1f77b4",
    "kill": "#9467bd",
    "stop": "#8c564b",
    "pause": "#17becf",
    "packet": "#e377c2",
    "rolling-restart": "#7f7f7f",
}
_EXTRA_FAULT_COLOURS = ("#bcbd22", "#aec7e8", "#c5b0d5", "#c49c94", "#dbdb8d")
FAULT_ALPHA = 0.18

# Colours by completion type, as in Jepsen (but green for ok, as operators expect).
TYPE_COLOURS: dict[str, str] = {"ok": "#2ca02c", "fail": "#d62728", "info": "#ff9f00"}
# Delivery lines in the rate plot.
DELIVERY_COLOURS: dict[str, str] = {"consume": "#1f77b4", "drain": "#9467bd"}
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def fault_kind(f: str) -> str | None:
    """Takes a nemesis f. Returns the fault kind it starts ("partition", "kill", ...) or None."""
    if f in _SPECIAL_FAULTS:
        return _SPECIAL_FAULTS[f][0]
    if f.startswith("start-") and len(f) > len("start-"):
        return f[len("start-") :]
    return None


def fault_stop(f: str) -> str | None:
    """Takes a nemesis f that starts a fault. Returns the f that stops it, or None."""
    if f in _SPECIAL_FAULTS:
        return _SPECIAL_FAULTS[f][1]
    kind = fault_kind(f)
    return None if kind is None else f"stop-{kind}"


def fault_colour(kind: str) -> str:
    """Takes a fault kind. Returns its shading colour (stable for unknown kinds too)."""
    if kind in FAULT_COLOURS:
        return FAULT_COLOURS[kind]
    return _EXTRA_FAULT_COLOURS[sum(kind.encode()) % len(_EXTRA_FAULT_COLOURS)]


@dataclass(frozen=True)
class FaultWindow:
    """A time span during which one nemesis fault was in effect.

    `f` is the nemesis f that started it, `value` the start's value (its
    completion's, else its invocation's), `closed_by` the f that ended it
    ("stop-partition", "heal", ...) or None when the history ended first.
    """

    f: str
    start_ns: int
    end_ns: int
    value: Any = None
    node: str | None = None
    closed_by: str | None = None

    @property
    def kind(self) -> str:
        """Returns the fault kind, e.g. "partition" for start-partition."""
        return fault_kind(self.f) or self.f


@dataclass
class _OpenFault:
    f: str
    start_ns: int
    value: Any
    node: str | None


class WindowTracker:
    """Builds fault windows from nemesis ops fed one at a time, in history order.

    A window opens at the completion (ok/info) of a fault start and closes at
    the completion of its stop, which ends every open window of that kind (a
    "start" ends both kills and stops), or of "heal", which ends all of them.
    A failed completion changes nothing: the fault certainly did not happen.
    """

    def __init__(self) -> None:
        self._open: list[_OpenFault] = []
        self._invokes: dict[str, Op] = {}
        self._closed: list[FaultWindow] = []
        self.failures: list[Op] = []

    def feed(self, op: Op) -> None:
        """Takes one op; ignores all but the nemesis's."""
        if op.process != NEMESIS:
            return
        if op.type == "invoke":
            self._invokes[op.f] = op
            return
        invoke = self._invokes.pop(op.f, None)
        if op.type == "fail":
            self.failures.append(op)
            return
        if op.f == HEAL:
            self._close(lambda _w: True, op)
        elif fault_kind(op.f) is not None:
            value = op.value if op.value is not None or invoke is None else invoke.value
            node = op.node if op.node is not None or invoke is None else invoke.node
            self._open.append(_OpenFault(op.f, op.time, value, node))
        else:
            self._close(lambda w: fault_stop(w.f) == op.f, op)

    def _close(self, which: Callable[[_OpenFault], bool], op: Op) -> None:
        keep: list[_OpenFault] = []
        for w in self._open:
            if which(w):
                self._closed.append(
                    FaultWindow(w.f, w.start_ns, max(op.time, w.start_ns), w.value, w.node, op.f)
                )
            else:
                keep.append(w)
        self._open = keep

    def finish(self, end_ns: int) -> list[FaultWindow]:
        """Takes the end of the history (ns). Returns all windows, open ones closed there, by start."""
        windows = self._closed + [
            FaultWindow(w.f, w.start_ns, max(end_ns, w.start_ns), w.value, w.node, None)
            for w in self._open
        ]
        return sorted(windows, key=lambda w: (w.start_ns, w.end_ns, w.f))


def fault_windows(ops: Iterable[Op], end_ns: int | None = None) -> list[FaultWindow]:
    """Takes ops in history order and optionally the end of the history (ns).

    Returns the fault windows ordered by start; a window still open at the end
    closes at `end_ns`, by default the latest op time seen.
    """
    tracker = WindowTracker()
    last = 0
    for op in ops:
        last = max(last, op.time)
        tracker.feed(op)
    return tracker.finish(last if end_ns is None else end_ns)


@dataclass(frozen=True)
class PhaseSpan:
    """A harness phase ("main", "heal", "recovery", "drain", "teardown") and when it ran."""

    phase: str
    start_ns: int
    end_ns: int
    ended: bool = True


class Reservoir:
    """A uniform sample of at most `capacity` (x, y) points (Algorithm R), in compact arrays."""

    def __init__(self, capacity: int, rng: random.Random) -> None:
        self.capacity = capacity
        self.seen = 0
        self.xs = array("d")
        self.ys = array("d")
        self._rng = rng

    def add(self, x: float, y: float) -> None:
        """Takes one point; keeps it with probability capacity/seen."""
        n = self.seen
        self.seen = n + 1
        if n < self.capacity:
            self.xs.append(x)
            self.ys.append(y)
            return
        j = int(self._rng.random() * (n + 1))
        if j < self.capacity:
            self.xs[j] = x
            self.ys[j] = y


Key = tuple[str, str]


@dataclass
class HistoryScan:
    """What one pass over a history leaves: bounded summaries for plots and the report."""

    bucket_ns: int = DEFAULT_BUCKET_NS
    op_count: int = 0
    bad_lines: int = 0
    end_ns: int = 0
    # (f, type) -> count, for client ops, invocations included.
    client_counts: Counter[Key] = field(default_factory=Counter)
    # (f, type) of completions -> bucket -> count.
    rate: dict[Key, Counter[int]] = field(default_factory=dict)
    # (f, completion type) -> sample of (time s, latency ms).
    latency: dict[Key, Reservoir] = field(default_factory=dict)
    # Client invocations with no completion by the end of the history.
    unfinished: int = 0
    windows: list[FaultWindow] = field(default_factory=list)
    nemesis_failures: list[Op] = field(default_factory=list)
    phases: list[PhaseSpan] = field(default_factory=list)
    events: list[Op] = field(default_factory=list)
    events_dropped: int = 0

    @property
    def latency_seen(self) -> int:
        """Returns how many latency points there were (before sampling)."""
        return sum(r.seen for r in self.latency.values())

    @property
    def latency_kept(self) -> int:
        """Returns how many latency points the samples hold."""
        return sum(len(r.xs) for r in self.latency.values())


def _is_client(process: Any) -> bool:
    return type(process) is int


def scan_history(
    path: Path,
    *,
    bucket_ns: int = DEFAULT_BUCKET_NS,
    max_points: int = DEFAULT_MAX_POINTS,
    seed: int = 0,
    max_events: int = DEFAULT_MAX_EVENTS,
) -> HistoryScan:
    """Takes a history path, the rate bucket width, the latency sample size per
    (f, type), the sampling seed and how many harness events to keep.

    Returns a HistoryScan. Lines that are not JSON objects with an integer time
    (e.g. the torn last line of a killed run) are counted in `bad_lines`, not raised.
    A client invocation still open at the end counts as an info op ending there.
    """
    if bucket_ns <= 0 or max_points <= 0:
        raise ValueError("bucket_ns and max_points must be positive")
    scan = HistoryScan(bucket_ns=bucket_ns)
    rng = random.Random(seed)
    tracker = WindowTracker()
    pending: dict[int, tuple[str, int]] = {}
    open_phases: dict[str, int] = {}
    end = 0

    def point(key: Key, x_ns: int, latency_ns: int) -> None:
        res = scan.latency.get(key)
        if res is None:
            res = scan.latency[key] = Reservoir(max_points, rng)
        res.add(x_ns / NS_PER_S, max(latency_ns / NS_PER_MS, MIN_LATENCY_MS))

    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                d = json.loads(line)
            except ValueError:
                if line.strip():
                    scan.bad_lines += 1
                continue
            t = d.get("time") if isinstance(d, dict) else None
            if type(t) is not int:
                scan.bad_lines += 1
                continue
            scan.op_count += 1
            end = max(end, t)
            process, typ, f = d.get("process"), d.get("type"), str(d.get("f"))
            if _is_client(process):
                scan.client_counts[(f, typ)] += 1
                if typ == "invoke":
                    pending[process] = (f, t)
                    continue
                series = scan.rate.get((f, typ))
                if series is None:
                    series = scan.rate[(f, typ)] = Counter()
                series[t // bucket_ns] += 1
                inv = pending.get(process)
                if inv is not None and inv[0] == f:
                    del pending[process]
                    point((f, typ), t if typ == "info" else inv[1], t - inv[1])
            elif process == NEMESIS:
                tracker.feed(Op.from_dict(d))
            elif process == HARNESS:
                op = Op.from_dict(d)
                if len(scan.events) < max_events:
                    scan.events.append(op)
                else:
                    scan.events_dropped += 1
                _track_phase(op, open_phases, scan.phases)
    for f, start in pending.values():
        point((f, "info"), end, end - start)
    scan.unfinished = len(pending)
    scan.end_ns = end
    scan.windows = tracker.finish(end)
    scan.nemesis_failures = tracker.failures
    scan.phases.extend(PhaseSpan(p, s, max(s, end), ended=False) for p, s in open_phases.items())
    scan.phases.sort(key=lambda p: (p.start_ns, p.end_ns))
    log.debug("scanned %s: %d ops, %d bad lines", path, scan.op_count, scan.bad_lines)
    return scan


def _track_phase(op: Op, open_phases: dict[str, int], spans: list[PhaseSpan]) -> None:
    if op.f != "phase" or not isinstance(op.value, dict):
        return
    phase, state = str(op.value.get("phase")), op.value.get("state")
    if state == "start":
        open_phases[phase] = op.time
    elif state == "end":
        start = open_phases.pop(phase, op.time)
        spans.append(PhaseSpan(phase, start, max(op.time, start)))


def _plain(text: str) -> str:
    """Returns text with "$" escaped, so matplotlib shows it instead of parsing mathtext."""
    return text.replace("$", r"\$")


def _new_axes(title: str) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(12, 5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_title(_plain(title))
    ax.set_xlabel("Time (s)")
    ax.grid(True, which="major", alpha=0.3)
    return fig, ax


def _decorate(ax: Axes, scan: HistoryScan) -> list[Any]:
    """Shades fault windows and the drain phase. Returns legend handles for them."""
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
        handles.append(Patch(color=fault_colour(kind), alpha=FAULT_ALPHA + 0.1, label=_plain(kind)))
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
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png", bbox_inches="tight")
    os.replace(tmp, path)
    return path


def _legend(ax: Axes, handles: list[Any]) -> None:
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")


def plot_latency(scan: HistoryScan, path: Path, title: str) -> Path:
    """Takes a scan, the PNG path and a title. Returns the path, after drawing the latency plot."""
    fig, ax = _new_axes(f"{title} latency")
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
        # Plain numbers ("0.1", "10", "2000") rather than mathtext powers of ten.
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}"))
        ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.5)))
    else:
        ax.text(
            0.5, 0.5, "no completed client ops", ha="center", va="center", transform=ax.transAxes
        )
    if scan.latency_kept < scan.latency_seen:
        ax.set_title(
            _plain(
                f"{title} latency (sample of {scan.latency_kept:,} of {scan.latency_seen:,} ops)"
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


def plot_rate(scan: HistoryScan, path: Path, title: str) -> Path:
    """Takes a scan, the PNG path and a title. Returns the path, after drawing the rate plot."""
    fig, ax = _new_axes(f"{title} rate")
    xs, series, width = rate_series(scan)
    ax.set_ylabel(f"Throughput (ops/s, {width:g} s buckets)")
    handles: list[Any] = []
    f_order = {"publish": 0, "consume": 1, "drain": 2}
    type_order = {"ok": 0, "fail": 1, "info": 2}
    keys = sorted(
        series,
        key=lambda k: (f_order.get(k[0], 3), k[0], type_order.get(k[1], 3), str(k[1])),
    )
    for i, (f, typ) in enumerate(keys):
        label, colour = _series_style(f, str(typ), i)
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
        ax.text(0.5, 0.5, "no client completions", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylim(bottom=0)
    handles += _decorate(ax, scan)
    _legend(ax, handles)
    return _save(fig, path)
