"""Run text on every page is text, never markup: a queue name, a scenario name, a broker log
line, a version and, in a side-by-side table, a varied value and a reason holding
`<script>alert(1)</script>`, a broken tag and `&` go through the run report, the store index, a
matrix page, a nightly page, a shrink page and an explore page, and come out escaped.

Each page is parsed as plain HTML (no <script> element, no element the hostile text would
make, the text found literally in the page's text and attributes) and opened in headless
Chromium (no dialog opened, no handler ran, no script element, the text shown as it is).
Every template is autoescaped and nothing in reports/ marks a string safe: a test reads the
sources for it.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from history.files import write_atomic
from reports.explore_page import write_explore_page
from reports.nightly_page import RunLine, ScenarioLine, nightly_html
from reports.report import render
from reports.shrink_page import Shape, write_page
from tests.harness.fixtures.make_run import strength_sections
from tests.reports.browser import CHROMIUM, Browser
from tests.reports.fixture_store import copy_run

ROOT = Path(__file__).resolve().parents[2]
# alert() would open a dialog, the broken image's handler would set a flag: either means run
# text became markup.
HOSTILE = "<script>alert(1)</script>&amp; <img src=x onerror=\"window.pwned=1\"> & co"
SCENARIO = f"q{HOSTILE}"
STAMP = "20261123T101500.000000Z"
# matrix.json's side-by-side table (harness.matrix.side_by_side): a varied value, a scenario
# and a reason a variant cannot run, each hostile.
SIDE_BY_SIDE = {"column": f"queue.type{HOSTILE}", "values": [HOSTILE],
                "titles": [f"queue.type={HOSTILE}"],
                "lines": [{"scenario": SCENARIO, "expect": "valid",
                           "cells": [f"not applicable: {HOSTILE}"]}]}
SIDE_SAID = (f"queue.type={HOSTILE}", f"not applicable: {HOSTILE}")


def hostile_store(root: Path) -> dict[str, Path]:
    """Builds a store whose run, matrix and nightly carry HOSTILE in a scenario name, a queue
    name, a version and broker log lines. Returns the pages to read."""
    run = copy_run(root, "hostile", STAMP)
    info = json.loads((run / "test.json").read_text())
    info["name"] = info["spec"]["name"] = SCENARIO
    info["spec"]["queue"]["name"] = f"jepsen{HOSTILE}"
    info["versions"] = {"rabbitmq": f"4.0{HOSTILE}", "metadata_store": HOSTILE}
    info["queue_description"] = [f"delivery limit {HOSTILE}"]
    (run / "test.json").write_text(json.dumps(info))
    results = json.loads((run / "results.json").read_text())
    results.update(strength_sections())
    results["faults"][0]["detections"][0]["text"] = f"node down {HOSTILE}"
    results["incidents"][0]["log_lines"][0]["text"] = f"broker said {HOSTILE}"
    (run / "results.json").write_text(json.dumps(results))
    matrix = root / "matrix" / "20261123T140000.000000Z"
    matrix.mkdir(parents=True)
    (matrix / "matrix.json").write_text(json.dumps({
        "exit_code": 1, "problems": [f"{SCENARIO}: lost"],
        "summaries": [{"scenario": SCENARIO, "expect": "valid", "runs": 1}],
        "rows": [{"scenario": SCENARIO, "expect": "valid", "seed": 1, "valid": False,
                  "judgement": "FINDING", "run_dir": str(run), "versions": info["versions"],
                  "problems": [f"queue: {HOSTILE}"]}],
        "side_by_side": SIDE_BY_SIDE,
    }))
    render(run)  # the report, the store index and the matrix page
    nightly = root / "matrix" / "20261123T160000.000000Z"
    nightly.mkdir()
    write_atomic(nightly / "index.html", nightly_html(
        nightly, [ScenarioLine(SCENARIO, "valid", 1, 0, 0, 1.0, "false", "FINDING", "-", 90)],
        [RunLine(SCENARIO, 1, "false", "FINDING", f"Lost: {HOSTILE}", 90.0, str(run),
                 info["versions"])],
        0, [f"{SCENARIO}: lost"], [], 1, {"base seed": HOSTILE}, side_by_side=SIDE_BY_SIDE))
    return {"report": run / "report.html", "index": root / "index.html",
            "matrix": matrix / "matrix.html", "nightly": nightly / "index.html",
            "shrink": _hostile_shrink(root, run), "explore": _hostile_explore(root)}


def _hostile_shrink(root: Path, run: Path) -> Path:
    """A shrink directory whose finding is the hostile run, with hostile faults, settings,
    rate and minimal scenario file. Returns its page."""
    out = root / "shrink" / STAMP
    out.mkdir(parents=True)
    (out / "minimal.toml").write_text(f'name = "{SCENARIO}"\n')
    (out / "shrink.json").write_text(json.dumps({
        "finding": str(run), "anomalies": [f"lost{HOSTILE}"], "status": f"shrunk {HOSTILE}",
        "minimal": "minimal.toml", "minimal_rate": f"1 of 1 {HOSTILE}", "replays": 1,
        "rule": {"replays": 1, "min_fails": 1, "confirm": 1, "max_runs": 1, "any_anomaly": False},
        "trials": [{"reduction": "original", "rate": f"1 of 1 {HOSTILE}", "kept": True,
                    "what": f"the original {HOSTILE}",
                    "runs": [{"run_dir": str(run), "fails": True, "verdict": HOSTILE}]}]}))
    shape = Shape(((1.0, f"kill{HOSTILE}", 20.0),), (("queue", f"jepsen{HOSTILE}"),))
    return write_page(out, shape, shape)


def _hostile_explore(root: Path) -> Path:
    """An explore directory whose explore.json carries hostile text. Returns its page."""
    out = root / "explore" / STAMP
    out.mkdir(parents=True)
    (out / "explore.json").write_text(json.dumps({
        "seed": HOSTILE, "runs": 1, "exit_code": 1, "vary": [["queue.type", [HOSTILE]]]}))
    page = write_explore_page(out)
    assert page is not None
    return page


class Reader(HTMLParser):
    """Collects a page's elements, its text and its attribute values, entities resolved."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.text: list[str] = []
        self.attrs: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [v for _k, v in attrs if v is not None]
        if tag == "img":
            self.images.append(dict(attrs).get("src") or "")
        if any(k.startswith("on") for k, _v in attrs):
            self.tags.append("on-handler")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return hostile_store(tmp_path_factory.mktemp("hostile") / "store")


PAGES = ("report", "index", "matrix", "nightly", "shrink", "explore")


@pytest.mark.parametrize("which", PAGES)
def test_hostile_text_is_text_in_the_html(pages: dict[str, Path], which: str) -> None:
    html = pages[which].read_text()
    reader = Reader()
    reader.feed(html)
    reader.close()
    assert "script" not in reader.tags and "on-handler" not in reader.tags
    assert all(src.endswith(".png") for src in reader.images)  # only the plots
    text = "".join(reader.text)
    assert SCENARIO in text or HOSTILE in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&amp;amp; &lt;img" in html
    if which in ("shrink", "explore"):  # pages of a campaign: no versions; their own fields
        said = (f"kill{HOSTILE}", f"jepsen{HOSTILE}", f"1 of 1 {HOSTILE}") \
            if which == "shrink" else (f"queue.type={HOSTILE}",)
        assert all(x in text for x in said), said
        return
    assert "4.0" + HOSTILE in text  # the versions: the report's header, each page's column
    if which in ("matrix", "nightly"):  # the side-by-side table: a varied value, a reason
        assert all(x in text for x in SIDE_SAID), SIDE_SAID
    if which == "report":
        for said in (f"jepsen{HOSTILE}", f"node down {HOSTILE}", f"broker said {HOSTILE}"):
            assert said in text, said


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser(CHROMIUM) as b:
        yield b


PROBE = """({scripts: document.querySelectorAll('script').length,
  pwned: window.pwned === 1, text: document.body.innerText})"""


@pytest.mark.parametrize("which", PAGES)
def test_hostile_text_runs_nothing_in_chromium(browser: Browser, pages: dict[str, Path],
                                               which: str) -> None:
    seen = browser.read(pages[which], PROBE)
    assert seen.dialogs == [] and seen.console_errors == []
    assert seen.value["scripts"] == 0 and seen.value["pwned"] is False
    shown = " ".join(seen.value["text"].split())
    assert SCENARIO in shown or HOSTILE in shown
    if which in ("matrix", "nightly"):
        assert all(" ".join(x.split()) in shown for x in SIDE_SAID), SIDE_SAID


def test_every_template_is_autoescaped_and_nothing_is_marked_safe() -> None:
    from reports.html import ENV

    assert ENV.autoescape is True
    reports = ROOT / "reports"
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}"
             for p in sorted(reports.rglob("*")) if p.suffix in (".py", ".j2")
             for m in re.finditer(r"\|\s*safe\b|Markup|markupsafe|autoescape\s*(false|=\s*False)"
                                  r"|\{%-?\s*autoescape", p.read_text())]
    assert not found, "marked safe: " + "; ".join(found)


def test_a_line_break_in_a_template_never_glues_a_value_to_a_word() -> None:
    # reports.html.Compact drops a line break beside a {{ }}: a value then a word on the next
    # line (or a word then a value) would read "12.5s".
    glued = []
    for p in sorted((ROOT / "reports" / "templates").rglob("*.j2")):
        lines = p.read_text().splitlines()
        for i, (a, b) in enumerate(itertools.pairwise(lines)):
            a, b = a.rstrip(), b.lstrip()
            if (a.endswith("}}") and re.match(r"[\w(]", b)) or (
                    re.search(r"[\w.,:;)]$", a) and b.startswith("{{")):
                glued.append(f"{p.name}:{i + 1}")
    assert not glued, "a value glued to a word: " + ", ".join(glued)
