"""The local backend: one Linux network namespace per broker node on a private bridge.

Each node `nK` lives in namespace `<prefix>-nK`, with a veth pair whose inside
end is `eth0` on the bridge `<prefix>-br`. The host side of the bridge carries
the controller's address, so clients on the host reach every node directly.
Namespaces get no default route and the host does not forward, so nothing is
routed out of them. Everything the backend creates is named with the prefix,
which is how `cleanup` finds what a run killed half-way left behind: it ends
the processes inside our namespaces by pid (`ip netns pids`), then deletes the
namespaces, veths and bridge.

Command lists are built by pure functions (`setup_commands`) and run by one
executor. Each node's Remote is a `clusters.local.remote.NetnsRemote`. The
backend's registry record, `BACKEND`, says how to check its options, make it
for a run, and clean up what a killed run left (processes inside our
namespaces, by pid, then the namespaces and links; the broker data directories
under the state directory are the harness's to remove).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import ipaddress
import logging
import os
import shutil
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusters.backend import (
    Backend,
    BackendConfigError,
    BackendError,
    BackendOptions,
    ManagedCluster,
)
from clusters.base import Node, node_named
from clusters.lazyfs import LazyFSError, mount
from clusters.local.layers import Layers, clean_records, not_visible
from clusters.local.remote import NetnsRemote
from clusters.releases import RELEASES, ChrootLauncher, HostLauncher, Launcher, Release
from clusters.remote import RemoteError, run_local
from clusters.rootfs import RootfsError, ensure_rootfs
from clusters.server_home import ServerHomeError, make_home

if TYPE_CHECKING:
    from clusters.backend import LogCollector

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "rmqh"
DEFAULT_SUBNET = "10.213.0.0/24"
HOST_TIMEOUT = 10.0
PR_SET_CHILD_SUBREAPER = 36
# The folder of the run's data folder the nodes' RabbitMQ home is made in (clusters.server_home).
SERVER_HOME = "rabbitmq-home"


@dataclass(frozen=True)
class NetnsPlan:
    """The names and addresses of a local cluster, derived from prefix, subnet and size."""

    prefix: str
    subnet: str
    names: tuple[str, ...]

    @property
    def network(self) -> ipaddress.IPv4Network:
        """Returns the subnet as a network object."""
        return ipaddress.IPv4Network(self.subnet)

    @property
    def bridge(self) -> str:
        """Returns the bridge device name."""
        return f"{self.prefix}-br"

    @property
    def host_ip(self) -> str:
        """Returns the controller's address on the bridge (first host of the subnet)."""
        return str(self.network.network_address + 1)

    def namespace(self, name: str) -> str:
        """Returns the namespace name of a node."""
        return f"{self.prefix}-{name}"

    def veth_host(self, name: str) -> str:
        """Returns the host-side veth name of a node (at most 15 characters)."""
        return f"{self.prefix}-{name}-h"[:15]

    def ip(self, name: str) -> str:
        """Returns a node's address: the subnet's hosts from .11 on."""
        return str(self.network.network_address + 11 + self.names.index(name))


def make_plan(n: int, prefix: str = DEFAULT_PREFIX, subnet: str = DEFAULT_SUBNET) -> NetnsPlan:
    """Takes a node count, prefix and subnet. Returns the plan for nodes n1..nN.

    Raises ValueError for a count that cannot fit or a prefix too long for device names.
    """
    if n < 1:
        raise ValueError(f"a cluster needs at least 1 node, got {n}")
    net = ipaddress.IPv4Network(subnet)
    if net.num_addresses < n + 13:
        raise ValueError(f"subnet {subnet} is too small for {n} nodes")
    if len(prefix) > 6 or not prefix.isalnum():
        raise ValueError(f"prefix {prefix!r} must be 1-6 alphanumeric characters")
    return NetnsPlan(prefix, subnet, tuple(f"n{i}" for i in range(1, n + 1)))


def setup_commands(plan: NetnsPlan) -> list[list[str]]:
    """Takes a plan. Returns the host commands that build the bridge and every node's namespace."""
    plen = plan.network.prefixlen
    cmds: list[list[str]] = [
        ["ip", "link", "add", plan.bridge, "type", "bridge"],
        ["ip", "addr", "add", f"{plan.host_ip}/{plen}", "dev", plan.bridge],
        ["ip", "link", "set", plan.bridge, "up"],
    ]
    for name in plan.names:
        ns, vh = plan.namespace(name), plan.veth_host(name)
        inner = f"{plan.prefix}-{name}-i"[:15]
        cmds += [
            ["ip", "netns", "add", ns],
            ["ip", "link", "add", vh, "type", "veth", "peer", "name", inner],
            ["ip", "link", "set", inner, "netns", ns],
            ["ip", "netns", "exec", ns, "ip", "link", "set", inner, "name", "eth0"],
            ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{plan.ip(name)}/{plen}", "dev", "eth0"],
            ["ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up"],
            ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"],
            ["ip", "link", "set", vh, "master", plan.bridge],
            ["ip", "link", "set", vh, "up"],
        ]
    return cmds


def list_namespaces(prefix: str) -> list[str]:
    """Returns the existing namespaces whose names start with `<prefix>-`."""
    out = run_local(["ip", "netns", "list"], timeout=HOST_TIMEOUT).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(f"{prefix}-"))


def namespace_pids(ns: str) -> list[int]:
    """Returns the pids of the processes running inside a namespace."""
    res = run_local(["ip", "netns", "pids", ns], timeout=HOST_TIMEOUT, check=False)
    return [int(p) for p in res.stdout.split() if p.isdigit()]


def kill_pids(pids: Sequence[int], sig: int = signal.SIGKILL) -> None:
    """Sends a signal to each pid, ignoring those already gone."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def reap(pids: Sequence[int], timeout: float = 2.0) -> None:
    """Collects the exit status of those pids that are our children, so no zombie lingers.

    Pids that are not our children are skipped; waits at most `timeout` seconds.
    """
    left = set(pids)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        for pid in list(left):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                left.discard(pid)  # not ours, or already reaped
                continue
            if done:
                left.discard(pid)
        if left:
            time.sleep(0.05)


def become_subreaper() -> bool:
    """Makes this process the reaper of its orphaned descendants (Linux prctl).

    A broker's beam outlives the script that started it; as our descendant it is
    then reaped by us when killed, rather than lingering as a zombie. Returns
    whether the call succeeded.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def cleanup(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Removes everything a local cluster with this prefix left: processes, namespaces, links.

    Processes are ended by pid, and only those inside our namespaces. Safe to
    call when nothing is left. Returns a list of what was removed, for the log.
    """
    removed: list[str] = []
    killed: list[int] = []
    for ns in list_namespaces(prefix):
        for _ in range(50):
            pids = namespace_pids(ns)
            if not pids:
                break
            kill_pids(pids)
            killed += pids
            removed += [f"pid {p} in {ns}" for p in pids]
            time.sleep(0.1)
        run_local(["ip", "netns", "del", ns], timeout=HOST_TIMEOUT, check=False)
        removed.append(f"namespace {ns}")
    reap(killed)
    links = run_local(["ip", "-o", "link", "show"], timeout=HOST_TIMEOUT).stdout
    for line in links.splitlines():
        parts = line.split(":")
        if len(parts) < 2:
            continue
        dev = parts[1].strip().split("@")[0]
        if dev.startswith(f"{prefix}-"):
            run_local(["ip", "link", "del", dev], timeout=HOST_TIMEOUT, check=False)
            removed.append(f"link {dev}")
    if removed:
        log.info("cleaned up %d leftovers of prefix %s", len(removed), prefix)
    return removed


class NetnsCluster:
    """A cluster of namespaces on a bridge. Build with `create`, end with `destroy`.

    The local backend's ManagedCluster (its record: BACKEND, below): the brokers' files live under
    `data_root` on this machine's filesystem.
    """

    kind = "local"

    def __init__(self, plan: NetnsPlan, data_root: str = "", layers: Layers | None = None) -> None:
        self.plan = plan
        self.data_root = data_root
        self._mountpoint: str | None = None
        # The unsynced layers under the nodes' data directories (backend.unsynced_fs), if asked.
        self.layers = layers
        self._launcher: Launcher | None = None
        self.nodes: tuple[Node, ...] = tuple(
            Node(name, plan.ip(name), NetnsRemote(name, plan.namespace(name)))
            for name in plan.names
        )

    def node(self, name: str) -> Node:
        """Returns the node called `name`; KeyError when there is none."""
        return node_named(self.nodes, name)

    def create(self) -> None:
        """Removes leftovers of this prefix, then builds the bridge and namespaces.

        Raises RemoteError when a command fails (after undoing what was built).
        """
        become_subreaper()
        cleanup(self.plan.prefix)
        try:
            for cmd in setup_commands(self.plan):
                run_local(cmd, timeout=HOST_TIMEOUT)
        except RemoteError:
            cleanup(self.plan.prefix)
            raise
        if self.layers is not None:
            self._mount_layers(self.layers)
        log.info(
            "created %d namespaces on %s (%s)",
            len(self.nodes), self.plan.bridge, self.plan.subnet,
        )

    def launcher(self, release: Release) -> Launcher:
        """Returns how broker commands reach the release's binaries: this host's packages, or a
        Debian root filesystem (built on first use, clusters.rootfs) entered with chroot, the
        run's data folder bound at its own path inside. Either way the nodes run from a home of
        the applications they use (clusters.server_home), made in the data folder. Raises
        BackendError when the tree cannot be built or has no broker."""
        data = os.path.abspath(self.data_root)
        os.makedirs(data, exist_ok=True)
        home = f"{data}/{SERVER_HOME}"
        if release.rootfs is None:
            self._make_home(Path("/"), home)
            return HostLauncher(home)
        t0 = time.monotonic()
        try:
            root = ensure_rootfs(release.rootfs)
        except RootfsError as e:
            raise BackendError(str(e)) from e
        log.info("RabbitMQ %s runs from %s (ready in %.1f s)", release.line, root,
                 time.monotonic() - t0)
        # Node names are addresses, but the broker's scripts look up this host's name.
        shutil.copyfile("/etc/hosts", root / "etc" / "hosts")
        self._make_home(root, home)
        self._mountpoint = f"{root}{data}"  # made by the launcher; removed by destroy
        # A bind is not recursive: each layer is bound at its own path after the data folder.
        layered = tuple(self.layers.points.values()) if self.layers is not None else ()
        self._launcher = ChrootLauncher(str(root), (data, *layered), home)
        return self._launcher

    def _mount_layers(self, layers: Layers) -> None:
        """Mounts the unsynced layers and checks that every node's broker commands see its data
        directory on one. Raises BackendError, nothing left mounted nor built, when not."""
        try:
            layers.mount_all()
            blind = not_visible(self.nodes, layers.points, self._launcher)
        except (LazyFSError, RemoteError) as e:
            blind = [str(e)]
        if blind:
            layers.unmount_all()
            cleanup(self.plan.prefix)
            raise BackendError("the unsynced layer is not under every node's data directory: "
                               + "; ".join(blind))
        log.info("unsynced layers mounted on %s", ", ".join(layers.points.values()))

    @property
    def unsynced(self) -> bool:
        """Returns whether the nodes' data directories are on unsynced layers."""
        return self.layers is not None

    def power_loss(self, node: Node) -> dict[str, Any]:
        """Takes a node whose broker is down. Drops its layer's unsynced writes. Returns what was
        dropped (clusters.base.UnsyncedDisks). Raises LazyFSError without the layer."""
        if self.layers is None:
            raise LazyFSError("this cluster has no unsynced layer (backend.unsynced_fs)")
        return self.layers.power_loss(node.name)

    def settle(self, node: Node) -> dict[str, Any]:
        """Takes a node. Makes everything its layer holds unsynced durable, as sync(2) would.
        Returns what was written back (clusters.base.UnsyncedDisks). Raises LazyFSError without
        the layer."""
        if self.layers is None:
            raise LazyFSError("this cluster has no unsynced layer (backend.unsynced_fs)")
        return self.layers.settle(node.name)

    @staticmethod
    def _make_home(tree: Path, home: str) -> None:
        try:
            apps = make_home(tree, Path(home))
        except ServerHomeError as e:
            raise BackendError(str(e)) from e
        log.debug("nodes run from %s: %d applications (%s)", home, len(apps), ", ".join(apps))

    def fetch_logs(self, broker: LogCollector, dest: Path) -> None:
        """Copies the brokers' logs into dest/<node>/ (they are files on this machine), and
        with the unsynced layers each one's daemon log (dest/<node>/lazyfs.log)."""
        broker.collect_logs(dest)
        if self.layers is not None:
            self.layers.copy_logs(dest)

    def destroy(self) -> None:
        """Ends every process in our namespaces by pid and removes namespaces and links, unmounts
        the unsynced layers, and removes the empty folder a root filesystem's data bind was
        mounted on."""
        cleanup(self.plan.prefix)
        if self.layers is not None:  # after the brokers: nothing holds a file on them now
            for line in self.layers.unmount_all():
                log.info("lazyfs: %s", line)
        if self._mountpoint:
            with contextlib.suppress(OSError):  # not empty or still mounted: leave it
                os.rmdir(self._mountpoint)


def check(options: BackendOptions, nodes: int) -> None:
    """Takes options and a node count. Raises BackendConfigError when the plan cannot be made."""
    if options.inventory is not None:
        raise BackendConfigError("--inventory is an option of the ssh backend, not local")
    try:
        make_plan(nodes)
    except ValueError as e:
        raise BackendConfigError(str(e)) from e


def make(options: BackendOptions, nodes: int, run_id: str, state_dir: Path) -> ManagedCluster:
    """Takes options, a node count, the run's id and the state directory. Returns the local
    cluster (not yet created), its broker data under <state_dir>/cluster/<run_id>, on an unsynced
    layer per node when `options.unsynced_fs` asks for it (clusters.local.layers), writing back
    as `options.writeback_expire_s` says."""
    plan = make_plan(nodes)
    # The real path: the kernel names a mount by it, so a state directory reached through a
    # symlink would hide the layers from the check that each node sees its own (not_visible).
    data_root = os.path.realpath(state_dir / "cluster" / run_id)
    mounter = functools.partial(mount, writeback_expire_s=options.writeback_expire_s)
    layers = (Layers(data_root, plan.names, (state_dir, run_id), mounter)
              if options.unsynced_fs else None)
    return NetnsCluster(plan, data_root=data_root, layers=layers)


def clean(state_dir: Path) -> list[str]:
    """Takes the state directory. Removes what local runs left: the processes in namespaces
    found by name, then the unsynced layers' daemons the run records name (by pid) and their
    mounts. Returns lines saying what went."""
    return [f"local: {x}" for x in cleanup(DEFAULT_PREFIX) + clean_records(state_dir)]


BACKEND = Backend(check=check, make=make, cleanup=clean, lines=tuple(RELEASES),
                  unsynced_fs=True)
