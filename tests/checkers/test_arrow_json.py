"""pyarrow's reading of a history (checkers.arrow_json) against Spark's: the same prepared rows in
file order, or NotFast and Spark reads it."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkers import arrow_json, spark_engine, spark_io, spark_queue
from checkers.errors import HistoryError
from tests.checkers.gen import Generated, planted_histories, random_histories
from tests.checkers.histories import write_lines

NAMES = [n for n in spark_io.SCHEMA.names if n != spark_io.CORRUPT]
FIELDS = [n for n in spark_io.PREPARED if n not in ("_block", "_pos")]


def spark_rows(spark: Any, path: Path) -> list[dict[str, Any]]:
    rows = spark_io.read_jsonl(spark, path).collect()
    return [{k: r[k] for k in FIELDS} for r in sorted(rows, key=lambda r: r["_block"] + r["_pos"])]


def arrow_rows(path: Path, out: Path) -> list[dict[str, Any]]:
    arrow_json.to_parquet(path, out, NAMES)
    t = pq.read_table(out)
    t = t.take(pc.sort_indices(pc.add(t["_block"], t["_pos"])))
    assert t.schema.names == list(spark_io.PREPARED)
    return [{k: r[k] for k in FIELDS} for r in t.to_pylist()]


def assert_alike(spark: Any, path: Path, out: Path) -> None:
    assert arrow_rows(path, out) == spark_rows(spark, path)


pytestmark = pytest.mark.spark


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(planted_histories(), random_histories()))
def test_arrow_reads_generated_histories_as_spark_does(spark: Any, g: Generated) -> None:
    with tempfile.TemporaryDirectory() as d:
        assert_alike(spark, g.write(Path(d) / "history.jsonl"), Path(d) / "out")


def line(**kw: Any) -> str:
    """Returns one op as the harness writes it (compact JSON)."""
    return json.dumps({"index": 0, "time": 0, "type": "ok", "process": 1, "f": "publish",
                       "value": "1-0", **kw}, ensure_ascii=False, separators=(",", ":"))


ODD_BUT_SPARKS = [
    # A client line holding the side mark in a string: parsed apart, the same rows.
    line(type="fail", error='broker said "process":"x"'),
    # Nemesis and harness values of every JSON kind, nested, non-ASCII, escaped.
    line(process="nemesis", f="kill", value={"nodes": ["n1", "n2"], "n": 3, "ok": True,
                                              "none": None, "text": "é\n\"q\""}),
    line(process="harness", f="phase", value="main", node="n1"),
    line(process="harness", f="depth", value=[1, [2, {"a": "b"}]]),
    line(process="nemesis", f="kill", value=7),
    line(process="nemesis", f="start-packet", value={"loss": 0.5, "delay_ms": 20}),
    # Fields absent, unknown fields, a negative process, a consumer and flags.
    json.dumps({"index": 5, "time": 9, "type": "invoke", "process": -3, "f": "x", "extra": 1}),
    line(process="12", f="consume", value="1-0"),  # a client process written as text
    line(f="consume", value="12-34", consumer=None, redelivered=None),
    line(f="drain", value="odd-id", consumer="c", redelivered=True, phase="drain", queue="q"),
    line(f="consume", value="7-8\n", publisher=None),
    line(f="dead-letter", value="1-0", reason="maxlen"),
    line(f="ack", value="1-0", consumer="c1"),
    # Priorities and the broker's counts of a delivery's earlier acquisitions.
    line(priority=9),
    line(f="consume", value="1-0", priority=0, delivery_count=2, acquired_count=None),
    line(f="drain", value="1-1", delivery_count=None, acquired_count=3),
    line(f="consume", value="1-2", priority=None, delivery_count=1, acquired_count=4),
]


def test_odd_lines_read_as_spark_reads_them(spark: Any, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrow_json, "BLOCK", 300)  # many blocks, side lines at their edges
    lines = [*ODD_BUT_SPARKS, *ODD_BUT_SPARKS[::-1]]
    lines = [ln.replace('"index":0', f'"index":{i}') for i, ln in enumerate(lines)]
    assert_alike(spark, write_lines(tmp_path / "h.jsonl", lines), tmp_path / "out")


REFUSED = {
    "a blank line": ["", line()],
    "a line of spaces": [line(), "   ", line()],
    "a carriage return": [line() + "\r"],
    "not an object": [line(), "[1, 2]"],
    "not JSON": [line(), '{"index": 1, '],
    "a float time": [line(time=1.5)],
    "a string index": [line(index="1")],
    "a number for a string field": [line(value=5)],
    "a side line not written compactly": [json.dumps({"index": 1, "time": 1, "type": "info",
                                                       "process": "nemesis", "f": "kill"})],
    "an unknown process": [line(process="client-1")],
    "a float in a client op's value": [line(error='"process":"x"', value={"x": 0.5})],
    "a float for a string field": [line(process="nemesis", value=0.5)],
    "a missing field": [json.dumps({"index": 1, "time": 1, "type": "ok", "process": 1})],
    "an unknown type": [line(type="ack")],
    "a publish without an id": [line(value=None)],
}


def assert_facts_alike(spark: Any, path: Path, out: Path) -> None:
    # What the reader learns while it writes the rows is what Spark would count over them: the
    # summary of each split (a block), whether each process consumes under one tag, and the
    # nemesis and harness ops.
    facts = arrow_json.to_parquet(path, out, NAMES)
    h = spark_io.History(spark.read.parquet(str(out)), path)
    assert spark_io.arrow_summary(facts) == spark_io.spark_summary(h)
    assert facts.one_tag_per_process() == spark_queue.consumers_are_processes(h.df)
    learnt = spark_io.History(h.df, path, facts=facts)
    assert spark_engine.side_ops(learnt) == spark_engine.side_ops(h)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(planted_histories(), random_histories()))
def test_what_arrow_learns_of_generated_histories_is_what_spark_counts(spark: Any,
                                                                       g: Generated) -> None:
    with tempfile.TemporaryDirectory() as d:
        assert_facts_alike(spark, g.write(Path(d) / "history.jsonl"), Path(d) / "out")


def test_what_arrow_learns_of_odd_lines_in_many_blocks_is_what_spark_counts(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrow_json, "BLOCK", 300)
    lines = [*ODD_BUT_SPARKS, *ODD_BUT_SPARKS[::-1]]
    # Consecutive indexes, then a gap and one going back: consecutive and not, per block.
    lines = [ln.replace('"index":0', f'"index":{i if i < 20 else 2 * i - 3 * (i % 7)}')
             for i, ln in enumerate(lines)]
    assert_facts_alike(spark, write_lines(tmp_path / "h.jsonl", lines), tmp_path / "out")


def test_more_consumer_tags_than_processes_is_not_one_tag_each(spark: Any,
                                                               tmp_path: Path) -> None:
    lines = [line(index=1, f="consume", value="1-0", consumer="a"),
             line(index=2, f="ack", value="1-0", consumer="b")]
    facts = arrow_json.to_parquet(write_lines(tmp_path / "h.jsonl", lines), tmp_path / "out",
                                  NAMES)
    assert facts.pairs == {(1, "a"), (1, "b")} and not facts.one_tag_per_process()


def test_too_many_nemesis_ops_learnt_are_refused_as_spark_refuses_them(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark_engine, "MAX_SIDE_OPS", 2)
    monkeypatch.setattr(arrow_json, "MAX_SIDE", 3)
    lines = [line(index=i, process="nemesis", f="kill", value="n1") for i in range(5)]
    facts = arrow_json.to_parquet(write_lines(tmp_path / "h.jsonl", lines), tmp_path / "out",
                                  NAMES)
    assert len(facts.side) == 3
    df = spark.read.parquet(str(tmp_path / "out"))
    for h in (spark_io.History(df, None, facts=facts), spark_io.History(df, None)):
        with pytest.raises(HistoryError, match="more than 2 nemesis and harness ops"):
            spark_engine.side_ops(h)


@pytest.mark.parametrize("lines", REFUSED.values(), ids=list(REFUSED))
def test_what_pyarrow_would_read_otherwise_is_left_to_spark(tmp_path: Path,
                                                            lines: list[str]) -> None:
    with pytest.raises(arrow_json.NotFast):
        arrow_json.to_parquet(write_lines(tmp_path / "h.jsonl", lines), tmp_path / "out", NAMES)
