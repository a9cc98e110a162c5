"""The Spark engine against the reference: literal histories, the Parquet path, the CLI."""

from __future__ import annotations

import bisect
import inspect
import json
from pathlib import Path
from typing import Any

import pytest

import tests.checkers.test_reference as literal
import tests.checkers.test_reference_acks as literal_acks
from checkers import (
    CheckOptions,
    HistoryError,
    check_history,
    convert_to_parquet,
    spark_engine,
    spark_perf,
)
from checkers import __main__ as cli
from checkers.reference import check_file
from tests.checkers.histories import Builder, write_lines

pytestmark = pytest.mark.spark

LITERALS = [
    "test_jepsen_sane", "test_jepsen_pathological", "test_flagged_duplicate_is_valid_by_default",
    "test_delivered_after_nack_is_reported_not_invalid",
    "test_cut_off_history_counts_open_publishes_as_info",
    "test_lost_without_drain_is_unknown_not_false",
    "test_samples_are_bounded_and_sorted_by_publisher_then_seq",
    "test_unknown_keys_and_other_ops_are_ignored", "test_strict_ordering_includes_redelivered",
    "test_ordering_consumer_is_process_and_tag",
    "test_same_message_twice_to_one_consumer_is_out_of_order",
    "test_perf_windows_latencies_and_gaps",
    "test_strict_same_message_redelivered_to_the_same_consumer",
    "test_strict_order_runs_across_single_active_consumer_hand_overs",
    "test_strict_flagged_redelivery_after_later_messages_is_a_violation",
    "test_flagged_reorders_are_counted_not_invalid", "test_publisher_slot_continues_across_processes",
    "test_ordering_reads_publisher_and_seq_fields_before_the_id",
]
# Every test of test_reference_acks runs with both engines.
ACK_LITERALS = sorted(n for n in dir(literal_acks) if n.startswith("test_"))


def both(path: Path, **opts: Any) -> dict[str, Any]:
    """Checks with both engines; they must agree. Returns the Spark results."""
    ref = check_file(path, CheckOptions(engine="reference", **opts))
    got = check_history(path, options=CheckOptions(engine="spark", **opts))
    assert got == ref
    return got


@pytest.mark.parametrize(("module", "name"), [(literal, n) for n in LITERALS]
                         + [(literal_acks, n) for n in ACK_LITERALS],
                         ids=[*LITERALS, *ACK_LITERALS])
def test_literal_histories_agree(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 module: Any, name: str) -> None:
    # Each reference test runs again, its checks now made by Spark and compared with the reference.
    monkeypatch.setattr(module, "check", both)
    test = getattr(module, name)
    assert list(inspect.signature(test).parameters) == ["tmp_path"]
    test(tmp_path)


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
    assert check_history(pq) == check_file(path)
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


def test_cli_with_spark(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = faults_history(tmp_path / "h.jsonl")
    out = tmp_path / "results.json"
    code = cli.main([str(path), "--out", str(out)])
    line = capsys.readouterr().out
    assert code == 1 and line.startswith("valid=false queue=false (attempted 40, acked 20")
    assert json.loads(out.read_text()) == check_file(path)
    code = cli.main([str(path), "--parquet", str(tmp_path / "p.parquet")])
    assert code == 1 and (tmp_path / "p.parquet" / "_checkers.json").exists()


def test_one_channel_given_a_message_twice_then_acking_both_pairs_both(spark, tmp_path):
    """A mirrored queue redelivers after a promotion, on the same channel: delivery, delivery,
    ack, ack (seen in a nightly run). Both are acked; no orphan ack; the engines agree."""
    from checkers import CheckOptions, check_history
    from tests.checkers.histories import Builder

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
    results = {engine: check_history(p, spark_master=None, options=CheckOptions(engine=engine))
               for engine in ("spark", "reference")}
    for engine, r in results.items():
        q = r["queue"]
        assert q["duplicated_count"] == 1 and q["redelivered_duplicated_count"] == 1, engine
        assert q["lost_unacked_count"] == 1 and q["lost_unacked"] == ["1-1"], engine
        assert q["acked_delivery_count"] == 2, engine
    counts = {e: {k: v for k, v in r["queue"].items() if k.endswith("_count")}
              for e, r in results.items()}
    assert counts["spark"] == counts["reference"]
