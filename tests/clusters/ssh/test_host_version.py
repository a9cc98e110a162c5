"""Tests of the SSH backend's check of the RabbitMQ installed on its hosts (issue 20): the
version is read from Debian's package database, else the broker's CLI, and a host of another
release line than --rabbitmq asked for is refused before anything starts. Fake remotes only
(tests/fakes.py): no host, no sshd."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from clusters.backend import BackendError
from clusters.rabbitmq import RABBIT_BIN
from clusters.releases import release
from clusters.remote import CommandResult
from clusters.ssh.cluster import (
    SshHostsCluster,
    check_host,
    check_version,
    installed_version,
    version_probes,
    version_said,
)
from clusters.ssh.inventory import InventoryHost, parse_inventory
from clusters.state import RunRecord
from tests.fakes import FakeRemote

HOST = InventoryHost("n2", "10.0.0.12", 22, "deploy", None, False)
DPKG = tuple(version_probes()[0])
CTL = (f"{RABBIT_BIN}/rabbitmqctl", "version")


def host_with(dpkg: str | None = None, ctl: str | None = None
              ) -> Callable[[tuple[str, ...]], CommandResult | None]:
    """Returns a responder for a host whose package database says `dpkg` (None: no dpkg-query)
    and whose rabbitmqctl version says `ctl` (None: it fails)."""
    def respond(a: tuple[str, ...]) -> CommandResult | None:
        if a == DPKG:
            return (CommandResult(a, 127, "", "dpkg-query: not found") if dpkg is None
                    else CommandResult(a, 0, dpkg, ""))
        if a == CTL:
            return (CommandResult(a, 1, "", "erl: not found") if ctl is None
                    else CommandResult(a, 0, ctl, ""))
        return None
    return respond


def test_the_probes_ask_the_package_database_then_the_broker_s_cli():
    assert version_probes() == [
        ["dpkg-query", "-W", "--showformat=${db:Status-Status} ${Version}", "rabbitmq-server"],
        [f"{RABBIT_BIN}/rabbitmqctl", "version"]]


@pytest.mark.parametrize("argv, out, said", [
    (DPKG, "installed 4.0.5-6", "4.0.5-6"),
    (DPKG, "installed 3.10.8-1.1+deb12u1", "3.10.8-1.1+deb12u1"),
    (DPKG, "config-files 3.10.8-1.1", None),  # removed, its configuration kept
    (DPKG, "not-installed ", None),
    (CTL, "4.0.5\n", "4.0.5"),
    (CTL, "warning: the HOME is not writable\n3.10.8\n", "3.10.8"),
    (CTL, "", None),
])
def test_what_a_probe_printed_names_a_version_or_none(argv, out, said):
    assert version_said(argv, out) == said


def test_the_package_database_answers_first_and_the_cli_when_there_is_none():
    r = FakeRemote("n2", host_with(dpkg="installed 4.0.5-6", ctl="3.10.8"))
    assert installed_version(r) == "4.0.5-6" and r.calls == [DPKG]
    r = FakeRemote("n2", host_with(dpkg=None, ctl="4.0.5"))
    assert installed_version(r) == "4.0.5" and r.calls == [DPKG, CTL]
    assert installed_version(FakeRemote("n2", host_with())) is None


def test_a_host_of_another_line_is_refused_naming_it_and_what_to_do():
    r = FakeRemote("n2", host_with(dpkg="installed 3.10.8-1.1+deb12u1"))
    with pytest.raises(BackendError, match=(
            r"n2 \(deploy@10.0.0.12:22\) has RabbitMQ 3.10.8-1.1\+deb12u1 installed, of the "
            r"3.10 line, but --rabbitmq 4.0 was asked for: install 4.0 there, or run with "
            r"--rabbitmq 3.10")):
        check_version(r, HOST, release("4.0"))
    assert check_version(r, HOST, release("3.10")) == "3.10.8-1.1+deb12u1"


def test_a_host_whose_version_cannot_be_told_is_refused():
    with pytest.raises(BackendError, match=r"n2 \(deploy@10.0.0.12:22\): cannot tell which "
                                           r"RabbitMQ is installed .* --rabbitmq 3.10"):
        check_version(FakeRemote("n2", host_with()), HOST, release("3.10"))


def test_check_host_checks_the_line_only_when_a_release_is_given_after_an_install():
    # --install-rabbitmq installs Debian's package; the line of what it installed is checked
    installed: list[str] = []

    def respond(a: tuple[str, ...]) -> CommandResult | None:
        if a[0] == "test":
            return CommandResult(a, 0 if installed else 1, "", "")
        if a[:2] == ("apt-get", "install"):
            installed.append("3.10.8")
        if a == DPKG:
            return CommandResult(a, 0, f"installed {installed[0]}-1", "") if installed \
                else CommandResult(a, 1, "", "no packages found")
        return None

    r = FakeRemote("n2", respond)
    with pytest.raises(BackendError, match="has RabbitMQ 3.10.8-1 installed.*--rabbitmq 4.0"):
        check_host(r, HOST, install=True, release=release("4.0"))
    assert r.calls.index(DPKG) > max(i for i, c in enumerate(r.calls) if c[0] == "apt-get")
    r = FakeRemote("n2", host_with(dpkg="installed 3.10.8-1"))
    check_host(r, HOST, install=False)  # no release asked: not probed
    assert DPKG not in r.calls


class Hosts:
    """A remote factory handing out one FakeRemote per host, each answering `versions[name]`."""

    def __init__(self, versions: dict[str, str]) -> None:
        self.versions = versions
        self.remotes: dict[str, FakeRemote] = {}

    def __call__(self, host: InventoryHost, inventory: object, policy: object) -> FakeRemote:
        r = FakeRemote(host.name, host_with(dpkg=f"installed {self.versions[host.name]}"))
        self.remotes[host.name] = r
        return r


def _cluster(tmp_path: Path, versions: dict[str, str]) -> tuple[SshHostsCluster, Hosts]:
    hosts = "".join(f"[[host]]\naddress = '10.0.0.{10 + i}'\n" for i in range(1, 4))
    inv = parse_inventory(f"data_dir = '/var/tmp'\n[defaults]\nuser = 'deploy'\n{hosts}",
                          "/inv.toml")
    factory = Hosts(versions)
    return SshHostsCluster(inv, 3, "RUN1", tmp_path, remote_factory=factory), factory


def test_create_refuses_every_host_of_another_line_before_anything_starts(tmp_path):
    c, hosts = _cluster(tmp_path, {"n1": "4.0.5-6", "n2": "3.10.8-1", "n3": "3.10.8-1"})
    c.launcher(release("4.0"))
    with pytest.raises(BackendError) as e:
        c.create()
    said = str(e.value)
    assert said.startswith("SSH hosts not usable: ")
    assert "n2 (deploy@10.0.0.12:22) has RabbitMQ 3.10.8-1 installed" in said
    assert "n3 (deploy@10.0.0.13:22) has RabbitMQ 3.10.8-1 installed" in said
    assert "n1 (" not in said
    # nothing started, nothing made, no run record left to clean
    for r in hosts.remotes.values():
        assert r.spawned == [] and not any(c[0] == "mkdir" for c in r.calls)
    assert RunRecord.find(tmp_path, "ssh") == []


def test_create_goes_on_when_every_host_has_the_line_asked_for(tmp_path):
    c, hosts = _cluster(tmp_path, {"n1": "4.0.5-6", "n2": "4.0.5-6", "n3": "4.0.5-6"})
    c.launcher(release("4.0"))
    c.create()
    try:
        assert all(DPKG in r.calls and ("mkdir", "-p", c.data_root) in r.calls
                   for r in hosts.remotes.values())
    finally:
        c.destroy()
