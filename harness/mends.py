"""The broker's loss or the harness's: what the harness's own restarts may have cost.

When the cluster does not come back whole after the faults, the harness mends
it (harness.recovery): it restarts a node's app or kills and restarts it
(`recover-node`), or restarts every node's app so the queue can be read
(`recover-queue`). Those restarts can discard messages themselves (a mirrored
queue's master stopping with no synchronised mirror), so a loss seen after one
is not plainly RabbitMQ's doing under the faults. `weigh` reads the check's
traces (checkers.traces: the harness ops, and the count of messages delivered
after the first mend, which the Spark check counts) and compares the queue
depth sampled just before the first mend with the messages delivered and
acked after it: at least their difference vanished across the harness's
restarts (a lower bound: a split brain's two sides hold partly different
messages), so at least that many of the lost went with them. It is
informational (valid true): the loss verdict stays the queue section's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkers.traces import MEND_FS, Traces, traces_from_file

NS = 1_000_000_000


def mend_section(history_path: Path, lost_count: int) -> dict[str, Any]:
    """Takes a history and the queue section's lost count. Returns `weigh`'s section, from the
    history read once in plain Python (checkers.traces_from_file: for a history the check did
    not gather the traces from)."""
    return weigh(traces_from_file(history_path, ()), lost_count)


def weigh(traces: Traces, lost_count: int) -> dict[str, Any]:
    """Takes the check's traces (checkers.traces: the harness ops, and how many messages were
    delivered after the first mend) and the queue section's lost count. Returns the "mends"
    section: the harness's restarts, the depth before the first, what was delivered after it,
    and a sentence saying how much of the loss may be theirs."""
    mends: list[dict[str, Any]] = []
    last_depth: dict[str, Any] | None = None
    before: dict[str, Any] | None = None
    for op in traces.harness:
        if op.f in MEND_FS and isinstance(op.value, dict):
            if not mends:
                before = last_depth
            mends.append({"t_s": round(op.time / NS, 3), "f": op.f,
                          "node": op.value.get("node") or op.node,
                          "action": op.value.get("action")})
        elif op.f == "depth" and isinstance(op.value, dict):
            last_depth = {"t_s": round(op.time / NS, 3), **op.value}
    section: dict[str, Any] = {"valid": True, "mends": mends}
    if not mends:
        section["statement"] = ("The harness restarted nothing to mend the cluster or the queue: "
                                "any loss is the broker's, under the faults.")
        return section
    first = mends[0]
    depth = _held(before)
    after = traces.delivered_after_first_mend or 0
    vanished = None if depth is None else max(0, depth - after)
    section.update(first_mend_s=first["t_s"], depth_before_first_mend=before,
                   delivered_after_first_mend=after, vanished_across_mends_at_least=vanished)
    what = f"{first['node'] or 'every node'} {first['action'] or first['f']} at {first['t_s']} s"
    if vanished is None:
        section["statement"] = (
            f"The harness restarted nodes to mend the cluster (first: {what}); "
            + ("no depth sample came before it" if before is None else
               f"the last depth sample before it ({before['t_s']} s) had no count from any "
               f"node: {_why_no_count(before)}")
            + ", so how much of the loss is theirs cannot be said.")
    else:
        share = min(lost_count, vanished)
        section["statement"] = (
            f"The harness restarted nodes to mend the cluster (first: {what}). Just before, the "
            f"queue held {depth} messages (the largest count one node reported; during a split "
            f"brain each side holds its own); {after} were delivered after it, so at least "
            f"{vanished} vanished across the harness's own restarts, as they would across an "
            f"operator's. So at least {share} of the {lost_count} lost messages went with those "
            f"restarts, not under the faults alone; each sampled lost message's story names the "
            f"restarts that came after its confirm.")
    return section


def _held(depth: dict[str, Any] | None) -> int | None:
    """Takes a depth sample. Returns the most messages (ready + unacked) any node reported."""
    if not depth:
        return None
    counts = [(d.get("ready") or 0) + (d.get("unacked") or 0)
              for d in (depth.get("nodes") or {}).values()
              if isinstance(d, dict) and isinstance(d.get("ready"), int)]
    return max(counts) if counts else None


def _why_no_count(depth: dict[str, Any]) -> str:
    """Takes a depth sample without counts. Returns what each node said instead, short."""
    said = []
    for node, d in sorted((depth.get("nodes") or {}).items()):
        what = ("no such queue" if isinstance(d, dict) and d.get("absent")
                else str(d.get("error"))[:120] if isinstance(d, dict) and d.get("error")
                else "no answer")
        said.append(f"{node} {what}")
    return "; ".join(said) or "no node answered"
