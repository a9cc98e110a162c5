"""The lost-messages plot: lost messages over publish time, per node that confirmed them.

It draws results.json alone (one judge: the checker counted, per confirming node, the lost
messages in each bucket of publish time, `queue.loss.series`, checkers.loss) and judges
nothing: a bar per bucket, stacked by confirming node, each node's legend entry saying how
many of its lost messages it confirmed as the queue's leader, a follower, a node not hosting
the queue or with its role unknown; the fault windows of results.json's `faults` shaded.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Final

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from history.faults import FaultKind, kind_for_start, kind_named
from reports.history_scan import HistoryScan
from reports.plots import FAULT_ALPHA, _legend, _new_axes, _no_data, _plain, _save

log = logging.getLogger(__name__)

FILE_NAME: Final = "loss.png"
HEADING: Final = "Lost messages by confirming node"
CAPTION: Final = (
    "The confirmed messages the drain never read (results.json's queue.loss), by the time "
    "they were published, stacked by the node whose confirm the publisher received; the "
    "legend says that node's role (queue leader, follower) when it confirmed them, from the "
    "harness's placement samples; fault periods shaded.")
NODE_COLOURS: Final = ("#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                       "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def loss_of(results: Any) -> dict[str, Any] | None:
    """Takes results.json's content. Returns its queue.loss with a series, or None."""
    queue = results.get("queue") if isinstance(results, dict) else None
    loss = queue.get("loss") if isinstance(queue, dict) else None
    series = loss.get("series") if isinstance(loss, dict) else None
    ok = isinstance(series, dict) and isinstance(series.get("nodes"), dict)
    return loss if ok else None


def loss_missing(scan: HistoryScan) -> str | None:
    """Takes a scan. Returns why there is no lost-messages plot (the checker's fates, read
    from results.json, count none lost), or None."""
    fates = scan.fates
    lost = 0 if fates is None else fates.totals.get("lost", 0) + fates.totals.get("unproven", 0)
    return None if lost else "no message was lost"


def _roles(loss: dict[str, Any], node: str) -> str:
    """Returns a node's roles (and, where told, its side of a partition) with their counts:
    "leader 4, leader on the minority side 2"."""
    counts = [(r.get("role"), r.get("side"), r.get("count")) for r in loss.get("by_node") or []
              if isinstance(r, dict) and r.get("node") == node]
    return ", ".join(f"{role}{f' on the {side} side' if side else ''} {n:,}"
                     for role, side, n in counts if isinstance(n, int))


def _shade(ax: Any, results: Any) -> list[Any]:
    """Shades results.json's fault windows. Returns a legend handle per fault kind."""
    kinds: list[FaultKind] = []
    for f in results.get("faults") or [] if isinstance(results, dict) else []:
        if not isinstance(f, dict) or not isinstance(f.get("start_ms"), int | float):
            continue
        end: float = f["end_ms"] if isinstance(f.get("end_ms"), int | float) else f["start_ms"]
        name = str(f.get("f") or "fault")
        kind = kind_for_start(name) or kind_named(name)
        ax.axvspan(f["start_ms"] / 1000, end / 1000, color=kind.colour, alpha=FAULT_ALPHA,
                   linewidth=0, zorder=0)
        kinds += [] if kind in kinds else [kind]
    return [Patch(color=k.colour, alpha=FAULT_ALPHA + 0.1, label=_plain(k.label))
            for k in kinds]


def draw_loss(results: Any, path: Path, title: str) -> Path:
    """Takes results.json's content, the PNG path and a title. Returns the path, after drawing
    its lost messages per bucket of publish time, stacked by confirming node."""
    fig: Figure
    fig, ax = _new_axes(f"{title}: lost messages by publish time and confirming node")
    ax.set_xlabel("time (s) the message was published")
    ax.set_ylabel("lost messages")
    loss = loss_of(results)
    handles: list[Any] = []
    if loss is None:
        _no_data(ax, "results.json tells no lost messages apart: check the run again "
                     "(python -m harness check RUN_DIR)")
    else:
        width = float(loss["series"].get("bucket_ms") or 1000) / 1000
        base: dict[float, int] = {}
        for i, (node, pts) in enumerate(sorted(loss["series"]["nodes"].items())):
            xs = [float(t) / 1000 for t, _n in pts]
            ns = [int(n) for _t, n in pts]
            colour = NODE_COLOURS[i % len(NODE_COLOURS)]
            ax.bar(xs, ns, bottom=[base.get(x, 0) for x in xs], width=width, align="edge",
                   color=colour, linewidth=0, zorder=2)
            for x, n in zip(xs, ns, strict=True):
                base[x] = base.get(x, 0) + n
            handles.append(Patch(color=colour, label=_plain(
                f"{node} ({sum(ns):,}: {_roles(loss, node)})")))
    handles += _shade(ax, results)
    _legend(ax, handles, fontsize="x-small")
    return _save(fig, path)


def plot_loss(scan: HistoryScan, path: Path, title: str) -> Path:
    """Takes a scan (unused: the plot reads results.json only), the PNG path and a title.
    Returns the path, after drawing the results.json beside it (`draw_loss`)."""
    results_path = path.with_name("results.json")
    try:
        results = json.loads(results_path.read_text())
    except (OSError, ValueError):
        log.warning("cannot read %s; lost messages not plotted", results_path)
        results = None
    return draw_loss(results, path, title)
