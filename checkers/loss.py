"""Loss told apart: which publisher lost which stretch of its confirmed messages, confirmed where.

The definitions (results.json's `queue.loss`, present when something was lost):

- a publisher's *confirmed sequence* is its acknowledged messages (publish
  `ok`) ordered by seq; publisher and seq are read from the message id
  ("<publisher>-<seq>"); lost ids of another shape are counted as
  `unsequenced_count` and told in no run;
- a *run* is a maximal stretch of lost messages that are consecutive in that
  sequence (an unconfirmed seq between two lost ones does not cut the run: it
  was never confirmed). A run holding the sequence's first message is a
  *prefix*, its last a *suffix*, both (the publisher lost every confirmed
  message) *all*, neither a *middle*;
- the *confirming node* of a lost message is the `node` of its publish's `ok`
  op ("unknown" without one); its *role* is read from the last queue
  placement the harness observed at or before that confirm, for the
  publish's queue (a placement or a publish naming no queue matches any):
  "leader" when the node led the queue, "follower" when it was one of its
  members or mirrors, "non-member" otherwise, and "unknown" without such an
  observation.
- its *side* says where a partition had put it at the confirm: "minority" when
  the confirm's time falls in a partition's window (from its start's
  completion to its stop's, history.faults.FaultWindow) in which the node and
  the nodes its grudge lets it reach are fewer than a majority of the nodes
  the grudge names (it was cut off from a quorum: Jepsen's NATS analysis's
  "confirmed on the minority side"), "majority" when the confirm falls in a
  partition's window and the node was not so cut off, null when no partition
  was in effect (or the node or grudge is unknown).

Sizes are bounded whatever the history: at most MAX_PUBLISHERS publishers (the
lowest numbers, `publishers_count` says how many lost anything), MAX_RUNS runs
each (the first by seq, `runs_count` says how many), MAX_NODES (node, role)
rows (by node, role and side), a series of lost messages per confirming node over publish time in the
fates' buckets (checkers.fates.bucket_width: at most 300 per node), and the
examples. This module assembles the section from the aggregates the Spark job
collected (checkers.spark_loss) and reads the placements; it touches no Spark.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from checkers.phases import HarnessEvent
from history.faults import FaultWindow

MAX_PUBLISHERS: Final = 50
MAX_RUNS: Final = 10
MAX_NODES: Final = 50
UNKNOWN: Final = "unknown"
KINDS: Final = ("prefix", "middle", "suffix", "all")
# A confirming node's role in the queue's placement then (UNKNOWN without an observation).
LEADER: Final = "leader"
FOLLOWER: Final = "follower"
NON_MEMBER: Final = "non-member"


# A confirming node's side of a partition in effect at its confirm (None: no partition).
MINORITY: Final = "minority"
MAJORITY: Final = "majority"


@dataclass(frozen=True)
class Cut:
    """A partition's window (ns, both ends included) and the nodes it left on a minority side."""

    start: int
    end: int
    minority: tuple[str, ...]


def cuts(windows: Iterable[FaultWindow]) -> list[Cut]:
    """Takes the fault windows. Returns, for each partition whose value has a grudge (node ->
    the nodes it cannot reach), its window and the nodes that, with those they still reach,
    are fewer than a majority of the nodes the grudge names, in window order."""
    out = []
    for w in windows:
        grudge = w.value.get("grudge") if isinstance(w.value, dict) else None
        if w.kind != "partition" or not isinstance(grudge, dict):
            continue
        drops = {str(a): {str(b) for b in bs} for a, bs in grudge.items() if isinstance(bs, list)}
        nodes = set(drops).union(*drops.values()) if drops else set()
        need = len(nodes) // 2 + 1
        out.append(Cut(w.start_ns, w.end_ns, tuple(sorted(
            a for a, bs in drops.items() if len(nodes - bs) < need))))
    return out


@dataclass(frozen=True)
class Placement:
    """One placement observation: its rank among them (file order), time (ns), queue (None:
    any), leader and the other members or mirrors."""

    order: int
    time: int
    queue: str | None
    leader: str
    followers: tuple[str, ...]


def placements(harness: Iterable[HarnessEvent]) -> list[Placement]:
    """Takes the harness events in file order. Returns the placement observations that name a
    leader, in file order."""
    out: list[Placement] = []
    for e in harness:
        v = e.value
        if e.f != "placement" or not isinstance(v, dict) or not v.get("leader"):
            continue
        members = [*(v.get("members") or []), *(v.get("mirrors") or [])]
        leader = str(v["leader"])
        out.append(Placement(len(out), e.time, None if v.get("queue") is None else str(v["queue"]),
                             leader, tuple(sorted({str(m) for m in members} - {leader}))))
    return out


def kind_of(first_rank: int, last_rank: int, confirmed: int) -> str:
    """Takes a run's first and last rank (1-based) in its publisher's confirmed sequence and
    the sequence's length. Returns the run's kind."""
    head, tail = first_rank == 1, last_rank == confirmed
    return "all" if head and tail else "prefix" if head else "suffix" if tail else "middle"


def _node(x: Any) -> str:
    return UNKNOWN if x is None else str(x)


def publishers_part(runs: Sequence[Any], stats: Sequence[Any]) -> dict[str, Any]:
    """Takes the first MAX_RUNS runs of the first MAX_PUBLISHERS publishers (rows publisher,
    kind, first_seq, last_seq, count) and those publishers' totals (rows publisher, confirmed,
    lost, runs), both in any order. Returns the section's `publishers` list, by publisher."""
    by: dict[int, list[dict[str, Any]]] = {}
    for r in sorted(runs, key=lambda r: (r["publisher"], r["first_seq"])):
        by.setdefault(int(r["publisher"]), []).append(
            {"kind": r["kind"], "first_seq": int(r["first_seq"]),
             "last_seq": int(r["last_seq"]), "count": int(r["count"])})
    return {"publishers": [
        {"publisher": int(s["publisher"]), "confirmed": int(s["confirmed"]),
         "lost": int(s["lost"]), "runs_count": int(s["runs"]),
         "runs": by.get(int(s["publisher"]), [])}
        for s in sorted(stats, key=lambda s: s["publisher"])]}


def loss_section(parts: dict[str, Any], by_node: Sequence[Any], series: Sequence[Any],
                 width_ns: int, examples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Takes the publishers' part (`publishers_part` plus publishers_count, unsequenced_count,
    by_kind {kind: (runs, messages)} and placements_observed), the (node, role, side, count)
    rows,
    the (node, bucket, count) rows, the bucket width (ns) and the examples (dicts, in id
    order). Returns results.json's `queue.loss`."""
    nodes = sorted(by_node, key=lambda r: (-int(r["count"]), _node(r["node"]), r["role"],
                                           r["side"] or ""))
    kept = {_node(r["node"]) for r in nodes[:MAX_NODES]}
    curves: dict[str, list[list[Any]]] = {}
    for r in sorted(series, key=lambda r: (_node(r["node"]), r["bucket"])):
        if _node(r["node"]) in kept:
            curves.setdefault(_node(r["node"]), []).append(
                [round(int(r["bucket"]) * width_ns / 1e6, 3), int(r["count"])])
    by_kind = parts["by_kind"]
    return {
        "publishers_count": int(parts["publishers_count"]),
        "unsequenced_count": int(parts["unsequenced_count"]),
        "by_kind": {k: {"runs": int(by_kind[k][0]), "messages": int(by_kind[k][1])}
                    for k in KINDS if k in by_kind},
        "publishers": parts["publishers"],
        "placements_observed": bool(parts["placements_observed"]),
        "by_node": [{"node": _node(r["node"]), "role": r["role"], "side": r["side"],
                     "count": int(r["count"])} for r in nodes[:MAX_NODES]],
        "series": {"bucket_ms": round(width_ns / 1e6, 3), "nodes": curves},
        "examples": list(examples),
    }
