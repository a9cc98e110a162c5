"""Tests for nemesis.net: running the commands on a fake node, and parsing tc's errors."""

from __future__ import annotations

import pytest

from clusters.base import Node
from clusters.remote import CommandResult, CommandTimeout, RemoteError
from nemesis import commands, net
from nemesis.errors import FaultUnsupported
from tests.nemesis.fakes import FakeRemote

W = ("iptables", "-w", "5")


def node(netem: bool = True) -> tuple[Node, FakeRemote]:
    remote = FakeRemote("n1", netem=netem)
    return Node("n1", "10.0.0.1", remote), remote


def test_ensure_chains_first_time_creates_everything() -> None:
    n, r = node()
    net.ensure_chains(n, 3)
    assert r.calls == [
        (*W, "-n", "-L", "RMQH-IN"),
        (*W, "-N", "RMQH-IN"),
        (*W, "-n", "-L", "RMQH-OUT"),
        (*W, "-N", "RMQH-OUT"),
        (*W, "-C", "INPUT", "-j", "RMQH-IN"),
        (*W, "-I", "INPUT", "1", "-j", "RMQH-IN"),
        (*W, "-C", "OUTPUT", "-j", "RMQH-OUT"),
        (*W, "-I", "OUTPUT", "1", "-j", "RMQH-OUT"),
    ]
    assert r.jumps == [("OUTPUT", "RMQH-OUT"), ("INPUT", "RMQH-IN")]
    assert set(r.timeouts) == {3}


def test_ensure_chains_is_idempotent() -> None:
    n, r = node()
    net.ensure_chains(n, 3)
    r.calls.clear()
    net.ensure_chains(n, 3)
    net.ensure_chains(n, 3)
    # Only the checks run again: no second chain, no second jump.
    assert all(call[3] in ("-n", "-C") for call in r.calls)
    assert len(r.jumps) == 2
    assert sorted(r.chains) == ["RMQH-IN", "RMQH-OUT"]


def test_apply_rules_replaces_what_was_there() -> None:
    n, r = node()
    net.apply_rules(n, commands.drop_commands(["10.0.0.2"]), 3)
    net.apply_rules(n, commands.drop_commands(["10.0.0.3"]), 3)
    assert r.rules() == {
        "RMQH-IN": [("-s", "10.0.0.3", "-j", "DROP")],
        "RMQH-OUT": [("-d", "10.0.0.3", "-j", "DROP")],
    }


def test_heal_iptables_on_a_fresh_node_works_and_leaves_chains_empty() -> None:
    n, r = node()
    net.heal_iptables(n, 3)
    net.heal_iptables(n, 3)
    assert r.rules() == {"RMQH-IN": [], "RMQH-OUT": []}


def test_iptables_failure_raises_remote_error() -> None:
    n, r = node()
    r.fail[(*W, "-A")] = CommandResult((), 4, "", "iptables: Resource temporarily unavailable.")
    with pytest.raises(RemoteError, match="temporarily unavailable"):
        net.apply_rules(n, commands.drop_commands(["10.0.0.2"]), 3)


def test_timeout_propagates() -> None:
    n, r = node()
    r.fail[(*W, "-n", "-L")] = CommandTimeout("iptables timed out after 3s")
    with pytest.raises(CommandTimeout):
        net.heal_iptables(n, 3)


def test_set_and_clear_root_qdisc() -> None:
    n, r = node()
    tbf = commands.tbf_command("eth0", rate_kbit=100, burst_bytes=2000, latency_ms=50)
    net.set_root_qdisc(n, tbf, 3)
    assert r.qdiscs == {"eth0": ("tbf", "rate", "100kbit", "burst", "2000", "latency", "50ms")}
    assert net.clear_root_qdisc(n, "eth0", 3) is True
    assert net.clear_root_qdisc(n, "eth0", 3) is False
    assert r.qdiscs == {}


def test_clear_root_qdisc_other_failure_raises() -> None:
    n, r = node()
    r.fail[("tc", "qdisc", "del")] = CommandResult((), 2, "", 'Cannot find device "eth0"\n')
    with pytest.raises(RemoteError, match="Cannot find device"):
        net.clear_root_qdisc(n, "eth0", 3)


def test_netem_on_a_kernel_without_it_is_unsupported_and_names_the_node() -> None:
    n, _ = node(netem=False)
    with pytest.raises(FaultUnsupported, match="netem is not available on node n1's kernel"):
        net.set_root_qdisc(n, commands.netem_delay_command("eth0", delay_ms=10), 3)


def test_tbf_failure_is_not_mistaken_for_missing_netem() -> None:
    n, r = node(netem=False)
    r.fail[("tc",)] = CommandResult((), 2, "", "Error: Specified qdisc kind is unknown.\n")
    tbf = commands.tbf_command("eth0", rate_kbit=100, burst_bytes=2000, latency_ms=50)
    with pytest.raises(RemoteError):
        net.set_root_qdisc(n, tbf, 3)


def test_probe_netem() -> None:
    yes, r = node(netem=True)
    assert net.probe_netem(yes, 3) is True
    assert r.qdiscs == {}  # the probe cleans up after itself
    no, _ = node(netem=False)
    assert net.probe_netem(no, 3) is False


def test_probe_netem_other_failure_raises() -> None:
    n, r = node()
    r.fail[("tc",)] = CommandResult((), 1, "", "RTNETLINK answers: Operation not permitted\n")
    with pytest.raises(RemoteError, match="not permitted"):
        net.probe_netem(n, 3)


@pytest.mark.parametrize(
    "stderr",
    [
        "Error: Specified qdisc kind is unknown.\n",
        "Error: Specified qdisc not found.\n",
        'Unknown qdisc "netem", hence option "delay" is unparsable\n',
        "RTNETLINK answers: No such file or directory\n",
    ],
)
def test_netem_unsupported_messages(stderr: str) -> None:
    assert net.netem_unsupported(stderr)


@pytest.mark.parametrize(
    "stderr",
    ["", 'Cannot find device "eth0"\n', "RTNETLINK answers: Operation not permitted\n"],
)
def test_netem_unsupported_other_messages(stderr: str) -> None:
    assert not net.netem_unsupported(stderr)


@pytest.mark.parametrize(
    "stderr",
    [
        "Error: Cannot delete qdisc with handle of zero.\n",
        "RTNETLINK answers: No such file or directory\n",
        "Error: Cannot find specified qdisc on specified device.\n",
        "Error: Invalid handle.\n",
        "RTNETLINK answers: Invalid argument\n",
    ],
)
def test_qdisc_absent_messages(stderr: str) -> None:
    assert net.qdisc_absent(stderr)


def test_qdisc_absent_other_messages() -> None:
    assert not net.qdisc_absent('Cannot find device "eth0"\n')
    assert not net.qdisc_absent("RTNETLINK answers: Operation not permitted\n")
