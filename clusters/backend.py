"""What a cluster backend is: its options, the lifecycle protocol it implements, its errors.

A backend (local network namespaces, SSH hosts, Docker containers) makes a
`ManagedCluster`: nodes with a Remote each, provisioned by `create`, torn down
by `destroy`, with `fetch_logs` bringing the brokers' logs into the run
directory. Each backend is one `Backend` record in `clusters.registry`: how to
check its options, make its cluster, and clean up what a killed run left.

`BackendOptions` is the frozen part of a test spec that chooses and configures
the backend; it is serialised into test.json, so it never holds a secret (key
files and known_hosts are paths; the Erlang cookie is drawn per cluster).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from clusters.base import Cluster
from clusters.errors import ClusterError
from clusters.releases import Launcher, Release
from clusters.remote import RemoteError

DEFAULT_DOCKER_IMAGE: Final = "rmqh/rabbitmq:3.10-local"
DEFAULT_DOCKER_NETWORK: Final = "rmqh-net"
DEFAULT_DOCKER_SUBNET: Final = "10.215.0.0/24"


@dataclass(frozen=True)
class BackendOptions:
    """Which backend runs the brokers, and its options (test.json's `spec.backend`).

    kind: "local" (network namespaces on this machine), "ssh" or "docker".
    inventory: the SSH inventory file (TOML), an absolute path; ssh only.
    accept_new_host_keys: trust and record host keys not yet in known_hosts (a changed
      key is still refused); ssh only.
    install_rabbitmq: install Debian's rabbitmq-server on hosts that lack it; ssh only.
    docker_image: the broker image, which must be present locally (nothing is pulled).
    docker_network: the user-defined network the containers join.
    docker_subnet: its subnet; nodes get .11, .12, ... of it.
    unsynced_fs: each node's broker data directory on a layer that forgets unsynced writes
      (clusters.lazyfs), which a power-loss fault needs (and asks for: TestSpec.resolved);
      only backends whose record says they can host it (local).
    writeback_expire_s: on that layer, the seconds after which Linux's background writeback
      makes unsynced data durable (clusters.lazyfs.model: dirty_expire_centisecs, written back
      at the flusher's 5 s pass, durable at the next journal commit); 30, Linux's default, or
      None: never (the worst case: an unsynced byte is lost however old it is).
    settle_layers: on that layer, make everything the nodes wrote durable once the cluster is
      set up, just before the main phase (LazyFS.sync, as sync(2) would; the runner's
      `settle_layers`), as if the cluster had run long enough for the kernel's writeback: a
      power loss then tests what the broker wrote since, not the files it wrote at setup without
      fsync. False (`--young-cluster`): the faults find the setup's writes inside the writeback
      window on purpose. A test.json written before this field (2026-11-28) reads False for a
      run on the layer: those runs were not settled (harness.spec.spec_from_dict).
    """

    kind: str = "local"
    inventory: str | None = None
    accept_new_host_keys: bool = False
    install_rabbitmq: bool = False
    docker_image: str = DEFAULT_DOCKER_IMAGE
    docker_network: str = DEFAULT_DOCKER_NETWORK
    docker_subnet: str = DEFAULT_DOCKER_SUBNET
    unsynced_fs: bool = False
    writeback_expire_s: float | None = 30.0
    settle_layers: bool = True


class BackendConfigError(ClusterError, ValueError):
    """Backend options that cannot make a cluster (unknown backend, bad or missing inventory)."""


class BackendError(RemoteError):
    """A backend could not provide its cluster: a host unreachable or refused, the Docker daemon
    down, an image missing. The message names the host or the cause."""


class LogCollector(Protocol):
    """What `fetch_logs` needs of a broker: copying each node's logs into a directory."""

    def collect_logs(self, dest: Path) -> None:
        """Copies each node's logs and config into dest/<node>/."""
        ...


class ManagedCluster(Cluster, Protocol):
    """A cluster that owns its lifecycle. `nodes` (and each node's `ip`, the address peers and
    clients use, and `remote`) are known before `create`, so a broker and workload can be
    built around them first."""

    kind: str
    data_root: str

    def create(self) -> None:
        """Provisions the nodes. Raises BackendError (after undoing what was made) when it
        cannot; nothing of the cluster is left running then."""
        ...

    def fetch_logs(self, broker: LogCollector, dest: Path) -> None:
        """Brings each node's broker logs (and what else the backend keeps) into dest/<node>/."""
        ...

    def launcher(self, release: Release) -> Launcher:
        """Takes the release line the run asked for. Returns how broker commands reach its
        binaries, first building what the backend needs for it (a root filesystem). Raises
        BackendError when it cannot provide that release."""
        ...

    def destroy(self) -> None:
        """Removes everything `create` and the run made: processes, rules, containers, data."""
        ...


MakeCluster = Callable[[BackendOptions, int, str, Path], ManagedCluster]


@dataclass(frozen=True)
class Backend:
    """One backend of the registry.

    check(options, nodes): raises BackendConfigError for options that cannot make a cluster
      of that many nodes (reads local files only; reaches no host).
    make(options, nodes, run_id, state_dir): returns the cluster, not yet created.
    cleanup(state_dir): removes what runs of this backend left; returns lines saying what.
    lines: the RabbitMQ release lines it can provide (clusters.releases), or None when the hosts
      or image decide (the run compares the version the nodes report with the one asked for).
    unsynced_fs: whether it can put each node's data directory on the unsynced layer
      (BackendOptions.unsynced_fs): a FUSE mount on this machine.
    """

    check: Callable[[BackendOptions, int], None]
    make: MakeCluster
    cleanup: Callable[[Path], list[str]]
    lines: tuple[str, ...] | None = None
    unsynced_fs: bool = False
