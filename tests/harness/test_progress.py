"""Live progress (no cluster): counting recorded ops, following phases, faults and depth, and
showing it in place on a terminal or as plain lines in a log."""

import contextlib
import io
import json
import logging
import threading
import time

from harness import runner
from harness.progress import (
    CLEAR_LINE,
    LiveStatus,
    ObservedHistory,
    RunProgress,
    Snapshot,
    format_status,
    showing,
)
from history import HARNESS, NEMESIS, Op, read_history


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def phase(name, state="start"):
    return Op(type="info", process=HARNESS, f="phase", value={"phase": name, "state": state})


def nemesis(type_, f, value, node=None):
    return Op(type=type_, process=NEMESIS, f=f, value=value, node=node)


def publish(type_, seq):
    return Op(type=type_, process=1, f="publish", value=f"1-{seq}", publisher=1, seq=seq)


def test_counts_publishes_deliveries_and_follows_phase_fault_and_depth():
    clock = Clock()
    p = RunProgress(time_limit_s=90, clock=clock)
    p.observe(phase("setup"))
    clock.t += 15
    p.observe(phase("setup", "end"))
    p.observe(phase("main"))
    for seq in range(5):
        p.observe(publish("invoke", seq))
    for t in ("ok", "ok", "ok", "fail", "info"):
        p.observe(publish(t, 0))
    p.observe(Op(type="ok", process=2, f="consume", value="1-0"))
    p.observe(Op(type="ok", process=2, f="ack", value="1-0"))
    clock.t += 10
    p.observe(nemesis("invoke", "start-partition", {"fault": "partition-one"}))
    p.observe(nemesis("info", "start-partition", {"grudge": {}}, node="n2"))
    p.observe(Op(type="info", process=HARNESS, f="depth",
                 value={"queue": "q", "nodes": {}, "ready": 1200, "unacked": 7}))
    clock.t += 4
    s = p.snapshot()
    assert s.phase == "main" and s.main_s == 14 and s.time_limit_s == 90 and s.elapsed_s == 29
    assert s.publishes == {"invoke": 5, "ok": 3, "fail": 1, "info": 1}
    assert (s.consumed, s.acked, s.drained, s.ops) == (1, 1, 0, 18)
    assert (s.fault, s.fault_node, s.fault_s, s.faults_started) == ("partition-one", "n2", 4, 1)
    assert (s.ready, s.unacked, s.depth_age_s) == (1200, 7, 4)
    assert p.count("publish", "ok") == 3 and p.count("nope", "ok") == 0

    line = format_status(s)
    assert line.startswith("main 14s/1:30 | run 29s | publish ok 3 fail 1 info 1 | delivered 1")
    assert "fault partition-one n2 4s" in line and "depth 1200 ready 7 unacked" in line


def test_a_fault_ends_at_its_stop_and_every_fault_at_heal():
    p = RunProgress(clock=Clock())
    # kill is stopped by "start": the invoke naming the same fault with another f ends it
    p.observe(nemesis("invoke", "kill", {"fault": "kill"}))
    p.observe(nemesis("info", "kill", {"nodes": ["n1"]}, node="n1"))
    assert p.snapshot().fault == "kill"
    p.observe(nemesis("invoke", "start", {"fault": "kill"}, node="n1"))
    assert p.snapshot().fault is None
    p.observe(nemesis("info", "start", {"nodes": ["n1"]}, node="n1"))
    # the "stop" fault starts with f "stop" and ends with "start"
    p.observe(nemesis("invoke", "stop", {"fault": "stop"}))
    assert p.snapshot().fault == "stop"
    p.observe(nemesis("invoke", "heal", {"faults": ["stop"], "active": "stop"}))
    assert p.snapshot().fault == "stop"
    p.observe(nemesis("info", "heal", {"faults": ["stop"], "healed": {}}))
    s = p.snapshot()
    assert s.fault is None and s.faults_started == 2
    assert "no fault (2 so far)" in format_status(s)


def test_stages_the_history_does_not_record_show_as_the_phase():
    clock = Clock()
    p = RunProgress(clock=clock)
    p.observe(phase("main"))
    clock.t += 60
    p.observe(phase("main", "end"))
    p.observe(Op(type="info", process=HARNESS, f="phase",
                 value={"phase": "drain", "state": "start"}))
    p.observe(Op(type="ok", process=9, f="drain", value="1-1"))
    clock.t += 5
    p.stage("check")
    clock.t += 3
    s = p.snapshot()
    assert s.phase == "check" and s.phase_s == 3 and s.main_s == 60 and s.drained == 1
    assert format_status(s).startswith("check 3s | run 1:08 |")
    assert format_status(Snapshot()).startswith("starting 0s | run 0s | publish ok 0")


def test_counting_is_exact_under_concurrent_appends_and_cheap(tmp_path):
    p = RunProgress()
    h = ObservedHistory(tmp_path / "history.jsonl", p.observe)

    def client(process: int) -> None:
        for seq in range(500):
            h.append(Op(type="invoke", process=process, f="publish", value=f"{process}-{seq}"))
            h.append(Op(type="ok", process=process, f="publish", value=f"{process}-{seq}"))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    h.close()
    s = p.snapshot()
    assert s.publishes["invoke"] == s.publishes["ok"] == 4000 and s.ops == 8000
    ops = read_history(tmp_path / "history.jsonl")
    assert len(ops) == 8000 and [o.index for o in ops] == list(range(8000))
    # observing alone, without the file: well under a microsecond budget per op on any machine
    op = Op(type="ok", process=1, f="publish", value="1-1")
    t0 = time.perf_counter()
    for _ in range(50_000):
        p.observe(op)
    assert time.perf_counter() - t0 < 2.0


def test_an_observer_that_raises_never_costs_an_op(tmp_path):
    calls = []

    def broken(op: Op) -> None:
        calls.append(op.index)
        raise RuntimeError("display went away")

    h = ObservedHistory(tmp_path / "h.jsonl", broken)
    for i in range(3):
        assert h.append(Op(type="info", process=HARNESS, f="x", value=i)).index == i
    h.close()
    assert calls == [0] and len(read_history(tmp_path / "h.jsonl")) == 3


def test_off_a_terminal_the_status_is_a_plain_line_every_interval():
    p = RunProgress()
    p.observe(phase("main"))
    out = io.StringIO()
    live = LiveStatus(p, out, tty=False, plain_every_s=0.02)
    live.start()
    deadline = time.monotonic() + 30  # two plain lines, however loaded the machine
    while out.getvalue().count("progress: main") < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    live.write("12:00:00 INFO harness.runner: phase heal\n")
    live.stop()
    lines = out.getvalue().splitlines()
    assert len([x for x in lines if x.startswith("progress: main")]) >= 2
    assert "12:00:00 INFO harness.runner: phase heal" in lines
    assert CLEAR_LINE not in out.getvalue()


def test_on_a_terminal_the_line_is_redrawn_in_place_and_log_records_go_above_it():
    p = RunProgress()
    p.observe(phase("recovery"))
    out = io.StringIO()
    live = LiveStatus(p, out, tty=True)
    live._draw()
    shown = out.getvalue()
    assert shown.startswith(CLEAR_LINE + "recovery ") and "\n" not in shown
    live.write("a log record\n")
    text = out.getvalue()[len(shown):]
    # cleared, the record on its own line, then the status drawn again
    assert text.startswith(CLEAR_LINE + "a log record\nrecovery ")
    live.stop()
    assert out.getvalue().endswith(CLEAR_LINE)


def test_showing_routes_the_console_log_through_the_status_and_restores_it():
    p = RunProgress()
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    logger = logging.getLogger("test_progress_routing")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with showing(p, out, handler, tty=True) as live:
            assert handler.stream is live
            logger.info("inside")
        assert handler.stream is out
        logger.info("after")
    finally:
        logger.removeHandler(handler)
    assert "inside\n" in out.getvalue() and out.getvalue().endswith("after\n")


def test_the_runner_feeds_its_observer_and_records_replay_of(tmp_path, monkeypatch):
    """run_test with the cluster parts replaced: the observer sees every op the run records,
    and test.json says which run a replay repeats."""
    from harness.spec import TestSpec

    def execute(self):
        with self.phase("setup"):
            self.history.append(Op(type="info", process=HARNESS, f="depth",
                                   value={"ready": 3, "unacked": 0}))
        self.outcome.error = "BrokerError: no boot"  # never reached main: nothing to check
        self.history.close()
        self.save_test_json()
        return self.outcome

    monkeypatch.setattr(runner, "run_lock", contextlib.nullcontext)
    monkeypatch.setattr(runner.Run, "execute", execute)
    p = RunProgress()
    code, outcome = runner.run_test(TestSpec(name="t", seed=5), tmp_path, observer=p,
                                    replay_of="/store/t/20260101T000000.000000Z")
    assert code == 2 and outcome.error
    info = json.loads((outcome.run_dir / "test.json").read_text())
    assert info["replay_of"] == "/store/t/20260101T000000.000000Z" and info["seed"] == 5
    assert info["queue_description"] == []  # the kind's words: none for a default quorum queue
    s = p.snapshot()
    assert s.ops == 3 and s.ready == 3 and s.phase == "setup"
    code, outcome = runner.run_test(TestSpec(name="t", seed=6), tmp_path)
    assert "replay_of" not in json.loads((outcome.run_dir / "test.json").read_text())
