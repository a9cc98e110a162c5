"""The delayed-retry section in Spark (the rule: checkers.retry).

Reads, from the JSONL history, only the ok client ops that carry a message
(deliveries, rejects, nacks, dead letters) with the fields the rule needs,
under an explicit schema of its own (the shared prepared rows keep no
delivery count). One window per message id finds, for each reject, the next
delivery after it (by history index), whether a dead letter follows it, and
the rejects so far; each reject is classified in columns; the counts per
outcome and a few examples (with their message's timeline) are collected, and,
for the report's plot, a bounded sample of the rejects followed by a delivery:
each one's time, observed delay, least delay and outcome (`delays`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from checkers.model import DEAD_LETTER, DELIVERY_FS
from checkers.retry import (
    COUNT_LOW,
    DEAD_LETTERED,
    EARLY,
    GONE,
    NACK,
    NOT_JUDGED_DRAIN,
    NOT_JUDGED_NACK,
    PAST_LIMIT,
    REDELIVERED,
    REJECT,
    TOLERANCE_MS,
    UNFLAGGED,
    VIOLATIONS,
    section,
)

# The fields of a client op that say which consumer settled or got what, and when: what the
# settlement checks (this module, checkers.spark_timeouts) read of the history besides their own.
CLIENT_OP_FIELDS: Final = (
    T.StructField("index", T.LongType()), T.StructField("time", T.LongType()),
    T.StructField("type", T.StringType()), T.StructField("process", T.StringType()),
    T.StructField("f", T.StringType()), T.StructField("value", T.StringType()),
    T.StructField("consumer", T.StringType()), T.StructField("redelivered", T.BooleanType()),
)
SCHEMA: Final = T.StructType([*CLIENT_OP_FIELDS, T.StructField("delivery_count", T.LongType())])
TIMELINE_LIMIT: Final = 20  # events of one message an example shows
DELAY_SAMPLE: Final = 1000  # returns the `delays` sample keeps at most (violations first)


def _expected_ns(settings: Mapping[str, Any], count: Column) -> Column:
    """Returns the least delay (ns) of a reject's return as a column: min(min x count, max),
    0 when the type delays no reject ("disabled", "returned")."""
    if settings.get("type") not in ("all", "failed"):
        return F.lit(0)
    delay = F.lit(int(settings.get("min_ms") or 0)) * count
    cap = settings.get("max_ms")
    ms = delay if cap is None else F.least(delay, F.lit(int(cap)))
    return ms * F.lit(1_000_000)


def _outcome(settings: Mapping[str, Any], drain_complete: bool) -> Column:
    """Returns each reject's outcome as a column (checkers.retry's names), from its `nxt`
    delivery, `dead`, `rejects` and `count` columns."""
    delay = F.col("nxt.time") - F.col("time")
    limit = settings.get("delivery_limit")
    past = F.col("count") > F.lit(int(limit)) if limit is not None else F.lit(False)
    return (F.when(F.col("f") == NACK, F.lit(NOT_JUDGED_NACK))
            .when(F.col("nxt").isNull() & F.col("dead"), F.lit(DEAD_LETTERED))
            .when(F.col("nxt").isNull(), F.lit(GONE if drain_complete else NOT_JUDGED_DRAIN))
            .when(F.col("nxt.delivery_count") < F.col("rejects"), F.lit(COUNT_LOW))
            .when(delay < _expected_ns(settings, F.col("count"))
                  - F.lit(TOLERANCE_MS * 1_000_000), F.lit(EARLY))
            .when(~F.coalesce(F.col("nxt.redelivered"), F.lit(False)), F.lit(UNFLAGGED))
            .when(past, F.lit(PAST_LIMIT))
            .otherwise(F.lit(REDELIVERED)))


def delayed_retry_check(spark: SparkSession, source: Path, settings: Mapping[str, Any],
                        drain_complete: bool, example_size: int = 5) -> dict[str, Any]:
    """Takes a session, the JSONL history, the delayed-retry settings the harness observed,
    whether the drain completed and how many examples to give. Returns the section
    (checkers.retry.section)."""
    rows = (spark.read.schema(SCHEMA).json(str(source))
            .where((F.col("type") == "ok") & F.col("value").isNotNull()
                   & F.col("process").rlike(r"^\d+$")
                   & F.col("f").isin(*DELIVERY_FS, REJECT, NACK, DEAD_LETTER)))
    by_id = Window.partitionBy("value").orderBy("index")
    after = by_id.rowsBetween(1, Window.unboundedFollowing)
    so_far = by_id.rowsBetween(Window.unboundedPreceding, 0)
    dlv = F.col("f").isin(*DELIVERY_FS)
    nxt = F.min(F.when(dlv, F.struct("index", "time", "redelivered", "delivery_count",
                                     "consumer"))).over(after)
    facts = rows.select(
        "*", nxt.alias("nxt"),
        F.coalesce(F.max(F.when(F.col("f") == DEAD_LETTER, True)).over(after),
                   F.lit(False)).alias("dead"),
        F.sum(F.when(F.col("f") == REJECT, 1).otherwise(0)).over(so_far).alias("rejects"),
    ).where(F.col("f").isin(REJECT, NACK))
    facts = facts.select("*", F.coalesce(F.col("nxt.delivery_count"), F.col("rejects"))
                         .alias("count"))
    judged = facts.select("*", _outcome(settings, drain_complete).alias("outcome")).cache()
    try:
        counts = {r["outcome"]: r["n"] for r in
                  judged.groupBy("outcome").agg(F.count("*").alias("n")).collect()}
        bad = (judged.where(~F.col("outcome").isin(REDELIVERED, DEAD_LETTERED,
                                                   NOT_JUDGED_NACK, NOT_JUDGED_DRAIN))
               .orderBy("index").limit(example_size).collect())
        delays = delay_sample(judged, settings)
    finally:
        judged.unpersist()
    ids = [r["value"] for r in bad]
    timelines: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
    if ids:
        for r in rows.where(F.col("value").isin(*ids)).orderBy("index").collect():
            if len(timelines[r["value"]]) < TIMELINE_LIMIT:
                timelines[r["value"]].append(_event(r))
    examples = [{"id": r["value"], "violation": r["outcome"], "reject_index": r["index"],
                 "count": r["count"],
                 "delay_ms": None if r["nxt"] is None else
                 round((r["nxt"]["time"] - r["time"]) / 1e6, 3),
                 "timeline": timelines[r["value"]]} for r in bad]
    return {**section(settings, counts, examples), "delays": delays}


def delay_sample(judged: DataFrame, settings: Mapping[str, Any]) -> dict[str, Any]:
    """Takes the classified returns and the settings. Returns the `delays` sample: of the
    rejects (nacks are not judged) followed by a delivery, at most DELAY_SAMPLE (violations
    first, the rest picked by a hash of id and index, so a run samples the same ones),
    each {"ms": the reject's time, "delay_ms": to the next delivery, "bound_ms": the least
    delay min(min x count, max), "count", "outcome"} in time order, with how many there were
    (`of`) and the limit."""
    limit = DELAY_SAMPLE
    rows = judged.where((F.col("f") == REJECT) & F.col("nxt").isNotNull())
    total = rows.count()
    picked = (rows.select("time", "count", "outcome", (F.col("nxt.time") - F.col("time"))
                          .alias("delay"), _expected_ns(settings, F.col("count")).alias("bound"),
                          F.col("outcome").isin(*VIOLATIONS).alias("bad"),
                          F.xxhash64("value", "index").alias("h"))
              .orderBy(F.desc("bad"), "h").limit(limit).collect())
    sample = [{"ms": round(r["time"] / 1e6, 3), "delay_ms": round(r["delay"] / 1e6, 3),
               "bound_ms": round(r["bound"] / 1e6, 3), "count": r["count"],
               "outcome": r["outcome"]} for r in sorted(picked, key=lambda r: r["time"])]
    return {"of": total, "limit": limit, "sample": sample}


def _event(r: Any) -> dict[str, Any]:
    """Takes a row of the message's ops. Returns it as a timeline event."""
    return {"index": r["index"], "ms": round(r["time"] / 1e6, 3), "f": r["f"],
            "consumer": r["consumer"], "redelivered": r["redelivered"],
            "delivery_count": r["delivery_count"]}
