"""Tests for nemesis.partition: Jepsen's examples, then properties for 3..9 nodes."""

from __future__ import annotations

import random
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemesis.errors import ShapeError
from nemesis.partition import (
    bisect,
    bridge,
    bridge_node,
    complete_grudge,
    grudge_to_json,
    invert_grudge,
    isolate,
    majorities_ring,
    majorities_ring_arcs,
    majorities_ring_perfect,
    majorities_ring_stochastic,
    majority,
    split_one,
    visible,
)


def symmetric(grudge: Mapping[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    """Takes a grudge. Returns it closed under symmetry: what enforcing it both ways does."""
    out: dict[str, set[str]] = {a: set(bs) for a, bs in grudge.items()}
    for a, bs in grudge.items():
        for b in bs:
            out.setdefault(b, set()).add(a)
    return {a: frozenset(bs) for a, bs in sorted(out.items())}


def is_symmetric(grudge: Mapping[str, frozenset[str]]) -> bool:
    """Takes a grudge. Returns True when a drops b exactly when b drops a."""
    nonempty = {a: bs for a, bs in grudge.items() if bs}
    return nonempty == {a: bs for a, bs in symmetric(grudge).items() if bs}


def fs(*xs: str) -> frozenset[str]:
    return frozenset(xs)


# -- Jepsen's own examples (jepsen/test/jepsen/nemesis_test.clj) -----------------------


def test_bisect_like_jepsen() -> None:
    assert bisect([]) == ([], [])
    assert bisect(["1"]) == ([], ["1"])
    assert bisect(["1", "2", "3", "4"]) == (["1", "2"], ["3", "4"])
    assert bisect(["1", "2", "3", "4", "5"]) == (["1", "2"], ["3", "4", "5"])


def test_complete_grudge_like_jepsen() -> None:
    assert complete_grudge(bisect(["1", "2", "3", "4", "5"])) == {
        "1": fs("3", "4", "5"),
        "2": fs("3", "4", "5"),
        "3": fs("1", "2"),
        "4": fs("1", "2"),
        "5": fs("1", "2"),
    }


def test_bridge_like_jepsen() -> None:
    assert bridge(["1", "2", "3", "4", "5"]) == {
        "1": fs("4", "5"),
        "2": fs("4", "5"),
        "4": fs("1", "2"),
        "5": fs("1", "2"),
    }
    assert bridge_node(["1", "2", "3", "4", "5"]) == "3"


def test_majorities_ring_like_jepsen() -> None:
    nodes = [str(i) for i in range(5)]
    grudge = majorities_ring(nodes, random.Random(0))
    assert set(grudge) == set(nodes)
    assert all(len(v) == 2 for v in grudge.values())
    assert all(node not in dropped for node, dropped in grudge.items())
    assert len(set(grudge.values())) == len(nodes)


# -- examples ---------------------------------------------------------------------------


def test_majority() -> None:
    assert [majority(n) for n in range(1, 8)] == [1, 2, 2, 3, 3, 4, 4]


def test_split_one_and_isolate() -> None:
    assert split_one("n2", ["n1", "n2", "n3"]) == (["n2"], ["n1", "n3"])
    assert isolate("n2", ["n1", "n2", "n3"]) == {
        "n1": fs("n2"),
        "n2": fs("n1", "n3"),
        "n3": fs("n2"),
    }
    with pytest.raises(ShapeError, match="n9"):
        isolate("n9", ["n1", "n2"])


def test_halves_three_nodes_cuts_off_the_first() -> None:
    assert complete_grudge(bisect(["n1", "n2", "n3"])) == {"n1": fs("n2", "n3"), "n2": fs("n1"), "n3": fs("n1")}


def test_complete_grudge_single_component_drops_nothing() -> None:
    assert complete_grudge([["a", "b"]]) == {"a": fs(), "b": fs()}


def test_complete_grudge_rejects_overlap() -> None:
    with pytest.raises(ShapeError, match="overlap"):
        complete_grudge([["a", "b"], ["b", "c"]])


def test_invert_grudge() -> None:
    assert invert_grudge(["a", "b", "c"], {"a": {"a", "b"}, "b": {"b"}}) == {
        "a": fs("c"),
        "b": fs("a", "c"),
        "c": fs("a", "b", "c"),
    }


def test_three_node_ring_is_a_path() -> None:
    grudge = majorities_ring(["a", "b", "c"], random.Random(1))
    # One middle node sees both others; the two ends drop each other.
    assert sorted(len(v) for v in grudge.values()) == [0, 1, 1]
    assert is_symmetric(grudge)


def test_too_small_shapes_raise() -> None:
    with pytest.raises(ShapeError, match="at least 3"):
        majorities_ring(["a", "b"], random.Random(0))
    with pytest.raises(ShapeError, match="at least 3"):
        bridge(["a", "b"])
    with pytest.raises(ShapeError, match="4 or 5"):
        majorities_ring_perfect(["a", "b", "c"], random.Random(0))
    with pytest.raises(ShapeError, match="no arc"):
        majorities_ring_arcs(["a", "b", "c"], random.Random(0))


def test_symmetric_closure_and_json() -> None:
    one_way = {"a": fs("b")}
    assert not is_symmetric(one_way)
    assert symmetric(one_way) == {"a": fs("b"), "b": fs("a")}
    assert grudge_to_json({"b": fs("c", "a"), "a": fs()}) == {"a": [], "b": ["a", "c"]}


def test_visible_includes_self() -> None:
    assert visible({"a": fs("b")}, ["a", "b", "c"]) == {
        "a": fs("a", "c"),
        "b": fs("a", "b", "c"),
        "c": fs("a", "b", "c"),
    }


def test_same_seed_same_grudges() -> None:
    nodes = [f"n{i}" for i in range(1, 8)]
    for shape in (majorities_ring,):
        assert shape(nodes, random.Random(7)) == shape(nodes, random.Random(7))


# -- properties, 3..9 nodes -------------------------------------------------------------

node_lists = st.integers(min_value=3, max_value=9).map(lambda n: [f"n{i}" for i in range(1, n + 1)])
rngs = st.integers(min_value=0, max_value=2**32).map(random.Random)


def components_of(nodes: list[str], labels: list[int]) -> list[list[str]]:
    groups: dict[int, list[str]] = {}
    for node, label in zip(nodes, labels, strict=False):
        groups.setdefault(label, []).append(node)
    return list(groups.values())


@given(
    node_lists.flatmap(
        lambda ns: st.tuples(
            st.just(ns), st.lists(st.integers(0, 3), min_size=len(ns), max_size=len(ns))
        )
    )
)
def test_complete_grudge_properties(case: tuple[list[str], list[int]]) -> None:
    nodes, labels = case
    comps = components_of(nodes, labels)
    grudge = complete_grudge(comps)
    assert set(grudge) == set(nodes)
    assert is_symmetric(grudge)
    for comp in comps:
        for node in comp:
            assert node not in grudge[node]
            # A node hears exactly its own component.
            assert visible(grudge, nodes)[node] == frozenset(comp)


@given(node_lists, rngs)
def test_complete_shapes_are_symmetric_and_never_self(nodes: list[str], rng: random.Random) -> None:
    for grudge in (
        complete_grudge(bisect(nodes)),
        isolate(nodes[-1], nodes),
    ):
        assert set(grudge) == set(nodes)
        assert is_symmetric(grudge)
        assert all(node not in dropped for node, dropped in grudge.items())
        # Complete: the cut splits the nodes into exactly two cliques.
        assert len(set(visible(grudge, nodes).values())) == 2


@settings(max_examples=300)
@given(node_lists, rngs)
def test_majorities_ring_properties(nodes: list[str], rng: random.Random) -> None:
    grudge = majorities_ring(nodes, rng)
    views = visible(grudge, nodes)
    assert set(grudge) == set(nodes)
    assert all(node not in dropped for node, dropped in grudge.items())
    # Every node sees a majority, itself included...
    assert all(node in view and len(view) >= majority(len(nodes)) for node, view in views.items())
    # ...no two nodes see the same one...
    assert len(set(views.values())) == len(nodes)
    # ...it is a real partition, and what it says is what two-way drops do.
    assert any(grudge.values())
    assert is_symmetric(grudge)


@given(node_lists, rngs)
def test_stochastic_ring_every_node_sees_a_majority(nodes: list[str], rng: random.Random) -> None:
    grudge = majorities_ring_stochastic(nodes, rng)
    assert is_symmetric(grudge)
    assert all(len(v) >= majority(len(nodes)) for v in visible(grudge, nodes).values())


@given(st.integers(min_value=4, max_value=9).map(lambda n: [f"n{i}" for i in range(n)]), rngs)
def test_arc_ring_properties(nodes: list[str], rng: random.Random) -> None:
    grudge = majorities_ring_arcs(nodes, rng)
    views = visible(grudge, nodes)
    assert is_symmetric(grudge)
    assert all(len(v) >= majority(len(nodes)) for v in views.values())
    assert len(set(views.values())) == len(nodes)


@given(node_lists, rngs)
def test_bridge_properties(nodes: list[str], rng: random.Random) -> None:
    order = list(nodes)
    rng.shuffle(order)
    grudge = bridge(order)
    middle = bridge_node(order)
    small, large = bisect(order)
    # The bridge drops nobody and nobody drops it.
    assert middle not in grudge
    assert all(middle not in dropped for dropped in grudge.values())
    assert visible(grudge, nodes)[middle] == frozenset(nodes)
    assert is_symmetric(grudge)
    assert all(node not in dropped for node, dropped in grudge.items())
    # The two sides, less the bridge, are cut apart completely and are whole inside.
    rest = [n for n in large if n != middle]
    for a in small:
        assert grudge[a] == frozenset(rest)
    for b in rest:
        assert grudge[b] == frozenset(small)
