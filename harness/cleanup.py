"""`make clean`: remove whatever a run, even one killed with SIGKILL, left on this machine.

Processes are ended by pid, and only those inside the project's namespaces;
then the namespaces, veths and bridge go, and the brokers' data directories.
Iptables rules live inside the namespaces and go with them.
"""

from __future__ import annotations

import shutil

from clusters.local.cluster import DEFAULT_PREFIX, cleanup
from clusters.registry import clean_leftovers
from harness.runner import STATE_DIR, run_lock


def clean_all(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Removes every leftover of local runs. Returns lines saying what went.

    Raises RuntimeError when a run is in progress (it holds the lock).
    """
    with run_lock():
        removed = cleanup(prefix) if prefix != DEFAULT_PREFIX else []
        removed += clean_leftovers(STATE_DIR)  # every backend: namespaces, SSH hosts, Docker
        data = STATE_DIR / "cluster"
        if data.exists():
            shutil.rmtree(data, ignore_errors=True)
            removed.append(f"broker data {data}")
    return removed or ["nothing to clean"]
