"""Traces: the few ops the explanations and the mends need, gathered by the check itself.

After its verdict the check tells the story of a few sampled anomalous
messages (harness.explain) and weighs the harness's own restarts
(harness.mends). Neither may read a 10M-op history again, so the Spark check
gathers what they need while it has the history loaded
(checkers.spark_traces): the client ops of the sampled message ids, the
nemesis and harness ops (few), the history's last time, whether it records
acks, and how many messages were delivered after the harness's first restart
(`delivered_after_first_mend`: the ids acked after it, or, when no ack
follows it, the ids delivered after it).

`Traces` is that material, plain data; `CheckedResults` is results.json's
dict carrying it as an attribute, so it travels from the checker to the
harness without ever being written. `traces_from_file` gathers the same from
a history in one plain-Python pass: the reference the Spark gathering is
tested against, and what a caller without a check (an older results.json, a
test's literal history) falls back on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from history import HARNESS, NEMESIS, Op, iter_history

# The harness's own restarts to mend the cluster or the queue (harness.recovery records them).
MEND_FS: Final = ("recover-node", "recover-queue")
DELIVERY_FS: Final = ("consume", "drain")


@dataclass(frozen=True)
class Traces:
    """What the explanations and the mends read: `ops`, each sampled id's client ops (publish,
    deliveries, acks) in file order; the nemesis and harness ops in file order; the history's
    last time (ns); whether it records acks (any ack at all, as the queue check decides); and
    how many messages were delivered after the harness's first mend (None: no mend)."""

    ops: Mapping[str, tuple[Op, ...]] = field(default_factory=dict)
    nemesis: tuple[Op, ...] = ()
    harness: tuple[Op, ...] = ()
    end_ns: int = 0
    acks_recorded: bool = False
    delivered_after_first_mend: int | None = None


class CheckedResults(dict[str, Any]):
    """results.json as a dict, plus the `traces` the check gathered (an attribute: never
    written, and gone when the dict is copied)."""

    traces: Traces | None = None


def traces_of(results: Mapping[str, Any]) -> Traces | None:
    """Takes results (a dict, or CheckedResults). Returns the traces they carry, or None."""
    return getattr(results, "traces", None)


def traces_from_file(path: Path, ids: Iterable[str]) -> Traces:
    """Takes a JSONL history and the message ids wanted. Returns their Traces, from one pass
    over the history in plain Python (memory: the wanted ids' ops, the side ops, and the ids
    delivered after the first mend)."""
    wanted = set(ids)
    ops: dict[str, list[Op]] = {i: [] for i in wanted}
    nemesis: list[Op] = []
    harness: list[Op] = []
    end = 0
    acks = False
    mended = False
    after_acked: set[str] = set()
    after_delivered: set[str] = set()
    for op in iter_history(path):
        end = max(end, op.time)
        if op.process == NEMESIS:
            nemesis.append(op)
            continue
        if op.process == HARNESS:
            harness.append(op)
            mended = mended or (op.f in MEND_FS and isinstance(op.value, dict))
            continue
        if op.type != "ok" or not isinstance(op.value, str):
            if op.value in wanted:
                ops[op.value].append(op)
            continue
        if op.f == "ack":
            acks = True
            if mended:
                after_acked.add(op.value)
        elif op.f in DELIVERY_FS and mended:
            after_delivered.add(op.value)
        if op.value in wanted:
            ops[op.value].append(op)
    after = len(after_acked or after_delivered) if mended else None
    return Traces({i: tuple(v) for i, v in ops.items()}, tuple(nemesis), tuple(harness), end,
                  acks, after)
