"""Pages that show test strength (issue 19), opened in a real headless Chromium: the reports of
a weak and a strong run, the store index, the strength matrix's page and a nightly page with a
weak run. Each must pass test_report_browser's checks (no console error, no empty cell, no
broken image or link, nothing wider than 1280 px) and leave a screenshot beside it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import matrix
from harness.nightly import nightly_html
from history.files import write_atomic
from reports.report import render
from tests.reports.browser import CHROMIUM, Browser
from tests.reports.strength_store import STRENGTH_MATRIX, make_strength_store
from tests.reports.test_report_browser import inspect


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser(CHROMIUM) as b:
        yield b


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("strength") / "store"
    runs = make_strength_store(root)
    for name in ("invalid", "valid", "unknown", "running"):
        render(runs[name])
    return {**runs, "root": root}


@pytest.mark.parametrize("which", ["invalid", "valid"])
def test_reports_with_strength_in_browser(browser: Browser, store: dict[str, Path],
                                          which: str) -> None:
    check = inspect(browser, store[which] / "report.html", "report.png")
    assert "faults" in check.ids
    assert ("incidents" in check.ids) is (which == "invalid")
    if which == "invalid":
        assert {"incident-1", "incident-2"} <= set(check.ids)


def test_index_and_matrix_with_strength_in_browser(browser: Browser,
                                                   store: dict[str, Path]) -> None:
    check = inspect(browser, store["root"] / "index.html", "index.png")
    assert f"matrix/{STRENGTH_MATRIX}/matrix.html" in check.links
    inspect(browser, store["matrix"] / "matrix.html", "matrix.png")


def test_nightly_page_with_a_weak_run_in_browser(browser: Browser, store: dict[str, Path],
                                                 tmp_path: Path) -> None:
    weak = {"valid": True, "queue": {"valid": True, "anomalies": []},
            "strength": {"weak": True, "reason": "neither of 2 faults was noticed by RabbitMQ",
                         "summary": "faults noticed 0 of 2, failovers 0, most messages at "
                         "risk 14"}}
    strong = {**weak, "strength": {**weak["strength"], "weak": False, "reason": "",
                                   "summary": "faults noticed 2 of 2, failovers 2, most "
                                   "messages at risk 14"}}
    rows = [matrix.make_row("weak-one", matrix.Expectation(), 0, 98.0, store["valid"], weak,
                            seed=3),
            matrix.make_row("strong-one", matrix.Expectation(), 0, 97.0, store["invalid"],
                            strong, seed=3)]
    out = tmp_path / "matrix" / "20261124T000000Z"
    out.mkdir(parents=True)
    expectations = {"weak-one": matrix.Expectation(), "strong-one": matrix.Expectation()}
    summaries = matrix.summarize(rows, expectations)
    page = write_atomic(out / "index.html", nightly_html(
        out, rows, summaries, [], [], {}, matrix.exit_code(rows, summaries),
        {"budget": "60 min", "used": "3.3 min", "base seed": "3"}))
    (out / "matrix.json").write_text("{}")
    (out / "matrix.md").write_text("")
    (out / "junit.xml").write_text("")
    (tmp_path / "index.html").write_text("")
    inspect(browser, page, "nightly.png")
