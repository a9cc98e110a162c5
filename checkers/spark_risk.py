"""What each fault had to work with, in Spark: messages at risk when it began, publishes it cut
or held.

A fault can only lose what the broker holds for someone: a message whose
publish was confirmed (`ok`) and that no consumer had consumed yet (acked; in
a history without acks, delivered). `risk_facts` counts those at each fault
window's start, and the publishes whose outcome the fault made unknown (`info`
completions inside the window: a connection lost or a confirm that never
came), apart from those a resource alarm held (error "blocked": their
connection was blocked), from the message table (one row per id,
checkers.spark_queue.message_table, whose `comp_blocked` says which completion
was so held): `risk_groups` counts its rows by where their times fall among
the windows' edges, one small group-by whatever the number of windows (three
conditional counts per window over every row cost 4 s of CPU on a 10M-op
history with 11 faults), and the driver adds those counts up per window.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from checkers.model import OUTCOME_CODES
from checkers.spark_perf import segment
from history.faults import FaultWindow

OK, INFO = OUTCOME_CODES["ok"], OUTCOME_CODES["info"]


def _before(t: Column, edges: Sequence[int]) -> Column:
    """Takes a time column (ns, integers) and ascending distinct edges. Returns how many edges
    are before the time (bisect_left)."""
    return segment(t - F.lit(1), edges)


def risk_groups(msgs: DataFrame, windows: Sequence[FaultWindow]) -> list[tuple[int, int, int, int]]:
    """Takes the message table and the fault windows. Returns (kind, x, y, count) of one small
    group-by, which `risk_facts` reads: kind 0, the confirmed messages by x = how many distinct
    window starts come before their confirm and y = before their consumption (all, never
    consumed); kind 1 (2: their connection was blocked), the publishes completed `info` by x =
    how many window edges (starts and ends) come before the completion and y = at or before
    it. A message at risk at a start is confirmed by then and consumed after it; a publish
    made unknown by a window completed inside it, edges included: both say so by these
    positions alone, so a row pays a few comparisons, not three per window."""
    if not windows:
        return []
    starts = sorted({w.start_ns for w in windows})
    edges = sorted({w.start_ns for w in windows} | {w.end_ns for w in windows})
    code, done, consumed = F.col("comp_code"), F.col("comp_time"), F.col("consumed_time")
    held = F.coalesce(F.col("comp_blocked"), F.lit(False))
    kind = (F.when(code == OK, F.lit(0))
            .when((code == INFO) & held, F.lit(2)).when(code == INFO, F.lit(1)))
    rows = (msgs.where(kind.isNotNull() & done.isNotNull()).select(
        kind.alias("kind"),
        F.when(code == OK, _before(done, starts)).otherwise(_before(done, edges)).alias("x"),
        F.when(code != OK, segment("comp_time", edges))
        .when(consumed.isNull(), F.lit(len(starts)))
        .otherwise(_before(consumed, starts)).alias("y"))
        .groupBy("kind", "x", "y").count().collect())
    return [(r["kind"], r["x"], r["y"], int(r["count"])) for r in rows]


def risk_facts(groups: Sequence[tuple[int, int, int, int]], windows: Sequence[FaultWindow]
               ) -> list[dict[str, Any]]:
    """Takes `risk_groups` and the fault windows. Returns, per window in order, {"at_risk":
    confirmed messages not yet consumed at its start, "unknown_publishes": publishes completed
    `info` during it, "blocked_publishes": those of them completed so because their connection
    was blocked (error "blocked"), not counted in the first}."""
    starts = {s: i for i, s in enumerate(sorted({w.start_ns for w in windows}))}
    edges = {e: i for i, e in enumerate(sorted({w.start_ns for w in windows}
                                               | {w.end_ns for w in windows}))}
    out = []
    for w in windows:
        at, lo, hi = starts[w.start_ns], edges[w.start_ns], edges[w.end_ns]
        counts = [0, 0, 0]
        for kind, x, y, n in groups:
            inside = x <= at < y if kind == 0 else lo < y and x <= hi
            counts[kind] += n if inside else 0
        out.append({"at_risk": counts[0], "unknown_publishes": counts[1],
                    "blocked_publishes": counts[2]})
    return out
