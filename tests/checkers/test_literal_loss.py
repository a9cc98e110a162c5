"""Loss told apart (issue 33 item 3): literal histories through the Spark checker, the oracle
agreeing field by field (tests.checkers.oracle_loss).

One publisher loses a prefix, a middle and a suffix of its confirmed messages; another loses
all of its own; the lost messages were confirmed by two nodes, read with and without the
harness's placement observations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkers import CheckOptions, check_history
from history import HARNESS
from tests.checkers import oracle
from tests.checkers.histories import Builder

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]


def check(path: Path, **opts: Any) -> dict[str, Any]:
    """Checks a history with the Spark checker; the oracle must agree. Returns the results."""
    got = check_history(path, options=CheckOptions(**opts))
    assert oracle.mismatches(got, oracle.judge(path, **opts)) == []
    return got


def publish(b: Builder, process: int, seq: int, node: str, type_: str = "ok",
            publisher: int | None = None) -> None:
    """Appends a publish of "<publisher>-<seq>" by `process` through `node`, invoke then
    completion, 1 ms apart."""
    pub = process if publisher is None else publisher
    for t in ("invoke", type_):
        b.op(type=t, process=process, f="publish", value=f"{pub}-{seq}", node=node, queue="q",
             publisher=pub, seq=seq, phase="main", error=None if t in ("invoke", "ok") else "x")


def placement(b: Builder, leader: str) -> None:
    """Appends the harness's placement observation of queue "q" led by `leader`."""
    b.op(type="info", process=HARNESS, f="placement", node=leader,
         value={"queue": "q", "type": "quorum", "leader": leader,
                "members": ["n1", "n2", "n3"], "mirrors": [], "synchronised_mirrors": []})


def three_stretches(p: Path, placements: bool) -> Path:
    """Writes the history: publisher 1 confirms seqs 1-4 and 6 through n1 (5 is unknown, its
    process retired) and 7-10 through n2 (process 11, continuing publisher 1); 3, 7 and 8
    are consumed, so 1-2 is a lost prefix, 4 and 6 a middle, 9-10 a suffix. Publisher 2 loses
    both its messages, confirmed through n3. With placements: n1 leads from the start, n2 from
    before 9's confirm."""
    with Builder(p) as b:
        if placements:
            placement(b.at(0), "n1")
        for seq in (1, 2, 3, 4):
            publish(b.at(100 * seq), 1, seq, "n1")
        publish(b.at(500), 1, 5, "n1", "info")
        publish(b.at(600), 1, 6, "n1")
        for seq in (7, 8):
            publish(b.at(100 * seq), 11, seq, "n2", publisher=1)
        if placements:
            placement(b.at(850), "n2")
        for seq in (9, 10):
            publish(b.at(100 * seq), 11, seq, "n2", publisher=1)
        for seq in (1, 2):
            publish(b.at(1100 + seq), 2, seq, "n3")
        b.at(2000)
        for mid in ("1-3", "1-7", "1-8"):
            b.consume(20, mid)
        b.drained()
    return p


def test_a_prefix_a_middle_and_a_suffix_told_with_their_nodes_and_roles(tmp_path: Path) -> None:
    q = check(three_stretches(tmp_path / "h.jsonl", placements=True), example_size=3)["queue"]
    assert q["lost"] == ["1-1", "1-2", "1-4", "1-6", "1-9", "1-10", "2-1", "2-2"]
    loss = q["loss"]
    assert loss["publishers"] == [
        {"publisher": 1, "confirmed": 9, "lost": 6, "runs_count": 3, "runs": [
            {"kind": "prefix", "first_seq": 1, "last_seq": 2, "count": 2},
            {"kind": "middle", "first_seq": 4, "last_seq": 6, "count": 2},
            {"kind": "suffix", "first_seq": 9, "last_seq": 10, "count": 2}]},
        {"publisher": 2, "confirmed": 2, "lost": 2, "runs_count": 1, "runs": [
            {"kind": "all", "first_seq": 1, "last_seq": 2, "count": 2}]}]
    assert loss["by_kind"] == {k: {"runs": 1, "messages": 2}
                               for k in ("prefix", "middle", "suffix", "all")}
    assert (loss["publishers_count"], loss["unsequenced_count"]) == (2, 0)
    assert loss["placements_observed"] is True
    # n1 led when it confirmed 1-1..1-6; n2 followed for nothing lost, led for 9 and 10;
    # n3 was a member, not the leader.
    assert loss["by_node"] == [{"node": "n1", "role": "leader", "side": None, "count": 4},
                               {"node": "n2", "role": "leader", "side": None, "count": 2},
                               {"node": "n3", "role": "follower", "side": None, "count": 2}]
    assert loss["series"]["bucket_ms"] == 100.0
    assert loss["series"]["nodes"]["n1"] == [[100.0, 1], [200.0, 1], [400.0, 1], [600.0, 1]]
    assert loss["series"]["nodes"]["n3"] == [[1100.0, 2]]
    assert loss["examples"][0] == {"id": "1-1", "publisher": 1, "seq": 1, "kind": "prefix",
                                   "node": "n1", "role": "leader", "side": None,
                                   "published_ms": 100.0,
                                   "confirmed_ms": 101.0}
    assert [e["kind"] for e in loss["examples"]] == ["prefix", "prefix", "middle"]


def test_without_placement_observations_roles_are_unknown(tmp_path: Path) -> None:
    q = check(three_stretches(tmp_path / "h.jsonl", placements=False))["queue"]
    assert q["loss"]["placements_observed"] is False
    assert q["loss"]["by_node"] == [{"node": "n1", "role": "unknown", "side": None, "count": 4},
                                    {"node": "n2", "role": "unknown", "side": None, "count": 2},
                                    {"node": "n3", "role": "unknown", "side": None, "count": 2}]


def test_a_follower_that_confirmed_is_named_so(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        placement(b, "n1")
        publish(b, 1, 1, "n2")
        publish(b, 1, 2, "n1")
        publish(b, 1, 3, "n9")  # a node the queue does not live on
        b.consume(5, "1-2")
        b.drained()
    loss = check(p)["queue"]["loss"]
    assert loss["by_node"] == [{"node": "n2", "role": "follower", "side": None, "count": 1},
                               {"node": "n9", "role": "non-member", "side": None, "count": 1}]
    assert [r["kind"] for r in loss["publishers"][0]["runs"]] == ["prefix", "suffix"]


def test_a_node_cut_off_from_a_majority_confirmed_on_the_minority_side(tmp_path: Path) -> None:
    """n1 leads; a partition cuts n1 off from n2 and n3 from 300 ms to 600 ms. 1-1 was
    confirmed through n1 before it (no side), 1-2 through n1 inside it (the minority side),
    1-3 through n2 inside it (the majority side), 1-4 through n1 after the heal (no side)."""
    p = tmp_path / "h.jsonl"
    grudge = {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]}
    with Builder(p) as b:
        placement(b.at(0), "n1")
        publish(b.at(100), 1, 1, "n1")
        b.at(300).nemesis("start-partition", {"fault": "partition-leader", "nodes": ["n1"],
                                              "grudge": grudge})
        publish(b.at(400), 1, 2, "n1")
        publish(b.at(450), 1, 3, "n2")
        b.at(600).nemesis("stop-partition", {"fault": "partition-leader"})
        publish(b.at(700), 1, 4, "n1")
        publish(b.at(800), 1, 5, "n1")
        b.at(900)
        b.consume(5, "1-5")
        b.drained()
    loss = check(p, example_size=4)["queue"]["loss"]
    # Most first, then by node, role and side (none before a side).
    assert [(r["node"], r["role"], r["side"], r["count"]) for r in loss["by_node"]] == [
        ("n1", "leader", None, 2), ("n1", "leader", "minority", 1),
        ("n2", "follower", "majority", 1)]
    assert [(e["id"], e["side"]) for e in loss["examples"]] == [
        ("1-1", None), ("1-2", "minority"), ("1-3", "majority"), ("1-4", None)]


def test_nothing_lost_tells_no_loss(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        publish(b, 1, 1, "n1")
        b.consume(5, "1-1")
        b.drained()
    assert "loss" not in check(p)["queue"]
