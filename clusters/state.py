"""What a run made on machines `make clean` cannot find by name: a JSON record in the state dir.

Local namespaces are found by their prefix and Docker objects by their label,
but processes on SSH hosts are found only through a record the run keeps:
`<state_dir>/backends/<backend>-<run_id>.json`, written when the cluster is
created, updated with every pid spawned on a host, and removed when the
cluster is destroyed. A record left behind means a run was killed half-way;
the backend's cleanup reads it, ends those processes by pid and removes it.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

from history.files import write_atomic

log = logging.getLogger(__name__)


class RunRecord:
    """The record of one run's cluster: free-form `info` plus the pids spawned on each node."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data
        self._lock = threading.Lock()

    @classmethod
    def create(cls, state_dir: Path, backend: str, run_id: str,
               info: dict[str, Any]) -> RunRecord:
        """Takes the state dir, backend name, run id and what cleanup needs. Writes and returns
        the record."""
        rec = cls(state_dir / "backends" / f"{backend}-{run_id}.json",
                  {"backend": backend, "run_id": run_id, "info": info, "pids": {}})
        rec.save()
        return rec

    @staticmethod
    def find(state_dir: Path, backend: str) -> list[RunRecord]:
        """Returns the records of that backend left in the state dir (unreadable ones are
        logged and skipped)."""
        out = []
        for p in sorted((state_dir / "backends").glob(f"{backend}-*.json")):
            try:
                out.append(RunRecord(p, json.loads(p.read_text(encoding="utf-8"))))
            except (OSError, ValueError) as e:
                log.warning("unreadable backend record %s: %s", p, e)
        return out

    @property
    def info(self) -> dict[str, Any]:
        """Returns what the run recorded for cleanup."""
        info: dict[str, Any] = self.data.get("info") or {}
        return info

    def pids(self, node: str) -> list[int]:
        """Returns the pids spawned on a node, oldest first."""
        return [int(p) for p in (self.data.get("pids") or {}).get(node, [])]

    def add_pid(self, node: str, pid: int) -> None:
        """Records a pid spawned on a node, at once on disk."""
        with self._lock:
            self.data.setdefault("pids", {}).setdefault(node, []).append(pid)
            self.save()

    def save(self) -> None:
        """Writes the record atomically (a killed run leaves the old or the new, never half)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(self.data, indent=1))

    def remove(self) -> None:
        """Deletes the record: everything it names is gone."""
        self.path.unlink(missing_ok=True)
