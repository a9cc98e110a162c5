"""A real Spark standalone cluster checks a stored run exactly as local mode does.

Starts a master and one worker from pyspark's own `spark-class` on 127.0.0.1
with free ports, runs `python -m harness check RUN --spark-master
spark://127.0.0.1:PORT` on a copy of the fixture run, meanwhile the same
command (`harness.cli.main`) in local mode on another copy, in this process
with the test session's Spark (tests/conftest.py: a driver JVM already warm,
where a second `python -m harness check` started and warmed one of its own),
and compares the two results.json field by field. The
two checks differ in where Spark runs and in its tuning (the cluster's check
has the defaults of checkers.spark_session; the test session has one shuffle
partition and no code generation): neither may change a verdict. The history
reaches the executors by its path: master, worker and driver share this
machine's filesystem, as a real cluster must share the store (see README).
Both JVMs are stopped by their pids.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest

from clusters.remote import spawn_local
from clusters.spark_master import SparkMasterUnreachable, check_spark_master
from harness.cli import main

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_RUN = ROOT / "tests" / "harness" / "fixtures" / "run"
SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"


@dataclass(frozen=True)
class Standalone:
    """A running standalone cluster: the master URL and the pids to stop."""

    url: str
    ui: str
    pids: tuple[int, ...]


def free_port() -> int:
    """Returns a TCP port free on 127.0.0.1 just now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(pred, what: str, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {timeout:.0f}s; log: "
                               f"{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.5)


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _alive_workers(ui: str) -> int:
    try:
        with urllib.request.urlopen(f"{ui}/json/", timeout=2) as r:
            return int(json.load(r).get("aliveworkers", 0))
    except OSError:
        return 0


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory) -> Iterator[Standalone]:
    if not SPARK_CLASS.exists():
        pytest.skip(f"no {SPARK_CLASS}")
    d = tmp_path_factory.mktemp("spark")
    env = {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_LOG_DIR": str(d), "SPARK_WORKER_DIR": str(d / "work"),
           "SPARK_DAEMON_MEMORY": "512m", "PYSPARK_PYTHON": sys.executable}
    port, ui_port = free_port(), free_port()
    pids: list[int] = []
    try:
        pids.append(spawn_local(
            [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(ui_port)],
            env=env, log_path=str(d / "master.log")))
        _wait(lambda: _answers(port), "the master did not listen", 90, d / "master.log")
        url, ui = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}"
        pids.append(spawn_local(
            [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", url, "--host",
             "127.0.0.1", "--port", str(free_port()), "--webui-port", str(free_port()),
             "--cores", "2", "--memory", "2g", "--work-dir", str(d / "work")],
            env=env, log_path=str(d / "worker.log")))
        _wait(lambda: _alive_workers(ui) == 1, "the worker did not register", 90,
              d / "worker.log")
        yield Standalone(url, ui, tuple(pids))
    finally:
        for pid in reversed(pids):
            _stop(pid)


def _start_check(run: Path, *extra: str) -> subprocess.Popen[str]:
    """Starts `python -m harness check RUN EXTRA...` in a process of its own (its own driver);
    returns it (stdout and stderr piped)."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen([sys.executable, "-m", "harness", "check", str(run), *extra],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _finish(p: subprocess.Popen[str]) -> tuple[int, str]:
    """Waits for a check started by `_start_check` (10 minutes at most). Returns its exit code
    and stderr."""
    try:
        _, err = p.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        raise
    return p.returncode, err


def _copy_run(dest: Path) -> Path:
    shutil.copytree(FIXTURE_RUN, dest)
    (dest / "results.json").unlink()
    return dest


def test_a_standalone_cluster_gives_the_results_of_local_mode(standalone, spark, tmp_path):
    check_spark_master(standalone.url)  # answers
    on_cluster, local = _copy_run(tmp_path / "cluster"), _copy_run(tmp_path / "local")
    assert spark.sparkContext.master.startswith("local")
    p = _start_check(on_cluster, "--spark-master", standalone.url)
    try:
        local_code = main(["check", str(local)])  # local mode, in this process's session
    except BaseException:
        p.kill()
        p.communicate()
        raise
    code, err = _finish(p)
    assert code == 1, err[-3000:]  # the fixture holds real anomalies
    assert local_code == 1
    with urllib.request.urlopen(f"{standalone.ui}/json/", timeout=5) as r:
        apps = json.load(r).get("completedapps", [])
    assert any(a.get("name") == "checkers" for a in apps), "the check did not run on the cluster"
    a = json.loads((on_cluster / "results.json").read_text())
    b = json.loads((local / "results.json").read_text())
    # Every section both ways; issue 19 added informational ones (faults, fates, incidents, ...).
    assert sorted(a) == sorted(b)
    assert {"mends", "ordering", "perf", "queue", "run", "valid", "fates", "incidents"} <= set(a)
    for section in sorted(a):
        if isinstance(a[section], dict):
            for key in sorted(set(a[section]) | set(b[section])):
                assert a[section].get(key) == b[section].get(key), f"{section}.{key} differs"
        else:
            assert a[section] == b[section], section
    assert a == b
    assert a["queue"]["lost_count"] > 0  # the fixture's two lost messages, found on both


def test_a_master_that_does_not_answer_is_named_at_once(standalone):
    dead = f"spark://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(SparkMasterUnreachable, match=f"Spark master {dead} does not answer"):
        check_spark_master(dead, timeout=2)
    assert time.monotonic() - t0 < 5
    check_spark_master(f"spark://127.0.0.1:{free_port()},{standalone.url[8:]}")  # a standby up
