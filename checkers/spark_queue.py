"""The queue checks in Spark: one row per message id, then Jepsen's total-queue counts over it.

The definitions (Jepsen's total-queue, adapted to ids that are never reused,
and to consumer acknowledgements):

- an ack acknowledges a delivery before it with the same process, consumer
  tag and message id, first in, first out; an ack with no unacknowledged
  delivery there breaks the contract. A delivery is *acked* if an ack
  acknowledges it; in a history with no ack at all every delivery counts as
  acked, at its own index;
- attempted = ids of publish invocations; acknowledged = publishes `ok`;
  received = ids of deliveries (ok consume/drain ops); delivered = ids with an
  acked delivery;
- ok = delivered ∩ attempted; lost = acknowledged - delivered, and
  lost_unacked = lost ∩ received (delivered, never acked, never back);
  unexpected = received - attempted (a message nobody sent is wrong whether or
  not it was acked);
- duplicated = attempted ids with more than one acked delivery (Jepsen:
  dequeues - attempts - unexpected; a delivery to a consumer that never acked
  it, redelivered elsewhere, is not a second consumption). The first acked
  delivery (lowest index) is the original, the other acked ones are extras:
  *redelivered* duplicates have every extra flagged redelivered, *unflagged*
  duplicates have at least one extra without it;
- unflagged_after_ack = ids with an unflagged delivery (acked or not) after
  the ack of a flagged delivery of the same id. The harness's cancels and
  closes (checkers.model's consumer ends) change nothing here: a cancelled
  consumer's unacked messages come back flagged when its channel closes, an
  ack recorded on a channel the harness then closed reached the broker first
  (one connection, in order), and an ack lost with a connection the harness
  cut makes the broker deliver the message again flagged too. Only a broker
  that forgot the message had been delivered hands it out unflagged;
- unflagged_redelivered = ids delivered more than once with a delivery after
  the first (acked or not) without the redelivered flag, recorded more than
  REDELIVERY_GAP_NS (1 s) after the first: the broker handed out as new a
  message it had delivered before, whether or not anyone acked it (RabbitMQ
  4.3's classic queues after a graceful restart, the deliveries still unacked
  at the stop). The gap keeps out a first delivery recorded late: a consumer
  whose node died may read the delivery from its socket after the broker has
  already redelivered the message, flagged, to another. Reported; it makes the
  section invalid only with `unflagged_redeliveries_invalid`;
- recovered = delivered ∩ attempted whose publish completed `info` or never
  completed; delivered_failed = delivered ids whose publish was `fail`
  (reported, not an anomaly: a nack refuses responsibility, it does not say
  the message is absent); fail_reasons = failed publishes by error text;
- dead_lettered = ids with a dead-letter op (the queue dropped them by design
  and the harness read them back from its dead-letter queue);
  dropped_by_design = (attempted ∩ dead_lettered) - delivered, counted by the
  reason of the id's first dead-letter op (`dropped_reasons`); a
  dead-lettered id that was also delivered is delivered, and reported as
  dead_lettered_delivered. So lost = acknowledged - delivered - dead_lettered:
  only a confirmed message that vanished without a dead-letter record is lost.

`message_table` brings every publish op, delivery and dead letter of a
message id together in one shuffle and reduces them with plain min/max/count aggregates
(fixed-width buffers, so Spark keeps a hash aggregate): how often the id was
invoked and completed, the first invocation's and completion's process, time
and outcome, how often it was delivered and acked, with and without the
redelivered flag, which delivery came (or was acked) first, where the first
flagged ack and the last unflagged delivery are, how often it was
dead-lettered and where first (its reason is read there when needed). A
history that records acks also brings its acks along. An id with one
delivery and one ack (nearly every id) needs no order to pair them: the ack
is the delivery's if its process acked after it. The ids with more than one (a redelivery, a duplicate: a few
in a thousand) have their rows sorted by consumer stream so that a window
pairs each ack with the delivery right before it (the one sort the queue
check pays, over those ids only). `total_aggs` counts those definitions'
classes and whether a publish or an ack breaks the contract, in the one pass
that sums the table up (checkers.spark_engine); `publish_problem` and
`ack_problem` then find the first such publish or ack, `queue_facts` reads the
counts and takes bounded, sorted samples.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from pyspark.sql import Column, DataFrame, Row, Window
from pyspark.sql import functions as F

from checkers.errors import orphan_ack_message
from checkers.model import MESSAGE_ID_PATTERN, NO_REASON, OUTCOME_CODES
from checkers.spark_io import (
    CODE_NAMES,
    History,
    is_ack,
    is_dead_letter,
    is_delivery,
    is_publish,
    loc,
)
from history import BLOCKED_ERROR

log = logging.getLogger(__name__)

OK, FAIL, INFO = OUTCOME_CODES["ok"], OUTCOME_CODES["fail"], OUTCOME_CODES["info"]


# An unflagged delivery this long after a message's first delivery is a redelivery, not a first
# delivery recorded late by a client whose connection was dying (unflagged_redelivered).
REDELIVERY_GAP_NS: Final = 1_000_000_000
# The message table's columns that pair acks with deliveries.
ACKED = ("n_acked", "n_acked_unflagged", "first_acked_flag", "first_flag_ack_loc", "orphan_at")
# At most this many ids with more than one delivery or ack are paired by the window apart from
# the others; past it the window pairs every id (one table, as for histories whose processes
# consume under several consumer tags).
WINDOWED_IDS: Final = 200_000
# More (process, consumer tag) pairs than this: the window pairs every id.
MAX_CONSUMERS: Final = 100_000


def _when(cond: Column, col: str | Column) -> Column:
    return F.when(cond, F.col(col) if isinstance(col, str) else col)


def _client_rows(df: DataFrame, acks: bool) -> DataFrame:
    """Takes prepared rows. Returns the publish ops, deliveries, dead letters and (if `acks`)
    acks, keyed by id, with their file position `loc`."""
    kept = is_publish() | is_delivery() | is_dead_letter() | (is_ack() if acks else F.lit(False))
    return df.where(kept).select(F.col("value").alias("id"), "cls", "code", "pid", "time",
                                 "consumer", "redelivered", "reason", "error",
                                 loc().alias("loc"))


def _id_aggs(acks: bool) -> list[Column]:
    """Returns the aggregates of an id's rows that need no pairing of acks with deliveries."""
    pub, dlv, flag, at = is_publish(), is_delivery(), F.col("redelivered"), F.col("loc")
    dead = is_dead_letter()
    inv = pub & (F.col("code") == 0)
    comp = pub & (F.col("code") > 0)
    return [
        F.count_if(pub).alias("n_pub"),
        F.count_if(inv).alias("n_inv"),
        F.min(_when(pub, at * 2 + comp.cast("long"))).alias("first_pub"),
        F.min(_when(pub, "pid")).alias("pid_min"),
        F.max(_when(pub, "pid")).alias("pid_max"),
        F.min(_when(inv, "time")).alias("inv_time"),
        F.min(_when(comp, "time")).alias("comp_time"),
        F.min(_when(comp, "code")).alias("comp_code"),
        F.count_if(dlv).alias("n_del"),
        F.count_if(dlv & ~flag).alias("n_unflagged"),
        # The first delivery's loc, its redelivered flag in the low bit.
        F.min(_when(dlv, at * 2 + flag.cast("long"))).alias("first_low"),
        F.min(_when(dlv & flag, at)).alias("first_flag_loc"),
        F.max(_when(dlv & ~flag, at)).alias("last_unflagged_loc"),
        F.min(_when(dlv, "time")).alias("first_dlv_time"),
        F.max(_when(dlv & ~flag, "time")).alias("last_unflagged_time"),
        # When the message was first consumed: its first ack (first delivery without acks),
        # for what was at risk when each fault began (checkers.spark_risk).
        F.min(_when(is_ack() if acks else dlv, "time")).alias("consumed_time"),
        # Dead letters (each on a stream of its own, so they pair with no ack): how many, and
        # where the first one is (its reason is read there, by `dropped_reasons`, only when
        # something was dropped: a text in an aggregate's buffer would make Spark sort every
        # row by id instead of hashing it).
        F.count_if(dead).alias("n_dead"),
        F.min(_when(dead, at)).alias("dead_loc"),
        # Whether its completion was `info` because its connection was blocked (a resource
        # alarm), for the publishes each fault made unknown (checkers.spark_risk).
        F.max(_when(comp, F.col("error") == F.lit(BLOCKED_ERROR))).alias("comp_blocked"),
        # Where it was last delivered and acked: was it consumed after the harness's first mend
        # (checkers.spark_traces)?
        F.max(_when(dlv, at)).alias("last_dlv_loc"),
        F.max(_when(is_ack(), at) if acks else F.lit(None).cast("long")).alias("last_ack_loc"),
    ]


def _table(grouped: DataFrame, *acked: Column) -> DataFrame:
    """Takes the per-id aggregates (`_id_aggs`, and more), the five ACKED columns and any others.
    Returns the message table: its columns, in the order every way of building it gives them,
    then those others."""
    return grouped.select(
        "id", "n_inv", "comp_code", "inv_time", "comp_time", F.col("pid_min").alias("inv_pid"),
        "n_del", "n_unflagged", (F.col("first_low") % 2).alias("first_flag"), "first_flag_loc",
        "last_unflagged_loc", "first_dlv_time", "last_unflagged_time", "consumed_time", "n_dead",
        "dead_loc", "comp_blocked",
        "last_dlv_loc", "last_ack_loc", *acked, problem_loc().alias("problem_at"))


def unpaired(df: DataFrame) -> DataFrame:
    """Takes prepared rows of a history without acks. Returns its message table, lazily: every
    delivery counts as acked, at its own position."""
    grouped = _client_rows(df, False).groupBy("id").agg(*_id_aggs(False))
    return _table(grouped, F.col("n_del").alias("n_acked"),
                  F.col("n_unflagged").alias("n_acked_unflagged"),
                  (F.col("first_low") % 2).alias("first_acked_flag"),
                  F.col("first_flag_loc").alias("first_flag_ack_loc"),
                  F.lit(None).cast("long").alias("orphan_at"))


def windowed(df: DataFrame) -> DataFrame:
    """Takes prepared rows of a history with acks (all, or every row of some ids). Returns their
    message table, lazily, each id's rows sorted by consumer stream (process, consumer tag;
    publish ops form streams of their own) and position: acks pair with deliveries first in,
    first out within a stream (a consumer acks in the order it was delivered), so the k-th
    delivery is acked iff its stream has at least k acks, and an ack with more acks than
    deliveries up to it is an orphan. A channel may get one message twice (a mirrored queue
    redelivers after a promotion): delivery, delivery, ack, ack pairs both."""
    dlv, ack, flag, at = is_delivery(), is_ack(), F.col("redelivered"), F.col("loc")
    stream = Window.partitionBy("id", "pid", "consumer").orderBy("loc")
    upto = stream.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    whole = stream.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    d_row, a_row = dlv.cast("int"), ack.cast("int")
    rows = _client_rows(df, True).select(
        "*", F.sum(d_row).over(upto).alias("d_cum"), F.sum(a_row).over(upto).alias("a_cum"),
        F.sum(a_row).over(whole).alias("a_total"),
        F.collect_list(F.when(ack, at)).over(whole).alias("ack_locs"))
    acked = dlv & (F.col("d_cum") <= F.col("a_total"))
    orphan = ack & (F.col("a_cum") > F.col("d_cum"))
    ack_loc = F.element_at("ack_locs", F.col("d_cum").cast("int"))
    grouped = rows.groupBy("id").agg(
        *_id_aggs(True),
        F.count_if(acked).alias("n_acked"),
        F.count_if(acked & ~flag).alias("n_acked_unflagged"),
        (F.min(_when(acked, at * 2 + flag.cast("long"))) % 2).alias("first_acked_flag"),
        F.min(_when(acked & flag, ack_loc)).alias("first_flag_ack_loc"),
        F.min(_when(orphan, at)).alias("orphan_at"))
    return _table(grouped, *(F.col(c) for c in ACKED))


def aggregated(df: DataFrame) -> DataFrame:
    """Takes prepared rows of a history with acks whose processes each consume under one
    consumer tag (`consumers_are_processes`: a consumer stream is then its process). Returns its
    message table, lazily, from one aggregate per id (no sort), plus a column `windowed`: true
    for the ids whose pairing it cannot tell (more than one delivery or ack), which `windowed`
    must pair again. For the others the window's rules come down to this: the delivery is acked
    iff the ack is by its process; an ack that is not, or comes before it, is an orphan. Dead
    letters are neither deliveries nor acks: they leave the pairing alone, as in the window,
    where each stands on a stream of its own."""
    dlv, ack = is_delivery(), is_ack()
    grouped = _client_rows(df, True).groupBy("id").agg(
        *_id_aggs(True),
        F.count_if(ack).alias("n_ack"),
        F.min(_when(dlv, "pid")).alias("dlv_pid"),
        F.min(_when(ack, "pid")).alias("ack_pid"),
        F.min(_when(ack, "loc")).alias("ack_loc"))
    paired = (F.col("n_del") == 1) & (F.col("n_ack") == 1) & (F.col("dlv_pid") == F.col("ack_pid"))
    in_order = paired & (F.col("ack_loc") > F.shiftright(F.col("first_low"), 1))
    flagged = (F.col("first_low") % 2) == 1
    again = (F.col("n_del") > 1) | (F.col("n_ack") > 1)
    return _table(grouped, paired.cast("long").alias("n_acked"),
                  (paired & ~flagged).cast("long").alias("n_acked_unflagged"),
                  F.when(paired, F.col("first_low") % 2).alias("first_acked_flag"),
                  F.when(paired & flagged, F.col("ack_loc")).alias("first_flag_ack_loc"),
                  F.when((F.col("n_ack") == 1) & ~in_order, F.col("ack_loc")).alias("orphan_at"),
                  again.alias("windowed"))


def consumers_are_processes(df: DataFrame) -> bool:
    """Takes prepared rows. Returns whether each client process delivers and acks under one
    consumer tag, as the harness's consumers do (a process is one channel with one consumer)."""
    pairs = (df.where(is_delivery() | is_ack()).select("pid", "consumer").distinct()
             .limit(MAX_CONSUMERS + 1).collect())
    pids = {r["pid"] for r in pairs}
    return len(pairs) <= MAX_CONSUMERS and len(pids) == len(pairs)


def message_table(h: History, acks: bool, keep: Callable[[DataFrame, str], DataFrame]
                  ) -> DataFrame:
    """Takes a History, whether it records acks and how to keep a table (a name for it; the
    engine keeps it in memory or in Parquet). Returns one row per message id (published,
    delivered or acked), kept.

    Where an id has one invocation and at most one completion, as in any valid
    history, the publish columns are that op's values; otherwise `problem_at`
    is set and `publish_problem` re-reads the id op by op. Without acks every
    delivery is acked (`unpaired`). With acks, `aggregated` builds the table
    in one aggregate when each process consumes under one tag (pyarrow's reader
    says so when it wrote the rows: checkers.arrow_json.Facts), and the few
    ids with more than one delivery or ack (redeliveries, duplicates) are
    paired again by `windowed` and take the place of their rows; the window
    pairs every id when those are many or the processes consume under
    several tags. Bits ride in the low bit of a min: whether the id's first
    publish op is a completion, and whether its first (acked) delivery was
    flagged redelivered.
    """
    if not acks:
        return keep(unpaired(h.df), "messages")
    one_tag = (h.facts.one_tag_per_process() if h.facts is not None
               else consumers_are_processes(h.df))
    if not one_tag:
        return keep(windowed(h.df), "messages")
    table = keep(aggregated(h.df), "messages")
    again = table.where(F.col("windowed"))
    n = again.count()
    rest = table.where(~F.col("windowed")).drop("windowed")
    if n == 0:
        return rest
    if n > WINDOWED_IDS:
        return keep(windowed(h.df), "messages-windowed")
    rows = h.df.join(F.broadcast(again.select("id")), F.col("value") == F.col("id"), "left_semi")
    return rest.unionByName(keep(windowed(rows), "messages-windowed"))


def problem_loc() -> Column:
    """Returns, per aggregated message, where its publish ops start if they break the publish
    rules, else null.

    The rules, read down the file per id: the first op must be an invocation;
    the second, a completion by the same process; there is no third. The loc
    of the first publish op is a lower bound of the offending op's: it ranks
    the offending ids, and `publish_problem` re-reads the first few op by op.
    """
    first_is_completion = (F.col("first_pub") % 2) == 1
    broken = ((F.col("n_inv") != 1) | (F.col("n_pub") > 2) | first_is_completion
              | (F.col("pid_min") != F.col("pid_max")))
    return F.when((F.col("n_pub") > 0) & broken, F.shiftright(F.col("first_pub"), 1))


def publish_problem(h: History, msgs: DataFrame, candidates: int = 20) -> tuple[int, str] | None:
    """Takes a History and its messages. Returns (loc, message) of the first publish-rule
    violation, or None. The ids whose publish ops start first among those breaking the
    rules are re-read op by op (exact unless more than `candidates` ids break them)."""
    worst = (msgs.where(F.col("problem_at").isNotNull()).select("id")
             .orderBy("problem_at").limit(candidates).collect())
    if not worst:
        return None
    ids = [r["id"] for r in worst]
    ops = (h.df.where(is_publish() & F.col("value").isin(ids))
           .select(F.col("value").alias("id"), loc().alias("loc"), "code", "pid")
           .orderBy("loc").collect())
    found = []
    by_id: dict[str, list[Any]] = {}
    for r in ops:
        by_id.setdefault(r["id"], []).append(r)
    for mid, rows in by_id.items():
        p = sequence_problem(mid, [(r["loc"], CODE_NAMES[r["code"]], r["pid"]) for r in rows])
        if p is not None:
            found.append(p)
    return min(found) if found else None


def sequence_problem(mid: str, ops: list[tuple[int, str, int]]) -> tuple[int, str] | None:
    """Takes a message id and its publish ops (loc, type, process) in file order. Returns the
    (loc, message) of the first op breaking the publish rules, or None."""
    inv: tuple[int, str, int] | None = None
    completed = False
    for op in ops:
        at, type_, pid = op
        if type_ == "invoke":
            if inv is not None:
                return at, f"message id {mid!r} published again"
            inv = op
        elif inv is None:
            return at, f"publish {type_} of {mid!r} without its invocation"
        elif completed:
            return at, f"publish of {mid!r} completed more than once"
        elif pid != inv[2]:
            return at, f"publish of {mid!r} invoked by process {inv[2]} but completed by {pid}"
        else:
            completed = True
    return None


def _flags() -> dict[str, Column]:
    """Returns, per kind, whether a message row is one (the module docstring's definitions)."""
    attempted = F.col("n_inv") > 0
    received = F.col("n_del") > 0
    n = F.col("n_acked")
    unflagged = F.col("n_acked_unflagged")
    first_flag = F.col("first_acked_flag")
    flag_ack = F.col("first_flag_ack_loc")
    delivered = n > 0
    code = F.col("comp_code")
    unknown = code.isNull() | (code == INFO)
    dup = attempted & (n > 1)
    extra_unflagged = unflagged - F.when(first_flag == 1, 0).otherwise(1)
    dead = F.col("n_dead") > 0
    lost = (code == OK) & ~delivered & ~dead
    return {
        "attempt": attempted,
        "acknowledged": attempted & (code == OK),
        "fail": attempted & (code == FAIL),
        "info": attempted & unknown,
        "ok": attempted & delivered,
        "lost": lost,
        "unexpected": received & ~attempted,
        "duplicated": dup,
        "redelivered_duplicated": dup & (extra_unflagged <= 0),
        "unflagged_duplicated": dup & (extra_unflagged > 0),
        "recovered": attempted & delivered & unknown,
        "delivered_failed": delivered & (code == FAIL),
        "lost_unacked": lost & received,
        "unflagged_after_ack": F.coalesce(F.col("last_unflagged_loc") > flag_ack, F.lit(False)),
        "unflagged_redelivered": ((F.col("n_unflagged") - (1 - F.col("first_flag"))) > 0) & (
            F.col("last_unflagged_time") - F.col("first_dlv_time") > F.lit(REDELIVERY_GAP_NS)),
        "dead_lettered": dead,
        "dropped_by_design": attempted & ~delivered & dead,
        "dead_lettered_delivered": dead & delivered,
    }


SAMPLED = ("lost", "unexpected", "duplicated", "redelivered_duplicated", "unflagged_duplicated",
           "recovered", "delivered_failed", "lost_unacked", "unflagged_after_ack",
           "unflagged_redelivered", "dead_lettered_delivered")


def id_order() -> list[Column]:
    """Returns the sort order of message ids: publisher, seq, then odd ids by text."""
    parsed = F.col("id").rlike(MESSAGE_ID_PATTERN)
    return [
        F.when(parsed, 0).otherwise(1),
        F.when(parsed, F.regexp_extract("id", MESSAGE_ID_PATTERN, 1).try_cast("bigint")),
        F.when(parsed, F.regexp_extract("id", MESSAGE_ID_PATTERN, 2).try_cast("bigint")),
        F.col("id"),
    ]


def total_aggs() -> list[Column]:
    """Returns the message table's aggregates that the queue check and the contract checks
    read (checkers.spark_engine sums the table up once, with the others'): the queue counts,
    the delivery totals, how many ids break the publish rules, the first orphan ack."""
    return [*(F.count_if(c).alias(f"{k}_count") for k, c in _flags().items()),
            F.coalesce(F.sum("n_del"), F.lit(0)).alias("delivery_count"),
            F.coalesce(F.sum("n_acked"), F.lit(0)).alias("acked_delivery_count"),
            F.count("problem_at").alias("publish_problem_count"),
            F.min("orphan_at").alias("first_orphan_at")]


def queue_facts(msgs: DataFrame, sample_size: int, totals: Row
                ) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Takes the messages table, the sample size and its totals (`total_aggs`). Returns the
    queue counts and samples."""
    flags = _flags()
    names = [*(f"{k}_count" for k in flags), "delivery_count", "acked_delivery_count"]
    counts = {k: int(totals[k] or 0) for k in names}
    kinds = [k for k in SAMPLED if counts[f"{k}_count"] > 0] if sample_size else []
    samples: dict[str, list[str]] = {k: [] for k in SAMPLED}
    if kinds:
        # One job for every sample: tag each anomalous id with its kinds, keep the first n per kind.
        tags = F.array(*[F.when(flags[k], F.lit(k)) for k in kinds])
        w = Window.partitionBy("kind").orderBy(*id_order())
        rows = (msgs.select("id", F.explode(tags).alias("kind"))
                .where(F.col("kind").isNotNull())
                .select("id", "kind", F.row_number().over(w).alias("rn"))
                .where(F.col("rn") <= sample_size).collect())
        for r in sorted(rows, key=lambda r: r["rn"]):
            samples[r["kind"]].append(r["id"])
    return counts, samples


def dropped_reasons(h: History, msgs: DataFrame, sample_size: int
                    ) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Takes a History, its messages table and the sample size. Returns the messages dropped by
    design counted by the reason of their first dead letter ("(none)" without one; read from
    the history at the table's `dead_loc`), most frequent first, then by reason, and each
    reason's first `sample_size` ids in id order."""
    letters = h.df.where(is_dead_letter()).select(loc().alias("dead_loc"), "reason")
    reason = F.coalesce(F.col("reason"), F.lit(NO_REASON)).alias("r")
    by = Window.partitionBy("r")
    rows = (msgs.where(_flags()["dropped_by_design"]).select("id", "dead_loc")
            .join(letters, "dead_loc", "left").select("id", reason)
            .select("id", "r", F.row_number().over(by.orderBy(*id_order())).alias("rn"),
                    F.count(F.lit(1)).over(by).alias("n"))
            .where(F.col("rn") <= max(sample_size, 1)).collect())
    counts = {r["r"]: int(r["n"]) for r in rows}
    examples: dict[str, list[str]] = {}
    for r in sorted(rows, key=lambda r: r["rn"]):
        if r["rn"] <= sample_size:
            examples.setdefault(r["r"], []).append(r["id"])
    order = sorted(counts, key=lambda k: (-counts[k], k))
    return {k: counts[k] for k in order}, {k: examples.get(k, []) for k in order}


def fail_reasons(h: History, limit: int) -> dict[str, int]:
    """Takes a History and a limit. Returns the failed publishes counted by error text, the
    `limit` most frequent, most frequent first (as `results.top_reasons` orders them)."""
    if limit <= 0:
        return {}
    reason = F.coalesce(F.col("reason"), F.lit(NO_REASON)).alias("r")
    rows = (h.df.where(is_publish() & (F.col("code") == FAIL)).groupBy(reason)
            .agg(F.count(F.lit(1)).alias("n"))
            .orderBy(F.col("n").desc(), F.col("r")).limit(limit).collect())
    return {r["r"]: int(r["n"]) for r in rows}


def ack_problem(msgs: DataFrame, at: int | None) -> tuple[int, str] | None:
    """Takes the messages table and the position of its first orphan ack (`total_aggs`; None:
    none). Returns (loc, message) of that ack, without an unacknowledged delivery before it in
    its stream, or None."""
    if at is None:
        return None
    rows = msgs.where(F.col("orphan_at") == at).select("id").limit(1).collect()
    return at, orphan_ack_message(rows[0]["id"])


def log_reads(h: History, sample_size: int) -> dict[str, Any]:
    """Takes a History of a log every consumer reads whole from its first offset (a stream) and
    the sample size. Returns how its main-phase consumers read it (checkers.results'
    log_reads_part words it): the subscriptions (process and consumer tag), the ids read, the
    ids read by more than one subscription (the design: each reads the whole log) and the ids
    read more than once within one subscription (a reader handed an offset it had read
    already), with the first of those."""
    reads = (h.df.where(is_delivery() & (F.col("f") != "drain") & F.col("pid").isNotNull())
             .groupBy(F.col("value").alias("id"), "pid", "consumer").count().cache())
    try:
        by_id = reads.groupBy("id").agg(F.count(F.lit(1)).alias("subs"),
                                        F.max("count").alias("most"))
        totals = by_id.agg(F.count(F.lit(1)).alias("read"),
                           F.count_if(F.col("subs") > 1).alias("several"),
                           F.count_if(F.col("most") > 1).alias("repeated")).collect()[0]
        subscriptions = reads.select("pid", "consumer").distinct().count()
        repeated = int(totals["repeated"] or 0)
        examples = ([r["id"] for r in by_id.where(F.col("most") > 1).orderBy(*id_order())
                     .limit(sample_size).collect()] if repeated and sample_size else [])
    finally:
        reads.unpersist()
    return {"subscriptions": subscriptions, "read_count": int(totals["read"] or 0),
            "read_by_several_count": int(totals["several"] or 0),
            "repeated_in_subscription_count": repeated, "repeated_in_subscription": examples}
