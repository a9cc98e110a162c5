"""What each fault had to work with, in Spark: messages at risk when it began, publishes it cut
or held.

A fault can only lose what the broker holds for someone: a message whose
publish was confirmed (`ok`) and that no consumer had consumed yet (acked; in
a history without acks, delivered). `risk_aggs` counts those at each fault
window's start, and the publishes whose outcome the fault made unknown (`info`
completions inside the window: a connection lost or a confirm that never
came), apart from those a resource alarm held (error "blocked": their
connection was blocked), as aggregates over the message table (one row per id,
checkers.spark_queue.message_table, whose `comp_blocked` says which completion
was so held), which the engine sums up in the one pass the queue check's
counts take too. A handful of windows, one row collected: no per-op work on
the driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, Row
from pyspark.sql import functions as F

from checkers.model import OUTCOME_CODES
from history.faults import FaultWindow

OK, INFO = OUTCOME_CODES["ok"], OUTCOME_CODES["info"]


def risk_aggs(windows: Sequence[FaultWindow]) -> list[Column]:
    """Takes the fault windows. Returns the message table's aggregates `risk_facts` reads: per
    window, the confirmed messages not yet consumed at its start (r<i>), the publishes
    completed `info` during it (u<i>) and, apart from those, the ones completed so because
    their connection was blocked (b<i>)."""
    confirmed = F.col("comp_code") == OK
    unknown = F.col("comp_code") == INFO
    held = F.coalesce(F.col("comp_blocked"), F.lit(False))
    aggs = []
    for i, w in enumerate(windows):
        pending = F.col("consumed_time").isNull() | (F.col("consumed_time") > w.start_ns)
        during = unknown & F.col("comp_time").between(w.start_ns, w.end_ns)
        aggs += [F.count_if(confirmed & (F.col("comp_time") <= w.start_ns) & pending)
                 .alias(f"r{i}"),
                 F.count_if(during & ~held).alias(f"u{i}"),
                 F.count_if(during & held).alias(f"b{i}")]
    return aggs


def risk_facts(totals: Row, windows: Sequence[FaultWindow]) -> list[dict[str, Any]]:
    """Takes the message table's totals (with `risk_aggs`) and the fault windows. Returns, per
    window in order, {"at_risk": confirmed messages not yet consumed at its start,
    "unknown_publishes": publishes completed `info` during it, "blocked_publishes": those of
    them completed so because their connection was blocked (error "blocked"), not counted in
    the first}."""
    return [{"at_risk": int(totals[f"r{i}"] or 0), "unknown_publishes": int(totals[f"u{i}"] or 0),
             "blocked_publishes": int(totals[f"b{i}"] or 0)}
            for i in range(len(windows))]
