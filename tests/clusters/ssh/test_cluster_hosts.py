"""Tests of the SSH backend against real OpenSSH servers in throw-away namespaces (no broker):
host keys unknown, accepted or changed, a refused login, an unreachable host, and a run's
processes and iptables chains gone after destroy and after `clean` of a run killed half-way."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.backend import BackendError, BackendOptions
from clusters.local.cluster import list_namespaces
from clusters.registry import make_cluster
from clusters.remote import run_local
from clusters.ssh.cluster import clean
from tests.clusters.ssh.sshd import (
    PREFIX,
    SSHD,
    SshdHost,
    exclusive,
    keygen,
    sshd_hosts,
    write_inventory,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> Iterator[list[SshdHost]]:
    if os.geteuid() != 0:
        pytest.skip("real sshd hosts need root (network namespaces)")
    if not os.path.exists(SSHD):
        pytest.skip(f"{SSHD} is not installed")
    with exclusive():
        try:
            with sshd_hosts(tmp_path_factory.mktemp("sshd-hosts"), 3) as hs:
                yield hs
        finally:
            left = list_namespaces(PREFIX)
            assert not left, f"namespaces left behind: {left}"


def _cluster(inv: Path, state: Path, run_id: str, nodes: int = 3, **kw: bool):
    return make_cluster(BackendOptions(kind="ssh", inventory=str(inv), **kw), nodes, run_id,
                        state)


def _alive(pid: int) -> bool:
    try:
        st = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return st != "Z"


def _wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def _chains(ns: str) -> str:
    return run_local(["ip", "netns", "exec", ns, "iptables", "-S"], timeout=10).stdout


def _leave_debris(c, hosts: list[SshdHost]) -> list[int]:
    """Spawns a long sleep with the node's HOME on each host and makes the nemesis chains, as a
    run would. Returns the pids."""
    pids = []
    for n in c.nodes:
        home = f"{c.data_root}/{n.name}/home"
        pids.append(n.remote.spawn(["sleep", "600"], env={"HOME": home},
                                   log_path=f"{c.data_root}/{n.name}/log/sleep.out"))
        for argv in (["iptables", "-w", "5", "-N", "RMQH-IN"],
                     ["iptables", "-w", "5", "-I", "INPUT", "1", "-j", "RMQH-IN"],
                     ["iptables", "-w", "5", "-A", "RMQH-IN", "-s", "10.214.0.99", "-j",
                      "DROP"]):
            n.remote.run(argv, timeout=10)
    assert all(_alive(p) for p in pids)
    assert all("RMQH-IN" in _chains(h.namespace) for h in hosts)
    return pids


def test_a_run_s_processes_chains_and_data_are_gone_after_destroy(hosts, tmp_path):
    inv = write_inventory(tmp_path / "inv.toml", hosts, known_hosts=hosts[0].known_hosts,
                          data_dir=str(tmp_path / "data"))
    c = _cluster(inv, tmp_path / "state", "RUNA")
    c.create()
    assert [n.ip for n in c.nodes] == [h.ip for h in hosts]
    pids = _leave_debris(c, hosts)
    assert (tmp_path / "state" / "backends" / "ssh-RUNA.json").exists()
    c.destroy()
    assert _wait_gone(pids) == []
    assert not any("RMQH" in _chains(h.namespace) for h in hosts)
    assert not (tmp_path / "data" / "rmqh-RUNA").exists()
    assert not (tmp_path / "state" / "backends" / "ssh-RUNA.json").exists()


def test_clean_ends_what_a_run_killed_half_way_left(hosts, tmp_path):
    inv = write_inventory(tmp_path / "inv.toml", hosts, known_hosts=hosts[0].known_hosts,
                          data_dir=str(tmp_path / "data"))
    c = _cluster(inv, tmp_path / "state", "RUNB")
    c.create()
    pids = _leave_debris(c, hosts)
    # The controller dies here: no destroy. `make clean` finds the record and finishes.
    out = clean(tmp_path / "state")
    assert _wait_gone(pids) == []
    assert sum(1 for x in out if ": pid " in x) == 3 and "ssh: record of run RUNB" in out
    assert not any("RMQH" in _chains(h.namespace) for h in hosts)
    assert clean(tmp_path / "state") == []


def test_an_unknown_host_key_is_refused_naming_the_host_unless_new_keys_are_accepted(
        hosts, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("".join(line for line in Path(hosts[0].known_hosts).read_text().splitlines(
        keepends=True) if not line.startswith(hosts[1].ip + " ")))
    inv = write_inventory(tmp_path / "inv.toml", hosts, known_hosts=str(kh),
                          data_dir=str(tmp_path / "data"))
    c = _cluster(inv, tmp_path / "state", "RUNC")
    with pytest.raises(BackendError) as e:
        c.create()
    msg = str(e.value)
    assert f"n2 (root@{hosts[1].ip}:22)" in msg and "is not in known_hosts" in msg
    assert "SHA256:" in msg and "--accept-new-host-keys" in msg
    assert "n1 (" not in msg and "n3 (" not in msg
    assert not (tmp_path / "state" / "backends").exists() or not list(
        (tmp_path / "state" / "backends").iterdir())

    c = _cluster(inv, tmp_path / "state", "RUND", accept_new_host_keys=True)
    c.create()
    c.destroy()
    assert f"{hosts[1].ip} ssh-ed25519 " in kh.read_text()
    c = _cluster(inv, tmp_path / "state", "RUNE")  # now known: accepted without the option
    c.create()
    c.destroy()


def test_a_changed_host_key_is_refused_even_when_accepting_new_keys(hosts, tmp_path):
    other = keygen(tmp_path / "other_host")
    kh = tmp_path / "known_hosts"
    lines = Path(hosts[0].known_hosts).read_text().splitlines(keepends=True)
    kh.write_text("".join(f"{hosts[2].ip} {' '.join(other.split()[:2])}\n"
                          if x.startswith(hosts[2].ip + " ") else x for x in lines))
    inv = write_inventory(tmp_path / "inv.toml", hosts, known_hosts=str(kh))
    c = _cluster(inv, tmp_path / "state", "RUNF", accept_new_host_keys=True)
    with pytest.raises(BackendError, match=rf"n3 \(root@{hosts[2].ip}:22\).*does not match"):
        c.create()


def test_a_wrong_client_key_and_an_unreachable_host_are_named(hosts, tmp_path):
    keygen(tmp_path / "stranger")
    inv = write_inventory(tmp_path / "inv.toml", hosts[:1], known_hosts=hosts[0].known_hosts)
    inv.write_text(inv.read_text().replace(hosts[0].client_key, str(tmp_path / "stranger")))
    with pytest.raises(BackendError, match=rf"n1 \(root@{hosts[0].ip}:22\).*login to .* failed"):
        _cluster(inv, tmp_path / "state", "RUNG", nodes=1).create()

    inv = write_inventory(tmp_path / "inv2.toml", hosts[:2], known_hosts=hosts[0].known_hosts)
    # n2 at an address of the test network where nothing answers: the connect times out.
    inv.write_text(inv.read_text().replace(f'address = "{hosts[1].ip}"',
                                           'address = "10.214.0.99"'))
    t0 = time.monotonic()
    with pytest.raises(BackendError, match=r"n2 \(root@10.214.0.99:22\).*cannot connect"):
        _cluster(inv, tmp_path / "state", "RUNH", nodes=2).create()
    assert time.monotonic() - t0 < 30
