"""Bad input: every contract breach raises HistoryError naming the right line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from checkers import CheckOptions, HistoryError, arrow_json, check_history, spark_engine
from tests.checkers import oracle
from tests.checkers.histories import write_lines


def op(index: int, type_: str = "invoke", process: Any = 1, f: str = "publish",
       value: Any = None, **kw: Any) -> str:
    if value is None and f == "publish":
        value = f"{process}-{index}"
    return json.dumps({"index": index, "time": index * 1000, "type": type_, "process": process,
                       "f": f, "value": value, **kw})


def pub(index: int, seq: int, type_: str, process: int = 1) -> str:
    return op(index, type_, process, "publish", f"{process}-{seq}", publisher=process, seq=seq)


GOOD = [pub(0, 0, "invoke"), pub(1, 0, "ok")]


def dlv(index: int, mid: str, process: int = 5, consumer: str = "c5", f: str = "consume") -> str:
    return op(index, "ok", process, f, mid, consumer=consumer, redelivered=False)

# (name, lines, offending line, words of the message)
CASES: list[tuple[str, list[str], int, str]] = [
    ("malformed json", [*GOOD, '{"index": 2, "type": '], 3, ""),
    ("not an object", [GOOD[0], "[1, 2]"], 2, ""),
    ("wrong field type", [GOOD[0], '{"index": "x", "time": 1, "type": "ok", "process": 1, '
                                   '"f": "publish", "value": "1-0"}'], 2, ""),
    ("boolean index", [GOOD[0], op(1, "ok").replace('"index": 1', '"index": true')], 2, ""),
    ("unknown op type", [GOOD[0], op(1, "ack", value="1-0")], 2, "unknown op type"),
    ("missing f", [GOOD[0], json.dumps({"index": 1, "time": 1, "type": "ok", "process": 1})],
     2, "missing field 'f'"),
    ("unknown process", [GOOD[0], op(1, "info", "client-7", "x", value="v")], 2,
     "unknown process"),
    ("publish without id", [GOOD[0], op(1, "invoke", 2, "publish", value=None).replace(
        '"2-1"', "null")], 2, "message id"),
    ("completion without invocation", [*GOOD, pub(2, 5, "ok")], 3, "without its invocation"),
    ("completion before invocation", [*GOOD, pub(2, 5, "ok"), pub(3, 5, "invoke")], 3,
     "without its invocation"),
    ("index goes back", [*GOOD, pub(5, 1, "invoke"), pub(4, 1, "ok")], 4, "index 4"),
    ("index repeats", [*GOOD, pub(1, 1, "invoke")], 3, "index 1"),
    ("published twice", [*GOOD, pub(2, 0, "invoke")], 3, "published again"),
    ("completed twice", [*GOOD, pub(2, 0, "info")], 3, "more than once"),
    ("completed by another process", [pub(0, 0, "invoke"),
                                      op(1, "ok", 2, "publish", "1-0")], 2, "completed by 2"),
    ("nemesis completion without invocation", [*GOOD, op(2, "info", "nemesis", "kill",
                                                         {"nodes": ["n1"]})], 3, "nemesis"),
    ("blank lines count", ["", *GOOD, "   ", "", pub(2, 9, "ok")], 6, "without its invocation"),
    ("ack without delivery", [*GOOD, dlv(2, "1-0"), op(3, "ok", 5, "ack", "1-7", consumer="c5")],
     4, "without an unacknowledged delivery"),
    ("ack twice", [*GOOD, dlv(2, "1-0"), op(3, "ok", 5, "ack", "1-0", consumer="c5"),
                   op(4, "ok", 5, "ack", "1-0", consumer="c5")], 5,
     "without an unacknowledged delivery"),
    ("ack by another consumer", [*GOOD, dlv(2, "1-0"), op(3, "ok", 6, "ack", "1-0",
                                                          consumer="c6")], 4, "ack of '1-0'"),
    ("ack on another channel", [*GOOD, dlv(2, "1-0"), op(3, "ok", 5, "ack", "1-0",
                                                         consumer="other")], 4, "ack of '1-0'"),
    ("ack before its delivery", [*GOOD, op(2, "ok", 5, "ack", "1-0", consumer="c5"),
                                 dlv(3, "1-0")], 3, "without an unacknowledged delivery"),
    ("ack without id", [*GOOD, dlv(2, "1-0"), op(3, "ok", 5, "ack", None, consumer="c5")], 4,
     "ack without a message id"),
]


pytestmark = pytest.mark.spark


def spark_check(path: Path) -> dict[str, Any]:
    return check_history(path, options=CheckOptions())


def assert_names_line(check: Callable[[Path], Any], path: Path, line: int, words: str) -> None:
    with pytest.raises(HistoryError) as e:
        check(path)
    assert e.value.line == line, str(e.value)
    assert words in e.value.message
    assert f"{path.name}:{line}:" in str(e.value)


@pytest.mark.parametrize(("name", "lines", "line", "words"), CASES, ids=[c[0] for c in CASES])
def test_spark_names_the_line(spark: Any, tmp_path: Path, name: str, lines: list[str],
                              line: int, words: str) -> None:
    assert_names_line(spark_check, write_lines(tmp_path / "history.jsonl", lines), line, words)


@pytest.mark.parametrize(("name", "lines", "line", "words"), CASES, ids=[c[0] for c in CASES])
def test_spark_names_the_line_of_a_history_read_into_parquet(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
        lines: list[str], line: int, words: str) -> None:
    # Past MEMORY_LIMIT a history is read into Parquet, by pyarrow where it reads as Spark does
    # (checkers.arrow_json), in blocks of a line or two here; by Spark where it does not.
    monkeypatch.setattr(spark_engine, "MEMORY_LIMIT", 0)
    monkeypatch.setattr(arrow_json, "BLOCK", 64)
    assert_names_line(spark_check, write_lines(tmp_path / "history.jsonl", lines), line, words)


@pytest.mark.parametrize("where", ["index", "publish", "ack"])
def test_line_numbers_across_pyarrow_blocks(spark: Any, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    # pyarrow reads these (no blank line): a line number is the rows before it plus one.
    monkeypatch.setattr(spark_engine, "MEMORY_LIMIT", 0)
    monkeypatch.setattr(arrow_json, "BLOCK", 4096)
    lines = long_history(400)
    bad = {"index": pub(3, 999, "invoke"), "publish": pub(1000, 399, "info"),
           "ack": op(1000, "ok", 5, "ack", "1-7", consumer="c5")}[where]
    lines.insert(700, bad)
    words = "index 3" if where == "index" else ""  # the line is the point
    assert_names_line(spark_check, write_lines(tmp_path / "history.jsonl", lines), 701, words)


def long_history(n: int, blank_every: int = 0) -> list[str]:
    lines = []
    for i in range(n):
        lines.append(pub(2 * i, i, "invoke"))
        lines.append(pub(2 * i + 1, i, "ok"))
        if blank_every and i % blank_every == 0:
            lines.append("")
    return lines


@pytest.mark.parametrize("where", ["row", "index"])
def test_spark_line_numbers_across_file_splits(spark: Any, tmp_path: Path, where: str) -> None:
    # Tiny splits so that the history spans many; blank lines shift line numbers.
    lines = long_history(400, blank_every=7)
    bad_line = 701
    if where == "row":
        lines[bad_line - 1] = "{oops"
    else:
        lines[bad_line - 1] = pub(3, 999, "invoke")
    path = write_lines(tmp_path / "history.jsonl", lines)
    old = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "4096")
    try:
        assert_names_line(spark_check, path, bad_line, "" if where == "row" else "index 3")
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", old)


def test_cut_off_history_is_not_an_error(spark: Any, tmp_path: Path) -> None:
    path = write_lines(tmp_path / "history.jsonl", [*GOOD, pub(2, 1, "invoke")])
    r = spark_check(path)
    assert r["queue"]["info_count"] == 1 and r["queue"]["valid"] == "unknown"
    assert oracle.mismatches(r, oracle.judge(path)) == []


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="no such history"):
        spark_check(tmp_path / "nope.jsonl")
