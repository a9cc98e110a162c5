"""Cuts a stored run down to a broker-log fixture for the efficacy tests
(tests/checkers/fixtures/broker_logs/, whose README says what a fixture holds).

    .venv/bin/python -m scripts.cut_log_fixture RUN_DIR OUT_DIR

Writes OUT_DIR/run.json (test.json's clock, nodes, versions and net_ticktime, the queue and
its placement at the start, and the history's nemesis and harness ops) and
OUT_DIR/nodes/<node>/rabbit.log: each node's log from the last line before the first fault
to the end, keeping only lines a pattern of the run's release line reads (checkers.broker_log),
the line before the cut and the file's last line, so the log still covers the faults' time.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

from checkers.broker_log import LINE, parse_line, patterns_for
from clusters.releases import known_line

KEPT_PROCESSES = ("nemesis", "harness")


def _ops(run: Path) -> list[dict]:
    out = []
    with open(run / "history.jsonl", encoding="utf-8") as fh:
        for raw in fh:
            op = json.loads(raw)
            if op.get("process") in KEPT_PROCESSES:
                out.append(op)
    return out


def _first_fault_unix(info: dict, ops: list[dict]) -> float:
    start = info["history_start_unix"]
    faults = [o["time"] for o in ops if o.get("process") == "nemesis"]
    return start + (min(faults) / 1e9 if faults else 0.0)


def _cut(text: str, cut_unix: float, patterns: tuple) -> list[str]:
    lines = text.splitlines()
    kept: list[str] = []
    before: str | None = None
    last: str | None = None
    for raw in lines:
        m = LINE.match(raw)
        if not m:
            continue
        last = raw
        if datetime.fromisoformat(m.group(1)).timestamp() < cut_unix:
            before = raw
            continue
        if parse_line(m.group(3), patterns) is not None:
            kept.append(raw)
    head = [before] if before else []
    tail = [last] if last and (not kept or kept[-1] != last) else []
    return head + kept + tail


def cut(run: Path, out: Path) -> None:
    """Takes a stored run and a folder. Writes the fixture there."""
    info = json.loads((run / "test.json").read_text(encoding="utf-8"))
    ops = _ops(run)
    versions = info.get("versions") or {}
    patterns = patterns_for(known_line(str(versions.get("rabbitmq", ""))))
    spec = info.get("spec") or {}
    placement = next((o["value"] for o in ops if o.get("f") == "placement"
                      and isinstance(o.get("value"), dict)), None)
    meta = {
        "history_start_unix": info["history_start_unix"],
        "nodes": info["nodes"],
        "versions": {k: versions[k] for k in ("release", "rabbitmq", "erlang", "metadata_store")
                     if k in versions},
        "net_ticktime": (spec.get("broker") or {}).get("net_ticktime"),
        "placement_at_start": placement,
        "queue": (spec.get("queue") or {}).get("name"),
        "ops": ops,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "run.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    cut_unix = _first_fault_unix(info, ops)
    for log in sorted((run / "nodes").glob("*/rabbit*.log")):
        if log.name.endswith("_upgrade.log"):
            continue
        dest = out / "nodes" / log.parent.name / log.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        lines = _cut(log.read_text(encoding="utf-8", errors="replace"), cut_unix, patterns)
        dest.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    cut(Path(sys.argv[1]), Path(sys.argv[2]))
