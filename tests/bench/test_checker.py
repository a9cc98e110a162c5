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
