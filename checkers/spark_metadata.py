"""The metadata probe's ops in Spark: per node and fault window, and per node after the heal.

The probe's ops are few (a handful a second per node) and keep their f, node
and error in the prepared rows (checkers.spark_io). One window function pairs
each completion with its invocation (the previous op of its process), then two
small aggregates are collected: the completions per window, node, f, type and
grouped error text (checkers.metadata's rules), and per node the facts the
judgement after the last heal needs. checkers.metadata judges them. A third
counts the completions per node, bucket of time and outcome (the section's
`timeline`, for the report's plot).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from checkers.liveness import LivenessBound, timeline
from checkers.metadata import (
    ERLANG_PID,
    NAME_TAIL,
    OUTSIDE,
    PID,
    PROBE_OUTCOMES,
    PROBE_QUEUE,
    REPLY_CODE,
    ProbeCount,
    ProbeNodeFacts,
    metadata_probe_observed,
    metadata_section,
    timeline_bucket_ns,
)
from checkers.model import OUTCOME_CODES, PROBE_FS
from checkers.phases import HarnessEvent
from checkers.spark_io import CODE_NAMES, History, collect_small, loc
from history.faults import FaultWindow

INVOKE, OK = OUTCOME_CODES["invoke"], OUTCOME_CODES["ok"]
# More count rows than this: not a probe's history (a few per node, window, f and error).
MAX_ROWS: Final = 20_000
DEFAULT_PREFIX: Final = "harness-probe-"


def probe_ops(h: History) -> DataFrame:
    """Takes a History. Returns its probe ops (pid, time, code, f, node, error) with, on each
    completion, its invocation's time (`inv_time`: the previous op of its process when that is
    an invocation of the same f, else null)."""
    rows = h.df.where(F.col("pid").isNotNull() & F.col("f").isin(*PROBE_FS)).select(
        "pid", "time", "code", "f", "node", "error", loc().alias("loc"))
    w = Window.partitionBy("pid").orderBy("loc")
    prev_invoke = (F.lag("code").over(w) == INVOKE) & (F.lag("f").over(w) == F.col("f"))
    return rows.select("*", F.when(prev_invoke, F.lag("time").over(w)).alias("inv_time"))


def grouped_error(prefix: str) -> Column:
    """Takes the probe queues' name prefix. Returns the error column as checkers.metadata
    groups it: probe queue names and Erlang pids read out."""
    named = F.regexp_replace("error", re.escape(prefix) + NAME_TAIL, PROBE_QUEUE)
    return F.regexp_replace(named, ERLANG_PID, PID)


def _window_of(windows: Sequence[FaultWindow]) -> Column:
    """Returns, per completion, the indexes of the windows its invocation (else itself) falls
    in, or [OUTSIDE]."""
    if not windows:
        return F.array(F.lit(OUTSIDE))
    at = F.coalesce(F.col("inv_time"), F.col("time"))
    hits = F.filter(F.array(*[F.when((at >= F.lit(w.start_ns)) & (at <= F.lit(w.end_ns)),
                                     F.lit(i)) for i, w in enumerate(windows)]),
                    lambda x: x.isNotNull())
    return F.when(F.size(hits) > 0, hits).otherwise(F.array(F.lit(OUTSIDE)))


def probe_counts(ops: DataFrame, windows: Sequence[FaultWindow], prefix: str
                 ) -> list[ProbeCount]:
    """Takes the probe ops, the fault windows and the queue name prefix. Returns the count rows
    (checkers.metadata.ProbeCount) of the completions."""
    err = F.when(F.col("code") != OK, grouped_error(prefix))
    rows = collect_small(
        ops.where(F.col("code") > INVOKE)
        .select(F.explode(_window_of(windows)).alias("window"), "node", "f", "code",
                err.alias("err"))
        .groupBy("window", "node", "f", "code", "err").count(),
        MAX_ROWS, "probe op counts")
    code = re.compile(REPLY_CODE)
    out = []
    for r in rows:
        m = code.match(r["err"] or "") if r["code"] == OUTCOME_CODES["fail"] else None
        out.append(ProbeCount(int(r["window"]), r["node"], r["f"], CODE_NAMES[r["code"]],
                              r["err"], int(m.group(1)) if m else None, int(r["count"])))
    return out


def probe_timeline(ops: DataFrame, main_end: int) -> dict[str, Any]:
    """Takes the probe ops and the main phase's end (ns). Returns the section's `timeline`:
    the bucket width (ms; over the main phase or the last probe op, the later) and, per node,
    bucket start (ms) and outcome (PROBE_OUTCOMES), how many completions, in node and time
    order; `truncated` when more than MAX_ROWS rows were left to the earliest of them."""
    last = ops.agg(F.max("time")).collect()[0][0]
    bucket = timeline_bucket_ns(max(main_end, int(last or 0)))
    code = F.col("code")
    outcome = (F.when(code == OK, F.lit(PROBE_OUTCOMES[0]))
               .when((code == OUTCOME_CODES["fail"])
                     & F.coalesce(F.col("error").startswith("541 "), F.lit(False)),
                     F.lit(PROBE_OUTCOMES[1]))
               .when(code == OUTCOME_CODES["fail"], F.lit(PROBE_OUTCOMES[2]))
               .otherwise(F.lit(PROBE_OUTCOMES[3])))
    # A plot's series must never cost the section: past MAX_ROWS (many nodes), the earliest
    # rows are kept and `truncated` says so.
    rows = (ops.where(code > INVOKE)
            .select("node", (F.floor(F.col("time") / F.lit(bucket))
                             * F.lit(bucket // 1_000_000)).cast("long").alias("t_ms"),
                    outcome.alias("outcome"))
            .groupBy("node", "t_ms", "outcome").count()
            .orderBy("t_ms", "node", "outcome").limit(MAX_ROWS + 1).collect())
    truncated, rows = len(rows) > MAX_ROWS, rows[:MAX_ROWS]
    order = {k: i for i, k in enumerate(PROBE_OUTCOMES)}
    series = sorted(({"node": r["node"], "t_ms": int(r["t_ms"]), "outcome": r["outcome"],
                      "n": int(r["count"])} for r in rows),
                    key=lambda x: (x["node"] is None, x["node"] or "", x["t_ms"],
                                   order[x["outcome"]]))
    return {"bucket_ms": bucket // 1_000_000, "series": series, "truncated": truncated}


def node_facts(ops: DataFrame, heal: int | None, bound: int, main_end: int
               ) -> list[ProbeNodeFacts]:
    """Takes the probe ops, the last heal (ns; None: none to judge from), the bound (ns) and
    the main phase's end. Returns the facts per node (checkers.metadata.ProbeNodeFacts)."""
    t, code = F.col("time"), F.col("code")
    h = F.lit(heal if heal is not None else 2**62)  # no heal: nothing is after it
    after, refused = t >= h, code > OK
    served = (code == OK) & (F.col("f") == "declare")

    def when(cond: Column) -> Column:
        return F.when(cond, t)

    rows = ops.groupBy("node").agg(
        *(F.count_if(code == OUTCOME_CODES[k]).alias(k) for k in ("ok", "fail", "info")),
        F.max(when(served & ~after)).alias("served_before"),
        F.min(when(served & after)).alias("first_served"),
        F.count_if((code == INVOKE) & after & (t <= F.lit(main_end))).alias("probes_after"),
        F.count_if(refused & after).alias("refused_after"),
        F.max(when(refused & after)).alias("last_refused"),
        F.min(when(refused & (t >= h + F.lit(bound)))).alias("refused_past_bound"),
    ).collect()
    counts = ("ok", "fail", "info", "probes_after", "refused_after")
    out = []
    for r in rows:
        fields: dict[str, Any] = {k: (int(r[k] or 0) if k in counts else r[k])
                                  for k in r.asDict()}
        out.append(ProbeNodeFacts(**fields))
    return out


def metadata_check(h: History, windows: Sequence[FaultWindow], main_phase: tuple[int, int],
                   harness: Sequence[HarnessEvent], bound: LivenessBound | None
                   ) -> dict[str, Any] | None:
    """Takes a History, the fault windows, the main phase, the harness events and the bound's
    inputs (None: unknown). Returns the "metadata" section (checkers.metadata), or None when
    the harness observed no probe or the history has no probe op (the section is then
    absent)."""
    observed: Mapping[str, Any] | None = metadata_probe_observed(harness)
    if observed is None:
        return None
    ops = probe_ops(h)
    prefix = str(observed.get("queue_prefix") or DEFAULT_PREFIX)
    counts = probe_counts(ops, windows, prefix)
    if not counts and ops.limit(1).count() == 0:
        return None
    tl = timeline(windows, main_phase, bound)
    facts = node_facts(ops, None if tl is None else tl.heal, 0 if tl is None else tl.bound,
                       main_phase[1])
    return {**metadata_section(facts, counts, windows, main_phase, bound, observed),
            "timeline": probe_timeline(ops, main_phase[1])}
