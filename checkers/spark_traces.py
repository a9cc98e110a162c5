"""Gathering the traces (checkers.traces) in Spark, while the check has the history loaded.

One pass over the history collects the client ops of the sampled message ids
(at most a few hundred ids). When the harness restarted a node to mend the
cluster, how many distinct messages were acked (delivered, when no ack
follows the mend) after its first restart, in file order, comes from the
message table's last delivery and ack of each id, in the one pass that sums
the table up (`after_aggs`). The nemesis and harness ops come from the
check's own side-op collection.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import cast

from pyspark.sql import Column, Row
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


def scan(h: History, ids: Iterable[str]) -> dict[str, tuple[Op, ...]]:
    """Takes a History and message ids (few). Returns, from one pass, each id's client ops
    (publish ops, deliveries, acks) in file order."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    rows = (h.df.where(F.col("cls").isNotNull() & F.col("value").isin(wanted))
            .select(loc().alias("loc"), *FIELDS[1:]).limit(MAX_TRACE_OPS + 1).collect())
    if len(rows) > MAX_TRACE_OPS:
        raise HistoryError(f"more than {MAX_TRACE_OPS} ops of the sampled messages: not a "
                           f"history the checkers can read")
    out: dict[str, list[Op]] = {i: [] for i in wanted}
    for r in sorted(rows, key=lambda r: r["loc"]):
        out[r["value"]].append(_op(r))
    return {i: tuple(v) for i, v in out.items()}


def after_aggs(at: int | None) -> list[Column]:
    """Takes the loc of the harness's first mend (`first_mend_loc`; None: none). Returns the
    message table's aggregates `consumed_after` reads (none without a mend)."""
    if at is None:
        return []
    return [F.count_if(F.col("last_ack_loc") > at).alias("acked_after_mend"),
            F.count_if(F.col("last_dlv_loc") > at).alias("delivered_after_mend")]


def consumed_after(totals: Row, at: int | None) -> int | None:
    """Takes the message table's totals (with `after_aggs`) and the first mend's loc. Returns how
    many distinct messages were acked after it, or, when no ack comes after it, delivered after
    it (None without a mend)."""
    if at is None:
        return None
    acked = int(totals["acked_after_mend"])
    return acked if acked else int(totals["delivered_after_mend"])


def gather(h: History, ids: Iterable[str], nemesis: Sequence[Op],
           harness: Sequence[HarnessEvent], end_ns: int, acks: bool,
           after: int | None) -> Traces:
    """Takes a History, the sampled message ids, the nemesis ops and harness events (file
    order), the history's last time, whether it records acks and how many messages were
    consumed after the first mend (`consumed_after`). Returns the Traces."""
    return Traces(scan(h, ids), tuple(nemesis), harness_ops(harness), end_ns, acks, after)
