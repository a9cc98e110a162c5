"""The cluster backends by name, and the few functions the runner, the CLI and `make clean` call.

Each backend is a folder, `clusters/<name>/`: `cluster.py` holds its cluster and its `Backend`
record (check, make, cleanup), `remote.py` its Remote. Adding one is such a folder and one
line in BACKENDS; nothing else names a backend. The SDKs a backend
needs (paramiko, docker) are imported only when that backend is used.

- `check_options(options, nodes)`: at option time, reaching no host; raises
  BackendConfigError (a ValueError) for what cannot make a cluster.
- `make_cluster(options, nodes, run_id, state_dir)`: the run's cluster, not yet created.
- `clean_leftovers(state_dir)`: every backend's cleanup, for `make clean`.
- `add_backend_options(parser)` / `options_from_args(namespace)`: the CLI's flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from clusters.backend import (
    DEFAULT_DOCKER_IMAGE,
    DEFAULT_DOCKER_NETWORK,
    DEFAULT_DOCKER_SUBNET,
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


def add_backend_options(p: argparse.ArgumentParser) -> None:
    """Adds the backend flags to a parser, as their own group (defaults None: unset keeps the
    spec's)."""
    g = p.add_argument_group("backend")
    g.add_argument("--backend", choices=tuple(BACKENDS),
                   help="where the brokers run: local network namespaces (default), SSH hosts, "
                        "or Docker containers")
    g.add_argument("--inventory", help="ssh: the inventory file (TOML; see README, Backends)")
    g.add_argument("--accept-new-host-keys", action="store_true", default=None,
                   help="ssh: trust host keys known_hosts lacks and record them (a changed key "
                        "is still refused)")
    g.add_argument("--install-rabbitmq", action="store_true", default=None,
                   help="ssh: install Debian's rabbitmq-server on hosts that lack it")
    g.add_argument("--docker-image",
                   help=f"docker: a local image (never pulled; default {DEFAULT_DOCKER_IMAGE}, "
                        "built by scripts/build-docker-image.sh)")
    g.add_argument("--docker-network",
                   help=f"docker: the network the containers join (default "
                        f"{DEFAULT_DOCKER_NETWORK})")
    g.add_argument("--docker-subnet",
                   help=f"docker: the network's subnet (default {DEFAULT_DOCKER_SUBNET})")


def options_from_args(a: argparse.Namespace,
                      base: BackendOptions | None = None) -> BackendOptions:
    """Takes parsed options and the spec's backend options (default: BackendOptions()). Returns
    them with the flags given applied; the inventory path is made absolute."""
    base = base or BackendOptions()
    inventory = getattr(a, "inventory", None)
    changes: dict[str, Any] = {
        "kind": getattr(a, "backend", None),
        "inventory": None if inventory is None else os.path.abspath(inventory),
        "accept_new_host_keys": getattr(a, "accept_new_host_keys", None),
        "install_rabbitmq": getattr(a, "install_rabbitmq", None),
        "docker_image": getattr(a, "docker_image", None),
        "docker_network": getattr(a, "docker_network", None),
        "docker_subnet": getattr(a, "docker_subnet", None),
    }
    changes = {k: v for k, v in changes.items() if v is not None}
    return dataclasses.replace(base, **changes) if changes else base
