"""The driver JVM's cached class archive (checkers.class_archive): named by what it fits, written
under a name of its own and put in place after the JVM exits, old ones removed."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark import SparkContext

from checkers import class_archive
from checkers.class_archive import Plan
from checkers.options import CheckOptions


@pytest.fixture
def no_jvm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No JVM running, a java executable and a cache directory of the test's own."""
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(SparkContext, "_gateway", None)
    return java


def test_a_first_check_writes_the_archive_under_a_name_of_its_own(no_jvm: Path) -> None:
    p = class_archive.plan(CheckOptions())
    assert p is not None and p.writing is not None
    assert p.final.parent == class_archive.cache_dir() and p.final.parent.is_dir()
    assert p.final.name.startswith("spark-driver-") and p.final.suffix == ".jsa"
    assert p.writing.name == f"{p.final.name}.{os.getpid()}.part" and p.path == p.writing


def test_a_later_check_maps_the_archive(no_jvm: Path) -> None:
    first = class_archive.plan(CheckOptions())
    assert first is not None
    first.final.write_bytes(b"archive")
    assert class_archive.plan(CheckOptions()) == Plan(first.final)


def test_another_java_pyspark_or_jvm_options_name_another_archive(
        no_jvm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = class_archive.archive_name(no_jvm, CheckOptions())
    assert class_archive.archive_name(no_jvm, CheckOptions(driver_memory="4g")) == name
    assert class_archive.archive_name(no_jvm, CheckOptions(jvm_class_archive=Path("x"))) != name
    monkeypatch.setattr(class_archive.pyspark, "__version__", "0.0.1")
    assert class_archive.archive_name(no_jvm, CheckOptions()) != name
    monkeypatch.undo()
    os.utime(no_jvm, ns=(0, 0))
    assert class_archive.archive_name(no_jvm, CheckOptions()) != name


def test_no_archive_of_the_cache_when_one_is_named_or_a_jvm_runs(
        no_jvm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert class_archive.plan(CheckOptions(jvm_class_archive=Path("/tmp/a.jsa"))) is None
    monkeypatch.setattr(SparkContext, "_gateway", object())
    assert class_archive.plan(CheckOptions()) is None


def test_no_archive_without_java_or_a_usable_cache(no_jvm: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    no_jvm.unlink()
    assert class_archive.plan(CheckOptions()) is None
    no_jvm.write_text("")
    cache = class_archive.cache_dir()
    cache.parent.mkdir(parents=True)
    cache.write_text("a file where the directory goes")
    assert class_archive.plan(CheckOptions()) is None


def test_the_written_archive_is_put_in_place_and_old_ones_removed(no_jvm: Path) -> None:
    p = class_archive.plan(CheckOptions())
    assert p is not None and p.writing is not None
    old = p.final.with_name("spark-driver-0000000000000000.jsa")
    crashed = p.final.with_name(f"{p.final.name}.1.part")
    recent = p.final.with_name("spark-driver-1111111111111111.jsa")
    for f in (old, crashed, recent):
        f.write_bytes(b"x")
    week_ago = time.time() - class_archive.STALE_S - 60
    for f in (old, crashed):
        os.utime(f, (week_ago, week_ago))
    p.writing.write_bytes(b"archive")
    class_archive.keep(p)
    assert p.final.read_bytes() == b"archive" and not p.writing.exists()
    assert sorted(f.name for f in p.final.parent.iterdir()) == sorted([p.final.name, recent.name])


def test_nothing_written_nothing_kept(no_jvm: Path) -> None:
    p = class_archive.plan(CheckOptions())
    assert p is not None
    class_archive.keep(p)
    assert not p.final.exists()
    class_archive.keep(Plan(p.final))  # a check that mapped the archive: nothing to do


def test_keeping_the_archive_ends_the_stopped_contexts_jvm(
        no_jvm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done: list[str] = []

    class Stdin:
        def close(self) -> None:
            done.append("stdin closed")

    class Proc:
        stdin = Stdin()

        def wait(self, timeout: float) -> int:
            done.append("waited")
            return 0

    class Gateway:
        proc = Proc()

        def shutdown(self) -> None:
            done.append("shutdown")

    p = class_archive.plan(CheckOptions())
    assert p is not None and p.writing is not None
    gateway: Any = Gateway()
    monkeypatch.setattr(SparkContext, "_gateway", gateway)
    monkeypatch.setattr(SparkContext, "_jvm", object())
    p.writing.write_bytes(b"archive")
    class_archive.keep(p)
    assert done == ["shutdown", "stdin closed", "waited"]
    assert SparkContext._gateway is None and SparkContext._jvm is None
    assert p.final.read_bytes() == b"archive"
