"""Tests for nemesis.commands: the exact argv lists."""

from __future__ import annotations

from nemesis import commands as c
from nemesis.partition import bisect, complete_grudge

W = ["iptables", "-w", "5"]


def test_setup_steps_are_guarded_creates_then_jumps() -> None:
    assert c.setup_steps() == [
        c.Guarded([*W, "-n", "-L", "RMQH-IN"], [*W, "-N", "RMQH-IN"]),
        c.Guarded([*W, "-n", "-L", "RMQH-OUT"], [*W, "-N", "RMQH-OUT"]),
        c.Guarded([*W, "-C", "INPUT", "-j", "RMQH-IN"], [*W, "-I", "INPUT", "1", "-j", "RMQH-IN"]),
        c.Guarded(
            [*W, "-C", "OUTPUT", "-j", "RMQH-OUT"], [*W, "-I", "OUTPUT", "1", "-j", "RMQH-OUT"]
        ),
    ]


def test_flush() -> None:
    assert c.flush_commands() == [[*W, "-F", "RMQH-IN"], [*W, "-F", "RMQH-OUT"]]


def test_drop_commands_both_directions() -> None:
    assert c.drop_commands(["10.0.0.2", "10.0.0.3"]) == [
        [*W, "-A", "RMQH-IN", "-s", "10.0.0.2", "-j", "DROP"],
        [*W, "-A", "RMQH-OUT", "-d", "10.0.0.2", "-j", "DROP"],
        [*W, "-A", "RMQH-IN", "-s", "10.0.0.3", "-j", "DROP"],
        [*W, "-A", "RMQH-OUT", "-d", "10.0.0.3", "-j", "DROP"],
    ]


def test_grudge_commands_per_node() -> None:
    ips = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"}
    assert c.grudge_commands(complete_grudge(bisect(["n1", "n2", "n3"])), ips) == {
        "n1": [
            [*W, "-A", "RMQH-IN", "-s", "10.0.0.2", "-j", "DROP"],
            [*W, "-A", "RMQH-OUT", "-d", "10.0.0.2", "-j", "DROP"],
            [*W, "-A", "RMQH-IN", "-s", "10.0.0.3", "-j", "DROP"],
            [*W, "-A", "RMQH-OUT", "-d", "10.0.0.3", "-j", "DROP"],
        ],
        "n2": [
            [*W, "-A", "RMQH-IN", "-s", "10.0.0.1", "-j", "DROP"],
            [*W, "-A", "RMQH-OUT", "-d", "10.0.0.1", "-j", "DROP"],
        ],
        "n3": [
            [*W, "-A", "RMQH-IN", "-s", "10.0.0.1", "-j", "DROP"],
            [*W, "-A", "RMQH-OUT", "-d", "10.0.0.1", "-j", "DROP"],
        ],
    }


def test_grudge_commands_node_missing_from_grudge_gets_no_rules() -> None:
    ips = {"n1": "10.0.0.1", "n2": "10.0.0.2"}
    assert c.grudge_commands({}, ips) == {"n1": [], "n2": []}


STAT = ["-m", "statistic", "--mode", "random", "--probability"]


def test_loss_commands_for_peers() -> None:
    assert c.loss_commands(0.25, peer_ips=["10.0.0.2"], interface="eth0") == [
        [*W, "-A", "RMQH-IN", "-s", "10.0.0.2", *STAT, "0.25", "-j", "DROP"],
        [*W, "-A", "RMQH-OUT", "-d", "10.0.0.2", *STAT, "0.25", "-j", "DROP"],
    ]


def test_loss_commands_for_all_traffic_skip_loopback() -> None:
    assert c.loss_commands(0.1, peer_ips=None, interface="eth0") == [
        [*W, "-A", "RMQH-IN", "-i", "eth0", *STAT, "0.1", "-j", "DROP"],
        [*W, "-A", "RMQH-OUT", "-o", "eth0", *STAT, "0.1", "-j", "DROP"],
    ]


def test_probability_is_plain_decimal() -> None:
    assert [c.probability(p) for p in (1, 0.5, 0.05, 1e-5, 0.123456789)] == [
        "1",
        "0.5",
        "0.05",
        "0.00001",
        "0.123456789",
    ]


def test_tbf() -> None:
    assert c.tbf_command("eth0", rate_kbit=1024, burst_bytes=32768, latency_ms=400) == [
        "tc", "qdisc", "replace", "dev", "eth0", "root",
        "tbf", "rate", "1024kbit", "burst", "32768", "latency", "400ms",
    ]  # fmt: skip


ROOT = ["tc", "qdisc", "replace", "dev", "eth0", "root"]


def test_netem_delay() -> None:
    assert c.netem_delay_command("eth0", delay_ms=100) == [*ROOT, "netem", "delay", "100ms"]
    assert c.netem_delay_command("eth0", delay_ms=100, jitter_ms=20) == [
        *ROOT, "netem", "delay", "100ms", "20ms", "distribution", "normal",
    ]  # fmt: skip
    assert c.netem_delay_command(
        "eth0", delay_ms=50.5, jitter_ms=10, correlation_pct=25, distribution=None
    ) == [*ROOT, "netem", "delay", "50.5ms", "10ms", "25%"]


def test_netem_duplicate_and_reorder() -> None:
    assert c.netem_duplicate_command("eth0", percent=5) == [*ROOT, "netem", "duplicate", "5%"]
    assert c.netem_duplicate_command("eth0", percent=1.5, correlation_pct=30) == [
        *ROOT, "netem", "duplicate", "1.5%", "30%",
    ]  # fmt: skip
    assert c.netem_reorder_command("eth0", percent=25, delay_ms=10) == [
        *ROOT, "netem", "delay", "10ms", "reorder", "25%",
    ]  # fmt: skip
    assert c.netem_reorder_command("eth0", percent=25, delay_ms=10, correlation_pct=50) == [
        *ROOT, "netem", "delay", "10ms", "reorder", "25%", "50%",
    ]  # fmt: skip


def test_qdisc_clear_and_probe() -> None:
    assert c.qdisc_clear_command("eth0") == ["tc", "qdisc", "del", "dev", "eth0", "root"]
    assert c.netem_probe_commands() == (
        ["tc", "qdisc", "replace", "dev", "lo", "root", "netem", "delay", "0ms"],
        ["tc", "qdisc", "del", "dev", "lo", "root"],
    )


def test_every_command_is_a_list_of_strings() -> None:
    argvs = [
        *c.flush_commands(),
        *c.drop_commands(["1.2.3.4"]),
        *c.loss_commands(0.3, peer_ips=None, interface="eth0"),
        c.tbf_command("eth0", rate_kbit=1, burst_bytes=1600, latency_ms=1),
        c.netem_delay_command("eth0", delay_ms=1, jitter_ms=1, correlation_pct=1),
    ]
    for step in c.setup_steps():
        argvs += [step.unless, step.then]
    assert all(isinstance(a, list) and all(isinstance(x, str) for x in a) for a in argvs)
