"""The lost block tells the loss apart from results.json's queue.loss (reports.report_loss):
each publisher's lost runs and the confirming nodes with their roles."""

from __future__ import annotations

import copy
import json
from typing import Any

from reports.report_results import anomalies_section
from tests.reports.fixture_store import FIXTURE_RUN

FIXTURE_RESULTS: dict[str, Any] = json.loads((FIXTURE_RUN / "results.json").read_text())
LOSS = {"publishers_count": 2, "unsequenced_count": 0, "placements_observed": True,
        "publishers": [
            {"publisher": 1, "confirmed": 9, "lost": 6, "runs_count": 3, "runs": [
                {"kind": "prefix", "first_seq": 1, "last_seq": 2, "count": 2},
                {"kind": "middle", "first_seq": 4, "last_seq": 6, "count": 2},
                {"kind": "suffix", "first_seq": 9, "last_seq": 10, "count": 2}]},
            {"publisher": 2, "confirmed": 1, "lost": 1, "runs_count": 1, "runs": [
                {"kind": "all", "first_seq": 1, "last_seq": 1, "count": 1}]}],
        "by_node": [{"node": "n1", "role": "leader", "count": 4},
                    {"node": "n3", "role": "follower", "count": 3}]}


def lost_block(loss: dict[str, Any] | None) -> str:
    r = copy.deepcopy(FIXTURE_RESULTS)
    if loss is not None:
        r["queue"]["loss"] = loss
    html = anomalies_section(r)
    block = html[html.index('id="anomaly-lost"'):]
    return block[:block.index("</div>")]


def test_the_lost_block_names_each_publishers_runs_and_the_confirming_nodes() -> None:
    block = lost_block(LOSS)
    assert ("<td>1</td><td class=\"num\">9</td><td class=\"num\">6</td><td>prefix seq 1-2 (2); "
            "middle seq 4-6 (2); suffix seq 9-10 (2)</td>") in block
    assert "<td>all seq 1 (1)</td>" in block
    assert "<td>n1</td><td>leader</td><td class=\"num\">4</td>" in block
    assert "<td>n3</td><td>follower</td><td class=\"num\">3</td>" in block
    assert "roles are unknown" not in block


def test_the_side_of_a_partition_each_node_was_on_is_said_where_the_results_tell_it() -> None:
    sided = {**LOSS, "by_node": [{"node": "n1", "role": "leader", "side": "minority", "count": 2},
                                 {"node": "n2", "role": "follower", "side": "majority",
                                  "count": 1},
                                 {"node": "n1", "role": "leader", "side": None, "count": 4}]}
    block = lost_block(sided)
    assert "<th>its side then</th>" in block
    assert ("<td>n1</td><td>leader</td><td>minority side (cut off from a majority)</td>"
            "<td class=\"num\">2</td>") in block
    assert "<td>n2</td><td>follower</td><td>majority side</td>" in block
    assert "<td>n1</td><td>leader</td><td>no partition</td><td class=\"num\">4</td>" in block
    assert "its side then" not in lost_block(LOSS)  # older results: no column


def test_without_placements_the_roles_are_said_unknown() -> None:
    block = lost_block({**LOSS, "placements_observed": False})
    assert "No placement sample in the history" in block


def test_results_without_it_show_nothing_of_it() -> None:
    assert "lost runs of its confirmed sequence" not in lost_block(None)
