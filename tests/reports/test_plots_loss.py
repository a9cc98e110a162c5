"""The lost-messages plot draws results.json's queue.loss alone (reports.plots_loss): a bar per
bucket of publish time, stacked by confirming node, the node's roles in its legend."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from reports import plots_loss
from reports.history_scan import CheckedFates, HistoryScan
from reports.plots_loss import draw_loss, loss_missing, plot_loss
from reports.report import plot_specs

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LOSS = {"by_node": [{"node": "n1", "role": "leader", "count": 4},
                    {"node": "n2", "role": "leader", "count": 2},
                    {"node": "n2", "role": "follower", "count": 1}],
        "series": {"bucket_ms": 500.0, "nodes": {"n1": [[0.0, 3], [500.0, 1]],
                                                 "n2": [[500.0, 3]]}}}
RESULTS = {"queue": {"lost_count": 7, "loss": LOSS},
           "faults": [{"f": "start-partition", "start_ms": 200.0, "end_ms": 900.0}]}


def drawn(monkeypatch: Any, results: Any, path: Path) -> Figure:
    """Draws `results` to `path`. Returns the figure saved."""
    saved: list[Figure] = []
    real = plots_loss._save

    def keep(fig: Figure, p: Path) -> Path:
        saved.append(fig)
        return real(fig, p)

    monkeypatch.setattr(plots_loss, "_save", keep)
    assert draw_loss(results, path, "run") == path
    assert path.read_bytes().startswith(PNG_MAGIC)
    return saved[0]


def test_bars_stack_by_confirming_node_with_its_roles(monkeypatch: Any, tmp_path: Path) -> None:
    fig = drawn(monkeypatch, RESULTS, tmp_path / "loss.png")
    ax = fig.axes[0]
    bars = [(p.get_x(), p.get_y(), p.get_height()) for p in ax.patches if p.get_height() > 0]
    # n1's bars from the ground, n2's 3 at 0.5 s on top of n1's 1
    assert (0.0, 0.0, 3) in bars and (0.5, 0.0, 1) in bars and (0.5, 1.0, 3) in bars
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:2] == ["n1 (4: leader 4)", "n2 (3: leader 2, follower 1)"]
    assert "partition" in labels[2].lower()


def test_the_legend_says_which_side_of_a_partition_a_node_confirmed_on(
        monkeypatch: Any, tmp_path: Path) -> None:
    sided = copy.deepcopy(RESULTS)
    sided["queue"]["loss"]["by_node"] = [
        {"node": "n1", "role": "leader", "side": "minority", "count": 3},
        {"node": "n1", "role": "leader", "side": None, "count": 1},
        {"node": "n2", "role": "follower", "side": "majority", "count": 3}]
    fig = drawn(monkeypatch, sided, tmp_path / "loss.png")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels[:2] == ["n1 (4: leader on the minority side 3, leader 1)",
                          "n2 (3: follower on the majority side 3)"]


def test_results_without_loss_say_so(monkeypatch: Any, tmp_path: Path) -> None:
    fig = drawn(monkeypatch, {"queue": {"lost_count": 0}}, tmp_path / "loss.png")
    assert any("no lost messages" in t.get_text() for t in fig.axes[0].texts)


def test_the_plot_reads_the_results_beside_it(monkeypatch: Any, tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps(RESULTS))
    assert plot_loss(HistoryScan(), tmp_path / "loss.png", "run") == tmp_path / "loss.png"


def test_drawn_only_when_the_checker_counted_a_loss() -> None:
    fates = CheckedFates(0.5, True, {"delivered": 10, "lost": 2}, {})
    assert loss_missing(HistoryScan(fates=fates)) is None
    unproven = CheckedFates(0.5, False, {"unproven": 2}, {})
    assert loss_missing(HistoryScan(fates=unproven)) is None
    assert loss_missing(HistoryScan()) == "no message was lost"
    spec = next(p for p in plot_specs() if p.file_name == "loss.png")
    assert spec.missing is loss_missing
