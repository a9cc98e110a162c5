"""The local backend's registry record: one network namespace per node on this machine.

The cluster itself is `clusters.netns.NetnsCluster`; this module only says how
to check its options, make it for a run, and clean up what a killed run left
(processes inside our namespaces, by pid, then the namespaces and links; the
broker data directories under the state directory are the harness's to remove).
"""

from __future__ import annotations

from pathlib import Path

from clusters.backend import Backend, BackendConfigError, BackendOptions, ManagedCluster
from clusters.netns import DEFAULT_PREFIX, NetnsCluster, cleanup, make_plan


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
    cluster (not yet created), its broker data under <state_dir>/cluster/<run_id>."""
    return NetnsCluster(make_plan(nodes), data_root=str(state_dir / "cluster" / run_id))


def clean(state_dir: Path) -> list[str]:
    """Takes the state directory (unused: namespaces are found by name). Removes what local runs
    left. Returns lines saying what went."""
    return [f"local: {x}" for x in cleanup(DEFAULT_PREFIX)]


BACKEND = Backend(check=check, make=make, cleanup=clean, lines=("3.10", "4.0"))
