"""The ordering check: what order RabbitMQ promises, how the checker tests it, and the Spark job
(a window per stream comparing each delivery's seq with the one it must follow).

What RabbitMQ promises (rabbitmq.com/docs/queues, "Message ordering"): "When
publishing on a single channel, messages are enqueued in publishing order in
every queue they are routed to. When publishing happens on multiple
connections or channels, their sequences of messages will be routed
concurrently and interleaved. Delivery from a queue to consumers proceeds in
enqueue order", unless priorities or "multiple active consumers on the same
queue" with redeliveries change it; "Redelivered messages are flagged (...
AMQP 0-9-1: redelivered=true)". To preserve order it advises a single active
consumer (SAC: "only one consumer at a time consuming from a queue"; when it
is cancelled or dies "another consumer is selected as the active one") and,
for quorum queues, a delivery limit, which "ensures messages are requeued at
the front of the queue" (RabbitMQ 3.x quorum queues always deliver returned
messages before the others).

Terms. A delivery's *publisher* and *seq* are its `publisher` and `seq`
fields, else parsed from its message id "<publisher>-<seq>"; a delivery with
neither is not checked. A publisher is a stable slot whose seq keeps
increasing across the processes (connections) that publish for it in turn (a
process whose publish ended `info` retires and the next one continues the
seq); older histories used the process itself as the publisher. A *consumer*
is a process and a consumer tag. Order is history (index) order. Acks play no
part: order is about what the broker dispatched, acked or not.

Streams. By default, the deliveries of one publisher's messages to one
consumer. In strict mode (quorum queue + single active consumer + prefetch 1),
the deliveries of one publisher's messages to every consumer of the queue, in
history order: the next active consumer continues where the last one stopped.

Priorities. A quorum queue with message priorities (RabbitMQ 4.0 on; 4.3:
"higher-priority messages are dispatched ahead of lower ones") hands a later
message of a higher priority out before an earlier one of a lower priority:
that is its documented behaviour, not a reorder. So when the history shows
priorities (some publish op carries a non-null `priority`), each stream above
is split by the priority its deliveries carry (their `priority` field; none is
one value of its own): order is judged per publisher (and consumer) and
priority, and the section says so (`by_priority`). Everything below applies
within those streams unchanged.

Violations. Each delivery d of a stream is compared with an earlier one p:

- default mode, d unflagged: p is the previous unflagged delivery of the
  stream, and d.seq <= p.seq is a violation: RabbitMQ dispatches in enqueue
  order, and a first delivery is unflagged. These decide validity.
- default mode, d flagged: p is the previous delivery of the stream (flagged
  or not), and d.seq < p.seq is a *flagged violation*: a requeued message came
  back after later ones, which RabbitMQ allows. Counted (flagged_violation_count),
  never invalid. A flagged d with p's seq is the same message redelivered, fine.
- strict mode: p is the previous delivery of the stream (any flag, any
  consumer), and d.seq < p.seq, or d.seq == p.seq with d unflagged, is a
  violation. With prefetch 1 a consumer holds at most one unacknowledged
  message; when the consumer goes, that message returns to the front and is
  delivered again, flagged, to the same or the next active consumer, which then
  continues after it. So a message may repeat only flagged and right after
  itself. Every violation decides validity; those with d flagged are also
  counted in flagged_violation_count.

Unconfirmed reorders. Between channels, only time orders messages: one
confirmed before another was published is ahead of it in the queue, but one
whose publish was not confirmed (it ended `fail` or `info`, or never completed)
may have been enqueued any time later. So a violation (p, d) where d's message
was published by another process than p's and its publish was not confirmed
is not a violation: it is counted in unconfirmed_reorder_count instead (and in
no other count). d stays in the stream as the next comparison's p.

Reorders of the harness's own making. A consumer the harness cancels (at
the end of the main phase, a retired process, a planted crash: the history's
f "cancel" and "close" ops) keeps its unacknowledged deliveries until its
channel closes, while a single active consumer's cancel activates the next
consumer at once; so the next consumer may be fed later messages before the
held one comes back, flagged. A candidate (p, d) where d is flagged, d's
message was held by a cancelled consumer (checkers.holds: delivered to it
before its cancel, never acked by it), and p, like d, came after that
consumer's cancel and p before its channel's end, is a *held reorder*: the
message was not ready while p was delivered. It is counted in
held_reorder_count (and in no other count), ahead of the unconfirmed
reorders; d stays the next comparison's p. A message returned unflagged is
never excused so. Histories written before these ops existed have no cancels,
and nothing is excused in them.

Reported: deliveries_checked (the deliveries whose order decides validity:
unflagged ones by default, all in strict mode), violation_count,
consumers_affected (the consumers of the violations' d), flagged_violation_count,
unconfirmed_reorder_count, held_reorder_count, by_priority (whether streams were
split by priority), and the first `example_size`
of each kind by d's index (examples, flagged_examples, unconfirmed_examples,
held_examples), each with the phase boundary nearest d (`phase_boundary`:
phase, state and d's signed distance from it in ms); near_boundary_count
counts the violations whose d lies within near_boundary_ms of a phase
boundary (checkers.holds), so that a finding clustered at one, where the
harness starts and stops its clients, shows at once.

In Spark: a first job looks for one publish with a priority (whether streams
are split by it); one aggregate over a window per stream counts the deliveries
checked and the candidate violations. Only when there are candidates, a
second pass joins them with the message table (who published each message,
and whether it was confirmed) to set unconfirmed reorders apart, and, when
the history has consumer ends and some candidate is flagged, with the
deliveries and acks of the flagged candidates' messages by the cancelled
consumers (collected on the driver: a few per consumer process) to set held
reorders apart; it counts each kind and fetches the examples. In strict mode a stream holds every delivery
of a publisher's messages, so its window runs on one task per publisher.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Row, Window
from pyspark.sql import functions as F

from checkers.holds import (
    HOLD_SKEW_NS,
    NEAR_BOUNDARY_NS,
    Boundary,
    HoldWindow,
    hold_windows,
    nearest_boundary,
)
from checkers.model import END_FS, OUTCOME_CODES, consumer_identity, ns_to_ms
from checkers.results import Delivery, Violation
from checkers.spark_fates import violations_by_fault
from checkers.spark_io import (
    History,
    collect_small,
    is_ack,
    is_delivery,
    is_publish,
    literal_rows,
)
from history.faults import FaultWindow

log = logging.getLogger(__name__)

FIELDS = ("id", "seq", "index", "time", "redelivered")
KINDS = ("violation", "flagged", "unconfirmed", "held")
# More cancel and close ops than this: not a history the ordering check reads.
MAX_ENDS = 1_000_000


def checked_deliveries(h: History) -> DataFrame:
    """Takes a History. Returns the deliveries the ordering check looks at (those with a
    publisher and a seq)."""
    cond = is_delivery() & F.col("pub").isNotNull() & F.col("seq").isNotNull()
    return h.df.where(cond).select(
        "pid", F.col("consumer").alias("tag"), "pub", "seq", F.col("value").alias("id"),
        "index", "time", "redelivered", "priority")


def shows_priorities(h: History) -> bool:
    """Takes a History. Returns whether some publish op carries a priority (then streams are
    split by priority: the module docstring)."""
    return bool(h.df.where(is_publish() & F.col("priority").isNotNull()).limit(1).count())


def stream_keys(strict: bool, by_priority: bool) -> tuple[str, ...]:
    """Takes the mode and whether streams are split by priority. Returns the columns a stream
    is keyed by."""
    keys = ("pub",) if strict else ("pid", "tag", "pub")
    return (*keys, "priority") if by_priority else keys


def with_previous(d: DataFrame, strict: bool, full: bool, by_priority: bool = False) -> DataFrame:
    """Takes checked deliveries, the mode and whether streams are split by priority. Returns them
    with `p`, the delivery each must follow (a struct of FIELDS if `full`, else of seq only;
    null for a stream's first)."""
    w = Window.partitionBy(*stream_keys(strict, by_priority)).orderBy("index")
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


def consumer_windows(h: History) -> list[HoldWindow]:
    """Takes a History. Returns the hold windows of its cancelled consumers (checkers.holds),
    from its cancel and close ops, collected (a few per consumer process)."""
    rows = collect_small(
        h.df.where(F.col("pid").isNotNull() & F.col("f").isin(*END_FS))
        .select("pid", "consumer", "f", "code", "index", "time"), MAX_ENDS,
        "cancel and close ops")
    return hold_windows((r["pid"], r["consumer"], r["f"], r["code"], r["index"], r["time"])
                        for r in rows)


def held_messages(h: History, ids: DataFrame, windows: list[HoldWindow]) -> DataFrame:
    """Takes a History, message ids (column `hid`) and the hold windows. Returns (hid, start,
    stop, stop_time) for each of those messages a cancelled consumer held (delivered to it
    before its cancel more often than it acked it) and that consumer's window (stop null:
    open)."""
    w = literal_rows(h.df.sparkSession,
                     [(x.pid, x.tag, x.start, x.end, x.end_time) for x in windows],
                     "w_pid bigint, w_tag string, start bigint, stop bigint, stop_time bigint")
    rows = (h.df.where(is_delivery() | is_ack())
            .join(F.broadcast(ids), F.col("value") == F.col("hid"), "left_semi")
            .join(F.broadcast(w), (F.col("pid") == F.col("w_pid"))
                  & (F.col("consumer") == F.col("w_tag"))))
    per = rows.groupBy("value", "w_pid", "w_tag", "start", "stop", "stop_time").agg(
        F.count_if(is_delivery() & (F.col("index") < F.col("start"))).alias("before"),
        F.count_if(is_ack()).alias("acked"))
    return per.where(F.col("before") > F.col("acked")).select(
        F.col("value").alias("hid"), "start", "stop", "stop_time")


def held_reorders(h: History, cands: DataFrame, windows: list[HoldWindow]) -> DataFrame:
    """Takes a History, the candidate violations and the hold windows. Returns the indexes
    (`x_index`) of the candidates that are held reorders (the module docstring): d flagged,
    its message held by a cancelled consumer, d and p after its cancel, p before its
    channel's end (or recorded at most HOLD_SKEW_NS after it)."""
    flagged = cands.where(F.col("redelivered")).select(
        "id", "index", F.col("p.index").alias("p_index"), F.col("p.time").alias("p_time"))
    held = held_messages(h, flagged.select(F.col("id").alias("hid")).distinct(), windows)
    before_end = (F.col("stop").isNull() | (F.col("p_index") < F.col("stop"))
                  | (F.col("p_time") <= F.col("stop_time") + F.lit(HOLD_SKEW_NS)))
    inside = ((F.col("id") == F.col("hid")) & (F.col("index") > F.col("start"))
              & (F.col("p_index") > F.col("start")) & before_end)
    return flagged.join(F.broadcast(held), inside, "left_semi").select(
        F.col("index").alias("x_index"))


def classified(cands: DataFrame, msgs: DataFrame, strict: bool,
               held: DataFrame | None = None) -> DataFrame:
    """Takes the candidate violations (`candidates`), the message table, the mode and the
    indexes of the held reorders among them (`held_reorders`; None: none). Returns the
    candidates with their `kind`: "held" (a held reorder), else "unconfirmed" (d's message
    published by another process than p's, and not confirmed), else "violation" if it decides
    validity, else "flagged"; and `also_flagged` (a strict-mode violation whose delivery is
    flagged)."""
    pubs = msgs.select("id", "inv_pid", "comp_code")
    here = pubs.select(F.col("id").alias("h_id"), F.col("inv_pid").alias("h_pid"),
                       F.col("comp_code").alias("h_code"))
    there = pubs.select(F.col("id").alias("t_id"), F.col("inv_pid").alias("t_pid"))
    joined = (cands.join(here, F.col("id") == F.col("h_id"), "left")
              .join(there, F.col("p.id") == F.col("t_id"), "left"))
    if held is not None:
        joined = joined.join(held.select("x_index", F.lit(True).alias("is_held")),
                             F.col("index") == F.col("x_index"), "left")
    else:
        joined = joined.select("*", F.lit(None).cast("boolean").alias("is_held"))
    unconfirmed = (F.col("h_pid").isNotNull() & F.col("t_pid").isNotNull()
                   & (F.col("h_pid") != F.col("t_pid"))
                   & (F.col("h_code").isNull() | (F.col("h_code") != OUTCOME_CODES["ok"])))
    invalidating = F.lit(True) if strict else ~F.col("redelivered")
    kind = (F.when(F.coalesce(F.col("is_held"), F.lit(False)), F.lit("held"))
            .when(unconfirmed, F.lit("unconfirmed"))
            .when(invalidating, F.lit("violation")).otherwise(F.lit("flagged")))
    return joined.select("pid", "tag", "pub", *FIELDS, "p", kind.alias("kind"),
                         (F.col("redelivered") & (kind == "violation")).alias("also_flagged"))


def candidates(d: DataFrame, strict: bool, by_priority: bool = False) -> DataFrame:
    """Takes checked deliveries, the mode and whether streams are split by priority. Returns the
    candidate violations: each delivery out of order with its `p` (a struct of FIELDS)."""
    return with_previous(d, strict, True, by_priority).where(is_candidate(strict))


def _violation(r: Row, bounds: Sequence[Boundary]) -> Violation:
    p = r["p"]
    return Violation(consumer_identity(r["pid"], r["tag"]), r["pub"],
                     Delivery(p["id"], p["seq"], p["index"], p["time"], p["redelivered"]),
                     Delivery(r["id"], r["seq"], r["index"], r["time"], r["redelivered"]),
                     nearest_boundary(r["time"], bounds))


def near_boundary(bounds: Sequence[Boundary]) -> Column:
    """Returns whether a delivery lies within NEAR_BOUNDARY_NS of a phase boundary."""
    if not bounds:
        return F.lit(False)
    times = sorted({b.time for b in bounds})
    gaps = [F.abs(F.col("time") - F.lit(t)) for t in times]
    nearest = gaps[0] if len(gaps) == 1 else F.least(*gaps)
    return nearest <= F.lit(NEAR_BOUNDARY_NS)


def _examples(c: DataFrame, example_size: int,
              bounds: Sequence[Boundary]) -> dict[str, list[Violation]]:
    """Takes the classified deliveries, how many examples of each kind to keep and the phase
    boundaries. Returns the first examples of each kind, in delivery order, each with its
    nearest boundary. A strict-mode violation of a flagged delivery is an example of both
    kinds."""
    kind = F.col("kind")
    tagged = c.select("*", F.explode(F.array(
        kind, F.when(F.col("also_flagged"), F.lit("flagged")))).alias("k"))
    w = Window.partitionBy("k").orderBy("index")
    rows = (tagged.where(F.col("k").isNotNull())
            .select("*", F.row_number().over(w).alias("rn"))
            .where(F.col("rn") <= example_size).collect())
    by_kind: dict[str, list[Violation]] = {k: [] for k in KINDS}
    for r in sorted(rows, key=lambda r: r["index"]):
        by_kind[r["k"]].append(_violation(r, bounds))
    return by_kind


def ordering_facts(h: History, msgs: DataFrame, strict: bool, example_size: int,
                   sample_size: int, windows: Sequence[FaultWindow] = (),
                   bounds: Sequence[Boundary] = (), acks: bool = True) -> dict[str, Any]:
    """Takes a History, its message table, the options, the fault windows, the phase
    boundaries (checkers.holds.boundaries) and whether the history records acks (without any,
    every delivery counts as acked: no cancelled consumer held anything). Returns the ordering
    section's facts (see the module docstring). One job counts the deliveries checked and the
    candidates; only when there are candidates, the candidates are kept, the consumers' ends
    collected (and, when some consumer was cancelled and some candidate is flagged, the held
    reorders found), a job classifies and counts them (consumers affected are few: one per
    consumer process), another fetches up to example_size examples of each kind, and, when
    there are violations, another attributes them to the fault windows (checkers.fates). That
    attribution, `by_fault`, is not the ordering section's: the caller takes it out of the
    facts (checkers.spark_engine)."""
    d = checked_deliveries(h)
    by_priority = shows_priorities(h)
    row = with_previous(d.select("pid", "tag", "pub", "seq", "index", "redelivered", "priority"),
                        strict, False, by_priority).agg(
        F.count_if(is_checked(strict)).alias("checked"),
        F.count_if(is_candidate(strict)).alias("candidates"),
    ).collect()[0]
    facts: dict[str, Any] = {
        "deliveries_checked": row["checked"], "violation_count": 0,
        "consumers_affected_count": 0, "consumers_affected": [], "examples": [],
        "flagged_violation_count": 0, "flagged_examples": [],
        "unconfirmed_reorder_count": 0, "unconfirmed_examples": [],
        "held_reorder_count": 0, "held_examples": [],
        "near_boundary_count": 0, "near_boundary_ms": ns_to_ms(NEAR_BOUNDARY_NS),
        "by_priority": by_priority, "by_fault": [],
    }
    if not row["candidates"]:
        return facts
    cands = candidates(d, strict, by_priority).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        ends = consumer_windows(h) if acks else []
        held = held_reorders(h, cands, ends) if ends else None
        c = classified(cands, msgs, strict, held).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            facts.update(_judged(c, msgs, example_size, sample_size, windows, bounds))
        finally:
            c.unpersist()
    finally:
        cands.unpersist()
    return facts


def _judged(c: DataFrame, msgs: DataFrame, example_size: int, sample_size: int,
            windows: Sequence[FaultWindow], bounds: Sequence[Boundary]) -> dict[str, Any]:
    """Takes the classified candidates, the message table, the sizes, the fault windows and the
    phase boundaries. Returns the facts they give: each kind's count, the violations near a
    boundary, the consumers affected, the violations by fault (when there are any) and the
    examples."""
    kind = F.col("kind")
    counts = c.agg(
        F.count_if(kind == "violation").alias("violation"),
        F.count_if((kind == "flagged") | F.col("also_flagged")).alias("flagged"),
        F.count_if(kind == "unconfirmed").alias("unconfirmed"),
        F.count_if(kind == "held").alias("held"),
        F.count_if((kind == "violation") & near_boundary(bounds)).alias("near"),
        F.array_sort(F.collect_set(F.when(kind == "violation", F.struct("pid", "tag"))))
        .alias("affected"),
    ).collect()[0]
    affected = counts["affected"]
    facts: dict[str, Any] = dict(
        violation_count=counts["violation"], flagged_violation_count=counts["flagged"],
        unconfirmed_reorder_count=counts["unconfirmed"], held_reorder_count=counts["held"],
        near_boundary_count=counts["near"],
        consumers_affected_count=len(affected),
        consumers_affected=[consumer_identity(a["pid"], a["tag"])
                            for a in affected[:sample_size]])
    if counts["violation"]:
        try:
            facts["by_fault"] = violations_by_fault(c.where(kind == "violation"), msgs, windows)
        except Exception:  # a courtesy for the incidents: never lose the verdict over it
            log.warning("could not attribute the ordering violations to faults", exc_info=True)
    if example_size:
        by_kind = _examples(c, example_size, bounds)
        facts.update(examples=by_kind["violation"], flagged_examples=by_kind["flagged"],
                     unconfirmed_examples=by_kind["unconfirmed"], held_examples=by_kind["held"])
    return facts
