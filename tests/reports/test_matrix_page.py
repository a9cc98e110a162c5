"""Matrix pages (reports.matrix_page) of matrices that carry test strength (issue 19): a weak
run reads "valid but weak" with its reason, every run with a strength shows its summary, and
matrices from before strength show as before (tests/reports/test_index.py). A matrix over
several release lines or variants opens with its side-by-side table as matrix.json holds it;
one from before that table shows none."""

from __future__ import annotations

import re
from pathlib import Path

from reports.matrix_page import write_matrix_page
from reports.page import VERDICTS
from tests.reports.strength_store import (
    STRONG_SUMMARY,
    WEAK_REASON,
    WEAK_SUMMARY,
    make_strength_store,
)


def cells(table_html: str) -> list[list[str]]:
    """Returns the text of each cell of a table, row by row (header row excluded)."""
    out = []
    for row in re.findall(r"<tr>(.*?)</tr>", table_html, re.S)[1:]:
        found = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        out.append([" ".join(re.sub(r"<[^>]+>", " ", c).split()) for c in found])
    return out


def test_weak_rows_read_valid_but_weak_with_why_and_every_strength_is_shown(
        tmp_path: Path) -> None:
    store = tmp_path / "store"
    made = make_strength_store(store)
    summary = write_matrix_page(store, made["matrix"])
    assert summary is not None and summary.judgements == {
        "weak": 1, "as expected": 2, "FINDING": 1}
    html = (made["matrix"] / "matrix.html").read_text()
    rows = cells(html[html.index("<table"):html.index("</table>")])
    assert "<th>version</th>" not in html  # no row names one
    assert [r[3:5] for r in rows] == [
        [f"valid but weak {WEAK_REASON}; {WEAK_SUMMARY}", "weak"],
        [f"valid {STRONG_SUMMARY}", "as expected"],
        [f"INVALID {STRONG_SUMMARY}", "FINDING"],
        ["valid", "as expected"],  # an older matrix's row: as before
    ]
    assert f'<span class="badge" style="background:{VERDICTS["weak"][1]}">valid but weak' in html
    assert "2: an unknown verdict or a weak run" in html
    per = html[html.index("<h2>Per scenario</h2>"):]
    head = re.findall(r"<th[^>]*>(.*?)</th>", per)
    assert head[:7] == ["scenario", "expected", "runs", "valid", "invalid", "unknown", "weak"]
    assert cells(per[per.index("<table"):per.index("</table>")])[0][:9] == [
        "healthy", "valid", "1", "1", "0", "0", "1", "0.0", "1.0"]


def test_hostile_strength_text_is_escaped(tmp_path: Path) -> None:
    import json

    store = tmp_path / "store"
    made = make_strength_store(store)
    doc = json.loads((made["matrix"] / "matrix.json").read_text())
    doc["rows"][0]["weak_reason"] = "<script>x()</script> & co"
    (made["matrix"] / "matrix.json").write_text(json.dumps(doc))
    write_matrix_page(store, made["matrix"])
    html = (made["matrix"] / "matrix.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;x()&lt;/script&gt; &amp; co; faults" in html


def test_a_row_shows_its_versions_or_release_line_and_a_dash_without(tmp_path: Path) -> None:
    import json

    store = tmp_path / "store"
    made = make_strength_store(store)
    doc = json.loads((made["matrix"] / "matrix.json").read_text())
    doc["rows"][0]["versions"] = {"rabbitmq": "4.0.5", "erlang": "26.2", "metadata_store":
                                  "khepri"}
    doc["rows"][1]["rabbitmq"] = "3.10"
    doc["rows"][2].update(rabbitmq="4.0", versions={"erlang": "26.2"})
    (made["matrix"] / "matrix.json").write_text(json.dumps(doc))
    write_matrix_page(store, made["matrix"])
    html = (made["matrix"] / "matrix.html").read_text()
    assert re.findall(r"<th[^>]*>(.*?)</th>", html)[3] == "version"
    rows = cells(html[html.index("<table"):html.index("</table>")])
    assert [r[3] for r in rows] == ["4.0.5 erlang 26.2, metadata store khepri", "3.10",
                                    "4.0 erlang 26.2", "—"]


SIDE_BY_SIDE = {
    "column": "broker.rabbitmq", "values": ["3.10", "4.0"],
    "titles": ["RabbitMQ 3.10", "RabbitMQ 4.0"],
    "lines": [{"scenario": "quorum-ignore", "expect": "valid", "cells": ["2/2 ok", "1/2 FINDING"]},
              {"scenario": "mirrored-master-partition", "expect": "lost",
               "cells": ["2/2 ok", "not applicable: classic queue mirroring was removed"]}]}


def _page_with(tmp_path: Path, side_by_side: object) -> str:
    import json

    store = tmp_path / "store"
    made = make_strength_store(store)
    doc = json.loads((made["matrix"] / "matrix.json").read_text())
    if side_by_side is not None:
        doc["side_by_side"] = side_by_side
    (made["matrix"] / "matrix.json").write_text(json.dumps(doc))
    write_matrix_page(store, made["matrix"])
    return (made["matrix"] / "matrix.html").read_text()


def test_the_side_by_side_table_shows_each_cell_as_matrix_json_says_it(tmp_path: Path) -> None:
    html = _page_with(tmp_path, SIDE_BY_SIDE)
    side = html[html.index("<h2>Side by side</h2>"):html.index("<h2>Runs</h2>")]
    assert "<code>broker.rabbitmq</code>" in side
    assert re.findall(r"<th[^>]*>(.*?)</th>", side) == [
        "scenario", "expected", "RabbitMQ 3.10", "RabbitMQ 4.0"]
    assert cells(side[side.index("<table"):side.index("</table>")]) == [
        ["quorum-ignore", "valid", "2/2 ok", "1/2 FINDING"],
        ["mirrored-master-partition", "lost", "2/2 ok",
         "not applicable: classic queue mirroring was removed"]]
    # the runs still follow, first row of their own table
    runs = html[html.index("<h2>Runs</h2>"):]
    assert cells(runs[runs.index("<table"):runs.index("</table>")])[0][0] == "healthy"


def test_a_matrix_json_without_a_side_by_side_table_shows_none(tmp_path: Path) -> None:
    assert "Side by side" not in _page_with(tmp_path / "old", None)
    for i, bad in enumerate(("3.10,4.0", {"titles": "RabbitMQ 3.10"},
                             {"titles": ["a"], "lines": 7}, {"titles": ["a"], "lines": []},
                             {"titles": ["a", "b"], "lines": [{"cells": "x"}, 7]})):
        _page_with(tmp_path / f"bad{i}", bad)  # never a crash
    html = _page_with(tmp_path / "short", {"titles": ["a", "b"], "lines": [{"cells": ["x"]}]})
    side = html[html.index("<h2>Side by side</h2>"):html.index("<h2>Runs</h2>")]
    assert cells(side[side.index("<table"):side.index("</table>")]) == [["n/a", "n/a", "x", "n/a"]]


def test_summaries_of_several_lines_or_variants_say_which_is_which(tmp_path: Path) -> None:
    import json

    store = tmp_path / "store"
    made = make_strength_store(store)
    doc = json.loads((made["matrix"] / "matrix.json").read_text())
    one = doc["summaries"][0]
    doc["summaries"] = [one | {"rabbitmq": "3.10"}, one | {"rabbitmq": "4.0"},
                        one | {"rabbitmq": "4.0", "variant": "queue.type=stream"}]
    (made["matrix"] / "matrix.json").write_text(json.dumps(doc))
    write_matrix_page(store, made["matrix"])
    html = (made["matrix"] / "matrix.html").read_text()
    per = html[html.index("<h2>Per scenario</h2>"):]
    assert re.findall(r"<th[^>]*>(.*?)</th>", per)[:5] == [
        "scenario", "RabbitMQ", "variant", "expected", "runs"]
    assert '<th>expected</th><th class="num">runs</th>' in per  # the counts stay numeric
    assert [r[:4] for r in cells(per[per.index("<table"):per.index("</table>")])] == [
        ["healthy", "3.10", "-", "valid"], ["healthy", "4.0", "-", "valid"],
        ["healthy", "4.0", "queue.type=stream", "valid"]]


def test_a_lost_count_no_drain_proved_reads_unproven(tmp_path: Path) -> None:
    from reports.matrix_page import lost_text

    assert lost_text({"lost": 3017, "queue_valid": "unknown"}) == "3,017 (unproven)"
    assert lost_text({"lost": 3017, "queue_valid": False}) == "3,017"
    assert lost_text({"lost": 0, "queue_valid": "unknown"}) == "0"
    # Rows stored before the queue's verdict was kept: the run's verdict in its place, as the
    # matrix's own table reads them (harness.matrix.Row.lost_proven).
    assert lost_text({"lost": 12, "valid": False}) == "12"
    assert lost_text({"lost": 12, "valid": "unknown"}) == "12 (unproven)"
    assert lost_text({"lost": None}) == "-"
