"""The consumer-timeout section in Spark (the rule: checkers.timeouts).

Reads, from the JSONL history, the ok client ops of deliveries, dead letters
and the broker's cancels, under a schema of its own (`by`, `holding`). The
broker's cancels are few; each held message's ops after the delivery its
consumer held it by are found by joins with them, classified in columns, and
counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from checkers.model import CANCEL, DEAD_LETTER, DELIVERY_FS
from checkers.spark_retry import CLIENT_OP_FIELDS
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


def consumer_timeout_check(spark: SparkSession, source: Path, settings: Mapping[str, Any],
                           drain_complete: bool, example_size: int = 5) -> dict[str, Any]:
    """Takes a session, the JSONL history, the settings the harness observed, whether the drain
    completed and how many examples to give. Returns the section (checkers.timeouts.section)."""
    ops = (spark.read.schema(SCHEMA).json(str(source))
           .where((F.col("type") == "ok") & F.col("process").rlike(r"^\d+$")))
    cancels = ops.where((F.col("f") == CANCEL) & (F.col("by") == "broker")).select(
        F.col("index").alias("c_index"), F.col("process").alias("c_process"),
        F.col("consumer").alias("c_consumer"), F.coalesce("holding", F.array()).alias("held"))
    msgs = ops.where(F.col("value").isNotNull() & F.col("f").isin(*DELIVERY_FS, DEAD_LETTER))
    dlv = F.col("f").isin(*DELIVERY_FS)
    after = msgs.join(cancels, (msgs["index"] > cancels["c_index"]) & dlv
                      & (msgs["process"] == cancels["c_process"])
                      & (msgs["consumer"] == cancels["c_consumer"]))
    fed = after.orderBy("index").limit(example_size).collect()
    n_fed = after.count()
    later = since_held(cancels, msgs)
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
    return section(settings, cancels.count(), counts, examples[:example_size])


def since_held(cancels: DataFrame, msgs: DataFrame) -> DataFrame:
    """Takes the broker's cancels (c_index, c_process, c_consumer, held) and the messages' ops.
    Returns, for each message a cancel names as held (c_index, id), its ops after the delivery
    the consumer held it by (its last to that consumer before the cancel; the cancel itself
    without one), joined left: the broker returns the messages as it sends the cancel, and
    another client process may record the redelivery before the cancelled one records the
    cancel (checkers.timeouts)."""
    held = cancels.select("c_index", "c_process", "c_consumer", F.explode("held").alias("id"))
    own = msgs.where(F.col("f").isin(*DELIVERY_FS)).select(
        F.col("value").alias("o_id"), F.col("index").alias("o_index"),
        F.col("process").alias("o_process"), F.col("consumer").alias("o_consumer"))
    mine = ((own["o_id"] == held["id"]) & (own["o_process"] == held["c_process"])
            & (own["o_consumer"] == held["c_consumer"]) & (own["o_index"] < held["c_index"]))
    since = held.join(own, mine, "left").groupBy("c_index", "id").agg(
        F.coalesce(F.max("o_index"), F.max("c_index")).alias("h_index"))
    return since.join(msgs, (msgs["value"] == since["id"]) & (msgs["index"] > since["h_index"]),
                      "left")
