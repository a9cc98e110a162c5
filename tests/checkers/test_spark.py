"""The Spark checker's own paths: fault windows, large histories through Parquet, the grid of the
longest gap, Parquet input, the CLI; each result also worked out by the oracle."""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any

import pytest

from checkers import (
    CheckOptions,
    HistoryError,
    check_history,
    convert_to_parquet,
    spark_engine,
    spark_perf,
)
from harness.cli import main
from tests.checkers import oracle
from tests.checkers.histories import Builder, write_lines

pytestmark = pytest.mark.spark


def both(path: Path, **opts: Any) -> dict[str, Any]:
    """Checks with Spark; the oracle must agree. Returns the Spark results."""
    got = check_history(path, options=CheckOptions(**opts))
    assert oracle.mismatches(got, oracle.judge(path, **{
        k: v for k, v in opts.items() if k != "work_dir"})) == []
    return got


def faults_history(path: Path) -> Path:
    """Overlapping windows, a heal, a window open at the end, a zero-length one."""
    with Builder(path) as b:
        b.at(0).phase("main", "start")
        for i in range(40):
            b.at(10 + 10 * i).invoke(1 + i % 3, i // 3)
            b.at(12 + 10 * i + (i % 7)).complete(1 + i % 3, i // 3, ["ok", "ok", "fail", "info"][i % 4])
            if i == 5:
                b.nemesis("start-partition", {"n1": ["n2"]})
            if i == 9:
                b.nemesis("kill", {"nodes": ["n3"]})
            if i == 14:
                b.nemesis("stop-partition")
            if i == 20:
                b.nemesis("pause", {"nodes": ["n1"]})
                b.nemesis("resume", {"nodes": ["n1"]})
            if i == 25:
                b.nemesis("heal")
            if i == 30:
                b.nemesis("start-packet", {"nodes": ["n2"]})
        b.at(500).phase("main", "end")
        b.drained()
    return path


def test_fault_windows_agree(spark: Any, tmp_path: Path) -> None:
    r = both(faults_history(tmp_path / "h.jsonl"))
    assert [(w["f"], w["closed_by"]) for w in r["perf"]["windows"]] == [
        ("start-partition", "stop-partition"), ("kill", "heal"), ("pause", "resume"),
        ("start-packet", "end-of-history")]


def test_large_history_path_agrees(spark: Any, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Histories past MEMORY_LIMIT are parsed into Parquet and run one job at a time.
    monkeypatch.setattr(spark_engine, "MEMORY_LIMIT", 0)
    path = faults_history(tmp_path / "h.jsonl")
    r = both(path, work_dir=tmp_path / "work")
    assert r["queue"]["attempt_count"] == 40
    assert not list((tmp_path / "work").iterdir())  # scratch tables are removed


@pytest.mark.parametrize("join_below", [0.0, 1.0])
def test_gap_inside_grid_cells_agrees(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      join_below: float) -> None:
    # Three grid cells; the longest gap (0.5 to 5 ms) hides inside the first, so the window
    # function over the wide cells must find it, with the narrow middle cell joined away or not.
    monkeypatch.setattr(spark_perf, "GRID_CELLS", 3)
    monkeypatch.setattr(spark_perf, "JOIN_BELOW", join_below)
    path = tmp_path / "h.jsonl"
    confirms = [0.5, 5.0, 8.0, 8.1, *(11.0 + 0.5 * i for i in range(11))]
    with Builder(path) as b:
        b.at(0).phase("main", "start")
        for i, t in enumerate(confirms):
            b.at(t - 0.1).invoke(1, i)
            b.at(t).complete(1, i)
        b.at(16).phase("main", "end")
        b.drained()
    gap = both(path)["perf"]["longest_without_confirm"]
    assert gap == {"ms": 4.5, "from_ms": 0.5, "to_ms": 5.0}


def test_segment_is_bisect_right(spark: Any) -> None:
    from pyspark.sql import functions as F

    edges = [3, 10, 11, 40, 41, 42, 100]
    ts = list(range(-2, 105))
    df = spark.range(1).select(F.explode(F.array(*[F.lit(t) for t in ts])).alias("t"))
    got = dict(df.select("t", spark_perf.segment("t", edges).alias("s")).collect())
    assert got == {t: bisect.bisect_right(edges, t) for t in ts}


def test_parquet_history_agrees_and_names_lines(spark: Any, tmp_path: Path) -> None:
    path = faults_history(tmp_path / "h.jsonl")
    pq = convert_to_parquet(path, tmp_path / "h.parquet")
    assert check_history(pq) == both(path)
    bad = write_lines(tmp_path / "bad.jsonl", ["", *path.read_text().splitlines()[:7],
                                               '{"index": 3, "oops": 1}'])
    bad_pq = convert_to_parquet(bad, tmp_path / "bad.parquet")
    with pytest.raises(HistoryError) as e:
        check_history(bad_pq)
    assert e.value.line == 9 and e.value.path == str(bad.resolve())


def test_not_a_checkers_parquet(spark: Any, tmp_path: Path) -> None:
    spark.range(3).write.parquet(str(tmp_path / "x.parquet"))
    with pytest.raises(HistoryError, match="not a checkers Parquet history"):
        check_history(tmp_path / "x.parquet")


def test_check_command(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = faults_history(tmp_path / "h.jsonl")
    out = tmp_path / "results.json"
    code = main(["check", str(path), "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 1 and text.startswith("valid: False\nqueue: attempt 40, acknowledged 20")
    assert "4 fault windows" in text
    assert json.loads(out.read_text()) == both(path)
    code = main(["check", str(path), "--parquet", str(tmp_path / "p.parquet")])
    assert code == 1 and (tmp_path / "p.parquet" / "_checkers.json").exists()


def test_one_channel_given_a_message_twice_then_acking_both_pairs_both(spark, tmp_path):
    """A mirrored queue redelivers after a promotion, on the same channel: delivery, delivery,
    ack, ack (seen in a nightly run). Both are acked; no orphan ack; the oracle agrees."""
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.publish(1, 1)
        b.deliver(4, "1-0", redelivered=True)
        b.deliver(4, "1-0", redelivered=True)
        b.ack(4, "1-0")
        b.ack(4, "1-0")
        b.deliver(4, "1-1")  # the third delivery: never acked
        b.drained()
    q = both(p)["queue"]
    assert q["duplicated_count"] == 1 and q["redelivered_duplicated_count"] == 1
    assert q["lost_unacked_count"] == 1 and q["lost_unacked"] == ["1-1"]
    assert q["acked_delivery_count"] == 2
