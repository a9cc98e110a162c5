"""Liveness after the heal in Spark: per queue and node, the ops around the last heal.

Two aggregates, a handful of rows collected (checkers.liveness judges them).
The first groups the client ops by process, then the processes by queue and
node: a process is one connection and channel to one node (its publish ops and
deliveries carry the node and queue; its acks do not, and need not: they
belong to the process). Per process it takes the last confirm before the heal,
the first after, the publishes invoked and refused after it, the first refusal
past heal + bound, the deliveries of the main phase before and after the heal
and its last ack (a delivery after the heal counts once its consumer acked
something at or after it, in a history that records acks); per queue and node
the minima, maxima and sums of those. The second counts, over the message
table, the confirmed messages nobody had consumed at heal + bound (what a
consumer could have been fed). The settlement of each publish and staying
consumer across a heal (checkers.spark_settlement) joins the section as its
`settlement`, its stuck findings with the section's. One pass over the history and one over the
message table, whatever the history's size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from checkers.liveness import (
    CONFIRMS_OFF,
    LivenessBound,
    NodeFacts,
    Timeline,
    liveness_section,
    timeline,
)
from checkers.model import OUTCOME_CODES
from checkers.phases import HarnessEvent
from checkers.settlement import merged
from checkers.spark_io import History, is_ack, is_delivery, is_publish
from checkers.spark_settlement import settlement_check
from history.faults import FaultWindow

OK, FAIL, INFO = OUTCOME_CODES["ok"], OUTCOME_CODES["fail"], OUTCOME_CODES["info"]
INVOKE = OUTCOME_CODES["invoke"]


def _when(cond: Column, col: str = "time") -> Column:
    return F.when(cond, F.col(col))


def node_facts(h: History, tl: Timeline, acks: bool) -> list[NodeFacts]:
    """Takes a History, the timeline (last heal, bound, main phase's end) and whether the history
    records acks. Returns the facts per queue and node (checkers.liveness.NodeFacts)."""
    t, code = F.col("time"), F.col("code")
    pub, ack = is_publish(), is_ack()
    after = t >= F.lit(tl.heal)
    in_main = t <= F.lit(tl.main_end)
    confirmed = pub & (code == OK)
    refused = pub & ((code == FAIL) | ((code == INFO)
                                       & ~F.coalesce(F.col("error") == CONFIRMS_OFF, F.lit(False))))
    consume = is_delivery() & (F.col("f") != "drain")
    drain = is_delivery() & (F.col("f") == "drain")
    per_process = h.df.where(F.col("cls").isNotNull()).groupBy("pid").agg(
        F.max("node").alias("node"), F.max("queue").alias("queue"),
        F.max(_when(confirmed & ~after)).alias("confirm_before"),
        F.min(_when(confirmed & after)).alias("confirm_after"),
        F.count_if(pub & (code == INVOKE) & after & in_main).alias("publishes_after"),
        F.count_if(refused & after).alias("refused_after"),
        F.max(_when(refused & after)).alias("last_refused"),
        F.min(_when(refused & (t >= F.lit(tl.heal + tl.bound)))).alias("refused_past_bound"),
        F.max(_when(consume & ~after)).alias("delivery_before"),
        F.min(_when(consume & after & in_main)).alias("first_delivery"),
        F.count_if(consume & after & in_main).alias("deliveries_after"),
        F.max(_when(ack)).alias("last_ack"),
        F.count_if(drain).alias("drain_deliveries"),
    )
    fed = F.col("first_delivery")
    if acks:
        fed = F.when(F.col("last_ack") >= F.col("first_delivery"), F.col("first_delivery"))
    rows = per_process.groupBy("queue", "node").agg(
        F.max("confirm_before").alias("confirm_before"),
        F.min("confirm_after").alias("confirm_after"),
        F.sum("publishes_after").alias("publishes_after"),
        F.sum("refused_after").alias("refused_after"),
        F.max("last_refused").alias("last_refused"),
        F.min("refused_past_bound").alias("refused_past_bound"),
        F.max("delivery_before").alias("delivery_before"),
        F.min(fed).alias("delivery_after"),
        F.sum("deliveries_after").alias("deliveries_after"),
        F.sum("drain_deliveries").alias("drain_deliveries"),
    ).collect()
    counts = ("publishes_after", "refused_after", "deliveries_after", "drain_deliveries")
    out = []
    for r in rows:
        fields: dict[str, Any] = {k: (int(r[k] or 0) if k in counts else r[k])
                                  for k in r.asDict()}
        out.append(NodeFacts(**fields))
    return out


def held_at(msgs: DataFrame, at: int) -> int:
    """Takes the message table (checkers.spark_queue.message_table) and a time (ns). Returns how many
    messages were confirmed by then and not yet consumed (acked; delivered, without acks)."""
    row = msgs.agg(F.count_if(
        (F.col("comp_code") == OK) & (F.col("comp_time") <= F.lit(at))
        & (F.col("consumed_time").isNull() | (F.col("consumed_time") > F.lit(at)))
    ).alias("held")).collect()[0]
    return int(row["held"] or 0)


def liveness_check(h: History, msgs: DataFrame, windows: Sequence[FaultWindow],
                   main_phase: tuple[int, int], harness: Sequence[HarnessEvent],
                   bound: LivenessBound | None, acks: bool) -> dict[str, Any]:
    """Takes a History, its message table, the fault windows, the main phase, the harness events,
    the bound's inputs (None: unknown) and whether the history records acks. Returns the
    "liveness" section (checkers.liveness), counting only when there is a heal to judge from."""
    tl = timeline(windows, main_phase, bound)
    if tl is None:
        return liveness_section([], windows, main_phase, harness, bound, None)
    facts = node_facts(h, tl, acks)
    held = held_at(msgs, tl.heal + tl.bound) if tl.judged else None
    section = liveness_section(facts, windows, main_phase, harness, bound, held)
    settled = settlement_check(h, windows, tl.bound, tl.main_end, harness, acks)
    return merged(section, settled) if settled is not None else section
