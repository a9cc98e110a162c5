"""The consumer-timeout section in Spark (the rule: checkers.timeouts).

Reads, from the JSONL history, the ok client ops of deliveries, dead letters
and the broker's cancels, under a schema of its own (`by`, `holding`). The
broker's cancels are few; each held message's ops after the delivery its
consumer held it by are found by joins with them, classified in columns, and
counted; each example of a violation comes with its timeline (its message's
ops and the cancel). For the report's plot, a bounded sample of the held
messages (`held`): when their cancel came, how long the consumer had held each
(from its last delivery to that consumer before the cancel) and its outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from checkers.model import CANCEL, DEAD_LETTER, DELIVERY_FS
from checkers.spark_retry import CLIENT_OP_FIELDS, TIMELINE_LIMIT
from checkers.timeouts import (
    DEAD_LETTERED,
    DELIVERED_AFTER_CANCEL,
    LOST,
    NOT_JUDGED_DRAIN,
    REDELIVERED,
    UNFLAGGED,
    section,
)

SCHEMA: Final = T.StructType([
    *CLIENT_OP_FIELDS,
    T.StructField("by", T.StringType()), T.StructField("holding", T.ArrayType(T.StringType())),
])
HELD_SAMPLE: Final = 1000  # held messages the `held` sample keeps at most (violations first)


def consumer_timeout_check(spark: SparkSession, source: Path, settings: Mapping[str, Any],
                           drain_complete: bool, example_size: int = 5) -> dict[str, Any]:
    """Takes a session, the JSONL history, the settings the harness observed, whether the drain
    completed and how many examples to give. Returns the section (checkers.timeouts.section)."""
    client = spark.read.schema(SCHEMA).json(str(source)).where(F.col("process").rlike(r"^\d+$"))
    ops = client.where(F.col("type") == "ok")
    # A basic.cancel the broker sent again for a consumer it had cancelled (workloads.clients
    # records it as an info op and keeps it from pika): counted, not judged.
    repeated = client.where((F.col("type") == "info") & (F.col("f") == CANCEL)
                            & (F.col("by") == "broker")).count()
    cancels = ops.where((F.col("f") == CANCEL) & (F.col("by") == "broker")).select(
        F.col("index").alias("c_index"), F.col("time").alias("c_time"),
        F.col("process").alias("c_process"),
        F.col("consumer").alias("c_consumer"), F.coalesce("holding", F.array()).alias("held"))
    msgs = ops.where(F.col("value").isNotNull() & F.col("f").isin(*DELIVERY_FS, DEAD_LETTER))
    dlv = F.col("f").isin(*DELIVERY_FS)
    after = msgs.join(cancels, (msgs["index"] > cancels["c_index"]) & dlv
                      & (msgs["process"] == cancels["c_process"])
                      & (msgs["consumer"] == cancels["c_consumer"]))
    fed = after.orderBy("index").limit(example_size).collect()
    n_fed = after.count()
    held = held_by(cancels, msgs)
    later = since_held(held, msgs)
    first = later.groupBy("c_index", "id").agg(
        F.min(F.when(dlv, F.struct("index", "redelivered"))).alias("nxt"),
        F.max(F.when(F.col("f") == DEAD_LETTER, True)).alias("dead"))
    outcome = (F.when(F.col("nxt").isNotNull() & F.col("nxt.redelivered"), F.lit(REDELIVERED))
               .when(F.col("nxt").isNotNull(), F.lit(UNFLAGGED))
               .when(F.col("dead"), F.lit(DEAD_LETTERED))
               .otherwise(F.lit(LOST if drain_complete else NOT_JUDGED_DRAIN)))
    judged = first.select("c_index", "id", outcome.alias("outcome"))
    counts = {r["outcome"]: r["n"] for r in
              judged.groupBy("outcome").agg(F.count("*").alias("n")).collect()}
    counts[DELIVERED_AFTER_CANCEL] = n_fed
    bad = (judged.where(F.col("outcome").isin(UNFLAGGED, LOST))
           .orderBy("c_index", "id").limit(example_size).collect())
    examples = ([{"violation": DELIVERED_AFTER_CANCEL, "id": r["value"], "index": r["index"],
                  "cancel_index": r["c_index"], "consumer": r["consumer"]} for r in fed]
                + [{"violation": r["outcome"], "id": r["id"], "cancel_index": r["c_index"]}
                   for r in bad])
    examples = with_timelines(ops, examples[:example_size])
    return {**section(settings, cancels.count(), counts, examples),
            "repeated_cancels": repeated, "held": held_sample(held, judged)}


def with_timelines(ops: DataFrame, examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Takes the ok client ops and the examples. Returns each example with its `timeline`: the
    ops of its message and the broker's cancel, by index (at most TIMELINE_LIMIT), each
    {"index", "ms", "f", "process", "consumer", "redelivered"}."""
    if not examples:
        return examples
    ids = sorted({e["id"] for e in examples})
    at = sorted({e["cancel_index"] for e in examples})
    rows = (ops.where(F.col("value").isin(*ids) | F.col("index").isin(*at))
            .select("index", "time", "f", "process", "consumer", "redelivered", "value")
            .orderBy("index").collect())
    return [{**e, "timeline": [
        {"index": r["index"], "ms": round(r["time"] / 1e6, 3), "f": r["f"],
         "process": r["process"], "consumer": r["consumer"], "redelivered": r["redelivered"]}
        for r in rows if r["value"] == e["id"] or r["index"] == e["cancel_index"]
    ][:TIMELINE_LIMIT]} for e in examples]


def held_sample(held: DataFrame, judged: DataFrame) -> dict[str, Any]:
    """Takes the held messages (`held_by`) and their outcomes. Returns the `held` sample: at most
    HELD_SAMPLE of them (violations first, then by cancel and id), each {"cancel_ms",
    "cancel_index", "consumer", "id", "held_ms": from the delivery the consumer held it by to the
    cancel (None: none in the history), "outcome"}, in cancel order, with how many there were
    (`of`) and the limit."""
    limit = HELD_SAMPLE
    rows = held.join(judged, ["c_index", "id"])
    total = rows.count()
    picked = (rows.select("*", F.col("outcome").isin(UNFLAGGED, LOST).alias("bad"))
              .orderBy(F.desc("bad"), "c_index", "id").limit(limit).collect())
    sample = [{"cancel_ms": round(r["c_time"] / 1e6, 3), "cancel_index": r["c_index"],
               "consumer": r["c_consumer"], "id": r["id"],
               "held_ms": None if r["got"] is None or r["got"]["time"] is None
               else round((r["c_time"] - r["got"]["time"]) / 1e6, 3),
               "outcome": r["outcome"]}
              for r in sorted(picked, key=lambda r: (r["c_index"], r["id"]))]
    return {"of": total, "limit": limit, "sample": sample}


def held_by(cancels: DataFrame, msgs: DataFrame) -> DataFrame:
    """Takes the broker's cancels (c_index, c_time, c_process, c_consumer, held) and the
    messages' ops. Returns one row per message a cancel names as held: (c_index, id, c_time,
    c_consumer, got), `got` the (index, time) of the delivery the consumer held it by, its last
    to that consumer before the cancel (both null without one)."""
    held = cancels.select("c_index", "c_time", "c_process", "c_consumer",
                          F.explode("held").alias("id"))
    own = msgs.where(F.col("f").isin(*DELIVERY_FS))
    mine = ((own["value"] == held["id"]) & (own["process"] == held["c_process"])
            & (own["consumer"] == held["c_consumer"]) & (own["index"] < held["c_index"]))
    return held.join(own, mine, "left").groupBy("c_index", "id", "c_time", "c_consumer").agg(
        F.max(F.struct("index", "time")).alias("got"))


def since_held(held: DataFrame, msgs: DataFrame) -> DataFrame:
    """Takes the held messages (`held_by`) and the messages' ops. Returns, for each (c_index,
    id), its ops after the delivery the consumer held it by (the cancel itself without one),
    joined left: the broker returns the messages as it sends the cancel, and another client
    process may record the redelivery before the cancelled one records the cancel
    (checkers.timeouts)."""
    since = held.select("c_index", "id",
                        F.coalesce(F.col("got.index"), F.col("c_index")).alias("h_index"))
    return since.join(msgs, (msgs["value"] == since["id"]) & (msgs["index"] > since["h_index"]),
                      "left")
