"""The queue checks in Spark: one row per message id, then Jepsen's total-queue counts over it.

`messages` groups publish ops and deliveries by message id in one shuffle
(every aggregate has a fixed-width buffer, so Spark keeps a hash aggregate):
how often the id was invoked and completed, the first invocation's and
completion's process, time and outcome, how often it was delivered, how many
of those lacked the redelivered flag, and whether the first delivery had it.
`publish_problem` finds a publish whose completion has no invocation (or a
second one, or comes from another process), `queue_facts` computes the counts
and bounded, sorted samples of the reference's definitions
(checkers.reference).
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checkers.model import MESSAGE_ID_PATTERN, OUTCOME_CODES
from checkers.spark_io import CODE_NAMES, History, is_delivery, is_publish, loc

log = logging.getLogger(__name__)

OK, FAIL, INFO = OUTCOME_CODES["ok"], OUTCOME_CODES["fail"], OUTCOME_CODES["info"]


def messages(h: History) -> DataFrame:
    """Takes a History. Returns one row per message id (published or delivered), lazily.

    Plain min/max/count aggregates only (fast, compiled hash aggregation).
    Where an id has one invocation and at most one completion, as in any
    valid history, they are that op's values; otherwise `problem_at` is set
    and `publish_problem` re-reads the id op by op. Bits ride in the low bit of
    a min: whether the id's first publish op is a completion, and whether its
    first delivery was flagged redelivered.
    """
    pub = is_publish()
    dlv = is_delivery()
    inv = pub & (F.col("code") == 0)
    comp = pub & (F.col("code") > 0)

    def when(cond: Column, col: str | Column) -> Column:
        return F.when(cond, F.col(col) if isinstance(col, str) else col)

    agg = h.df.where(pub | dlv).groupBy(F.col("value").alias("id")).agg(
        F.count_if(pub).alias("n_pub"),
        F.count_if(inv).alias("n_inv"),
        F.min(when(pub, loc() * 2 + comp.cast("long"))).alias("first_pub"),
        F.min(when(pub, "pid")).alias("pid_min"),
        F.max(when(pub, "pid")).alias("pid_max"),
        F.min(when(inv, "time")).alias("inv_time"),
        F.min(when(comp, "time")).alias("comp_time"),
        F.min(when(comp, "code")).alias("comp_code"),
        F.count_if(dlv).alias("n_del"),
        F.count_if(dlv & ~F.col("redelivered")).alias("n_unflagged"),
        (F.min(when(dlv, loc() * 2 + F.col("redelivered").cast("long"))) % 2).alias("first_flag"),
    )
    return agg.select("id", "n_inv", "comp_code", "inv_time", "comp_time", "n_del",
                      "n_unflagged", "first_flag", problem_loc().alias("problem_at"))


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
    (loc, message) of the first op breaking the publish rules, or None (as the reference)."""
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
    attempted = F.col("n_inv") > 0
    delivered = F.col("n_del") > 0
    code = F.col("comp_code")
    unknown = code.isNull() | (code == INFO)
    dup = attempted & (F.col("n_del") > 1)
    extra_unflagged = F.col("n_unflagged") - F.when(F.col("first_flag") == 1, 0).otherwise(1)
    return {
        "attempt": attempted,
        "acknowledged": attempted & (code == OK),
        "fail": attempted & (code == FAIL),
        "info": attempted & unknown,
        "ok": attempted & delivered,
        "lost": (code == OK) & ~delivered,
        "unexpected": delivered & ~attempted,
        "duplicated": dup,
        "redelivered_duplicated": dup & (extra_unflagged <= 0),
        "unflagged_duplicated": dup & (extra_unflagged > 0),
        "recovered": attempted & delivered & unknown,
        "delivered_failed": delivered & (code == FAIL),
    }


SAMPLED = ("lost", "unexpected", "duplicated", "redelivered_duplicated", "unflagged_duplicated",
           "recovered", "delivered_failed")


def id_order() -> list[Column]:
    """Returns the sort order of message ids: publisher, seq, then odd ids by text."""
    parsed = F.col("id").rlike(MESSAGE_ID_PATTERN)
    return [
        F.when(parsed, 0).otherwise(1),
        F.when(parsed, F.regexp_extract("id", MESSAGE_ID_PATTERN, 1).try_cast("bigint")),
        F.when(parsed, F.regexp_extract("id", MESSAGE_ID_PATTERN, 2).try_cast("bigint")),
        F.col("id"),
    ]


def queue_facts(msgs: DataFrame, sample_size: int) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Takes the messages table and the sample size. Returns the queue counts and samples."""
    flags = _flags()
    aggs = [F.count_if(c).alias(f"{k}_count") for k, c in flags.items()]
    aggs.append(F.coalesce(F.sum("n_del"), F.lit(0)).alias("delivery_count"))
    row = msgs.agg(*aggs).collect()[0].asDict()
    counts = {k: int(v or 0) for k, v in row.items()}
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
