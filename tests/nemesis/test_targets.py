"""Tests for nemesis.targets: target specs and their selection."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nemesis.errors import FaultError, NemesisConfigError
from nemesis.partition import majority
from nemesis.targets import (
    SELECTORS,
    Locator,
    explicit_nodes,
    select_targets,
    validate_targets,
)

NODES = ["n1", "n2", "n3", "n4", "n5"]


def no_leader() -> str:
    raise AssertionError("the leader should not be asked for")


def pick(spec: str, seed: int = 0, nodes: list[str] = NODES) -> list[str]:
    return select_targets(spec, nodes, random.Random(seed), no_leader)


def test_named_selectors() -> None:
    assert len(pick("one")) == 1
    assert len(pick("minority")) == 2
    assert len(pick("majority")) == 3
    assert pick("all") == NODES
    assert select_targets("leader", NODES, random.Random(0), lambda: "n4") == ["n4"]


def test_explicit_names_keep_cluster_order() -> None:
    assert pick("n3,n1") == ["n1", "n3"]
    assert pick(" n2 ") == ["n2"]
    assert explicit_nodes("all") is None
    assert explicit_nodes("n1,n2") == ("n1", "n2")


def test_selection_outside_the_cluster_or_empty_fails() -> None:
    with pytest.raises(FaultError, match="n9"):
        pick("n9")
    with pytest.raises(FaultError, match="no node"):
        pick("minority", nodes=["n1"])
    with pytest.raises(FaultError, match="n7"):
        select_targets("leader", NODES, random.Random(0), lambda: "n7")


def test_validate_targets() -> None:
    for spec in SELECTORS:
        validate_targets(spec, NODES)
    validate_targets("n1,n2", NODES)
    validate_targets("n7", None)  # names are only checked against a known cluster
    with pytest.raises(NemesisConfigError, match=r"n7.*not in the cluster.*one, random"):
        validate_targets("n1,n7", NODES)
    with pytest.raises(NemesisConfigError, match="empty node name"):
        validate_targets("n1,", NODES)
    with pytest.raises(NemesisConfigError, match="targets must be one of"):
        validate_targets("", NODES)


@given(
    st.integers(3, 9),
    st.integers(0, 10**6),
    st.sampled_from(["one", "random", "minority", "majority", "all"]),
)
def test_selection_properties(n: int, seed: int, spec: str) -> None:
    nodes = [f"n{i}" for i in range(1, n + 1)]
    chosen = pick(spec, seed, nodes)
    assert chosen == pick(spec, seed, nodes)  # same seed, same nodes
    assert chosen and set(chosen) <= set(nodes) and len(set(chosen)) == len(chosen)
    expected = {"one": 1, "minority": majority(n) - 1, "majority": majority(n), "all": n}
    if spec in expected:
        assert len(chosen) == expected[spec]


def test_follower_picks_a_replica_that_is_not_the_leader() -> None:
    where = Locator(leader=lambda: "n1", followers=lambda: ["n4", "n2"])
    picks = {tuple(select_targets("follower", NODES, random.Random(s), where)) for s in range(20)}
    assert picks == {("n2",), ("n4",)}


def test_follower_of_a_queue_without_replicas_is_an_error() -> None:
    with pytest.raises(FaultError, match="no replica"):
        select_targets("follower", NODES, random.Random(0), Locator(lambda: "n1"))


def test_followers_picks_every_replica_but_the_leader() -> None:
    where = Locator(leader=lambda: "n1", followers=lambda: ["n4", "n2"])
    assert select_targets("followers", NODES, random.Random(0), where) == ["n2", "n4"]
