"""Runs for the finding report's tests: the archived findings (measurements/findings/), copied, and
a small planted one whose every time, log line and version is known.

The planted run (`plant_run`): scenario "planted" on RabbitMQ 4.3.6, one message 0-0 published
and confirmed, delivered and acked twice, both unflagged, the second DUP_BEFORE_END_MS before the
main phase ends, then the consumer's cancel and close (holding 0-0's second delivery); its
results.json says one unflagged duplicate with the documentation's quote, one incident with two
log lines read from nodes/n1/rabbit.log, and the per-message details' own "broker log" excerpt
(which the page must never show).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

from history import HARNESS, NEMESIS, Op

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = ROOT / "measurements" / "findings"
PARTITION = "partition-rabbitmq-4.0-docker-seed4201"
LEADER = "quorum-leader-partition-rabbitmq-4.0-seed4006"
SAC = "quorum-sac-fifo-seed3001"

S = 1_000_000_000
MS = 1_000_000
MAIN_START = 2 * S
MAIN_END = 20 * S
DUP_BEFORE_END_MS = 300
START_UNIX = 1_800_000_000.0  # 2027-01-15T08:00:00Z
QUOTE = ("RabbitMQ's consumer acknowledgement guide: \"Redeliveries will have a special boolean "
         "property, redeliver, set to true by RabbitMQ. For first time deliveries it will be set "
         "to false.\"")
LOG_TEXTS = ("queue 'q' in vhost '/': detected a new leader {'%2F_q','rabbit@n2'} in term 3",
             "Mnesia('rabbit@n1'): ** ERROR ** mnesia_event got {inconsistent_database, x}")
DETAIL_LOG = "9.000 s n1 per-message excerpt that must not be shown"
CAVEAT = "Debian unstable's RabbitMQ 4.3 runs on Erlang 29, which is not listed as supported"
SCENARIO = "# planted\nname = \"planted\"\nseed = 7\n\n[broker]\nrabbitmq = \"4.3\"\n"


def copy_finding(name: str, into: Path) -> Path:
    """Copies an archived finding into `into`. Returns its copy."""
    return Path(shutil.copytree(FINDINGS / name, into / name))


def _client(t: int, typ: str, f: str, process: int, **kw: Any) -> Op:
    return Op(type=typ, process=process, f=f, value=kw.pop("value", "0-0"), queue="q",
              publisher=0, seq=0, phase="main", time=t, **kw)


def planted_ops(dup_ns: int) -> list[Op]:
    """Takes the second delivery's time. Returns the planted history's ops, in order."""
    def phase(t: int, name: str, state: str) -> Op:
        return Op(type="info", process=HARNESS, f="phase", value={"phase": name, "state": state},
                  time=t)
    end = {"process": 3, "consumer": "consume-3", "node": "n1", "queue": "q", "phase": "main"}
    return [
        phase(0, "setup", "start"), phase(MAIN_START - 1000, "setup", "end"),
        phase(MAIN_START, "main", "start"),
        Op(type="info", process=HARNESS, f="placement", time=MAIN_START + 1000,
           value={"queue": "q", "leader": "n1", "members": ["n1", "n2", "n3"]}),
        _client(3 * S, "invoke", "publish", 0, node="n2"),
        _client(3 * S + 2 * MS, "ok", "publish", 0, node="n2"),
        _client(4 * S, "ok", "consume", 3, node="n1", consumer="consume-3", redelivered=False),
        _client(4 * S + MS, "ok", "ack", 3, node="n1", consumer="consume-3", redelivered=False),
        Op(type="info", process=NEMESIS, f="start-partition", node="n1", time=8 * S,
           value={"fault": "partition-one", "nodes": ["n1"]}),
        _client(dup_ns, "ok", "consume", 3, node="n1", consumer="consume-3", redelivered=False),
        Op(type="invoke", f="cancel", extra={"by": "harness", "holding": ["0-0"]},
           time=dup_ns + 100 * MS, **end),  # type: ignore[arg-type]
        Op(type="ok", f="cancel", time=dup_ns + 101 * MS, **end),  # type: ignore[arg-type]
        _client(dup_ns + 102 * MS, "ok", "ack", 3, node="n1", consumer="consume-3",
                redelivered=False),
        Op(type="invoke", f="close", extra={"by": "harness", "holding": []},
           time=dup_ns + 103 * MS, **end),  # type: ignore[arg-type]
        Op(type="ok", f="close", time=dup_ns + 104 * MS, **end),  # type: ignore[arg-type]
        phase(MAIN_END, "main", "end"), phase(MAIN_END + 1000, "drain", "start"),
        phase(MAIN_END + 5 * S, "drain", "end"),
    ]


def planted_results() -> dict[str, Any]:
    """Returns the planted run's results.json."""
    return {
        "valid": False,
        "queue": {"valid": False, "anomalies": ["unflagged_duplicated"],
                  "unflagged_duplicated_count": 1, "unflagged_duplicated": ["0-0"],
                  "explanations": {"unflagged_duplicated": f"1 message. Delivered twice. {QUOTE}"},
                  "details": {"unflagged_duplicated": [{
                      "id": "0-0", "published": "process 0 on n2 at 3.0 s: ok at 3.002 s",
                      "faults then": "none", "leader then": "n1",
                      "deliveries": "n1 consume-3 unflagged acked at 4.0 s (main); n1 consume-3 "
                                    "unflagged acked at 19.7 s (main)",
                      "broker log": DETAIL_LOG}]}},
        "ordering": {"valid": True, "violation_count": 0},
        "faults": [{"index": 0, "f": "start-partition", "fault": "partition-one",
                    "target": ["n1"], "start_ms": 8000.0, "end_ms": 25000.0, "noticed": True,
                    "evidence": "noticed 1.0 s in"}],
        "incidents": [{"id": 1, "faults": [0], "examples": {"unflagged_duplicated": ["0-0"]},
                       "summary": "1 unflagged duplicate under the partition-one of n1",
                       "timeline": [{"at_ms": 8000.0, "what": "fault start", "node": "n1",
                                     "text": "partition-one on n1"},
                                    {"at_ms": 9000.0, "what": "noticed", "node": "n2",
                                     "text": f"raft: {LOG_TEXTS[0]}"}],
                       "log_lines": [{"t_s": 9.0, "node": "n2", "label": "leader change",
                                      "text": LOG_TEXTS[0], "evidence": "n2/rabbit.log:2"},
                                     {"t_s": 9.5, "node": "n1", "label": "partition detected",
                                      "text": LOG_TEXTS[1], "evidence": "n1/rabbit.log:1"}]}],
        "versions": {"release": "4.3", "rabbitmq": "4.3.6", "erlang": "Erlang/OTP 29.0",
                     "metadata_store": "khepri", "caveat": CAVEAT},
    }


def plant_run(run: Path, dup_before_end_ms: float = DUP_BEFORE_END_MS,
              results: dict[str, Any] | None = None, scenario: bool = True) -> Path:
    """Writes the planted run into `run` (its second delivery `dup_before_end_ms` before the
    main phase ends). Returns the run directory."""
    run.mkdir(parents=True, exist_ok=True)
    ops = planted_ops(MAIN_END - int(dup_before_end_ms * MS))
    (run / "history.jsonl").write_bytes(b"".join(  # times are the plant's own, not a clock's
        dataclasses.replace(op, index=i).to_line() for i, op in enumerate(ops)))
    (run / "results.json").write_text(json.dumps(results or planted_results()))
    (run / "test.json").write_text(json.dumps({
        "name": "planted", "seed": 7, "start_time": "2027-01-15T08:00:00+00:00",
        "history_start_unix": START_UNIX, "versions": {"rabbitmq": "4.3.6"},
        "spec": {"name": "planted", "seed": 7, "description": "a planted duplicate",
                 "broker": {"rabbitmq": "4.3", "metadata_store": "khepri"},
                 "queue": {"type": "quorum", "single_active_consumer": False}}}))
    for node, lines in (("n1", [f"2027-01-15 08:00:09.500000+00:00 [error] <0.1.0> "
                                f"{LOG_TEXTS[1]}"]),
                        ("n2", ["2027-01-15 08:00:01.000000+00:00 [info] <0.2.0> booted",
                                f"2027-01-15 08:00:09.000000+00:00 [info] <0.3.0> {LOG_TEXTS[0]}"])):
        (run / "nodes" / node).mkdir(parents=True, exist_ok=True)
        (run / "nodes" / node / "rabbit.log").write_text("\n".join(lines) + "\n")
    if scenario:
        (run / "scenario.toml").write_text(SCENARIO)
    return run


# --- a stalled hand-over (plant_hand_over) -------------------------------------------------

HAND_OVER_END_MS = 7200.0  # the broker's cancel of the active consumer c5
HAND_OVER_NEXT_MS = 22_000.0  # the next delivery to another consumer (c6)
HAND_OVER_DEADLINE_MS = 19_000.0  # the partition of 8-9 s restarts the 10 s bound at its heal


def hand_over_ops() -> list[Op]:
    """Returns the stalled hand-over's history, in order: three messages confirmed; c7 fed
    1-2 and acking it (live at the end); the active consumer c5 fed 1-0 and 1-1 and holding
    them when the broker cancels it at 7.2 s; a partition of n1 from 8 s to 9 s; a placement
    sample at 10 s; c6 fed 1-0 again, flagged, at 22 s only."""
    def client(t_ms: float, typ: str, f: str, process: int, mid: str, **kw: Any) -> Op:
        return _client(int(t_ms * MS), typ, f, process, value=mid, **kw)

    def phase(t_ms: float, state: str) -> Op:
        return Op(type="info", process=HARNESS, f="phase", value={"phase": "main", "state": state},
                  time=int(t_ms * MS))
    ops = [phase(2000, "start")]
    for k in range(3):
        ops += [client(2050 + k, "invoke", "publish", 1, f"1-{k}", node="n2"),
                client(2060 + k, "ok", "publish", 1, f"1-{k}", node="n2")]
    ops += [client(2150, "ok", "consume", 7, "1-2", node="n1", consumer="c7", redelivered=False),
            client(2151, "ok", "ack", 7, "1-2", node="n1", consumer="c7"),
            client(2200, "ok", "consume", 5, "1-0", node="n2", consumer="c5", redelivered=False),
            client(2300, "ok", "consume", 5, "1-1", node="n2", consumer="c5", redelivered=False),
            Op(type="ok", process=5, f="cancel", consumer="c5", queue="q", node="n2",
               phase="main", time=int(HAND_OVER_END_MS * MS),
               extra={"by": "broker", "holding": ["1-0", "1-1"]}),
            Op(type="info", process=NEMESIS, f="start-partition", node="n1", time=8000 * MS,
               value={"fault": "partition-one", "nodes": ["n1"]}),
            Op(type="info", process=NEMESIS, f="stop-partition", time=9000 * MS,
               value={"fault": "partition-one", "nodes": ["n1"]}),
            Op(type="info", process=HARNESS, f="placement", time=10_000 * MS,
               value={"queue": "q", "leader": "n2", "members": ["n1", "n2", "n3"]}),
            client(HAND_OVER_NEXT_MS, "ok", "consume", 6, "1-0", node="n3", consumer="c6",
                   redelivered=True),
            client(HAND_OVER_NEXT_MS + 1, "ok", "ack", 6, "1-0", node="n3", consumer="c6"),
            phase(30_000, "end")]
    return [dataclasses.replace(op, index=i) for i, op in enumerate(ops)]


def hand_over_results(ops: list[Op]) -> dict[str, Any]:
    """Takes the hand-over's history. Returns its results.json: the consumer-timeout section
    with one stalled hand-over (the checker's judgement of it, its indices the history's) and
    no other violation."""
    end = next(op for op in ops if op.f == "cancel")
    nxt = next(op for op in ops if op.f == "consume" and op.consumer == "c6")
    stalled = {"status": "stalled", "index": end.index, "ms": HAND_OVER_END_MS, "process": "5",
               "consumer": "c5", "how": "cancel", "held": 2, "waiting": 0,
               "deadline_ms": HAND_OVER_DEADLINE_MS,
               "delay_ms": HAND_OVER_NEXT_MS - HAND_OVER_END_MS, "live": ["7 c7"],
               "depth": [{"ms": 12_000.0, "ready": 2}],
               "next": {"index": nxt.index, "ms": HAND_OVER_NEXT_MS, "process": "6",
                        "consumer": "c6"}}
    return {
        "valid": False,
        "queue": {"valid": True, "anomalies": [], "lost_count": 0},
        "ordering": {"valid": True, "violation_count": 0},
        "consumer_timeout": {
            "valid": False, "settings": {"queue": "q", "timeout_ms": 5000,
                                         "single_active_consumer": True},
            "broker_cancels": 1, "broker_channel_closes": 0, "held_judged": 2,
            "redelivered": 2, "dead_lettered": 0, "violation_count": 1,
            "violations": {"delivered_after_cancel": 0, "unflagged": 0, "lost": 0,
                           "stalled": 1, "cancel_without_capability": 0},
            "examples": [],
            "hand_over": {"applies": True, "bound": {"bound_ms": 10_000.0},
                          "after_an_end": "a consumer the broker ended retires; its slot "
                                          "subscribes again",
                          "judged": 1, "handed_over": 0, "stalled": 1,
                          "not_judged": {"nothing_ready": 0, "run_ended": 0},
                          "delay_ms": {"max": None, "median": None},
                          "stalled_examples": [stalled]}},
        "faults": [{"index": 0, "f": "start-partition", "fault": "partition-one",
                    "target": ["n1"], "start_ms": 8000.0, "end_ms": 9000.0, "noticed": True}],
        "versions": {"rabbitmq": "4.3.6"},
    }


def plant_hand_over(run: Path) -> Path:
    """Writes the stalled hand-over's run into `run`: its history, results.json and test.json
    (a single active consumer's queue on 4.3). Returns the run directory."""
    run.mkdir(parents=True, exist_ok=True)
    ops = hand_over_ops()
    (run / "history.jsonl").write_bytes(b"".join(op.to_line() for op in ops))
    (run / "results.json").write_text(json.dumps(hand_over_results(ops)))
    (run / "test.json").write_text(json.dumps({
        "name": "planted-sac", "seed": 9, "start_time": "2027-01-15T08:00:00+00:00",
        "history_start_unix": START_UNIX,
        "spec": {"name": "planted-sac", "seed": 9, "broker": {"rabbitmq": "4.3"},
                 "queue": {"type": "quorum", "single_active_consumer": True}}}))
    (run / "scenario.toml").write_text(SCENARIO)
    return run
