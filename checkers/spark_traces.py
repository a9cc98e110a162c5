"""Gathering the traces (checkers.traces) in Spark, while the check has the history loaded.

Two small jobs, each a filter collected small: the client ops of the sampled
message ids (at most a few hundred ids), and, when the harness restarted a
node to mend the cluster, how many distinct messages were acked (delivered,
when no ack follows the mend) after its first restart, in file order. The
nemesis and harness ops come from the check's own side-op collection.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import cast

from pyspark.sql import functions as F

from checkers.model import ACK, HARNESS, PUBLISH
from checkers.phases import HarnessEvent
from checkers.spark_io import (
    ACK_ROW,
    CODE_NAMES,
    DELIVERY_ROW,
    PUBLISH_ROW,
    History,
    collect_small,
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


def delivered_after(h: History, at: int) -> int:
    """Takes a History and a loc. Returns how many distinct messages were acked after it, or,
    when no ack comes after it, how many were delivered after it."""
    row = (h.df.where((is_ack() | is_delivery()) & (loc() > at))
           .agg(F.count_if(is_ack()).alias("acks"),
                F.count_distinct(F.when(is_ack(), F.col("value"))).alias("acked"),
                F.count_distinct(F.when(is_delivery(), F.col("value"))).alias("delivered"))
           .collect()[0])
    return int(row["acked"] if row["acks"] else row["delivered"])


def sampled_ops(h: History, ids: Iterable[str]) -> dict[str, tuple[Op, ...]]:
    """Takes a History and message ids (few). Returns each id's client ops (publish ops,
    deliveries, acks) in file order."""
    wanted = sorted(set(ids))
    out: dict[str, list[Op]] = {i: [] for i in wanted}
    if not wanted:
        return {}
    rows = collect_small(
        h.df.where(F.col("cls").isNotNull() & F.col("value").isin(wanted))
        .select(loc().alias("loc"), "index", "time", "code", "pid", "value", "cls", "f", "node",
                "error", "consumer", "pub", "seq", "redelivered", "phase").orderBy("loc"),
        MAX_TRACE_OPS, "ops of the sampled messages")
    f_of = {PUBLISH_ROW: PUBLISH, ACK_ROW: ACK}
    for r in rows:
        dlv = r["cls"] == DELIVERY_ROW
        out[r["value"]].append(Op(
            type=cast(OpType, CODE_NAMES[r["code"]]), process=r["pid"],
            f=r["f"] if dlv else f_of[r["cls"]], value=r["value"], node=r["node"],
            index=r["index"], time=r["time"], publisher=r["pub"], seq=r["seq"],
            consumer=r["consumer"], redelivered=r["redelivered"], phase=r["phase"],
            error=r["error"]))
    return {i: tuple(v) for i, v in out.items()}


def gather(h: History, ids: Iterable[str], nemesis: Sequence[Op],
           harness: Sequence[HarnessEvent], end_ns: int, acks: bool) -> Traces:
    """Takes a History, the sampled message ids, the nemesis ops and harness events (file
    order), the history's last time and whether it records acks. Returns the Traces."""
    at = first_mend_loc(harness)
    return Traces(sampled_ops(h, ids), tuple(nemesis), harness_ops(harness), end_ns, acks,
                  None if at is None else delivered_after(h, at))
