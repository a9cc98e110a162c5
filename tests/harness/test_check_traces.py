"""`harness check` tells stories, weighs mends and groups incidents from what the Spark check
gathered, never reading the history again; whether acks were recorded is the checker's word."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

import harness.mends
from checkers.traces import Traces
from harness.check import check_run
from harness.explain import explain, tell
from history import Op
from tests.checkers.histories import Builder

START = datetime(2026, 11, 23, 12, 0, 0, tzinfo=UTC).timestamp()


def write_run(run: Path) -> Path:
    with Builder(run / "history.jsonl") as b:
        b.phase("main", "start")
        b.at(1000).op(type="info", process="harness", f="placement",
                      value={"leader": "n1", "members": ["n1", "n2", "n3"]})
        b.at(2000).publish(4, 1)                  # lost
        b.at(3000).nemesis("start-partition", {"fault": "partition-one", "nodes": ["n2"],
                                                "grudge": {"n2": ["n1", "n3"]}}, node="n2")
        b.at(4000).publish(4, 2)                  # lost, during the partition
        b.at(4500).publish(4, 3)
        b.at(4600).deliver(7, "4-3")              # delivered, never acked, never back
        b.at(5000).publish(4, 4)
        b.at(5100).consume(7, "4-4")
        b.at(9000).nemesis("stop-partition", node="n2")
        b.phase("main", "end")
        b.at(29000).op(type="info", process="harness", f="depth",
                       value={"nodes": {"n1": {"ready": 5, "unacked": 0}}})
        b.at(30000).op(type="info", process="harness", f="recover-node",
                       value={"node": "n2", "action": "restart-app"})
        b.at(31000).phase("drain", "start")
        b.at(32000).op(type="info", process="harness", f="phase",
                       value={"phase": "drain", "state": "end", "complete": True})
    (run / "nodes" / "n2").mkdir(parents=True)
    (run / "nodes" / "n2" / "rabbit.log").write_text(
        "2026-11-23 12:00:03.900000+00:00 [info] <0.1.0> rabbit on node 'rabbit@n1' down\n"
        "2026-11-23 12:00:04.500000+00:00 [info] <0.2.0> Mirrored queue 'q' in vhost '/': "
        "Promoting mirror <x> to master\n")
    (run / "test.json").write_text(json.dumps({"history_start_unix": START}))
    return run


@pytest.mark.spark
@pytest.mark.usefixtures("spark")
def test_check_run_reads_the_history_once_in_spark(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    run = write_run(tmp_path)

    def no_second_pass(*_args: object) -> None:
        raise AssertionError("the history was read again in Python")

    monkeypatch.setattr(harness.mends, "traces_from_file", no_second_pass)
    monkeypatch.setattr("harness.explain.traces_from_file", no_second_pass)
    monkeypatch.setattr("checkers.traces.traces_from_file", no_second_pass)
    r = check_run(run)
    q = r["queue"]
    assert q["lost"] == ["4-1", "4-2", "4-3"] and q["lost_unacked"] == ["4-3"]
    (story,) = [s for s in q["details"]["lost"] if s["id"] == "4-2"]
    assert story["faults then"] == "partition-one on n2" and story["leader then"] == "n1"
    assert story["harness restarts after the confirm"] == "n2 restart-app at 30 s"
    (unacked,) = q["details"]["lost_unacked"]
    assert "not acked" in unacked["deliveries"]
    assert r["mends"]["delivered_after_first_mend"] == 0
    assert r["mends"]["vanished_across_mends_at_least"] == 5
    (inc,) = [i for i in r["incidents"] if i["faults"]]
    assert inc["counts"]["lost"] == 3 and inc["examples"]["lost"] == ["4-1", "4-2", "4-3"]
    assert [x["label"] for x in inc["log_lines"]] == ["node down", "promotion"]
    assert {e["what"] for e in inc["timeline"]} >= {"fault start", "heal", "mend", "phase"}
    on_disk = json.loads((run / "results.json").read_text())
    assert on_disk["incidents"] == r["incidents"] and "traces" not in on_disk


def test_whether_acks_were_recorded_is_not_guessed_from_the_samples(tmp_path: Path) -> None:
    # The only sampled message was delivered and never acked; another message was acked. The
    # history records acks, so the sampled delivery reads "not acked", not "acked: unknown".
    with Builder(tmp_path / "h.jsonl") as b:
        b.publish(1, 0)
        b.deliver(5, "1-0")
        b.publish(1, 1)
        b.consume(5, "1-1")
    (story,) = explain(tmp_path / "h.jsonl", {"lost_unacked": ["1-0"]})["lost_unacked"]
    assert [d["acked"] for d in story["deliveries"]] == [False]
    ops = {"1-0": (Op(type="ok", process=5, f="consume", value="1-0", consumer="c5", time=1),)}
    told = tell(Traces(ops=ops), {"lost_unacked": ["1-0"]}, acks_recorded=True)
    assert [d["acked"] for d in told["lost_unacked"][0]["deliveries"]] == [False]
    older = tell(Traces(ops=ops), {"lost_unacked": ["1-0"]}, acks_recorded=False)
    assert [d["acked"] for d in older["lost_unacked"][0]["deliveries"]] == [None]
