"""The checkers' public entry point: check a history with a named engine.

`check_history` is what the harness calls. Engines are a registry of
functions (path, options, master) -> results; "spark" scales to histories far
larger than memory, "reference" is the pure-Python oracle for small ones.
Neither prints; the CLI (python -m checkers) does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from checkers.errors import HistoryError
from checkers.options import CheckOptions

log = logging.getLogger(__name__)

Engine = Callable[[Path, CheckOptions, "str | None"], dict[str, Any]]


def _spark(path: Path, options: CheckOptions, master: str | None) -> dict[str, Any]:
    from checkers import spark_engine

    return spark_engine.check(path, options, spark_master=master)


def _reference(path: Path, options: CheckOptions, master: str | None) -> dict[str, Any]:
    from checkers import reference

    if Path(path).is_dir():
        raise ValueError("the reference engine reads JSONL histories, not Parquet")
    return reference.check_file(path, options)


ENGINES: dict[str, Engine] = {"spark": _spark, "reference": _reference}


def check_history(
    history_path: Path,
    *,
    spark_master: str | None = None,
    options: CheckOptions | None = None,
) -> dict[str, Any]:
    """Takes a history (history.jsonl, or a Parquet directory made by `convert_to_parquet`), an
    optional Spark master URL (default local[*]) and options.

    Returns results.json as a dict: {"valid": true|false|"unknown", "queue": {...},
    "ordering": {...}, "perf": {...}}. Raises HistoryError (checkers.errors) when the
    history breaks the contract, naming the line.
    """
    options = options or CheckOptions()
    if not Path(history_path).exists():
        raise HistoryError("no such history", None, history_path)
    log.info("checking %s with the %s engine", history_path, options.engine)
    return ENGINES[options.engine](Path(history_path), options, spark_master)


def convert_to_parquet(
    history_path: Path, out_dir: Path, *, spark_master: str | None = None,
    options: CheckOptions | None = None,
) -> Path:
    """Takes a JSONL history and an output directory. Writes the history as Parquet there (to be
    checked again later without parsing JSON). Returns out_dir."""
    from checkers import spark_io, spark_session

    spark, created = spark_session.session(spark_master, options or CheckOptions())
    try:
        return spark_io.convert_to_parquet(spark, Path(history_path), Path(out_dir))
    finally:
        if created:
            spark.stop()
