"""The fates and the attribution to faults in Spark (checkers.fates has the definitions).

Both read the message table (checkers.spark_queue.message_table) with the queue
check's own class definitions (`_flags`), and collect only aggregates: a
group-by of (bucket, fate) for the fates, of (window, class) for the
attribution, plus at most EXAMPLES ids per window and class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checkers.fates import (
    ATTRIBUTED,
    EXAMPLES,
    REORDERED,
    bucket_width,
    by_fault_section,
    fates_section,
    merge_by_fault,
)
from checkers.spark_queue import _flags, id_order
from history.faults import FaultWindow


def fate_column(drained: bool, drain_start: int | None) -> Column:
    """Takes whether lost messages are proven lost and the drain phase's start (ns; None: no
    drain). Returns, per message row, its fate (checkers.fates), null for an id never published."""
    flags = _flags()
    consumed = F.col("consumed_time")
    in_drain = (F.lit(False) if drain_start is None
                else F.coalesce(consumed >= F.lit(drain_start), F.lit(False)))
    return (F.when(~flags["attempt"], F.lit(None))
            .when(flags["lost"], F.lit("lost" if drained else "unproven"))
            .when(flags["unflagged_duplicated"], F.lit("unflagged_duplicated"))
            .when(flags["redelivered_duplicated"], F.lit("redelivered_duplicated"))
            .when(flags["recovered"], F.lit("recovered"))
            .when(flags["delivered_failed"], F.lit("delivered_failed"))
            .when(flags["dropped_by_design"], F.lit("dropped_by_design"))
            .when(~flags["ok"], F.lit("unconfirmed"))
            .when(in_drain, F.lit("delivered_in_drain"))
            .otherwise(F.lit("delivered")))


def fate_counts(msgs: DataFrame, drained: bool, drain_start: int | None,
                width_ns: int) -> list[tuple[int, str, int]]:
    """Takes the message table, whether lost is proven, the drain's start and the bucket width
    (ns). Returns (bucket, fate, count) for every non-empty bucket of publish time."""
    rows = (msgs.select((F.col("inv_time") / F.lit(width_ns)).cast("long").alias("b"),
                        fate_column(drained, drain_start).alias("fate"))
            .where(F.col("fate").isNotNull())
            .groupBy("b", "fate").count().collect())
    return [(int(r["b"] or 0), r["fate"], int(r["count"])) for r in rows]


def window_of(t: Column, windows: Sequence[FaultWindow]) -> Column:
    """Takes a time column (ns) and the fault windows in start order. Returns the index of the
    first window whose end is at or after the time, else the last window (a time after every
    fault ended: the last fault's aftermath), null for a null time or no windows."""
    if not windows:
        return F.lit(None).cast("int")
    out = F.lit(len(windows) - 1)
    for i in reversed(range(len(windows))):
        out = F.when(t <= F.lit(windows[i].end_ns), F.lit(i)).otherwise(out)
    return F.when(t.isNull(), F.lit(None).cast("int")).otherwise(out)


def _attributed(tagged: DataFrame, windows: Sequence[FaultWindow]) -> list[dict[str, object]]:
    """Takes rows of (id, t, cls) and the windows. Returns the by_fault list."""
    rows = tagged.select("id", "cls", window_of(F.col("t"), windows).alias("w"))
    rank = Window.partitionBy("w", "cls").orderBy(*id_order())
    got = (rows.select("*", F.row_number().over(rank).alias("rn"),
                       F.count(F.lit(1)).over(Window.partitionBy("w", "cls")).alias("n"))
           .where(F.col("rn") <= EXAMPLES).collect())
    counts: dict[tuple[int | None, str], int] = {}
    examples: dict[tuple[int | None, str], list[str]] = {}
    for r in sorted(got, key=lambda r: r["rn"]):
        counts[(r["w"], r["cls"])] = int(r["n"])
        examples.setdefault((r["w"], r["cls"]), []).append(r["id"])
    spans = [(round(w.start_ns / 1e6, 3), round(w.end_ns / 1e6, 3)) for w in windows]
    return by_fault_section(spans, counts, examples)


def publish_time() -> Column:
    """Returns a message row's attribution time: its publish's completion, else invocation."""
    return F.coalesce(F.col("comp_time"), F.col("inv_time"))


def queue_by_fault(msgs: DataFrame, windows: Sequence[FaultWindow],
                   classes: Sequence[str]) -> list[dict[str, object]]:
    """Takes the message table, the fault windows and the ATTRIBUTED classes with messages.
    Returns their by_fault entries (checkers.fates)."""
    kinds = [k for k in ATTRIBUTED if k in classes]
    if not kinds:
        return []
    flags = _flags()
    tags = F.array(*[F.when(flags[k], F.lit(k)) for k in kinds])
    tagged = (msgs.where(F.greatest(*[flags[k] for k in kinds]) if len(kinds) > 1
                         else flags[kinds[0]])
              .select("id", publish_time().alias("t"), F.explode(tags).alias("cls"))
              .where(F.col("cls").isNotNull()))
    return _attributed(tagged, windows)


def violations_by_fault(violations: DataFrame, msgs: DataFrame,
                        windows: Sequence[FaultWindow]) -> list[dict[str, object]]:
    """Takes the ordering violations (rows with the later delivery's message `id`), the message
    table and the fault windows. Returns by_fault for class "reordered"."""
    times = msgs.select(F.col("id").alias("m_id"), publish_time().alias("t"))
    tagged = (violations.select("id").join(times, F.col("id") == F.col("m_id"), "left")
              .select("id", "t", F.lit(REORDERED).alias("cls")))
    return _attributed(tagged, windows)


def fates_of(msgs: DataFrame, counts: Mapping[str, Any], windows: Sequence[FaultWindow],
             drained: bool, drain_start: int | None, span: tuple[int, int],
             reordered: Sequence[Mapping[str, Any]] = ()) -> dict[str, object]:
    """Takes the message table, the queue section (its counts say which classes to attribute),
    the fault windows, whether lost is proven, the drain's start (ns, or None), the history's
    first and last times, and the ordering violations' by_fault. Returns the "fates" section
    (checkers.fates)."""
    width = bucket_width(*span)
    present = [k for k in ATTRIBUTED if counts.get(f"{k}_count")]
    section = fates_section(fate_counts(msgs, drained, drain_start, width), width, drained)
    section["by_fault"] = merge_by_fault(queue_by_fault(msgs, windows, present), reordered)
    return section
