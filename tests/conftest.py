"""Shared pytest configuration: puts the project root on sys.path and Spark on loopback, gives
every test that checks a history one Spark session for the whole run (`spark`), and runs the
long modules first (`pytest_collection_modifyitems`)."""

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


def module_rank(items: list[pytest.Item]) -> int:
    """Takes one module's collected tests. Returns its place in the run: 0 when a test is marked
    slow, else 1 when one is marked spark (a check costs seconds of the JVM), else 2."""
    marks = {m.name for item in items for m in item.iter_markers()}
    return 0 if "slow" in marks else 1 if "spark" in marks else 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker: runs the modules with slow tests first, then those with Spark
    tests, then the rest, each group in collection order and each module's tests together in
    their order. A run in one process (the integration pass, a test run by hand) keeps the
    collection order.

    `make test` hands whole modules to its processes in this order (scripts/test.sh: --dist
    loadfile --no-loadscope-reorder). By default xdist hands out the modules with the most tests
    first, which left the few-test, minutes-long modules (the standalone Spark cluster, the
    property tests) to the end, one process running them while the other had nothing left.
    Long first, the many short modules at the end keep both processes busy to the end."""
    if not hasattr(config, "workerinput"):
        return
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    ordered = sorted(modules.values(), key=module_rank)  # stable: collection order within a rank
    items[:] = [item for module in ordered for item in module]


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
