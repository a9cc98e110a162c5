"""What each fault had at risk (checkers.spark_risk): the few groups Spark counts, added up per
window, against the definitions read plainly, row by row and window by window."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkers import spark_risk
from checkers.model import OUTCOME_CODES
from history.faults import FaultWindow

OK, FAIL, INFO = OUTCOME_CODES["ok"], OUTCOME_CODES["fail"], OUTCOME_CODES["info"]
FIELDS = "comp_code int, comp_time long, consumed_time long, comp_blocked boolean"

pytestmark = pytest.mark.spark


def plainly(rows: list[tuple[Any, ...]], windows: list[FaultWindow]) -> list[dict[str, int]]:
    """The definitions: at a window's start, confirmed by then and not yet consumed; during it
    (edges included), completed `info`, apart from or because of a blocked connection."""
    out = []
    for w in windows:
        risk = unknown = blocked = 0
        for code, done, consumed, held in rows:
            if code == OK and done <= w.start_ns and (consumed is None or consumed > w.start_ns):
                risk += 1
            if code == INFO and w.start_ns <= done <= w.end_ns:
                blocked, unknown = (blocked + 1, unknown) if held else (blocked, unknown + 1)
        out.append({"at_risk": risk, "unknown_publishes": unknown, "blocked_publishes": blocked})
    return out


times = st.integers(0, 12)
message = st.tuples(st.sampled_from([OK, FAIL, INFO, None]), times,
                    st.one_of(st.none(), times), st.one_of(st.none(), st.booleans()))
window = st.tuples(times, st.integers(0, 6)).map(
    lambda t: FaultWindow("start-partition", t[0], t[0] + t[1], None, None, None, None))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(message, max_size=30), st.lists(window, max_size=5))
def test_the_groups_give_each_window_what_the_definitions_do(
        spark: Any, rows: list[tuple[Any, ...]], windows: list[FaultWindow]) -> None:
    # Windows that share, nest and touch edges; messages confirmed, consumed or completed on
    # an edge, never consumed, or not completed at all (a null time).
    rows = [(c, None if c is None else t, d, b) for c, t, d, b in rows]
    msgs = spark.createDataFrame(rows, FIELDS)
    got = spark_risk.risk_facts(spark_risk.risk_groups(msgs, windows), windows)
    assert got == plainly([r for r in rows if r[1] is not None], windows)
