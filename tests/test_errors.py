"""Every exception class the project defines derives from its room's one root (issue 22), so a
caller can catch a room's failures with one `except`. Each keeps the built-in base it had
(ValueError, RuntimeError, ...), so what caught it before still does.

A room without a root defines no exception class; the first one it needs brings its root.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from checkers.errors import CheckerError
from clusters.errors import ClusterError
from harness.errors import HarnessError
from nemesis.errors import NemesisError
from workloads.errors import WorkloadError

from .test_architecture import PROJECT, ROOT

ROOTS: dict[str, type[Exception]] = {
    "clusters": ClusterError,
    "workloads": WorkloadError,
    "nemesis": NemesisError,
    "checkers": CheckerError,
    "harness": HarnessError,
}
# Classes not yet under their root (none now). An entry here that is rooted already fails the test.
PENDING: set[str] = set()


def modules(package: str) -> list[str]:
    """Takes a room. Returns the dotted names of its modules (`__main__` left out: importing it
    runs the CLI)."""
    names = []
    for path in sorted((ROOT / package).rglob("*.py")):
        if path.name == "__main__.py":
            continue
        names.append(".".join(Path(path).relative_to(ROOT).with_suffix("").parts)
                     .removesuffix(".__init__"))
    return names


def exceptions(package: str) -> dict[str, type[BaseException]]:
    """Takes a room. Returns every exception class defined in its modules, by dotted name."""
    found = {}
    for name in modules(package):
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if obj.__module__ == name and issubclass(obj, BaseException):
                found[f"{name}.{obj.__qualname__}"] = obj
    return found


@pytest.mark.parametrize("package", PROJECT)
def test_every_exception_derives_from_its_rooms_root(package):
    found = exceptions(package)
    root = ROOTS.get(package)
    if root is None:
        assert not found, (f"{package}/ defines {', '.join(sorted(found))}: give the room a root "
                           "error (ROOTS) and derive them from it")
        return
    assert f"{root.__module__}.{root.__qualname__}" in found, "the root lives in its own room"
    wrong = sorted(n for n, cls in found.items() if not issubclass(cls, root) and n not in PENDING)
    assert not wrong, f"not under {root.__name__}: {', '.join(wrong)}"
    stale = sorted(n for n in PENDING if n in found and issubclass(found[n], root))
    assert not stale, f"rooted now, remove from PENDING: {', '.join(stale)}"


def test_what_callers_caught_before_still_catches():
    from clusters.backend import BackendConfigError, BackendError
    from clusters.releases import ReleaseError
    from clusters.remote import CommandTimeout, RemoteError
    from harness.scenario_file import ScenarioFileError
    from harness.spec import SpecError
    from workloads.clients import ClientError
    from workloads.kinds.base import QueueConfigError

    assert issubclass(CommandTimeout, RemoteError) and issubclass(RemoteError, RuntimeError)
    assert issubclass(BackendError, RemoteError) and issubclass(BackendConfigError, ValueError)
    assert issubclass(ReleaseError, ValueError) and issubclass(ClientError, RuntimeError)
    assert issubclass(QueueConfigError, ValueError) and issubclass(ScenarioFileError, SpecError)
    assert issubclass(SpecError, ValueError)
