"""The report shows the newer promise sections of results.json (priority, delayed retry, consumer
timeout, metadata) each in its own part: verdict and why, its counts exactly as results.json
has them, its examples with their timelines, and its plot drawn from the series the checker
stored (tests/reports/promise_store.py plants them). The page judges nothing: a point is
coloured by the checker's outcome, never by the report's own reading of the numbers. Opened in
headless Chromium, the page has no console error, blank cell or broken image, and fits 1280 px.
"""

from __future__ import annotations

import copy
import html as html_lib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure

from reports import plots_promises
from reports.history_scan import HistoryScan
from reports.page import NA
from reports.report import render
from reports.report_promises import COUNTS, PROMISES, priority_examples, promises_data
from tests.reports.browser import CHROMIUM, Browser
from tests.reports.promise_store import RETRY, make_run, results
from tests.reports.test_report_browser import WIDTH, problems

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTS = {name: plot for name, _heading, plot in PROMISES if plot}  # settlement draws none


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = make_run(tmp_path_factory.mktemp("promises") / "store")
    render(d)
    return d


def part(page: str, name: str) -> str:
    """Returns the HTML of one promise's part of the page (its <div>), unescaped."""
    start = page.index(f'<div class="promise" id="{name}">')
    return html_lib.unescape(page[start:page.index("</div>", start)])


def count_rows(section_html: str) -> dict[str, str]:
    """Returns the counts table's rows (results.json field -> the number shown)."""
    return dict(re.findall(r'<td>([a-z_.]+)</td><td class="num">([\d,]+)</td>', section_html))


def expected_counts(name: str, section: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key in COUNTS[name]:
        v = section[key]
        for sub, n in (v.items() if isinstance(v, dict) else [(None, v)]):
            out[key if sub is None else f"{key}.{sub}"] = f"{n:,}"
    return out


@pytest.mark.parametrize("name", ["priority", "delayed_retry", "consumer_timeout"])
def test_each_section_shows_results_jsons_counts_under_their_names(run: Path, name: str) -> None:
    page = (run / "report.html").read_text()
    got = count_rows(part(page, name))
    assert got == expected_counts(name, results()[name])


def test_each_section_shows_its_verdict_and_why(run: Path) -> None:
    page = (run / "report.html").read_text()
    for name, badge in (("priority", "INVALID"), ("delayed_retry", "INVALID"),
                        ("consumer_timeout", "valid"), ("metadata", "valid")):
        assert re.search(rf'<h3>[^<]+<span class="badge"[^>]*>{badge}</span></h3>',
                         part(page, name)), name
    assert ("1 violation(s) among 847 deliveries judged of 1,200; 353 not judged (1 set aside "
            "within the skew margin of 100.0 ms).") in part(page, "priority")
    assert "skew_margin_ms=100.0" in part(page, "priority")
    assert "2 violation(s) among 61 returns judged of 63" in part(page, "delayed_retry")
    assert results()["metadata"]["summary"] in part(page, "metadata")
    assert 'href="#promises"' in page
    assert ('no reordering. Judged false elsewhere: <a href="#priority">priority</a>, '
            '<a href="#delayed_retry">delayed_retry</a> (under Promises, below).</p>') in page


def test_the_examples_show_their_timelines(run: Path) -> None:
    page = (run / "report.html").read_text()
    priority = part(page, "priority")
    order = [priority.index(f">{i}</td>") for i in (400, 402, 418, 420, 430)]
    assert order == sorted(order)  # the overtaking message's and the delivery's, by index
    assert "delivered (overtaken)" in priority and "1-41" in priority
    # The pair set aside by the skew margin, after the violation, with its own timeline.
    assert ("Set aside, not judged: consumer 5/c5 was handed 2-7 (level 4) before 3-9 (level "
            "5), whose confirm was recorded 0.87 ms before the consumer's previous ack, within "
            "the skew margin (100.0 ms):") in priority
    aside = priority[priority.index("Set aside"):]
    order = [aside.index(f">{i}</td>") for i in (511, 518, 519, 520, 526)]
    assert order == sorted(order)
    retry = part(page, "delayed_retry")
    assert "1-7: early" in retry and "after 98.0 ms" in retry
    assert [int(i) for i in re.findall(r'<tr><td class="num">(\d+)</td>', retry)] == [300, 301,
                                                                                     305]
    assert "No violation, so no example." in part(page, "consumer_timeout")
    metadata = part(page, "metadata")
    assert "541 INTERNAL_ERROR" in metadata and "partition-one" in metadata
    assert "a declare was answered 1.1 s after the last heal" in metadata
    n3 = re.search(r"<th>n3</th>(.*?)</tr>", metadata)
    assert n3 is not None
    cells = re.findall(r"<td[^>]*>(.*?)</td>", n3.group(1))
    assert [re.sub(r"<[^>]+>", "", c) for c in cells[:10]] == [
        "46", "3", "3", "served", "12", "2", "-3,100.0", "1,114.5", "600.0", "n/a"]


def test_each_section_has_its_plot_and_other_checks_lists_none_of_them(run: Path) -> None:
    page = (run / "report.html").read_text()
    for name, plot in PLOTS.items():
        assert f'<img src="{plot}"' in part(page, name)
        data = (run / plot).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000, plot
    assert 'id="other"' not in page
    plots = page[page.index('<h2 id="plots">'):]
    assert not any(f'src="{p}"' in plots for p in PLOTS.values())  # shown once, in its section


def test_a_section_without_its_series_says_so_and_a_failed_check_its_error(
        tmp_path: Path) -> None:
    run = make_run(tmp_path / "store")
    older = results()
    del older["delayed_retry"]["delays"]
    older["consumer_timeout"] = {"valid": "unknown", "error": "Py4JError: boom"}
    del older["metadata"]
    (run / "results.json").write_text(json.dumps(older))
    written = {p.name for p in render(run, index=False)}
    assert {"retry.png", "timeout.png", "metadata.png"}.isdisjoint(written)
    page = (run / "report.html").read_text()
    assert "has no delays series (checked before it stored one): check the run again" in page
    timeout = part(page, "consumer_timeout")
    assert "The check failed: Py4JError: boom" in timeout and "<table" not in timeout
    assert 'id="metadata"' not in page and "Metadata probe outcomes" not in page


def test_without_a_history_each_section_shows_and_says_why_it_has_no_plot(
        tmp_path: Path) -> None:
    run = make_run(tmp_path / "store")
    (run / "history.jsonl").unlink()
    assert [p.name for p in render(run, index=False)] == ["report.html"]
    page = (run / "report.html").read_text()
    for name in PLOTS:
        assert "not drawn: there is no history.jsonl." in part(page, name)
    assert count_rows(part(page, "delayed_retry")) == expected_counts(
        "delayed_retry", results()["delayed_retry"])


def test_no_promise_section_no_promises_part() -> None:
    assert promises_data({"valid": True, "queue": {"valid": True}}) == []
    assert promises_data(None) == []


def _drawn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, draw: Any,
           scan: HistoryScan) -> list[str]:
    """Draws a plot, keeping its figure. Returns its legend's labels."""
    saved: list[Figure] = []
    real = plots_promises._save

    def keep(fig: Figure, p: Path) -> Path:
        saved.append(fig)
        return real(fig, p)

    monkeypatch.setattr(plots_promises, "_save", keep)
    draw(scan, tmp_path / "p.png", "t")
    legend = saved[0].axes[0].get_legend()
    return [t.get_text() for t in legend.get_texts()]


def test_the_retry_plot_colours_by_the_checkers_outcome_not_its_own(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    section = copy.deepcopy(RETRY)
    # a delay well above its bound, which the checker called early: the plot says early too
    section["delays"]["sample"] = [{"ms": 10.0, "delay_ms": 900.0, "bound_ms": 200.0,
                                    "count": 1, "outcome": "early"}]
    labels = _drawn(monkeypatch, tmp_path, plots_promises.plot_retry,
                    HistoryScan(checked={"delayed_retry": section}))
    assert labels == ["least delay min(min x count, max) - 50 ms", "early (1)"]


def test_the_timeout_and_metadata_plots_draw_what_the_checker_stored(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    r = results()
    labels = _drawn(monkeypatch, tmp_path, plots_promises.plot_timeout,
                    HistoryScan(checked={"consumer_timeout": r["consumer_timeout"]}))
    assert labels == ["timeout (5,000 ms)", "back flagged redelivered (2)", "dead-lettered (1)"]
    labels = _drawn(monkeypatch, tmp_path, plots_promises.plot_metadata,
                    HistoryScan(checked={"metadata": r["metadata"]}))
    assert labels == ["ok (174)", "refused (541) (3)", "no answer (info) (3)"]
    r["metadata"]["timeline"]["truncated"] = True
    titles: list[str] = []

    def title_of(fig: Figure, p: Path) -> Path:
        titles.append(fig.axes[0].get_title())
        return p

    monkeypatch.setattr(plots_promises, "_save", title_of)
    plots_promises.plot_metadata(HistoryScan(checked={"metadata": r["metadata"]}),
                                 tmp_path / "m.png", "t")
    assert titles[0].endswith("(1 s buckets - the checker kept only the earliest buckets)")


def test_the_page_in_a_browser(run: Path) -> None:
    with Browser(CHROMIUM) as b:
        check = b.inspect(run / "report.html", run / "report.png", width=WIDTH)
    assert problems(run / "report.html", check) == []
    images = {Path(i["src"]).name for i in check.images}
    assert set(PLOTS.values()) <= images
    assert check.scroll_width <= WIDTH


def test_a_consumer_timeout_example_shows_its_timeline_or_says_it_has_none() -> None:
    from reports.html import Note, Para, Table
    section = results()["consumer_timeout"]
    section["examples"] = [
        {"violation": "unflagged", "id": "1-1", "cancel_index": 500, "timeline": [
            {"index": 410, "ms": 900.0, "f": "consume", "process": 5, "consumer": "c5",
             "redelivered": False},
            {"index": 500, "ms": 5200.0, "f": "cancel", "process": 5, "consumer": "c5",
             "redelivered": None},
            {"index": 530, "ms": 5300.0, "f": "consume", "process": 6, "consumer": "c6",
             "redelivered": False}]},
        {"violation": "lost", "id": "1-2", "cancel_index": 500}]  # stored before timelines
    (p,) = promises_data({"consumer_timeout": section})
    para, timeline, para2, note = p.parts
    assert isinstance(para, Para) and para.text.startswith("1-1: unflagged")
    assert isinstance(timeline, Table)
    assert [[c.text for c in r.cells] for r in timeline.rows] == [
        ["410", "900.0", "consume", "5", "c5", "no"],
        ["500", "5,200.0", "cancel", "5", "c5", "n/a"],
        ["530", "5,300.0", "consume", "6", "c6", "no"]]
    assert isinstance(para2, Para) and para2.text.startswith("1-2: lost")
    assert note == Note("results.json stores no timeline for this example.")


def test_the_consumer_timeout_part_says_how_consumers_were_ended_and_shows_a_stalled_hand_over():
    from reports.html import Para, Table
    from reports.report_promises import timeout_examples, why_sentence
    from tests.reports.promise_store import TIMEOUT
    stalled = {"status": "stalled", "index": 500, "ms": 5200.0, "process": "5", "consumer": "c5",
               "how": "cancel", "held": 2, "waiting": 1, "deadline_ms": 15_200.0,
               "delay_ms": 14_800.0, "live": ["7 c7"], "depth": [{"ms": 9000.0, "ready": 4}],
               "next": {"index": 900, "ms": 20_000.0, "process": "6", "consumer": "c6"}}
    s = {**TIMEOUT, "valid": False, "broker_channel_closes": 3, "hand_over": {
        "applies": True, "bound": {"bound_ms": 10_000.0}, "judged": 4, "handed_over": 3,
        "stalled": 1, "not_judged": {"nothing_ready": 0, "run_ended": 1},
        "delay_ms": {"max": 41.5, "median": 3.0}, "stalled_examples": [stalled]}}
    why = why_sentence("consumer_timeout", s)
    assert "after 2 broker cancel(s) and 3 channel close(s) (406)" in why
    assert ("4 hand-over(s) judged, 3 in time (the slowest 41.5 ms after the end), 1 stalled "
            "past the bound (10,000.0 ms); not judged: nothing_ready=0, run_ended=1.") in why
    para, events = timeout_examples(s)
    assert isinstance(para, Para) and para.text.startswith("Stalled hand-over")
    assert isinstance(events, Table)
    cells = [[c.text for c in row.cells] for row in events.rows]
    assert [row[2] for row in cells] == [
        "the broker ended the consumer", "consumers live then (fed before, not ended)",
        "depth sample: 4 ready", "deadline (the liveness bound)",
        "next delivery to another consumer"]
    assert cells[0][:2] == ["500", "5,200.0"] and cells[1][4] == "7 c7"
    assert cells[2][1] == "9,000.0" and cells[3][1] == "15,200.0"
    assert cells[4][:2] == ["900", "20,000.0"] and cells[4][4] == "c6"


def test_a_two_level_example_says_the_delivered_message_was_published_after_the_confirm() -> None:
    # 4.0's rule holds a normal message against a ready high one only when it was published
    # after that one's confirm: its example shows that publish first in the timeline.
    ex = copy.deepcopy(results()["priority"]["examples"][0])
    ex["delivery"].update(level=0, published={"index": 405, "time_ms": 2320.0, "node": "n3"})
    ex["overtaken_by"]["level"] = 1
    para, timeline = priority_examples({"examples": [ex]})
    assert para.text == ("Consumer 5/c5 was handed 1-40 (level 0) while 1-41 (level 1), "
                         "confirmed before the consumer's previous settlement and before 1-40 "
                         "was published (the two-level rule), was still to come:")
    rows = [[c.text for c in r.cells] for r in timeline.rows]
    assert [(r[0], r[2], r[3]) for r in rows] == [
        ("400", "published", "1-41"), ("402", "confirmed", "1-41"),
        ("405", "published (overtaken)", "1-40"), ("418", "consumer's previous ack", NA),
        ("420", "delivered (overtaken)", "1-40"), ("430", "delivered (overtaking)", "1-41")]
