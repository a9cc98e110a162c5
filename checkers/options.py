"""Options of a check: what counts as invalid, how much to report, and how Spark runs.

`CheckOptions` is a frozen dataclass so that a test spec can carry it and a
re-check reproduces the same verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CheckOptions:
    """How to judge and report a history.

    - strict_order: the ordering check follows the queue's whole delivery
      sequence (every consumer), redeliveries included (checkers.spark_order has
      the exact definition); for quorum queues with a single active consumer
      and prefetch 1.
    - unflagged_duplicates_invalid / flagged_duplicates_invalid: whether a
      message delivered again without / only with the redelivered flag makes
      the queue section invalid (the first also covers unflagged_after_ack).
    - require_drain: without a completed drain (checkers.phases) lost messages
      cannot be told from queued ones, so a queue section with any is "unknown".
    - sample_size: length of id lists (counts are always exact);
      example_size: number of ordering violations shown.
    - quantile_accuracy: percentile_approx accuracy; quantiles are exact
      (nearest rank) while a group holds fewer latencies than this.
    - shuffle_partitions, driver_memory, extra spark_conf: Spark tuning.
      work_dir: where the check puts its intermediate Parquet (a temporary
      directory when None).
    - jvm_class_archive: a class-data-sharing archive for the driver JVM
      (written by the first check that names it, used by the later ones; it
      saves a few seconds of JVM start-up). Only read when this check starts
      the Spark session.
    """

    strict_order: bool = False
    unflagged_duplicates_invalid: bool = True
    flagged_duplicates_invalid: bool = False
    require_drain: bool = True
    sample_size: int = 100
    example_size: int = 20
    quantile_accuracy: int = 10000
    shuffle_partitions: int | None = None
    driver_memory: str = "2g"
    spark_conf: tuple[tuple[str, str], ...] = ()
    work_dir: Path | None = None
    jvm_class_archive: Path | None = None

    def __post_init__(self) -> None:
        if self.sample_size < 0 or self.example_size < 0:
            raise ValueError("sample_size and example_size must be >= 0")
