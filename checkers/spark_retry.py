"""The delayed-retry section in Spark (the rule: checkers.retry).

Reads, from the JSONL history, the ok client ops that carry a message
(deliveries, acks, rejects, nacks, dead letters) with the fields the rule
needs, under an explicit schema of its own (the shared prepared rows keep no
delivery count), and the ops that end a consumer (the harness's close, a lost
connection, the broker's cancel or 406 close). One window per message id
finds, for each op, the next delivery after it (by history index), whether a
dead letter follows it, the rejects so far and the message's next op. The
returns are the rejects, the nacks and the deliveries whose next op is not
their consumer's settlement (lost with their consumer); a lost one's moment is
bounded by its consumer's end and the fault windows the caller passes (a small
frame, joined). Each return is classified in columns; the counts per kind and
outcome and a few examples (with their message's timeline) are collected, and,
for the report's plot, a bounded sample of the judged returns followed by a
delivery: each one's time, observed delay, least delay and outcome (`delays`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from checkers.model import ACK, CANCEL, CLOSE, DEAD_LETTER, DELIVERY_FS
from checkers.retry import (
    COUNT_LOW,
    DEAD_LETTERED,
    DELAYS_FAILED,
    DELAYS_RETURNED,
    EARLY,
    GONE,
    LOST,
    NACK,
    NOT_JUDGED,
    NOT_JUDGED_DRAIN,
    NOT_JUDGED_PATH,
    NOT_JUDGED_TIMEOUT,
    NOT_JUDGED_UNBOUNDED,
    PAST_LIMIT,
    REDELIVERED,
    REJECT,
    TOLERANCE_MS,
    UNFLAGGED,
    VIOLATIONS,
    section,
)
from history.faults import FaultWindow

# The fields of a client op that say which consumer settled or got what, and when: what the
# settlement checks (this module, checkers.spark_timeouts) read of the history besides their own.
CLIENT_OP_FIELDS: Final = (
    T.StructField("index", T.LongType()), T.StructField("time", T.LongType()),
    T.StructField("type", T.StringType()), T.StructField("process", T.StringType()),
    T.StructField("f", T.StringType()), T.StructField("value", T.StringType()),
    T.StructField("consumer", T.StringType()), T.StructField("redelivered", T.BooleanType()),
)
SCHEMA: Final = T.StructType([
    *CLIENT_OP_FIELDS, T.StructField("delivery_count", T.LongType()),
    T.StructField("node", T.StringType()), T.StructField("by", T.StringType()),
    T.StructField("reply_code", T.LongType())])
TIMELINE_LIMIT: Final = 20  # events of one message an example shows
DELAY_SAMPLE: Final = 1000  # returns the `delays` sample keeps at most (violations first)
FAILED, RETURNED, EITHER = "failed", "returned", "either"  # how a return went back (its path)
# How a consumer ended (the first of these after a delivery it never settled).
END_CLOSE, END_LOST, END_TIMEOUT = "close", "lost", "timeout"
PRECONDITION_FAILED: Final = 406  # the broker's close of a timed-out consumer's channel
FAULTS_SCHEMA: Final = T.StructType([
    T.StructField("lo", T.LongType()), T.StructField("hi", T.LongType()),
    T.StructField("kill_of", T.ArrayType(T.StringType()))])


def _least_ns(settings: Mapping[str, Any], count: Column) -> Column:
    """Returns the least delay (ns) of a held return as a column: min(min x max(1, count),
    max) (rabbit_fifo:calculate_ready_at)."""
    delay = F.lit(int(settings.get("min_ms") or 0)) * F.greatest(count, F.lit(1))
    cap = settings.get("max_ms")
    ms = delay if cap is None else F.least(delay, F.lit(int(cap)))
    return ms * F.lit(1_000_000)


def _expected_ns(settings: Mapping[str, Any]) -> Column:
    """Returns each return's least delay (ns) as a column from its `path` and `count`: the
    delay when the type holds that path's returns, else 0 (an EITHER path is held only
    under "all"; the others are not judged, `_outcome`)."""
    kind = settings.get("type")
    held = (F.when(F.col("path") == FAILED, F.lit(kind in DELAYS_FAILED))
            .when(F.col("path") == RETURNED, F.lit(kind in DELAYS_RETURNED))
            .otherwise(F.lit(kind == "all")))
    return F.when(held, _least_ns(settings, F.col("count"))).otherwise(F.lit(0))


def _outcome(settings: Mapping[str, Any], drain_complete: bool) -> Column:
    """Returns each return's outcome as a column (checkers.retry's names), from its `nxt`
    delivery, `dead`, `rejects`, `count`, `path`, `moment` and `unjudged` (a reason the moment
    cannot be had, or null) and `ended` (false for a delivery whose consumer has no end in the
    history: held, not known to be returned, so not judged even as gone) columns."""
    delay = F.col("nxt.time") - F.col("moment")
    limit = settings.get("delivery_limit")
    past = F.col("count") > F.lit(int(limit)) if limit is not None else F.lit(False)
    other_path = (F.col("path") == EITHER) | (
        (F.col("kind") == NACK)
        & (F.coalesce(F.col("nxt.delivery_count"), F.lit(0))
           > F.coalesce(F.col("delivery_count"), F.lit(0))))
    return (F.when(F.col("unjudged") == NOT_JUDGED_TIMEOUT, F.lit(NOT_JUDGED_TIMEOUT))
            .when(~F.col("ended"), F.lit(NOT_JUDGED_UNBOUNDED))
            .when(F.col("nxt").isNull() & F.col("dead"), F.lit(DEAD_LETTERED))
            .when(F.col("nxt").isNull(), F.lit(GONE if drain_complete else NOT_JUDGED_DRAIN))
            .when(F.col("unjudged").isNotNull(), F.col("unjudged"))
            .when(other_path & F.lit(settings.get("type") != "all"), F.lit(NOT_JUDGED_PATH))
            .when(F.col("nxt.delivery_count") < F.col("rejects"), F.lit(COUNT_LOW))
            .when(delay < _expected_ns(settings) - F.lit(TOLERANCE_MS * 1_000_000), F.lit(EARLY))
            .when(~F.coalesce(F.col("nxt.redelivered"), F.lit(False)), F.lit(UNFLAGGED))
            .when(past, F.lit(PAST_LIMIT))
            .otherwise(F.lit(REDELIVERED)))


def _ends(ops: DataFrame) -> DataFrame:
    """Takes the history's client ops (SCHEMA). Returns the ops that end a consumer, each (e_process, e_consumer, e: {index, time,
    how}): the harness's close (an invocation f CLOSE by the harness: its closes and the
    planted crashes), a lost channel or connection (`info` f CLOSE by the broker) and a
    consumer timeout (`ok` f CANCEL by the broker, or the broker's close with 406)."""
    how = (F.when((F.col("type") == "invoke") & (F.col("f") == CLOSE)
                  & (F.col("by") == "harness"), F.lit(END_CLOSE))
           .when((F.col("type") == "info") & (F.col("f") == CLOSE) & (F.col("by") == "broker")
                 & (F.coalesce(F.col("reply_code"), F.lit(0)) == PRECONDITION_FAILED),
                 F.lit(END_TIMEOUT))
           .when((F.col("type") == "info") & (F.col("f") == CLOSE) & (F.col("by") == "broker"),
                 F.lit(END_LOST))
           .when((F.col("type") == "ok") & (F.col("f") == CANCEL) & (F.col("by") == "broker"),
                 F.lit(END_TIMEOUT)))
    return (ops.select(F.col("process").alias("e_process"), F.col("consumer").alias("e_consumer"),
                       F.struct("index", "time", how.alias("how")).alias("e"))
            .where(F.col("e.how").isNotNull()))


def _faults(spark: SparkSession, faults: Sequence[FaultWindow]) -> DataFrame:
    """Takes the run's fault windows. Returns them as a small frame (lo: the start's invocation
    or start, hi: the end, ns; kill_of: the nodes a kill took down, null for other faults)."""
    rows = []
    for w in faults:
        value = w.value if isinstance(w.value, dict) else {}
        nodes = value.get("nodes") or ([w.node] if w.node else [])
        rows.append((w.invoke_ns if w.invoke_ns is not None else w.start_ns, w.end_ns,
                     [str(n) for n in nodes] if w.f == "kill" and nodes else None))
    return spark.createDataFrame(rows, FAULTS_SCHEMA)


def _lost_moments(spark: SparkSession, lost: DataFrame, ops: DataFrame,
                  faults: Sequence[FaultWindow]) -> DataFrame:
    """Takes the deliveries lost with their consumer (with `nxt`), the history's client ops
    (SCHEMA) and the fault windows. Returns them with `moment` (the earliest the broker
    could have returned each, ns), `path` and `unjudged` (checkers.retry: a close with no fault but kills of other
    nodes in between bounds it by the close's invocation, a kill of the consumer's node by
    the kill's; else unbounded)."""
    ends = _ends(ops)
    first = (lost.join(ends, (F.col("e_process") == F.col("process"))
                       & (F.col("e_consumer") == F.col("consumer"))
                       & (F.col("e.index") > F.col("index")), "left")
             .groupBy("index").agg(F.min("e").alias("end")))
    fw = _faults(spark, faults)
    with_end = lost.join(first, "index", "left")
    hit = (with_end.select("index", "node", "time", "end").join(fw, (F.col("lo") <= F.coalesce(F.col("end.time"), F.lit(2**62)))
                      & (F.col("hi") >= F.col("time")))
           .groupBy("index").agg(
               F.sum(F.when(F.col("kill_of").isNull(), 1).otherwise(0)).alias("other"),
               F.min(F.when(F.array_contains("kill_of", F.col("node")), F.col("lo")))
               .alias("kill_lo")))
    got = with_end.join(hit, "index", "left")
    no_other = F.coalesce(F.col("other"), F.lit(0)) == 0
    moment = (F.when(no_other & F.col("kill_lo").isNull() & (F.col("end.how") == END_CLOSE),
                     F.col("end.time"))
              .when(no_other & F.col("kill_lo").isNotNull()
                    & F.col("end.how").isin(END_CLOSE, END_LOST), F.col("kill_lo")))
    unjudged = (F.when(F.col("end.how") == END_TIMEOUT, F.lit(NOT_JUDGED_TIMEOUT))
                .when(F.col("moment").isNull(), F.lit(NOT_JUDGED_UNBOUNDED))
                .when(F.col("nxt").isNotNull() & (F.col("nxt.time") < F.col("moment")),
                      F.lit(NOT_JUDGED_UNBOUNDED)))
    return (got.withColumn("moment", moment)
            .withColumn("path", F.when(F.col("kill_lo").isNotNull(), F.lit(EITHER))
                        .otherwise(F.lit(FAILED)))
            .withColumn("unjudged", unjudged)
            .withColumn("ended", F.col("end").isNotNull())
            .drop("end", "other", "kill_lo"))


def delayed_retry_check(spark: SparkSession, source: Path, settings: Mapping[str, Any],
                        drain_complete: bool, example_size: int = 5,
                        faults: Sequence[FaultWindow] = ()) -> dict[str, Any]:
    """Takes a session, the JSONL history, the delayed-retry settings the harness observed,
    whether the drain completed, how many examples to give and the run's fault windows.
    Returns the section (checkers.retry.section) with the `delays` sample."""
    ops = spark.read.schema(SCHEMA).json(str(source)).where(F.col("process").rlike(r"^\d+$"))
    rows = ops.where((F.col("type") == "ok") & F.col("value").isNotNull()
                     & F.col("f").isin(*DELIVERY_FS, ACK, REJECT, NACK, DEAD_LETTER))
    by_id = Window.partitionBy("value").orderBy("index")
    after = by_id.rowsBetween(1, Window.unboundedFollowing)
    so_far = by_id.rowsBetween(Window.unboundedPreceding, 0)
    dlv = F.col("f").isin(*DELIVERY_FS)
    nxt = F.min(F.when(dlv, F.struct("index", "time", "redelivered", "delivery_count",
                                     "consumer"))).over(after)
    then = F.lead(F.struct("f", "consumer")).over(by_id)
    facts = rows.select(
        "*", nxt.alias("nxt"), then.alias("then"),
        F.coalesce(F.max(F.when(F.col("f") == DEAD_LETTER, True)).over(after),
                   F.lit(False)).alias("dead"),
        F.sum(F.when(F.col("f") == REJECT, 1).otherwise(0)).over(so_far).alias("rejects"),
    )
    settled = (F.col("then.f").isin(ACK, REJECT, NACK)
               & (F.col("then.consumer") == F.col("consumer")))
    lost = (facts.where((F.col("f") == "consume") & ~F.coalesce(settled, F.lit(False)))
            .drop("then").withColumn("kind", F.lit(LOST)))
    settles = (facts.where(F.col("f").isin(REJECT, NACK)).drop("then")
               .withColumn("kind", F.col("f"))
               .withColumn("moment", F.col("time"))
               .withColumn("path", F.when(F.col("f") == REJECT, F.lit(FAILED))
                           .otherwise(F.lit(RETURNED)))
               .withColumn("unjudged", F.lit(None).cast("string"))
               .withColumn("ended", F.lit(True)))
    returns = settles.unionByName(_lost_moments(spark, lost, ops, faults))
    returns = returns.withColumn("count", F.coalesce(F.col("nxt.delivery_count"),
                                                     F.col("rejects")))
    judged = returns.select("*", _outcome(settings, drain_complete).alias("outcome")).cache()
    try:
        counts = {(r["kind"], r["outcome"]): r["n"] for r in
                  judged.groupBy("kind", "outcome").agg(F.count("*").alias("n")).collect()}
        bad = (judged.where(F.col("outcome").isin(*VIOLATIONS))
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
    examples = [{"id": r["value"], "violation": r["outcome"], "kind": r["kind"],
                 "return_index": r["index"],
                 "moment_ms": None if r["moment"] is None else round(r["moment"] / 1e6, 3),
                 "count": r["count"],
                 "delay_ms": None if r["nxt"] is None or r["moment"] is None else
                 round((r["nxt"]["time"] - r["moment"]) / 1e6, 3),
                 "timeline": timelines[r["value"]]} for r in bad]
    return {**section(settings, counts, examples), "delays": delays}


def delay_sample(judged: DataFrame, settings: Mapping[str, Any]) -> dict[str, Any]:
    """Takes the classified returns and the settings. Returns the `delays` sample: of the
    judged returns followed by a delivery, at most DELAY_SAMPLE (violations first, the rest
    picked by a hash of id and index, so a run samples the same ones), each {"ms": the
    return's moment, "delay_ms": to the next delivery, "bound_ms": the least delay, "count",
    "kind", "outcome"} in time order, with how many there were (`of`) and the limit."""
    limit = DELAY_SAMPLE
    rows = judged.where(F.col("nxt").isNotNull() & ~F.col("outcome").isin(*NOT_JUDGED))
    total = rows.count()
    picked = (rows.select(F.col("moment").alias("time"), "count", "kind", "outcome",
                          (F.col("nxt.time") - F.col("moment")).alias("delay"),
                          _expected_ns(settings).alias("bound"),
                          F.col("outcome").isin(*VIOLATIONS).alias("bad"),
                          F.xxhash64("value", "index").alias("h"))
              .orderBy(F.desc("bad"), "h").limit(limit).collect())
    sample = [{"ms": round(r["time"] / 1e6, 3), "delay_ms": round(r["delay"] / 1e6, 3),
               "bound_ms": round(r["bound"] / 1e6, 3), "count": r["count"], "kind": r["kind"],
               "outcome": r["outcome"]} for r in sorted(picked, key=lambda r: r["time"])]
    return {"of": total, "limit": limit, "sample": sample}


def _event(r: Any) -> dict[str, Any]:
    """Takes a row of the message's ops. Returns it as a timeline event."""
    return {"index": r["index"], "ms": round(r["time"] / 1e6, 3), "f": r["f"],
            "consumer": r["consumer"], "redelivered": r["redelivered"],
            "delivery_count": r["delivery_count"]}
