"""Property tests: histories of a correct queue with anomalies planted; the checkers must find
exactly what was planted, and the Spark engine must agree with the reference field by field."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkers import CheckOptions, check_history
from checkers.model import id_sort_key
from checkers.reference import check_file
from tests.checkers.gen import Generated, correct_histories, planted_histories

REF = CheckOptions(engine="reference")


def run_reference(g: Generated, options: CheckOptions = REF) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        return check_file(g.write(Path(d) / "history.jsonl"), options)


def ids(s: set[str]) -> list[str]:
    return sorted(s, key=id_sort_key)


def assert_finds_exactly_what_was_planted(g: Generated, r: dict[str, Any]) -> None:
    e, q, o = g.expected, r["queue"], r["ordering"]
    assert q["lost"] == ids(e.lost), g.planted
    assert q["unexpected"] == ids(e.unexpected), g.planted
    assert q["duplicated"] == ids(e.duplicated), g.planted
    assert q["redelivered_duplicated"] == ids(e.redelivered_duplicated), g.planted
    assert q["unflagged_duplicated"] == ids(e.unflagged_duplicated), g.planted
    assert q["recovered"] == ids(e.recovered), g.planted
    assert q["delivered_failed"] == ids(e.delivered_failed), g.planted
    for k in ("lost", "unexpected", "duplicated", "recovered", "delivered_failed"):
        assert q[f"{k}_count"] == len(q[k])
    assert q["attempt_count"] == len(g.outcomes)
    assert q["acknowledged_count"] == sum(o == "ok" for o in g.outcomes.values())
    assert q["fail_count"] == sum(o == "fail" for o in g.outcomes.values())
    invalid = e.lost or e.unexpected or e.unflagged_duplicated or e.delivered_failed
    assert q["valid"] is (not invalid)
    assert o["violation_count"] == e.violations, g.planted
    by_process = sorted(e.affected, key=lambda c: (int(c.split("/")[0]), c.split("/", 1)[1]))
    assert o["consumers_affected"] == by_process, g.planted
    assert o["valid"] is (e.violations == 0)
    assert r["perf"]["valid"] is True
    assert r["valid"] is (not invalid and e.violations == 0)


@settings(max_examples=300, deadline=None)
@given(planted_histories())
def test_reference_finds_exactly_what_was_planted(g: Generated) -> None:
    assert_finds_exactly_what_was_planted(g, run_reference(g))


@settings(max_examples=100, deadline=None)
@given(correct_histories(sac=True))
def test_single_active_consumer_is_strictly_ordered(g: Generated) -> None:
    r = run_reference(g, CheckOptions(engine="reference", strict_order=True))
    assert r["ordering"]["violation_count"] == 0
    assert r["valid"] is True


@settings(max_examples=100, deadline=None)
@given(planted_histories(), st.booleans(), st.booleans())
def test_options_only_change_what_they_say(g: Generated, strict: bool, flagged: bool) -> None:
    base = run_reference(g)
    r = run_reference(g, CheckOptions(engine="reference", strict_order=strict,
                                      flagged_duplicates_invalid=flagged))
    assert {k: v for k, v in r["queue"].items() if k not in ("valid", "anomalies")} == {
        k: v for k, v in base["queue"].items() if k not in ("valid", "anomalies")}
    assert r["perf"] == base["perf"]
    if flagged and base["queue"]["redelivered_duplicated_count"]:
        assert r["queue"]["valid"] is False
    if not strict:
        assert r["ordering"] == base["ordering"]
    else:
        assert r["ordering"]["violation_count"] >= base["ordering"]["violation_count"]


@pytest.mark.spark
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planted_histories(), st.booleans())
def test_spark_agrees_with_reference(spark: Any, g: Generated, strict: bool) -> None:
    opts: dict[str, Any] = {"strict_order": strict, "sample_size": 3, "example_size": 2}
    with tempfile.TemporaryDirectory() as d:
        path = g.write(Path(d) / "history.jsonl")
        ref = check_file(path, CheckOptions(engine="reference", **opts))
        got = check_history(path, options=CheckOptions(engine="spark", **opts))
    for section in ("queue", "ordering", "perf"):
        assert got[section] == ref[section], section
    assert got == ref
