"""Gathering the traces (checkers.traces) in Spark, while the check has the history loaded.

One pass over the history, one small aggregate: the client ops of the sampled
message ids (at most a few hundred ids), and, when the harness restarted a
node to mend the cluster, how many distinct messages were acked (delivered,
when no ack follows the mend) after its first restart, in file order. The
nemesis and harness ops come from the check's own side-op collection.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import cast

from pyspark.sql import Row
from pyspark.sql import functions as F

from checkers.errors import HistoryError
from checkers.model import ACK, DEAD_LETTER, HARNESS, PUBLISH
from checkers.phases import HarnessEvent
from checkers.spark_io import (
    ACK_ROW,
    CODE_NAMES,
    DEAD_ROW,
    DELIVERY_ROW,
    PUBLISH_ROW,
    History,
    is_ack,
    is_delivery,
    loc,
)
from checkers.traces import MEND_FS, Traces
from history import Op, OpType

log = logging.getLogger(__name__)

# More client ops than this for a few sampled ids is not a history the checker can read.
MAX_TRACE_OPS = 100_000


def harness_ops(events: Sequence[HarnessEvent]) -> tuple[Op, ...]:
    """Takes the check's harness events. Returns them as history ops (info ops of the harness,
    as the harness records its observations)."""
    return tuple(Op(type="info", process=HARNESS, f=e.f, value=e.value, node=e.node, time=e.time)
                 for e in events)


def first_mend_loc(events: Sequence[HarnessEvent]) -> int | None:
    """Takes the harness events in file order. Returns the loc of the first mend (a harness
    restart, MEND_FS, with an object value), or None."""
    return next((e.loc for e in events if e.f in MEND_FS and isinstance(e.value, dict)), None)


FIELDS = ("loc", "index", "time", "code", "pid", "value", "cls", "f", "node", "error",
          "consumer", "pub", "seq", "redelivered", "phase")


def _op(r: Row) -> Op:
    """Takes a collected client row (FIELDS). Returns it as a history op."""
    f = r["f"] if r["cls"] == DELIVERY_ROW else {
        PUBLISH_ROW: PUBLISH, ACK_ROW: ACK, DEAD_ROW: DEAD_LETTER}[r["cls"]]
    return Op(type=cast(OpType, CODE_NAMES[r["code"]]), process=r["pid"], f=f, value=r["value"],
              node=r["node"], index=r["index"], time=r["time"], publisher=r["pub"],
              seq=r["seq"], consumer=r["consumer"], redelivered=r["redelivered"],
              phase=r["phase"], error=r["error"])


def scan(h: History, ids: Iterable[str], at: int | None
         ) -> tuple[dict[str, tuple[Op, ...]], int | None]:
    """Takes a History, message ids (few) and a loc (the first mend's, or None). Returns, from
    one pass, each id's client ops (publish ops, deliveries, acks) in file order, and how many
    distinct messages were acked after the loc, or, when no ack comes after it, delivered
    after it (None without a loc)."""
    wanted = sorted(set(ids))
    if not wanted and at is None:
        return {}, None
    want = F.col("value").isin(wanted) if wanted else F.lit(False)
    after = (loc() > F.lit(at)) if at is not None else F.lit(False)
    consumed = is_ack() | is_delivery()
    row = (h.df.where(F.col("cls").isNotNull() & (want | (after & consumed)))
           .select(F.when(want, F.struct(loc().alias("loc"), *FIELDS[1:])).alias("op"),
                   (after & is_ack()).alias("a"), (after & is_delivery()).alias("d"), "value")
           .agg(F.array_sort(F.collect_list("op")).alias("ops"),
                F.count_if("a").alias("acks"),
                F.count_distinct(F.when(F.col("a"), F.col("value"))).alias("acked"),
                F.count_distinct(F.when(F.col("d"), F.col("value"))).alias("delivered"))
           .collect()[0])
    if len(row["ops"]) > MAX_TRACE_OPS:
        raise HistoryError(f"more than {MAX_TRACE_OPS} ops of the sampled messages: not a "
                           f"history the checkers can read")
    out: dict[str, list[Op]] = {i: [] for i in wanted}
    for r in row["ops"]:
        out[r["value"]].append(_op(r))
    after_count = None if at is None else int(row["acked"] if row["acks"] else row["delivered"])
    return {i: tuple(v) for i, v in out.items()}, after_count


def gather(h: History, ids: Iterable[str], nemesis: Sequence[Op],
           harness: Sequence[HarnessEvent], end_ns: int, acks: bool) -> Traces:
    """Takes a History, the sampled message ids, the nemesis ops and harness events (file
    order), the history's last time and whether it records acks. Returns the Traces."""
    ops, after = scan(h, ids, first_mend_loc(harness))
    return Traces(ops, tuple(nemesis), harness_ops(harness), end_ns, acks, after)
