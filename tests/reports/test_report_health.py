"""The report shows the harness's own health (tests/reports/health_store.py plants it): the
memory, the history's completeness and the verdict's delay exactly as results.json's health
section judges them, each process's memory over the main phase from health.jsonl's samples,
and their plot. The page judges nothing: a memory the samples show growing is "flat" when the
section says flat. A run without the section or without samples says so."""

from __future__ import annotations

import html as html_lib
import re
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure

from history.health import read_samples
from reports import plots_health
from reports.report import render
from reports.report_health import MainPhase, health_data
from tests.reports.health_store import MIB, SAMPLES, START, health, make_run, sample_lines

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def section(page: str) -> str:
    """Returns the Health section's text (tags dropped, unescaped, spaces collapsed)."""
    start = page.index('<h2 id="health">')
    end = page.index('<h2 id="test">', start)
    text = re.sub(r"<[^>]+>", " ", page[start:end])
    return re.sub(r"\s+", " ", html_lib.unescape(text)).strip()


def rendered(tmp_path: Path, **kw: Any) -> tuple[Path, str]:
    run = make_run(tmp_path / "store", **kw)
    render(run, index=False)
    return run, (run / "report.html").read_text()


def test_the_health_section_shows_results_jsons_judgements_and_each_process_s_memory(
        tmp_path: Path) -> None:
    run, page = rendered(tmp_path)
    said = section(page)
    assert 'href="#health"' in page
    assert said.startswith("The harness's health memory flat Memory flat over the main phase; "
                           "history complete; verdict in time.")
    assert ("memory flat least-squares slope 12.3 MiB/h, a growth of 0.1 MiB over the main "
            "phase of 7 s (110.0 -> 210.0 MiB, peak 210.0 MiB; 4 samples, at most 1 worker "
            "process(es))") in said
    assert ("history complete history.jsonl holds 170 line(s) of the 170 op(s) the run "
            "wrote") in said
    assert ("verdict in time the verdict came 41.5 s after the main phase's end (bound 120.0 "
            "s)") in said
    # Each process's figures and both together, as results.json gives them.
    assert ("Memory over the main phase: results.json's, each process apart and both together "
            "as judged.") in said
    assert "controller 110.0 140.0 140.0 4.5" in said
    assert "workers 0.0 70.0 70.0 7.8" in said
    assert "harness (both) 110.0 210.0 210.0 12.3" in said
    assert (run / "health.png").read_bytes().startswith(PNG_MAGIC)
    assert 'src="health.png"' in page
    # Information, never a check: no badge in the banner, no "Other checks" row, no "no
    # verdict from health".
    assert '<h2 id="other">' not in page and "no verdict from" not in page


def test_the_page_says_what_the_section_says_never_its_own_reading_of_the_samples(
        tmp_path: Path) -> None:
    # The samples grow from 110 to 210 MiB over the phase; the section says flat: so does the
    # page. And a section that says grew, incomplete and late is shown so, in its colours.
    _run, page = rendered(tmp_path / "a")
    assert "Memory flat over the main phase" in section(page)
    grew = health(memory="grew", history_lines=168, history_complete=False,
                  verdict_after_main_s=151.0, verdict_in_time=False)
    _run, page = rendered(tmp_path / "b", section=grew)
    said = section(page)
    assert "Memory grew over the main phase; history incomplete; verdict late." in said
    assert "history incomplete history.jsonl holds 168 line(s) of the 170 op(s)" in said
    assert "verdict late the verdict came 151.0 s after the main phase's end" in said
    head = page[page.index('<h2 id="health">'):]
    assert re.search(r'<span class="badge" style="background:#[0-9a-f]+">memory grew</span>',
                     head)


def test_a_check_without_figures_per_process_takes_them_from_the_samples(
        tmp_path: Path) -> None:
    older = {k: v for k, v in health().items() if k != "by_process"}
    _run, page = rendered(tmp_path, section=older)
    said = section(page)
    assert "each process's from health.jsonl's samples within it (results.json gives no figure" \
        in said
    # The main phase is 1 s to 8 s: the samples at 2, 4, 6 and 8 s, never the one before it
    # nor the check's after it; no slope of the report's own.
    assert "controller 110.0 140.0 140.0 n/a" in said
    assert "workers 0.0 70.0 70.0 n/a" in said
    assert "harness (both) 110.0 210.0 210.0 12.3" in said


def test_an_unknown_memory_gives_the_sections_reason(tmp_path: Path) -> None:
    unknown = {"memory": "unknown", "samples": 1,
               "memory_reason": "1 memory samples in the main phase (needs 3)",
               "history_ops": None, "history_lines": 170, "history_complete": None,
               "verdict_after_main_s": None, "verdict_bound_s": 120.0, "verdict_in_time": None}
    _run, page = rendered(tmp_path, section=unknown)
    said = section(page)
    assert "Memory unknown over the main phase; history unknown; verdict unknown." in said
    assert "memory unknown 1 memory samples in the main phase (needs 3)" in said
    assert "history.jsonl holds 170 line(s) of the n/a op(s)" in said
    assert "the verdict's delay after the main phase was not recorded" in said


def test_without_samples_the_section_stays_and_says_why_there_is_no_plot(
        tmp_path: Path) -> None:
    run, page = rendered(tmp_path, samples=False)
    said = section(page)
    assert "Memory flat over the main phase" in said
    assert "The harness's memory: not drawn: health.jsonl holds no memory sample." in said
    assert "controller 110.0 140.0 140.0 4.5" in said  # results.json's, samples or not
    assert not (run / "health.png").exists()


def test_samples_without_a_section_are_drawn_and_nothing_is_judged(tmp_path: Path) -> None:
    run, page = rendered(tmp_path, section={})
    said = section(page)
    assert said.startswith("The harness's health memory unknown Not judged: results.json has "
                           "no health section.")
    assert "results.json has no health section (checked before it had one, or not checked)" \
        in said
    assert "controller 110.0 140.0 140.0 n/a" in said
    assert "harness (both) n/a n/a n/a n/a" in said
    assert (run / "health.png").read_bytes().startswith(PNG_MAGIC)


def test_neither_section_nor_samples_no_health_part(tmp_path: Path) -> None:
    run, page = rendered(tmp_path, section={}, samples=False)
    assert '<h2 id="health">' not in page and 'href="#health"' not in page
    assert not (run / "health.png").exists()
    assert health_data(None, [], None) is None


def test_read_samples_leaves_out_a_torn_last_line(tmp_path: Path) -> None:
    (tmp_path / "health.jsonl").write_text(sample_lines() + '{"at_unix": 17958', "utf-8")
    got = read_samples(tmp_path)
    assert [(s.at_unix - START, s.controller_rss // MIB, s.workers_rss // MIB, s.workers)
            for s in got] == list(SAMPLES)
    assert read_samples(tmp_path / "nowhere") == []


def test_the_plot_draws_each_process_s_samples_on_the_history_s_clock(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    saved: list[Figure] = []
    real = plots_health._save

    def keep(fig: Figure, p: Path) -> Path:
        saved.append(fig)
        return real(fig, p)

    monkeypatch.setattr(plots_health, "_save", keep)
    (tmp_path / "health.jsonl").write_text(sample_lines(), "utf-8")
    phase = MainPhase(START + 1.0, START + 8.0, START)
    plots_health.plot_health(read_samples(tmp_path), phase, None, tmp_path / "h.png", "t")
    ax = saved[0].axes[0]
    lines = {tuple(line.get_xdata()): list(line.get_ydata()) for line in ax.lines
             if len(line.get_xdata()) == len(SAMPLES)}
    xs = tuple(t for t, _c, _w, _n in SAMPLES)
    assert list(lines) == [xs]  # one clock: seconds since the history's start
    drawn = [list(line.get_ydata()) for line in ax.lines if len(line.get_xdata()) == len(xs)]
    assert drawn == [[float(c) for _t, c, _w, _n in SAMPLES],
                     [float(w) for _t, _c, w, _n in SAMPLES],
                     [float(c + w) for _t, c, w, _n in SAMPLES]]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["controller (peak 300 MiB)", "workers (peak 900 MiB)",
                      "both (peak 1,200 MiB)", "main phase: start, end"]
    phase_lines = sorted(line.get_xdata()[0] for line in ax.lines
                         if line.get_linestyle() == ":")
    assert phase_lines == [1.0, 8.0]


def test_the_page_in_a_browser(tmp_path: Path) -> None:
    from tests.reports.browser import CHROMIUM, Browser
    from tests.reports.test_report_browser import WIDTH, problems

    run, _page = rendered(tmp_path)
    with Browser(CHROMIUM) as b:
        check = b.inspect(run / "report.html", run / "report.png", width=WIDTH)
    assert problems(run / "report.html", check) == []
    assert "health.png" in {Path(i["src"]).name for i in check.images}
    assert check.scroll_width <= WIDTH
