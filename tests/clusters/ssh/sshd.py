"""Test helper: a real OpenSSH server inside a throw-away network namespace.

`sshd_in_namespace` builds a one-node namespace cluster with its own prefix
and subnet (never the harness's), makes a host key and a client key, starts
`sshd -D` inside the namespace and yields how to reach it. On exit the
namespace cleanup ends every process inside it by pid (sshd and anything a
test left running) and removes the namespace. Two test sessions at once
would tear down each other's namespace (same names, same address), so the
whole life of the namespace is held under a lock (`exclusive`, a flock on this file).
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from clusters.local.cluster import NetnsCluster, make_plan
from clusters.local.remote import NetnsRemote
from clusters.remote import run_local

SSHD = "/usr/sbin/sshd"
PREFIX = "rmqs"
SUBNET = "10.214.0.0/24"


@dataclass(frozen=True)
class SshdHost:
    """A running test sshd: its address, namespace, and the files a client needs."""

    ip: str
    namespace: str
    client_key: str
    known_hosts: str
    host_pub: str
    log_path: str


def sshd_config(ip: str, d: Path) -> str:
    """Takes the listen address and a work directory. Returns a minimal sshd_config.

    UsePAM is off, so sshd refuses an account whose password field is locked
    ("!"); root with "*" (no password) logs in with its key.
    """
    return "\n".join([
        "Port 22",
        f"ListenAddress {ip}",
        f"HostKey {d / 'host_ed25519'}",
        f"PidFile {d / 'sshd.pid'}",
        f"AuthorizedKeysFile {d / 'authorized_keys'}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "StrictModes no",
        "UsePAM no",
        "Subsystem sftp internal-sftp",
        "LogLevel VERBOSE",
        "",
    ])


def keygen(path: Path) -> str:
    """Makes an ed25519 key pair at path (no passphrase). Returns the public key line."""
    run_local(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rmqs-test", "-f", str(path)],
              timeout=30)
    return Path(f"{path}.pub").read_text().strip()


def wait_for_banner(ip: str, port: int = 22, timeout: float = 10.0) -> None:
    """Waits until an SSH server answers with its banner; TimeoutError otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((ip, port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no SSH server on {ip}:{port} after {timeout:.0f}s")
        time.sleep(0.05)


LOCK_PATH = "/run/lock/rmqh-test-sshd.lock"


@contextmanager
def exclusive(timeout: float = 120.0) -> Iterator[None]:
    """Holds the machine-wide lock of the test namespace (a fixed path, so that checkouts of the
    project elsewhere on the machine wait for each other too); TimeoutError after `timeout` s."""
    with open(LOCK_PATH, "a+b") as fh:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError("another test session holds the rmqs namespace") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextmanager
def sshd_in_namespace(d: Path) -> Iterator[SshdHost]:
    """Takes a work directory. Yields a running sshd in namespace rmqs-n1, removed afterwards.

    The caller holds `exclusive()` around this and around its check that nothing is left.
    """
    cluster = NetnsCluster(make_plan(1, prefix=PREFIX, subnet=SUBNET))
    node = cluster.nodes[0]
    assert isinstance(node.remote, NetnsRemote)
    host_pub = keygen(d / "host_ed25519")
    client_pub = keygen(d / "client_ed25519")
    (d / "authorized_keys").write_text(client_pub + "\n")
    (d / "known_hosts").write_text(f"{node.ip} {' '.join(host_pub.split()[:2])}\n")
    config = d / "sshd_config"
    config.write_text(sshd_config(node.ip, d))
    # sshd's privilege-separation directory; the system sshd service makes it at boot.
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    run_local([SSHD, "-t", "-f", str(config)], timeout=10)
    log_path = str(d / "sshd.log")
    try:
        cluster.create()
        node.remote.spawn([SSHD, "-D", "-e", "-f", str(config)], log_path=log_path)
        wait_for_banner(node.ip)
        yield SshdHost(node.ip, node.remote.namespace, str(d / "client_ed25519"),
                       str(d / "known_hosts"), host_pub, log_path)
    finally:
        cluster.destroy()


TINI = "/usr/bin/tini"


@contextmanager
def sshd_hosts(d: Path, n: int) -> Iterator[list[SshdHost]]:
    """Takes a work directory and a host count. Yields n running sshds, one per namespace
    rmqs-n1..rmqs-nN, each with its own host key; one client key logs in to all, and
    d/known_hosts names them all. Removed afterwards (every process inside ended by pid).

    Each sshd runs under `tini -s`, a subreaper, so what an SSH session leaves behind (a broker
    killed by a test) is reaped there rather than by this test process. The caller holds
    `exclusive()` around this.
    """
    cluster = NetnsCluster(make_plan(n, prefix=PREFIX, subnet=SUBNET))
    client_pub = keygen(d / "client_ed25519")
    (d / "authorized_keys").write_text(client_pub + "\n")
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    hosts, known = [], []
    for node in cluster.nodes:
        hd = d / node.name
        hd.mkdir()
        host_pub = keygen(hd / "host_ed25519")
        (hd / "authorized_keys").write_text(client_pub + "\n")
        (hd / "sshd_config").write_text(sshd_config(node.ip, hd))
        run_local([SSHD, "-t", "-f", str(hd / "sshd_config")], timeout=10)
        known.append(f"{node.ip} {' '.join(host_pub.split()[:2])}\n")
        assert isinstance(node.remote, NetnsRemote)
        hosts.append(SshdHost(node.ip, node.remote.namespace, str(d / "client_ed25519"),
                              str(d / "known_hosts"), host_pub, str(hd / "sshd.log")))
    (d / "known_hosts").write_text("".join(known))
    try:
        cluster.create()
        for node, host in zip(cluster.nodes, hosts, strict=True):
            argv = [SSHD, "-D", "-e", "-f", str(d / node.name / "sshd_config")]
            if os.path.exists(TINI):
                argv = [TINI, "-s", "--", *argv]
            node.remote.spawn(argv, log_path=host.log_path)
        for host in hosts:
            wait_for_banner(host.ip)
        yield hosts
    finally:
        cluster.destroy()


def write_inventory(path: Path, hosts: list[SshdHost], *, known_hosts: str | None = None,
                    data_dir: str | None = None, extra: str = "") -> Path:
    """Takes a path, the test hosts and optional settings. Writes a TOML inventory naming them
    n1..nN (root, the test client key). Returns the path."""
    lines = []
    if known_hosts is not None:
        lines.append(f'known_hosts = "{known_hosts}"')
    if data_dir is not None:
        lines.append(f'data_dir = "{data_dir}"')
    lines.append("connect_timeout = 5")
    lines += ["", "[defaults]", 'user = "root"', f'key_file = "{hosts[0].client_key}"', extra]
    for i, h in enumerate(hosts, start=1):
        lines += ["", "[[host]]", f'name = "n{i}"', f'address = "{h.ip}"']
    path.write_text("\n".join(lines) + "\n")
    return path
