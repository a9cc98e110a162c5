"""Fixtures of the checker tests: one Spark session for the whole run, on loopback, small."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from checkers.options import CheckOptions

# Test histories are tiny and jobs many: one shuffle partition, no adaptive re-planning, and
# no code generation (compiling costs more than it saves on a few rows).
TEST_OPTIONS = CheckOptions(
    shuffle_partitions=1,
    driver_memory="1g",
    spark_conf=(("spark.sql.adaptive.enabled", "false"),
                ("spark.sql.codegen.wholeStage", "false"),
                ("spark.sql.codegen.factoryMode", "NO_CODEGEN"),
                ("spark.default.parallelism", "2")),
)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """Returns the session-wide local Spark session (local[2], 127.0.0.1)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from checkers import spark_session

    session, created = spark_session.session("local[2]", TEST_OPTIONS)
    yield session
    if created:
        session.stop()
