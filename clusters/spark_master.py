"""Asking whether a Spark master answers before a check is handed to it.

A standalone master that is down makes a Spark driver retry its registration
for about a minute and then fail with a message far from the cause. The CLI
calls `check_spark_master` first, so `run` and `check` stop at once with exit
2 and a message naming the master. Local masters (`local`, `local[*]`) need
nothing; `spark://h1:p1,h2:p2` (standby masters) answers when any one does;
other schemes (yarn, k8s://...) are left to Spark.
"""

from __future__ import annotations

import logging
import socket

from clusters.errors import ClusterError

log = logging.getLogger(__name__)

DEFAULT_PORT = 7077


class SparkMasterUnreachable(ClusterError, RuntimeError):
    """No Spark master answers at the URL given."""


def master_addresses(url: str) -> list[tuple[str, int]]:
    """Takes a master URL. Returns the (host, port) pairs to probe: [] for local and for schemes
    other than spark://. Raises ValueError for a malformed spark:// URL."""
    if not url.startswith("spark://"):
        return []
    out = []
    for part in url.removeprefix("spark://").rstrip("/").split(","):
        host, sep, port = part.rpartition(":")
        if not sep:
            host, port = part, str(DEFAULT_PORT)
        host = host.strip("[]")
        if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"malformed Spark master URL {url!r} (spark://HOST:PORT)")
        out.append((host, int(port)))
    return out


def check_spark_master(url: str | None, timeout: float = 5.0) -> None:
    """Takes a master URL (None: local) and a timeout. Returns when a spark:// master accepts a
    connection (or the URL needs no probe). Raises SparkMasterUnreachable naming the master
    and the cause, or ValueError for a malformed URL."""
    if not url:
        return
    errors = []
    for host, port in master_addresses(url):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                log.info("Spark master %s:%d answers", host, port)
                return
        except OSError as e:
            errors.append(f"{host}:{port}: {e}")
    if errors:
        raise SparkMasterUnreachable(f"Spark master {url} does not answer ({'; '.join(errors)})")
