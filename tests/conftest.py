"""Shared pytest configuration: puts the project root on sys.path and Spark on loopback, and
gives every test that checks a history one Spark session for the whole run (`spark`)."""

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """Returns the session-wide local Spark session (local[2], 127.0.0.1, small)."""
    from checkers import spark_session
    from checkers.options import CheckOptions

    # Test histories are tiny and jobs many: one shuffle partition, no adaptive re-planning,
    # and no code generation (compiling costs more than it saves on a few rows).
    options = CheckOptions(
        shuffle_partitions=1,
        driver_memory="1g",
        spark_conf=(("spark.sql.adaptive.enabled", "false"),
                    ("spark.sql.codegen.wholeStage", "false"),
                    ("spark.sql.codegen.factoryMode", "NO_CODEGEN"),
                    ("spark.default.parallelism", "2")),
    )
    session, created = spark_session.session("local[2]", options)
    yield session
    if created:
        session.stop()
