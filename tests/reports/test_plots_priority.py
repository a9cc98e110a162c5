"""The priority plot: each message's time from its confirm to its first delivery, by the priority
it was published with, from one scan of a priority run's history; none for a run without."""

from __future__ import annotations

import struct
from pathlib import Path

from reports.history_scan import scan_history
from reports.plots import plot_priority_wait, priority_missing
from reports.report import render
from tests.checkers.histories import MS, Builder

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def priority_run(path: Path, observed: bool = True) -> Path:
    """Writes a priority run: 9 waits 2 ms, none 5 ms, 1 waits 20 ms; 1-9 is delivered before
    its confirm (not followed), 1-10 is never confirmed."""
    with Builder(path) as b:
        if observed:
            b.priorities()
        b.phase("main", "start")
        for k, (priority, wait) in enumerate([(9, 2), (None, 5), (1, 20)] * 3):
            b.at(100 * k).publish(1, k, priority=priority)
            b.at(100 * k + 1 + wait).deliver(2, f"1-{k}", priority=priority)
            b.ack(2, f"1-{k}")
        b.at(1000).invoke(1, 9, priority=9)
        b.deliver(2, "1-9", priority=9)
        b.complete(1, 9, priority=9)
        b.invoke(1, 10, priority=9)
        b.complete(1, 10, "info", priority=9)
        b.deliver(2, "1-10", priority=9)
        b.phase("main", "end")
    return path


def test_the_scan_follows_each_message_from_its_confirm_to_its_first_delivery(
        tmp_path: Path) -> None:
    scan = scan_history(priority_run(tmp_path / "history.jsonl"))
    assert scan.priorities_observed and priority_missing(scan) is None
    waits = {label: sorted(r.ys) for label, r in scan.priority_wait.items()}
    assert waits == {"9": [2.0] * 3, "none": [5.0] * 3, "1": [20.0] * 3}
    assert scan.priority_wait["9"].xs[0] == 1 * MS / 1e9  # the confirm's time, in s


def test_the_plot_draws_a_colour_per_priority(tmp_path: Path) -> None:
    scan = scan_history(priority_run(tmp_path / "history.jsonl"))
    png = plot_priority_wait(scan, tmp_path / "priority.png", "t")
    data = png.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 20_000
    width, height = struct.unpack(">II", data[16:24])
    assert width == 1200 and height > 250


def test_a_run_without_priorities_has_no_priority_plot(tmp_path: Path) -> None:
    scan = scan_history(priority_run(tmp_path / "history.jsonl", observed=False))
    assert scan.priority_wait == {} and not scan.priorities_observed
    assert priority_missing(scan) == "the run published no priorities"


def test_the_report_renders_the_priority_plot(tmp_path: Path) -> None:
    priority_run(tmp_path / "history.jsonl")
    written = [p.name for p in render(tmp_path, index=False)]
    assert "priority.png" in written
    html = (tmp_path / "report.html").read_text()
    assert '<img src="priority.png"' in html and "Time to delivery by priority" in html
