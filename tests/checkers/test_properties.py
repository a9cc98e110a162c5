"""Property tests: the Spark checker against an oracle written apart from it (tests.checkers.oracle),
on generated histories.

The oracle is first held to the truth the generator plants (a correct queue with anomalies
planted: it must find exactly those), then the Spark checker must say what the oracle says,
field by field (every count, id list, drain and ack flag, ordering count and example, perf
window and quantile), on planted histories and on random ones that follow no queue model,
under every combination of the check's options. The generated histories come with and
without ack ops and publisher slots (tests.checkers.gen).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkers import CheckOptions, check_history
from tests.checkers import oracle
from tests.checkers.gen import (
    Generated,
    correct_histories,
    planted_histories,
    random_histories,
    with_acks_after_every_delivery,
)


def judge(g: Generated, **opts: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        return oracle.judge(g.write(Path(d) / "history.jsonl"), **opts)


def ids(s: set[str]) -> list[str]:
    return sorted(s, key=oracle.id_key)


def assert_finds_exactly_what_was_planted(g: Generated, r: dict[str, Any]) -> None:
    e, q, o = g.expected, r["queue"], r["ordering"]
    assert q["lost"] == ids(e.lost), g.planted
    assert q["unexpected"] == ids(e.unexpected), g.planted
    assert q["duplicated"] == ids(e.duplicated), g.planted
    assert q["redelivered_duplicated"] == ids(e.redelivered_duplicated), g.planted
    assert q["unflagged_duplicated"] == ids(e.unflagged_duplicated), g.planted
    assert q["recovered"] == ids(e.recovered), g.planted
    assert q["delivered_failed"] == ids(e.delivered_failed), g.planted
    assert q["lost_unacked"] == ids(e.lost_unacked), g.planted
    assert q["unflagged_after_ack"] == ids(e.unflagged_after_ack), g.planted
    assert q["dead_lettered_delivered"] == ids(e.dead_lettered_delivered), g.planted
    dropped = e.dropped_by_design
    assert q["dropped_by_design_count"] == len(dropped), g.planted
    assert q["dropped_by_design_reasons"] == {
        r: n for r, n in sorted(Counter(dropped.values()).items(), key=lambda kv: (-kv[1], kv[0]))}
    assert {r: set(v) for r, v in q["dropped_by_design_examples"].items()} == {
        r: {m for m, why in dropped.items() if why == r} for r in set(dropped.values())}
    assert q["dead_lettered_count"] == len(dropped) + len(e.dead_lettered_delivered)
    for k in ("lost", "unexpected", "duplicated", "recovered", "delivered_failed", "lost_unacked",
              "unflagged_after_ack"):
        assert q[f"{k}_count"] == len(q[k])
    assert q["attempt_count"] == len(g.outcomes)
    assert q["acknowledged_count"] == sum(o == "ok" for o in g.outcomes.values())
    assert q["fail_count"] == sum(o == "fail" for o in g.outcomes.values())
    assert q["acks_recorded"] is any(kw["f"] == "ack" for _, kw in g.ops)
    invalid = e.lost or e.unexpected or e.unflagged_duplicated or e.unflagged_after_ack
    assert q["valid"] is (not invalid)
    assert o["violation_count"] == e.violations, g.planted
    by_process = sorted(e.affected, key=lambda c: (int(c.split("/")[0]), c.split("/", 1)[1]))
    assert o["consumers_affected"] == by_process, g.planted
    assert o["valid"] is (e.violations == 0)
    assert r["perf"]["valid"] is True
    assert r["valid"] is (not invalid and e.violations == 0)


# -- the oracle against the generator's truth (no Spark) --------------------------------------


@settings(max_examples=300, deadline=None)
@given(planted_histories())
def test_oracle_finds_exactly_what_was_planted(g: Generated) -> None:
    assert_finds_exactly_what_was_planted(g, judge(g))


@settings(max_examples=100, deadline=None)
@given(correct_histories(sac=True))
def test_single_active_consumer_is_strictly_ordered(g: Generated) -> None:
    r = judge(g, strict_order=True)
    assert r["ordering"]["violation_count"] == 0
    assert r["valid"] is True


@settings(max_examples=100, deadline=None)
@given(planted_histories(), st.booleans(), st.booleans())
def test_options_only_change_what_they_say(g: Generated, strict: bool, flagged: bool) -> None:
    base = judge(g)
    r = judge(g, strict_order=strict, flagged_duplicates_invalid=flagged)
    assert {k: v for k, v in r["queue"].items() if k not in ("valid", "anomalies")} == {
        k: v for k, v in base["queue"].items() if k not in ("valid", "anomalies")}
    assert r["perf"] == base["perf"]
    if flagged and base["queue"]["redelivered_duplicated_count"]:
        assert r["queue"]["valid"] is False
    if not strict:
        assert r["ordering"] == base["ordering"]
    elif base["ordering"]["violation_count"]:
        # Strict streams merge the consumers' streams: an out-of-order pair in one consumer's
        # stream leaves a descent somewhere in the merged one.
        o = r["ordering"]
        assert o["violation_count"] + o["unconfirmed_reorder_count"] > 0


@settings(max_examples=100, deadline=None)
@given(correct_histories(acks=False), st.booleans())
def test_acks_right_after_every_delivery_change_nothing(g: Generated, strict: bool) -> None:
    # A history without acks is read as if every delivery was acked.
    base, acked = judge(g, strict_order=strict), judge(with_acks_after_every_delivery(g),
                                                       strict_order=strict)
    if any(kw["f"] in ("consume", "drain") for _, kw in g.ops):
        assert acked["queue"].pop("acks_recorded") is True
        assert base["queue"].pop("acks_recorded") is False
    assert without_indexes(acked) == without_indexes(base)  # the acks shift the indexes


def without_indexes(x: Any) -> Any:
    """Returns x with every "index" key of its dicts removed, recursively."""
    if isinstance(x, dict):
        return {k: without_indexes(v) for k, v in x.items() if k != "index"}
    if isinstance(x, list):
        return [without_indexes(v) for v in x]
    return x


# -- the Spark checker against the oracle ------------------------------------------------------


@st.composite
def check_options(draw: Any) -> dict[str, Any]:
    """Returns the options of a check: every judgement switch, and sample sizes that cut the
    lists short or not."""
    return {
        "strict_order": draw(st.booleans()),
        "flagged_duplicates_invalid": draw(st.booleans()),
        "unflagged_duplicates_invalid": draw(st.booleans()),
        "require_drain": draw(st.booleans()),
        "sample_size": draw(st.sampled_from([2, 1000])),
        "example_size": draw(st.sampled_from([1, 1000])),
    }


def assert_spark_agrees(g: Generated, opts: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = g.write(Path(d) / "history.jsonl")
        want = oracle.judge(path, **opts)
        got = check_history(path, options=CheckOptions(**opts))
    assert oracle.mismatches(got, want) == [], (g.planted, opts)


@pytest.mark.spark
@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(planted_histories(),
                 correct_histories(acks=False).map(with_acks_after_every_delivery)),
       check_options())
def test_spark_agrees_with_the_oracle_on_planted_histories(
        spark: Any, g: Generated, opts: dict[str, Any]) -> None:
    assert_spark_agrees(g, opts)


@pytest.mark.spark
@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_histories(), check_options())
def test_spark_agrees_with_the_oracle_on_random_histories(
        spark: Any, g: Generated, opts: dict[str, Any]) -> None:
    assert_spark_agrees(g, opts)


def message_rows(df: Any) -> list[dict[str, Any]]:
    """Returns a message table's rows as dicts, by id."""
    return sorted((r.asDict() for r in df.collect()), key=lambda r: r["id"])


@pytest.mark.spark
@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(planted_histories(), random_histories()))
def test_acks_pair_alike_with_one_aggregate_and_with_the_window(spark: Any, g: Generated) -> None:
    # The message table pairs most ids' acks in one aggregate and the others with the window
    # (checkers.spark_queue.message_table): it must be the window's table for every id.
    from checkers import spark_io, spark_queue

    with tempfile.TemporaryDirectory() as d:
        path = g.write(Path(d) / "history.jsonl")
        h = spark_io.load(spark, path, Path(d), memory_limit=2**40)
        try:
            if not spark_io.summarize(h).acks:
                return
            built = spark_queue.message_table(h, True, lambda df, _name: df)
            assert message_rows(built) == message_rows(spark_queue.windowed(h.df)), g.planted
        finally:
            h.close()
