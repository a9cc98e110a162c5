"""The store index (reports.index): every run newest first with its verdict and counts, runs
without results, matrix pages, and the report rewriting the index of the store it is in."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from reports import index
from reports.report import render, store_root_of
from tests.reports.fixture_store import INVALID, MATRIX, RUNNING, UNKNOWN, VALID, make_store


def rows_of(html: str) -> list[list[str]]:
    """Returns the text of each cell of the first table, row by row (header row excluded)."""
    first = html[html.index("<table"):html.index("</table>")]
    out = []
    for row in re.findall(r"<tr>(.*?)</tr>", first, re.S)[1:]:
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        out.append([" ".join(re.sub(r"<[^>]+>", "", c).split()) for c in cells])
    return out


def test_index_lists_every_run_newest_first(tmp_path: Path) -> None:
    store = tmp_path / "store"
    make_store(store)
    os.symlink("partition/" + INVALID[1], store / "latest")
    path = index.write_index(store)
    assert path == store / "index.html"
    html = path.read_text()
    rows = rows_of(html)
    # time, test, backend, version (rabbitmq, the others beneath it), verdict
    assert [r[:5] for r in rows] == [
        ["2026-11-23 13:00:00", RUNNING[0], "netns", "3.10.8erlang 25.2.3", "no results"],
        ["2026-11-23 12:00:00", UNKNOWN[0], "netns", "3.10.8erlang 25.2.3", "unknown"],
        ["2026-11-23 11:00:00", VALID[0], "netns", "3.10.8erlang 25.2.3", "valid"],
        ["2026-11-23 10:15:00", INVALID[0], "netns", "3.10.8erlang 25.2.3", "INVALID"],
    ]
    assert '<td>3.10.8<span class="cell-note">erlang 25.2.3</span></td>' in html
    # lost, duplicated (unflagged), reordered, duration
    assert [r[6:10] for r in rows] == [
        ["-", "-", "-", "25 s so far"],
        ["(2)", "3 (1)", "0", "51 s"],
        ["0", "2 (0)", "0", "51 s"],
        ["2", "3 (1)", "2", "51 s"],
    ]
    assert rows[3][5].startswith("2 confirmed messages lost")
    assert rows[0][5] == "The run is still going, or ended before its check."
    # no report yet: the links go to the run directories
    assert f'href="{INVALID[0]}/{INVALID[1]}/"' in html and "files (no report)" in html
    assert "4 runs (1 INVALID, 1 unknown, 1 no results, 1 valid)" in html


def test_index_links_reports_and_renders_the_matrix(tmp_path: Path) -> None:
    store = tmp_path / "store"
    runs = make_store(store)
    render(runs["invalid"], index=False)
    html = index.write_index(store).read_text()
    assert f'href="{INVALID[0]}/{INVALID[1]}/report.html"' in html
    assert f'href="matrix/{MATRIX}/matrix.html"' in html
    matrix_row = rows_of(html[html.index('id="matrices"'):])
    assert matrix_row == [
        ["2026-11-23 14:00:00", "4", "1 FINDING, 1 as expected, 2 unknown", "2", "matrix"]
    ]
    page = (store / "matrix" / MATRIX / "matrix.html").read_text()
    # a run recorded elsewhere is found in this store by its last two path parts
    assert f'href="../../{INVALID[0]}/{INVALID[1]}/report.html"' in page
    assert f'href="../../{VALID[0]}/{VALID[1]}/"' in page
    assert "not in this store" in page and "gone: cluster would not start" in page
    assert "<li>gone: never ran</li>" in page and "<h2>Per scenario</h2>" in page
    assert [r[:5] for r in rows_of(page)] == [
        ["partition", "valid", "-", "INVALID", "FINDING"],
        ["healthy", "valid", "-", "valid", "as expected"],
        ["mirrored-partition", "loss possible", "-", "unknown", "unknown"],
        ["gone", "valid", "7", "no results", "unknown"],
    ]


def test_render_in_a_store_rewrites_its_index(tmp_path: Path) -> None:
    store = tmp_path / "store"
    runs = make_store(store)
    assert store_root_of(runs["valid"]) == store.resolve()
    assert store_root_of(tmp_path) is None
    assert store_root_of(store / "matrix" / MATRIX) is None
    render(runs["valid"])
    html = (store / "index.html").read_text()
    assert f'href="{VALID[0]}/{VALID[1]}/report.html"' in html
    assert 'href="../../index.html"' in (runs["valid"] / "report.html").read_text()


def test_a_broken_index_leaves_the_report_without_its_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    runs = make_store(store)

    def broken(_root: Path) -> Path:
        raise OSError("disk full")

    monkeypatch.setattr(index, "write_index", broken)
    render(runs["valid"])
    assert "index.html" not in (runs["valid"] / "report.html").read_text()


def test_empty_and_odd_stores(tmp_path: Path) -> None:
    store = tmp_path / "store"
    html = index.write_index(store).read_text()
    assert "0 runs, newest first" in html and "No runs yet." in html
    (store / "t" / "not-a-run").mkdir(parents=True)
    odd = store / "t" / "20260101T000000Z"
    odd.mkdir()
    (odd / "results.json").write_text("{not json")
    (store / "matrix" / "x").mkdir(parents=True)
    (store / "matrix" / "x" / "matrix.json").write_text(json.dumps([1, 2]))
    html = index.write_index(store).read_text()
    assert [r[:6] for r in rows_of(html)] == [
        ["2026-01-01 00:00:00", "t", "n/a", "—", "no results", "Unreadable results.json."]
    ]
    assert 'id="matrices"' not in html


def test_history_seconds_reads_the_tail(tmp_path: Path) -> None:
    h = tmp_path / "history.jsonl"
    h.write_text('{"time": 1000000000}\n{"time": 2500000000}\n{"time": 30')
    assert index.history_seconds(h) == 2.5
    assert index.history_seconds(tmp_path / "none") is None


def test_a_weak_run_is_listed_valid_but_weak_with_its_strength(tmp_path: Path) -> None:
    from reports.page import VERDICTS
    from tests.reports.strength_store import STRONG_SUMMARY, WEAK_SUMMARY, make_strength_store

    store = tmp_path / "store"
    make_strength_store(store)
    html = index.write_index(store).read_text()
    rows = {r[1]: r for r in rows_of(html)}
    weak = rows[VALID[0]]
    assert weak[4] == "valid but weak"
    # the sentence cut to fit, the strength beneath it
    assert weak[5] == ("Neither of 2 faults was noticed by RabbitMQ. No anomaly was found (all "
                       f"208 confirmed messages were delivered), but a ru…"
                       f"Test strength: {WEAK_SUMMARY}.")
    assert f'<span class="badge" style="background:{VERDICTS["weak"][1]}">valid but weak' in html
    assert rows[INVALID[0]][5].endswith(f"Test strength: {STRONG_SUMMARY}.")
    assert rows[UNKNOWN[0]][5].endswith("messages still q…")  # no strength to show
    assert "4 runs (1 INVALID, 1 unknown, 1 no results, 1 valid but weak)" in html
