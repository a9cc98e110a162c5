"""Settlement after a heal in Spark: the facts checkers.settlement judges.

One table of publishes (an invocation and its last completion per process and
message id) that crossed a heal, each with its heal and its status, computed
in columns by checkers.settlement's rules (the tests' oracle states them in
Python); counted per heal and status, and grouped into the channels (processes) with a stuck
publish, whose timelines (last confirm before the heal, later publishes and
their fates) come from the same table joined with those few channels. The
consumers are one aggregate per process and span between heals and their bounds
(spark_perf.segment places each row), folded per heal in Python; on a log each
consumer reads whole (a stream), what each was owed at a heal is two more
aggregates (`owed`). A handful of rows collected, whatever the history's size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checkers import settlement as S
from checkers.model import END_FS, OUTCOME_CODES
from checkers.phases import HarnessEvent
from checkers.spark_io import History, is_ack, is_delivery, is_publish, literal_rows
from checkers.spark_perf import segment
from history.faults import FaultWindow

OK, FAIL, INVOKE = OUTCOME_CODES["ok"], OUTCOME_CODES["fail"], OUTCOME_CODES["invoke"]


def kind_column() -> Column:
    """Returns a publish row's completion kind (checkers.settlement's kinds)."""
    code = F.col("done.code")
    raw = F.coalesce(F.col("done.error"), F.lit(""))
    n = len(S.ABANDONED_PREFIX)
    err = F.when(raw.startswith(S.ABANDONED_PREFIX),
                 raw.substr(F.lit(n + 1), F.lit(1_000_000))).otherwise(raw)
    return (F.when(F.col("done").isNull(), F.lit(S.NONE))
            .when(code == OK, F.lit(S.CONFIRMED)).when(code == FAIL, F.lit(S.REFUSED))
            .when(err == S.BLOCKED_ERROR, F.lit(S.BLOCKED))
            .when(err == S.CONFIRMS_OFF_ERROR, F.lit(S.CONFIRMS_OFF))
            .when(err.startswith(S.TIMEOUT_PREFIX), F.lit(S.GAVE_UP))
            .when(err.startswith(S.CLOSE_PREFIX), F.lit(S.RUN_ENDED))
            .otherwise(F.lit(S.CLOSED)))


def publishes(h: History) -> DataFrame:
    """Takes a History. Returns one row per publish: pid, value, node, queue, invoke, end (its
    last completion's time, null: none), code and kind."""
    t, code = F.col("time"), F.col("code")
    rows = h.df.where(is_publish()).groupBy("pid", "value").agg(
        F.min(F.when(code == INVOKE, t)).alias("invoke"),
        F.max(F.when(code > INVOKE, F.struct(t.alias("time"), code.alias("code"),
                                             F.col("error").alias("error")))).alias("done"),
        F.max("node").alias("node"), F.max("queue").alias("queue"))
    return rows.where(F.col("invoke").isNotNull()).select(
        "pid", "value", "node", "queue", "invoke", F.col("done.time").alias("end"),
        F.col("done.code").alias("code"), kind_column().alias("kind"))


def across(pubs: DataFrame, heals: Sequence[S.Heal], bound: int) -> DataFrame:
    """Takes the publishes, the heals and the bound (ns). Returns those that crossed a heal, each
    once with `heal` (the number of the heal it is judged at), `heal_at` and `status`
    (checkers.settlement's rules: the first heal it crosses where it is not interrupted, else
    the last it crosses)."""
    spark = pubs.sparkSession
    frame = literal_rows(spark, [(i, h.at, h.next_fault) for i, h in enumerate(heals)],
                         "heal int, heal_at bigint, heal_next bigint")
    end, invoke = F.col("end"), F.col("invoke")
    at, nxt = F.col("heal_at"), F.col("heal_next")
    crossed = (end.isNull() | (end >= at)) & (nxt.isNull() | (invoke < nxt))
    deadline = F.greatest(invoke, at) + F.lit(bound)
    kind = F.col("kind")
    in_time = end.isNotNull() & (end <= deadline)
    status = (F.when(kind.isin(S.BLOCKED, S.CONFIRMS_OFF), F.lit(S.NOT_JUDGED))
              .when(in_time & kind.isin(*S.SETTLING_KINDS), F.lit(S.SETTLED))
              .when(in_time & (kind == S.GAVE_UP), F.lit(S.GIVEN_UP))
              .when(in_time, F.lit(S.UNKNOWN))
              .when(nxt.isNotNull() & (deadline > nxt), F.lit(S.INTERRUPTED))
              .when(end.isNull(), F.lit(S.UNKNOWN))
              .otherwise(F.lit(S.STUCK)))
    rows = pubs.join(F.broadcast(frame), crossed).select("*", status.alias("status"))
    # The first heal where it is not interrupted; failing that, the last (interrupted there).
    interrupted = F.col("status") == S.INTERRUPTED
    order = Window.partitionBy("pid", "value").orderBy(
        interrupted.asc(), F.when(interrupted, -F.col("heal")).otherwise(F.col("heal")).asc())
    return (rows.withColumn("_n", F.row_number().over(order)).where(F.col("_n") == 1)
            .drop("_n", "heal_next"))


def _fate(r: Any) -> S.Fate:
    return S.Fate(r["value"], int(r["invoke"]), None if r["end"] is None else int(r["end"]),
                  r["kind"], r["status"])


def stuck_channels(pubs: DataFrame, crossed: DataFrame) -> list[S.StuckChannel]:
    """Takes the publishes and those that crossed a heal. Returns the channels with a stuck
    publish, each with its timeline."""
    first = F.min(F.struct("invoke", "value", "end", "kind", "status"))
    stuck = crossed.where(F.col("status") == S.STUCK).groupBy("heal", "pid").agg(
        F.count(F.lit(1)).alias("stuck"), first.alias("first"), F.max("node").alias("node"),
        F.max("queue").alias("queue"), F.max("heal_at").alias("heal_at"))
    chans = stuck.collect()
    if not chans:
        return []
    keys = F.broadcast(stuck.select("heal", "pid", "heal_at",
                                    F.col("first.invoke").alias("first_invoke")))
    later = crossed.drop("heal_at").join(keys, ["heal", "pid"]).where(
        F.col("invoke") > F.col("first_invoke"))
    counts: dict[tuple[int, int], dict[str, int]] = {}
    for r in later.groupBy("heal", "pid", "status").count().collect():
        counts.setdefault((r["heal"], r["pid"]), {})[r["status"]] = int(r["count"])
    order = Window.partitionBy("heal", "pid").orderBy("invoke", "value")
    shown: dict[tuple[int, int], list[S.Fate]] = {}
    for r in later.withColumn("n", F.row_number().over(order)).where(
            F.col("n") <= S.LATER_SHOWN).orderBy("heal", "pid", "n").collect():
        shown.setdefault((r["heal"], r["pid"]), []).append(_fate(r))
    before: dict[tuple[int, int], int] = {
        (r["heal"], r["pid"]): r["last"] for r in pubs.join(keys, "pid").where(
            (F.col("kind") == S.CONFIRMED) & (F.col("end") < F.col("heal_at"))
        ).groupBy("heal", "pid").agg(F.max("end").alias("last")).collect()}
    return [S.StuckChannel(
        heal=c["heal"], pid=c["pid"], node=c["node"], queue=c["queue"], stuck=int(c["stuck"]),
        first=_fate(c["first"]), last_confirm_before=before.get((c["heal"], c["pid"])),
        later=tuple(shown.get((c["heal"], c["pid"]), ())),
        later_counts=dict(sorted(counts.get((c["heal"], c["pid"]), {}).items())))
        for c in chans]


def breakpoints(heals: Sequence[S.Heal], bound: int) -> list[int]:
    """Takes the heals and the bound (ns). Returns the times (ns, ascending) that split a run
    into the spans the consumers' facts are summed over: a fact about heal i reads "before
    heal.at", "at or after heal.at" and "at or before heal.at + bound", i.e. before
    heal.at + bound + 1."""
    return sorted({p for heal in heals for p in (heal.at, heal.at + bound + 1)})


def owed(h: History, pubs: DataFrame, heals: Sequence[S.Heal], bound: int
         ) -> Callable[[int, int], int]:
    """Takes a History of a log every consumer reads whole (a stream), its publishes, the heals
    and the bound (ns). Returns what a consumer process was owed at a heal: owed(pid, heal
    number) is how many messages confirmed before the heal had not reached the process by
    heal + bound.

    Two aggregates: the confirmed messages per span of their confirm, and each process's first
    delivery of a confirmed message per (span of the delivery, span of the confirm); a few rows
    per process and span, summed per heal in Python."""
    points = breakpoints(heals, bound)
    confirmed = pubs.where(F.col("kind") == S.CONFIRMED).select(
        F.col("value").alias("id"), segment(F.col("end"), points).alias("c_span"))
    per_span = [(int(r["c_span"]), int(r["count"]))
                for r in confirmed.groupBy("c_span").count().collect()]
    first = (h.df.where(is_delivery() & (F.col("f") != "drain") & F.col("pid").isNotNull())
             .groupBy("pid", F.col("value").alias("id")).agg(F.min("time").alias("t")))
    got = (first.join(confirmed, "id")
           .groupBy("pid", segment(F.col("t"), points).alias("d_span"), "c_span").count()
           .collect())
    spans = [(points.index(heal.at), points.index(heal.at + bound + 1)) for heal in heals]
    total = [sum(n for c, n in per_span if c <= before) for before, _until in spans]
    received: dict[tuple[int, int], int] = {}
    for r in got:
        for i, (before, until) in enumerate(spans):
            if r["c_span"] <= before and r["d_span"] <= until:
                key = (int(r["pid"]), i)
                received[key] = received.get(key, 0) + int(r["count"])
    return lambda pid, i: total[i] - received.get((pid, i), 0)


def consumer_facts(h: History, heals: Sequence[S.Heal], bound: int, acks: bool,
                   owed_by: Callable[[int, int], int] | None = None) -> list[S.ConsumerFacts]:
    """Takes a History, the heals, the bound (ns), whether the history records acks and, on a
    log every consumer reads whole, what each process was owed at each heal (`owed`). Returns
    each main-phase consumer process's facts around each heal.

    One pass: each delivery, ack and end of a client process falls in a span between the
    breakpoints (every heal and every heal's bound), and is summed per process and span; the
    facts around each heal are then sums and extremes over a few spans per process."""
    t = F.col("time")
    consume = is_delivery() & (F.col("f") != "drain")
    ack = is_ack()
    end_op = F.col("pid").isNotNull() & F.col("f").isin(*END_FS)
    points = breakpoints(heals, bound)
    spans = h.df.where(F.col("pid").isNotNull() & (consume | ack | end_op)).groupBy(
        "pid", segment(t, points).alias("span")).agg(
        F.max(F.when(consume, F.col("node"))).alias("node"),
        F.max(F.when(consume, F.col("queue"))).alias("queue"),
        F.min(F.when(end_op, t)).alias("ended"), F.count_if(consume).alias("fed"),
        F.min(F.when(consume, t)).alias("first"), F.max(F.when(consume, t)).alias("last"),
        F.count_if(ack).alias("acked")).collect()
    per: dict[int, list[Any]] = {}
    for r in spans:
        per.setdefault(r["pid"], []).append(r)
    # Per heal, the spans of its "before heal.at" and "at or before heal.at + bound": a span s
    # holds the times in [points[s-1], points[s]).
    edges = [(points.index(heal.at), points.index(heal.at + bound + 1)) for heal in heals]
    out = []
    for pid, rows in sorted(per.items()):
        if not any(r["fed"] for r in rows):
            continue
        node, queue = (max((r[k] for r in rows if r[k] is not None), default=None)
                       for k in ("node", "queue"))
        ended = min((r["ended"] for r in rows if r["ended"] is not None), default=None)
        for i, (at, until) in enumerate(edges):
            out.append(S.ConsumerFacts(
                heal=i, pid=pid, node=node, queue=queue,
                fed_before=max((r["last"] for r in rows if r["span"] <= at
                                and r["last"] is not None), default=None),
                fed_after=min((r["first"] for r in rows if r["span"] > at
                               and r["first"] is not None), default=None),
                ended=ended,
                delivered_by_bound=sum(int(r["fed"]) for r in rows if r["span"] <= until),
                acked_by_bound=sum(int(r["acked"]) for r in rows if r["span"] <= until)
                if acks else None,
                owed=None if owed_by is None else owed_by(pid, i)))
    return out


def settlement_check(h: History, windows: Sequence[FaultWindow], bound: int, main_end: int,
                     harness: Sequence[HarnessEvent], acks: bool) -> dict[str, Any] | None:
    """Takes a History, the fault windows, the bound and the main phase's end (ns), the harness
    events and whether the history records acks. Returns the settlement part of the liveness
    section (checkers.settlement), or None when no fault healed."""
    heal_list = S.heals(windows)
    if not heal_list:
        return None
    pubs = publishes(h).cache()
    try:
        crossed = across(pubs, heal_list, bound).cache()
        counts = {(r["heal"], r["status"]): int(r["count"])
                  for r in crossed.groupBy("heal", "status").count().collect()}
        channels = stuck_channels(pubs, crossed)
        crossed.unpersist()
        owed_by = owed(h, pubs, heal_list, bound) if S.reads_whole_log(harness, None) else None
    finally:
        pubs.unpersist()
    consumers = consumer_facts(h, heal_list, bound, acks, owed_by)
    return S.settlement_section(counts, channels, consumers, heal_list, bound, main_end,
                                harness)
