"""Checkers over histories: Spark jobs for queue totals, ordering, availability and latency.

The public surface is small: `check_history(path, spark_master=..., options=...)` returns
results.json as a dict, `CheckOptions` says how to judge, `HistoryError` is raised for a
history breaking the contract, `convert_to_parquet` prepares a large history for repeated
checks. `python -m harness check RUN_DIR|HISTORY` is the command. Importing this package
does not start (or import) Spark.
"""

from checkers.api import check_history, convert_to_parquet
from checkers.errors import HistoryError
from checkers.options import CheckOptions

__all__ = ["CheckOptions", "HistoryError", "check_history", "convert_to_parquet"]
