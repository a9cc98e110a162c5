"""The CLI: exit codes, the verdict line, results.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkers import __main__ as cli
from tests.checkers.histories import Builder, write_lines

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_valid_history_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.deliver(2, "1-0")
        b.drained()
    out = tmp_path / "r.json"
    code, line, _ = run([str(p), "--out", str(out)], capsys)
    assert code == 0
    assert line.startswith("valid=true queue=true (attempted 1, acked 1, lost 0")
    assert json.loads(out.read_text())["valid"] is True


def test_invalid_history_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.drained()
    code, line, _ = run([str(p)], capsys)
    assert code == 1 and "lost 1" in line


def test_unknown_exits_2_and_options_apply(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:  # no drain: 1-1 may still be queued
        b.publish(1, 0)
        b.publish(1, 1)
        b.deliver(2, "1-0")
    assert run([str(p)], capsys)[0] == 2
    assert run([str(p), "--no-require-drain"], capsys)[0] == 1
    q = tmp_path / "q.jsonl"
    with Builder(q) as b:  # no drain, but nothing to call lost
        b.publish(1, 0)
        b.deliver(2, "1-0")
        b.deliver(3, "1-0", redelivered=True)
    assert run([str(q)], capsys)[0] == 0
    assert run([str(q), "--flagged-duplicates-invalid"], capsys)[0] == 1


def test_verdict_line_names_the_new_classes(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.publish(1, 1, "fail", error="nack")
        b.deliver(2, "1-0")
        b.consume(2, "1-1")
        b.drained()
    code, line, _ = run([str(p)], capsys)
    assert code == 1
    assert "lost 1 [1 unacked]" in line and "delivered after nack 1" in line
    assert "unflagged after ack 0" in line


def test_bad_history_exits_2_naming_the_line(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    p = write_lines(tmp_path / "h.jsonl", ['{"index": 0, "time": 0, "type": "ok", '
                                           '"process": 1, "f": "publish", "value": "1-0"}'])
    code, _, err = run([str(p)], capsys)
    assert code == 2 and "h.jsonl:1:" in err and "without its invocation" in err


def test_missing_history_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run([str(tmp_path / "none.jsonl")], capsys)[0] == 2
