"""The power loss's report as data (clusters.lazyfs.report), without a mount: each file's ages
at the cut and their wall-clock times, the words the daemon logs, and an older daemon's answer
(no times) still read."""

from __future__ import annotations

from clusters.lazyfs.report import (
    KEPT_LINES,
    DroppedFile,
    DroppedReport,
    KeptFile,
    SyncedFile,
    SyncedReport,
    Timing,
    timing_text,
    wall_clock,
)

CUT = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def test_wall_clock_is_iso_utc_to_the_millisecond() -> None:
    assert wall_clock(CUT) == "2027-01-15T08:00:00.000Z"
    assert wall_clock(CUT - 12.3456) == "2027-01-15T07:59:47.654Z"


def test_each_event_that_happened_is_written_as_its_age_and_wall_clock_time() -> None:
    t = Timing(first_unsynced=34.5, last_write=0.25, last_sync=None, dir_sync=40.0,
               durable=40.0, durable_by="fsync")
    assert t.to_dict(CUT) == {
        "first_unsynced": {"age_s": 34.5, "at": "2027-01-15T07:59:25.500Z"},
        "last_write": {"age_s": 0.25, "at": "2027-01-15T07:59:59.750Z"},
        "dir_sync": {"age_s": 40.0, "at": "2027-01-15T07:59:20.000Z"},
        "durable": {"age_s": 40.0, "at": "2027-01-15T07:59:20.000Z", "by": "fsync"}}
    assert Timing.from_dict(t.to_dict(CUT)) == t
    assert Timing.from_dict(None) == Timing() and Timing().to_dict(CUT) == {}


def test_the_report_round_trips_and_names_its_oldest_dropped_write() -> None:
    report = DroppedReport(
        (DroppedFile("feature_flags", 762, 762, None, Timing(first_unsynced=33.0, last_write=33.0)),
         DroppedFile("quorum/00000001.wal", 4096, 8192, 4096,
                     Timing(first_unsynced=0.1, last_write=0.0, last_sync=0.1, durable=0.1,
                            durable_by="fsync"))),
        ("create feature_flags",), "ext4, writeback 30 s",
        (KeptFile("cluster_nodes.config", 120, Timing(last_write=50.0, durable=12.0,
                                                      durable_by="writeback")),),
        CUT, 61.0, 0.1)
    data = report.to_dict()
    assert (data["oldest_unsynced_s"], data["cut_at"], data["mounted_s"]) == (
        33.0, "2027-01-15T08:00:00.000Z", 61.0)
    assert data["kept"][0]["timing"]["durable"] == {
        "age_s": 12.0, "at": "2027-01-15T07:59:48.000Z", "by": "writeback"}
    assert DroppedReport.from_dict(data) == report


def test_an_older_daemons_answer_without_times_is_read_as_times_unknown() -> None:
    old = {"bytes": 3, "files": 1, "namespace": [], "model": "ext4", "paths": [
        {"path": "a", "bytes": 3, "size_before": 3, "size_after": 0}]}
    report = DroppedReport.from_dict(old)
    assert report.files[0].timing == Timing() and report.kept == ()
    assert (report.cut_at, report.mounted_s, report.oldest_unsynced_s) == (0.0, None, None)


def test_the_lines_say_what_was_dropped_and_kept_and_when() -> None:
    kept = tuple(KeptFile(f"k{i}", 1, Timing(last_write=float(i))) for i in range(KEPT_LINES + 2))
    report = DroppedReport(
        (DroppedFile("ff", 4, 4, 0, Timing(first_unsynced=33.0, last_write=33.0,
                                           written_back=2.0)),),
        (), "ext4, writeback 30 s", kept, CUT, 60.0, None)
    lines = report.lines()
    assert lines[0] == ("power loss at 2027-01-15T08:00:00.000Z (ext4, writeback 30 s; mounted "
                        "60.0 s before the cut, journal last committed never since the mount): "
                        "4 unsynced bytes in 1 files dropped, 0 namespace changes undone, "
                        f"{KEPT_LINES + 2} files written since kept whole")
    assert lines[1] == ("dropped ff: 4 B (size 4 -> 0); first unsynced write 33.0 s before the "
                        "cut, last write 33.0 s before the cut, last fsync never since the "
                        "mount, directory fsync never since the mount, written back 2.0 s "
                        "before the cut (not committed), data durable never since the mount")
    assert lines[2].startswith("kept k0 (1 B): last write 0.0 s before the cut")
    assert len(lines) == 2 + KEPT_LINES + 1 and lines[-1] == "kept 2 more files"
    assert timing_text(Timing(durable=1.0, durable_by="fsync")).endswith(
        "data durable 1.0 s before the cut (fsync)")


def test_the_sync_report_round_trips_and_counts_what_it_wrote_back() -> None:
    report = SyncedReport((SyncedFile("feature_flags", 762), SyncedFile("vhosts/x/.config", 31),
                           SyncedFile(None, 3)),
                          ("create vhosts/x/.config", "rename a -> b"), "ext4, writeback 30 s")
    assert (report.bytes, report.file_count) == (796, 3)
    data = report.to_dict()
    assert (data["bytes"], data["files"], data["model"]) == (796, 3, "ext4, writeback 30 s")
    assert data["paths"][2] == {"path": None, "bytes": 3}
    assert SyncedReport.from_dict(data) == report
    assert SyncedReport.from_dict({}) == SyncedReport()
    assert report.lines() == [
        "sync (ext4, writeback 30 s): 796 unsynced bytes in 3 files written back, 2 namespace "
        "changes committed",
        "synced feature_flags: 762 B", "synced vhosts/x/.config: 31 B", "synced (unlinked): 3 B"]
