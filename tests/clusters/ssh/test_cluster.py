"""Tests of the SSH backend with test doubles: host checks, the run record, teardown and the
cleanup of a run killed half-way (real sshd hosts: test_cluster_hosts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusters.backend import BackendError, BackendOptions
from clusters.rabbitmq import RABBIT_BIN
from clusters.remote import CommandResult, RemoteError
from clusters.ssh.cluster import (
    SshHostsCluster,
    check_host,
    clean,
    iptables_teardown_commands,
    kill_argv,
    make,
    ours_argv,
)
from clusters.ssh.inventory import Inventory, InventoryHost, parse_inventory
from clusters.state import RunRecord
from clusters.wrap import TrackingRemote
from tests.fakes import FakeRemote

HOST = InventoryHost("n2", "10.0.0.12", 22, "deploy", None, False)


def _inventory(n: int = 3, sudo: bool = False, data_dir: str = "/var/tmp") -> Inventory:
    hosts = "".join(f"[[host]]\naddress = '10.0.0.{10 + i}'\n" for i in range(1, n + 1))
    return parse_inventory(f"data_dir = '{data_dir}'\n[defaults]\nuser = 'deploy'\n"
                           f"sudo = {'true' if sudo else 'false'}\n{hosts}", "/inv.toml")


def _res(argv: tuple[str, ...], code: int = 0, out: str = "", err: str = "") -> CommandResult:
    return CommandResult(argv, code, out, err)


# ---------------------------------------------------------------- pure builders


def test_teardown_removes_the_nemesis_chains_and_their_jumps():
    assert iptables_teardown_commands() == [
        ["iptables", "-w", "5", "-D", "INPUT", "-j", "RMQH-IN"],
        ["iptables", "-w", "5", "-D", "OUTPUT", "-j", "RMQH-OUT"],
        ["iptables", "-w", "5", "-F", "RMQH-IN"],
        ["iptables", "-w", "5", "-F", "RMQH-OUT"],
        ["iptables", "-w", "5", "-X", "RMQH-IN"],
        ["iptables", "-w", "5", "-X", "RMQH-OUT"],
    ]


def test_a_pid_is_ours_only_with_the_node_s_home_and_is_killed_with_its_group():
    assert ours_argv(42, "/d/n1/home") == ["grep", "-qzxF", "HOME=/d/n1/home",
                                           "/proc/42/environ"]
    assert kill_argv(42) == [["kill", "-KILL", "--", "-42"], ["kill", "-KILL", "42"]]


# ---------------------------------------------------------------- host checks


def test_a_host_missing_tools_is_named():
    def respond(a):
        if a[0] == "sh":
            return _res(a, out="setsid\nnohup\n")
        return _res(a, 127) if a[0] == "kill" else None

    r = FakeRemote("n2", respond)
    with pytest.raises(BackendError, match=r"n2 \(deploy@10.0.0.12:22\): missing tools: setsid, "
                                           r"nohup, kill \(procps\)"):
        check_host(r, HOST, install=False)


def test_a_host_without_rabbitmq_says_how_to_get_it_and_installs_only_when_asked():
    def respond(a: tuple[str, ...]) -> CommandResult | None:
        return _res(a, 1) if a[0] == "test" else None

    with pytest.raises(BackendError, match="n2.*rabbitmq-server is not installed.*"
                                           "--install-rabbitmq"):
        check_host(FakeRemote("n2", respond), HOST, install=False)
    r = FakeRemote("n2", respond)
    check_host(r, HOST, install=True)
    assert ("test", "-x", f"{RABBIT_BIN}/rabbitmq-server") in r.calls
    installs = [(c, e) for c, e in zip(r.calls, r.envs, strict=True) if c[0] == "apt-get"]
    assert [c for c, _ in installs] == [
        ("apt-get", "update", "-qq"),
        ("apt-get", "install", "-y", "-qq", "--no-install-recommends", "rabbitmq-server")]
    assert all(e == {"DEBIAN_FRONTEND": "noninteractive"} for _, e in installs)
    assert ("systemctl", "disable", "--now", "rabbitmq-server") in r.calls


def test_a_failed_install_and_an_unusable_iptables_are_named():
    def no_apt(a):
        if a[0] == "test":
            return _res(a, 1)
        return _res(a, 100, err="E: Unable to locate package") if a[0] == "apt-get" else None

    with pytest.raises(BackendError, match="n2.*apt-get update -qq failed: E: Unable"):
        check_host(FakeRemote("n2", no_apt), HOST, install=True)
    denied = FakeRemote("n2", lambda a: _res(a, 4, err="Permission denied (you must be root)")
                        if a[0] == "iptables" else None)
    with pytest.raises(BackendError, match="iptables does not work for deploy .set sudo = true"):
        check_host(denied, HOST, install=False)


def test_an_unreachable_host_is_named():
    def down(a):
        raise RemoteError("n2: cannot connect to deploy@10.0.0.12:22: timed out")

    with pytest.raises(BackendError, match=r"n2 \(deploy@10.0.0.12:22\): n2: cannot connect"):
        check_host(FakeRemote("n2", down), HOST, install=False)


# ---------------------------------------------------------------- the cluster


class Hosts:
    """A remote factory handing out one FakeRemote per host, kept by name."""

    def __init__(self, respond=None) -> None:
        self.remotes: dict[str, FakeRemote] = {}
        self.respond = respond

    def __call__(self, host, inventory, policy) -> FakeRemote:
        r = FakeRemote(host.name, self.respond)
        self.remotes[host.name] = r
        return r


def test_nodes_come_from_the_inventory_before_create(tmp_path):
    hosts = Hosts()
    c = SshHostsCluster(_inventory(5), 3, "RUN1", tmp_path, remote_factory=hosts)
    assert [(n.name, n.ip) for n in c.nodes] == [("n1", "10.0.0.11"), ("n2", "10.0.0.12"),
                                                 ("n3", "10.0.0.13")]
    assert c.data_root == "/var/tmp/rmqh-RUN1" and c.kind == "ssh"
    assert all(isinstance(n.remote, TrackingRemote) for n in c.nodes)
    assert c.node("n2").ip == "10.0.0.12"
    with pytest.raises(KeyError):
        c.node("n4")


def test_create_records_the_run_and_every_spawn_and_destroy_removes_everything(tmp_path):
    ours = {1001, 1002, 7777}

    def respond(a):
        if a[0] == "grep":  # /proc/<pid>/environ carries our HOME for these pids only
            return _res(a, 0 if int(a[-1].split("/")[2]) in ours else 1)
        return None

    hosts = Hosts(respond)
    c = SshHostsCluster(_inventory(2), 2, "RUN1", tmp_path, remote_factory=hosts)
    c.create()
    rec = tmp_path / "backends" / "ssh-RUN1.json"
    assert rec.exists()
    n1 = c.node("n1")
    assert n1.remote.spawn(["epmd"], log_path="/l") == 1001
    assert n1.remote.spawn(["rabbitmq-server"], log_path="/l") == 1002
    assert RunRecord.find(tmp_path, "ssh")[0].pids("n1") == [1001, 1002]
    r1 = hosts.remotes["n1"]
    r1.files["/var/tmp/rmqh-RUN1/n1/rabbit.pid"] = "7777\n"
    assert ("mkdir", "-p", "/var/tmp/rmqh-RUN1") in r1.calls
    r1.calls.clear()
    c.destroy()
    assert ("kill", "-KILL", "--", "-1001") in r1.calls
    assert ("kill", "-KILL", "1002") in r1.calls and ("kill", "-KILL", "7777") in r1.calls
    assert ("iptables", "-w", "5", "-X", "RMQH-OUT") in r1.calls
    assert r1.calls[-1] == ("rm", "-rf", "--", "/var/tmp/rmqh-RUN1")
    assert not any(c[:2] == ("kill", "-KILL") for c in hosts.remotes["n2"].calls)
    assert not rec.exists()
    with pytest.raises(RemoteError, match="destroyed"):
        n1.remote.run(["true"], timeout=1)


def test_a_pid_that_is_no_longer_ours_is_never_signalled(tmp_path):
    hosts = Hosts(lambda a: _res(a, 1) if a[0] == "grep" else None)
    c = SshHostsCluster(_inventory(1), 1, "RUN2", tmp_path, remote_factory=hosts)
    c.create()
    c.node("n1").remote.spawn(["epmd"], log_path="/l")
    c.destroy()
    assert not any(x[:2] == ("kill", "-KILL") for x in hosts.remotes["n1"].calls)


def test_create_names_every_bad_host_and_leaves_nothing(tmp_path):
    def respond(a):
        if a[0] == "test":
            return _res(a, 1)
        return None

    hosts = Hosts(respond)
    c = SshHostsCluster(_inventory(3), 3, "RUN3", tmp_path, remote_factory=hosts)
    with pytest.raises(BackendError) as e:
        c.create()
    msg = str(e.value)
    assert msg.startswith("SSH hosts not usable: ")
    assert all(f"{n} (deploy@10.0.0.1{n[1]}:22): rabbitmq-server is not installed" in msg
               for n in ("n1", "n2", "n3"))
    assert not (tmp_path / "backends").exists() or not list((tmp_path / "backends").iterdir())
    assert not any(r.spawned for r in hosts.remotes.values())
    with pytest.raises(RemoteError, match="could not be set up"):
        c.node("n1").remote.read_file("/x")
    c.destroy()  # after a failed create: nothing to do, no error


def test_privileged_commands_of_a_sudo_host_go_through_sudo(tmp_path):
    hosts = Hosts()
    c = SshHostsCluster(_inventory(1, sudo=True), 1, "RUN4", tmp_path, remote_factory=hosts)
    c.create()
    r = hosts.remotes["n1"]
    assert ("sudo", "-n", "--", "iptables", "-w", "5", "-n", "-L", "OUTPUT") in r.calls
    c.destroy()
    assert ("sudo", "-n", "--", "iptables", "-w", "5", "-X", "RMQH-IN") in r.calls
    assert ("rm", "-rf", "--", "/var/tmp/rmqh-RUN4") in r.calls


def test_clean_finishes_a_run_killed_half_way_and_keeps_the_record_of_an_unreachable_host(
        tmp_path):
    inv = tmp_path / "inv.toml"
    inv.write_text("[[host]]\naddress = '10.0.0.11'\n[[host]]\naddress = '10.0.0.12'\n")
    rec = RunRecord.create(tmp_path, "ssh", "RUN5", {
        "inventory": str(inv), "accept_new": False, "data_root": "/var/tmp/rmqh-RUN5",
        "nodes": ["n1", "n2"]})
    rec.add_pid("n1", 31)
    hosts = Hosts(lambda a: _res(a, 0) if a[0] == "grep" else None)
    out = clean(tmp_path, remote_factory=hosts)
    assert "ssh: n1: pid 31" in out and "ssh: record of run RUN5" in out
    assert ("kill", "-KILL", "31") in hosts.remotes["n1"].calls
    assert not rec.path.exists()

    rec = RunRecord.create(tmp_path, "ssh", "RUN6", {
        "inventory": str(inv), "data_root": "/var/tmp/rmqh-RUN6", "nodes": ["n1", "n2"]})

    def down(a):
        raise RemoteError("cannot connect")

    out = clean(tmp_path, remote_factory=Hosts(down))
    assert any("n1 (" in x and "not cleaned: cannot connect" in x for x in out)
    assert rec.path.exists()  # tried again by the next `make clean`

    inv.unlink()
    out = clean(tmp_path, remote_factory=Hosts())
    assert any("run RUN6 not cleaned" in x and "no such file" in x for x in out)
    assert clean(tmp_path / "empty", remote_factory=Hosts()) == []


def test_make_needs_an_inventory(tmp_path):
    with pytest.raises(ValueError, match="needs --inventory"):
        make(BackendOptions(kind="ssh"), 3, "R", tmp_path)


def test_clean_host_leaves_a_data_dir_that_is_not_a_run_s(tmp_path):
    from clusters.ssh.cluster import clean_host

    r = FakeRemote("n1")
    clean_host(r, "n1", "/", [])
    clean_host(r, "n1", "/var/tmp", [])
    assert not any(c[0] == "rm" for c in r.calls)
    assert Path("/var/tmp").exists()
