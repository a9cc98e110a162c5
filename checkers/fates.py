"""What became of each message, over time and by fault: the checker's one judgement, summarised.

The queue check (checkers.spark_queue) classes every message id. Two bounded
summaries of those classes make results.json's `"fates"` section (information,
no "valid" of its own), so that nothing after the check (the fates plot, the
incidents) judges a message by rules of its own:

`fates` - every attempted message gets exactly one *fate*, the first of
FATE_ORDER that applies (so the worst one wins):

- lost: confirmed and never delivered and acked (the queue check's lost),
  once the drain proved the queue empty (or the check does not require it);
- unproven: the same, when the drain did not prove the queue empty: not
  read back, not proven lost (the queue section is then "unknown");
- unflagged_duplicated / redelivered_duplicated: delivered and acked more
  than once, a later delivery unflagged / every later one flagged;
- recovered: delivered although its publish's outcome was unknown;
- delivered_failed: delivered although its publish was refused (a nack);
- dropped_by_design: never delivered, and dead-lettered by the queue's
  limits (read back from the harness's dead-letter queue), confirmed or not;
- unconfirmed: not confirmed (fail, info or no completion) and never
  delivered: nobody promised it;
- delivered_in_drain / delivered: confirmed and delivered once, first consumed
  (acked; delivered, in a history without acks) at or after the drain
  phase's start / before it.

They are counted per bucket of publish (invocation) time: at most
MAX_BUCKETS buckets of a round width (`bucket_width`). Messages nobody
published (unexpected) have no publish time and are not in the fates.

`by_fault` - each anomalous message (ATTRIBUTED classes) is attributed to
one fault window: the first window, in start order, whose end is at or after
the time the message's publish completed (its confirm; for a publish that
never completed, its invocation). That is the first fault the message lived
through once the broker had it, the first suspect. A message published after
every window ended goes to the last window: what the last fault set off
outlives its heal (autoheal restarts the losing side a second after it, and
what that side confirmed in that second is lost with it; the harness's own
restarts are weighed apart, in `mends`). A message with no publish at all
(unexpected) is attributed to no window (`window` null). An ordering violation ("reordered") is attributed
by the message of its later delivery, by the same rule. Per window: the count
of each class and up to EXAMPLES ids (the first in id order).

    "fates": {"by": "publish time", "bucket_ms": 200.0, "drained": true,
              "totals": {"delivered": 9800, "lost": 3, ...},
              "series": {"lost": [[bucket start ms, count], ...], ...},
              "by_fault": [{"window": 0, "start_ms": ..., "end_ms": ...,
                            "counts": {"lost": 2, "reordered": 1},
                            "examples": {"lost": ["0-12", "0-13"], "reordered": ["1-4"]}},
                           ..., {"window": null, ...}]}
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

# Fates, from the best to the worst: where several apply, the last one listed wins.
FATE_ORDER: Final = ("delivered", "delivered_in_drain", "redelivered_duplicated",
                     "unflagged_duplicated", "recovered", "delivered_failed", "unconfirmed",
                     "dropped_by_design", "unproven", "lost")
FATE_LABELS: Final = {
    "delivered": "delivered in the main phase",
    "delivered_in_drain": "delivered in the drain",
    "redelivered_duplicated": "duplicated, flagged redelivered",
    "unflagged_duplicated": "duplicated, unflagged",
    "recovered": "recovered (unconfirmed, delivered)",
    "delivered_failed": "delivered after a nack",
    "unconfirmed": "unconfirmed, never delivered",
    "dropped_by_design": "dropped by design (dead-lettered)",
    "unproven": "not read back (drain unproven)",
    "lost": "lost",
}
MAX_BUCKETS: Final = 300
# Bucket widths are 1, 2 or 5 times a power of ten milliseconds, at least this.
MIN_BUCKET_MS: Final = 100
# The queue classes attributed to fault windows, and how many example ids each window keeps.
ATTRIBUTED: Final = ("lost", "lost_unacked", "unexpected", "unflagged_duplicated",
                     "redelivered_duplicated", "unflagged_after_ack")
REORDERED: Final = "reordered"
EXAMPLES: Final = 10


def bucket_width(start_ns: int, end_ns: int, max_buckets: int = MAX_BUCKETS) -> int:
    """Takes the history's first and last times (ns). Returns the bucket width (ns): the
    smallest of 1, 2, 5 x 10^k ms (at least MIN_BUCKET_MS) giving at most max_buckets."""
    span_ms = max(0, end_ns - start_ns) / 1e6
    need = max(span_ms / max_buckets, MIN_BUCKET_MS)
    power = 10 ** math.floor(math.log10(need))
    for m in (1, 2, 5, 10):
        if m * power >= need:
            return int(m * power * 1_000_000)
    raise AssertionError("unreachable")  # pragma: no cover


def fates_section(counts: Sequence[tuple[int, str, int]], width_ns: int,
                  drained: bool) -> dict[str, Any]:
    """Takes (bucket, fate, count) triples (bucket = publish time // width_ns), the bucket
    width and whether lost messages are proven lost. Returns the queue section's `fates`:
    {"by", "bucket_ms", "drained", "totals" {fate: n}, "series" {fate: [[bucket start ms, n],
    ...]}}, fates in FATE_ORDER, buckets in time order, empty buckets left out."""
    series: dict[str, list[list[float | int]]] = {}
    totals: dict[str, int] = {}
    for bucket, fate, n in sorted(counts, key=lambda c: (FATE_ORDER.index(c[1]), c[0])):
        series.setdefault(fate, []).append([round(bucket * width_ns / 1e6, 3), int(n)])
        totals[fate] = totals.get(fate, 0) + int(n)
    return {"by": "publish time", "bucket_ms": round(width_ns / 1e6, 3), "drained": drained,
            "totals": totals, "series": series}


def by_fault_section(windows: Sequence[tuple[float, float]],
                     counts: Mapping[tuple[int | None, str], int],
                     examples: Mapping[tuple[int | None, str], Sequence[str]]) -> list[dict[str, Any]]:
    """Takes the fault windows ((start ms, end ms), in start order), the count of each
    (window index or None, class) and its example ids. Returns the `by_fault` list: one entry
    per window with an anomaly, in window order, then the unattributed one (window null),
    each {"window", "start_ms", "end_ms", "counts" {class: n}, "examples" {class: [ids]}}."""
    keys = sorted({w for w, _ in counts}, key=lambda w: (w is None, w or 0))
    out = []
    for w in keys:
        span = windows[w] if w is not None else (None, None)
        cls_counts = {c: int(n) for (ww, c), n in sorted(counts.items(), key=lambda kv: kv[0][1])
                      if ww == w and n}
        if not cls_counts:
            continue
        out.append({"window": w, "start_ms": span[0], "end_ms": span[1], "counts": cls_counts,
                    "examples": {c: list(examples.get((w, c), []))[:EXAMPLES]
                                 for c in cls_counts}})
    return out


def merge_by_fault(*lists: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Takes by_fault lists (the queue's, the ordering's). Returns one list: an entry per
    window, counts and examples of each list's classes together, windows in order, null last."""
    merged: dict[int | None, dict[str, Any]] = {}
    for entries in lists:
        for e in entries:
            into = merged.setdefault(e["window"], {"window": e["window"],
                                                   "start_ms": e.get("start_ms"),
                                                   "end_ms": e.get("end_ms"),
                                                   "counts": {}, "examples": {}})
            into["counts"].update(e.get("counts") or {})
            into["examples"].update(e.get("examples") or {})
    return [merged[w] for w in sorted(merged, key=lambda w: (w is None, w or 0))]
