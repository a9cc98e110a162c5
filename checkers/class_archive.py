"""The Spark driver JVM's class archive (AppCDS): written by one check, mapped by the next.

Starting Spark's JVM loads, parses and verifies some twenty thousand classes
from Spark's jars; on 2 cores that is seconds of CPU taken from pyarrow's
reading of the history, which runs beside it. The JVM can write the classes
it loaded to an archive when it exits (-XX:ArchiveClassesAtExit) and map that
archive at a later start (-XX:SharedArchiveFile). The archive is made here,
by the JVM of a check, never fetched: the first check without one writes it
and the later ones use it.

An archive fits only the JVM and class path that wrote it, so its name
carries a digest of the java executable (path, size, modification time),
pyspark's version (its jars) and the driver's JVM options: a change of any
of them names another archive, written afresh by the next check (the others
are removed once a week old). It lives in the user's cache directory
($XDG_CACHE_HOME, else ~/.cache, then rabbitmq-jepsen-harness/). A check
writes it under a name of its own and renames it into place only once its
JVM has exited, so no check maps a half-written archive, and two checks
writing at once each write their own. Nothing here may fail a check: a
problem is logged and the check runs without an archive.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pyspark
from pyspark import SparkContext

from checkers.options import CheckOptions
from checkers.spark_session import java_options

log = logging.getLogger(__name__)

PREFIX: Final = "spark-driver-"
SUFFIX: Final = ".jsa"
# How long a check waits for its JVM to write the archive and exit (it took about 2 s here).
EXIT_WAIT_S: Final = 120
# Another key's archive written longer ago than this is removed when a new one is written (two
# checkouts with other pyspark versions may share the cache: each writes its own again).
STALE_S: Final = 7 * 24 * 3600


@dataclass(frozen=True)
class Plan:
    """Where the driver's archive is (`final`) and, when there is none yet, the file this
    check's JVM writes at its exit (`writing`), renamed to `final` afterwards."""

    final: Path
    writing: Path | None = None

    @property
    def path(self) -> Path:
        """Returns the archive the JVM is given: the one it writes, else the one it maps."""
        return self.writing or self.final


def cache_dir() -> Path:
    """Returns the directory of the cached archives."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rabbitmq-jepsen-harness"


def java_executable() -> Path | None:
    """Returns the java executable Spark's launcher runs ($JAVA_HOME/bin/java, else java on the
    PATH), resolved; None if there is none."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not Path(found).exists():
        return None
    return Path(found).resolve()


def archive_name(java: Path, options: CheckOptions) -> str:
    """Takes the java executable and the options. Returns the archive's file name: a digest of
    the executable (path, size, modification time), pyspark's version and the driver's JVM
    options (without any archive)."""
    st = java.stat()
    key = "\n".join([str(java), str(st.st_size), str(st.st_mtime_ns), pyspark.__version__,
                     *java_options(options)])
    return PREFIX + hashlib.sha256(key.encode()).hexdigest()[:16] + SUFFIX


def plan(options: CheckOptions) -> Plan | None:
    """Takes the options of a check about to start Spark. Returns the cached archive's Plan;
    None when the options name an archive of their own, when a JVM is already running (its
    options are set), or without java."""
    if options.jvm_class_archive is not None or SparkContext._gateway is not None:
        return None
    try:
        java = java_executable()
        if java is None:
            return None
        final = cache_dir() / archive_name(java, options)
        if final.is_file():
            return Plan(final)
        final.parent.mkdir(parents=True, exist_ok=True)
        return Plan(final, final.with_name(f"{final.name}.{os.getpid()}.part"))
    except OSError:
        log.warning("no JVM class archive: its cache is not usable", exc_info=True)
        return None


def _end_jvm() -> None:
    """Ends the (stopped) Spark context's JVM and waits for it: it writes its archive as it
    exits. The next session starts a new JVM."""
    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    SparkContext._gateway = None
    SparkContext._jvm = None
    gateway.shutdown()
    if proc is not None:
        if proc.stdin is not None:
            proc.stdin.close()  # Spark's gateway server exits when its input ends
        proc.wait(timeout=EXIT_WAIT_S)


def keep(p: Plan) -> None:
    """Takes the Plan of a check whose Spark session has stopped. When its JVM was writing the
    archive: ends the JVM, puts the archive in place and removes the cache's other archives
    (another java, pyspark or options). Never raises."""
    if p.writing is None:
        return
    try:
        _end_jvm()
        if p.writing.is_file() and p.writing.stat().st_size > 0:
            os.replace(p.writing, p.final)
            log.info("wrote the JVM class archive %s", p.final)
        stale = time.time() - STALE_S
        for old in p.final.parent.glob(f"{PREFIX}*"):  # other keys' archives, crashed writes
            if old != p.final and old.stat().st_mtime < stale:
                old.unlink(missing_ok=True)
    except Exception:  # the check's results stand without an archive
        log.warning("could not keep the JVM class archive", exc_info=True)
    finally:
        p.writing.unlink(missing_ok=True)
