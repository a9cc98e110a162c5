"""Per-fault efficacy and test strength, judged on real RabbitMQ 3.10 log lines.

The fixtures under fixtures/broker_logs/ are real runs cut down (tests/checkers/fixtures/
broker_logs/README.md): each node's rabbit.log within the faults' reach, and the history's
nemesis and harness ops (run.json). The expectations below were read off the logs by hand.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from checkers.broker_log import LINE, PATTERNS_3_10, parse_line, patterns_for, read_events
from checkers.efficacy import Evidence, judge_faults, strength
from checkers.phases import HarnessEvent
from clusters.releases import known_line
from history import HARNESS, Op
from history.faults import fault_windows

FIXTURES = Path(__file__).parent / "fixtures" / "broker_logs"
PAUSE_MINORITY = FIXTURES / "pause-minority-partitions"
PROCESS = FIXTURES / "process-and-packet-faults"


def load(run: Path, logs: bool = True) -> tuple[list[dict[str, Any]], dict[str, Any], Evidence | None]:
    """Returns (faults, strength, evidence) as the checker judges a fixture run."""
    meta = json.loads((run / "run.json").read_text())
    ops = [Op.from_dict(o) for o in meta["ops"]]
    windows = fault_windows(ops)
    harness = [HarnessEvent(op.time, op.f, op.value) for op in ops if op.process == HARNESS]
    ev = None
    if logs:
        events, cover = read_events(run / "nodes", meta["history_start_unix"], meta["nodes"],
                                    known_line(meta["versions"]["rabbitmq"]))
        ev = Evidence(events, cover, float(meta["net_ticktime"]),
                      (meta.get("placement_at_start") or {}).get("leader"))
    facts = [{"at_risk": 1000 * (i + 1), "unknown_publishes": 0} for i in range(len(windows))]
    faults = judge_faults(windows, facts, harness, ev)
    return faults, strength(faults, ev), ev


def kinds(fault: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(e["kind"], e["node"]) for e in fault["effects"]]


def test_each_pattern_reads_its_real_line():
    lines = {
        "node-down": "node 'rabbit@10.213.0.12' down: net_tick_timeout",
        "partitioned-network": "Mnesia('rabbit@10.213.0.11'): ** ERROR ** mnesia_event got "
                               "{inconsistent_database, running_partitioned_network, "
                               "'rabbit@10.213.0.12'}",
        "partial-partition": "Partial partition detected:",
        "leader-down": "queue 'jepsen.queue' in vhost '/': Leader monitor down with "
                       "noconnection, setting election timeout",
        "election": "queue 'jepsen.queue' in vhost '/': granting vote for "
                    "{'%2F_jepsen.queue','rabbit@10.213.0.11'} with last indexterm {4480,1} for "
                    "term 2 previous term was 2",
        "leader-elected": "queue 'jepsen.queue' in vhost '/': candidate -> leader in term: 3 "
                          "machine version: 2",
        "pause-minority": "Cluster minority/secondary status detected - awaiting recovery",
        "node-start": " Starting RabbitMQ 3.10.8 on Erlang 25.2.3 [jit]",
        "rabbit-down": "rabbit on node 'rabbit@10.213.0.11' down",
    }
    for kind, text in lines.items():
        hit = parse_line(text, PATTERNS_3_10)
        assert hit is not None and hit[0].kind == kind, (kind, hit)
    pattern, m = parse_line(lines["leader-elected"], PATTERNS_3_10)  # type: ignore[misc]
    assert pattern.detector == "raft" and m.group("term") == "3" and m.group("queue") == "jepsen.queue"
    assert parse_line("accepting AMQP connection <0.1841.0>", PATTERNS_3_10) is None
    assert patterns_for("3.10") is PATTERNS_3_10 and patterns_for(None) is PATTERNS_3_10
    with pytest.raises(ValueError, match="no broker log patterns for RabbitMQ 3.8"):
        patterns_for("3.8")  # the harness hands over clusters.releases.known_line's lines only


def test_a_log_line_names_its_node_by_address_and_keeps_its_place():
    events, cover = read_events(PAUSE_MINORITY / "nodes", json.loads(
        (PAUSE_MINORITY / "run.json").read_text())["history_start_unix"],
        {"n1": "10.213.0.11", "n2": "10.213.0.12", "n3": "10.213.0.13"})
    tick = next(e for e in events if e.kind == "node-down" and "net_tick_timeout" in e.text)
    assert (tick.node, tick.peer, tick.detector) == ("n1", "n2", "distribution")
    path, line = tick.evidence.split(":")
    assert path == "n1/rabbit.log"
    text = (PAUSE_MINORITY / "nodes" / path).read_text().splitlines()[int(line) - 1]
    assert "net_tick_timeout" in text and LINE.match(text)
    assert set(cover) == {"n1", "n2", "n3"}
    assert all(c.first_ns < c.last_ns for c in cover.values())


def test_ten_second_partitions_under_net_ticktime_10_are_noticed_only_when_they_reach_a_detector():
    """The issue's own run, seed 7: six random-halves partitions of 10 s under pause_minority."""
    faults, st, _ = load(PAUSE_MINORITY)
    assert len(faults) == 6
    first, second, third = faults[:3]
    # n2 cut off: n1 declared it down (net_tick_timeout) right at the heal, 10.0 s in; then
    # pause_minority paused n1 and n2, which booted again, and n1 was re-elected leader.
    assert (first["noticed"], first["noticed_when"]) == (True, "during")
    assert 9_900 < first["noticed_ms"] < 10_100
    assert first["detections"][0]["detector"] == "distribution"
    assert ("pause-minority", "n1") in kinds(first) and ("pause-minority", "n2") in kinds(first)
    assert ("node-restart", "n1") in kinds(first)
    # The leader's node cut off: no node declared anything down, but the Raft members elected
    # n3 (term 3) 8.4 s in; then n1 was elected back (term 4) when n3 was cut off.
    assert second["noticed"] is True and second["detections"][0]["detector"] == "raft"
    assert [d["detector"] for d in second["detections"]] == ["raft"]
    assert 8_000 < second["noticed_ms"] < 8_700
    assert ("failover", "n3") in kinds(second)
    assert ("failover", "n1") in kinds(third)
    # A follower's node cut off for 10.1 s: neither detector fired.
    for f in faults[3:5]:
        assert (f["noticed"], f["noticed_ms"], f["detections"]) == (False, None, [])
        assert f["evidence"] == ("no node logged a detection: it healed after 10.1 s; with "
                                 "net_ticktime 10 s detection takes 7.5-12.5 s")
    # The teardown's stops are the harness's, not the last fault's effects.
    assert kinds(faults[5]) == []
    assert st["faults"] == 6 and st["noticed"] == 3 and st["failovers"] == 2
    assert st["weak"] is False
    assert st["summary"] == "faults noticed 3 of 6, failovers 2, most messages at risk 6,000"


def test_kills_stops_and_pauses_are_noticed_packet_faults_are_not():
    faults, st, _ = load(PROCESS)
    by = {f["fault"]: f for f in faults}
    kill, pause, stop = by["kill"], by["pause"], by["stop"]
    # A killed node's connections close at once: its peers' Raft members notice within 25 ms of
    # the kill's invocation, the distribution 30 ms in ("down: connection_closed").
    assert kill["noticed"] is True and kill["noticed_ms"] < 100
    assert {d["detector"] for d in kill["detections"]} == {"raft", "distribution"}
    assert ("failover", "n2") in kinds(kill) and ("node-restart", "n1") in kinds(kill)
    # SIGSTOP is silent: the Raft members noticed 6.5 s in, the distribution ~10.7 s in.
    assert [d["detector"] for d in pause["detections"]] == ["raft", "distribution"]
    assert 6_000 < pause["noticed_ms"] < 7_000
    assert 10_000 < pause["detections"][1]["after_ms"] < 11_500
    assert stop["noticed"] is True and ("failover", "n2") in kinds(stop)
    # 20% packet loss and a 1 Mbit/s limit degrade, they do not cut: nothing noticed.
    assert by["packet-loss"]["noticed"] is False and by["bandwidth"]["noticed"] is False
    assert st["noticed"] == 3 and st["faults"] == 5 and st["weak"] is False


def test_without_logs_every_fault_is_unknown_and_the_run_weak():
    faults, st, _ = load(PAUSE_MINORITY, logs=False)
    assert {f["noticed"] for f in faults} == {"unknown"}
    assert all(f["noticed_ms"] is None and f["detections"] == [] for f in faults)
    assert st["weak"] is True and st["unknown"] == 6
    assert st["reason"] == ("whether RabbitMQ noticed any of 6 partitions is unknown: no node "
                            "log covers them")


def test_logs_that_end_before_a_fault_leave_it_unknown(tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(PAUSE_MINORITY, run)
    for log in run.glob("nodes/*/rabbit.log"):  # keep only the first minute of every log
        lines = log.read_text().splitlines(keepends=True)
        log.write_text("".join(x for x in lines if x[11:19] < "03:54:20"))
    faults, _st, _ = load(run)
    assert faults[0]["noticed"] is True
    assert [f["noticed"] for f in faults[3:]] == ["unknown", "unknown", "unknown"]


def test_a_run_whose_faults_went_unnoticed_is_weak_and_says_why():
    faults, _, ev = load(PAUSE_MINORITY)
    unnoticed = [f for f in faults if f["noticed"] is False]
    st = strength(unnoticed, ev)
    assert st["weak"] is True and st["noticed"] == 0
    assert st["reason"] == ("none of 3 partitions was noticed by RabbitMQ: each healed after "
                            "9-10 s; with net_ticktime 10 s detection takes 7.5-12.5 s")
    assert st["summary"].startswith("faults noticed 0 of 3")


def test_noticed_faults_with_nothing_at_risk_make_a_weak_run():
    faults, _, ev = load(PROCESS)
    for f in faults:
        f["at_risk"]["count"] = 0
    st = strength(faults, ev)
    assert st["weak"] is True
    assert st["reason"].startswith("nothing was at risk when the noticed faults began")


def test_a_run_without_faults_is_a_control_not_weak():
    st = strength([], Evidence(net_ticktime_s=10.0))
    assert (st["weak"], st["control"], st["faults"]) == (False, True, 0)
    assert st["summary"] == "no faults: a control run"


@pytest.mark.parametrize("late_s, when", [(0.5, "after_heal"), (30.0, None)])
def test_a_detection_after_the_heal_is_told_apart(late_s: float, when: str | None):
    """A net_tick_timeout logged half a second after the heal partitions a healed cluster: it
    counts, as "after_heal"; one 30 s later is another story."""
    from checkers.broker_log import LogCoverage, LogEvent

    s = 1_000_000_000
    ops = [Op(type="invoke", process="nemesis", f="start-partition", time=10 * s, index=1),
           Op(type="info", process="nemesis", f="start-partition", time=10 * s, index=2,
              value={"nodes": ["n2"], "grudge": {"n1": ["n2"], "n2": ["n1", "n3"],
                                                  "n3": ["n2"]}}, node="n2"),
           Op(type="invoke", process="nemesis", f="stop-partition", time=20 * s, index=3),
           Op(type="info", process="nemesis", f="stop-partition", time=20 * s, index=4,
              value={"nodes": ["n2"]}, node="n2")]
    at = int((20 + late_s) * s)
    ev = Evidence([LogEvent(at, "n3", "node-down", "distribution", "n3/rabbit.log:9",
                            "node 'rabbit@n2' down: net_tick_timeout", "n2")],
                  {"n3": LogCoverage("n3", 0, 100 * s)}, 10.0)
    [f] = judge_faults(fault_windows(ops), [], [], ev)
    assert f["noticed_when"] == when
    assert f["noticed"] is (when is not None)
    # A line about two nodes on the same side of the cut is no detection of this fault.
    same_side = Evidence([LogEvent(15 * s, "n1", "node-down", "distribution", "n1/rabbit.log:3",
                                   "node 'rabbit@n3' down: net_tick_timeout", "n3")],
                         ev.coverage, 10.0)
    [g] = judge_faults(fault_windows(ops), [], [], same_side)
    assert g["noticed"] is False


MIRRORED_AUTOHEAL = FIXTURES / "mirrored-autoheal"
UNSYNCED = FIXTURES / "mirrored-unsynced-promotion"


def test_an_isolated_master_under_autoheal_shows_promotion_and_the_restarts_it_caused():
    faults, st, _ = load(MIRRORED_AUTOHEAL)
    first, second = faults
    # n1 (the master) cut off for 20 s: it declared n2 and n3 down by net_tick_timeout 10.2 s
    # in; n3, a synchronised mirror, was promoted on the majority side; at the heal autoheal
    # chose n3 and restarted n2, then n1, and n2 came back as master without being in sync.
    assert first["noticed"] is True and first["detections"][0]["detector"] == "distribution"
    assert 10_000 < first["noticed_ms"] < 10_500
    assert kinds(first) == [("promotion", "n3"), ("autoheal-restart", "n2"), ("node-restart", "n2"),
                            ("autoheal-restart", "n1"), ("unsynchronised-promotion", "n2"),
                            ("node-restart", "n1")]
    restart = next(e for e in first["effects"] if e["kind"] == "autoheal-restart")
    assert restart["text"].startswith("Autoheal: we were selected to restart; winner is")
    # The second cut ended with the main phase after 5.6 s: nothing noticed.
    assert second["noticed"] is False and second["duration_ms"] < 6_000
    assert (st["noticed"], st["failovers"]) == (1, 2)


def test_a_killed_master_hands_the_queue_to_a_mirror_that_was_never_synchronised():
    faults, _st, _ = load(UNSYNCED)
    stop, kill = faults
    assert stop["fault"] == "stop" and stop["noticed"] is True and stop["noticed_ms"] == 0
    assert kinds(stop) == [("node-restart", "n3")]
    assert kill["noticed"] is True and kill["noticed_ms"] == 0  # its connection closed at once
    assert kinds(kill)[0] == ("unsynchronised-promotion", "n2")
    promoted = kill["effects"][0]
    assert promoted["evidence"].startswith("n2/rabbit.log:")
    assert promoted["text"] == "n2 promoted to master: not a synchronised mirror in the sample before"


def test_ninety_percent_packet_loss_stalls_tcp_long_enough_to_be_noticed_by_its_victim():
    """20% loss went unnoticed (above); at 90% the victim itself declared its peers down and
    paused (pause_minority), 18.6 s and 11.6 s in: a line *by* the faulty node counts."""
    faults, st, _ = load(FIXTURES / "packet-loss-90")
    first, second = faults
    assert first["noticed"] is True and first["noticed_when"] == "during"
    assert 18_000 < first["noticed_ms"] < 19_000
    assert first["detections"][0]["node"] == "n1" == first["target"][0]
    assert 11_000 < second["noticed_ms"] < 12_000
    # pause_minority's line comes twice a few ms apart: one pause, said once.
    assert [k for k in kinds(first) if k[0] == "pause-minority"] == [("pause-minority", "n1")]
    assert st["noticed"] == 2 and st["noticed_after_heal"] == 0


RABBITMQ_4_0 = FIXTURES / "rabbitmq-4.0-partition-leader"


def test_rabbitmq_4_0_lines_read_with_4_0_patterns_and_the_metadata_store_apart():
    from checkers.broker_log import PATTERNS_4_0

    assert patterns_for("4.0") is PATTERNS_4_0
    store = "RabbitMQ metadata store: candidate -> leader in term: 2 machine version: 1"
    pattern, m = parse_line(store, PATTERNS_4_0)  # type: ignore[misc]
    assert pattern.kind == "metadata-leader" and m.group("term") == "2"
    assert parse_line(store, PATTERNS_3_10) is None
    vote = "RabbitMQ metadata store: follower -> candidate in term: 3 machine version: 1"
    assert parse_line(vote, PATTERNS_4_0)[0].kind == "election"  # type: ignore[index]
    # A quorum queue's own lines on 4.0.5 are 3.10's (machine version 5).
    hit = parse_line("queue 'jepsen.queue' in vhost '/': candidate -> leader in term: 3 "
                     "machine version: 5", PATTERNS_4_0)
    assert hit is not None and hit[0].kind == "leader-elected"


def test_a_real_4_0_partition_of_the_leader_is_noticed_with_its_failover_and_pause():
    meta = json.loads((RABBITMQ_4_0 / "run.json").read_text())
    assert meta["versions"]["rabbitmq"] == "4.0.5"
    faults, st, ev = load(RABBITMQ_4_0)
    assert ev is not None and len(faults) == 1
    f = faults[0]
    assert f["noticed"] is True and f["noticed_when"] == "during"
    assert {d["detector"] for d in f["detections"]} == {"raft", "distribution"}
    effects = {e["kind"] for e in f["effects"]}
    assert {"failover", "pause-minority", "node-restart",
            "metadata-store-leader-elected"} <= effects
    assert st["noticed"] == 1 and st["weak"] is False


RABBITMQ_4_3 = FIXTURES / "rabbitmq-4.3-partition"
RABBITMQ_4_3_PROCESS = FIXTURES / "rabbitmq-4.3-process-faults"


def test_rabbitmq_4_3_lines_read_with_4_3_patterns():
    from checkers.broker_log import PATTERNS_4_0, PATTERNS_4_3

    assert patterns_for("4.3") is PATTERNS_4_3
    # Erlang 29's distribution says when it gives up on a silent peer
    gave_up = ("** Node 'rabbit@10.213.0.12': 4 consecutive net ticks missed (tick 1/4) \u2014 "
               "net_tick_timeout **")
    pattern, m = parse_line(gave_up, PATTERNS_4_3)  # type: ignore[misc]
    assert (pattern.kind, pattern.detector, m.group("peer")) == \
        ("node-down", "distribution", "rabbit@10.213.0.12")
    assert parse_line(gave_up, PATTERNS_4_0) is None
    # its warnings before that are no declaration
    assert parse_line("** Node 'rabbit@10.213.0.12': net tick 2/4 missed (1 consecutive, 3 "
                      "until timeout) **", PATTERNS_4_3) is None
    waiting = ("queue 'jepsen.queue' in vhost '/': await_condition - Leader node "
               "'rabbit@10.213.0.13' might be down. Re-entering follower state.")
    pattern, m = parse_line(waiting, PATTERNS_4_3)  # type: ignore[misc]
    assert (pattern.kind, pattern.detector, m.group("queue")) == \
        ("leader-down", "raft", "jepsen.queue")
    # a quorum queue's own lines on 4.3.6 (machine version 8) and the metadata store's
    hit = parse_line("queue 'jepsen.queue' in vhost '/': candidate -> leader in term: 2 machine "
                     "version: 8, last applied 2442", PATTERNS_4_3)
    assert hit is not None and hit[0].kind == "leader-elected"
    hit = parse_line("RabbitMQ metadata store: candidate -> leader in term: 3 machine version: "
                     "3, last applied 105", PATTERNS_4_3)
    assert hit is not None and hit[0].kind == "metadata-leader"


def test_a_real_4_3_partition_is_noticed_with_its_failover_and_new_metadata_leader():
    meta = json.loads((RABBITMQ_4_3 / "run.json").read_text())
    assert meta["versions"]["rabbitmq"] == "4.3.6" and meta["versions"]["metadata_store"] == \
        "khepri"
    faults, st, ev = load(RABBITMQ_4_3)
    assert ev is not None and len(faults) == 1
    f = faults[0]
    assert f["noticed"] is True and f["noticed_when"] == "during"
    assert {d["detector"] for d in f["detections"]} == {"raft", "distribution"}
    effects = {e["kind"] for e in f["effects"]}
    assert {"failover", "metadata-store-leader-elected"} <= effects
    # no partition handling on 4.3: nothing paused, nothing autohealed
    assert not effects & {"pause-minority", "autoheal-restart"}
    assert st["noticed"] == 1 and st["faults"] == 1 and st["weak"] is False


def test_real_4_3_process_faults_are_noticed_but_a_light_packet_loss():
    faults, st, _ev = load(RABBITMQ_4_3_PROCESS)
    assert [f["f"] for f in faults] == ["kill", "pause", "stop", "start-packet"]
    noticed = {f["f"]: f["noticed"] for f in faults}
    assert noticed == {"kill": True, "pause": True, "stop": True, "start-packet": False}
    by = {f["f"]: {e["kind"] for e in f["effects"]} for f in faults}
    assert {"failover", "node-restart"} <= by["kill"] and {"failover", "node-restart"} <= by["stop"]
    # a paused node is found silent by the distribution, 0.75-1.25 x net_ticktime in
    pause = next(f for f in faults if f["f"] == "pause")
    assert {d["detector"] for d in pause["detections"]} >= {"distribution"}
    assert 7500 <= pause["noticed_ms"] <= 12500
    # 20% loss on one node's cluster traffic for 16 s: not noticed, as on 3.10
    assert st["noticed"] == 3 and st["faults"] == 4


def test_raft_lines_of_other_queues_are_not_the_tested_queues_elections(tmp_path):
    from harness.check import run_evidence

    (tmp_path / "nodes" / "n1").mkdir(parents=True)
    (tmp_path / "nodes" / "n1" / "rabbit.log").write_text(
        "2026-11-25 07:24:17.861434+00:00 [notice] <0.1217.0> queue 'jepsen.queue.harness-dlq'"
        " in vhost '/': candidate -> leader in term: 2 machine version: 5\n"
        "2026-11-25 07:24:18.861434+00:00 [notice] <0.1231.0> queue 'jepsen.queue' in vhost "
        "'/': candidate -> leader in term: 2 machine version: 5\n")
    info = {"history_start_unix": 1795000000.0, "nodes": {"n1": "10.213.0.11"},
            "versions": {"rabbitmq": "4.0.5"},
            "spec": {"queue": {"name": "jepsen.queue"}, "broker": {"net_ticktime": 10}}}
    ev = run_evidence(tmp_path, info)
    assert ev is not None and [e.queue for e in ev.events] == ["jepsen.queue"]


RABBITMQ_4_3_POWER_LOSS_ALL = FIXTURES / "rabbitmq-4.3-power-loss-all"


def test_a_real_power_loss_of_every_node_is_noticed_by_the_nodes_own_recovery():
    # No peer is up to log a node down; each node's message store, booting again, finds no
    # clean stop's file summary, and the classic queue's index says what it dropped (nothing,
    # by its count: the 2,981 confirmed messages this run lost never reached the disk).
    faults, st, ev = load(RABBITMQ_4_3_POWER_LOSS_ALL)
    assert ev is not None and [f["f"] for f in faults] == ["start-power-loss"]
    [f] = faults
    assert f["noticed"] is True and f["noticed_when"] == "during"
    assert [(d["detector"], d["kind"], d["node"]) for d in f["detections"]] == [
        ("recovery", "unclean-restart", "n1")]
    assert 14_000 <= f["noticed_ms"] <= 15_000
    assert [(e["node"], e["text"]) for e in f["effects"]
            if e["kind"] == "queue-recovered-after-unclean-shutdown"] == [
        ("n1", "Queue jepsen.queue in vhost / dropped 0/0/0 persistent messages and 0 transient "
               "messages after unclean shutdown")]
    assert sorted(e["node"] for e in f["effects"] if e["kind"] == "node-restart") == [
        "n1", "n2", "n3"]
    assert st["noticed"] == 1 and st["weak"] is False
