"""Tests of the placement sampler: records at start and on every change, never on repeats."""

import threading

from harness.history import HistoryWriter, read_history
from harness.placement import PlacementSampler


class Source:
    def __init__(self, answers):
        self.answers = list(answers)

    def queue_placement(self, queue):
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a


def test_records_only_changes_and_survives_errors(tmp_path):
    h = HistoryWriter(tmp_path / "h.jsonl")
    a = {"leader": "n1", "members": ["n1", "n2", "n3"]}
    b = {"leader": "n2", "members": ["n1", "n2", "n3"]}
    src = Source([a, a, {}, RuntimeError("cli timed out"), b, b, a])
    s = PlacementSampler(src, "q", h, 1.0, threading.Event())
    for _ in range(7):
        s.sample()
    h.close()
    ops = read_history(tmp_path / "h.jsonl")
    assert [o.value["leader"] for o in ops] == ["n1", "n2", "n1"]
    assert all(o.process == "harness" and o.f == "placement" and o.value["queue"] == "q" for o in ops)
    assert [o.node for o in ops] == ["n1", "n2", "n1"]
    assert s.changes == 3 and s.samples == 6
