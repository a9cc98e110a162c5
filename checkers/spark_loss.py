"""Loss told apart, in Spark: the runs of each publisher's lost messages and their confirming nodes.

checkers.loss has the definitions. Only when something was lost: the
acknowledged messages of the publishers that lost any are ranked by seq (one
window per publisher), the lost ones grouped into runs (consecutive ranks:
rank minus the lost message's own rank among the lost is constant along a
run), and the lost ids joined with their publish's `ok` op (node, queue,
time) and with the few placement observations (a broadcast) for the role.
Everything collected is an aggregate or bounded: the first publishers and
runs, (node, role) counts, a bucketed series per node, the examples.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checkers.fates import bucket_width
from checkers.loss import (
    FOLLOWER,
    LEADER,
    MAJORITY,
    MAX_NODES,
    MAX_PUBLISHERS,
    MAX_RUNS,
    MINORITY,
    NON_MEMBER,
    UNKNOWN,
    Cut,
    Placement,
    cuts,
    loss_section,
    placements,
    publishers_part,
)
from checkers.model import MESSAGE_ID_PATTERN, OUTCOME_CODES
from checkers.phases import HarnessEvent
from checkers.spark_io import is_publish, literal_rows
from checkers.spark_queue import _flags, id_order
from history.faults import FaultWindow

# Up to this many lost ids are broadcast to the join with the history's confirms.
BROADCAST_LOST: Final = 200_000


def _part(n: int) -> Column:
    return F.regexp_extract("id", MESSAGE_ID_PATTERN, n).try_cast("bigint")


def runs_of(msgs: DataFrame) -> DataFrame:
    """Takes the message table. Returns, lazily, one row per run of lost messages: publisher,
    run, first_seq, last_seq, count, kind (checkers.loss.kind_of), confirmed."""
    flags, parsed = _flags(), F.col("id").rlike(MESSAGE_ID_PATTERN)
    losers = msgs.where(flags["lost"] & parsed).select(_part(1).alias("publisher")).distinct()
    acked = (msgs.where(flags["acknowledged"] & parsed)
             .select(_part(1).alias("publisher"), _part(2).alias("seq"),
                     flags["lost"].alias("lost"))
             .join(F.broadcast(losers), "publisher", "left_semi"))
    by_seq = Window.partitionBy("publisher").orderBy("seq")
    ranked = acked.select("*", F.row_number().over(by_seq).alias("rank"),
                          F.count(F.lit(1)).over(Window.partitionBy("publisher"))
                          .alias("confirmed"))
    lost = ranked.where("lost").select(
        "*", (F.col("rank") - F.row_number().over(by_seq)).alias("run"))
    runs = lost.groupBy("publisher", "run").agg(
        F.min("seq").alias("first_seq"), F.max("seq").alias("last_seq"),
        F.count(F.lit(1)).alias("count"), F.min("rank").alias("r0"), F.max("rank").alias("r1"),
        F.max("confirmed").alias("confirmed"))
    head, tail = F.col("r0") == 1, F.col("r1") == F.col("confirmed")
    kind = (F.when(head & tail, "all").when(head, "prefix").when(tail, "suffix")
            .otherwise("middle"))
    return runs.select("publisher", "run", "first_seq", "last_seq", "count", "confirmed",
                       kind.alias("kind"))


def publisher_facts(runs: DataFrame) -> dict[str, Any]:
    """Takes the runs. Returns the publishers' part of the section (checkers.loss.loss_section):
    the first MAX_PUBLISHERS publishers with their first MAX_RUNS runs, how many publishers lost
    anything, and runs and messages per kind."""
    stats = (runs.groupBy("publisher")
             .agg(F.max("confirmed").alias("confirmed"), F.sum("count").alias("lost"),
                  F.count(F.lit(1)).alias("runs")))
    first = stats.orderBy("publisher").limit(MAX_PUBLISHERS).collect()
    kept = [r["publisher"] for r in first]
    w = Window.partitionBy("publisher").orderBy("first_seq")
    shown = (runs.where(F.col("publisher").isin(kept))
             .select("*", F.row_number().over(w).alias("rn")).where(F.col("rn") <= MAX_RUNS)
             .collect())
    kinds = runs.groupBy("kind").agg(F.count(F.lit(1)).alias("n"),
                                     F.sum("count").alias("m")).collect()
    return {**publishers_part(shown, first), "publishers_count": stats.count(),
            "by_kind": {r["kind"]: (r["n"], r["m"]) for r in kinds}}


def _placement_rows(msgs: DataFrame, found: Sequence[Placement]) -> DataFrame:
    return literal_rows(
        msgs.sparkSession,
        [(p.order, p.time, p.queue, p.leader, list(p.followers)) for p in found],
        "p_order long, p_time long, p_queue string, leader string, followers array<string>")


def side_column(node: Column, t: Column, found: Sequence[Cut]) -> Column:
    """Takes the confirming node and confirm time columns and the partitions' cuts (a few).
    Returns the side column (checkers.loss's definition): MINORITY where a cut that covers the
    time left the node on a minority side, else MAJORITY where any cut covers it, else null
    (and null without a node)."""
    if not found:
        return F.lit(None).cast("string")
    minority = majority = F.lit(False)
    for c in found:
        inside = t.between(F.lit(c.start), F.lit(c.end))
        majority = majority | inside
        if c.minority:
            minority = minority | (inside & node.isin(list(c.minority)))
    return (F.when(node.isNotNull() & minority, F.lit(MINORITY))
            .when(node.isNotNull() & majority, F.lit(MAJORITY)).cast("string"))


def confirms_of(h_df: DataFrame, msgs: DataFrame, found: Sequence[Placement],
                lost_count: int, partitions: Sequence[Cut] = ()) -> DataFrame:
    """Takes the prepared rows, the message table, the placement observations, the lost
    count and the partitions' cuts. Returns, lazily, one row per lost id: id, node (UNKNOWN
    without one), role, side, inv_time, comp_time. A few lost ids are broadcast to the
    history's publishes, which are then read once and never shuffled."""
    ok = (h_df.where(is_publish() & (F.col("code") == OUTCOME_CODES["ok"]))
          .select(F.col("value").alias("id"), "node", "queue"))
    lost = msgs.where(_flags()["lost"]).select("id", "inv_time", "comp_time")
    rows = (F.broadcast(lost) if lost_count <= BROADCAST_LOST else lost).join(ok, "id", "left")
    keys = ["id", "node", "queue", "inv_time", "comp_time"]
    if found:
        pl = F.broadcast(_placement_rows(msgs, found))
        match = ((F.col("p_time") <= F.col("comp_time"))
                 & (F.col("p_queue").isNull() | F.col("queue").isNull()
                    | (F.col("p_queue") == F.col("queue"))))
        last = F.max_by(F.struct("leader", "followers"), "p_order")
        rows = (rows.join(pl, match, "left").groupBy(*keys).agg(last.alias("p"))
                .select(*keys, "p.leader", "p.followers"))
    else:
        rows = rows.select(*keys, F.lit(None).cast("string").alias("leader"),
                           F.lit(None).cast("array<string>").alias("followers"))
    node = F.col("node")
    role = (F.when(node.isNull() | F.col("leader").isNull(), UNKNOWN)
            .when(node == F.col("leader"), LEADER)
            .when(F.array_contains("followers", node), FOLLOWER).otherwise(NON_MEMBER))
    return rows.select("id", F.coalesce(node, F.lit(UNKNOWN)).alias("node"), role.alias("role"),
                       side_column(node, F.col("comp_time"), partitions).alias("side"),
                       "inv_time", "comp_time")


def _ms(ns: Any) -> float | None:
    return None if ns is None else round(ns / 1e6, 3)


def examples_of(confirms: DataFrame, runs: DataFrame, n: int) -> list[dict[str, Any]]:
    """Takes the lost ids' confirms, the runs and a size. Returns the first `n` lost ids in id
    order, each with its publisher, seq, run kind, confirming node, its role and side, and its
    publish and confirm times (ms)."""
    if n <= 0:
        return []
    first = confirms.orderBy(*id_order()).limit(n).select(
        "*", _part(1).alias("pub"), _part(2).alias("seq"))
    inside = ((F.col("pub") == F.col("publisher"))
              & F.col("seq").between(F.col("first_seq"), F.col("last_seq")))
    rows = first.join(runs, inside, "left").select(
        "id", "pub", "seq", "kind", "node", "role", "side", "inv_time", "comp_time").collect()
    rows = sorted(rows, key=lambda r: (r["pub"] is None, r["pub"] or 0, r["seq"] or 0, r["id"]))
    return [{"id": r["id"], "publisher": r["pub"], "seq": r["seq"], "kind": r["kind"],
             "node": r["node"], "role": r["role"], "side": r["side"],
             "published_ms": _ms(r["inv_time"]),
             "confirmed_ms": _ms(r["comp_time"])} for r in rows]


def loss_facts(h_df: DataFrame, msgs: DataFrame, harness: Sequence[HarnessEvent],
               span: tuple[int, int], lost_count: int, example_size: int,
               windows: Sequence[FaultWindow] = ()) -> dict[str, Any]:
    """Takes the prepared rows, the message table, the harness events, the history's first and
    last times (ns), the lost count, the example size and the fault windows. Returns
    results.json's `queue.loss` (checkers.loss)."""
    found = placements(harness)
    runs = runs_of(msgs).persist()
    confirms = confirms_of(h_df, msgs, found, lost_count, cuts(windows)).persist()
    try:
        parts = publisher_facts(runs)
        told = sum(m for _, m in parts["by_kind"].values())
        by_node = (confirms.groupBy("node", "role", "side").count()
                   .orderBy(F.col("count").desc(), "node", "role",
                            F.coalesce(F.col("side"), F.lit("")))
                   .limit(MAX_NODES).collect())
        width = bucket_width(*span)
        series = (confirms.where(F.col("node").isin([r["node"] for r in by_node]))
                  .groupBy("node", (F.col("inv_time") / F.lit(width)).cast("long")
                           .alias("bucket")).count().collect())
        parts.update(unsequenced_count=lost_count - int(told),
                     placements_observed=bool(found))
        return loss_section(parts, by_node, series, width,
                            examples_of(confirms, runs, example_size))
    finally:
        runs.unpersist()
        confirms.unpersist()
