"""The harness's memory samples of a run, as health.jsonl stores them: one JSON object a line,
`at_unix` (the wall clock), the controller's resident memory `controller_rss` and its workers'
`workers_rss` (bytes), and how many `workers` there were.

One reader for both sides of the store: harness.health writes and judges the samples,
reports.report_health shows them, and neither may import the other (tests/test_architecture).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final

HEALTH_JSONL: Final = "health.jsonl"
MIB: Final = 1024 * 1024


@dataclass(frozen=True)
class Sample:
    """One memory sample: the wall clock (unix s), the controller's and its workers' resident
    memory (bytes) and how many workers there were."""

    at_unix: float
    controller_rss: int
    workers_rss: int
    workers: int

    @property
    def controller_mb(self) -> float:
        """Returns the controller's memory in MiB."""
        return self.controller_rss / MIB

    @property
    def workers_mb(self) -> float:
        """Returns the workers' memory in MiB."""
        return self.workers_rss / MIB

    @property
    def total_mb(self) -> float:
        """Returns the harness's memory, the controller's and its workers', in MiB."""
        return (self.controller_rss + self.workers_rss) / MIB


def _sample(line: str) -> Sample | None:
    """Takes one line of health.jsonl. Returns its sample, None for a torn or odd line."""
    try:
        d = json.loads(line)
        return Sample(float(d["at_unix"]), int(d["controller_rss"]), int(d["workers_rss"]),
                      int(d["workers"]))
    except (ValueError, TypeError, KeyError):
        return None


def read_samples(run_dir: Path) -> list[Sample]:
    """Takes a run directory. Returns its memory samples in order ([] without health.jsonl or
    when it cannot be read; a torn line, from a run cut short, is left out)."""
    try:
        text = (Path(run_dir) / HEALTH_JSONL).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    return [s for line in text.splitlines() if (s := _sample(line)) is not None]
