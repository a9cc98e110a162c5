"""Availability and latency in Spark: publishes per fault window, and stretches without confirms.

Publishes are assigned to a fault window by their invoke time (window
[start, end)); "healthy" are those in no window. Latency is invoke to confirm
of `ok` publishes. A window's recovery is the time from its end to the first
confirm (ok completion) at or after it. The longest stretch without a confirm
is taken over the main phase, its edges included (`results.longest_gap`).

The fault windows are few and known on the driver, so their edges cut time
into segments; a balanced tree of comparisons (a binary search, compiled) puts each publish's
invoke time into a segment and a broadcast join maps segments to the
windows covering them (and to "healthy" when none does, and to "overall").
One aggregate then gives per window the outcome counts and latency
quantiles. (Conditional aggregates per window would avoid the join, but the
percentile aggregate is not compiled, so its per-row cost would grow with
every window.)

Quantiles come from percentile_approx: exact (nearest rank,
`model.nearest_rank`) while a window holds fewer confirmed publishes than
`quantile_accuracy`, otherwise within a rank error of n/accuracy. The max is
exact. The first confirm after each window's end and the longest stretch
without a confirm share one aggregate: confirms per segment between window
ends, and per cell of a fine grid over the main phase the first and last
confirm, which bound every gap that crosses cells; only cells wide enough to
hide a longer gap have their confirms ordered (a window function over those
cells only).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from typing import Final

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from checkers.results import BucketStats, Gap, perf_section
from checkers.spark_io import literal_rows
from checkers.spark_queue import FAIL, INFO, OK
from history.faults import FaultWindow

log = logging.getLogger(__name__)

OVERALL, HEALTHY = -2, -1
GRID_CELLS: Final = 65536
# Only the wide cells' confirms are ordered; they are picked by a join when fewer than this
# share of the cells are wide (else all are ordered, no join).
JOIN_BELOW: Final = 0.5


def publishes(msgs: DataFrame) -> DataFrame:
    """Takes the messages table. Returns one row per publish: invoke time, outcome code, confirm
    time and latency (of confirmed publishes)."""
    code = F.col("comp_code")
    return msgs.where(F.col("n_inv") > 0).select(
        "inv_time", "comp_code", "comp_time",
        F.when(code == OK, F.col("comp_time") - F.col("inv_time")).alias("lat"),
    )


def _stat_aggs(accuracy: int) -> list[Column]:
    code = F.col("comp_code")
    return [
        F.count(F.lit(1)).alias("invoked"),
        F.count_if(code == OK).alias("ok"),
        F.count_if(code == FAIL).alias("fail"),
        F.count_if(code.isNull() | (code == INFO)).alias("info"),
        F.percentile_approx("lat", [0.5, 0.95, 0.99], accuracy).alias("q"),
        F.max("lat").alias("max"),
    ]


def segment(col: str | Column, edges: Sequence[int]) -> Column:
    """Takes a time column (or its name) and ascending distinct edges. Returns the number of
    edges at or below the time (bisect_right), as a balanced tree of comparisons: log2(edges)
    per row, compiled."""
    t = F.col(col) if isinstance(col, str) else col

    def node(lo: int, hi: int) -> Column:
        if lo == hi:
            return F.lit(lo)
        mid = (lo + hi) // 2
        return F.when(t >= F.lit(edges[mid]), node(mid + 1, hi)).otherwise(node(lo, mid))

    return node(0, len(edges))


def bucket_stats(spark: SparkSession, pubs: DataFrame, windows: Sequence[FaultWindow],
                 accuracy: int) -> dict[int, BucketStats]:
    """Takes publishes and windows. Returns stats keyed by window position, HEALTHY and OVERALL,
    from one aggregate over the segments between window edges."""
    edges = sorted({w.start_ns for w in windows} | {w.end_ns for w in windows})
    pos = {e: i for i, e in enumerate(edges)}
    mapping = []
    for s in range(len(edges) + 1):
        mapping.append((s, OVERALL))
        covering = [i for i, w in enumerate(windows)
                    if 0 < s < len(edges) and pos[w.start_ns] < s <= pos[w.end_ns]]
        mapping.extend((s, i) for i in covering)
        if not covering:
            mapping.append((s, HEALTHY))
    keys = literal_rows(spark, mapping, "seg int, key int")
    rows = (pubs.withColumn("seg", segment("inv_time", edges)).join(F.broadcast(keys), "seg")
            .groupBy("key").agg(*_stat_aggs(accuracy)).collect())
    stats = {}
    for r in rows:
        q = r["q"] or [None, None, None]
        stats[r["key"]] = BucketStats(r["invoked"], r["ok"], r["fail"], r["info"], q[0], q[1],
                                      q[2], r["max"])
    return stats


def confirm_summaries(confirms: DataFrame, ends: Sequence[int], start: int, end: int,
                      width: int) -> tuple[dict[int, int], list[tuple[int, int, int]]]:
    """Takes confirm times (column ct), the distinct window ends (ascending), the main phase and
    a grid width. Returns, from one aggregate, the first confirm per segment between window
    ends, and per grid cell of the main phase (cell, first, last) in cell order."""
    by_end = confirms.select(F.lit(0).alias("kind"), segment("ct", ends).alias("key"), "ct")
    cells = (confirms.where((F.col("ct") >= start) & (F.col("ct") <= end))
             .select(F.lit(1).alias("kind"), _cell(start, width).alias("key"), "ct"))
    rows = (by_end.unionByName(cells).groupBy("kind", "key")
            .agg(F.min("ct").alias("lo"), F.max("ct").alias("hi")).collect())
    first_in = {r["key"]: r["lo"] for r in rows if r["kind"] == 0}
    grid = sorted((r["key"], r["lo"], r["hi"]) for r in rows if r["kind"] == 1)
    return first_in, grid


def first_confirms_after(first_in: dict[int, int], ends: Sequence[int],
                         windows: Sequence[FaultWindow]) -> list[int | None]:
    """Takes the first confirm per segment between window ends, the ends and the windows.
    Returns per window the first confirm at or after its end, or None."""
    suffix: list[int | None] = [None] * (len(ends) + 2)
    for s in range(len(ends), -1, -1):
        here, later = first_in.get(s), suffix[s + 1]
        suffix[s] = here if later is None else later if here is None else min(here, later)
    index = {e: i for i, e in enumerate(ends)}
    return [suffix[index[w.end_ns] + 1] for w in windows]


def _cell(start: int, width: int) -> Column:
    return F.floor((F.col("ct") - F.lit(start)) / F.lit(width)).cast("int")


def best_gap(candidates: Iterable[Gap], start: int) -> Gap:
    """Takes candidate gaps. Returns the longest, the earliest of equals (Gap(start, start) if none)."""
    best = Gap(start, start)
    for g in candidates:
        length, best_length = g.end - g.start, best.end - best.start
        if length > best_length or (length == best_length and length > 0 and g.start < best.start):
            best = g
    return best


def longest_gap(confirms: DataFrame, grid: list[tuple[int, int, int]], start: int, end: int,
                width: int) -> Gap:
    """Takes confirm times (column ct), the main phase's grid cells (cell, first, last), the
    phase [start, end] and the cell width. Returns the longest stretch without a confirm, as
    `checkers.results.longest_gap` defines it: gaps across cells come from the grid; the
    confirms of a cell are only ordered if the cell could hide a gap at least as long."""
    crossing = []
    prev = start
    for _, lo, hi in grid:
        crossing.append(Gap(prev, lo))
        prev = hi
    crossing.append(Gap(prev, end))
    best = best_gap(crossing, start)
    wide = [c for c, lo, hi in grid if hi - lo >= max(best.end - best.start, 1)]
    if not wide:
        return best
    w = Window.partitionBy("cell").orderBy("ct")
    inside = (confirms.where((F.col("ct") >= start) & (F.col("ct") <= end))
              .withColumn("cell", _cell(start, width)))
    if len(wide) < JOIN_BELOW * len(grid):  # worth a join to skip the narrow cells
        wide_df = literal_rows(confirms.sparkSession, [(c,) for c in wide], "cell int")
        inside = inside.join(F.broadcast(wide_df), "cell")
    within = (inside.select("ct", F.lag("ct").over(w).alias("prev"))
              .where(F.col("prev").isNotNull())
              .select("prev", "ct", (F.col("ct") - F.col("prev")).alias("len"))
              .orderBy(F.col("len").desc(), F.col("prev")).limit(1).collect())
    return best_gap([best, *(Gap(r["prev"], r["ct"]) for r in within)], start)


def perf_facts(spark: SparkSession, msgs: DataFrame, windows: Sequence[FaultWindow],
               main_phase: tuple[int, int], accuracy: int) -> dict[str, object]:
    """Takes the messages table, fault windows, the main phase and the quantile accuracy.
    Returns the "perf" section."""
    pubs = publishes(msgs)
    stats = bucket_stats(spark, pubs, windows, accuracy)
    confirms = pubs.where(F.col("comp_code") == OK).select(F.col("comp_time").alias("ct"))
    start, end = main_phase
    width = max(1, math.ceil((end - start + 1) / GRID_CELLS))
    ends = sorted({w.end_ns for w in windows})
    first_in, grid = confirm_summaries(confirms, ends, start, end, width)
    gap = longest_gap(confirms, grid, start, end, width)
    empty = BucketStats()
    return perf_section(
        main_phase, stats.get(OVERALL, empty), stats.get(HEALTHY, empty), windows,
        [stats.get(i, empty) for i in range(len(windows))],
        first_confirms_after(first_in, ends, windows), gap,
    )
