"""The SSH backend: broker nodes on hosts named in an inventory, reached with paramiko.

`SshHostsCluster` makes one `SshRemote` per inventory host (wrapped in
`SudoRemote` when the host asks for sudo, and in `TrackingRemote` so every
pid spawned there is recorded), checks every host before anything starts
(`create`: login and host key, the tools the harness runs, rabbitmq-server
installed or installed on request, the installed version's release line the one
asked for, iptables usable), and removes on `destroy`
what the run left on each host: its processes, by pid and only when
/proc/<pid>/environ shows the node's own HOME; our iptables chains; the run's
data directory. A run killed half-way leaves its record (clusters.state);
`clean` reads it and does the same.

The brokers run as the SSH user with HOME in the run's data directory, under
`<data_dir>/rmqh-<run>/<node>/`, so several nodes on one machine never share
files. Node logs come back over SFTP (`RabbitBroker.collect_logs` reads them
through the Remote).
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from clusters.backend import (
    Backend,
    BackendConfigError,
    BackendError,
    BackendOptions,
    LogCollector,
    ManagedCluster,
)
from clusters.base import Node, node_named
from clusters.rabbitmq import RABBIT_BIN, NodePaths
from clusters.releases import HostLauncher, Launcher, Release, line_of
from clusters.remote import Remote, RemoteError
from clusters.ssh.inventory import Inventory, InventoryHost, load_inventory, resolve_ipv4
from clusters.state import RunRecord
from clusters.wrap import SudoRemote, TrackingRemote

if TYPE_CHECKING:
    from clusters.ssh.remote import SshRemote

log = logging.getLogger(__name__)

KIND: Final = "ssh"
PROBE_TIMEOUT = 20.0
INSTALL_TIMEOUT = 900.0
CLEAN_TIMEOUT = 15.0
# What the harness runs on a host besides the broker (coreutils, util-linux, procps, grep).
TOOLS: Final = ("timeout", "setsid", "nohup", "ls", "mkdir", "rm", "grep", "sh")
# The iptables chains the nemesis makes (nemesis/commands.py: CHAIN_IN, CHAIN_OUT, HOOKS).
CHAIN_HOOKS: Final = (("INPUT", "RMQH-IN"), ("OUTPUT", "RMQH-OUT"))
_MISSING_SCRIPT = 'for t in "$@"; do command -v "$t" >/dev/null 2>&1 || echo "$t"; done'

RemoteFactory = Callable[[InventoryHost, Inventory, Any], Remote]


# ---------------------------------------------------------------- pure builders


def missing_tools_argv(tools: Sequence[str]) -> list[str]:
    """Takes tool names. Returns the argv that prints, one a line, those not on the host's PATH."""
    return ["sh", "-c", _MISSING_SCRIPT, "sh", *tools]


def version_probes() -> list[list[str]]:
    """Returns the commands that say which RabbitMQ a host has installed, in the order asked:
    Debian's package database (its state, then its version: "installed 4.0.5-1"), then the
    broker's own CLI (an install not from a package)."""
    return [["dpkg-query", "-W", "--showformat=${db:Status-Status} ${Version}",
             "rabbitmq-server"],
            [f"{RABBIT_BIN}/rabbitmqctl", "version"]]


def version_said(argv: Sequence[str], stdout: str) -> str | None:
    """Takes a version probe and what it printed. Returns the version it names, or None (a
    package removed but its configuration kept names no installed version)."""
    said = stdout.strip()
    if argv[0] == "dpkg-query":
        state, _sp, said = said.partition(" ")
        if state != "installed":
            return None
    last = said.splitlines()[-1].strip() if said else ""
    return last if line_of(last) is not None else None


def iptables_teardown_commands() -> list[list[str]]:
    """Returns the commands removing our chains and the jumps to them (absence tolerated)."""
    ipt = ["iptables", "-w", "5"]
    return ([[*ipt, "-D", hook, "-j", chain] for hook, chain in CHAIN_HOOKS]
            + [[*ipt, "-F", chain] for _, chain in CHAIN_HOOKS]
            + [[*ipt, "-X", chain] for _, chain in CHAIN_HOOKS])


def ours_argv(pid: int, home: str) -> list[str]:
    """Takes a pid and a node's HOME. Returns the argv that exits 0 only when that process runs
    with that HOME (so a pid reused by someone else's process is never signalled)."""
    return ["grep", "-qzxF", f"HOME={home}", f"/proc/{pid}/environ"]


def kill_argv(pid: int) -> list[list[str]]:
    """Takes a pid we spawned (a session leader, by `setsid`). Returns the argvs that SIGKILL its
    process group and itself."""
    return [["kill", "-KILL", "--", f"-{pid}"], ["kill", "-KILL", str(pid)]]


def data_root_for(inventory: Inventory, run_id: str) -> str:
    """Takes the inventory and a run id. Returns the run's directory on every host."""
    return posixpath.join(inventory.data_dir, f"rmqh-{run_id}")


# ---------------------------------------------------------------- hosts


def ssh_remote(host: InventoryHost, inventory: Inventory, policy: Any) -> SshRemote:
    """Takes an inventory host, the inventory and a missing-host-key policy. Returns its
    SshRemote (not yet connected)."""
    from clusters.ssh.remote import SshRemote

    return SshRemote(host.name, host.address, user=host.user, port=host.port,
                     key_filename=host.key_file, known_hosts=inventory.known_hosts,
                     connect_timeout=inventory.connect_timeout, host_key_policy=policy)


def _policy(inventory: Inventory, accept_new: bool) -> Any:
    from clusters.ssh.hostkeys import default_known_hosts, policy_for

    path = Path(inventory.known_hosts) if inventory.known_hosts else default_known_hosts()
    return policy_for(path, accept_new)


def check_host(remote: Remote, host: InventoryHost, install: bool,
               release: Release | None = None) -> None:
    """Takes a node's Remote, its inventory host, whether to install rabbitmq-server and the
    release line the run asked for (None: not checked). Checks login, the tools, the broker and
    its release line (`check_version`) and iptables. Raises BackendError naming the host."""
    def fail(why: str) -> BackendError:
        return BackendError(f"{host.name} ({host.where}): {why}")

    try:
        missing = remote.run(missing_tools_argv(TOOLS), timeout=PROBE_TIMEOUT).stdout.split()
    except RemoteError as e:
        raise fail(str(e)) from e
    # kill is also a shell builtin, which `command -v` finds; the broker's signals need the program.
    if remote.run(["kill", "-l"], timeout=PROBE_TIMEOUT, check=False).returncode == 127:
        missing.append("kill (procps)")
    if missing:
        raise fail(f"missing tools: {', '.join(missing)}")
    server = f"{RABBIT_BIN}/rabbitmq-server"
    if not remote.run(["test", "-x", server], timeout=PROBE_TIMEOUT, check=False).ok:
        if not install:
            raise fail(f"rabbitmq-server is not installed ({server} missing): install Debian's "
                       "rabbitmq-server there, or pass --install-rabbitmq")
        install_rabbitmq(remote, host)
    if release is not None:
        check_version(remote, host, release)
    if remote.run(missing_tools_argv(["epmd"]), timeout=PROBE_TIMEOUT).stdout.strip():
        raise fail("epmd (Erlang) is not on the PATH")
    ipt = remote.run(["iptables", "-w", "5", "-n", "-L", "OUTPUT"], timeout=PROBE_TIMEOUT,
                     check=False)
    if not ipt.ok:
        hint = "" if host.sudo else " (set sudo = true for this host, or log in as root)"
        raise fail(f"iptables does not work for {host.user}{hint}: "
                   f"{(ipt.stderr or ipt.stdout).strip()[-300:]}")


def installed_version(remote: Remote) -> str | None:
    """Takes a node's Remote. Returns the RabbitMQ version installed there as the first of
    `version_probes` that names one says it ("4.0.5-1", "3.10.8"), or None."""
    for argv in version_probes():
        res = remote.run(argv, timeout=PROBE_TIMEOUT, check=False)
        said = version_said(argv, res.stdout) if res.ok else None
        if said is not None:
            return said
    return None


def check_version(remote: Remote, host: InventoryHost, release: Release) -> str:
    """Takes a node's Remote, its inventory host and the release line asked for (--rabbitmq).
    Returns the version installed there. Raises BackendError naming the host when it cannot be
    told, or is of another line: the hosts' packages are the release, and a run must not test
    another one than it says (nothing has started on any host then)."""
    got = installed_version(remote)
    where = f"{host.name} ({host.where})"
    if got is None:
        raise BackendError(f"{where}: cannot tell which RabbitMQ is installed (neither "
                           f"dpkg-query rabbitmq-server nor rabbitmqctl version named a "
                           f"version), so --rabbitmq {release.line} cannot be checked")
    if line_of(got) != release.line:
        raise BackendError(f"{where} has RabbitMQ {got} installed, of the {line_of(got)} line, "
                           f"but --rabbitmq {release.line} was asked for: install "
                           f"{release.line} there, or run with --rabbitmq {line_of(got)}")
    log.info("%s: RabbitMQ %s installed (--rabbitmq %s)", host.name, got, release.line)
    return got


def install_rabbitmq(remote: Remote, host: InventoryHost) -> None:
    """Takes a node's Remote and host. Installs Debian's rabbitmq-server and stops the system
    broker Debian starts (ours runs under the harness). Raises BackendError naming the host."""
    log.info("%s: installing rabbitmq-server (apt-get)", host.name)
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"],
                 ["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                  "rabbitmq-server"]):
        res = remote.run(argv, timeout=INSTALL_TIMEOUT, env=env, check=False)
        if not res.ok:
            raise BackendError(f"{host.name} ({host.where}): {' '.join(argv)} failed: "
                               f"{(res.stderr or res.stdout).strip()[-500:]}")
    res = remote.run(["systemctl", "disable", "--now", "rabbitmq-server"], timeout=120,
                     check=False)
    if not res.ok:
        log.warning("%s: could not stop the system rabbitmq-server: %s", host.name,
                    res.stderr.strip()[-200:])


def clean_host(remote: Remote, node: str, data_root: str, pids: Sequence[int]) -> list[str]:
    """Takes a node's Remote, its name, the run's data directory and the pids spawned there.
    Kills those of our processes still running (and the broker named by its pid file), removes
    our iptables chains and the data directory. Returns lines saying what went."""
    paths = NodePaths(posixpath.join(data_root, node))
    candidates = list(dict.fromkeys(pids))
    text = remote.read_file(paths.pid_file)
    if text and text.strip().isdigit():
        candidates.append(int(text.strip()))
    removed = []
    for pid in dict.fromkeys(candidates):
        if remote.run(ours_argv(pid, paths.home), timeout=CLEAN_TIMEOUT, check=False).ok:
            for argv in kill_argv(pid):
                remote.run(argv, timeout=CLEAN_TIMEOUT, check=False)
            removed.append(f"{node}: pid {pid}")
    for argv in iptables_teardown_commands():
        if remote.run(argv, timeout=CLEAN_TIMEOUT, check=False).ok and "-X" in argv:
            removed.append(f"{node}: iptables chain {argv[-1]}")
    if posixpath.basename(data_root).startswith("rmqh-"):
        remote.run(["rm", "-rf", "--", data_root], timeout=60, check=False)
    return removed


def _parallel(fn: Callable[[Node], Any], nodes: Sequence[Node]) -> list[Any]:
    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as ex:
        return list(ex.map(fn, nodes))


# ---------------------------------------------------------------- the cluster


class SshHostsCluster:
    """Broker nodes on SSH hosts (the ssh backend's ManagedCluster)."""

    kind = KIND

    def __init__(self, inventory: Inventory, nodes: int, run_id: str, state_dir: Path, *,
                 accept_new: bool = False, install: bool = False,
                 remote_factory: RemoteFactory | None = None) -> None:
        self.inventory = inventory
        self.hosts = inventory.first(nodes)
        self.run_id = run_id
        self.state_dir = state_dir
        self.accept_new = accept_new
        self.install = install
        self.data_root = data_root_for(inventory, run_id)
        factory = remote_factory or ssh_remote
        policy = _policy(inventory, accept_new) if remote_factory is None else None
        self._raw = {h.name: factory(h, inventory, policy) for h in self.hosts}
        self._record: RunRecord | None = None
        # The release the run asked for (`launcher`, called before `create`): create refuses
        # hosts with another installed.
        self._release: Release | None = None
        built = []
        for h in self.hosts:
            inner = self._raw[h.name]
            remote = TrackingRemote(SudoRemote(inner) if h.sudo else inner, self._spawned)
            built.append(Node(h.name, resolve_ipv4(h), remote))
        self.nodes: tuple[Node, ...] = tuple(built)

    def node(self, name: str) -> Node:
        """Returns the node called `name`; KeyError when there is none."""
        return node_named(self.nodes, name)

    def _spawned(self, node: str, pid: int) -> None:
        if self._record is not None:
            self._record.add_pid(node, pid)

    def create(self) -> None:
        """Checks every host (in parallel; the installed RabbitMQ's release line too, once
        `launcher` said which the run asked for), records the run for cleanup, makes the data
        directories. Raises BackendError naming every host that cannot serve; nothing is
        started on any host then."""
        hosts = {h.name: h for h in self.hosts}

        def probe(n: Node) -> str | None:
            try:
                check_host(n.remote, hosts[n.name], self.install, self._release)
                return None
            except (BackendError, RemoteError) as e:
                return str(e)

        problems = [p for p in _parallel(probe, self.nodes) if p]
        if problems:
            self._close_all("the SSH backend could not be set up")
            raise BackendError("SSH hosts not usable: " + "; ".join(problems))
        self._record = RunRecord.create(self.state_dir, KIND, self.run_id, {
            "inventory": self.inventory.path, "accept_new": self.accept_new,
            "data_root": self.data_root, "nodes": [h.name for h in self.hosts],
        })
        for n in self.nodes:
            n.remote.run(["mkdir", "-p", self.data_root], timeout=PROBE_TIMEOUT)
        log.info("ssh cluster: %s", ", ".join(f"{h.name}={h.where}" for h in self.hosts))

    def launcher(self, release: Release) -> Launcher:
        """Takes the release line asked for. Returns the hosts' own binaries (the hosts' packages
        are the release): `create` then refuses a host with another line installed, before
        anything starts; the run checks again the version the nodes report."""
        self._release = release
        return HostLauncher()

    def fetch_logs(self, broker: LogCollector, dest: Path) -> None:
        """Copies the brokers' logs from every host over SFTP into dest/<node>/."""
        broker.collect_logs(dest)

    def destroy(self) -> None:
        """Ends our processes on every host by pid, removes our chains and the data directory,
        then the run's record, and closes the connections."""
        record = self._record
        if record is not None:
            def clean(n: Node) -> list[str]:
                try:
                    return clean_host(n.remote, n.name, self.data_root, record.pids(n.name))
                except RemoteError as e:
                    log.warning("%s: cleaning up: %s", n.name, e)
                    return [f"{n.name}: FAILED {e}"]
            lines = [x for xs in _parallel(clean, self.nodes) for x in xs]
            log.info("ssh teardown: %s", "; ".join(lines) or "nothing left")
            if not any("FAILED" in x for x in lines):
                record.remove()
            self._record = None
        self._close_all("the cluster was destroyed")

    def _close_all(self, reason: str) -> None:
        for n in self.nodes:
            if isinstance(n.remote, TrackingRemote):
                n.remote.close(reason)
        for r in self._raw.values():
            close = getattr(r, "close", None)
            if callable(close):
                close()


# ---------------------------------------------------------------- registry record


def check(options: BackendOptions, nodes: int) -> None:
    """Takes options and a node count. Raises BackendConfigError (InventoryError) when there is
    no inventory, it is wrong, or it has fewer hosts than nodes. Reaches no host."""
    if not options.inventory:
        raise BackendConfigError("the ssh backend needs --inventory FILE (see README, Backends)")
    inventory = load_inventory(options.inventory)
    for h in inventory.first(nodes):
        resolve_ipv4(h)


def make(options: BackendOptions, nodes: int, run_id: str, state_dir: Path) -> ManagedCluster:
    """Takes options, a node count, the run's id and the state directory. Returns the SSH
    cluster, not yet created."""
    if not options.inventory:
        raise BackendConfigError("the ssh backend needs --inventory FILE")
    return SshHostsCluster(load_inventory(options.inventory), nodes, run_id, state_dir,
                           accept_new=options.accept_new_host_keys,
                           install=options.install_rabbitmq)


def clean(state_dir: Path, remote_factory: RemoteFactory | None = None) -> list[str]:
    """Takes the state directory. For each SSH run record left there, ends that run's processes
    on its hosts, removes our chains and its data directory, then the record. Returns lines
    saying what went (or why a record stays)."""
    out: list[str] = []
    for rec in RunRecord.find(state_dir, KIND):
        info = rec.info
        try:
            inventory = load_inventory(info.get("inventory", ""))
        except BackendConfigError as e:
            out.append(f"ssh: run {rec.data.get('run_id')} not cleaned: {e}")
            continue
        factory = remote_factory or ssh_remote
        policy = (_policy(inventory, bool(info.get("accept_new")))
                  if remote_factory is None else None)
        names = set(info.get("nodes") or [])
        failed = False
        for h in inventory.hosts:
            if h.name not in names:
                continue
            raw = factory(h, inventory, policy)
            remote = SudoRemote(raw) if h.sudo else raw
            try:
                lines = clean_host(remote, h.name, str(info.get("data_root")),
                                   rec.pids(h.name))
                out += [f"ssh: {x}" for x in lines]
            except RemoteError as e:
                failed = True
                out.append(f"ssh: {h.name} ({h.where}) not cleaned: {e}")
            finally:
                close = getattr(raw, "close", None)
                if callable(close):
                    close()
        if not failed:
            rec.remove()
            out.append(f"ssh: record of run {rec.data.get('run_id')}")
    return out


BACKEND = Backend(check=check, make=make, cleanup=clean)
