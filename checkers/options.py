"""The one settings object of a check: what counts as invalid, how much to report, where and how
Spark runs.

`CheckOptions` is a frozen dataclass. A test spec carries it (harness.spec,
`TestSpec.check`) and test.json records it, so that a re-check of a stored
run reproduces the same verdict; `python -m harness check` overrides it from
the command line. Its fields are of two kinds. The *recorded* ones say how to
judge and report (and on which Spark master); `recorded()` gives them as
test.json holds them, and `from_recorded` reads them back, with defaults for
the ones a run stored before they existed. The *local* ones tune how this
machine runs Spark; they never change a verdict, so a spec does not record
them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Field metadata marking a setting that tunes this machine's Spark and is not recorded.
LOCAL = {"local": True}


@dataclass(frozen=True)
class CheckOptions:
    """How to judge and report a history, and how to run the check.

    Recorded (test.json's "check" section):

    - strict_order: the ordering check follows the queue's whole delivery
      sequence (every consumer), redeliveries included (checkers.spark_order
      has the exact definition); for quorum queues with a single active
      consumer and prefetch 1.
    - flagged_duplicates_invalid / unflagged_duplicates_invalid: whether a
      message delivered again only with / without the redelivered flag makes
      the queue section invalid (the second also covers unflagged_after_ack).
    - unflagged_redeliveries_invalid: whether a message delivered again
      without the redelivered flag, its earlier delivery acked or not
      (unflagged_redelivered), makes the queue section invalid; reported
      either way.
    - require_drain: without a completed drain (checkers.phases) lost messages
      cannot be told from queued ones, so a queue section with any is "unknown".
    - sample_size: length of id lists (counts are always exact);
      example_size: number of ordering violations shown.
    - quantile_accuracy: percentile_approx accuracy; quantiles are exact
      (nearest rank) while a group holds fewer latencies than this.
    - spark_master: the Spark master URL (None: local mode).

    Local (not recorded):

    - driver_memory, shuffle_partitions, extra spark_conf: Spark tuning.
    - work_dir: where the check puts its intermediate Parquet (a temporary
      directory when None).
    - jvm_class_archive: a class-data-sharing archive for the driver JVM
      (written by the first check that names it, used by the later ones; it
      saves a few seconds of JVM start-up). Only read when this check starts
      the Spark session.
    """

    strict_order: bool = False
    flagged_duplicates_invalid: bool = False
    unflagged_duplicates_invalid: bool = True
    unflagged_redeliveries_invalid: bool = False
    require_drain: bool = True
    sample_size: int = 100
    example_size: int = 20
    quantile_accuracy: int = 10000
    spark_master: str | None = None
    driver_memory: str = field(default="2g", metadata=LOCAL)
    shuffle_partitions: int | None = field(default=None, metadata=LOCAL)
    spark_conf: tuple[tuple[str, str], ...] = field(default=(), metadata=LOCAL)
    work_dir: Path | None = field(default=None, metadata=LOCAL)
    jvm_class_archive: Path | None = field(default=None, metadata=LOCAL)

    def __post_init__(self) -> None:
        if self.sample_size < 0 or self.example_size < 0:
            raise ValueError("sample_size and example_size must be >= 0")
        # Read from JSON or the command line, paths and pairs may come as text and lists.
        for name in ("work_dir", "jvm_class_archive"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(value))
        object.__setattr__(self, "spark_conf", tuple(
            (str(k), str(v)) for k, v in self.spark_conf))

    def recorded(self) -> dict[str, Any]:
        """Returns the recorded settings, as test.json's "check" section holds them."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if not f.metadata.get("local")}

    @classmethod
    def from_recorded(cls, data: Mapping[str, Any] | None) -> CheckOptions:
        """Takes a stored "check" section (keys may be missing: runs stored before a setting
        existed). Returns the options; keys that are not recorded settings are ignored."""
        names = recorded_names()
        return cls(**{k: v for k, v in (data or {}).items() if k in names})


def recorded_names() -> frozenset[str]:
    """Returns the names of the recorded settings."""
    return frozenset(f.name for f in dataclasses.fields(CheckOptions)
                     if not f.metadata.get("local"))
