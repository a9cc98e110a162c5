"""The fates plot draws the checker's fates (results.json's fates) and judges nothing; its
legend stays inside the figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from reports import plots
from reports.history_scan import CheckedFates, HistoryScan, scan_history
from reports.plots import fates_missing, plot_fates

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FATES = {"by": "publish time", "bucket_ms": 500.0, "drained": True,
         "totals": {"delivered": 1_234_567, "redelivered_duplicated": 12_345, "recovered": 3,
                    "unconfirmed": 2, "lost": 2},
         "series": {"delivered": [[0.0, 600_000], [500.0, 634_567]],
                    "redelivered_duplicated": [[0.0, 12_345]],
                    "recovered": [[500.0, 3]], "unconfirmed": [[0.0, 2]],
                    "lost": [[500.0, 2]]}}
UNPROVEN = {**FATES, "drained": False,
            "totals": {**FATES["totals"], "unproven": 1_234_567},
            "series": {**FATES["series"], "unproven": [[0.0, 1_234_567]]}}


def test_checked_fates_come_from_the_queue_section_only() -> None:
    got = CheckedFates.from_results({"fates": FATES})
    assert got == CheckedFates(0.5, True, FATES["totals"],
                               {"delivered": [(0.0, 600_000), (0.5, 634_567)],
                                "redelivered_duplicated": [(0.0, 12_345)],
                                "recovered": [(0.5, 3)], "unconfirmed": [(0.0, 2)],
                                "lost": [(0.5, 2)]})
    assert CheckedFates.from_results({"queue": {"lost_count": 2}}) is None  # checked before
    assert CheckedFates.from_results(None) is None
    assert CheckedFates.from_results({"fates": {"series": {"lost": [["x", 1]]}}}) is None


def test_the_scan_carries_the_results_beside_the_history(tmp_path: Path) -> None:
    line = {"index": 0, "time": 1, "type": "invoke", "process": 1, "f": "publish",
            "value": "1-0"}
    (tmp_path / "history.jsonl").write_text(json.dumps(line) + "\n")
    assert scan_history(tmp_path / "history.jsonl").fates is None
    (tmp_path / "results.json").write_text(json.dumps({"fates": FATES}))
    scan = scan_history(tmp_path / "history.jsonl")
    assert scan.fates is not None and scan.fates.totals["lost"] == 2
    assert fates_missing(scan) is None
    assert fates_missing(HistoryScan()) == "no published messages in the history"


def _legend_inside(monkeypatch: Any, scan: HistoryScan, path: Path) -> None:
    saved: list[Figure] = []
    real = plots._save

    def keep(fig: Figure, p: Path) -> Path:
        saved.append(fig)
        return real(fig, p)

    monkeypatch.setattr(plots, "_save", keep)
    assert plot_fates(scan, path, "run $1").read_bytes().startswith(PNG_MAGIC)
    (fig,) = saved
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    legend = fig.axes[0].get_legend()
    box = legend.get_window_extent(renderer)
    width, height = fig.bbox.width, fig.bbox.height
    assert box.x0 >= 0 and box.x1 <= width and box.y0 >= 0 and box.y1 <= height


def test_fates_plot_draws_each_fate_row_and_its_legend_fits(tmp_path: Path,
                                                            monkeypatch: Any) -> None:
    for fates in (FATES, UNPROVEN):
        scan = HistoryScan(end_ns=2_000_000_000, fates=CheckedFates.from_results(
            {"fates": fates}))
        _legend_inside(monkeypatch, scan, tmp_path / "fates.png")
        monkeypatch.undo()


def test_fates_plot_without_checked_fates_says_so(tmp_path: Path, monkeypatch: Any) -> None:
    scan = HistoryScan(end_ns=2_000_000_000)
    saved: list[Figure] = []
    real = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, p: saved.append(fig) or real(fig, p))
    plot_fates(scan, tmp_path / "fates.png", "run")
    texts = [t.get_text() for t in saved[0].axes[0].texts]
    assert any("results.json has no message fates" in t for t in texts)
