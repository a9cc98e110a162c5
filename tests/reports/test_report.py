"""Tests for reports.plots and reports.report: fault windows, the streaming scan, plots, report.html."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from history import HARNESS, NEMESIS, HistoryWriter, Op, OpType
from reports import report
from reports.plots import (
    MAX_RATE_POINTS,
    FaultWindow,
    fault_windows,
    rate_series,
    scan_history,
)
from reports.report import render

S = 1_000_000_000
MS = 1_000_000
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def nem(t: int, typ: OpType, f: str, value: Any = None, node: str | None = None) -> Op:
    return Op(type=typ, process=NEMESIS, f=f, value=value, node=node, time=t)


def nem_pair(t: int, f: str, value: Any = None, node: str | None = None) -> list[Op]:
    """An invoke at t and its info completion 10 ms later."""
    return [nem(t, "invoke", f, value, node), nem(t + 10 * MS, "info", f, value, node)]


# --- fault_windows ----------------------------------------------------------------------


def test_window_opens_at_completion_and_closes_at_stop_completion() -> None:
    grudge = {"fault": "partition-halves", "grudge": {"n1": ["n2", "n3"]}}
    ops = nem_pair(1 * S, "start-partition", grudge) + nem_pair(3 * S, "stop-partition")
    assert fault_windows(ops) == [
        FaultWindow(
            "start-partition", 1 * S + 10 * MS, 3 * S + 10 * MS, grudge, None, "stop-partition",
            invoke_ns=1 * S,
        )
    ]


def test_nested_and_overlapping_faults() -> None:
    ops = (
        nem_pair(1 * S, "start-partition", {"fault": "partition-one"})
        + nem_pair(2 * S, "kill", {"nodes": ["n2"]}, "n2")
        + nem_pair(3 * S, "pause", {"nodes": ["n3"]})
        + nem_pair(4 * S, "stop-partition")
        + nem_pair(5 * S, "resume")
        + nem_pair(6 * S, "start", {"nodes": ["n2"]})
    )
    ws = fault_windows(ops)
    assert [(w.kind, w.start_ns // S, w.end_ns // S, w.closed_by) for w in ws] == [
        ("partition", 1, 4, "stop-partition"),
        ("kill", 2, 6, "start"),
        ("pause", 3, 5, "resume"),
    ]
    assert ws[1].node == "n2"


def test_start_ends_both_kill_and_stop() -> None:
    ops = nem_pair(1 * S, "kill") + nem_pair(2 * S, "stop") + nem_pair(3 * S, "start")
    assert [(w.f, w.end_ns // S) for w in fault_windows(ops)] == [("kill", 3), ("stop", 3)]


def test_heal_closes_every_open_fault() -> None:
    ops = (
        nem_pair(1 * S, "start-partition")
        + nem_pair(2 * S, "start-packet", {"fault": "delay"})
        + nem_pair(3 * S, "start-rolling-restart")
        + nem_pair(9 * S, "heal")
        + [Op(type="ok", process=0, f="consume", value="0-1", time=20 * S)]
    )
    ws = fault_windows(ops)
    assert [(w.kind, w.end_ns, w.closed_by) for w in ws] == [
        ("partition", 9 * S + 10 * MS, "heal"),
        ("packet", 9 * S + 10 * MS, "heal"),
        ("rolling-restart", 9 * S + 10 * MS, "heal"),
    ]


def test_unterminated_window_closes_at_end_of_history() -> None:
    ops = [
        *nem_pair(1 * S, "start-partition"),
        Op(type="ok", process=3, f="consume", value="1-1", time=7 * S),
    ]
    (w,) = fault_windows(ops)
    assert (w.end_ns, w.closed_by) == (7 * S, None)
    (w,) = fault_windows(ops, end_ns=12 * S)
    assert w.end_ns == 12 * S


def test_failed_start_opens_nothing_and_value_falls_back_to_invoke() -> None:
    ops = [
        nem(1 * S, "invoke", "start-partition", {"fault": "bridge"}),
        nem(2 * S, "fail", "start-partition"),
        nem(3 * S, "invoke", "start-partition", {"fault": "halves"}),
        nem(4 * S, "info", "start-partition", None, None),
        nem(5 * S, "invoke", "stop-partition"),
        nem(6 * S, "info", "stop-partition"),
    ]
    (w,) = fault_windows(ops)
    assert (w.start_ns, w.end_ns, w.value) == (4 * S, 6 * S, {"fault": "halves"})


def test_non_nemesis_ops_are_ignored() -> None:
    ops = [
        Op(type="invoke", process=1, f="start-partition", time=1),
        Op(type="info", process=HARNESS, f="kill", time=2),
    ]
    assert fault_windows(ops) == []


# --- a literal run ----------------------------------------------------------------------


PARTITION = {
    "fault": "partition-halves",
    "grudge": {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]},
    "nodes": ["n1", "n2", "n3"],
}


def literal_history() -> list[tuple[int, Op]]:
    """Returns (time, op) pairs of a small run, in time order.

    20 s of publishes (10/s over three processes, a fresh process after each
    info), a delivery per confirmed publish, a partition from 5 s to 10 s, a
    kill of n2 from 8 s ended by the heal at 14 s, then heal, recovery (a
    recover-node event), drain and teardown phases; placement changes at 1 s
    and 9 s, a depth sample every 5 s (n2 not answering from 8 s to 14 s).
    """
    events: list[tuple[int, Op]] = []

    def harness(t: int, f: str, value: Any, node: str | None = None) -> None:
        events.append((t, Op(type="info", process=HARNESS, f=f, value=value, node=node)))

    def phase(t: int, p: str, state: str) -> None:
        harness(t, "phase", {"phase": p, "state": state})

    def nemesis(t: int, f: str, value: Any = None, node: str | None = None) -> None:
        events.append((t, Op(type="invoke", process=NEMESIS, f=f, value=value, node=node)))
        events.append((t + 20 * MS, Op(type="info", process=NEMESIS, f=f, value=value, node=node)))

    phase(0, "main", "start")
    placement = {"queue": "q", "type": "quorum", "members": ["n1", "n2", "n3"], "mirrors": [],
                 "synchronised_mirrors": []}
    harness(1 * S, "placement", {**placement, "leader": "n2"}, "n2")
    harness(9 * S, "placement", {**placement, "leader": "n3"}, "n3")
    for k in range(0, 26, 5):
        ready = 12 if 5 <= k < 10 else 1
        nodes: dict[str, Any] = {n: {"ready": ready, "unacked": 2} for n in ("n1", "n3")}
        nodes["n2"] = {"error": "nodedown"} if 8 <= k < 14 else {"ready": ready, "unacked": 2}
        harness(k * S, "depth", {"queue": "q", "nodes": nodes, "ready": ready, "unacked": 2})
    nemesis(5 * S, "start-partition", PARTITION)
    nemesis(8 * S, "kill", {"fault": "kill", "nodes": ["n2"]}, "n2")
    nemesis(10 * S, "stop-partition")
    nemesis(14 * S, "heal")
    processes = [0, 1, 2]
    for tick in range(200):
        t = tick * 100 * MS + 1 * MS
        slot, seq = tick % 3, tick + 1
        p = processes[slot]
        mid = f"{p}-{seq}"
        in_partition = 5 * S <= t < 10 * S
        typ: OpType = (
            "info" if in_partition and tick % 3 == 0 else "fail" if tick % 17 == 0 else "ok"
        )
        latency = 200 * MS if typ == "info" else (40 if in_partition else 4) * MS
        fields: dict[str, Any] = {"f": "publish", "value": mid, "publisher": p, "seq": seq}
        events.append((t, Op(type="invoke", process=p, node="n1", phase="main", **fields)))
        error = "confirm timeout" if typ == "info" else None
        events.append((t + latency, Op(type=typ, process=p, error=error, **fields)))
        if typ == "info":
            processes[slot] += 3  # retired; a new process takes its place
        if typ == "ok":
            delivery = Op(
                type="ok",
                process=10,
                consumer="c1",
                redelivered=False,
                node="n3",
                **{**fields, "f": "consume"},
            )
            events.append((t + 50 * MS, delivery))
    phase(20 * S, "main", "end")
    phase(20 * S, "heal", "start")
    phase(21 * S, "heal", "end")
    phase(21 * S, "recovery", "start")
    harness(22 * S, "recover-node", {"node": "n2", "action": "start_app"}, "n2")
    phase(23 * S, "recovery", "end")
    phase(23 * S, "drain", "start")
    for i in range(30):
        drained = Op(
            type="ok", process=20, f="drain", value=f"0-{i}", publisher=0, seq=i, node="n1"
        )
        events.append((23 * S + i * 50 * MS, drained))
    phase(26 * S, "drain", "end")
    phase(26 * S, "teardown", "start")
    phase(27 * S, "teardown", "end")
    return sorted(events, key=lambda e: e[0])


def write_run(run_dir: Path, name: str = "partition-test", results: Any = None) -> None:
    """Writes a stored run: the literal history (through HistoryWriter), test.json, logs."""
    run_dir.mkdir(parents=True, exist_ok=True)
    writer = HistoryWriter(run_dir / "history.jsonl", start_ns=0)
    clock = [0]
    writer.now = lambda: clock[0]  # type: ignore[method-assign]
    try:
        for t, op in literal_history():
            clock[0] = t
            writer.append(op)
    finally:
        writer.close()
    spec = {
        "name": name,
        "seed": 42,
        "workload": "queue",
        "nemesis": {"faults": ["partition", "kill"], "interval": 5},
        "nodes": ["n1", "n2", "n3"],
        "time_limit": 20,
    }
    (run_dir / "test.json").write_text(json.dumps(spec))
    if results is not None:
        (run_dir / "results.json").write_text(json.dumps(results))
    (run_dir / "harness.log").write_text("INFO started\n")
    (run_dir / "nodes" / "n1").mkdir(parents=True)
    (run_dir / "nodes" / "n1" / "rabbit@10.0.0.1.log").write_text("log\n")


RESULTS = {
    "valid": False,
    "queue": {
        "valid": False,
        "attempt_count": 200,
        "acknowledged_count": 171,
        "ok_count": 170,
        "lost_count": 7,
        "unexpected_count": 0,
        "duplicated_count": 3,
        "recovered_count": 2,
        "lost": [f"1-{i}" for i in range(1, 60, 8)] + [f"lost-{i}" for i in range(100)],
        "unexpected": [],
        "duplicated": ["0-3", "1-4", "2-5"],
        "recovered": ["0-51", "0-54"],
        "truncated": True,
    },
    "ordering": {
        "valid": True,
        "violation_count": 0,
        "examples": [{"queue": "q", "a": "0-1", "b": "0-2"}],
    },
}


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def test_render_writes_plots_and_report(tmp_path: Path) -> None:
    run = tmp_path / "store" / "partition-test" / "20250101T000000Z"
    write_run(run, results=RESULTS)
    written = render(run)
    assert [p.name for p in written] == [
        "latency.png", "rate.png", "fates.png", "depth.png", "placement.png", "report.html"
    ]
    for png in written[:4]:
        assert png.stat().st_size > 20_000
        width, height = png_size(png)
        assert width == 1200 and height > 250
    assert not list(run.glob("*.tmp"))
    html = (run / "report.html").read_text()
    assert "INVALID" in html
    assert "partition-test" in html and "20250101T000000Z" in html
    # the verdict's sentence, counts and truncated id lists
    assert "Invalid: 7 confirmed messages lost and 3 messages delivered more than once" not in html
    assert "Invalid: 7 confirmed messages lost." in html
    assert '<td>lost</td><td class="num">7</td>' in html
    assert '<td>confirmed</td><td class="num">171</td>' in html
    assert "<h3>7 confirmed messages lost</h3>" in html
    assert "lost-0" in html and "lost-50" not in html and "… 88 more" in html
    # fault windows: the partition opens at 5.020 and stops at 10.020; the kill ends at the heal
    assert "partition-halves" in html and "5.020" in html and "10.020" in html
    assert "14.020" in html and "heal" in html and "n2" in html
    assert "n1 cut from n2, n3" in html
    # recovery actions and phases
    assert "recover-node n2" in html
    assert '<td>drain</td><td class="num">23.000</td><td class="num">26.000</td>' in html
    for plot in ("latency", "rate", "depth", "placement"):
        assert f'<img src="{plot}.png"' in html
    # the run sits in a store: its index was rewritten, and the page links back to it
    assert 'href="../../index.html"' in html
    assert 'href="partition-test/20250101T000000Z/report.html"' in (
        tmp_path / "store" / "index.html"
    ).read_text()
    for link in ("history.jsonl", "results.json", "harness.log", "test.json", "nodes/n1/"):
        assert f'href="{link}' in html
    assert "rabbit%4010.0.0.1.log" in html
    assert "<script" not in html and "http://" not in html and "https://" not in html


def test_report_escapes_hostile_name(tmp_path: Path) -> None:
    hostile = '<script>alert("x")</script> & $\\frac{a}{$'
    run = tmp_path / "run"
    write_run(run, name=hostile, results={"valid": True, "<b>sec</b>": {"valid": True, "n": 1}})
    render(run)
    html = (run / "report.html").read_text()
    assert "<script" not in html and "<b>sec" not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp;" in html
    assert "&lt;b&gt;sec&lt;/b&gt;" in html
    assert ">valid<" in html


def test_render_without_results_or_spec_says_not_checked(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_run(run)
    (run / "test.json").unlink()
    render(run)
    html = (run / "report.html").read_text()
    assert "not checked" in html and "No test.json" in html
    assert 'href="results.json"' not in html


def test_render_without_history_writes_only_the_page(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text('{"valid": "unknown"}')
    written = render(tmp_path)
    assert written == [tmp_path / "report.html"]
    html = written[0].read_text()
    assert "unknown" in html and "No history" in html and "<img" not in html


@pytest.mark.parametrize(
    "results",
    [
        {},
        {"valid": "unknown", "queue": {"lost": [{"id": "x"}] * 50}, "error": "spark died"},
        {"valid": True, "perf": {"latency": {"p50": 1.5}, "valid": True}, "ordering": "weird"},
        [1, 2, 3],
    ],
)
def test_render_tolerates_odd_results(tmp_path: Path, results: Any) -> None:
    write_run(tmp_path / "run", results=results)
    render(tmp_path / "run")
    html = (tmp_path / "run" / "report.html").read_text()
    assert "</html>" in html


def test_render_tolerates_unreadable_results(tmp_path: Path) -> None:
    write_run(tmp_path / "run")
    (tmp_path / "run" / "results.json").write_text('{"valid": tru')
    render(tmp_path / "run")
    assert "results.json is unreadable" in (tmp_path / "run" / "report.html").read_text()


def test_a_failing_plot_still_leaves_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any) -> Path:
        raise RuntimeError("no fonts <here>")

    monkeypatch.setattr(report, "plot_rate", broken)
    write_run(tmp_path / "run", results=RESULTS)
    written = report.render(tmp_path / "run")
    assert [p.name for p in written] == ["latency.png", "fates.png", "depth.png", "placement.png",
                                         "report.html"]
    html = written[-1].read_text()
    assert "rate.png: RuntimeError: no fonts &lt;here&gt;" in html and "INVALID" in html


# --- the scan ---------------------------------------------------------------------------


def test_scan_counts_and_windows(tmp_path: Path) -> None:
    write_run(tmp_path)
    scan = scan_history(tmp_path / "history.jsonl")
    assert scan.bad_lines == 0 and scan.unfinished == 0
    assert scan.client_counts[("publish", "invoke")] == 200
    assert (
        sum(n for (f, t), n in scan.client_counts.items() if f == "publish" and t != "invoke")
        == 200
    )
    assert scan.client_counts[("drain", "ok")] == 30
    assert [w.kind for w in scan.windows] == ["partition", "kill"]
    assert [p.phase for p in scan.phases] == ["main", "heal", "recovery", "drain", "teardown"]
    info = scan.latency[("publish", "info")]
    # info ops are drawn where they ended, 200 ms after their invocation
    assert sorted(info.xs)[0] == pytest.approx(5.101 + 0.2)
    assert all(y == pytest.approx(200) for y in info.ys)
    ok = scan.latency[("publish", "ok")]
    assert min(ok.xs) == pytest.approx(
        0.101
    )  # ok ops are drawn where they were invoked (tick 0 fails)


def test_scan_tolerates_torn_line_and_unfinished_invoke(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    lines = [
        {"index": 0, "time": 1 * S, "type": "invoke", "process": 0, "f": "publish", "value": "0-1"},
        {"index": 1, "time": 3 * S, "type": "ok", "process": 1, "f": "consume", "value": "9-9"},
    ]
    path.write_text("\n".join(json.dumps(d) for d in lines) + '\n\n{"index": 2, "ti')
    scan = scan_history(path)
    assert (scan.op_count, scan.bad_lines, scan.unfinished, scan.end_ns) == (2, 1, 1, 3 * S)
    res = scan.latency[("publish", "info")]
    assert list(res.xs) == [3.0] and list(res.ys) == [2000.0]


def synthetic_history(path: Path, n_publishes: int, ms_per_op: int = 1) -> None:
    """Writes n publishes (invoke + completion) plus a delivery each, fast, as plain JSON lines."""
    with open(path, "w") as fh:
        i = 0
        for k in range(n_publishes):
            t = k * ms_per_op * MS
            p = k % 16
            typ = "ok" if k % 50 else ("fail" if k % 100 else "info")
            for d in (
                {
                    "index": i,
                    "time": t,
                    "type": "invoke",
                    "process": p,
                    "f": "publish",
                    "value": f"{p}-{k}",
                },
                {
                    "index": i + 1,
                    "time": t + (k % 97 + 1) * 100_000,
                    "type": typ,
                    "process": p,
                    "f": "publish",
                    "value": f"{p}-{k}",
                },
                {
                    "index": i + 2,
                    "time": t + 500_000,
                    "type": "ok",
                    "process": 100 + p,
                    "f": "consume",
                    "value": f"{p}-{k}",
                },
            ):
                fh.write(json.dumps(d) + "\n")
            i += 3
            if k == n_publishes // 3:
                fh.write(
                    json.dumps(
                        {
                            "index": i,
                            "time": t,
                            "type": "info",
                            "process": "nemesis",
                            "f": "start-partition",
                            "value": {"fault": "majorities-ring"},
                        }
                    )
                    + "\n"
                )
                i += 1


def test_scan_sample_is_bounded_and_seeded(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    synthetic_history(path, 20_000)
    a = scan_history(path, max_points=500, seed=7)
    b = scan_history(path, max_points=500, seed=7)
    ok = a.latency[("publish", "ok")]
    assert ok.seen == 19_600 and len(ok.xs) == len(ok.ys) == 500
    assert list(ok.xs) == list(b.latency[("publish", "ok")].xs)
    # rare types keep every point: the sample is per (f, type)
    assert a.latency[("publish", "info")].seen == len(a.latency[("publish", "info")].xs) == 200
    (w,) = a.windows
    assert w.closed_by is None and w.end_ns == a.end_ns


def test_rate_series_is_ops_per_second_and_merges_buckets(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    synthetic_history(path, 5_000, ms_per_op=10)  # 100 publishes/s for 50 s
    xs, series, width = rate_series(scan_history(path))
    assert width == 1.0 and xs[0] == 0.5
    assert series[("consume", "ok")][10] == pytest.approx(100)
    scan = scan_history(path, bucket_ns=1_000_000)  # 1 ms buckets: 50,000 of them, merged
    xs, series, width = rate_series(scan)
    assert len(xs) <= MAX_RATE_POINTS + 1 and width > 0.001
    assert sum(series[("consume", "ok")]) * width == pytest.approx(5_000)


def test_render_200k_ops(tmp_path: Path) -> None:
    synthetic_history(tmp_path / "history.jsonl", 66_667)  # ~200k ops
    started = time.monotonic()
    written = render(tmp_path, max_points=50_000)
    assert time.monotonic() - started < 30
    assert [p.name for p in written] == ["latency.png", "rate.png", "fates.png", "report.html"]
    assert all(p.stat().st_size > 10_000 for p in written[:3])
    html = (tmp_path / "report.html").read_text()
    assert "200,002" in html and "sample of" in html


# --- one latency-quantile definition ----------------------------------------------------------


FIXTURE_RUN = Path(__file__).resolve().parents[1] / "harness" / "fixtures" / "run"


def test_the_reports_latency_quantiles_are_results_json_s() -> None:
    results = json.loads((FIXTURE_RUN / "results.json").read_text())
    checked = results["perf"]["overall"]["latency_ms"]
    scan = scan_history(FIXTURE_RUN / "history.jsonl")
    rows = {(r.f, r.outcome): r for r in report.latency_rows(scan, results)}
    confirmed = rows[("publish", "ok")]
    assert confirmed.from_results and confirmed.ops == results["perf"]["overall"]["ok"]
    assert confirmed.ms == checked and confirmed.ms["p50"] == checked["p50"] == 8.669
    # Without results.json the report works the same quantiles out of the history itself, by
    # the same definition (nearest rank): equal but for results.json's rounding to 1 us.
    alone = {(r.f, r.outcome): r for r in report.latency_rows(scan)}[("publish", "ok")]
    assert not alone.from_results and alone.ops == confirmed.ops
    assert alone.ms == pytest.approx(checked, abs=0.0005)
    html = report._latency_table(scan, results)
    assert "<td>publish</td><td>ok</td>" in html.replace('<td class="num">', "<td>")
    assert f"{checked['p50']:,.1f}" in html and "as results.json counts them" in html
    # The other rows follow the same definition over the scan's sample.
    info = rows[("publish", "info")]
    ys = sorted(scan.latency[("publish", "info")].ys)
    assert info.ms["p50"] == ys[max(1, -(-len(ys) // 2)) - 1] and info.ms["max"] == ys[-1]
