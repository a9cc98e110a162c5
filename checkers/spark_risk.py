"""What each fault had to work with, in Spark: messages at risk when it began, publishes it cut
or held.

A fault can only lose what the broker holds for someone: a message whose
publish was confirmed (`ok`) and that no consumer had consumed yet (acked; in
a history without acks, delivered). `risk_facts` counts those at each fault
window's start, in one aggregate over the message table (one row per id,
checkers.spark_queue.message_table), and the publishes whose outcome the fault made
unknown (`info` completions inside the window: a connection lost or a confirm
that never came), apart from those a resource alarm held (error "blocked": their
connection was blocked), in one aggregate over the history's publish rows. A
handful of windows, one row collected: no per-op work on the driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers.model import OUTCOME_CODES
from checkers.spark_io import History, is_publish
from history import BLOCKED_ERROR
from history.faults import FaultWindow

OK, INFO = OUTCOME_CODES["ok"], OUTCOME_CODES["info"]


def risk_facts(h: History, msgs: DataFrame, windows: Sequence[FaultWindow]) -> list[dict[str, Any]]:
    """Takes a History, its message table and the fault windows. Returns, per window in order,
    {"at_risk": confirmed messages not yet consumed at its start, "unknown_publishes":
    publishes completed `info` during it, "blocked_publishes": those of them completed so
    because their connection was blocked (error "blocked"), not counted in the first}."""
    if not windows:
        return []
    confirmed = F.col("comp_code") == OK
    at_risk = [
        F.count_if(confirmed & (F.col("comp_time") <= w.start_ns)
                   & (F.col("consumed_time").isNull() | (F.col("consumed_time") > w.start_ns))
                   ).alias(f"r{i}")
        for i, w in enumerate(windows)
    ]
    risk = msgs.agg(*at_risk).collect()[0]
    info = is_publish() & (F.col("code") == INFO)
    held = F.coalesce(F.col("error") == F.lit(BLOCKED_ERROR), F.lit(False))
    unknown = [
        F.count_if(~held & F.col("time").between(w.start_ns, w.end_ns)).alias(f"u{i}")
        for i, w in enumerate(windows)
    ]
    blocked = [
        F.count_if(held & F.col("time").between(w.start_ns, w.end_ns)).alias(f"b{i}")
        for i, w in enumerate(windows)
    ]
    cut = h.df.where(info).agg(*unknown, *blocked).collect()[0]
    return [{"at_risk": int(risk[f"r{i}"] or 0), "unknown_publishes": int(cut[f"u{i}"] or 0),
             "blocked_publishes": int(cut[f"b{i}"] or 0)}
            for i in range(len(windows))]
