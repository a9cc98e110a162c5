"""The report's test strength (issue 19): the weak verdict, the fault table's noticed, effects
and at-risk columns, incidents told once, and run text escaped in all of them.

Results are the fixture run's (tests/harness/fixtures/run, checked by the real checker) with
the literal faults, strength and incidents sections of tests/harness/fixtures/make_run.py."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from reports.history_scan import HistoryScan, scan_history
from reports.page import VERDICTS
from reports.report import render
from reports.report_results import (
    anomalies_section,
    other_checks_section,
    section_badges,
    verdict_sentence,
)
from reports.report_run import faults_section
from reports.report_strength import (
    at_risk_text,
    effects_text,
    noticed_text,
)
from tests.harness.fixtures.make_run import strength_sections
from tests.reports.fixture_store import FIXTURE_RUN

FIXTURE_RESULTS: dict[str, Any] = json.loads((FIXTURE_RUN / "results.json").read_text())
HOSTILE = "<script>alert(1)</script> n1 & n2 said \"down\""
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt; n1 &amp; n2 said &#34;down&#34;"


def results_with(weak: bool = False) -> dict[str, Any]:
    """The fixture's results with the strength sections (weak or not)."""
    return {**copy.deepcopy(FIXTURE_RESULTS), **strength_sections(weak=weak)}


def valid_results(weak: bool) -> dict[str, Any]:
    """The fixture's results made valid, with the strength sections."""
    r = results_with(weak)
    r["valid"] = r["queue"]["valid"] = r["ordering"]["valid"] = True
    r["queue"].update(anomalies=[], lost=[], lost_count=0, unflagged_duplicated=[],
                      unflagged_duplicated_count=0)
    r["ordering"].update(violation_count=0)
    return r


@pytest.fixture(scope="module")
def scan() -> HistoryScan:
    return scan_history(FIXTURE_RUN / "history.jsonl")


def render_run(tmp_path: Path, results: dict[str, Any]) -> str:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run)
    (run / "results.json").write_text(json.dumps(results))
    render(run, index=False)
    return (run / "report.html").read_text()


# --- the verdict ------------------------------------------------------------------------------


def test_a_weak_run_reads_valid_but_weak_with_its_reason_never_in_green(tmp_path: Path) -> None:
    results = valid_results(weak=True)
    assert verdict_sentence(results) == (
        "Valid but weak: neither of 2 faults was noticed by RabbitMQ. No anomaly was found (all "
        "208 confirmed messages were delivered), but a run whose faults tested nothing is not a "
        "pass.")
    html = render_run(tmp_path, results)
    purple, green = VERDICTS["weak"][1], VERDICTS["true"][1]
    assert purple != green
    assert (f'<div class="banner" style="background:{purple}"><span class="verdict">'
            "valid but weak</span>") in html
    assert f'class="banner" style="background:{green}"' not in html
    assert ('<p class="sub strength weak">Test strength: faults noticed 0 of 2, failovers 0, '
            "most messages at risk 14.</p>") in html
    # strength, faults and incidents are not checks: no badge, no "other checks" row
    assert "strength" not in " ".join(name for name, _key in section_badges(results))
    assert other_checks_section(results) == ""


def test_a_strong_run_shows_its_strength_line_and_an_old_run_none(tmp_path: Path) -> None:
    strong = valid_results(weak=False)
    assert verdict_sentence(strong).startswith("Valid: all 208 confirmed messages")
    html = render_run(tmp_path, strong)
    assert f'style="background:{VERDICTS["true"][1]}"><span class="verdict">valid<' in html
    assert ('<p class="sub strength">Test strength: faults noticed 2 of 2, failovers 2, most '
            "messages at risk 14.</p>") in html
    old = copy.deepcopy(FIXTURE_RESULTS)
    shutil.rmtree(tmp_path / "run")
    html = render_run(tmp_path, old)
    assert "Test strength" not in html and "valid but weak" not in html
    assert "<h2 id=\"faults\">Faults: availability and time to recover</h2>" in html
    assert 'href="#incidents"' not in html


def test_an_invalid_weak_run_is_invalid() -> None:
    results = results_with(weak=True)
    assert verdict_sentence(results).startswith("Invalid: 2 confirmed messages lost")


def test_a_weak_run_without_a_reason_or_summary_still_says_so() -> None:
    results = {"valid": True, "queue": {"valid": True, "acknowledged_count": 5},
               "strength": {"weak": True, "faults": 3, "noticed": 0, "failovers": 0,
                            "max_at_risk": 0}}
    assert verdict_sentence(results).startswith("Valid but weak: its faults tested nothing.")


# --- the fault table --------------------------------------------------------------------------


@pytest.mark.parametrize(("fault", "said"), [
    ({"noticed": True, "noticed_ms": 7012.3, "noticed_when": "during",
      "detections": [{"detector": "raft", "at_ms": 9000.0},
                     {"detector": "distribution", "at_ms": 8000.0}]},
     "7.0 s, distribution"),
    ({"noticed": True, "noticed_ms": 21500.0, "noticed_when": "after_heal", "duration_ms": 20000.0,
      "detections": [{"detector": "distribution", "at_ms": 41500.0}]},
     "after heal, 1.5 s late, distribution"),
    ({"noticed": True, "noticed_ms": 21500.0, "noticed_when": "after_heal", "start_ms": 1000.0,
      "end_ms": 21000.0, "detections": []}, "after heal, 1.5 s late"),
    ({"noticed": False, "noticed_ms": None, "detections": []}, "not noticed"),
    ({"noticed": "unknown"}, "unknown"),
    ({}, "unknown"),
])
def test_noticed_says_when_and_by_which_detector(fault: dict[str, Any], said: str) -> None:
    assert noticed_text(fault)[0] == said


def test_effects_are_compact_and_in_time_order() -> None:
    fault = {"effects": [
        {"kind": "autoheal-restart", "node": "n1", "at_ms": 41234.0},
        {"kind": "unsynchronised-promotion", "node": "n2", "at_ms": 12100.0},
        {"kind": "a-new-kind", "node": "n3", "at_ms": 50000.0},
        {"kind": "publishes-blocked", "node": None},
    ]}
    assert effects_text(fault) == (
        "publishes blocked on a node; n2 promoted (unsynchronised) at 12.1 s; autoheal "
        "restarted n1 at 41.2 s; a new kind (n3) at 50.0 s")
    assert effects_text({"effects": []}) == "none seen"
    assert effects_text({}) == "n/a"


def test_at_risk_gives_the_count_and_the_depth_sample_with_its_source() -> None:
    risk = {"at_risk": {"count": 2846, "source": "history",
                        "depth": {"ready": 2800, "unacked": 40, "at_ms": 21331.6,
                                  "source": "depth sample"}}}
    assert at_risk_text(risk) == (
        "2,846", "from the history; depth sample: 2,800 ready + 40 unacked at 21.3 s")
    assert at_risk_text({"at_risk": {"count": None, "depth": None}}) == ("unknown", "")
    assert at_risk_text({}) == ("n/a", "")


def test_the_fault_table_tells_each_fault_noticed_effects_and_at_risk(scan: HistoryScan) -> None:
    html = faults_section(scan, results_with())
    noticed = html[:html.index("<h3>Availability and time to recover</h3>")]
    rows = re.findall(r"<tr>(.*?)</tr>", noticed)
    assert len(rows) == 3  # the header and the two faults
    assert ("<td>2.5 s, raft<span class=\"cell-note\">raft elected a new leader on n2 2.5 s "
            "after the partition began. n2/rabbit@10.213.0.12.log:7: queue &#39;jepsen.queue"
            "&#39; in vhost &#39;/&#39;: leader elected in term 2</span></td>") in rows[1]
    assert ("<td>n2 elected leader at 12.5 s; publishes blocked on n1 at 15.0 s</td>"
            in rows[1])
    assert ("<td>14<span class=\"cell-note\">from the history; depth sample: 13 ready + 1 "
            "unacked at 10.3 s</span></td>") in rows[1]
    assert ("<td>connections dropped on n2 at 26.0 s; n3 elected leader at 28.5 s; n2 "
            "restarted at 34.5 s</td>") in rows[2]
    assert "Test strength: faults noticed 2 of 2, failovers 2, most messages at risk 14." in html
    assert "RabbitMQ notices a lost peer 7.5 to 12.5 s after it goes (net_ticktime 10 s)" in html


def test_a_weak_runs_fault_table_says_not_noticed(scan: HistoryScan) -> None:
    html = faults_section(scan, valid_results(weak=True))
    assert html.count('<td class="weak-cell">not noticed<span class="cell-note">') == 2
    assert ('<p class="strength weak"><strong>Valid but weak</strong>: neither of 2 faults was '
            "noticed by RabbitMQ.") in html


def test_a_fault_the_history_lacks_gets_a_row_of_its_own(scan: HistoryScan) -> None:
    results = results_with()
    results["faults"].append({**results["faults"][1], "index": 2, "f": "pause",
                              "fault": "pause", "start_ms": 60000.0, "end_ms": 65000.0})
    html = faults_section(scan, results)
    assert "pause (results.json only)" in html and "60.000" in html
    assert "no entry in results.json" not in html


# --- incidents --------------------------------------------------------------------------------


def test_each_incident_is_told_once_with_its_timeline_log_and_classes() -> None:
    results = results_with()
    # the per-message view repeats the same broker log for each message; incidents replace it
    results["queue"]["details"] = {"lost": [
        {"id": "1-40", "published": "process 1 on n2", "broker log": "26.1 s n3 node down: x"},
        {"id": "5-20", "published": "process 5 on n2", "broker log": "26.1 s n3 node down: x"}]}
    html = anomalies_section(results)
    assert html.count('<div class="anomaly incident"') == 2
    assert html.count("rabbit on node &#39;rabbit@10.213.0.12&#39; down") == 1
    assert "26.1 s n3 node down: x" not in html  # the repeated column is gone ...
    assert "<td>1-40</td><td>process 1 on n2</td>" in html  # ... the story stays, folded
    lost = html[html.index('id="anomaly-lost"'):]
    assert '<p>In <a href="#incident-2">incident 2</a> (2).</p>' in lost
    assert "<code>1-40</code><code>5-20</code>" not in lost[:lost.index("</div>")]
    two = html[html.index('id="incident-2"'):]
    assert ("<h3>Incident 2: 2 lost after n2 was killed (noticed 0.1 s in; n3 elected "
            "leader)</h3>") in two
    assert "<p>From 26.0 to 47.0 s. Faults: kill on n2 from 26.0 to 34.5 s.</p>" in two
    assert ('<tr><td>lost</td><td class="num">2</td><td class="ids"><code>1-40</code>'
            "<code>5-20</code></td></tr>") in two
    assert ('<tr class="mend"><td class="num">45.800</td><td>mend<span class="cell-note">'
            "the harness&#39;s own restart</span></td><td>n2</td>") in two
    steps = re.findall(r'<td class="num">(\d+\.\d+)</td><td>([a-z ]+)', two)
    assert [w for _t, w in steps][:6] == ["fault start", "noticed", "leader election", "heal",
                                         "mend", "recovery"]
    ordering = html[html.index('id="anomaly-ordering"'):]
    assert ('In <a href="#incident-1">incident 1</a> (1), <a href="#incident-2">incident 2</a> '
            "(1).") in ordering


def test_anomalies_out_of_every_faults_reach_say_so() -> None:
    results = results_with()
    results["incidents"] = [{"id": 3, "faults": [], "counts": {"lost": 1},
                             "examples": {"lost": ["9-9"]}, "timeline": [], "log_lines": []}]
    html = anomalies_section(results)
    assert "No fault in reach: these anomalies fall outside every fault&#39;s window." in html
    assert "<h3>Incident 3: 1 lost</h3>" in html
    assert "No broker log line of this stretch says anything about it." in html


def test_a_class_no_incident_holds_keeps_its_own_ids() -> None:
    html = anomalies_section(valid_results(weak=True))  # no incidents at all
    recovered = html[html.index('id="anomaly-recovered"'):]
    assert "<code>0-13</code>" in recovered[:recovered.index("</div>")]
    assert "What happened to each sampled message" not in html


def test_older_results_keep_the_per_message_view() -> None:
    results = copy.deepcopy(FIXTURE_RESULTS)
    results["queue"]["details"] = {"lost": [
        {"id": "1-40", "broker log": "26.1 s n3 node down: x"},
        {"id": "5-20", "broker log": "26.1 s n3 node down: x"}]}
    html = anomalies_section(results)
    assert html.count("26.1 s n3 node down: x") == 1  # once, each row linking it
    assert html.count('<a href="#log-lost-1">broker log excerpt 1</a>') == 2
    assert "incident" not in html.lower()
    assert "<code>1-40</code><code>5-20</code>" in html


# --- escaping ---------------------------------------------------------------------------------


def test_run_text_is_escaped_in_the_fault_table_and_the_incidents(
        scan: HistoryScan, tmp_path: Path) -> None:
    results = results_with()
    fault = results["faults"][1]
    fault["evidence"] = HOSTILE
    fault["detections"][0].update(text=HOSTILE, evidence=HOSTILE)
    fault["effects"][0]["node"] = HOSTILE
    fault["at_risk"]["depth"]["source"] = HOSTILE
    incident = results["incidents"][1]
    incident["summary"] = HOSTILE
    incident["log_lines"][0].update(text=HOSTILE, node=HOSTILE, label=HOSTILE, evidence=HOSTILE)
    incident["timeline"][0].update(text=HOSTILE, node=HOSTILE, what=HOSTILE)
    incident["examples"]["lost"] = [HOSTILE]
    incident["counts"][HOSTILE] = 1
    results["strength"]["reason"] = results["strength"]["summary"] = HOSTILE
    for html in (faults_section(scan, results), anomalies_section(results),
                 render_run(tmp_path, results)):
        assert "<script>" not in html
        assert ESCAPED in html or ESCAPED.replace("&#34;", "&#39;") in html
    page = (tmp_path / "run" / "report.html").read_text()
    assert page.count("&lt;script&gt;alert(1)") >= 12
