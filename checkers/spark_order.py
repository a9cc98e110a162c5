"""The ordering check in Spark: a window per stream comparing each delivery's seq with the one it
must follow.

The definition is checkers.ordering's (the module docstring says what
RabbitMQ promises and how each mode reads it): a stream is one consumer's
deliveries of one publisher's messages (strict mode: every consumer's), in
history order; a delivery is compared with the previous unflagged delivery of
its stream (default mode, unflagged delivery) or with the previous delivery
(a flagged one, or any in strict mode). One aggregate counts the deliveries
checked and the candidate violations. Only when there are candidates, a
second pass joins them with the message table (who published each message,
and whether it was confirmed) to set unconfirmed reorders apart, counts each
kind and fetches the examples. In strict mode a stream holds every delivery
of a publisher's messages, so its window runs on one task per publisher.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Row, Window
from pyspark.sql import functions as F

from checkers.model import OUTCOME_CODES, consumer_identity
from checkers.results import Delivery, Violation
from checkers.spark_io import History, is_delivery

log = logging.getLogger(__name__)

FIELDS = ("id", "seq", "index", "time", "redelivered")
KINDS = ("violation", "flagged", "unconfirmed")


def checked_deliveries(h: History) -> DataFrame:
    """Takes a History. Returns the deliveries the ordering check looks at (those with a
    publisher and a seq)."""
    cond = is_delivery() & F.col("pub").isNotNull() & F.col("seq").isNotNull()
    return h.df.where(cond).select(
        "pid", F.col("consumer").alias("tag"), "pub", "seq", F.col("value").alias("id"),
        "index", "time", "redelivered")


def with_previous(d: DataFrame, strict: bool, full: bool) -> DataFrame:
    """Takes checked deliveries and the mode. Returns them with `p`, the delivery each must
    follow (a struct of FIELDS if `full`, else of seq only; null for a stream's first)."""
    keys = ("pub",) if strict else ("pid", "tag", "pub")
    w = Window.partitionBy(*keys).orderBy("index")
    prev = F.struct(*(FIELDS if full else ("seq",)))
    any_prev = F.lag(prev).over(w)
    if strict:
        return d.select("*", any_prev.alias("p"))
    unflagged_prev = F.last(F.when(~F.col("redelivered"), prev), ignorenulls=True).over(
        w.rowsBetween(Window.unboundedPreceding, -1))
    p = F.when(F.col("redelivered"), any_prev).otherwise(unflagged_prev)
    return d.select("*", p.alias("p"))


def is_candidate(strict: bool) -> Column:
    """Returns whether a delivery is out of order with its `p` (a violation, unless it turns out
    to be an unconfirmed reorder)."""
    seq, p_seq, flagged = F.col("seq"), F.col("p.seq"), F.col("redelivered")
    if strict:
        bad = (seq < p_seq) | ((seq == p_seq) & ~flagged)
    else:
        bad = F.when(flagged, seq < p_seq).otherwise(seq <= p_seq)
    return F.col("p").isNotNull() & F.coalesce(bad, F.lit(False))


def is_checked(strict: bool) -> Column:
    """Returns whether a delivery's order decides validity (deliveries_checked)."""
    return F.lit(True) if strict else ~F.col("redelivered")


def classified(d: DataFrame, msgs: DataFrame, strict: bool) -> DataFrame:
    """Takes checked deliveries, the message table and the mode. Returns the candidate violations
    with their `kind`: "unconfirmed" (d's message published by another process than p's, and
    not confirmed), else "violation" if it decides validity, else "flagged"; and `also_flagged`
    (a strict-mode violation whose delivery is flagged)."""
    cands = with_previous(d, strict, full=True).where(is_candidate(strict))
    pubs = msgs.select("id", "inv_pid", "comp_code")
    here = pubs.select(F.col("id").alias("h_id"), F.col("inv_pid").alias("h_pid"),
                       F.col("comp_code").alias("h_code"))
    there = pubs.select(F.col("id").alias("t_id"), F.col("inv_pid").alias("t_pid"))
    joined = (cands.join(here, F.col("id") == F.col("h_id"), "left")
              .join(there, F.col("p.id") == F.col("t_id"), "left"))
    unconfirmed = (F.col("h_pid").isNotNull() & F.col("t_pid").isNotNull()
                   & (F.col("h_pid") != F.col("t_pid"))
                   & (F.col("h_code").isNull() | (F.col("h_code") != OUTCOME_CODES["ok"])))
    invalidating = F.lit(True) if strict else ~F.col("redelivered")
    kind = (F.when(unconfirmed, F.lit("unconfirmed"))
            .when(invalidating, F.lit("violation")).otherwise(F.lit("flagged")))
    return joined.select("pid", "tag", "pub", *FIELDS, "p", kind.alias("kind"),
                         (F.col("redelivered") & (kind == "violation")).alias("also_flagged"))


def _violation(r: Row) -> Violation:
    p = r["p"]
    return Violation(consumer_identity(r["pid"], r["tag"]), r["pub"],
                     Delivery(p["id"], p["seq"], p["index"], p["time"], p["redelivered"]),
                     Delivery(r["id"], r["seq"], r["index"], r["time"], r["redelivered"]))


def ordering_facts(h: History, msgs: DataFrame, strict: bool, example_size: int,
                   sample_size: int) -> dict[str, Any]:
    """Takes a History, its message table and the options. Returns the ordering section's facts
    (checkers.ordering). One job counts the deliveries checked and the candidates; only when
    there are candidates, a second classifies and counts them (consumers affected are few: one
    per consumer process) and a third fetches up to example_size examples of each kind."""
    d = checked_deliveries(h)
    row = with_previous(d.select("pid", "tag", "pub", "seq", "index", "redelivered"),
                        strict, full=False).agg(
        F.count_if(is_checked(strict)).alias("checked"),
        F.count_if(is_candidate(strict)).alias("candidates"),
    ).collect()[0]
    facts: dict[str, Any] = {
        "deliveries_checked": row["checked"], "violation_count": 0,
        "consumers_affected_count": 0, "consumers_affected": [], "examples": [],
        "flagged_violation_count": 0, "flagged_examples": [],
        "unconfirmed_reorder_count": 0, "unconfirmed_examples": [],
    }
    if not row["candidates"]:
        return facts
    c = classified(d, msgs, strict).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        kind = F.col("kind")
        counts = c.agg(
            F.count_if(kind == "violation").alias("violation"),
            F.count_if((kind == "flagged") | F.col("also_flagged")).alias("flagged"),
            F.count_if(kind == "unconfirmed").alias("unconfirmed"),
            F.array_sort(F.collect_set(F.when(kind == "violation", F.struct("pid", "tag"))))
            .alias("affected"),
        ).collect()[0]
        affected = counts["affected"]
        facts.update(
            violation_count=counts["violation"], flagged_violation_count=counts["flagged"],
            unconfirmed_reorder_count=counts["unconfirmed"],
            consumers_affected_count=len(affected),
            consumers_affected=[consumer_identity(a["pid"], a["tag"])
                                for a in affected[:sample_size]])
        if example_size:
            # A strict-mode violation of a flagged delivery is an example of both kinds.
            tagged = c.select("*", F.explode(F.array(
                kind, F.when(F.col("also_flagged"), F.lit("flagged")))).alias("k"))
            w = Window.partitionBy("k").orderBy("index")
            rows = (tagged.where(F.col("k").isNotNull())
                    .select("*", F.row_number().over(w).alias("rn"))
                    .where(F.col("rn") <= example_size).collect())
            by_kind: dict[str, list[Violation]] = {k: [] for k in KINDS}
            for r in sorted(rows, key=lambda r: r["index"]):
                by_kind[r["k"]].append(_violation(r))
            facts.update(examples=by_kind["violation"], flagged_examples=by_kind["flagged"],
                         unconfirmed_examples=by_kind["unconfirmed"])
    finally:
        c.unpersist()
    return facts
