"""A stuck client as a finding (reports.finding_stuck) and on the report page
(reports.report_promises' settlement part), from results the real checker wrote for a planted
history: one judge, the page only says what the checker stored.

The planted run (tests.checkers.test_settlement's builders; bound 4 s): n3 partitioned 100-1000
ms; process 1 stays on n1, 1-0 confirmed at 51 ms, 1-1 sent at 900 ms (within a second of the
main phase's start: suspect, and the page says so) and never settled until the run ended at 10 s; the drain is complete and never reads it.
Process 2 on n2 is confirmed again 3.3 s after the heal: slow, settled, no finding; consumer 9
reads 1-0 and 2-0, so nothing confirmed is lost.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from checkers import CheckOptions, check_history
from reports import markdown as md
from reports.finding import load, render
from reports.finding_rules import LIVENESS_BROKEN, broken
from reports.finding_stuck import stuck
from reports.report_promises import promises_data
from tests.checkers.test_liveness import BOUND, history, partition
from tests.checkers.test_settlement import CLOSED_AT_END, clients, consume, depth, leader, pub
from tests.reports.test_finding import assert_plain_markdown

START_UNIX = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def plant(run: Path, ops: list[tuple[float, dict[str, Any]]], main_end_ms: float) -> Path:
    """Writes a run directory: the planted history, the real checker's results.json, test.json."""
    run.mkdir(parents=True)
    path = history(run / "history.jsonl", ops, main_end_ms)
    results = check_history(path, options=CheckOptions(), liveness=BOUND)
    (run / "results.json").write_text(json.dumps(results))
    (run / "test.json").write_text(json.dumps({
        "name": "planted-stuck", "seed": 11, "start_time": "2027-01-15T08:00:00+00:00",
        "history_start_unix": START_UNIX, "versions": {"rabbitmq": "4.3.6"},
        "spec": {"name": "planted-stuck", "seed": 11, "broker": {"rabbitmq": "4.3"},
                 "queue": {"type": "quorum"}, "workload": {"stay": "both"}}}))
    return run


def stuck_publisher_ops() -> list[tuple[float, dict[str, Any]]]:
    return [clients(), *partition(100, 1000), leader(50, "n1"), leader(1100, "n2"),
            *pub(1, 0, 50), *pub(1, 1, 900, "info", 10_000, CLOSED_AT_END),
            *pub(2, 0, 1200, "ok", 4500, node="n2"), *consume("n2", 9, "1-0", 60),
            *consume("n2", 9, "2-0", 4600)]


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_a_stuck_publish_is_a_finding_page_with_the_docs_its_facts_and_its_ops(
        tmp_path: Path) -> None:
    run = plant(tmp_path / "run", stuck_publisher_ops(), 10_000)
    results = json.loads((run / "results.json").read_text())
    assert results["valid"] is False
    assert broken("liveness", results, {}) == LIVENESS_BROKEN["publish"]
    page = render(load(run))
    assert_plain_markdown(page)
    head = LIVENESS_BROKEN["publish"]
    assert page.startswith(f"# {head[0].upper()}{head[1:]}: planted-stuck on RabbitMQ 4.3.6\n")
    # What RabbitMQ documents: the checker's quotation, never the page's own words.
    documented = page[page.index("## What RabbitMQ documents"):page.index("## What the history")]
    assert md.text("all subsequently published messages will be confirmed or nack'd once") \
        in documented
    assert "carries no quotation" not in documented
    part = page[page.index("### Stuck publish"):page.index("## The broker's log lines")]
    assert part.startswith("### Stuck publish: `1-1` of publisher 1 through n1, unsettled past "
                           "the bound after the heal at 1.000 s\n")
    for fact in ("the publish: 1-1 (process 1, publisher 1) through n1 to queue q, sent at "
                 "0.900 s",
                 "its send against the run's boundaries: 900.0 ms after main start; 799.5 ms "
                 "after partition-one on n3 began",
                 "last confirm on its channel before the heal: 0.051 s",
                 "the heal: 1.000 s; the queue's leader then: n1 (the harness's last sample "
                 "before the heal, at 0.050 s; its next, n2 at 1.100 s)",
                 "deadline: 5.000 s: the liveness bound (4.000 s) after the heal",
                 "what became of it: still unsettled when the harness closed its channel at the "
                 "run's end, at 10.000 s, 9.0 s after the heal",
                 "its channel's later publishes: none",
                 "faults from its send to its completion: partition-one on n3 (0.101 s to "
                 "1.000 s)",
                 "read back: never: no consumer read it, nor did the drain, which completed"):
        assert md.text(fact) in part, fact
    rows = [line for line in part.splitlines() if re.match(r"\| \d+ \|", line)]
    ops = [r.split("|")[4].strip() for r in rows]
    assert ops[:4] == ["harness: main start", "harness: queue leader n1",
                       "nemesis: start-partition partition-one on n3", "publish sent"]
    assert "nemesis: stop-partition partition-one on n3" in ops
    assert "harness: queue leader n2" in ops
    assert any(o.startswith("publish outcome unknown") for o in ops)
    # The send lies within a second of the main phase's start: the page flags it suspect.
    summary = page.split("## What RabbitMQ documents")[0]
    assert ("Stuck publishes: the send closest to a phase boundary lies 900.0 ms after main "
            "start **suspect: at a phase boundary") in summary


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_a_stuck_consumer_and_the_report_pages_settlement_part(tmp_path: Path) -> None:
    # Consumer 9 on n2 stays subscribed and is never fed again while the queue holds ready
    # messages; consumer 8 is fed at 1.6 s. The report's part shows the checker's counts and
    # timeline, the page its facts.
    from tests.checkers.test_settlement import cancel
    ops = [clients(), *partition(100, 1000), *pub(1, 0, 10), *pub(1, 1, 20), *pub(1, 2, 30),
           *consume("n2", 9, "1-0", 60), *consume("n2", 8, "1-1", 70),
           *consume("n2", 8, "1-2", 1600), *pub(1, 3, 1500), *pub(1, 4, 1510),
           depth(2000, 5), depth(3000, 5), depth(4500, 4), *cancel(9, 10_000)]
    run = plant(tmp_path / "run", ops, 10_000)
    results = json.loads((run / "results.json").read_text())
    assert broken("liveness", results, {}) == LIVENESS_BROKEN["consumer"]
    shown, notes = stuck(results)
    assert [f["what"] for f in shown] == ["consumer"] and notes == []
    page = render(load(run))
    part = page[page.index("### Stuck consumer"):page.index("## The broker's log lines")]
    assert part.startswith("### Stuck consumer: process 9 through n2, not fed within the bound "
                           "after the heal at 1.000 s\n")
    for fact in ("last fed before the heal: 0.060 s", "first fed after the heal: never",
                 "its end: 10.000 s", "deadline: 5.000 s"):
        assert md.text(fact) in part, fact
    assert md.text("deliveries will start immediately") in page
    (settlement,) = [p for p in promises_data(results) if p.name == "settlement"]
    assert settlement.key == "false" and settlement.why.startswith("stuck: ")
    assert settlement.counts is not None
    counted = {r.cells[0].text: r.cells[1].text for r in settlement.counts.rows}
    assert [r.cls for r in settlement.counts.rows if r.cells[0].text == "consumers.stuck"] == \
        ["bad"]
    assert counted["consumers.stuck"] == "1" and counted["stuck_consumers"] == "1"
    timeline = next(p for p in settlement.parts if hasattr(p, "rows"))
    assert [r.cells[1].text for r in timeline.rows] == [
        "last delivery before the heal", "heal", "first delivery after the heal",
        "consumer ended"]


def test_a_valid_run_has_a_settlement_part_without_examples() -> None:
    results = {"valid": True, "liveness": {"valid": True, "settlement": {
        "valid": True, "bound_ms": 4000.0, "heals": [{"at_ms": 1000.5, "fault": "kill",
                                                       "next_fault_ms": None}],
        "publishes": {"settled": 7}, "consumers": {"fed": 1}, "stuck_channels": 0,
        "stuck_consumers": 0, "findings": [], "summary": "settled: ..."}}}
    (s,) = promises_data(results)
    assert (s.name, s.key, s.why) == ("settlement", "true", "settled: ...")
    assert [type(p).__name__ for p in s.parts] == ["Para"]  # the heals, no example
    assert stuck(results) == ([], [])


@pytest.mark.parametrize(("completion", "said"), [
    ("refused", "and the broker refused it, late"),
    ("connection-closed", "and its connection or channel closed, late"),
    ("confirmed", "and the broker confirmed it, late (a confirmed message never read: the "
                  "queue section counts it)"),
    ("run-ended", "and the broker never said so (no confirm, nack or close)"),
])
def test_a_stuck_publish_answered_late_is_not_called_unanswered(completion: str,
                                                                 said: str) -> None:
    # Seen on 3.10.8 (mirrored-partition, seed 4005): three publishes through the autoheal
    # winner were nacked 66 s after the heal, when the losers finally restarted. Its "read
    # back" line said the broker never answered them; the completion says it did, late.
    from reports.finding_history import scan
    from reports.finding_stuck import facts
    stuck_one = {"what": "publisher", "process": 7, "publisher": 1, "node": "n1",
                 "queue": "q", "heal_ms": 1000.0, "bound_ms": 4000.0, "stuck": 1,
                 "timeline": {"stuck": {"id": "1-1", "sent_ms": 1200.0,
                                        "completed_ms": 8000.0, "completion": completion}}}
    results = {"queue": {"drain_complete": True}}
    (read_back,) = [text for label, text in facts(stuck_one, results, scan([], {"1-1"}))
                    if label == "read back"]
    assert read_back == ("never: no consumer read it, nor did the drain, which completed: "
                         f"the queue does not hold it, {said}")
