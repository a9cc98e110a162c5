"""`python -m harness check`, the one command that checks: a run directory or a bare history, the
options of the check, exit codes, the verdict lines, results.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from tests.checkers.histories import Builder, write_lines

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["check", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_valid_history_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.deliver(2, "1-0")
        b.drained()
    out = tmp_path / "r.json"
    code, text, _ = run([str(p), "--out", str(out)], capsys)
    assert code == 0
    assert text.startswith("valid: True\nqueue: attempt 1, acknowledged 1, ok 1, lost 0")
    assert json.loads(out.read_text())["valid"] is True


def test_invalid_history_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.drained()
    code, text, _ = run([str(p)], capsys)
    assert code == 1 and "lost 1" in text
    assert not (tmp_path / "results.json").exists()  # a bare history: written only with --out


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
    u = tmp_path / "u.jsonl"
    with Builder(u) as b:
        b.publish(1, 0)
        b.deliver(2, "1-0")
        b.deliver(3, "1-0")
        b.drained()
    assert run([str(u)], capsys)[0] == 1
    assert run([str(u), "--unflagged-duplicates-valid"], capsys)[0] == 0


def test_verdict_lines_name_every_class(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "h.jsonl"
    with Builder(p) as b:
        b.publish(1, 0)
        b.publish(1, 1, "fail", error="nack")
        b.deliver(2, "1-0")
        b.consume(2, "1-1")
        b.drained()
    code, text, _ = run([str(p)], capsys)
    assert code == 1
    assert "lost 1 (1 unacked)" in text and "delivered_failed 1 (delivered after a nack)" in text
    assert "unflagged_after_ack 0" in text and "duplicated 0 (0 unflagged)" in text
    assert "ordering: violations 0, flagged reorders 0, unconfirmed reorders 0" in text
    assert "perf: ok share 0.5, confirm latency p50 " in text


def test_bad_history_exits_2_naming_the_line(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    p = write_lines(tmp_path / "h.jsonl", ['{"index": 0, "time": 0, "type": "ok", '
                                           '"process": 1, "f": "publish", "value": "1-0"}'])
    code, _, err = run([str(p)], capsys)
    assert code == 2 and "h.jsonl:1:" in err and "without its invocation" in err


def test_missing_history_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run([str(tmp_path / "none.jsonl")], capsys)
    assert code == 2 and "not a run directory" in err


def stored_run(run_dir: Path, check: dict[str, Any]) -> Path:
    """A run directory: 1-0 delivered twice without the flag, 1-1 redelivered flagged."""
    run_dir.mkdir()
    with Builder(run_dir / "history.jsonl") as b:
        b.publish(1, 0)
        b.publish(1, 1)
        b.consume(2, "1-1")
        b.consume(3, "1-0")
        b.consume(4, "1-0")
        b.consume(4, "1-1", redelivered=True)
        b.drained()
    (run_dir / "test.json").write_text(json.dumps({"spec": {"check": check}}))
    return run_dir


def test_a_run_is_checked_with_its_spec_and_the_options_given(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = stored_run(tmp_path / "run", {"unflagged_duplicates_invalid": False})
    code, text, _ = run([str(r)], capsys)
    assert code == 0 and "run: " not in text  # the spec allows unflagged duplicates
    written = json.loads((r / "results.json").read_text())
    assert written["valid"] is True and written["run"]["valid"] is True
    assert written["queue"]["unflagged_duplicated"] == ["1-0"]
    # Given on the command line, an option overrides the spec's; --out leaves results.json be.
    out = tmp_path / "strict.json"
    assert run([str(r), "--flagged-duplicates-invalid", "--out", str(out)], capsys)[0] == 1
    assert json.loads(out.read_text())["queue"]["anomalies"] == ["redelivered_duplicated"]
    assert json.loads((r / "results.json").read_text()) == written


def test_parquet_conversion_then_the_parquet_history(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = stored_run(tmp_path / "run", {})
    pq = tmp_path / "h.parquet"
    code, _, _ = run([str(r), "--parquet", str(pq), "--work-dir", str(tmp_path / "work")], capsys)
    assert code == 1 and (pq / "_checkers.json").exists()
    first = json.loads((r / "results.json").read_text())
    out = tmp_path / "again.json"
    assert run([str(pq), "--out", str(out)], capsys)[0] == 1
    again = json.loads(out.read_text())
    assert {k: v for k, v in first["queue"].items() if k != "details"} == again["queue"]
    assert again["ordering"] == first["ordering"] and again["perf"] == first["perf"]
    assert run([str(pq), "--parquet", str(tmp_path / "x")], capsys)[0] == 2
