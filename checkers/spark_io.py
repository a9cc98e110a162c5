"""Reading a history into Spark: the explicit schema, Parquet conversion and the input checks.

A JSONL history is parsed once, with an explicit schema (`value` as a string,
so nemesis objects arrive as their JSON text) in PERMISSIVE mode: a line that
is not a JSON object of the right field types lands in `_corrupt`. Each row
keeps where it came from: `_block` (the byte offset of the file split it was
read from) and `_pos` (its rank among the non-blank lines of that split), so
`loc = _block + _pos` orders rows as the file does (a line takes at least two
bytes, so locs never collide), and a location can be turned back into a line
number when, and only when, there is an error to report.

The parsed rows (`prepare`) are written to Parquet (or cached, for small
histories) and every check reads that. A large history is read into Parquet
by pyarrow's JSON reader where it gives the rows Spark's would
(`checkers.arrow_json`, about half the CPU; its rows are then every line, so
a line number is a count of rows), else by Spark's. Finding the first line that breaks the
contract collects nothing but a handful of rows: `summarize` aggregates per
split (the first row with a problem of its own, whether indexes are simply
consecutive), `first_index_problem` runs a window (lag of index) only over
splits whose indexes are not, and `line_of` counts lines only on that error
path. One known gap: a line holding a JSON array of objects is read by Spark
as those objects (the contract says a line is one object).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from checkers import arrow_json
from checkers.errors import HistoryError
from checkers.model import (
    ACK,
    DEAD_LETTER,
    DELIVERY_FS,
    END_FS,
    HARNESS,
    MESSAGE_ID_PATTERN,
    NEMESIS,
    OUTCOME_CODES,
    PROBE_FS,
    PROCESS_INT_PATTERN,
    PUBLISH,
)

log = logging.getLogger(__name__)

CORRUPT = "_corrupt"
SIDECAR = "_checkers.json"
SPLIT_CONFS = (
    "spark.sql.files.maxPartitionBytes",
    "spark.sql.files.openCostInBytes",
    "spark.sql.files.minPartitionNum",
)

# The fields the checkers read; the others (unknown keys) are skipped.
SCHEMA = T.StructType([
    T.StructField("index", T.LongType()),
    T.StructField("time", T.LongType()),
    T.StructField("type", T.StringType()),
    T.StructField("process", T.StringType()),
    T.StructField("f", T.StringType()),
    T.StructField("value", T.StringType()),
    T.StructField("node", T.StringType()),
    T.StructField("publisher", T.LongType()),
    T.StructField("seq", T.LongType()),
    T.StructField("consumer", T.StringType()),
    T.StructField("redelivered", T.BooleanType()),
    T.StructField("error", T.StringType()),
    T.StructField("phase", T.StringType()),
    T.StructField("reason", T.StringType()),  # why a message was dead-lettered
    T.StructField("queue", T.StringType()),
    T.StructField("priority", T.LongType()),  # a message's priority property
    T.StructField("delivery_count", T.LongType()),  # a delivery's x-delivery-count
    T.StructField("acquired_count", T.LongType()),  # a delivery's x-acquired-count
    T.StructField(CORRUPT, T.StringType()),
])


@dataclass
class History:
    """A parsed history in Spark: `df` (the columns of SCHEMA plus _block, _pos), where it came
    from (the JSONL file, for line numbers), and the split settings it was read with."""

    df: DataFrame
    source: Path | None
    split_confs: dict[str, str] = field(default_factory=dict)
    mode: str = "parquet"  # "memory" (cached) or "parquet"
    # Rows read by checkers.arrow_json: every line of the source is a row (none blank), so a
    # row's line number is the count of rows before it plus one.
    lines_counted: bool = False
    # What pyarrow's reader learnt while writing the rows (None: Spark's reader wrote them, or
    # an older conversion): `summarize` and the message table then ask Spark for none of it.
    facts: arrow_json.Facts | None = None
    cleanup: list[Path] = field(default_factory=list)
    cached: list[DataFrame] = field(default_factory=list)

    def close(self) -> None:
        """Drops caches and temporary files."""
        for d in self.cached:
            d.unpersist()
        for p in self.cleanup:
            shutil.rmtree(p, ignore_errors=True)


def read_jsonl(spark: SparkSession, path: Path) -> DataFrame:
    """Takes a session and a JSONL history. Returns the lazily parsed and prepared rows."""
    raw = (spark.read.schema(SCHEMA)
           .option("mode", "PERMISSIVE")
           .option("columnNameOfCorruptRecord", CORRUPT)
           .json(str(path)))
    pos = F.monotonically_increasing_id() - F.shiftleft(F.spark_partition_id().cast("long"), 33)
    # The split's start, as _metadata.file_block_start gives it (line_of reads that), but read
    # where the scan keeps it rather than from a metadata struct joined to every row: 0.25 s
    # less CPU per million lines.
    return prepare(raw.select(F.input_file_block_start().alias("_block"),
                              pos.alias("_pos"), *SCHEMA.names))


# Row classes and outcome codes, computed once when the history is parsed.
PUBLISH_ROW, DELIVERY_ROW, ACK_ROW, DEAD_ROW = 1, 2, 3, 4
CODE_NAMES = {v: k for k, v in OUTCOME_CODES.items()}
PREPARED = ("_block", "_pos", "index", "time", "code", "pid", "value", "cls", "problem", "proc",
            "f", "node", "error", "consumer", "pub", "seq", "redelivered", "reason", "phase",
            "queue", "priority", "acquired")
# Prepared columns a Parquet history converted by an older version may lack: read as null.
OPTIONAL = {"phase": "string", "queue": "string", "priority": "bigint", "acquired": "bigint"}


def _problem(pid: Column, code: Column) -> Column:
    """Returns, per raw row, what is wrong with it on its own (the first of these checks it fails), or null."""
    client = pid.isNotNull()
    c = F.when(F.col(CORRUPT).isNotNull(),
               F.lit("not a JSON object with fields of the right types"))
    for k in ("index", "time", "type", "process", "f"):
        c = c.when(F.col(k).isNull(), F.lit(f"missing field {k!r}"))
    return (c.when(code.isNull(), F.concat(F.lit("unknown op type "), F.col("type")))
            .when(~client & ~F.col("process").isin(NEMESIS, HARNESS),
                  F.concat(F.lit("unknown process "), F.col("process")))
            .when(client & (F.col("f") == PUBLISH) & F.col("value").isNull(),
                  F.lit("publish without a message id (value)"))
            .when(client & F.col("f").isin(*DELIVERY_FS) & (code == OUTCOME_CODES["ok"])
                  & F.col("value").isNull(), F.lit("delivery without a message id (value)"))
            .when(client & (F.col("f") == ACK) & (code == OUTCOME_CODES["ok"])
                  & F.col("value").isNull(), F.lit("ack without a message id (value)"))
            .when(client & (F.col("f") == DEAD_LETTER) & (code == OUTCOME_CODES["ok"])
                  & F.col("value").isNull(), F.lit("dead letter without a message id (value)")))


def _from_id(group: int) -> Column:
    return F.when(F.col("value").rlike(MESSAGE_ID_PATTERN),
                  F.regexp_extract("value", MESSAGE_ID_PATTERN, group).try_cast("bigint"))


def prepare(raw: DataFrame) -> DataFrame:
    """Takes parsed rows (SCHEMA plus _block, _pos). Returns the columns the checks read (PREPARED).

    Per row: its outcome `code` (invoke 0, ok 1, fail 2, info 3), client process
    number `pid`, class `cls` (publish op, delivery, ack, dead letter, or null), and `problem`
    (null if fine). Fields only some rows need are kept only there, null (and
    nearly free in Parquet) elsewhere: `proc` for nemesis and harness ops; `f`
    for those, deliveries (consume or drain) and consumer ends (a client op f cancel or
    close, checkers.model); `node` for those and publish ops; `error` for those and publish
    completions; `consumer` for deliveries, acks and consumer ends; `pub`, `seq` (from the
    fields, else the id), `redelivered` and `phase` for deliveries; `reason` for failed publish completions (the error
    text) and for dead letters (why the queue dead-lettered the message); `queue` for
    publish ops and deliveries (checkers.spark_liveness judges per queue and node). Probe ops
    (client ops f in PROBE_FS, checkers.model) keep their `f`, `node` and `error`
    (checkers.spark_metadata); `priority` for publish ops and deliveries, and `acquired` for
    deliveries: the larger of its x-delivery-count and x-acquired-count, how often the broker
    says it handed the message out before (checkers.spark_priority). (The
    node, f, error and phase of client ops are otherwise read only for the few messages an
    explanation tells: checkers.evidence.)
    """
    pid = F.when(F.col("process").rlike(PROCESS_INT_PATTERN), F.col("process").try_cast("bigint"))
    code = F.when(F.col("type") == "invoke", F.lit(0))
    for name in ("ok", "fail", "info"):
        code = code.when(F.col("type") == name, F.lit(OUTCOME_CODES[name]))
    staged = raw.select("*", pid.alias("pid"), code.alias("code"))
    problem = _problem(F.col("pid"), F.col("code"))
    client = F.col("pid").isNotNull() & F.col("value").isNotNull() & problem.isNull()
    ok = F.col("code") == OUTCOME_CODES["ok"]
    cls = (F.when(client & (F.col("f") == PUBLISH), F.lit(PUBLISH_ROW))
           .when(client & F.col("f").isin(*DELIVERY_FS) & ok, F.lit(DELIVERY_ROW))
           .when(client & (F.col("f") == ACK) & ok, F.lit(ACK_ROW))
           .when(client & (F.col("f") == DEAD_LETTER) & ok, F.lit(DEAD_ROW)))
    classed = staged.select("*", cls.alias("cls"), problem.alias("problem"))
    side = F.col("pid").isNull()
    dlv = F.col("cls") == DELIVERY_ROW
    publish = F.col("cls") == PUBLISH_ROW
    failed = publish & (F.col("code") == OUTCOME_CODES["fail"])
    dead = F.col("cls") == DEAD_ROW
    probe = F.col("pid").isNotNull() & F.col("problem").isNull() & F.col("f").isin(*PROBE_FS)
    end = F.col("pid").isNotNull() & F.col("problem").isNull() & F.col("f").isin(*END_FS)

    def only(cond: Column, col: str | Column) -> Column:
        return F.when(cond, F.col(col) if isinstance(col, str) else col)

    return classed.select(
        "_block", "_pos", "index", "time", "code", "pid", "value", "cls", "problem",
        only(side, "process").alias("proc"), only(side | dlv | probe | end, "f").alias("f"),
        only(side | publish | dlv | probe, "node").alias("node"),
        only(side | (publish & (F.col("code") > 0)) | probe, "error").alias("error"),
        only(dlv | (F.col("cls") == ACK_ROW) | end,
             F.coalesce(F.col("consumer"), F.lit(""))).alias("consumer"),
        only(dlv, F.coalesce(F.col("publisher"), _from_id(1))).alias("pub"),
        only(dlv, F.coalesce(F.col("seq"), _from_id(2))).alias("seq"),
        only(dlv, F.coalesce(F.col("redelivered"), F.lit(False))).alias("redelivered"),
        F.when(failed, F.col("error")).when(dead, F.col("reason")).alias("reason"),
        only(dlv, "phase").alias("phase"),
        only(publish | dlv, "queue").alias("queue"),
        only(publish | dlv, "priority").alias("priority"),
        only(dlv, F.greatest("delivery_count", "acquired_count")).alias("acquired"),
    )


def _split_confs(spark: SparkSession) -> dict[str, str]:
    confs = {k: spark.conf.get(k, None) for k in SPLIT_CONFS}
    if confs["spark.sql.files.minPartitionNum"] is None:
        confs["spark.sql.files.minPartitionNum"] = str(spark.sparkContext.defaultParallelism)
    return {k: v for k, v in confs.items() if v is not None}


def _write_arrow(history: Path, out_dir: Path) -> arrow_json.Facts | None:
    """Takes a JSONL history and an output directory. Writes its prepared rows as Parquet with
    pyarrow's reader (checkers.arrow_json) if it gives the rows Spark's would. Returns what it
    learnt of them if it did (line numbers are then counted rows), else None."""
    shutil.rmtree(out_dir, ignore_errors=True)
    t0 = time.monotonic()
    try:
        facts = arrow_json.to_parquet(history, out_dir, [n for n in SCHEMA.names if n != CORRUPT])
    except arrow_json.NotFast as e:
        log.info("reading %s with Spark's JSON reader: %s", history, e)
        shutil.rmtree(out_dir, ignore_errors=True)
        return None
    log.info("read %s with pyarrow in %.1fs", history, time.monotonic() - t0)
    return facts


# What `read_early` returns: pyarrow's Facts, False (it left the history to Spark), or None (a
# history not read into Parquet, or not tried).
Early = arrow_json.Facts | bool | None


def _write_prepared(spark: SparkSession, history: Path, out_dir: Path,
                    arrow: Early = None) -> arrow_json.Facts | None:
    """Takes a session, a JSONL history, an output directory and what pyarrow did there already
    (`Early`; None: not tried). Writes its prepared rows as Parquet: with pyarrow's reader where
    it gives the rows Spark's would, else with Spark's. Returns pyarrow's Facts if its reader
    wrote them, else None."""
    if arrow is None:
        arrow = _write_arrow(history, out_dir)
    if isinstance(arrow, arrow_json.Facts):
        return arrow
    read_jsonl(spark, history).write.mode("overwrite").parquet(str(out_dir))
    return None


def read_early(path: Path, work_dir: Path, memory_limit: int) -> Early:
    """Takes a history, a scratch directory and the largest JSONL size to cache in memory.
    Writes a larger JSONL history's prepared rows into the scratch directory with pyarrow,
    which needs no Spark (the engine runs this while Spark starts). Returns what pyarrow learnt
    of them (arrow_json.Facts), False if it left the history to Spark, None for a history
    `load` does not read into Parquet."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size <= memory_limit:
        return None
    facts = _write_arrow(path, work_dir / "history.parquet")
    return False if facts is None else facts


def convert_to_parquet(spark: SparkSession, history: Path, out_dir: Path) -> Path:
    """Takes a session, a JSONL history and an output directory. Parses the history once and
    writes it as Parquet (plus a sidecar naming the source, for line numbers). Returns out_dir."""
    confs = _split_confs(spark)
    counted = _write_prepared(spark, history, out_dir) is not None
    (out_dir / SIDECAR).write_text(json.dumps({"source": str(Path(history).resolve()),
                                               "split_confs": confs, "lines_counted": counted}))
    return out_dir


def is_parquet(path: Path) -> bool:
    """Takes a path. Returns whether it is a Parquet history (a directory)."""
    return Path(path).is_dir()


def load(spark: SparkSession, path: Path, work_dir: Path, memory_limit: int,
         early: Early = None) -> History:
    """Takes a session, a history (JSONL file or Parquet directory), a scratch directory, the
    largest JSONL size (bytes) to cache in memory and what `read_early` returned (None: not
    run). Returns the History, parsed once: into memory when small, into Parquet in work_dir
    when large."""
    path = Path(path)
    if not path.exists():
        raise HistoryError("no such history", None, path)
    if is_parquet(path):
        side = path / SIDECAR
        meta = json.loads(side.read_text()) if side.exists() else {}
        src = Path(meta["source"]) if meta.get("source") else None
        df = spark.read.parquet(str(path))
        for name, kind in OPTIONAL.items():
            if name not in df.columns:
                df = df.withColumn(name, F.lit(None).cast(kind))
        missing = set(PREPARED) - set(df.columns)
        if missing:
            raise HistoryError(f"not a checkers Parquet history: no columns {sorted(missing)} "
                               f"(one converted by an older version? convert it again)",
                               None, path)
        return History(df, src if src and src.exists() else None, meta.get("split_confs", {}),
                       mode="parquet", lines_counted=bool(meta.get("lines_counted")))
    confs = _split_confs(spark)
    if path.stat().st_size <= memory_limit:
        df = read_jsonl(spark, path).persist(StorageLevel.MEMORY_AND_DISK)
        df.count()
        return History(df, path, confs, mode="memory", cached=[df])
    out = work_dir / "history.parquet"
    facts = _write_prepared(spark, path, out, early)
    return History(spark.read.parquet(str(out)), path, confs, cleanup=[out],
                   lines_counted=facts is not None, facts=facts)


# -- column helpers --------------------------------------------------------------------------

def loc() -> Column:
    """Returns the file-order position of a row (unique, increasing down the file)."""
    return F.col("_block") + F.col("_pos")


def is_publish() -> Column:
    """Returns whether a row is a publish op (client, f publish, with an id, well formed)."""
    return F.col("cls") == PUBLISH_ROW


def is_delivery() -> Column:
    """Returns whether a row is a delivery (client, ok, consume or drain, with an id)."""
    return F.col("cls") == DELIVERY_ROW


def is_ack() -> Column:
    """Returns whether a row is an ack (client, ok, f ack, with an id)."""
    return F.col("cls") == ACK_ROW


def is_dead_letter() -> Column:
    """Returns whether a row is a dead letter (client, ok, f dead-letter, with an id)."""
    return F.col("cls") == DEAD_ROW


# -- input checks ------------------------------------------------------------------------------

@dataclass(frozen=True)
class BlockStats:
    """Per split: non-blank rows, first loc and first/last index of rows with an index, the first
    bad row, and whether index - position is constant (indexes consecutive, as HistoryWriter
    writes them: then they surely increase within the split)."""

    block: int
    rows: int
    first_loc: int | None
    first_index: int | None
    last_index: int | None
    bad_loc: int | None
    consecutive: bool


@dataclass(frozen=True)
class Summary:
    """What one pass over the history says about it as a whole."""

    ops: int
    min_time: int | None
    max_time: int | None
    blocks: list[BlockStats]
    acks: int = 0


def summarize(h: History) -> Summary:
    """Takes a History. Returns per-split stats, the time range and the number of acks: what
    pyarrow's reader learnt of them when it wrote the rows (`arrow_summary`), else from Spark
    (`spark_summary`)."""
    return arrow_summary(h.facts) if h.facts is not None else spark_summary(h)


def arrow_summary(facts: arrow_json.Facts) -> Summary:
    """Takes what pyarrow's reader learnt of a history. Returns its Summary, as
    `spark_summary` gives it for the rows the reader wrote (no bad row: it refuses those)."""
    blocks = sorted((BlockStats(b.block, b.rows, b.block, b.first_index, b.last_index, None,
                                b.consecutive) for b in facts.blocks), key=lambda b: b.block)
    times = [b.min_time for b in facts.blocks], [b.max_time for b in facts.blocks]
    return Summary(sum(b.rows for b in blocks), min(times[0], default=None),
                   max(times[1], default=None), blocks, sum(b.acks for b in facts.blocks))


def spark_summary(h: History) -> Summary:
    """Takes a History. Returns per-split stats, the time range and the number of acks, in one
    aggregate pass."""
    with_index = F.col("index").isNotNull()
    rows = (h.df.groupBy("_block").agg(
        F.count(F.lit(1)).alias("rows"),
        F.min(F.when(with_index, loc())).alias("first_loc"),
        F.min_by(F.col("index"), F.when(with_index, loc())).alias("first_index"),
        F.max_by(F.col("index"), F.when(with_index, loc())).alias("last_index"),
        F.min(F.when(F.col("problem").isNotNull(), loc())).alias("bad_loc"),
        F.min(F.col("index") - F.col("_pos")).alias("lo_shift"),
        F.max(F.col("index") - F.col("_pos")).alias("hi_shift"),
        F.min("time").alias("min_time"),
        F.max("time").alias("max_time"),
        F.count_if(F.col("cls") == ACK_ROW).alias("acks"),
    ).collect())
    blocks = sorted((BlockStats(r["_block"], r["rows"], r["first_loc"], r["first_index"],
                                r["last_index"], r["bad_loc"], r["lo_shift"] == r["hi_shift"])
                     for r in rows),
                    key=lambda b: b.block)
    mins = [r["min_time"] for r in rows if r["min_time"] is not None]
    maxs = [r["max_time"] for r in rows if r["max_time"] is not None]
    return Summary(sum(b.rows for b in blocks), min(mins) if mins else None,
                   max(maxs) if maxs else None, blocks, sum(r["acks"] for r in rows))


def first_index_problem(h: History, summary: Summary) -> tuple[int, str] | None:
    """Takes a History and its Summary. Returns (loc, message) of the first op whose index is not
    greater than the previous op's, or None. Within a split whose indexes are not simply
    consecutive, a window compares each index with the one before; across splits the first
    index of a split is compared with the last one before it."""
    found = []
    unsure = [b.block for b in summary.blocks if not b.consecutive]
    if unsure:
        w = Window.partitionBy("_block").orderBy("_pos")
        bad = (h.df.where(F.col("index").isNotNull() & F.col("_block").isin(unsure))
               .select(loc().alias("loc"), "index", F.lag("index").over(w).alias("prev"))
               .where(F.col("index") <= F.col("prev"))
               .orderBy("loc").limit(1).collect())
        found = [(bad[0]["loc"], bad[0]["index"], bad[0]["prev"])] if bad else []
    prev: BlockStats | None = None
    for b in summary.blocks:
        if b.first_loc is None:
            continue
        if prev is not None and b.first_index is not None and prev.last_index is not None \
                and b.first_index <= prev.last_index:
            found.append((b.first_loc, b.first_index, prev.last_index))
        prev = b
    if not found:
        return None
    at, index, before = min(found)
    return at, f"index {index} is not greater than the previous op's index {before}"


def row_problem_at(h: History, at: int) -> str:
    """Takes a History and the loc of a bad row. Returns what is wrong with it."""
    r = h.df.where(loc() == at).select("problem").limit(1).collect()
    return r[0]["problem"] if r else "bad op"


# -- line numbers ------------------------------------------------------------------------------

@contextmanager
def _confs(spark: SparkSession, confs: dict[str, str]) -> Iterator[None]:
    old = {k: spark.conf.get(k, None) for k in confs}
    for k, v in confs.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, before in old.items():
            if before is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, before)


def line_of(spark: SparkSession, h: History, at: int) -> tuple[int, bool]:
    """Takes a session, a History and a row's loc. Returns (1-based line number, exact?).

    Exact when the JSONL source is at hand: its lines are counted per split
    (blank lines included) with the split settings the history was read
    with. Without it the count is of non-blank lines only.
    """
    blocks = (h.df.groupBy("_block").agg(F.count(F.lit(1)).alias("n"),
                                         F.max("_pos").alias("maxpos")).collect())
    starts = sorted(r["_block"] for r in blocks)
    block = max(b for b in starts if b <= at)
    pos = at - block
    if h.source is None or h.lines_counted:
        counts = {r["_block"]: r["n"] for r in blocks}
        return sum(counts[b] for b in starts if b < block) + pos + 1, h.lines_counted
    with _confs(spark, h.split_confs):
        text = spark.read.text(str(h.source)).select(
            F.col("_metadata.file_block_start").alias("_block"),
            (F.monotonically_increasing_id()
             - F.shiftleft(F.spark_partition_id().cast("long"), 33)).alias("tpos"),
            F.col("value").rlike(r"^\s*$").alias("blank"))
        per_block = {r["_block"]: (r["n"], r["blanks"]) for r in text.groupBy("_block").agg(
            F.count(F.lit(1)).alias("n"), F.sum(F.col("blank").cast("int")).alias("blanks"),
        ).collect()}
        before = sum(n for b, (n, _) in per_block.items() if b < block)
        if per_block.get(block, (0, 0))[1] == 0:
            return before + pos + 1, True
        w = Window.partitionBy("_block").orderBy("tpos")
        hit = (text.where((F.col("_block") == block) & ~F.col("blank"))
               .select("tpos", (F.row_number().over(w) - 1).alias("rank"))
               .where(F.col("rank") == pos).collect())
    return (before + hit[0]["tpos"] + 1, True) if hit else (before + pos + 1, False)


def raise_at(spark: SparkSession, h: History, at: int, message: str, path: Path) -> None:
    """Takes the loc of a bad op and what is wrong. Raises HistoryError naming its line."""
    line, exact = line_of(spark, h, at)
    if not exact:
        message += " (line counted without blank lines: the JSONL source is not available)"
    raise HistoryError(message, line, h.source or path)


def literal_rows(spark: SparkSession, rows: list[tuple[Any, ...]], fields: str) -> DataFrame:
    """Takes a session, small rows and their fields ("a int, b int"). Returns them as a
    DataFrame built in the JVM from one JSON literal (createDataFrame would run a Python worker
    to read them back)."""
    pairs = [f.split() for f in fields.split(",")]
    text = json.dumps([dict(zip([n for n, _ in pairs], r, strict=True)) for r in rows])
    struct = ",".join(f"{n}:{t}" for n, t in pairs)
    return spark.range(1).select(F.inline(F.from_json(F.lit(text), f"array<struct<{struct}>>")))


def collect_small(df: DataFrame, cap: int, what: str) -> list[Any]:
    """Takes a DataFrame expected to be small. Returns its rows; raises HistoryError past `cap`."""
    return at_most(df.limit(cap + 1).collect(), cap, what)


def at_most(rows: list[Any], cap: int, what: str) -> list[Any]:
    """Takes rows expected to be few. Returns them; raises HistoryError past `cap`."""
    if len(rows) > cap:
        raise HistoryError(f"more than {cap} {what}: not a history the checkers can read")
    return rows
