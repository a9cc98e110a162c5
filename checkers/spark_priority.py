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
ratio (high:normal 2:1), so no strict order is promised there (the two-level
rule below judges what they do promise), and 3.x quorum queues have none. The
harness's `priorities` observation
(workloads.queue_workload.priorities_observation) says which the run's line
is: a line without priorities gets the section "not applicable", never
false; a run without the observation (no priorities, or an older run) gets
no section.

The two-level rule (4.0 to 4.2). The documentation favours high messages
2:1 and promises normal ones progress; 4.0.5's rabbit_fifo_q says how: a
dequeue takes the high queue's head, except every third one, which takes
the normal queue's head if that was enqueued first (a lower Raft index).
So a normal message enqueued after a ready high one never goes ahead of it,
whatever the turn; a normal one enqueued before may (the ratio), and is
not held against it. The rule is the strict one below on two levels (1
high: a priority above TWO_LEVEL_NORMAL; 0 normal: one at or below it, or
none), with one more condition on m: its confirm came before d's message
was first published (its publish invoke), so the broker had enqueued m
before it took d in. The events are counted up to the earlier of d's
previous settlement and that publish (by index); ripe, they are confirmed
more than the margin before it, or, when d's publish came more than the
margin before the settlement, merely before the publish (the publish is
recorded before its write, after the confirm was read: an order of cause,
not of two threads' records). A delivery of a message whose publish is not
in the history is not judged (`priority_unknown`: its age is unknown).

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
- not judged, `priority_unknown`: its level is unknown (or, under the
  two-level rule, its message's age);
- not judged, `no_settlement`: its consumer settled nothing before it (when
  the consumer subscribed, and so what was ready then, is not recorded).

The others are held against the messages m that overtook them: m's level is
above d's (m's publish invoke's priority), m's publish was confirmed (an ok
completion) before d's previous settlement s, and m's first delivery (its
lowest-index delivery in the queue) is not returned and comes after d. m was
then in the queue, ready, when the broker received s and dispatched d, if m's
confirm was recorded more than SKEW_MARGIN_NS before s was: the broker
confirms after enqueuing (so m was enqueued before its confirm was recorded)
and dispatches d only after s (prefetch 1), but a consumer records an ack
after writing it to its socket (workloads' Consumer._record_settlement), and
the confirm is recorded by another client thread as it reads it, so the two
records' order says nothing about the broker's within the clients'
recording skew. A pair (d, m) whose confirm was recorded before s but within
the margin is set aside: neither a violation nor a pass. Whether
m was still ready then, and not already on its way to another consumer,
depends on when m's own first delivery was dispatched. m's *bound* is an
index it was surely dispatched after: its consumer's previous delivery when
that consumer has prefetch 1 (which it had to settle before m could come);
for a drain delivery, the drain's start event (the drain's consumers
subscribe after it), if later; else none. m was sure to be ready at d's
dispatch when its bound is at or after d, or when the queue has a single
active consumer (m's consumer became active after d's). m's first recorded
delivery unflagged also says nobody held m before (a consumer that held it
unrecorded, its connection abandoned, would have returned it, flagged).

- a *violation*: some such m, confirmed more than the margin before s, was
  sure to be ready (judged);
- not judged, `within_skew`: some such m was sure to be ready, but each
  that was had its confirm recorded within the margin of s (the real 4.3.6
  control quorum-priorities-healthy's one violation before the margin: a
  confirm 0.87 ms before the ack);
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
(PRIORITY_NOT_JUDGED), unconfirmed_set_aside_count, skew_margin_ms, and the
first `example_size` violations by d's index, each with the message that
overtook it (of those sure to be ready and confirmed more than the margin
before s, the one whose bound, then id, is greatest: its first delivery's
index under single active consumer) and the timelines of both (ids, indexes,
times, nodes, consumers); `within_skew_examples` likewise the first
deliveries set aside by the margin, each with the message that would have
made it a violation. Valid: false with a violation, true when a delivery was
judged, else "unknown"; the section composes only when false.

In Spark. One window per consumer stream (deliveries and acks) gives each
delivery its previous settlement and previous delivery; one aggregate per
message id (fixed-width columns only, so Spark hashes it) gives its level,
confirm and first delivery. A message's confirm is an *event* at its
confirm's (time, index), carrying its first delivery's index and bound, and
again, *ripe*, at its confirm's time plus the margin (after any op of that
time); a delivery to judge is a *query* at its settlement's (time, index).
The history writer stamps each op's time from one monotonic clock under the
lock that assigns its index (history.HistoryWriter), so (time, index) order
is index order, and an event before a query in it was recorded before the
settlement. For each level, the greatest bound (of events, and of ripe
events) and first delivery of the events before a query are running maxima:
the history is cut into buckets of BUCKET_NS of time, each bucket's maxima
are carried over from the buckets before it (a small table), and within a
bucket one window runs them; so the tasks are as many as the buckets, none
holds a whole queue, and nothing but counts and examples is collected. The
examples' overtaking messages are found again for those few deliveries, and
their timelines read from the history by id.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Row, Window
from pyspark.sql import functions as F

from checkers.holds import HOLD_SKEW_NS
from checkers.model import OUTCOME_CODES, consumer_identity, ns_to_ms
from checkers.results import (
    PRIORITY_NOT_JUDGED,
    priority_not_applicable,
    priority_section,
)
from checkers.spark_io import (
    DELIVERY_ROW,
    PUBLISH_ROW,
    History,
    is_ack,
    is_delivery,
    is_publish,
    literal_rows,
)

log = logging.getLogger(__name__)

SECTION: Final = "priority"
# A message published without a priority counts as this level (RabbitMQ 4.3).
DEFAULT_LEVEL: Final = 4
# Two levels (4.0 to 4.2's rabbit_fifo:priority_tag): a priority above this one is high, any
# other (or none) normal.
TWO_LEVEL_NORMAL: Final = 4
# How much earlier than a consumer's previous settlement a higher message's confirm must be
# recorded for it to count as ready when the broker took the settlement in (the module
# docstring): the clients' recording skew. The ack is recorded after its socket write and the
# confirm by another client thread as it reads it; on 4.3.6 the control's one pair before the
# margin was 0.87 ms apart, and a return recorded after its write once took 63 ms (load 14), so
# twice the ordering check's HOLD_SKEW_NS (50 ms) covers a loaded machine, far below the
# seconds a backlog of higher messages waits behind a broken order.
SKEW_MARGIN_NS: Final = 2 * HOLD_SKEW_NS
# Nanoseconds of history per bucket of the running maxima (a task each; some 17 s).
BUCKET_NS: Final = 1 << 34
# Event kinds: a confirm, a never confirmed publish's invoke, a confirm plus the margin, and a
# delivery to judge.
CONFIRMED, UNCONFIRMED, RIPE, QUERY = 0, 1, 2, 3
# A ripe event's place among the ops of its time: after all of them.
AFTER_ALL: Final = (1 << 63) - 1
# The reasons a delivery is not judged on its own, before the messages that overtook it.
ON_ITS_OWN: Final = PRIORITY_NOT_JUDGED[:4]


def not_applicable(observed: Mapping[str, Any]) -> str | None:
    """Takes the harness's `priorities` observation. Returns why the rule does not apply to the
    run (a line without priorities, or unknown; a line that serves more than two levels at a
    ratio), or None when it does: strict levels, or the two-level rule (`two_level`). (Only a
    quorum queue's run records one: the spec refuses priorities for the other kinds.)"""
    line, levels = observed.get("line"), observed.get("levels")
    if line is None:
        return "the broker's release line is unknown"
    if not isinstance(levels, int):
        return f"RabbitMQ {line}'s quorum queues have no message priorities"
    if not observed.get("strict") and not two_level(observed):
        return f"{levels}-level priorities are served at a ratio (RabbitMQ {line}), not strictly"
    return None


def two_level(observed: Mapping[str, Any]) -> bool:
    """Takes the `priorities` observation. Returns whether the run's line serves two levels at
    a ratio (4.0 to 4.2), which the two-level rule judges (the module docstring)."""
    return not observed.get("strict") and observed.get("levels") == 2


def _level(priority: Column, observed: Mapping[str, Any]) -> Column:
    """Returns a priority's level. Strict levels: the priority below the line's levels,
    DEFAULT_LEVEL without one (when the line has it), else null (unknown). Two levels: 1
    (high) above TWO_LEVEL_NORMAL, 0 (normal) at or below it or without one, null below 0."""
    if two_level(observed):
        return F.when(priority.isNull(), F.lit(0)).when(priority > TWO_LEVEL_NORMAL, F.lit(1)) \
            .when(priority >= 0, F.lit(0))
    levels = int(observed["levels"])
    default = F.lit(DEFAULT_LEVEL) if levels > DEFAULT_LEVEL else F.lit(None).cast("long")
    return F.when(priority.isNull(), default).when(
        (priority >= 0) & (priority < levels), priority)


def _in_queue(queue: str | None) -> Column:
    """Returns whether a row is of the observed queue (a row naming none counts)."""
    if queue is None:
        return F.lit(True)
    return F.coalesce(F.col("queue") == F.lit(queue), F.lit(True))


def deliveries(h: History, observed: Mapping[str, Any], drain_start: int | None) -> DataFrame:
    """Takes a History, the `priorities` observation and the index of the drain's start event
    (None: none). Returns the queue's deliveries in fixed-width columns but their id: `id`,
    `index`, and their consumer stream's facts: `s_index` and `s_time` (its previous
    settlement's index and time), `bound`
    (the index it was surely dispatched after: see the module docstring), `returned`, `level`,
    and `why` (the reason it is not judged on its own, null for one to judge against the
    messages that overtook it). (What examples show of a few is read again by index.)"""
    prefetch = observed.get("prefetch") or {}
    main = F.col("f") == "consume"
    pf = F.when(main, F.lit(int(prefetch.get("consume", 0)))).otherwise(
        F.lit(int(prefetch.get("drain", 0))))
    before = Window.partitionBy("pid", "consumer").orderBy("index").rowsBetween(
        Window.unboundedPreceding, -1)

    def last(cond: Column, col: str) -> Column:
        return F.last(F.when(cond, F.col(col)), ignorenulls=True).over(before)

    rows = h.df.where((is_delivery() & _in_queue(observed.get("queue"))) | is_ack()).select(
        "cls", "pid", "consumer", "f", F.col("value").alias("id"), "index", "redelivered",
        "acquired", "priority", "time")
    drained = F.when(~main, F.lit(drain_start)) if drain_start is not None else F.lit(None)
    d = rows.select(
        "*", last(is_ack(), "index").alias("s_index"), last(is_ack(), "time").alias("s_time"),
        F.greatest(F.when(pf == 1, last(is_delivery(), "index")), drained.cast("long"))
        .alias("bound"), pf.alias("prefetch"),
        (F.col("redelivered") | (F.coalesce(F.col("acquired"), F.lit(0)) > 0)).alias("returned"),
        _level(F.col("priority"), observed).alias("level")).where(is_delivery())
    why = (F.when(F.col("returned"), F.lit("returned"))
           .when(F.col("prefetch") != 1, F.lit("prefetch"))
           .when(F.col("level").isNull(), F.lit("priority_unknown"))
           .when(F.col("s_index").isNull(), F.lit("no_settlement")))
    return d.select("id", "index", "s_index", "s_time", "bound", "returned", "level",
                    why.alias("why"))


def messages(h: History, d: DataFrame, observed: Mapping[str, Any]) -> DataFrame:
    """Takes a History, its annotated deliveries and the observation. Returns one row per
    message of the queue published and delivered, in fixed-width columns: `id`, `level` (of
    its first invoke's priority; null without an invoke), `inv_index` and `inv_time` (its
    first invoke's), `ok_index` and `ok_time` (its first ok completion's; null when never
    confirmed), and its first delivery's `first_index`, `first_returned` and `first_bound`."""
    pub, dlv = F.col("pub"), ~F.col("pub")
    inv = pub & (F.col("code") == 0)
    rows = h.df.where(is_publish() & _in_queue(observed.get("queue"))).select(
        F.col("value").alias("id"), F.lit(True).alias("pub"), "code", "index", "time",
        "priority", F.lit(None).cast("boolean").alias("returned"),
        F.lit(None).cast("long").alias("bound"),
    ).unionByName(d.select("id", F.lit(False).alias("pub"), F.lit(None).cast("int")
                           .alias("code"), "index", F.lit(None).cast("long").alias("time"),
                           F.lit(None).cast("long").alias("priority"), "returned", "bound"))
    first = F.when(dlv, F.col("index"))
    ok = F.when(pub & (F.col("code") == OUTCOME_CODES["ok"]), F.col("index"))
    grouped = rows.groupBy("id").agg(
        F.count_if(pub).alias("n_pub"), F.min(F.when(inv, F.col("index"))).alias("inv_index"),
        F.min_by("priority", F.when(inv, F.col("index"))).alias("inv_priority"),
        F.min_by("time", F.when(inv, F.col("index"))).alias("inv_time"),
        F.min(ok).alias("ok_index"), F.min_by("time", ok).alias("ok_time"),
        F.min(first).alias("first_index"), F.min_by("returned", first).alias("first_returned"),
        F.min_by("bound", first).alias("first_bound"))
    level = F.when(F.col("inv_index").isNotNull(),
                   _level(F.col("inv_priority"), observed))
    return grouped.where((F.col("n_pub") > 0) & F.col("first_index").isNotNull()).select(
        "id", level.alias("level"), "inv_index", "inv_time", "ok_index", "ok_time", "first_index",
        "first_returned", "first_bound")


def _key(sac: bool) -> Column:
    """Returns a message's readiness key: its first delivery's index under single active
    consumer, else its bound (-1 without)."""
    return F.col("first_index") if sac else F.coalesce(F.col("first_bound"), F.lit(-1))


def events(msgs: DataFrame, sac: bool, margin_ns: int) -> DataFrame:
    """Takes the messages, whether the queue has a single active consumer and the skew margin
    (ns). Returns the events, each at (`t`, `sub`): each confirmed message whose first
    delivery is not returned at its confirm's (time, index), with `K` (its readiness key),
    `D` (its first delivery's index) and its id, and again, ripe, at its confirm's time plus
    the margin, after all ops of that time, with `K`; each never confirmed one at its
    invoke's (time, index), with `D`."""
    fresh = F.col("level").isNotNull() & ~F.col("first_returned")
    confirmed = msgs.where(fresh & F.col("ok_index").isNotNull())
    none = F.lit(None).cast("long")
    return confirmed.select(
        F.col("ok_time").alias("t"), F.col("ok_index").alias("sub"),
        F.lit(CONFIRMED).alias("kind"), "level", _key(sac).alias("K"),
        F.col("first_index").alias("D"), "id",
    ).unionByName(confirmed.select(
        (F.col("ok_time") + F.lit(margin_ns)).alias("t"), F.lit(AFTER_ALL).alias("sub"),
        F.lit(RIPE).alias("kind"), "level", _key(sac).alias("K"), none.alias("D"), "id",
    )).unionByName(msgs.where(fresh & F.col("ok_index").isNull()
                              & F.col("inv_index").isNotNull()).select(
        F.col("inv_time").alias("t"), F.col("inv_index").alias("sub"),
        F.lit(UNCONFIRMED).alias("kind"), "level", none.alias("K"),
        F.col("first_index").alias("D"), "id"))


def _greatest(cols: Sequence[Column]) -> Column:
    return cols[0] if len(cols) == 1 else F.greatest(*cols)


def _maxima(level: int) -> list[tuple[str, Column]]:
    """Returns, for a level, the name and value of its four running maxima: confirmed
    messages' keys and first deliveries, ripe ones' keys, never confirmed ones' first
    deliveries."""
    at = F.col("level") == F.lit(level)

    def of(kind: int) -> Column:
        return at & (F.col("kind") == kind)

    return [(f"K{level}", F.when(of(CONFIRMED), F.col("K"))),
            (f"D{level}", F.when(of(CONFIRMED), F.col("D"))),
            (f"R{level}", F.when(of(RIPE), F.col("K"))),
            (f"U{level}", F.when(of(UNCONFIRMED), F.col("D")))]


def judged(ev: DataFrame, queries: DataFrame, levels: list[int]) -> DataFrame:
    """Takes the events, the deliveries to judge (`key` and `key_time`: the index and time of
    the op the events are counted up to, their settlement's or, under the two-level rule, the
    earlier of it and their publish's; `causal`: whether a message confirmed before that
    publish counts as ripe; `index`, `level`) and the levels the events have. Returns the
    deliveries with `verdict` ("violation", "within_skew", "competing" or "in_order") and
    `unconfirmed` (a never confirmed message overtook it)."""
    bucket = F.floor(F.col("t") / BUCKET_NS).cast("long")
    ev = ev.select(bucket.alias("bucket"), "t", "sub", "kind", "level", "K", "D")
    q = queries.select("*", F.col("key_time").alias("t"), F.col("key").alias("sub")).select(
        bucket.alias("bucket"), "*", F.lit(QUERY).alias("kind"))
    maxima = [m for lvl in levels for m in _maxima(lvl)]
    # What the buckets before each one carried: each bucket's maxima (query buckets included,
    # so that each has a row), maxed over the buckets before it; one small partition.
    own = ev.groupBy("bucket").agg(*(F.max(v).alias(name) for name, v in maxima))
    buckets = q.select("bucket").distinct().join(own, "bucket", "full")
    before = Window.partitionBy(F.lit(0)).orderBy("bucket").rowsBetween(
        Window.unboundedPreceding, -1)
    carried = buckets.select("bucket", *(F.max(name).over(before).alias(f"p{name}")
                                         for name, _ in maxima))
    # Within a bucket: the running maxima up to each query.
    upto = Window.partitionBy("bucket").orderBy("t", "sub").rowsBetween(
        Window.unboundedPreceding, Window.currentRow)
    run = ev.unionByName(q, allowMissingColumns=True).select(
        "*", *(F.max(v).over(upto).alias(name) for name, v in maxima))
    at = run.where(F.col("kind") == QUERY).join(F.broadcast(carried), "bucket", "left")

    def over(prefix: str) -> Column:
        return _greatest([F.when(F.lit(lvl) > F.col("level"), _greatest(
            [F.col(f"{prefix}{lvl}"), F.col(f"p{prefix}{lvl}")])) for lvl in levels])

    index = F.col("index")
    sure = F.coalesce(over("K") >= index, F.lit(False))
    verdict = (F.when(F.coalesce(over("R") >= index, F.lit(False)) | (F.col("causal") & sure),
                      F.lit("violation"))
               .when(sure, F.lit("within_skew"))
               .when(F.coalesce(over("D") > index, F.lit(False)), F.lit("competing"))
               .otherwise(F.lit("in_order")))
    return at.select(*queries.columns, verdict.alias("verdict"),
                     F.coalesce(over("U") > index, F.lit(False)).alias("unconfirmed"))


def priority_check(h: History, observed: Mapping[str, Any], drain_start: int | None,
                   example_size: int) -> dict[str, Any]:
    """Takes a History, the harness's `priorities` observation, the index of the drain's start
    event (None: none) and how many examples to give. Returns the "priority" section (see
    the module docstring): not applicable without strict priorities on the run's line, or
    without a message carrying a priority; else the counts of one aggregate over the
    deliveries, one over the judged ones, and the examples (of violations, and of
    deliveries set aside by the skew margin SKEW_MARGIN_NS)."""
    why = not_applicable(observed)
    if why is not None:
        return priority_not_applicable(observed, why)
    with_priority = h.df.where((is_publish() | is_delivery()) & _in_queue(observed.get("queue"))
                               & F.col("priority").isNotNull()).limit(1).count()
    if not with_priority:
        return priority_not_applicable(observed, "no message carried a priority")
    d = deliveries(h, observed, drain_start).persist(StorageLevel.MEMORY_AND_DISK)
    msgs = messages(h, d, observed).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        return _judge(h, d, msgs, observed, example_size, SKEW_MARGIN_NS)
    finally:
        msgs.unpersist()
        d.unpersist()


def _judge(h: History, d: DataFrame, msgs: DataFrame, observed: Mapping[str, Any],
           example_size: int, margin_ns: int) -> dict[str, Any]:
    """Takes the History, the annotated deliveries and messages, the observation, the
    example size and the skew margin (ns). Returns the judged section."""
    two = two_level(observed)
    if two:  # a delivery's age is its message's publish: unknown without one
        d = d.join(msgs.select("id", "inv_index", "inv_time"), "id", "left").withColumn(
            "why", F.when((F.col("why").isNull() | (F.col("why") == "no_settlement"))
                          & F.col("inv_index").isNull(),
                          F.lit("priority_unknown")).otherwise(F.col("why")))
    why = F.col("why")
    counts = d.agg(F.count(F.lit(1)).alias("n"), *(
        F.count_if(why == k).alias(k) for k in ON_ITS_OWN)).collect()[0]
    not_judged = {k: int(counts[k]) for k in ON_ITS_OWN}
    queries = d.where(why.isNull()).select("s_index", "s_time", "index", "level", *(
        ("inv_index", "inv_time") if two else ()))
    if two:  # counted up to the earlier of the settlement and the publish (module docstring)
        earlier = F.col("inv_index") < F.col("s_index")
        queries = queries.select(
            "*", F.when(earlier, F.col("inv_index")).otherwise(F.col("s_index")).alias("key"),
            F.when(earlier, F.col("inv_time")).otherwise(F.col("s_time")).alias("key_time"),
            (F.col("inv_time") + F.lit(margin_ns) < F.col("s_time")).alias("causal"))
    else:
        queries = queries.select("*", F.col("s_index").alias("key"),
                                 F.col("s_time").alias("key_time"), F.lit(False).alias("causal"))
    sac = bool(observed.get("single_active_consumer"))
    ev = events(msgs, sac, margin_ns)
    levels = sorted(r["level"] for r in ev.select("level").distinct().collect())
    if levels:
        verdicts = judged(ev, queries, levels)
    else:  # nothing overtook anything
        verdicts = queries.select("*", F.lit("in_order").alias("verdict"),
                                  F.lit(False).alias("unconfirmed"))
    verdicts = verdicts.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        verdict = F.col("verdict")
        row = verdicts.agg(
            F.count_if(verdict == "violation").alias("violation"),
            F.count_if(verdict == "within_skew").alias("within_skew"),
            F.count_if(verdict == "competing").alias("competing"),
            F.count_if(verdict == "in_order").alias("in_order"),
            F.count_if((verdict == "in_order") & F.col("unconfirmed")).alias("unconfirmed"),
        ).collect()[0]
        found, skewed = ((verdicts.where(verdict == kind).orderBy("index").limit(example_size)
                          .collect() if row[kind] and example_size else [])
                         for kind in ("violation", "within_skew"))
    finally:
        verdicts.unpersist()
    not_judged["within_skew"] = int(row["within_skew"])
    not_judged["competing"] = int(row["competing"])
    return priority_section(
        observed, delivery_count=int(counts["n"]),
        judged_count=int(row["violation"] + row["in_order"]),
        violation_count=int(row["violation"]), not_judged=not_judged,
        unconfirmed_set_aside_count=int(row["unconfirmed"]), skew_margin_ns=margin_ns,
        examples=examples(h, ev, found, observed, margin_ns) if found else [],
        within_skew_examples=examples(h, ev, skewed, observed, None) if skewed else [])


def witnesses(ev: DataFrame, found: Sequence[Row],
              margin_ns: int | None) -> dict[int, tuple[str, int]]:
    """Takes the events, a few deliveries judged violations (or set aside by the margin) and
    the skew margin (ns; None: any confirm before the op counted up to counts). Returns, by
    delivery index, the id and level of the message that overtook it: of the confirmed ones of a
    higher level confirmed before the op counted up to (its settlement, or the earlier of it
    and its publish: `judged`), ripe (more than the margin before that op, or a causal
    delivery's) and sure to be ready, the one whose key, then id, is greatest."""
    spark = ev.sparkSession
    wanted = literal_rows(spark, [(r["index"], r["key"], r["key_time"], r["level"],
                                   bool(r["causal"])) for r in found],
                          "w_index bigint, w_key bigint, w_time bigint, w_level bigint, "
                          "w_causal boolean")
    cond = ((F.col("kind") == CONFIRMED) & (F.col("level") > F.col("w_level"))
            & (F.col("sub") < F.col("w_key")) & (F.col("K") >= F.col("w_index")))
    if margin_ns is not None:
        cond = cond & ((F.col("t") + F.lit(margin_ns) < F.col("w_time")) | F.col("w_causal"))
    rows = (ev.join(F.broadcast(wanted), cond).groupBy("w_index")
            .agg(F.max(F.struct("K", "id", "level")).alias("best")).collect())
    return {r["w_index"]: (r["best"]["id"], r["best"]["level"]) for r in rows}


def examples(h: History, ev: DataFrame, found: Sequence[Row], observed: Mapping[str, Any],
             margin_ns: int | None) -> list[dict[str, Any]]:
    """Takes the History, the events, the first violating (or set aside) deliveries (key,
    key_time, causal, s_index, index, level, and inv_index under the two-level rule), the
    observation and the margin their witnesses were confirmed by (`witnesses`). Returns them
    as results.json's examples: each with the message that overtook it and the timelines of
    both, read from the history (the deliveries, their settlements and, under the two-level
    rule, their publishes by index; the overtaking messages' publish ops and deliveries by
    id)."""
    who = witnesses(ev.select("t", "sub", "kind", "level", "K", "id"), found, margin_ns)
    ids = sorted({mid for mid, _level in who.values()})
    two = two_level(observed)
    at = sorted({r["index"] for r in found} | {r["s_index"] for r in found}
                | ({r["inv_index"] for r in found} if two else set()))
    mine = F.col("value").isin(ids) & _in_queue(observed.get("queue")) & (
        is_publish() | is_delivery())
    ops = (h.df.where(F.col("index").isin(at) | mine)
           .select("value", "cls", "code", "index", "time", "node", "priority", "pid",
                   "consumer").orderBy("index").collect())
    by_index = {r["index"]: r for r in ops}
    return [example(by_index[r["index"]], r["level"], by_index[r["s_index"]],
                    _timeline(ops, *who[r["index"]]),
                    by_index[r["inv_index"]] if two else None) for r in found]


def _timeline(ops: Sequence[Row], mid: str, level: int) -> dict[str, Any]:
    """Takes the publish ops and deliveries of a few messages, in index order, and the id and
    level (its event's: `_level` of its first publish's priority) of one that overtook a
    delivery. Returns that message's publish, confirm and first delivery."""
    mine = [r for r in ops if r["value"] == mid]
    inv = next(r for r in mine if is_row(r, "publish") and r["code"] == 0)
    ok = next(r for r in mine if is_row(r, "publish") and r["code"] == OUTCOME_CODES["ok"])
    first = next(r for r in mine if is_row(r, "delivery"))
    priority = inv["priority"]
    return {
        "id": mid, "priority": priority,
        "level": level,
        "published": {"index": inv["index"], "time_ms": ns_to_ms(inv["time"]),
                      "node": inv["node"]},
        "confirmed": {"index": ok["index"], "time_ms": ns_to_ms(ok["time"])},
        "delivered": {"index": first["index"], "time_ms": ns_to_ms(first["time"]),
                      "node": first["node"],
                      "consumer": consumer_identity(first["pid"], first["consumer"])}}


def is_row(r: Row, kind: str) -> bool:
    """Takes a prepared row and "publish" or "delivery". Returns whether it is one."""
    return r["cls"] == (PUBLISH_ROW if kind == "publish" else DELIVERY_ROW)


def example(d: Row, level: int, settled: Row, overtaken_by: dict[str, Any],
            published: Row | None = None) -> dict[str, Any]:
    """Takes a violating delivery (its history row), its level, its previous settlement (the
    ack's row), the timeline of the message that overtook it and, under the two-level rule,
    the delivered message's first publish invoke (its row). Returns the example as
    results.json shows it: the consumer, the delivery (and its message's publish), its
    previous settlement, and the overtaking message's publish, confirm and first delivery."""
    mine = {} if published is None else {"published": {
        "index": published["index"], "time_ms": ns_to_ms(published["time"]),
        "node": published["node"]}}
    return {
        "consumer": consumer_identity(d["pid"], d["consumer"]),
        "delivery": {"id": d["value"], "priority": d["priority"], "level": level,
                     "index": d["index"], "time_ms": ns_to_ms(d["time"]), "node": d["node"],
                     **mine},
        "settled": {"index": settled["index"], "time_ms": ns_to_ms(settled["time"])},
        "overtaken_by": overtaken_by,
    }
