"""Tests of the byte-range set and of one file's undo record, on a plain file (no FUSE)."""

from __future__ import annotations

import os

from clusters.lazyfs.extents import Extents
from clusters.lazyfs.record import FileRecord
from clusters.lazyfs.report import DroppedFile, DroppedReport


def by_path(report: DroppedReport) -> dict[str, DroppedFile]:
    return {f.path: f for f in report.files}


def ranges(extents: Extents) -> list[tuple[int, int]]:
    return list(extents)


def test_ranges_merge_when_they_touch_or_overlap_and_stay_apart_otherwise():
    e = Extents()
    for start, end in [(10, 20), (30, 40), (20, 25), (50, 60), (35, 52), (0, 0), (5, 6)]:
        e.add(start, end)
    assert ranges(e) == [(5, 6), (10, 25), (30, 60)]
    assert e.total() == 1 + 15 + 30


def test_appends_extend_the_last_range():
    e = Extents()
    for n in range(100):
        e.add(n * 4096, (n + 1) * 4096)
    assert ranges(e) == [(0, 409600)]


def test_gaps_are_the_uncovered_parts_of_a_range():
    e = Extents()
    e.add(10, 20)
    e.add(30, 40)
    assert e.gaps(0, 50) == [(0, 10), (20, 30), (40, 50)]
    assert e.gaps(12, 18) == []
    assert e.gaps(15, 35) == [(20, 30)]
    assert e.gaps(40, 45) == [(40, 45)]
    assert Extents().gaps(3, 7) == [(3, 7)]


def test_clip_drops_everything_past_a_size():
    e = Extents()
    e.add(0, 10)
    e.add(20, 30)
    e.add(40, 50)
    e.clip(25)
    assert ranges(e) == [(0, 10), (20, 25)]
    e.clip(20)
    assert ranges(e) == [(0, 10)]
    e.clip(0)
    assert not e


def test_a_record_restores_overwritten_bytes_and_the_durable_size(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"a" * 100)
    fd = os.open(path, os.O_RDWR)
    try:
        record = FileRecord.open(fd)
        record.before_write(90, 20)
        os.pwrite(fd, b"b" * 20, 90)
        record.before_write(95, 10)  # the same durable bytes again: saved once
        os.pwrite(fd, b"c" * 10, 95)
        assert record.saved_bytes() == 10
        record.before_truncate(50)
        os.ftruncate(fd, 50)
        done = record.rollback()
        record.close()
    finally:
        os.close(fd)
    assert path.read_bytes() == b"a" * 100
    assert (done.bytes, done.size_before, done.size_after) == (0, 50, 100)


def test_a_record_keeps_saved_zeros_as_a_length(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(bytes(1 << 20))
    fd = os.open(path, os.O_RDWR)
    try:
        record = FileRecord.open(fd)
        record.before_write(0, 1 << 20)
        os.pwrite(fd, b"x" * (1 << 20), 0)
        assert record.saved_bytes() == 0
        assert record.rollback().bytes == 1 << 20
        record.close()
    finally:
        os.close(fd)
    assert path.read_bytes() == bytes(1 << 20)


def test_a_report_round_trips_through_plain_data():
    report = DroppedReport((DroppedFile("a", 5, 10, 5), DroppedFile("b/c", 3, 3, None)),
                           ("create b/c",))
    data = report.to_dict()
    assert data["bytes"] == 8 and data["files"] == 2
    assert DroppedReport.from_dict(data) == report
    assert by_path(report)["b/c"].vanished and not by_path(report)["a"].vanished
