"""The benchmark's synthetic histories: consecutive indexes, and valid by the oracle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import checker as bench
from tests.checkers import oracle


@pytest.mark.parametrize("acks", [True, False])
def test_generated_history_is_consecutive_and_valid(tmp_path: Path, acks: bool) -> None:
    path, _ = bench.generate(30_300, tmp_path / "h.jsonl", workers=1, acks=acks)
    lines = path.read_text().splitlines()
    assert [json.loads(x)["index"] for x in lines] == list(range(len(lines)))
    assert bench.count_ops(path) == len(lines)
    assert abs(len(lines) - 30_300) < 400
    r = oracle.judge(path)
    assert r["valid"] is True
    q = r["queue"]
    assert q["attempt_count"] == bench.messages_for(30_300, acks)
    assert q["acks_recorded"] is acks and q["acked_delivery_count"] == q["delivery_count"]
    assert q["redelivered_duplicated_count"] == (q["attempt_count"] + 9999) // 10000
    assert q["fail_reasons"] == {"x": q["fail_count"]}
    assert q["explanations"] == ["redelivered_duplicated", "recovered"]
    m = q["attempt_count"]
    assert len(r["perf"]["windows"]) == -(-m // max(m // 10, 2))  # one per period started


def test_generated_priorities_are_judged_and_in_order(tmp_path: Path) -> None:
    path, _ = bench.generate(4_000, tmp_path / "h.jsonl", workers=1, priorities=True)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["index"] for x in lines] == list(range(len(lines)))
    assert {x.get("priority") for x in lines if x["f"] == "publish"} == {None, 1, 9}
    p = oracle.judge(path)["priority"]
    assert p["valid"] is True and p["violation_count"] == 0
    # Each consumer's first delivery; consumer 101's is message 0's redelivery (returned).
    assert p["not_judged"]["no_settlement"] == bench.CONSUMERS - 1
    assert p["judged_count"] + p["not_judged_count"] == p["delivery_count"]
    assert p["judged_count"] > 0.9 * p["delivery_count"]
