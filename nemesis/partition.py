"""Partition maths: grudges and the shapes built from them. Pure; no I/O.

A *grudge* (Jepsen's term) maps a node to the nodes it drops traffic from:
`{"n1": frozenset({"n2", "n3"}), ...}`; a node missing from a grudge drops
nothing. The commands in `nemesis.commands` enforce a grudge in both
directions (a node drops packets from and to the nodes it holds a grudge
against) because a one-way cut kills a TCP connection anyway. Every shape here
is therefore *symmetric*: if a drops b then b drops a, so what the grudge says
is what the network does.

Ported from Jepsen (jepsen-io/jepsen, `jepsen/src/jepsen/nemesis.clj`):
`bisect`, `split-one`, `complete-grudge`, `invert-grudge`, `bridge`,
`majorities-ring` (`-perfect` and `-stochastic`); the random variants mirror
the specs of `jepsen/src/jepsen/nemesis/combined.clj` (`grudge`: `:one`,
`:majority`, `:majorities-ring`). Randomness only ever comes from a passed
`random.Random`, and sets are sorted before they are shuffled, so one seed
gives one grudge whatever PYTHONHASHSEED is.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Mapping, Sequence

from nemesis.errors import ShapeError

log = logging.getLogger(__name__)

Grudge = dict[str, frozenset[str]]

# How many stochastic majorities rings to try before the arc ring fallback.
_RING_ATTEMPTS = 64


def majority(n: int) -> int:
    """Takes a cluster size. Returns the smallest majority of it (Jepsen's util/majority)."""
    return n // 2 + 1


def bisect(nodes: Sequence[str]) -> tuple[list[str], list[str]]:
    """Takes nodes. Returns them cut in two, the smaller half first (Jepsen's `bisect`)."""
    cut = len(nodes) // 2
    return list(nodes[:cut]), list(nodes[cut:])


def split_one(loner: str, nodes: Sequence[str]) -> tuple[list[str], list[str]]:
    """Takes a node and all nodes. Returns ([loner], the rest) (Jepsen's `split-one`).

    Raises ShapeError when the loner is not one of the nodes.
    """
    if loner not in nodes:
        raise ShapeError(f"cannot isolate {loner!r}: not one of {list(nodes)}")
    return [loner], [n for n in nodes if n != loner]


def complete_grudge(components: Iterable[Iterable[str]]) -> Grudge:
    """Takes components (groups of nodes). Returns the grudge that cuts every link between them.

    Each node drops every node outside its own component (Jepsen's
    `complete-grudge`); a node alone in the universe drops nothing. Raises
    ShapeError when a node is in two components.
    """
    comps = [frozenset(c) for c in components]
    universe: frozenset[str] = frozenset().union(*comps)
    if sum(len(c) for c in comps) != len(universe):
        raise ShapeError(f"components overlap: {[sorted(c) for c in comps]}")
    return {node: universe - comp for comp in comps for node in sorted(comp)}


def invert_grudge(nodes: Iterable[str], conns: Mapping[str, Iterable[str]]) -> Grudge:
    """Takes all nodes and who each may talk to. Returns who each must drop (Jepsen's `invert-grudge`)."""
    universe = frozenset(nodes)
    return {a: universe - frozenset(conns.get(a, ())) for a in sorted(universe)}


def isolate(node: str, nodes: Sequence[str]) -> Grudge:
    """Takes a node and all nodes. Returns the grudge cutting that node off from the rest.

    Used to isolate a chosen node, such as the queue leader.
    """
    return complete_grudge(split_one(node, nodes))


def shuffled(nodes: Iterable[str], rng: random.Random) -> list[str]:
    """Takes nodes and a Random. Returns the nodes, sorted then shuffled by that Random."""
    out = sorted(nodes)
    rng.shuffle(out)
    return out


def bridge_node(nodes: Sequence[str]) -> str:
    """Takes nodes. Returns the node `bridge` keeps connected to both halves.

    Raises ShapeError for fewer than three nodes (there would be nothing to bridge).
    """
    if len(nodes) < 3:
        raise ShapeError(f"a bridge needs at least 3 nodes, got {len(nodes)}")
    return bisect(nodes)[1][0]


def bridge(nodes: Sequence[str]) -> Grudge:
    """Takes nodes (at least three). Returns a bridge grudge, in their given order.

    Jepsen's `bridge`: cut the nodes into halves (smaller first), then let the
    first node of the larger half talk to everyone and nobody drop it. The
    bridge is absent from the grudge. Raises ShapeError for fewer than 3 nodes.
    """
    middle = bridge_node(nodes)
    return {
        node: dropped - {middle}
        for node, dropped in complete_grudge(bisect(nodes)).items()
        if node != middle
    }


def majorities_ring_perfect(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """Takes 4 or 5 nodes and a Random. Returns an exact majorities ring.

    Jepsen's `majorities-ring-perfect`: shuffle the nodes into a ring, slide a
    majority-sized window round it, and let the window's middle node see just
    that window. For 4 and 5 nodes each node then sees itself and its
    neighbours and the grudge is symmetric. (Jepsen also uses it for 3 nodes,
    where it is one-way only; enforced in both directions it would isolate
    every node, so `majorities_ring` does not.) Raises ShapeError for other sizes.
    """
    n = len(nodes)
    if n not in (4, 5):
        raise ShapeError(f"the perfect majorities ring is for 4 or 5 nodes, got {n}")
    ring = shuffled(nodes, rng)
    m = majority(n)
    universe = frozenset(ring)
    grudge: Grudge = {}
    for i in range(n):
        window = [ring[(i + k) % n] for k in range(m)]
        grudge[window[m // 2]] = universe - frozenset(window)
    return dict(sorted(grudge.items()))


def majorities_ring_stochastic(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """Takes nodes and a Random. Returns a grudge where every node sees a majority.

    Jepsen's `majorities-ring-stochastic`: start with every node connected only
    to itself, and repeatedly link a least-connected node to another
    least-connected node it is not linked to yet, until every node sees a
    majority. Links are two-way, so the grudge is symmetric. It does not
    promise that no two nodes see the same majority; `majorities_ring` checks.
    """
    m = majority(len(nodes))
    conns: dict[str, set[str]] = {x: {x} for x in nodes}
    by_degree: dict[int, set[str]] = {1: set(nodes)}
    while True:
        dns = [
            (degree, node)
            for degree in sorted(by_degree)
            for node in shuffled(by_degree[degree], rng)
        ]
        a_degree, a = dns[0]
        if a_degree >= m:
            return invert_grudge(nodes, conns)
        b_degree, b = next((d, x) for d, x in dns if x not in conns[a])
        conns[a].add(b)
        conns[b].add(a)
        by_degree[a_degree].discard(a)
        by_degree[b_degree].discard(b)
        by_degree.setdefault(a_degree + 1, set()).add(a)
        by_degree.setdefault(b_degree + 1, set()).add(b)
        by_degree = {d: s for d, s in by_degree.items() if s}


def majorities_ring_arcs(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """Takes at least 4 nodes and a Random. Returns a ring where each node sees an arc.

    Not from Jepsen: shuffle the nodes into a ring and let each see the nodes
    within k places of it, the least k making 2k+1 a majority. Every arc is a
    different majority and the grudge is symmetric. The fallback of
    `majorities_ring`. Raises ShapeError when the arcs would cover every node.
    """
    n = len(nodes)
    k = majority(n) // 2
    if 2 * k + 1 >= n:
        raise ShapeError(f"no arc majorities ring for {n} nodes")
    ring = shuffled(nodes, rng)
    universe = frozenset(ring)
    return {
        ring[i]: universe - frozenset(ring[(i + d) % n] for d in range(-k, k + 1)) for i in range(n)
    }


def majorities_ring(nodes: Sequence[str], rng: random.Random) -> Grudge:
    """Takes at least three nodes and a Random. Returns a majorities ring grudge.

    Jepsen's `majorities-ring`: every node sees a majority (itself included),
    but no two nodes see the same majority. Symmetric. Uses the perfect ring
    for 4 and 5 nodes and the stochastic one otherwise (for 3 nodes that is a
    path a-b-c, the only symmetric answer), retrying until the majorities are
    distinct and falling back to `majorities_ring_arcs`. Raises ShapeError for
    fewer than three nodes.
    """
    n = len(nodes)
    if n < 3:
        raise ShapeError(f"a majorities ring needs at least 3 nodes, got {n}")
    if n in (4, 5):
        return majorities_ring_perfect(nodes, rng)
    for _ in range(_RING_ATTEMPTS):
        grudge = majorities_ring_stochastic(nodes, rng)
        if _distinct_views(grudge, nodes):
            return grudge
    log.debug("no distinct stochastic majorities ring for %d nodes; using arcs", n)
    return majorities_ring_arcs(nodes, rng)


def _distinct_views(grudge: Grudge, nodes: Sequence[str]) -> bool:
    views = visible(grudge, nodes)
    return len(set(views.values())) == len(views)


def visible(
    grudge: Mapping[str, frozenset[str]], nodes: Iterable[str]
) -> dict[str, frozenset[str]]:
    """Takes a grudge and all nodes. Returns the nodes each node still hears, itself included."""
    universe = frozenset(nodes)
    return {a: universe - grudge.get(a, frozenset()) for a in sorted(universe)}


def grudge_to_json(grudge: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """Takes a grudge. Returns it as JSON-able data: node -> sorted list, nodes sorted."""
    return {a: sorted(bs) for a, bs in sorted(grudge.items())}
