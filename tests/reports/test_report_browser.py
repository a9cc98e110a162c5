"""The report and the store index, opened in a real headless Chromium (tests/reports/browser.py).

A store is made from the fixture run (checked by the real checker) and a few
variations; every run is rendered, which rewrites the index and the matrix
page. Each page is opened 1280 px wide and must show no console error, no
empty table cell, no image that failed to load, no relative link to a
missing file or anchor, and nothing wider than the window. A full-page
screenshot is left beside each page (report.png, index.png, matrix.png).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from reports.report import render
from tests.reports.browser import CHROMIUM, Browser, PageCheck
from tests.reports.fixture_store import MATRIX, make_store

WIDTH = 1280


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser(CHROMIUM) as b:
        yield b


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("browser") / "store"
    runs = make_store(root)
    for run in runs.values():
        render(run)
    return root


def problems(page: Path, check: PageCheck) -> list[str]:
    """Returns every way the page failed the checks, as text."""
    out = [f"console: {m}" for m in check.console_errors]
    out += [f"blank cell: {c}" for c in check.blank_cells]
    out += [f"broken image: {src}" for src in check.broken_images]
    for link in check.links:
        parts = urlsplit(link)
        if parts.scheme or link.startswith("//"):
            if parts.scheme != "data":
                out.append(f"absolute link: {link}")
            continue
        if not parts.path:
            if parts.fragment and parts.fragment not in check.ids:
                out.append(f"link to a missing anchor: {link}")
            continue
        if not (page.parent / unquote(parts.path)).exists():
            out.append(f"link to a missing file: {link}")
    if check.scroll_width > WIDTH:
        out.append(f"page is {check.scroll_width} px wide, wider than the {WIDTH} px window")
    return out


def inspect(browser: Browser, page: Path, shot_name: str) -> PageCheck:
    check = browser.inspect(page, page.parent / shot_name, width=WIDTH)
    assert problems(page, check) == []
    assert check.screenshot is not None and check.screenshot.stat().st_size > 10_000
    return check


@pytest.mark.parametrize("which", ["invalid", "valid", "unknown", "running"])
def test_run_report_in_browser(browser: Browser, store: Path, which: str) -> None:
    run = {
        "invalid": store / "partition" / "20261123T101500.000000Z",
        "valid": store / "healthy" / "20261123T110000.000000Z",
        "unknown": store / "mirrored-partition" / "20261123T120000.000000Z",
        "running": store / "kill" / "20261123T130000.000000Z",
    }[which]
    check = inspect(browser, run / "report.html", "report.png")
    images = {Path(i["src"]).name for i in check.images}
    assert images == {"latency.png", "rate.png", "fates.png", "depth.png", "placement.png"}
    assert all(i["width"] == 1200 for i in check.images)
    assert "../../index.html" in check.links
    assert check.scroll_height > 3000  # the whole page, plots included, was captured


def test_store_index_in_browser(browser: Browser, store: Path) -> None:
    check = inspect(browser, store / "index.html", "index.png")
    reports = [link for link in check.links if link.endswith("report.html")]
    assert reports == [
        "kill/20261123T130000.000000Z/report.html",
        "mirrored-partition/20261123T120000.000000Z/report.html",
        "healthy/20261123T110000.000000Z/report.html",
        "partition/20261123T101500.000000Z/report.html",
    ]
    assert f"matrix/{MATRIX}/matrix.html" in check.links


def test_matrix_page_in_browser(browser: Browser, store: Path) -> None:
    check = inspect(browser, store / "matrix" / MATRIX / "matrix.html", "matrix.png")
    assert "../../partition/20261123T101500.000000Z/report.html" in check.links
    assert "../../index.html" in check.links


def test_the_checks_catch_a_bad_page(browser: Browser, tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
        '<table><tr><td> </td><td>x</td></tr></table><img src="missing.png">'
        '<a href="nowhere.html">a</a><a href="#nothing">b</a>'
        '<div style="width:2000px">wide</div><script>console.error("boom")</script></body></html>'
    )
    found = problems(bad, browser.inspect(bad, tmp_path / "bad.png", width=WIDTH))
    assert any(p.startswith("console: console: boom") for p in found)
    assert any("ERR_FILE_NOT_FOUND" in p for p in found)
    assert "broken image: missing.png" in found
    assert "link to a missing file: nowhere.html" in found
    assert "link to a missing anchor: #nothing" in found
    assert any(p.startswith("blank cell") for p in found)
    assert any(p.startswith("page is 20") for p in found)
