"""The checkers' public entry point: check a history with the Spark checker.

`check_history` is what the harness calls (`python -m harness check` is the
command). Spark is the one engine of judgement: it scales to histories far
larger than memory, and its tests compare it with an oracle written apart from
it (tests/checkers/oracle.py). Nothing here prints.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from checkers.efficacy import Evidence
from checkers.errors import HistoryError
from checkers.liveness import LivenessBound
from checkers.options import CheckOptions

log = logging.getLogger(__name__)


def check_history(
    history_path: Path,
    *,
    spark_master: str | None = None,
    options: CheckOptions | None = None,
    evidence: Evidence | None = None,
    liveness: LivenessBound | None = None,
) -> dict[str, Any]:
    """Takes a history (history.jsonl, or a Parquet directory made by `convert_to_parquet`), an
    optional Spark master URL (default: the options', else local[*]), options, the broker's
    evidence of the faults (checkers.efficacy.Evidence: its log events; None when there are no
    logs, and then whether a fault was noticed is "unknown") and what the liveness bound is
    derived from (checkers.liveness.LivenessBound: net_ticktime and the harness's recovery
    settings; None when unknown, and then the liveness section is "unknown").

    Returns results.json as a dict: {"valid": true|false|"unknown", "queue": {...},
    "ordering": {...}, "perf": {...}, "liveness": {...}, "faults": [...], "strength": {...}}.
    Raises HistoryError (checkers.errors) when the history breaks the contract, naming the
    line.
    """
    from checkers import spark_engine

    options = options or CheckOptions()
    if not Path(history_path).exists():
        raise HistoryError("no such history", None, history_path)
    log.info("checking %s", history_path)
    return spark_engine.check(Path(history_path), options,
                              spark_master=spark_master or options.spark_master,
                              evidence=evidence, bound=liveness)


def convert_to_parquet(
    history_path: Path, out_dir: Path, *, spark_master: str | None = None,
    options: CheckOptions | None = None,
) -> Path:
    """Takes a JSONL history and an output directory. Writes the history as Parquet there (to be
    checked again later without parsing JSON). Returns out_dir."""
    from checkers import spark_io, spark_session

    options = options or CheckOptions()
    spark, created = spark_session.session(spark_master or options.spark_master, options)
    try:
        return spark_io.convert_to_parquet(spark, Path(history_path), Path(out_dir))
    finally:
        if created:
            spark.stop()
