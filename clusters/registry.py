"""The cluster backends by name, and the few functions the runner, the CLI and `make clean` call.

Each backend is a folder, `clusters/<name>/`: `cluster.py` holds its cluster and its `Backend`
record (check, make, cleanup), `remote.py` its Remote. Adding one is such a folder and one
line in BACKENDS; nothing else names a backend. The SDKs a backend
needs (paramiko, docker) are imported only when that backend is used.

- `check_options(options, nodes)`: at option time, reaching no host; raises
  BackendConfigError (a ValueError) for what cannot make a cluster.
- `make_cluster(options, nodes, run_id, state_dir)`: the run's cluster, not yet created.
- `clean_leftovers(state_dir)`: every backend's cleanup, for `make clean`.

The CLI's backend flags are rows of harness.options's table (`backend.kind`, ...).
"""

from __future__ import annotations

import logging
from pathlib import Path

from clusters.backend import (
    Backend,
    BackendConfigError,
    BackendOptions,
    ManagedCluster,
)
from clusters.docker import cluster as docker
from clusters.local import cluster as local
from clusters.ssh import cluster as ssh

log = logging.getLogger(__name__)

BACKENDS: dict[str, Backend] = {
    "local": local.BACKEND,
    "ssh": ssh.BACKEND,
    "docker": docker.BACKEND,
}


def backend(kind: str) -> Backend:
    """Takes a backend name. Returns its record. Raises BackendConfigError for an unknown one."""
    try:
        return BACKENDS[kind]
    except KeyError:
        raise BackendConfigError(
            f"unknown backend {kind!r}; known: {', '.join(BACKENDS)}") from None


def check_options(options: BackendOptions, nodes: int, line: str | None = None) -> None:
    """Takes backend options, the node count and the RabbitMQ release line asked for. Raises
    BackendConfigError when they cannot make a cluster (unknown backend, missing or malformed
    inventory, too few hosts, bad subnet, a release the backend cannot provide)."""
    be = backend(options.kind)
    if line is not None and be.lines is not None and line not in be.lines:
        raise BackendConfigError(f"the {options.kind} backend provides RabbitMQ "
                                 f"{' and '.join(be.lines)}, not {line} (--rabbitmq)")
    if options.kind != "ssh" and (options.accept_new_host_keys or options.install_rabbitmq):
        raise BackendConfigError("--accept-new-host-keys and --install-rabbitmq are options of "
                                 "the ssh backend")
    if options.unsynced_fs and not be.unsynced_fs:
        raise BackendConfigError(
            f"the {options.kind} backend cannot put the nodes' data directories on the unsynced "
            f"layer a power loss needs (backend.unsynced_fs): the layer is a FUSE mount on this "
            f"machine, and the {options.kind} backend's brokers "
            f"{'run on other hosts' if options.kind == 'ssh' else 'keep their data elsewhere'}; "
            f"use --backend local")
    if not options.settle_layers and not options.unsynced_fs:
        raise BackendConfigError(
            "settle_layers (--young-cluster: the nodes' layers left unsettled before the "
            "faults) needs the unsynced layer, and this test's nodes are on none (no power-loss "
            "fault, no --unsynced-fs): there is nothing to settle")
    be.check(options, nodes)


def make_cluster(options: BackendOptions, nodes: int, run_id: str,
                 state_dir: Path) -> ManagedCluster:
    """Takes backend options, the node count, the run's id (its directory name) and the state
    directory. Returns the backend's cluster, not yet created."""
    return backend(options.kind).make(options, nodes, run_id, state_dir)


def clean_leftovers(state_dir: Path) -> list[str]:
    """Takes the state directory. Runs every backend's cleanup (a backend that fails is logged
    and reported, the others still run). Returns lines saying what went."""
    out: list[str] = []
    for kind, be in BACKENDS.items():
        try:
            out += be.cleanup(state_dir)
        except Exception as e:  # one backend's trouble must not keep the others' debris
            log.exception("cleanup of the %s backend failed", kind)
            out.append(f"{kind}: cleanup failed: {e}")
    return out
