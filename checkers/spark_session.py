"""The Spark session of a check: local mode on loopback by default, any master on request.

`session` reuses an active session (a test suite shares one) or builds one,
paying JVM start-up once per check. The defaults suit a small machine: few
shuffle partitions with adaptive execution (AQE coalesces them further), the
driver memory from the options, no UI. Local mode binds to 127.0.0.1.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Final

from pyspark import SparkContext
from pyspark.sql import SparkSession

from checkers.options import CheckOptions

log = logging.getLogger(__name__)

DEFAULT_MASTER: Final = "local[*]"


# The optimising compiler (C2) takes a method only after ten times HotSpot's default count of
# calls and loops. A check runs some fifty Spark jobs, each with code of its own that runs a
# few thousand times: by default C2 compiled all of it, and its threads used as much CPU as the
# tasks (20 s of 50 s on a 3M-op history on 2 cores). The code every row runs (the JSON parser,
# the aggregates) still reaches C2 within its first percent of rows.
C2_LATER: Final = ("-XX:Tier4InvocationThreshold=50000", "-XX:Tier4MinInvocationThreshold=20000",
                   "-XX:Tier4CompileThreshold=60000", "-XX:Tier4BackEdgeThreshold=400000")
# What the driver runs for every job, and C2 compiled anyway: the Java compiler of the generated
# code (Janino), the closure and lambda class readers (ASM) and the task (de)serialisers. Twenty
# times later again for those: 3 s less of C2 on a 3M-op history, the same tasks.
DRIVER_CODE: Final = ("org/codehaus/janino/*.*", "org/codehaus/commons/*.*",
                      "org/apache/xbean/asm9/*.*", "jdk/internal/org/objectweb/asm/*.*",
                      "java/io/Object*.*")


def java_options(options: CheckOptions) -> list[str]:
    """Takes options. Returns the driver JVM's options: the throughput collector, room for
    Spark's classes up front (no full collections while they load), C2 for the hottest code
    only (C2_LATER, DRIVER_CODE), and the class archive (AppCDS) when one is asked for: used
    if it exists, else written at exit."""
    opts = ["-XX:+UseParallelGC", "-XX:MetaspaceSize=256m", *C2_LATER, "-XX:CompileCommand=quiet",
            *(f"-XX:CompileCommand=CompileThresholdScaling,{p},20.0" for p in DRIVER_CODE)]
    archive = options.jvm_class_archive
    if archive is not None:
        archive.parent.mkdir(parents=True, exist_ok=True)
        flag = "SharedArchiveFile" if archive.exists() else "ArchiveClassesAtExit"
        opts += [f"-XX:{flag}={archive}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    return opts


def spark_conf(master: str, options: CheckOptions) -> dict[str, str]:
    """Takes the master URL and options. Returns the Spark configuration of a check."""
    conf = {
        "spark.app.name": "checkers",
        "spark.driver.memory": options.driver_memory,
        "spark.sql.shuffle.partitions": str(options.shuffle_partitions or 8),
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        # Intermediate tables are written once and read a few times: keep them cheap to write.
        "spark.sql.parquet.compression.codec": "lz4",
        "spark.hadoop.parquet.enable.dictionary": "false",
        "spark.driver.extraJavaOptions": " ".join(java_options(options)),
    }
    if master.startswith("local"):
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    conf.update(dict(options.spark_conf))
    return conf


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def session(master: str | None, options: CheckOptions) -> tuple[SparkSession, bool]:
    """Takes a master URL (None: local[*]) and options. Returns (session, created): an active
    session is reused as it is; a new one is built with `spark_conf`."""
    active = SparkSession.getActiveSession()
    if active is None and SparkContext._active_spark_context is not None:
        active = SparkSession.builder.getOrCreate()  # a session of another thread
    if active is not None:
        if master and active.sparkContext.master != master:
            log.warning("reusing the active Spark session (%s), not %s",
                        active.sparkContext.master, master)
        return active, False
    master = master or DEFAULT_MASTER
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master)
    for k, v in spark_conf(master, options).items():
        builder = builder.config(k, v)
    # pyspark replaces the SIGINT handler with one that cancels the context's jobs, and leaves it
    # there after the context stops: a Ctrl-C in a later run of a series then dies in it with a
    # traceback instead of healing. The caller's handler stays (Ctrl-C during a check raises
    # KeyboardInterrupt there, as anywhere else).
    before = signal.getsignal(signal.SIGINT) if _main_thread() else None
    try:
        spark = builder.getOrCreate()
    finally:
        if before is not None:
            signal.signal(signal.SIGINT, before)
    spark.sparkContext.setLogLevel("WARN")
    log.info("spark session %s started", master)
    return spark, True
