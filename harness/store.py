"""The store: one directory per run, `store/<test-name>/<UTC timestamp>/`, and `store/latest`.

A run directory holds test.json, history.jsonl, results.json, harness.log,
health.jsonl (the harness's own memory over the run: harness.health),
nodes/<node>/, the plots and report.html (shared/DESIGN.md).
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from history.files import replacing, write_atomic
from history.health import HEALTH_JSONL

HISTORY = "history.jsonl"
TEST = "test.json"
RESULTS = "results.json"
LOG = "harness.log"
HEALTH = HEALTH_JSONL  # history.health reads it, for the reports too
NODES = "nodes"


def new_run_dir(store: Path, test_name: str, now: datetime | None = None) -> Path:
    """Takes the store root and test name. Returns a new, empty run directory.

    Points `store/latest` at it.
    """
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S.%fZ")
    run = store / test_name / stamp
    run.mkdir(parents=True, exist_ok=False)
    with replacing(store / "latest") as tmp:
        os.symlink(os.path.relpath(run, store), tmp)
    return run


def write_json(path: Path, data: Any) -> None:
    """Writes data as indented JSON, atomically (history.files)."""
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def read_json(path: Path) -> Any:
    """Returns the parsed JSON file."""
    return json.loads(path.read_text())
