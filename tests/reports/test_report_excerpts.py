"""The report's per-message tables never repeat a broker-log excerpt (issue 33 item 3): each row
links its incident, or the excerpt shown once below its table (reports.report_excerpts)."""

from __future__ import annotations

import copy
import json
from typing import Any

from reports.report_results import anomalies_section
from tests.reports.fixture_store import FIXTURE_RUN

FIXTURE_RESULTS: dict[str, Any] = json.loads((FIXTURE_RUN / "results.json").read_text())
EXCERPT = " | ".join(f"{20 + i}.0 s n2 raft: line {i} of the stretch" for i in range(20))


def recovered_results(n: int = 12, incidents: list[dict[str, Any]] | None = None
                      ) -> dict[str, Any]:
    """The fixture's results, valid, with `n` recovered messages whose details share one
    20-line excerpt (and the incidents given, if any)."""
    r = copy.deepcopy(FIXTURE_RESULTS)
    r["valid"] = r["queue"]["valid"] = r["ordering"]["valid"] = True
    ids = [f"3-{i}" for i in range(1, n + 1)]
    r["queue"].update(anomalies=[], lost=[], lost_count=0, unflagged_duplicated=[],
                      unflagged_duplicated_count=0, recovered=ids, recovered_count=n)
    r["ordering"].update(violation_count=0)
    r["queue"]["details"] = {"recovered": [
        {"id": m, "published": "process 3 on n1", "deliveries": "n2 c4 unflagged acked",
         "broker log": EXCERPT} for m in ids]}
    if incidents is not None:
        r["incidents"] = incidents
    return r


def test_twelve_recovered_rows_sharing_one_excerpt_show_it_once() -> None:
    html = anomalies_section(recovered_results())
    recovered = html[html.index('id="anomaly-recovered"'):]
    assert html.count("line 7 of the stretch") == 1
    assert recovered.count('<a href="#log-recovered-1">broker log excerpt 1</a>') == 12
    assert recovered.count('id="log-recovered-1"') == 1
    assert "<td>3-12</td>" in recovered  # every row is still there


def test_two_excerpts_are_each_shown_once_in_row_order() -> None:
    r = recovered_results(4)
    rows = r["queue"]["details"]["recovered"]
    rows[1]["broker log"] = rows[3]["broker log"] = "31.0 s n3 raft: another stretch"
    html = anomalies_section(r)
    assert html.count("line 7 of the stretch") == 1
    assert html.count("another stretch") == 1
    assert html.index('id="log-recovered-1"') < html.index('id="log-recovered-2"')
    assert html.count('<a href="#log-recovered-2">broker log excerpt 2</a>') == 2


def test_a_row_an_incident_holds_links_the_incident_whose_log_is_shown_once() -> None:
    incident = {"id": 4, "faults": [], "counts": {"lost": 1},
                "examples": {"lost": ["9-9"], "recovered": ["3-1", "3-2"]}, "timeline": [],
                "log_lines": []}
    html = anomalies_section(recovered_results(3, [incident]))
    recovered = html[html.index('id="anomaly-recovered"'):]
    assert recovered.count('<a href="#incident-4">incident 4</a>') == 2
    assert recovered.count('<a href="#log-recovered-1">broker log excerpt 1</a>') == 1
    assert html.count("line 7 of the stretch") == 1
