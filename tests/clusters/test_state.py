"""Tests of the run records the SSH backend leaves for `make clean`."""

from __future__ import annotations

import json

from clusters.state import RunRecord


def test_a_record_keeps_pids_on_disk_as_they_come_and_goes_when_removed(tmp_path):
    rec = RunRecord.create(tmp_path, "ssh", "R1", {"inventory": "/i.toml"})
    rec.add_pid("n1", 10)
    rec.add_pid("n1", 11)
    rec.add_pid("n2", 20)
    on_disk = json.loads((tmp_path / "backends" / "ssh-R1.json").read_text())
    assert on_disk == {"backend": "ssh", "run_id": "R1", "info": {"inventory": "/i.toml"},
                       "pids": {"n1": [10, 11], "n2": [20]}}
    [found] = RunRecord.find(tmp_path, "ssh")
    assert found.pids("n1") == [10, 11] and found.pids("n3") == [] and found.info["inventory"]
    assert RunRecord.find(tmp_path, "docker") == []
    found.remove()
    assert RunRecord.find(tmp_path, "ssh") == []
    found.remove()  # twice is fine


def test_an_unreadable_record_is_skipped(tmp_path):
    (tmp_path / "backends").mkdir()
    (tmp_path / "backends" / "ssh-BAD.json").write_text("{not json")
    RunRecord.create(tmp_path, "ssh", "OK", {})
    assert [r.data["run_id"] for r in RunRecord.find(tmp_path, "ssh")] == ["OK"]
