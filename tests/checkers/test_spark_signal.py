"""A check leaves the caller's Ctrl-C handling alone: pyspark's own SIGINT handler, installed when a
context starts, outlives the context and crashed an interrupted series with a traceback."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import signal, sys
sys.path.insert(0, sys.argv[1])
from checkers.options import CheckOptions
from checkers.spark_session import session

def mine(signum, frame):
    raise SystemExit(7)

signal.signal(signal.SIGINT, mine)
spark, created = session("local[1]", CheckOptions())
assert created
assert signal.getsignal(signal.SIGINT) is mine, signal.getsignal(signal.SIGINT)
spark.stop()
signal.raise_signal(signal.SIGINT)  # pyspark's handler would die on the stopped context
"""


def test_a_spark_session_keeps_the_callers_sigint_handler():
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT)], capture_output=True,
                          text=True, timeout=300, env={"SPARK_LOCAL_IP": "127.0.0.1",
                                                       "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 7, proc.stderr[-3000:]
