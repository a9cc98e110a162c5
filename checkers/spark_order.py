"""The ordering check in Spark: a window per consumer and publisher, comparing each delivery's seq
with the one before it.

Same definition as `checkers.reference.ordering_facts`: a stream is the
deliveries of one publisher's messages to one consumer (process + consumer
tag), in history index order; a delivery whose seq is not greater than the
previous one in its stream is a violation. Redelivered deliveries are left out
unless in strict mode. One aggregate counts the violations and the consumers
affected; examples are fetched only when there are violations.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checkers.model import consumer_identity
from checkers.results import Delivery, Violation
from checkers.spark_io import History, is_delivery

log = logging.getLogger(__name__)


def checked_condition(strict: bool) -> Column:
    """Returns whether a history row is a delivery the ordering check looks at."""
    cond = is_delivery() & F.col("pub").isNotNull() & F.col("seq").isNotNull()
    return cond if strict else cond & ~F.col("redelivered")


def checked_deliveries(h: History, strict: bool) -> DataFrame:
    """Takes a History. Returns the deliveries the ordering check looks at."""
    return h.df.where(checked_condition(strict)).select(
        "pid", F.col("consumer").alias("tag"), "pub", "seq", F.col("value").alias("id"),
        "index", "time", "redelivered")


def with_previous(d: DataFrame, full: bool) -> DataFrame:
    """Takes checked deliveries. Returns them with the previous delivery of their stream: its
    id, seq, index, time and flag as p_* columns if `full`, else its seq only."""
    w = Window.partitionBy("pid", "tag", "pub").orderBy("index")
    cols = ("id", "seq", "index", "time", "redelivered") if full else ("seq",)
    return d.select("*", *[F.lag(c).over(w).alias(f"p_{c}") for c in cols])


def is_violation() -> Column:
    """Returns whether a delivery's seq is not greater than the previous one of its stream."""
    return F.col("p_seq").isNotNull() & (F.col("seq") <= F.col("p_seq"))


def ordering_facts(h: History, strict: bool, example_size: int, sample_size: int) -> dict[str, Any]:
    """Takes a History and the options. Returns the ordering section's facts: one job counts
    the deliveries checked, the violations and the consumers affected (few: one per consumer
    process); only when there are violations, a second one fetches the examples."""
    d = checked_deliveries(h, strict)
    bad = is_violation()
    consumer = F.when(bad, F.struct("pid", "tag"))
    row = with_previous(d.select("pid", "tag", "pub", "seq", "index"), full=False).agg(
        F.count(F.lit(1)).alias("checked"),
        F.count_if(bad).alias("n"),
        F.array_sort(F.collect_set(consumer)).alias("affected"),
    ).collect()[0]
    count, affected_count = row["n"], len(row["affected"])
    affected = [consumer_identity(c["pid"], c["tag"]) for c in row["affected"][:sample_size]]
    examples = []
    if count and example_size:
        examples = [Violation(
            consumer_identity(r["pid"], r["tag"]), r["pub"],
            Delivery(r["p_id"], r["p_seq"], r["p_index"], r["p_time"], r["p_redelivered"]),
            Delivery(r["id"], r["seq"], r["index"], r["time"], r["redelivered"]),
        ) for r in with_previous(d, full=True).where(is_violation()).orderBy("index")
            .limit(example_size).collect()]
    return {
        "deliveries_checked": row["checked"],
        "violation_count": count,
        "consumers_affected_count": affected_count,
        "consumers_affected": affected,
        "examples": examples,
    }

