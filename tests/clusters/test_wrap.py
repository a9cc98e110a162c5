"""Tests of the wrapping Remotes: privileged tools through sudo -n, spawns reported, a closed
TrackingRemote failing at once."""

from __future__ import annotations

import pytest

from clusters.remote import RemoteError
from clusters.wrap import SudoRemote, TrackingRemote, sudo_argv
from tests.fakes import FakeRemote


def test_sudo_argv_never_prompts_and_keeps_the_environment_inside():
    assert sudo_argv(["iptables", "-F", "X"], None) == ["sudo", "-n", "--", "iptables", "-F", "X"]
    assert sudo_argv(["apt-get", "install"], {"DEBIAN_FRONTEND": "noninteractive"}) == [
        "sudo", "-n", "--", "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install"]


def test_only_privileged_tools_go_through_sudo():
    inner = FakeRemote("n1")
    r = SudoRemote(inner)
    r.run(["/usr/sbin/iptables", "-w", "5", "-F", "RMQH-IN"], timeout=5)
    r.run(["tc", "qdisc", "show"], timeout=5)
    r.run(["kill", "-STOP", "42"], timeout=5)
    r.run(["/usr/lib/rabbitmq/bin/rabbitmqctl", "status"], timeout=5, env={"HOME": "/h"})
    assert inner.calls == [
        ("sudo", "-n", "--", "/usr/sbin/iptables", "-w", "5", "-F", "RMQH-IN"),
        ("sudo", "-n", "--", "tc", "qdisc", "show"),
        ("kill", "-STOP", "42"),
        ("/usr/lib/rabbitmq/bin/rabbitmqctl", "status"),
    ]
    assert inner.envs[-1] == {"HOME": "/h"} and inner.envs[0] is None
    assert r.spawn(["epmd"], log_path="/l") == 1001 and inner.spawned == [("epmd",)]
    r.write_file("/f", "x", 0o400)
    assert r.read_file("/f") == "x" and inner.modes["/f"] == 0o400


def test_tracking_reports_every_spawn_and_fails_fast_once_closed():
    seen: list[tuple[str, int]] = []
    inner = FakeRemote("n2")
    r = TrackingRemote(inner, lambda node, pid: seen.append((node, pid)))
    assert r.name == "n2"
    r.spawn(["epmd"], log_path="/l")
    r.spawn(["rabbitmq-server"], log_path="/l")
    assert seen == [("n2", 1001), ("n2", 1002)]
    assert r.run(["true"], timeout=1).ok
    r.close("host unusable")
    for call in (lambda: r.run(["true"], timeout=1), lambda: r.read_file("/x"),
                 lambda: r.spawn(["x"], log_path="/l"), lambda: r.write_file("/x", "")):
        with pytest.raises(RemoteError, match="n2: host unusable"):
            call()
    assert len(inner.calls) == 1
