"""The report's parts, on literal inputs: verdict sentences, counts, anomalies, the spec table,
fault kinds and their colours, depth and placement samples, and the fixture run's whole page."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from history import HARNESS, NEMESIS, Op, OpType
from history import faults as kinds
from reports.history_scan import (
    PlacementSample,
    Thinned,
    WindowTracker,
    depth_sample,
    fault_windows,
    placement_sample,
)
from reports.plots import fault_colour, placement_spans
from reports.report import render
from reports.report_results import anomalies_section, counts_section, verdict_sentence
from reports.report_run import grudge_text, spec_rows
from tests.reports.fixture_store import FIXTURE_RUN

S = 1_000_000_000
FIXTURE_RESULTS: dict[str, Any] = json.loads((FIXTURE_RUN / "results.json").read_text())
FIXTURE_SPEC: dict[str, Any] = json.loads((FIXTURE_RUN / "test.json").read_text())


# --- the verdict's sentence -------------------------------------------------------------------


def test_sentence_of_the_invalid_fixture_names_each_anomaly() -> None:
    assert verdict_sentence(FIXTURE_RESULTS) == (
        "Invalid: 2 confirmed messages lost, 1 message delivered twice without the redelivered "
        "flag and 2 deliveries out of publish order."
    )


def test_sentence_of_a_valid_run_counts_what_was_allowed() -> None:
    results = {"valid": True, "queue": {"valid": True, "acknowledged_count": 5372,
                                        "redelivered_duplicated_count": 1, "recovered_count": 0}}
    assert verdict_sentence(results) == (
        "Valid: all 5,372 confirmed messages were delivered, with no loss, unexpected message, "
        "unflagged duplicate or reordering (allowed: 1 message delivered again with the "
        "redelivered flag)."
    )


def test_sentence_of_an_unknown_run_gives_the_reason_and_the_problems_once() -> None:
    results = {
        "valid": "unknown",
        "queue": {"valid": "unknown", "reason": "the drain did not complete (no end)"},
        "run": {"valid": "unknown", "problems": ["drain did not complete",
                                                 "cluster did not recover after the faults"]},
    }
    assert verdict_sentence(results) == (
        "Unknown: the drain did not complete (no end); cluster did not recover after the faults."
    )


def test_sentence_of_a_crashed_checker_and_of_no_results() -> None:
    crashed = {"valid": "unknown", "queue": {"valid": "unknown", "error": "KeyError: 'x'"}}
    assert verdict_sentence(crashed) == "Unknown: the queue checker failed (KeyError: 'x')."
    assert verdict_sentence(None).startswith("Not checked: there is no results.json")
    assert verdict_sentence([1]) == "Not checked: results.json is not a JSON object."


# --- counts and anomalies ---------------------------------------------------------------------


def test_counts_are_labelled_with_their_meaning_and_anomalies_in_red() -> None:
    html = counts_section(FIXTURE_RESULTS)
    assert '<tr class="bad"><td>lost</td><td class="num">2</td>' in html
    assert '<tr><td>confirmed</td><td class="num">208</td>' in html
    assert '<td class="sub-row">with redelivered flag</td><td class="num">2</td>' in html
    assert '<tr class="bad"><td>out of order</td><td class="num">2</td>' in html
    assert "Longest stretch without a confirm: 2.611 s (from 9.939 to 12.550 s)." in html


def test_counts_missing_from_results_read_na_with_why() -> None:
    html = counts_section({"valid": True, "queue": {"valid": True, "lost_count": 0,
                                                   "new_thing_count": 4}})
    assert '<td>publishes attempted</td><td class="num">n/a</td>' in html
    assert "not reported by this checker" in html
    assert '<td>new thing</td><td class="num">4</td>' in html
    assert "no ordering section in results.json" in html


def test_anomalies_show_ids_and_the_checkers_explanations_and_details() -> None:
    results = json.loads(json.dumps(FIXTURE_RESULTS))
    # the checker's own paragraph for lost, none for the unflagged duplicate: the built-in one
    results["queue"]["explanations"] = {"lost": "Acked by <the> leader, gone after failover."}
    results["queue"]["details"] = {
        "lost": [{"id": "1-40", "confirmed_ms": 25272.9, "leader": "n2"}],
        "unflagged_duplicated": {"5-4": {"first": "consume-3", "again": "consume-3"}},
    }
    html = anomalies_section(results)
    lost = html[html.index('id="anomaly-lost"'):html.index('id="anomaly-unflagged_duplicated"')]
    assert "Acked by &lt;the&gt; leader, gone after failover." in lost
    assert "<code>1-40</code><code>5-20</code>" in lost
    assert "<th>confirmed ms</th>" in lost and "<td>25272.9</td>" in lost
    dup = html[html.index('id="anomaly-unflagged_duplicated"'):]
    assert "<td>5-4</td><td>consume-3</td>" in dup
    assert "did not carry the AMQP redelivered flag" in dup  # the built-in explanation
    assert "<td>2-47 (seq 47, at 31.470 s)</td><td>2-46 (seq 46, at 31.490 s)</td>" in html
    seen = html[html.index("Seen, but not counted"):]
    assert "2 messages delivered again with the redelivered flag" in seen
    assert "1 message of unknown publish outcome delivered" in seen and "<code>0-13</code>" in seen


def test_lost_without_a_complete_drain_is_not_called_lost() -> None:
    results = {"valid": "unknown", "queue": {
        "valid": "unknown", "anomalies": ["lost", "lost_unacked"], "drain_complete": False,
        "lost_count": 511, "lost_unacked_count": 8, "lost": ["0-1", "0-2"],
        "reason": "the drain did not complete"}}
    html = anomalies_section(results)
    assert "511 confirmed messages not read back (not proven lost)" in html
    assert "confirmed messages lost" not in html
    counts = counts_section(results)
    assert '<tr><td>lost</td><td class="num">(511)</td>' in counts
    unacked = counts[counts.index("delivered but never acked"):]
    assert unacked.index("(8)") < unacked.index("</tr>") and "not proven lost either" in unacked
    assert 'class="bad"' not in counts  # nothing red: nothing is proven
    assert verdict_sentence(results) == "Unknown: the drain did not complete."


def test_no_anomaly_says_none() -> None:
    assert "<p>None: no lost" in anomalies_section({"valid": True, "queue": {"valid": True}})


# --- the spec ---------------------------------------------------------------------------------


def test_spec_rows_of_the_fixture_are_all_filled() -> None:
    rows = dict(spec_rows(FIXTURE_SPEC, None, FIXTURE_RESULTS))
    assert rows["seed"] == "1234"
    assert rows["nodes"] == "3: n1 (10.213.0.11), n2 (10.213.0.12), n3 (10.213.0.13)"
    assert rows["time limit"] == "40 s"
    assert rows["queue"] == "quorum queue jepsen.queue, durable"
    assert rows["partition handling"] == "pause_minority (net_ticktime 10 s)"
    assert rows["nemesis faults"] == (
        "partition-halves, kill, after 6.0 s healthy, each for 8.0 s, targets one")
    assert rows["phase times"] == (
        "setup 4 s, main 40 s, heal 0.6 s, recovery 2.4 s, drain 2.1 s, teardown 1.9 s "
        "(total 51.0 s)")
    assert rows["drain"] == "complete, 3 delivered (n1 1, n2 1, n3 1)"
    assert rows["backend"] == "netns" and rows["versions"] == "rabbitmq 3.10.8, erlang 25.2.3"
    assert all(v and "n/a" not in v for v in rows.values()), rows


def test_the_header_says_every_version_the_run_recorded(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run)
    render(run, index=False)
    assert '<p class="sub">Versions: rabbitmq 3.10.8, erlang 25.2.3</p>' in (
        run / "report.html").read_text()
    info = json.loads((run / "test.json").read_text())
    info["versions"] = {"rabbitmq": "4.0.5", "metadata_store": "khepri"}
    (run / "test.json").write_text(json.dumps(info))
    render(run, index=False)
    assert '<p class="sub">Versions: rabbitmq 4.0.5, metadata store khepri</p>' in (
        run / "report.html").read_text()
    del info["versions"]
    (run / "test.json").write_text(json.dumps(info))
    render(run, index=False)
    assert "Versions:" not in (run / "report.html").read_text()
    results = json.loads((run / "results.json").read_text())
    (run / "results.json").write_text(json.dumps({**results, "versions": {"rabbitmq": "3.9"}}))
    render(run, index=False)  # results.json repeats test.json's
    assert '<p class="sub">Versions: rabbitmq 3.9</p>' in (run / "report.html").read_text()


def test_the_queue_row_says_what_the_kind_said_at_run_time() -> None:
    # test.json's queue_description is the kind's own words; a run from before it was recorded
    # shows the settings every kind has.
    info = json.loads(json.dumps(FIXTURE_SPEC))
    info["spec"]["queue"].update(type="mirrored", delivery_limit=5, max_length=100)
    assert dict(spec_rows(info, None, None))["queue"] == (
        "mirrored queue jepsen.queue, durable, delivery limit 5, max length 100 (drop-head)")
    info["queue_description"] = ["ha-mode all", "ha-sync-mode automatic"]
    assert dict(spec_rows(info, None, None))["queue"] == (
        "mirrored queue jepsen.queue, durable, ha-mode all, ha-sync-mode automatic")


def test_the_spec_timings_read_as_defaults_once_an_entry_sets_its_own() -> None:
    info = json.loads(json.dumps(FIXTURE_SPEC))
    info["spec"]["nemesis"]["faults"] = ["kill@leader:duration=3", "pause"]
    rows = dict(spec_rows(info, None, FIXTURE_RESULTS))
    assert rows["nemesis faults"] == ("kill@leader:duration=3, pause, by default after 6.0 s "
                                      "healthy, each for 8.0 s, targets one")


def test_a_schedule_played_once_is_said_fault_by_fault() -> None:
    info = json.loads(json.dumps(FIXTURE_SPEC))
    info["spec"]["nemesis"].update(order="once", faults=["kill@n2", "pause"],
                                   schedule=[[10.0, "kill@n2", 15.0], [30.5, "pause", 20.0]])
    rows = dict(spec_rows(info, None, FIXTURE_RESULTS))
    assert rows["nemesis faults"] == ("played once: kill@n2 at 10.0 s for 15.0 s, pause at "
                                      "30.5 s for 20.0 s")


def test_spec_rows_of_an_old_flat_spec_and_of_nothing() -> None:
    rows = dict(spec_rows({"name": "t", "nodes": ["n1", "n2"], "time_limit": 20,
                           "nemesis": {"faults": [], "interval": 5}}, None, None))
    assert rows["nodes"] == "2: n1, n2" and rows["time limit"] == "20 s"
    assert rows["nemesis faults"] == "none (no faults)"
    assert rows["seed"] == "n/a (not in test.json)"
    assert all(v.strip() for v in rows.values())


def test_grudge_text_says_each_cut_once() -> None:
    grudge = {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]}
    assert grudge_text(grudge) == "n1 cut from n2, n3"
    leader = {"n1": ["n2"], "n2": ["n1", "n3"], "n3": ["n2"]}
    assert grudge_text(leader) == "n2 cut from n1, n3"
    ring = {"n1": ["n3"], "n2": ["n4"], "n3": ["n1", "n5"]}
    assert grudge_text(ring) == "n3 cut from n1, n5; n2 cut from n4"


# --- fault kinds ------------------------------------------------------------------------------


def test_one_declaration_of_fault_kinds() -> None:
    names = [k.name for k in kinds.KINDS]
    assert names == ["partition", "kill", "stop", "pause", "packet", "rolling-restart",
                     "full-restart", "leader-transfer", "member-remove", "maintenance", "alarm",
                     "power-loss", "disk-corrupt", "heal"]
    assert len({k.colour for k in kinds.KINDS}) == len(kinds.KINDS)
    assert all(re.fullmatch(r"#[0-9a-f]{6}", k.colour) and k.label for k in kinds.KINDS)
    assert kinds.BY_START["kill"].stop_f == kinds.BY_START["stop"].stop_f == "start"
    assert kinds.BY_START["start-full-restart"].stop_f == "stop-full-restart"
    assert kinds.kind_for_start("start") is None and kinds.kind_for_start("stop-packet") is None
    other = kinds.kind_for_start("start-clock")
    assert other is not None and (other.name, other.stop_f) == ("clock", "stop-clock")
    assert other.colour == kinds.kind_named("clock").colour  # stable
    for k in kinds.KINDS:
        assert fault_colour(k.name) == k.colour


def nem(t: int, typ: OpType, f: str, value: Any = None) -> Op:
    return Op(type=typ, process=NEMESIS, f=f, value=value, time=t)


def test_restarts_and_heal_make_windows_by_their_kinds() -> None:
    ops = [
        nem(1 * S, "invoke", "start-full-restart"), nem(2 * S, "info", "start-full-restart"),
        nem(5 * S, "invoke", "stop-full-restart"), nem(6 * S, "info", "stop-full-restart"),
        nem(7 * S, "invoke", "start-rolling-restart"),
        nem(8 * S, "info", "start-rolling-restart", {"fault": "rolling-restart"}),
        nem(9 * S, "invoke", "heal"), nem(10 * S, "info", "heal"),
    ]
    tracker = WindowTracker()
    for op in ops:
        tracker.feed(op)
    windows = tracker.finish(12 * S)
    assert [(w.kind, w.start_ns // S, w.end_ns // S, w.closed_by) for w in windows] == [
        ("full-restart", 2, 6, "stop-full-restart"),
        ("rolling-restart", 8, 10, "heal"),
    ]
    assert [(h.kind, h.start_ns // S, h.end_ns // S) for h in tracker.heals] == [("heal", 9, 10)]
    assert fault_windows(ops) == windows


def test_a_start_that_failed_keeps_its_error() -> None:
    ops = [nem(1 * S, "invoke", "kill"), Op(type="info", process=NEMESIS, f="kill", time=2 * S,
                                             error="RemoteError: ssh refused")]
    (w,) = fault_windows(ops)
    assert w.error == "RemoteError: ssh refused"


# --- depth and placement samples --------------------------------------------------------------


def harness_op(f: str, value: Any, t: int = 3 * S) -> Op:
    return Op(type="info", process=HARNESS, f=f, value=value, time=t)


def test_depth_sample_keeps_the_maximum_and_the_nodes_that_did_not_answer() -> None:
    s = depth_sample(harness_op("depth", {
        "queue": "q", "nodes": {"n2": {"ready": 4, "unacked": 1}, "n1": {"error": "nodedown"}},
        "ready": 4, "unacked": 1}))
    assert s is not None
    assert (s.ready, s.unacked, s.node_ready, s.errors) == (4, 1, (("n2", 4),), ("n1",))
    none = depth_sample(harness_op("depth", {"queue": "q", "nodes": {"n1": {"error": "x"}},
                                             "ready": None, "unacked": None}))
    assert none is not None and (none.ready, none.unacked) == (None, None)
    assert depth_sample(harness_op("depth", "garbage")) is None


def test_placement_spans_give_each_node_its_role() -> None:
    quorum = placement_sample(harness_op("placement", {
        "queue": "q", "type": "quorum", "leader": "n1", "members": ["n1", "n2", "n3"],
        "mirrors": [], "synchronised_mirrors": []}, 1 * S))
    mirrored = PlacementSample(4 * S, "n2", (), ("n1", "n3"), ("n3",))
    assert quorum is not None and quorum.replicas == ("n2", "n3")
    spans = placement_spans([quorum, mirrored], 10 * S)
    assert [(s.node, s.role, s.start_s, s.end_s) for s in spans] == [
        ("n1", "leader", 1.0, 4.0), ("n2", "replica", 1.0, 4.0), ("n3", "replica", 1.0, 4.0),
        ("n2", "leader", 4.0, 10.0), ("n1", "unsynchronised", 4.0, 10.0),
        ("n3", "replica", 4.0, 10.0),
    ]


def test_thinned_series_stays_bounded_and_spread() -> None:
    series: Thinned[int] = Thinned(capacity=100)
    for i in range(10_000):
        series.add(i)
    assert len(series.items) < 100 and series.seen == 10_000
    assert series.items[0] == 0 and series.items[-1] > 9_000


# --- the fixture run's page -------------------------------------------------------------------


def test_fixture_report_reads_top_to_bottom(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run)
    written = render(run)
    assert [p.name for p in written] == [
        "latency.png", "rate.png", "fates.png", "depth.png", "placement.png", "report.html"]
    html = (run / "report.html").read_text()
    order = ['class="banner"', 'id="counts"', 'id="anomalies"', 'id="plots"', 'id="faults"',
             'id="test"', 'id="files"']
    positions = [html.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert not (tmp_path / "index.html").exists()  # not in a store: no index written
    # every table cell has text, and no raw JSON object is dumped
    for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", html, re.S):
        assert re.sub(r"<[^>]+>", "", cell).strip(), f"blank cell: {cell!r}"
    assert "{&#34;" not in html and '{"' not in html
    faults = html[html.index('id="faults"'):html.index('id="test"')]
    partition = kinds.PARTITION.colour
    assert f'background:{partition}"></span>partition-halves</td><td>n1 cut from n2, n3</td>' \
        in faults
    assert '<td class="num">10.020</td><td class="num">20.030</td><td>stop-partition</td>' \
        '<td class="num">41</td><td class="num">97.6 %</td>' in faults
    assert '<td class="num">0.080</td>' in faults  # time to recover after the partition
    assert "Heal (ends every fault): from 44.000 to 44.600 s (0.600 s)." in faults


@pytest.mark.parametrize("missing", ["results.json", "test.json", "nodes"])
def test_fixture_report_without_a_file_has_no_blank_cell(tmp_path: Path, missing: str) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run)
    target = run / missing
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    render(run)
    html = (run / "report.html").read_text()
    for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", html, re.S):
        assert re.sub(r"<[^>]+>", "", cell).strip()
    assert f'href="{missing}' not in html


def test_a_crashed_checker_is_said_once_not_as_missing_counts() -> None:
    results = {"valid": "unknown", "queue": {"valid": "unknown", "error": "KeyError: 'x'"},
               "ordering": {"valid": True, "violation_count": 0, "flagged_violation_count": 0}}
    counts = counts_section(results)
    assert counts.count("n/a") == 6  # the queue's one row, five ordering counts not reported
    assert "the queue checker failed: KeyError: &#39;x&#39;" in counts
    assert '<td>redelivered out of order</td><td class="num">0</td>' in counts
    html = anomalies_section(results)
    assert "Not looked for by the queue checker, which failed" in html and "None:" not in html


def test_results_of_the_newer_checker_render_their_classes_once() -> None:
    queue = {
        "valid": False, "anomalies": ["lost", "lost_unacked", "unflagged_duplicated",
                                      "unflagged_after_ack"],
        "drain_complete": True, "acks_recorded": False, "lost_count": 3,
        "lost_unacked_count": 1, "unflagged_duplicated_count": 2, "unflagged_after_ack_count": 2,
        "lost": ["0-1", "0-2", "0-3"], "lost_unacked": ["0-2"], "unflagged_after_ack": ["1-7"],
        "delivered_failed_count": 1, "delivered_failed": ["2-9"],
        "fail_reasons": {"basic.nack": 4, "unroutable (NO_ROUTE)": 1},
        "explanations": {"lost_unacked": "1 message. Confirmed, delivered, never acked."},
    }
    results = {"valid": False, "queue": queue}
    assert verdict_sentence(results) == (
        "Invalid: 3 confirmed messages lost and 2 messages delivered more than once without "
        "the redelivered flag.")
    html = anomalies_section(results)
    assert "<h3>1 lost message delivered but never acked</h3>" in html
    assert "<p>Confirmed, delivered, never acked.</p>" in html
    assert "<h3>2 messages delivered unflagged after an acked redelivery</h3>" in html
    seen = html[html.index("Seen, but not counted"):]
    assert "1 message delivered although its publish failed" in seen
    counts = counts_section(results)
    assert '<tr class="bad"><td class="sub-row">delivered but never acked</td>' in counts
    assert "Why publishes failed: basic.nack (4); unroutable (NO_ROUTE) (1)." in counts
    assert "The history records no acks" in counts


def test_the_checkers_paragraph_loses_its_count_the_heading_gives() -> None:
    results = {"valid": False, "queue": {
        "valid": False, "anomalies": ["lost"], "lost_count": 2, "lost": ["1-40", "5-20"],
        "explanations": {"lost": "2 messages. Confirmed by the broker but never delivered."}}}
    html = anomalies_section(results)
    assert "<h3>2 confirmed messages lost</h3><p>Confirmed by the broker but never" in html


def test_counts_show_what_was_dropped_by_design_apart_from_lost() -> None:
    html = counts_section({"valid": True, "queue": {
        "valid": True, "lost_count": 0, "dead_lettered_count": 6, "dropped_by_design_count": 5,
        "dead_lettered_delivered_count": 1}})
    assert '<tr><td>dead-lettered</td><td class="num">6</td>' in html
    assert '<tr><td class="sub-row">dropped by design</td><td class="num">5</td>' in html
    assert "never delivered: not an anomaly, not lost" in html
    assert '<tr><td class="sub-row">also delivered</td><td class="num">1</td>' in html
