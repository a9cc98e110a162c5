"""The oracle's loss told apart (results.json `queue.loss`), worked out again in plain Python.

Written from shared/DESIGN.md and the definitions in checkers/loss.py's docstring, importing
nothing of the project: per publisher (the id's "<publisher>-<seq>"), its acknowledged
messages ordered by seq; maximal stretches of lost ones in that order are runs: holding the
first message a prefix, the last a suffix, both "all", neither a middle. The confirming node is
the publish's completion `node` ("unknown" without one); its role is read from the last harness
"placement" event (with a leader) at or before the confirm whose queue matches the publish's
(either naming none matches): leader, follower (members or mirrors), non-member, or unknown
without one. Its side: "minority" when the confirm came while a partition (from its start's
completion to its stop's) left the node reaching, itself included, fewer than a majority of
the nodes its grudge names, "majority" when a partition was in effect and did not, else none.
Bounds: 50 publishers (lowest first), 10 runs each (first by seq), 50 (node, role, side)
rows (most first, then node, then role, then side), a series per kept node of lost messages per bucket of
publish time (the fates' width), the first `example_size` lost ids in id order.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

ID_RE = re.compile(r"^([0-9]+)-([0-9]+)$")
KINDS = ("prefix", "middle", "suffix", "all")


def runs(acked: dict[str, Any], lost: set[str]) -> dict[int, list[dict[str, Any]]]:
    """Takes the acknowledged ids (id -> anything) and the lost ids. Returns per publisher with
    a loss its runs in seq order: kind, first_seq, last_seq, count."""
    seqs: dict[int, list[tuple[int, bool]]] = {}
    for m in acked:
        parsed = ID_RE.match(m)
        if parsed:
            seqs.setdefault(int(parsed.group(1)), []).append((int(parsed.group(2)), m in lost))
    out: dict[int, list[dict[str, Any]]] = {}
    for pub, xs in seqs.items():
        xs.sort()
        i = 0
        while i < len(xs):
            if not xs[i][1]:
                i += 1
                continue
            j = i
            while j + 1 < len(xs) and xs[j + 1][1]:
                j += 1
            head, tail = i == 0, j == len(xs) - 1
            kind = "all" if head and tail else "prefix" if head else "suffix" if tail else "middle"
            out.setdefault(pub, []).append({"kind": kind, "first_seq": xs[i][0],
                                            "last_seq": xs[j][0], "count": j - i + 1})
            i = j + 1
    return out


def role(p: Any, harness: list[dict[str, Any]]) -> str:
    """Takes a lost message's publish (node, queue, completed) and the harness events. Returns
    its confirming node's role."""
    last = None
    for e in harness:
        v = e.get("value")
        if e["f"] != "placement" or not isinstance(v, dict) or not v.get("leader"):
            continue
        if e["time"] <= p.completed and (v.get("queue") is None or p.queue is None
                                         or v.get("queue") == p.queue):
            last = v
    if last is None or p.node is None:
        return "unknown"
    if p.node == last["leader"]:
        return "leader"
    return "follower" if p.node in (last.get("members") or []) + (last.get("mirrors") or []) \
        else "non-member"


def side(p: Any, partitions: list[tuple[int, int, dict[str, list[str]]]]) -> str | None:
    """Takes a lost message's publish (node, completed) and the partitions (start, end, grudge).
    Returns "minority" when, at the confirm, a partition left its node reaching (itself
    included) fewer than a majority of the nodes the grudge names, "majority" when a partition
    was in effect and it did not, None when none was (or the node is unknown)."""
    inside = [g for start, end, g in partitions if start <= p.completed <= end]
    if p.node is None or not inside:
        return None
    for g in inside:
        nodes = set(g) | {b for bs in g.values() for b in bs}
        if p.node in g and len(nodes - set(g[p.node])) < len(nodes) // 2 + 1:
            return "minority"
    return "majority"


def loss(pubs: dict[str, Any], lost: set[str], harness: list[dict[str, Any]], width_ns: int,
         example_size: int, id_key: Callable[[str], Any],
         partitions: list[tuple[int, int, dict[str, list[str]]]] | None = None) -> dict[str, Any]:
    """Takes the publishes (id -> Publish), the lost ids, the harness events, the fates' bucket
    width, the example size, the id order and the partitions (start, end, grudge). Returns
    `queue.loss`."""
    by_pub = runs({m: p for m, p in pubs.items() if p.outcome == "ok"}, lost)
    told = {(r["kind"]) for rs in by_pub.values() for r in rs}
    node_of = {m: pubs[m].node if pubs[m].node is not None else "unknown" for m in lost}
    role_of = {m: role(pubs[m], harness) for m in lost}
    side_of = {m: side(pubs[m], partitions or []) for m in lost}
    nodes = sorted(Counter((node_of[m], role_of[m], side_of[m]) for m in lost).items(),
                   key=lambda kv: (-kv[1], kv[0][0], kv[0][1], kv[0][2] or ""))[:50]
    kept = {n for (n, _, _), _ in nodes}
    series: dict[str, Counter[int]] = {}
    for m in lost:
        if node_of[m] in kept:
            series.setdefault(node_of[m], Counter())[pubs[m].invoked // width_ns] += 1
    kind_of = {}
    for pub, rs in by_pub.items():
        for r in rs:
            for s in range(r["first_seq"], r["last_seq"] + 1):
                kind_of[f"{pub}-{s}"] = r["kind"]
    return {
        "publishers_count": len(by_pub),
        "unsequenced_count": sum(1 for m in lost if not ID_RE.match(m)),
        "by_kind": {k: {"runs": sum(1 for rs in by_pub.values() for r in rs if r["kind"] == k),
                        "messages": sum(r["count"] for rs in by_pub.values() for r in rs
                                        if r["kind"] == k)} for k in KINDS if k in told},
        "publishers": [{"publisher": pub, "confirmed": sum(
            1 for m, p in pubs.items() if p.outcome == "ok" and m.startswith(f"{pub}-")
            and ID_RE.match(m)), "lost": sum(r["count"] for r in by_pub[pub]),
            "runs_count": len(by_pub[pub]), "runs": by_pub[pub][:10]}
            for pub in sorted(by_pub)[:50]],
        "placements_observed": any(e["f"] == "placement" and isinstance(e.get("value"), dict)
                                   and e["value"].get("leader") for e in harness),
        "by_node": [{"node": n, "role": r, "side": d, "count": c} for (n, r, d), c in nodes],
        "series": {"bucket_ms": round(width_ns / 1e6, 3), "nodes": {
            n: [[round(b * width_ns / 1e6, 3), c] for b, c in sorted(cs.items())]
            for n, cs in sorted(series.items())}},
        "examples": [example(m, pubs[m], kind_of.get(m), node_of[m], role_of[m], side_of[m])
                     for m in sorted(lost, key=id_key)[:example_size]],
    }


def example(m: str, p: Any, kind: str | None, node: str, role_: str,
            side_: str | None) -> dict[str, Any]:
    """Takes a lost id, its publish, its run's kind, its confirming node, its role and side.
    Returns its example."""
    parsed = ID_RE.match(m)
    return {"id": m, "publisher": int(parsed.group(1)) if parsed else None,
            "seq": int(parsed.group(2)) if parsed else None, "kind": kind, "node": node,
            "role": role_, "side": side_, "published_ms": round(p.invoked / 1e6, 3),
            "confirmed_ms": round(p.completed / 1e6, 3)}
