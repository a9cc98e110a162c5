"""The benchmark's synthetic histories: consecutive indexes, and valid by the reference checker."""

from __future__ import annotations

import json
from pathlib import Path

from checkers import bench
from checkers.reference import check_file


def test_generated_history_is_consecutive_and_valid(tmp_path: Path) -> None:
    path, _ = bench.generate(30_300, tmp_path / "h.jsonl", workers=1)
    lines = path.read_text().splitlines()
    assert [json.loads(x)["index"] for x in lines] == list(range(len(lines)))
    assert bench.count_ops(path) == len(lines)
    r = check_file(path)
    assert r["valid"] is True
    assert r["queue"]["attempt_count"] == bench.messages_for(30_300)
    assert r["queue"]["redelivered_duplicated_count"] == 2
    assert len(r["perf"]["windows"]) == 10
