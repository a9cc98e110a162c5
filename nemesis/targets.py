"""Which nodes a fault hits: target specs, as in Jepsen's combined.clj `db-nodes`.

A spec is a string: one of the names in `SELECTORS`, or explicit node names
separated by commas ("n1" or "n1,n3"). Selection is pure given a
`random.Random` and, for "leader", a function that asks where the queue
leader is (called only for that spec).

- `one`: one random node (Jepsen `:one`)
- `random`: a random non-empty subset (Jepsen's default, `nil`)
- `minority`: a random minority, majority(n) - 1 nodes (Jepsen `:minority`)
- `majority`: a random majority (Jepsen `:majority`)
- `all`: every node (Jepsen `:all`)
- `leader`: the node hosting the queue's leader (like Jepsen `:primaries`)
- `follower`: one random node hosting a replica of the queue that is not the leader
  (a quorum member or a classic mirror), asked of the broker at fault time
- `followers`: every node hosting a replica of the queue that is not the leader
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nemesis.errors import FaultError, NemesisConfigError
from nemesis.partition import majority, shuffled

log = logging.getLogger(__name__)

LeaderFn = Callable[[], str]


@dataclass(frozen=True)
class Locator:
    """Where the queue lives, asked only by the selectors that need it: its leader's node and
    the nodes of its other replicas."""

    leader: LeaderFn
    followers: Callable[[], list[str]] = lambda: []


Selector = Callable[[Sequence[str], random.Random, Locator], list[str]]


def _one(nodes: Sequence[str], rng: random.Random, where: Locator) -> list[str]:
    return [rng.choice(list(nodes))]


def _random(nodes: Sequence[str], rng: random.Random, where: Locator) -> list[str]:
    return shuffled(nodes, rng)[: rng.randint(1, len(nodes))]


def _minority(nodes: Sequence[str], rng: random.Random, where: Locator) -> list[str]:
    return shuffled(nodes, rng)[: majority(len(nodes)) - 1]


def _majority(nodes: Sequence[str], rng: random.Random, where: Locator) -> list[str]:
    return shuffled(nodes, rng)[: majority(len(nodes))]


def _all(nodes: Sequence[str], rng: random.Random, where: Locator) -> list[str]:
    return list(nodes)


def _leader(nodes: Sequence[str], rng: random.Random, where: Locator) -> list[str]:
    return [where.leader()]


def _follower(nodes: Sequence[str], rng: random.Random, where: Locator) -> list[str]:
    followers = sorted(where.followers())
    if not followers:
        raise FaultError("the queue has no replica besides its leader to target")
    return [rng.choice(followers)]


def _followers(nodes: Sequence[str], rng: random.Random, where: Locator) -> list[str]:
    followers = sorted(where.followers())
    if not followers:
        raise FaultError("the queue has no replica besides its leader to target")
    return followers


SELECTORS: dict[str, Selector] = {
    "one": _one,
    "random": _random,
    "minority": _minority,
    "majority": _majority,
    "all": _all,
    "leader": _leader,
    "follower": _follower,
    "followers": _followers,
}


def explicit_nodes(spec: str) -> tuple[str, ...] | None:
    """Takes a target spec. Returns the node names it lists, or None for a named selector."""
    if spec in SELECTORS:
        return None
    return tuple(part.strip() for part in spec.split(","))


# The most nodes each named selector may pick, of n: a function of n.
MOST: dict[str, Callable[[int], int]] = {
    "one": lambda n: 1, "leader": lambda n: 1, "follower": lambda n: 1,
    "minority": lambda n: majority(n) - 1, "majority": majority,
    "random": lambda n: n, "all": lambda n: n, "followers": lambda n: n - 1,
}


def most_selected(spec: str, n: int) -> int:
    """Takes a target spec and the cluster's size. Returns the most nodes it may select."""
    names = explicit_nodes(spec)
    return MOST[spec](n) if names is None else len(set(names))


def leaves_a_majority(spec: str, n: int) -> bool:
    """Takes a target spec and the cluster's size. Returns whether every selection it may make
    leaves a majority of the n nodes untouched (Raft's quorum: what a minority's disks lose the
    others still hold)."""
    return n - most_selected(spec, n) >= majority(n)


def validate_targets(spec: str, nodes: Sequence[str] | None = None) -> None:
    """Takes a target spec and, when known, the cluster's node names. Returns None.

    Raises NemesisConfigError for an empty spec, an empty name in a list, or a
    listed node the cluster does not have.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise NemesisConfigError(
            f"targets must be one of {', '.join(SELECTORS)} or node names like n1,n2; got {spec!r}"
        )
    names = explicit_nodes(spec)
    if names is None:
        return
    if any(not n for n in names):
        raise NemesisConfigError(f"targets {spec!r} has an empty node name")
    if nodes is not None:
        unknown = [n for n in names if n not in nodes]
        if unknown:
            raise NemesisConfigError(
                f"targets {spec!r} names {', '.join(unknown)}, not in the cluster "
                f"({', '.join(nodes)}); use a node name or one of {', '.join(SELECTORS)}"
            )


def select_targets(
    spec: str, nodes: Sequence[str], rng: random.Random, where: Locator | LeaderFn
) -> list[str]:
    """Takes a target spec, the node names, a Random and a Locator (or just a leader lookup).
    Returns target names.

    The result keeps the cluster's node order. Raises FaultError when the spec
    selects nobody (a minority of one node) or something not in the cluster.
    """
    names = explicit_nodes(spec)
    locator = where if isinstance(where, Locator) else Locator(where)
    chosen = set(SELECTORS[spec](nodes, rng, locator) if names is None else names)
    unknown = sorted(chosen - set(nodes))
    if unknown:
        raise FaultError(f"targets {spec!r} chose {unknown}, not in the cluster {list(nodes)}")
    out = [n for n in nodes if n in chosen]
    if not out:
        raise FaultError(f"targets {spec!r} chose no node of {list(nodes)}")
    return out
