"""The efficacy of RabbitMQ's own operations done as faults, and of a rolling restart, from log
lines written as RabbitMQ 3.10 prints them (4.0's own line beside).

Unlike fixtures/broker_logs/, these lines were not captured from runs: the operations' are
written from RabbitMQ 3.10.8's and Ra 2.2.0's sources (rabbit_maintenance, rabbit_alarm,
vm_memory_monitor, rabbit_disk_monitor, ra_server_proc, ra_server_sup_sup), in the format of the
captured ones (every line of a multi-line message repeats the time, level and pid). The rolling
restart's are the captured kinds (a peer down by connection_closed, the boot banner).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from checkers.broker_log import PATTERNS_3_10, PATTERNS_4_0, parse_line, read_events
from checkers.efficacy import Evidence, judge_faults, strength
from checkers.phases import HarnessEvent
from clusters.releases import known_line
from history import BLOCKED, HARNESS, NEMESIS, Op
from history.faults import fault_windows

START = 1_790_000_000.0  # the wall clock at history time 0
S = 1_000_000_000
NODES = {"n1": "10.213.0.11", "n2": "10.213.0.12", "n3": "10.213.0.13"}
Q = "queue 'jepsen.queue' in vhost '/': "
STARS = "**********************************************************"


def stamp(t: float, level: str, text: str, pid: str = "<0.611.0>") -> str:
    """Returns a log line at history time t (s), as RabbitMQ 3.10 writes it."""
    wall = datetime.fromtimestamp(START + t, tz=UTC).isoformat(sep=" ", timespec="microseconds")
    return f"{wall} [{level}] {pid} {text}"


def alarm_set(t: float, resource: str, node: str) -> list[str]:
    """rabbit_alarm's warning, as every node logs it about the alarmed node."""
    return [stamp(t, "warning", x, "<0.156.0>") for x in (
        f"{resource} resource limit alarm set on node 'rabbit@{NODES[node]}'.", "", STARS,
        "*** Publishers will be blocked until this alarm clears ***", STARS)]


def run(tmp_path: Path, logs: dict[str, list[str]], ops: list[Op],
        facts: list[dict[str, Any]] | None = None, leader: str | None = "n1",
        version: str = "3.10.8") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Writes each node's rabbit.log (a line at 0 s and 120 s so it covers the run), reads it
    back as the checker does, and judges the ops' fault windows."""
    for node in NODES:
        d = tmp_path / "nodes" / node
        d.mkdir(parents=True)
        lines = [stamp(0, "info", "Server startup complete; 0 plugins started."),
                 *logs.get(node, []), stamp(120, "info", "accepting AMQP connection")]
        (d / "rabbit.log").write_text("\n".join(lines) + "\n")
    events, cover = read_events(tmp_path / "nodes", START, NODES, known_line(version))
    ev = Evidence(events, cover, 10.0, leader)
    windows = fault_windows(ops)
    harness = [HarnessEvent(op.time, op.f, op.value, op.node) for op in ops
               if op.process == HARNESS]
    facts = facts or [{"at_risk": 100, "unknown_publishes": 0, "blocked_publishes": 0}
                      for _ in windows]
    faults = judge_faults(windows, facts, harness, ev)
    return faults, strength(faults, ev)


def fault(start_f: str, stop_f: str, value: dict[str, Any], t0: float, t1: float,
          done: float | None = None) -> list[Op]:
    """The nemesis's four ops of one fault: started at t0 (completed at `done`, else t0 + 0.1),
    stopped at t1."""
    node = value["nodes"][0] if len(value["nodes"]) == 1 else None
    done = t0 + 0.1 if done is None else done
    return [Op("invoke", NEMESIS, start_f, {"fault": value["fault"]}, time=int(t0 * S)),
            Op("info", NEMESIS, start_f, value, node, time=int(done * S)),
            Op("invoke", NEMESIS, stop_f, {"fault": value["fault"]}, node, time=int(t1 * S)),
            Op("info", NEMESIS, stop_f, {"fault": value["fault"], "nodes": value["nodes"]},
               node, time=int(t1 * S + 0.1 * S))]


def kinds(f: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(e["kind"], e["node"]) for e in f["effects"]]


def test_each_operation_line_is_read_as_its_kind_and_detector() -> None:
    lines = {
        "This node is being put into maintenance (drain) mode": ("maintenance-drain", "operation"),
        "Node is ready to be shut down for maintenance or upgrade": ("node-drained", None),
        "This node is being revived from maintenance (drain) mode": ("maintenance-revive", None),
        "Deleting server '%2F_jepsen.queue' and its data directory.": ("member-deleted",
                                                                       "operation"),
        Q + "leader not in new cluster - goodbye": ("leader-removed", "raft"),
        Q + "leader -> await_condition in term: 2 machine version: 2": ("leader-handover", "raft"),
        "memory resource limit alarm set on node 'rabbit@10.213.0.11'.": ("alarm-set", "alarm"),
        "disk resource limit alarm set on node 'rabbit@10.213.0.13'.": ("alarm-set", "alarm"),
        "vm_memory_high_watermark set. Memory used:146354176 allowed:0": ("alarm-set", "alarm"),
        "Free disk space is insufficient. Free bytes: 52428800000. Limit: 1000000000000000000":
            ("alarm-set", "alarm"),
        "memory resource limit alarm cleared on node 'rabbit@10.213.0.11'": ("alarm-cleared",
                                                                            None),
    }
    for text, (kind, detector) in lines.items():
        for table in (PATTERNS_3_10, PATTERNS_4_0):
            hit = parse_line(text, table)
            assert hit is not None and (hit[0].kind, hit[0].detector) == (kind, detector), text
    four = "Deleted a replica of quorum queue 'jepsen.queue' in vhost '/' on node rabbit@10.213.0.13"
    assert parse_line(four, PATTERNS_3_10) is None
    pattern, m = parse_line(four, PATTERNS_4_0)  # type: ignore[misc]
    assert (pattern.kind, m.group("peer"), m.group("queue")) == (
        "member-deleted", "rabbit@10.213.0.13", "jepsen.queue")
    # What the banners and the restores say besides is no event.
    for text in ("", STARS, "Memory high watermark set to 0 MiB (0 bytes) of 7961 MiB "
                 "(8348082176 bytes) total", "Disk free limit set to 1000000000000MB"):
        assert parse_line(text, PATTERNS_3_10) is None


def test_a_drained_leader_node_is_noticed_by_the_operation_and_its_queue_fails_over(
        tmp_path: Path) -> None:
    logs = {"n1": [stamp(10.05, "warning", "This node is being put into maintenance (drain) mode"),
                   stamp(10.06, "info", "Marked this node as undergoing maintenance"),
                   stamp(10.07, "warning", "Closed 3 local client connections"),
                   stamp(10.09, "info", "Node is ready to be shut down for maintenance or upgrade"),
                   stamp(30.05, "info", "This node is being revived from maintenance (drain) mode")],
            "n2": [stamp(10.08, "info", Q + "Leader monitor down with shutdown, setting election "
                                            "timeout")],
            "n3": [stamp(10.4, "notice", Q + "candidate -> leader in term: 3 machine version: 2")]}
    ops = fault("drain-node", "revive-node", {"fault": "maintenance", "nodes": ["n1"]}, 10, 30)
    [f], st = run(tmp_path, logs, ops)
    assert f["fault"] == "maintenance" and f["kind"] == "maintenance" and f["target"] == ["n1"]
    assert f["noticed"] is True and f["detections"][0]["detector"] == "operation"
    assert f["detections"][0]["evidence"] == "n1/rabbit.log:2"
    assert [d["detector"] for d in f["detections"]] == ["operation", "raft"]
    assert kinds(f) == [("node-drained", "n1"), ("failover", "n3")]
    assert st["effects"] == {"failover": 1, "node-drained": 1} and st["weak"] is False


@pytest.mark.parametrize("target, version", [("n3", "3.10.8"), ("n3", "4.0.5")])
def test_a_removed_follower_is_noticed_by_its_deleted_server(tmp_path: Path, target: str,
                                                            version: str) -> None:
    lines = [stamp(10.2, "info", "Deleting server '%2F_jepsen.queue' and its data directory."),
             stamp(10.2, "info", "")]
    if version.startswith("4."):
        lines.append(stamp(10.21, "info", "Deleted a replica of quorum queue 'jepsen.queue' in "
                                          f"vhost '/' on node rabbit@{NODES[target]}"))
    ops = fault("remove-member", "add-member",
                {"fault": "member-remove", "nodes": [target], "queue": "jepsen.queue"}, 10, 30)
    [f], st = run(tmp_path, {target: lines}, ops, version=version)
    assert f["noticed"] is True and f["noticed_ms"] == 100.0
    assert [d["detector"] for d in f["detections"]] == ["operation"]
    assert kinds(f) == [("member-removed", target)]  # said twice on 4.0, counted once
    assert st["effects"] == {"member-removed": 1}


def test_a_removed_leader_leaves_and_another_member_takes_over(tmp_path: Path) -> None:
    logs = {"n1": [stamp(10.15, "info", Q + "leader not in new cluster - goodbye"),
                   stamp(10.2, "info", "Deleting server '%2F_jepsen.queue' and its data "
                                       "directory.")],
            "n2": [stamp(10.3, "notice", Q + "candidate -> leader in term: 2 machine version: 2")]}
    ops = fault("remove-member", "add-member",
                {"fault": "member-remove", "nodes": ["n1"], "queue": "jepsen.queue"}, 10, 30)
    [f], _st = run(tmp_path, logs, ops)
    assert f["detections"][0]["detector"] == "raft" and f["noticed_ms"] == 50.0
    assert kinds(f) == [("member-removed", "n1"), ("failover", "n2")]


def test_a_leader_transfer_is_the_raft_members_handing_over(tmp_path: Path) -> None:
    logs = {"n1": [stamp(10.1, "notice", Q + "leader -> await_condition in term: 1 machine "
                                              "version: 2")],
            "n3": [stamp(10.11, "info", Q + "granting vote for {'%2F_jepsen.queue',"
                                            "'rabbit@10.213.0.12'} with last indexterm {4480,1} "
                                            "for term 2 previous term was 1")],
            "n2": [stamp(10.12, "notice", Q + "candidate -> leader in term: 2 machine "
                                              "version: 2")]}
    value = {"fault": "leader-transfer", "nodes": ["n1"], "queue": "jepsen.queue",
             "from": "n1", "to": "n2", "leader": "n2"}
    ops = fault("transfer-leader", "check-leader", value, 10, 30, done=10.2)
    [f], st = run(tmp_path, logs, ops)
    assert f["kind"] == "leader-transfer" and f["noticed"] is True
    assert [d["detector"] for d in f["detections"]] == ["raft"]
    assert kinds(f) == [("leader-handover", "n1"), ("failover", "n2")]
    assert st["failovers"] == 1 and st["summary"].startswith("faults noticed 1 of 1, failovers 1")


def test_a_memory_alarm_blocks_the_publishers_and_their_held_publishes_are_not_cut(
        tmp_path: Path) -> None:
    logs = {"n1": [stamp(10.11, "info", "Memory high watermark set to 0 MiB (0 bytes) of 7961 MiB "
                                        "(8348082176 bytes) total"),
                   stamp(10.11, "info", "vm_memory_high_watermark set. Memory used:146354176 "
                                        "allowed:0"),
                   *alarm_set(10.12, "memory", "n1")],
            "n2": alarm_set(10.13, "memory", "n1"), "n3": alarm_set(10.13, "memory", "n1")}
    ops = fault("start-alarm", "stop-alarm",
                {"fault": "memory-alarm", "nodes": ["n1"], "resource": "memory"}, 10, 30)
    ops += [Op("info", HARNESS, BLOCKED, {"process": p, "publisher": p, "reason": "low on memory"},
               node, time=int(t * S)) for p, node, t in ((4, "n2", 10.3), (5, "n3", 10.4),
                                                        (9, "n2", 16.0))]
    facts = [{"at_risk": 500, "unknown_publishes": 0, "blocked_publishes": 2}]
    [f], st = run(tmp_path, logs, sorted(ops, key=lambda o: o.time), facts)
    assert f["kind"] == "alarm" and f["fault"] == "memory-alarm"
    assert f["noticed"] is True and [d["detector"] for d in f["detections"]] == ["alarm"]
    assert f["detections"][0]["node"] == "n1" and f["noticed_ms"] == 10.0
    [blocked] = f["effects"]
    assert (blocked["kind"], blocked["node"], blocked["at_ms"]) == (
        "publishes-blocked", None, 10_300.0)
    assert blocked["text"] == ("3 publisher connections blocked (low on memory) on n2, n3; "
                               "2 publishes ended unknown while blocked")
    assert st["effects"] == {"publishes-blocked": 1} and st["weak"] is False


def test_a_disk_alarm_is_noticed_by_the_node_and_its_peers(tmp_path: Path) -> None:
    logs = {"n3": [stamp(10.2, "info", "Disk free limit set to 1000000000000MB"),
                   stamp(10.2, "info", "Free disk space is insufficient. Free bytes: 52428800000. "
                                       "Limit: 1000000000000000000"),
                   *alarm_set(10.21, "disk", "n3")],
            "n1": alarm_set(10.22, "disk", "n3")}
    ops = fault("start-alarm", "stop-alarm",
                {"fault": "disk-alarm", "nodes": ["n3"], "resource": "disk"}, 10, 30)
    [f], _st = run(tmp_path, logs, ops)
    assert f["noticed"] is True and f["detections"][0]["node"] == "n3"
    assert f["effects"] == []  # nobody published, so nobody was blocked


def test_an_alarm_on_another_node_is_no_detection_of_this_one(tmp_path: Path) -> None:
    ops = fault("start-alarm", "stop-alarm",
                {"fault": "memory-alarm", "nodes": ["n2"], "resource": "memory"}, 10, 30)
    [f], st = run(tmp_path, {"n1": alarm_set(12, "memory", "n3")}, ops)
    assert f["noticed"] is False and st["weak"] is True


def test_a_rolling_restart_is_noticed_and_restarts_every_node(tmp_path: Path) -> None:
    """The restarts happen inside its start op (10 s to 40 s): they count from its invocation."""
    logs: dict[str, list[str]] = {n: [] for n in NODES}
    for i, (node, addr) in enumerate(NODES.items()):
        down = 11 + 10 * i
        logs[node].append(stamp(down, "info", "Stopping RabbitMQ applications and their "
                                              "dependencies in the following order:"))
        for peer in NODES:
            if peer != node:
                logs[peer].append(stamp(down + 0.5, "info",
                                        f"node 'rabbit@{addr}' down: connection_closed"))
        logs[node].append(stamp(down + 5, "info", " Starting RabbitMQ 3.10.8 on Erlang 25.2.3 "
                                                  "[jit]"))
    for lines in logs.values():
        lines.sort()
    ops = fault("start-rolling-restart", "stop-rolling-restart",
                {"fault": "rolling-restart", "nodes": ["n1", "n2", "n3"],
                 "order": ["n1", "n2", "n3"]}, 10, 60, done=40)
    [f], st = run(tmp_path, logs, ops)
    assert f["noticed"] is True and f["detections"][0]["detector"] == "distribution"
    assert f["detections"][0]["at_ms"] == 11_500.0
    assert [k for k in kinds(f) if k[0] == "node-restart"] == [
        ("node-restart", "n1"), ("node-restart", "n2"), ("node-restart", "n3")]
    assert st["effects"]["node-restart"] == 3 and st["noticed"] == 1
