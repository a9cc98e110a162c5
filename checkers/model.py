"""The checker's vocabulary: what an op of the history means to a checker.

A history line is Jepsen's op (shared/DESIGN.md). The checker sorts ops into
a few kinds, and this module is the one place that says how:

- a *client op* has an integer process (a decimal string such as "3" counts as
  the integer, because Spark reads `process` as text);
- a *publish op* is a client op with f "publish": an `invoke` and then one
  completion (`ok` confirmed, `fail` certainly not enqueued, `info` unknown);
  the completion carries the same message id as its invocation;
- a *delivery* is a client op of type "ok" with f "consume" or "drain";
- an *ack* is a client op of type "ok" with f "ack": the consumer acknowledged
  (basic.ack on a channel that was open) a delivery before it with the same
  process, consumer tag and message id, first in, first out. A history with
  no ack at all (older runs, auto-ack consumers) is read as if every delivery
  was acked;
- a *dead-letter* is a client op of type "ok" with f "dead-letter": a message
  the queue dropped by design (its max length with drop-head, its delivery
  limit) and the harness read back from its own dead-letter queue, with the
  x-death `reason`. No ack pairs with it. The harness's observation
  f "dead-lettering" says where the queue dead-letters (by "harness", read
  back; by "user", not) and under which limits;
- a *consumer end* is a client op with f "cancel" or "close" (any type, no
  value): the harness's basic.cancel of a consumer (invoke, then its outcome)
  or a cancel the broker sent (one ok op), and the close of the consumer's
  channel (invoke, then its outcome) or a channel or connection the client saw
  closed (one info op). They are few, one or two of each per consumer process,
  and are read on the driver when the ordering check needs them
  (checkers.holds);
- the harness's observation f "priorities" says that the run's publishers
  gave messages priorities, and what the priority check needs to judge them
  (the queue, its release line's priority levels and whether it serves them
  strictly, the consumers' prefetch: checkers.spark_priority);
- *nemesis ops* (process "nemesis") and *harness events* (process "harness")
  are few and are read on the driver;
- a *probe op* is a client op with f "connect", "declare", "bind" or "delete"
  (PROBE_FS): the metadata probe's (workloads.metadata_probe), an invoke then
  its outcome, with its node and error; judged by checkers.metadata when the
  harness observed the probe (f "metadata-probe");
- every other client op (another f, a consume that is not "ok") is ignored.

It also fixes the quantile definition and the millisecond rounding of
results.json.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Final, TypeVar

NEMESIS: Final = "nemesis"
HARNESS: Final = "harness"
PUBLISH: Final = "publish"
DELIVERY_FS: Final = frozenset({"consume", "drain"})
ACK: Final = "ack"
DEAD_LETTER: Final = "dead-letter"
DEAD_LETTERING: Final = "dead-lettering"
CANCEL: Final = "cancel"
CLOSE: Final = "close"
END_FS: Final = frozenset({CANCEL, CLOSE})
# Harness observations: a phase's start or end, and the workers told to stop.
PHASE: Final = "phase"
STOP_WORKERS: Final = "stop-workers"
PRIORITIES: Final = "priorities"

# The error text of a failed publish recorded without one, as fail_reasons counts it.
NO_REASON: Final = "(none)"

# Outcome codes of a publish, as the Spark job stores them (small ints aggregate fast).
OUTCOME_CODES: Final = {"invoke": 0, "ok": 1, "fail": 2, "info": 3}

# The metadata probe's ops (history.PROBE_FS), and the harness observation that a probe ran.
PROBE_FS: Final = ("connect", "declare", "bind", "delete")
METADATA_PROBE: Final = "metadata-probe"

# Patterns for Spark's regexp functions (Java syntax): a client process, a message id.
PROCESS_INT_PATTERN: Final = r"^-?[0-9]+$"
MESSAGE_ID_PATTERN: Final = r"^([0-9]+)-([0-9]+)$"


N = TypeVar("N", int, float)


def consumer_identity(process: int, consumer: str | None) -> str:
    """Takes a delivery's process and consumer tag. Returns the consumer's identity "process/tag"."""
    return f"{process}/{consumer or ''}"


def nearest_rank(sorted_values: Sequence[N], q: float) -> N:
    """Takes ascending values (at least one) and a quantile in (0, 1]. Returns the nearest-rank quantile.

    That is the smallest value with at least a fraction q of the values at or
    below it: `sorted_values[ceil(q * n) - 1]`. It is the one latency-quantile
    definition: Spark's percentile_approx gives the same value while a group
    holds fewer values than its accuracy, and the report uses it for what
    results.json does not hold.
    """
    n = len(sorted_values)
    return sorted_values[max(0, math.ceil(q * n) - 1)]


def ns_to_ms(ns: int | float | None) -> float | None:
    """Takes nanoseconds. Returns milliseconds rounded to microseconds, or None."""
    if ns is None:
        return None
    return round(ns / 1e6, 3)


def share(part: int, whole: int) -> float | None:
    """Takes a count and its total. Returns part/whole rounded to 6 places, or None for no total."""
    if whole == 0:
        return None
    return round(part / whole, 6)


def decode_value(raw: Any) -> Any:
    """Takes a nemesis/harness value as read (an object, or its JSON text from Spark). Returns the object.

    Text that is not JSON is returned unchanged.
    """
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw
