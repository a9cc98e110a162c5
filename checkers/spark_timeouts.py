"""The consumer-timeout section in Spark (the rule: checkers.timeouts).

Reads, from the JSONL history, the ok client ops of publishes, deliveries and
dead letters, and the timed-out consumers' ends (the broker's cancels, and the
channels it closed with 406), under a schema of its own (`by`, `holding`,
`reply_code`, `reply_text`). The ends are few; each held message's ops after
the delivery its consumer held it by are found by joins with them, classified
in columns, and counted; each example of a violation comes with its timeline
(its message's ops and the end). For the report's plot, a bounded sample of the
held messages (`held`): when their end came, how long the consumer had held
each (from its last delivery to that consumer before the end) and its outcome.
On a single-active-consumer queue, each end's hand-over facts
(checkers.timeouts.HandOverFacts) are found by joins too and judged on the
driver (`hand_over`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from checkers.model import ACK, CANCEL, CLOSE, DEAD_LETTER, DELIVERY_FS, END_FS, PUBLISH
from checkers.spark_retry import CLIENT_OP_FIELDS, TIMELINE_LIMIT
from checkers.timeouts import (
    ACKED_AFTER_END,
    CANCELLED,
    CLOSED_406,
    DEAD_LETTERED,
    DELIVERED_AFTER_CANCEL,
    LOST,
    NOT_JUDGED_DRAIN,
    PRECONDITION_FAILED,
    REDELIVERED,
    UNFLAGGED,
    HandOverFacts,
    hand_over_section,
    section,
)
from history import BY_BROKER

SCHEMA: Final = T.StructType([
    *CLIENT_OP_FIELDS,
    T.StructField("by", T.StringType()), T.StructField("holding", T.ArrayType(T.StringType())),
    T.StructField("reply_code", T.LongType()), T.StructField("reply_text", T.StringType()),
])
HELD_SAMPLE: Final = 1000  # held messages the `held` sample keeps at most (violations first)


def consumer_timeout_check(spark: SparkSession, source: Path, settings: Mapping[str, Any],
                           drain_complete: bool, example_size: int = 5, *, bound: Any = None,
                           windows: Sequence[tuple[int, int]] = (),
                           main_end: int | None = None,
                           depth: Sequence[tuple[int, int]] = ()) -> dict[str, Any]:
    """Takes a session, the JSONL history, the settings the harness observed, whether the drain
    completed, how many examples to give and, for a single-active-consumer queue's hand-overs,
    the liveness bound (checkers.liveness.LivenessBound; None: unknown), the fault windows
    (start, end ns), the main phase's end (ns; None: the history's last op) and the harness's
    depth samples (checkers.timeouts.depth_samples). Returns the section
    (checkers.timeouts.section)."""
    client = spark.read.schema(SCHEMA).json(str(source)).where(F.col("process").rlike(r"^\d+$"))
    ops = client.where(F.col("type") == "ok")
    # A basic.cancel the broker sent again for a consumer it had cancelled (workloads.clients
    # records it as an info op and keeps it from pika): counted, not judged.
    repeated = client.where((F.col("type") == "info") & (F.col("f") == CANCEL)
                            & (F.col("by") == BY_BROKER)).count()
    cancels = timed_out_ends(client).cache()
    msgs = ops.where(F.col("value").isNotNull()
                     & F.col("f").isin(*DELIVERY_FS, DEAD_LETTER, ACK))
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
        F.max(F.when(F.col("f") == DEAD_LETTER, True)).alias("dead"),
        F.max(F.when(F.col("f") == ACK, True)).alias("acked"))
    outcome = (F.when(F.col("nxt").isNotNull() & F.col("nxt.redelivered"), F.lit(REDELIVERED))
               .when(F.col("nxt").isNotNull(), F.lit(UNFLAGGED))
               .when(F.col("dead"), F.lit(DEAD_LETTERED))
               .when(F.col("acked"), F.lit(ACKED_AFTER_END))
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
    examples = with_timelines(client, examples[:example_size])
    end_rows = cancels.orderBy("c_index").collect()
    ends = {how: sum(1 for r in end_rows if r["how"] == how) for how in (CANCELLED, CLOSED_406)}
    hand_over = None
    if settings.get("single_active_consumer"):
        last = main_end if main_end is not None else (
            client.agg(F.max("time")).collect()[0][0] or 0)
        hand_over = hand_over_section(hand_over_facts(client, cancels), bound, windows, last,
                                      example_size, depth)
    out = section(settings, ends, counts, examples, hand_over)
    cancels.unpersist()
    return {**out, "repeated_cancels": repeated, "held": held_sample(held, judged),
            "ends": [end_summary(r) for r in end_rows[:HELD_SAMPLE]]}


def timed_out_ends(client: DataFrame) -> DataFrame:
    """Takes the client ops. Returns each timed-out consumer's end (checkers.timeouts): an ok
    cancel by the broker, or an info close by the broker with reply code 406; as (c_index,
    c_time, c_process, c_consumer, held: the ids it held, how, reply_code, reply_text)."""
    by_broker = F.col("by") == BY_BROKER
    cancel = (F.col("type") == "ok") & (F.col("f") == CANCEL)
    close = ((F.col("type") == "info") & (F.col("f") == CLOSE)
             & (F.col("reply_code") == PRECONDITION_FAILED))
    return client.where(by_broker & (cancel | close)).select(
        F.col("index").alias("c_index"), F.col("time").alias("c_time"),
        F.col("process").alias("c_process"),
        F.col("consumer").alias("c_consumer"), F.coalesce("holding", F.array()).alias("held"),
        F.when(F.col("f") == CANCEL, F.lit(CANCELLED)).otherwise(F.lit(CLOSED_406)).alias("how"),
        "reply_code", "reply_text")


def end_summary(r: Any) -> dict[str, Any]:
    """Takes an end's row (timed_out_ends). Returns it for the section's `ends` list: index, ms,
    process, consumer, how, what it held (count), and the reply code and text of a close."""
    return {"index": r["c_index"], "ms": round(r["c_time"] / 1e6, 3), "process": r["c_process"],
            "consumer": r["c_consumer"], "how": r["how"], "held": len(r["held"]),
            "reply_code": r["reply_code"], "reply_text": r["reply_text"]}


def hand_over_facts(client: DataFrame, ends: DataFrame) -> list[HandOverFacts]:
    """Takes the client ops and the timed-out consumers' ends. Returns each end's hand-over
    facts (checkers.timeouts.HandOverFacts), in history order: the messages confirmed before it
    and not delivered before it (`waiting`), the first main-phase delivery to another consumer
    after the ended consumer's last delivery before it, and the consumers live at it."""
    ops = client.where(F.col("type") == "ok")
    e = F.broadcast(ends.select("c_index", "c_time", "c_process", "c_consumer", "how",
                                F.size("held").alias("n_held")))
    fed = ops.where(F.col("f") == "consume").select("index", "time", "process", "consumer")
    own = fed.join(e, (fed["process"] == e["c_process"]) & (fed["consumer"] == e["c_consumer"])
                   & (fed["index"] < e["c_index"])).groupBy("c_index").agg(
        F.max("index").alias("own_last"))
    since = e.join(own, "c_index", "left").select(
        "*", F.coalesce("own_last", "c_index").alias("since"))
    other = (fed["index"] > since["since"]) & ~(
        (fed["process"] == since["c_process"]) & (fed["consumer"] == since["c_consumer"]))
    nxt = fed.join(since, other).groupBy("c_index").agg(
        F.min(F.struct("index", "time", "process", "consumer")).alias("nxt"))
    waiting = _waiting(ops, e)
    live = _live(client, e)
    rows = (since.join(nxt, "c_index", "left").join(waiting, "c_index", "left")
            .join(live, "c_index", "left").orderBy("c_index").collect())
    return [HandOverFacts(
        index=r["c_index"], time=r["c_time"], process=r["c_process"], consumer=r["c_consumer"],
        how=r["how"], held=r["n_held"], waiting=r["waiting"] or 0,
        next_index=r["nxt"]["index"] if r["nxt"] else None,
        next_time=r["nxt"]["time"] if r["nxt"] else None,
        next_process=r["nxt"]["process"] if r["nxt"] else None,
        next_consumer=r["nxt"]["consumer"] if r["nxt"] else None,
        live=tuple(sorted(r["live"] or ()))) for r in rows]


def _waiting(ops: DataFrame, ends: DataFrame) -> DataFrame:
    """Takes the ok client ops and the ends. Returns (c_index, waiting): how many messages were
    confirmed before each end and neither delivered nor dead-lettered before it."""
    confirmed = ops.where(F.col("f") == PUBLISH).groupBy("value").agg(
        F.min("index").alias("confirmed"))
    taken = ops.where(F.col("f").isin(*DELIVERY_FS, DEAD_LETTER)).groupBy("value").agg(
        F.min("index").alias("taken"))
    msgs = confirmed.join(taken, "value", "left")
    ready = (msgs["confirmed"] < ends["c_index"]) & (
        msgs["taken"].isNull() | (msgs["taken"] > ends["c_index"]))
    return msgs.join(ends, ready).groupBy("c_index").agg(F.count("*").alias("waiting"))


def _live(client: DataFrame, ends: DataFrame) -> DataFrame:
    """Takes the client ops and the ends. Returns (c_index, live): the consumers ("<process>
    <tag>") other than the ended one with a delivery before each end and no end op (cancel or
    close, any type) before it."""
    tagged = client.where(F.col("consumer").isNotNull())
    span = tagged.groupBy("process", "consumer").agg(
        F.min(F.when(F.col("f").isin(*DELIVERY_FS) & (F.col("type") == "ok"),
                     F.col("index"))).alias("fed"),
        F.min(F.when(F.col("f").isin(*END_FS), F.col("index"))).alias("ended"))
    at = ((span["fed"] < ends["c_index"])
          & (span["ended"].isNull() | (span["ended"] > ends["c_index"]))
          & ~((span["process"] == ends["c_process"]) & (span["consumer"] == ends["c_consumer"])))
    return span.join(ends, at).groupBy("c_index").agg(
        F.collect_list(F.concat_ws(" ", "process", "consumer")).alias("live"))


def with_timelines(client: DataFrame,
                   examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Takes the client ops and the examples. Returns each example with its `timeline`: the ok
    ops of its message and the consumer's end (the broker's cancel or close), by index (at most
    TIMELINE_LIMIT), each {"index", "ms", "f", "process", "consumer", "redelivered"}."""
    if not examples:
        return examples
    ids = sorted({e["id"] for e in examples})
    at = sorted({e["cancel_index"] for e in examples})
    mine = (F.col("type") == "ok") & F.col("value").isin(*ids)
    rows = (client.where(mine | F.col("index").isin(*at))
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
