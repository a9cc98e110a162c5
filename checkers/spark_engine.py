"""The Spark engine: checks a history of any size, collecting only aggregates and bounded samples.

Steps: parse once (Parquet, or an in-memory cache for small histories),
summarize per split (which also says whether the history records acks; what
pyarrow's reader learnt, when it wrote the Parquet), build the per-message
table (pairing acks with deliveries only when there are acks), sum it up in
one aggregate (the queue counts, whether a publish or an ack breaks the
contract, what was consumed after the harness's first mend), count what was
at risk at each fault and the publishes it made unknown or a blocked
connection held (one small group-by), find the first line breaking the
contract (raising HistoryError naming it), then the four sections (five when
the run published priorities: the harness observed it, checkers.spark_priority),
each guarded so that one failing checker leaves the others' verdicts (Jepsen's
compose). Each stage logs its time.
When the harness observed a metadata probe, its section follows, composed in
like the others (checkers.spark_metadata).
"""

from __future__ import annotations

import functools
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Final, cast

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from checkers import class_archive
from checkers.efficacy import Evidence, judge_faults, strength
from checkers.faults import fault_windows
from checkers.holds import boundaries
from checkers.liveness import LivenessBound
from checkers.metadata import SECTION as METADATA
from checkers.model import HARNESS, NEMESIS, decode_value
from checkers.options import CheckOptions
from checkers.phases import (
    HarnessEvent,
    dead_lettering,
    drain_state,
    main_phase,
    phase_start,
    phase_start_index,
    priorities_observed,
)
from checkers.results import (
    FALSE_ONLY,
    check_safe,
    compose,
    log_reads_part,
    lost_proven,
    ordering_section,
    queue_section,
)
from checkers.retry import SECTION as RETRY_SECTION
from checkers.retry import settings_of as retry_settings
from checkers.settlement import reads_whole_log
from checkers.spark_fates import fates_of
from checkers.spark_io import (
    CODE_NAMES,
    History,
    Summary,
    at_most,
    collect_small,
    first_index_problem,
    load,
    loc,
    raise_at,
    read_early,
    row_problem_at,
    summarize,
)
from checkers.spark_liveness import liveness_check
from checkers.spark_loss import loss_facts
from checkers.spark_metadata import metadata_check
from checkers.spark_order import ordering_facts
from checkers.spark_perf import perf_facts
from checkers.spark_priority import SECTION as PRIORITY
from checkers.spark_priority import priority_check
from checkers.spark_queue import (
    SAMPLED,
    ack_problem,
    dropped_reasons,
    fail_reasons,
    log_reads,
    message_table,
    publish_problem,
    queue_facts,
    total_aggs,
)
from checkers.spark_retry import delayed_retry_check
from checkers.spark_risk import risk_facts, risk_groups
from checkers.spark_session import session
from checkers.spark_timeouts import consumer_timeout_check
from checkers.spark_traces import after_aggs, consumed_after, first_mend_loc, gather
from checkers.timeouts import SECTION as TIMEOUT_SECTION
from checkers.timeouts import depth_samples
from checkers.timeouts import settings_of as timeout_settings
from checkers.traces import CheckedResults
from history import Op, OpType
from history.faults import FaultWindow

log = logging.getLogger(__name__)

# JSONL histories up to this size are cached in memory rather than written to Parquet.
MEMORY_LIMIT: Final = 256 * 1024 * 1024
MAX_SIDE_OPS: Final = 200_000
# Small histories run independent jobs on this many threads (their jobs are mostly fixed
# overhead, which overlaps); large ones run one job at a time, each using every core.
PARALLEL: Final = 3
PARALLEL_LIMIT: Final = 32 * 1024 * 1024


@contextmanager
def timed(what: str) -> Iterator[None]:
    """Logs (INFO) how long the block took: each stage of a check says where its time goes."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        log.info("%s in %.1fs", what, time.monotonic() - t0)


def side_ops(h: History) -> tuple[list[tuple[int, Op]], list[HarnessEvent]]:
    """Takes a History. Returns its nemesis ops (each with its loc) and harness events, in file
    order (few): those pyarrow's reader kept, else from Spark."""
    what = "nemesis and harness ops"
    if h.facts is not None:  # pyarrow's reader kept them (checkers.arrow_json.Facts)
        rows: list[Any] = at_most(h.facts.side, MAX_SIDE_OPS, what)
    else:
        ok = F.col("proc").isNotNull() & F.col("problem").isNull()
        rows = collect_small(
            h.df.where(ok).select(loc().alias("loc"), "index", "time", "code", "proc", "f",
                                  "value", "node", "error").orderBy("loc"),
            MAX_SIDE_OPS, what)
    nemesis = [(r["loc"], Op(type=cast(OpType, CODE_NAMES[r["code"]]), process=NEMESIS, f=r["f"],
                             value=decode_value(r["value"]), node=r["node"], index=r["index"],
                             time=r["time"], error=r["error"]))
               for r in rows if r["proc"] == NEMESIS]
    harness = [HarnessEvent(r["time"], r["f"], decode_value(r["value"]), r["node"], r["loc"],
                            r["index"]) for r in rows if r["proc"] == HARNESS]
    return nemesis, harness


def run_all(thunks: Sequence[Callable[[], Any]], workers: int) -> list[Any]:
    """Takes thunks and a worker count. Returns their results in order, run on that many
    threads (Spark takes jobs from several threads; small jobs then overlap)."""
    if workers <= 1:
        return [t() for t in thunks]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="checkers") as pool:
        return [f.result() for f in [pool.submit(t) for t in thunks]]


def _materialize(spark: SparkSession, df: DataFrame, name: str, *, h: History, work: Path
                 ) -> DataFrame:
    if h.mode == "memory":
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        df.count()
        h.cached.append(df)
        return df
    out = work / f"{name}.parquet"
    df.write.mode("overwrite").parquet(str(out))
    h.cleanup.append(out)
    return spark.read.parquet(str(out))


def check_loaded(spark: SparkSession, h: History, path: Path, options: CheckOptions,
                 work: Path, evidence: Evidence | None = None,
                 bound: LivenessBound | None = None) -> dict[str, Any]:
    """Takes a session, a loaded History, its path, the options, a scratch directory, the
    broker's evidence (its logs; None: none) and what the liveness bound is derived from (None:
    unknown). Returns the results dict; raises HistoryError for a history breaking the
    contract."""
    t0 = time.monotonic()
    small = h.mode == "memory" and path.is_file() and path.stat().st_size <= PARALLEL_LIMIT
    workers = PARALLEL if small else 1
    # First: whether the history records acks decides how the message table is built.
    with timed("summarized the history"):
        summary = summarize(h)
    acks = summary.acks > 0

    def table() -> DataFrame:
        with timed("built the message table"):
            return message_table(h, acks, functools.partial(_materialize, spark, h=h, work=work))

    (nemesis, harness), msgs = run_all([lambda: side_ops(h), table], workers)

    first, last = summary.min_time or 0, summary.max_time or 0
    windows, unpaired = fault_windows([op for _, op in nemesis], last)
    mend = first_mend_loc(harness)
    with timed("summed up the message table"):
        totals = msgs.agg(*total_aggs(), *after_aggs(mend)).collect()[0]
    with timed("counted what each fault had at risk"):
        risk = risk_facts(risk_groups(msgs, windows), windows)
    with timed("looked for contract breaks"):
        problems = _problems(h, summary, msgs, totals, workers)
    if unpaired is not None:
        problems.append((nemesis[unpaired[0]][0], unpaired[1]))
    if problems:
        at, message = min(problems)
        raise_at(spark, h, at, message, path)

    results, reordered = _sections(spark, h, msgs, totals, harness, windows, (first, last),
                                   acks, options, bound, workers)
    results = _with_metadata(results, h, windows, harness, (first, last), bound)
    results = _with_delayed_retry(results, spark, h, harness, options,
                                  (bound, windows, main_phase(harness, first, last)[1]))
    # Test strength: informational, outside the verdict's composition.
    faults = judge_faults(windows, risk, harness, evidence)
    results["faults"] = faults
    results["strength"] = strength(faults, evidence)
    log.info("checked %d ops in %.1fs: valid %s", summary.ops, time.monotonic() - t0,
             results["valid"])
    try:
        with timed("counted the fates"):
            results["fates"] = fates_of(msgs, results["queue"], windows,
                                        lost_proven(drain_state(harness), options,
                                                    dead_lettering(harness)),
                                        phase_start(harness, "drain"), (first, last), reordered)
    except Exception:  # a courtesy for the plots and incidents: never lose the verdict over it
        log.warning("could not count the messages' fates", exc_info=True)
    return _with_traces(results, h, [op for _, op in nemesis], harness, (last, acks),
                        consumed_after(totals, mend))


def _sections(spark: SparkSession, h: History, msgs: DataFrame, totals: Row,
              harness: list[HarnessEvent], windows: list[FaultWindow], span: tuple[int, int],
              acks: bool, options: CheckOptions, bound: LivenessBound | None,
              workers: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Checks the queue, ordering, perf and liveness sections, and the priority section when
    the harness observed priorities (in parallel for a small history), and composes them.
    Returns the results and the ordering violations attributed to faults (for the fates)."""
    def queue() -> dict[str, Any]:
        counts, samples = queue_facts(msgs, options.sample_size, totals)
        reasons = fail_reasons(h, options.sample_size) if counts["fail_count"] else {}
        dropped = (dropped_reasons(h, msgs, options.sample_size)
                   if counts["dropped_by_design_count"] else None)
        section = queue_section(counts, samples, drain_state(harness), options,
                                fail_reasons=reasons, acks_recorded=acks, dropped=dropped,
                                dead_lettering=dead_lettering(harness))
        if reads_whole_log(harness, None):
            section["log_reads"] = log_reads_part(log_reads(h, options.sample_size))
        return _with_loss(section, h, msgs, harness, span, options.example_size, windows)

    reordered: list[dict[str, Any]] = []  # the ordering violations attributed to faults

    def ordering() -> dict[str, Any]:
        facts = ordering_facts(h, msgs, options.strict_order, options.example_size,
                               options.sample_size, windows, boundaries(harness), acks)
        reordered.extend(facts.pop("by_fault", []))
        return ordering_section(options.strict_order, **facts)

    def perf() -> dict[str, Any]:
        return perf_facts(spark, msgs, windows, main_phase(harness, *span),
                          options.quantile_accuracy)

    def liveness() -> dict[str, Any]:
        return liveness_check(h, msgs, windows, main_phase(harness, *span), harness, bound,
                              acks)

    def section(name: str, facts: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        with timed(f"checked {name}"):
            return check_safe(name, facts)

    checks: dict[str, Callable[[], dict[str, Any]]] = {
        "queue": queue, "ordering": ordering, "perf": perf, "liveness": liveness}
    observed = priorities_observed(harness)
    if observed is not None:
        checks[PRIORITY] = functools.partial(priority_check, h, observed,
                                             phase_start_index(harness, "drain"),
                                             options.example_size)
    sections = dict(zip(checks, run_all([functools.partial(section, n, f)
                                         for n, f in checks.items()], workers), strict=True))
    for name in ("liveness", PRIORITY):  # a check composing only when false, raising: not false
        if name in sections:
            sections[name].setdefault(FALSE_ONLY, True)
    return compose(sections), reordered


def _with_loss(section: dict[str, Any], h: History, msgs: DataFrame,
               harness: list[HarnessEvent], span: tuple[int, int],
               example_size: int, windows: list[FaultWindow]) -> dict[str, Any]:
    """Takes the queue section and what telling its losses apart reads (the fault windows
    among it: which side of a partition a confirming node was on). Returns it with
    `loss` (checkers.spark_loss) when something was lost; without it if that failed (a
    courtesy for the reader: the verdict stands without it)."""
    lost = int(section.get("lost_count") or 0)
    if not lost:
        return section
    try:
        with timed("told the losses apart"):
            section["loss"] = loss_facts(h.df, msgs, harness, span, lost, example_size,
                                         windows)
    except Exception:
        log.warning("could not tell the losses apart", exc_info=True)
    return section


def _with_metadata(results: dict[str, Any], h: History, windows: list[FaultWindow],
                   harness: list[HarnessEvent], span: tuple[int, int],
                   bound: LivenessBound | None) -> dict[str, Any]:
    """Takes the composed results and what the metadata check reads. Returns them with the
    "metadata" section (checkers.spark_metadata), composed in, when the harness observed a
    metadata probe and the history has its ops; else unchanged."""
    with timed("checked metadata"):
        section = check_safe(METADATA, lambda: metadata_check(
            h, windows, main_phase(harness, *span), harness, bound) or {})
    if not section:
        return results
    section.setdefault(FALSE_ONLY, True)  # a metadata check that raised cannot be false
    return compose({**{k: v for k, v in results.items() if k != "valid"}, METADATA: section})


def _with_delayed_retry(results: dict[str, Any], spark: SparkSession, h: History,
                        harness: list[HarnessEvent], options: CheckOptions,
                        clock: tuple[LivenessBound | None, list[FaultWindow], int]
                        ) -> dict[str, Any]:
    """Takes the composed results, what the delayed-retry and consumer-timeout checks read, and
    what a single active consumer's hand-over is judged by (the liveness bound, the fault
    windows, the main phase's end). Returns them with the "delayed_retry"
    (checkers.spark_retry) and "consumer_timeout" (checkers.spark_timeouts) sections, composed
    in, for each whose settings the harness observed; else unchanged. Without the JSONL source
    at hand a section is unknown, never a pass."""
    done = drain_state(harness).complete
    bound, windows, main_end = clock
    spans = [(w.start_ns, w.end_ns) for w in windows]
    jobs = ((RETRY_SECTION, retry_settings(harness),
             functools.partial(delayed_retry_check, faults=windows)),
            (TIMEOUT_SECTION, timeout_settings(harness), functools.partial(
                consumer_timeout_check, bound=bound, windows=spans, main_end=main_end,
                depth=depth_samples(harness))))
    added: dict[str, dict[str, Any]] = {}
    for name, settings, job in jobs:
        source = h.source
        if settings is None:
            continue
        with timed(f"checked {name}"):
            added[name] = ({"valid": "unknown", "settings": settings,
                            "reason": "the JSONL history is not at hand"} if source is None
                           else check_safe(name, functools.partial(
                               job, spark, source, settings, done, options.example_size)))
    if not added:
        return results
    return compose({**{k: v for k, v in results.items() if k != "valid"}, **added})


def _problems(h: History, summary: Summary, msgs: DataFrame, totals: Row,
              workers: int) -> list[tuple[int, str]]:
    """Takes a History, its Summary, its message table and the table's totals. Returns (loc,
    message) of the first row breaking the contract on its own, of the first index out of
    order, of the first publish breaking the publish rules and of the first orphan ack, those
    found (the table's totals say whether to look for the last two)."""
    problems: list[tuple[int, str]] = []
    bad = [b.bad_loc for b in summary.blocks if b.bad_loc is not None]
    if bad:
        problems.append((min(bad), row_problem_at(h, min(bad))))
    found = run_all([lambda: first_index_problem(h, summary),
                     lambda: publish_problem(h, msgs) if totals["publish_problem_count"] else None,
                     lambda: ack_problem(msgs, totals["first_orphan_at"])], workers)
    problems.extend(p for p in found if p is not None)
    return problems


# The ids of each sampled queue class whose ops the traces carry (harness.explain tells them).
TRACED_PER_CLASS: Final = 10


def _with_traces(results: dict[str, Any], h: History, nemesis: list[Op],
                 harness: list[HarnessEvent], end: tuple[int, bool],
                 after_mend: int | None) -> CheckedResults:
    """Takes the results and what the check read: its nemesis ops and harness events, the
    history's last time and whether it records acks, and how many messages were consumed after
    the harness's first mend. Returns them as CheckedResults carrying the traces
    (checkers.traces) of the first TRACED_PER_CLASS ids of each sampled queue class; without
    traces if gathering them failed (the verdict stands without them)."""
    out = CheckedResults(results)
    queue = results.get("queue") or {}
    ids = {i for k in SAMPLED for i in (queue.get(k) or [])[:TRACED_PER_CLASS]}
    try:
        with timed(f"gathered the traces of {len(ids)} messages"):
            out.traces = gather(h, ids, nemesis, harness, *end, after_mend)
    except Exception:  # a courtesy for the explanations: never lose the verdict over it
        log.warning("could not gather the traces of the sampled messages", exc_info=True)
    return out


def check(path: Path, options: CheckOptions, spark_master: str | None = None,
          spark: SparkSession | None = None, evidence: Evidence | None = None,
          bound: LivenessBound | None = None) -> dict[str, Any]:
    """Takes a history (JSONL file or Parquet directory), options, a master URL or a session,
    the broker's evidence for the faults' efficacy (None: none) and what the liveness bound is
    derived from (None: unknown). Returns the results dict; raises HistoryError. A session it
    built is stopped at the end."""
    created = False
    archive: class_archive.Plan | None = None
    tmp = None
    if options.work_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="checkers-"))
    work = options.work_dir or tmp
    assert work is not None
    work.mkdir(parents=True, exist_ok=True)
    try:
        # pyarrow reads a large JSONL history while Spark starts (it needs no session).
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="reader") as pool:
            early = pool.submit(read_early, Path(path), work, MEMORY_LIMIT)
            if spark is None:
                # The driver JVM maps the cached class archive, or writes it (class_archive).
                archive = class_archive.plan(options)
                with timed("started Spark"):
                    spark, created = session(spark_master, options if archive is None else
                                             replace(options, jvm_class_archive=archive.path))
            with timed(f"read {path}"):
                h = load(spark, Path(path), work, MEMORY_LIMIT, early.result())
        try:
            return check_loaded(spark, h, Path(path), options, work, evidence, bound)
        finally:
            h.close()
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if created and spark is not None:
            spark.stop()
            if archive is not None:
                class_archive.keep(archive)
