"""The priority check: what RabbitMQ promises of a quorum queue's message priorities, how the
checker tests it, and the Spark job (a running maximum per priority level, in buckets of the
history).

What RabbitMQ promises. From 4.3 a quorum queue has strict priorities,
always on, 32 levels (0-31); a message without a priority counts as 4.
Higher-priority messages are dispatched ahead of lower ones, subject to the
consumer's prefetch. Returned messages (rejected, nacked, or left unacked
when a consumer's channel closed) do not keep their priority: they are
redelivered in the order they were returned, ahead of fresh messages. 4.0 to
4.2 had two levels (0-4 and no priority normal, above 4 high) served at a
ratio (high:normal 2:1), so no strict order is promised there, and 3.x
quorum queues have none. The harness's `priorities` observation
(workloads.queue_workload.priorities_observation) says which the run's line
is: a line without strict priorities gets the section "not applicable", never
false; a run without the observation (no priorities, or an older run) gets
no section.

The rule. A delivery's *level* is its priority, 4 without one; a priority
at or past the line's levels is unknown. A *consumer* is a process and a
consumer tag; its prefetch is the observation's, for the main phase's
(f "consume") or the drain's (f "drain") consumers. A delivery is *returned*
when it is flagged redelivered or the broker counts earlier acquisitions
(x-delivery-count or x-acquired-count above 0). A consumer's *previous
settlement* before a delivery is its last ack before it. Order is history
(index) order; only deliveries and publishes of the observed queue count.
Each delivery d of the queue is, the first that applies:

- not judged, `returned`: returned messages are served in the order they
  came back, whatever their priority (documented);
- not judged, `prefetch`: its consumer's prefetch is not 1 (the broker may
  hand it a lower message while a higher one is in flight elsewhere);
- not judged, `priority_unknown`: its level is unknown;
- not judged, `no_settlement`: its consumer settled nothing before it (when
  the consumer subscribed, and so what was ready then, is not recorded).

The others are held against the messages m that overtook them: m's level is
above d's (m's publish invoke's priority), m's publish was confirmed (an ok
completion) before d's previous settlement s, and m's first delivery (its
lowest-index delivery in the queue) is not returned and comes after d. m was
then in the queue, ready, when the broker received s and dispatched d: the
broker confirms after enqueuing and dispatches d only after s (prefetch 1),
and the harness records s right after writing it (the ack goes through the
queue's Raft log before the broker dispatches again, far slower). Whether
m was still ready then, and not already on its way to another consumer,
depends on that consumer: m was sure to be ready at d's dispatch when the
delivery its consumer received `prefetch` deliveries before m (which it had
to settle before m could be dispatched; with prefetch 1, its previous
delivery) comes at or after d; or when the queue has a single active
consumer (m's consumer became active after d's). m's first recorded
delivery unflagged also says nobody held m before (a consumer that held it
unrecorded, its connection abandoned, would have returned it, flagged).

- a *violation*: some such m was sure to be ready (judged);
- not judged, `competing`: some such m was not sure to be (several
  consumers compete on the queue, and the order of their dispatches is not
  recorded);
- else judged, in order.

Publishes never confirmed are not counted: a message m as above but whose
publish has no ok completion at all, invoked before s, may have been
enqueued after d's dispatch. A judged delivery in order that such an m
overtook is counted in `unconfirmed_set_aside_count`.

Reported: delivery_count (the queue's deliveries), judged_count (in order
or violations), violation_count, not_judged_count and not_judged by reason
(PRIORITY_NOT_JUDGED), unconfirmed_set_aside_count, and the first
`example_size` violations by d's index, each with the message that overtook
it (of those sure to be ready, the one whose readiness bound above, then
id, is greatest) and the timelines of both (ids, indexes, times, nodes,
consumers). Valid: false with a violation, true when a delivery was judged,
else "unknown"; the section composes only when false.

In Spark. One window per consumer stream (deliveries and acks) gives each
delivery its previous settlement and the delivery `prefetch` before it; one
aggregate per message id gives its level, confirm and first delivery. A
message's confirm is an *event* at its confirm's index, carrying its first
delivery and readiness bound; a delivery to judge is a *query* at its
settlement's index. For each level, the greatest bound (with its id) of the
events before a query is a running maximum: the history is cut into buckets
of BUCKET indexes, each bucket's maxima are carried over from the buckets
before it (a small table), and within a bucket one window per bucket runs
the maximum; so the tasks are as many as the buckets, none holds a whole
queue, and nothing but counts and examples is collected.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Row, Window
from pyspark.sql import functions as F

from checkers.model import OUTCOME_CODES, consumer_identity, ns_to_ms
from checkers.results import (
    PRIORITY_NOT_JUDGED,
    priority_not_applicable,
    priority_section,
)
from checkers.spark_io import History, is_ack, is_delivery, is_publish

log = logging.getLogger(__name__)

SECTION: Final = "priority"
# A message published without a priority counts as this level (RabbitMQ 4.3).
DEFAULT_LEVEL: Final = 4
# Indexes per bucket of the running maxima (a task each).
BUCKET: Final = 1 << 18
# Event kinds, in their order at one index (indexes are unique: never needed).
CONFIRMED, UNCONFIRMED, QUERY = 0, 1, 2


def not_applicable(observed: Mapping[str, Any]) -> str | None:
    """Takes the harness's `priorities` observation. Returns why the rule does not apply to the
    run (a line without priorities, or unknown; a line that serves them at a ratio), or None
    when it does. (Only a quorum queue's run records one: the spec refuses priorities for
    the other kinds.)"""
    line, levels = observed.get("line"), observed.get("levels")
    if line is None:
        return "the broker's release line is unknown"
    if not isinstance(levels, int):
        return f"RabbitMQ {line}'s quorum queues have no message priorities"
    if not observed.get("strict"):
        many = "two" if levels == 2 else str(levels)
        return f"{many}-level priorities are served at a ratio (RabbitMQ {line}), not strictly"
    return None


def _level(priority: Column, levels: int) -> Column:
    """Returns a priority's level: the priority below `levels`, DEFAULT_LEVEL without one (when
    the line has it), else null (unknown)."""
    default = F.lit(DEFAULT_LEVEL) if levels > DEFAULT_LEVEL else F.lit(None).cast("long")
    return F.when(priority.isNull(), default).when(
        (priority >= 0) & (priority < levels), priority)


def _in_queue(queue: str | None) -> Column:
    """Returns whether a row is of the observed queue (a row naming none counts)."""
    if queue is None:
        return F.lit(True)
    return F.coalesce(F.col("queue") == F.lit(queue), F.lit(True))


def _back(n: int, w: Any) -> Column:
    """Returns the index of the delivery `n` before this one in its window (null without)."""
    return F.lag("index", n).over(w) if n > 0 else F.lit(None).cast("long")


def deliveries(h: History, observed: Mapping[str, Any]) -> DataFrame:
    """Takes a History and the `priorities` observation. Returns the queue's deliveries, each
    with its consumer stream's facts: `s` (its previous settlement: struct of index and time),
    `bound` (the index of the delivery its prefetch before it: null for none, or an unlimited
    prefetch), `prefetch`, `returned`, `level`, and `why` (the reason it is not judged on its
    own, null for one to judge against the messages that overtook it)."""
    levels = int(observed["levels"])
    prefetch = observed.get("prefetch") or {}
    consume, drain = int(prefetch.get("consume", 0)), int(prefetch.get("drain", 0))
    stream = Window.partitionBy("pid", "consumer").orderBy("index")
    rows = h.df.where((is_delivery() & _in_queue(observed.get("queue"))) | is_ack()).select(
        "cls", "pid", "consumer", "f", F.col("value").alias("id"), "index", "time", "node",
        "redelivered", "acquired", "priority")
    settled = F.last(F.when(is_ack(), F.struct("index", "time")), ignorenulls=True).over(
        stream.rowsBetween(Window.unboundedPreceding, -1))
    d = rows.select("*", settled.alias("s")).where(is_delivery())
    main = F.col("f") == "consume"
    returned = F.col("redelivered") | (F.coalesce(F.col("acquired"), F.lit(0)) > 0)
    d = d.select("id", "pid", "consumer", "index", "time", "node", "priority", "s",
                 F.when(main, _back(consume, stream)).otherwise(_back(drain, stream))
                 .alias("bound"),
                 F.when(main, F.lit(consume)).otherwise(F.lit(drain)).alias("prefetch"),
                 returned.alias("returned"), _level(F.col("priority"), levels).alias("level"))
    why = (F.when(F.col("returned"), F.lit("returned"))
           .when(F.col("prefetch") != 1, F.lit("prefetch"))
           .when(F.col("level").isNull(), F.lit("priority_unknown"))
           .when(F.col("s").isNull(), F.lit("no_settlement")))
    return d.select("*", why.alias("why"))


def messages(h: History, d: DataFrame, observed: Mapping[str, Any]) -> DataFrame:
    """Takes a History, its annotated deliveries and the observation. Returns one row per
    message of the queue published and delivered: `id`, `level` (of its invoke's priority),
    `inv` (its first invoke: index, time, node, priority), `ok` (its first ok completion:
    index, time; null when never confirmed) and `first` (its first delivery: index, returned,
    bound, time, node, pid, consumer)."""
    code = F.col("code")
    pubs = h.df.where(is_publish() & _in_queue(observed.get("queue"))).groupBy(
        F.col("value").alias("id")).agg(
        F.min(F.when(code == 0, F.struct("index", "time", "node", "priority"))).alias("inv"),
        F.min(F.when(code == OUTCOME_CODES["ok"], F.struct("index", "time"))).alias("ok"))
    firsts = d.groupBy("id").agg(F.min(F.struct(
        "index", "returned", "bound", "time", "node", "pid", "consumer")).alias("first"))
    level = F.when(F.col("inv").isNotNull(),
                   _level(F.col("inv.priority"), int(observed["levels"])))
    return pubs.join(firsts, "id").select("id", level.alias("level"), "inv", "ok", "first")


def _events(msgs: DataFrame, sac: bool) -> DataFrame:
    """Takes the messages. Returns the events: each confirmed message whose first delivery is
    not returned, at its confirm's index, with `K` (its readiness bound and id: the first
    delivery's index under single active consumer, else its bound, -1 without) and `D` (its
    first delivery's index and id); each never confirmed one likewise at its invoke's index,
    with `D` only."""
    first_index = F.col("first.index")
    bound = first_index if sac else F.coalesce(F.col("first.bound"), F.lit(-1))
    fresh = F.col("level").isNotNull() & ~F.col("first.returned")
    confirmed = msgs.where(fresh & F.col("ok").isNotNull()).select(
        F.col("ok.index").alias("key"), F.lit(CONFIRMED).alias("kind"), "level",
        F.struct(bound.alias("v"), "id").alias("K"),
        F.struct(first_index.alias("v"), "id").alias("D"))
    unconfirmed = msgs.where(fresh & F.col("ok").isNull() & F.col("inv").isNotNull()).select(
        F.col("inv.index").alias("key"), F.lit(UNCONFIRMED).alias("kind"), "level",
        F.lit(None).cast("struct<v:bigint,id:string>").alias("K"),
        F.struct(first_index.alias("v"), "id").alias("D"))
    return confirmed.unionByName(unconfirmed)


def _greatest(cols: Sequence[Column]) -> Column:
    return cols[0] if len(cols) == 1 else F.greatest(*cols)


def _maxima(level: int) -> list[tuple[str, Column, Column]]:
    """Returns, for a level, the (name, kind condition, value) of its three running maxima:
    confirmed messages' bounds, their first deliveries, never confirmed ones' first
    deliveries."""
    at = F.col("level") == F.lit(level)
    return [(f"K{level}", at & (F.col("kind") == CONFIRMED), F.col("K")),
            (f"D{level}", at & (F.col("kind") == CONFIRMED), F.col("D")),
            (f"U{level}", at & (F.col("kind") == UNCONFIRMED), F.col("D"))]


def judged(events: DataFrame, queries: DataFrame, levels: list[int]) -> DataFrame:
    """Takes the events, the deliveries to judge and the levels the events have. Returns the
    deliveries with `verdict` ("violation", "competing" or "in_order"), `unconfirmed` (an
    unconfirmed message overtook it) and `witness` (the overtaking message sure to be ready
    whose bound, then id, is greatest)."""
    bucket = F.floor(F.col("key") / BUCKET).cast("long")
    ev = events.select(bucket.alias("bucket"), "*")
    q = queries.select(bucket.alias("bucket"), "*", F.lit(QUERY).alias("kind"))
    # What the buckets before each one carried: each bucket's maxima per level (query buckets
    # included, so that each has a row), maxed over the buckets before it, one row per bucket.
    per = [(name, F.max(F.when(cond, v))) for lvl in levels for name, cond, v in _maxima(lvl)]
    own = ev.groupBy("bucket").agg(*(agg.alias(name) for name, agg in per))
    buckets = q.select("bucket").distinct().join(own, "bucket", "full")
    # One small partition: a row per bucket.
    before = Window.partitionBy(F.lit(0)).orderBy("bucket").rowsBetween(
        Window.unboundedPreceding, -1)
    carried = buckets.select("bucket", *(F.max(name).over(before).alias(f"p{name}")
                                         for name, _ in per))
    # Within a bucket: the running maxima up to each query.
    upto = Window.partitionBy("bucket").orderBy("key").rowsBetween(
        Window.unboundedPreceding, Window.currentRow)
    both = ev.unionByName(q, allowMissingColumns=True)
    run = both.select("*", *(F.max(F.when(cond, v)).over(upto).alias(name)
                             for lvl in levels for name, cond, v in _maxima(lvl)))
    at = run.where(F.col("kind") == QUERY).join(F.broadcast(carried), "bucket", "left")

    def over(prefix: str) -> Column:
        higher = [F.when(F.lit(lvl) > F.col("level"), _greatest(
            [F.col(f"{prefix}{lvl}"), F.col(f"p{prefix}{lvl}")])) for lvl in levels]
        return _greatest(higher)

    witness, delivered, unconfirmed = over("K"), over("D"), over("U")
    later = F.col("index")
    verdict = (F.when(F.coalesce(witness["v"] >= later, F.lit(False)), F.lit("violation"))
               .when(F.coalesce(delivered["v"] > later, F.lit(False)), F.lit("competing"))
               .otherwise(F.lit("in_order")))
    return at.select(*queries.columns, verdict.alias("verdict"),
                     F.coalesce(unconfirmed["v"] > later, F.lit(False)).alias("unconfirmed"),
                     witness["id"].alias("witness"))


def priority_check(h: History, observed: Mapping[str, Any], example_size: int) -> dict[str, Any]:
    """Takes a History, the harness's `priorities` observation and how many examples to give.
    Returns the "priority" section (see the module docstring): not applicable without strict
    priorities on the run's line, or without a message carrying a priority; else the counts
    of one aggregate over the deliveries, one over the judged ones, and the examples."""
    why = not_applicable(observed)
    if why is not None:
        return priority_not_applicable(observed, why)
    with_priority = h.df.where((is_publish() | is_delivery()) & _in_queue(observed.get("queue"))
                               & F.col("priority").isNotNull()).limit(1).count()
    if not with_priority:
        return priority_not_applicable(observed, "no message carried a priority")
    d = deliveries(h, observed).persist(StorageLevel.MEMORY_AND_DISK)
    msgs = messages(h, d, observed).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        return _judge(d, msgs, observed, example_size)
    finally:
        msgs.unpersist()
        d.unpersist()


def _judge(d: DataFrame, msgs: DataFrame, observed: Mapping[str, Any],
           example_size: int) -> dict[str, Any]:
    """Takes the annotated deliveries and messages, the observation and the example size.
    Returns the judged section."""
    why = F.col("why")
    counts = d.agg(F.count(F.lit(1)).alias("n"), *(
        F.count_if(why == k).alias(k) for k in PRIORITY_NOT_JUDGED[:-1])).collect()[0]
    not_judged = {k: int(counts[k]) for k in PRIORITY_NOT_JUDGED[:-1]}
    queries = d.where(why.isNull()).select(
        F.col("s.index").alias("key"), "id", "pid", "consumer", "index", "time", "node",
        "priority", "level", "s")
    events = _events(msgs, bool(observed.get("single_active_consumer")))
    levels = sorted(r["level"] for r in events.select("level").distinct().collect())
    if levels:
        verdicts = judged(events, queries, levels)
    else:  # nothing overtook anything
        verdicts = queries.select("*", F.lit("in_order").alias("verdict"),
                                  F.lit(False).alias("unconfirmed"),
                                  F.lit(None).cast("string").alias("witness"))
    verdicts = verdicts.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        verdict = F.col("verdict")
        row = verdicts.agg(
            F.count_if(verdict == "violation").alias("violation"),
            F.count_if(verdict == "competing").alias("competing"),
            F.count_if(verdict == "in_order").alias("in_order"),
            F.count_if((verdict == "in_order") & F.col("unconfirmed")).alias("unconfirmed"),
        ).collect()[0]
        examples = (_examples(verdicts, msgs, example_size)
                    if row["violation"] and example_size else [])
    finally:
        verdicts.unpersist()
    not_judged["competing"] = int(row["competing"])
    return priority_section(
        observed, delivery_count=int(counts["n"]),
        judged_count=int(row["violation"] + row["in_order"]),
        violation_count=int(row["violation"]), not_judged=not_judged,
        unconfirmed_set_aside_count=int(row["unconfirmed"]), examples=examples)


def _examples(verdicts: DataFrame, msgs: DataFrame, example_size: int) -> list[dict[str, Any]]:
    """Takes the judged deliveries, the messages and how many examples to give. Returns the
    first violations by index, each with the message that overtook it, as timelines."""
    rows = (verdicts.where(F.col("verdict") == "violation").orderBy("index")
            .limit(example_size).collect())
    ids = sorted({r["witness"] for r in rows})
    found = {m["id"]: m for m in msgs.where(F.col("id").isin(ids)).collect()}
    return [example(r, found[r["witness"]]) for r in rows]


def example(d: Row, m: Row) -> dict[str, Any]:
    """Takes a violating delivery and the message that overtook it. Returns the example as
    results.json shows it: the consumer, the delivery, its previous settlement, and the
    overtaking message's publish, confirm and first delivery."""
    inv, ok, first = m["inv"], m["ok"], m["first"]
    return {
        "consumer": consumer_identity(d["pid"], d["consumer"]),
        "delivery": {"id": d["id"], "priority": d["priority"], "level": d["level"],
                     "index": d["index"], "time_ms": ns_to_ms(d["time"]), "node": d["node"]},
        "settled": {"index": d["s"]["index"], "time_ms": ns_to_ms(d["s"]["time"])},
        "overtaken_by": {
            "id": m["id"], "priority": inv["priority"], "level": m["level"],
            "published": {"index": inv["index"], "time_ms": ns_to_ms(inv["time"]),
                          "node": inv["node"]},
            "confirmed": {"index": ok["index"], "time_ms": ns_to_ms(ok["time"])},
            "delivered": {"index": first["index"], "time_ms": ns_to_ms(first["time"]),
                          "node": first["node"],
                          "consumer": consumer_identity(first["pid"], first["consumer"])}},
    }
