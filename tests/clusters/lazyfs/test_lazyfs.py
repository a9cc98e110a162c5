"""Tests of the lazyfs layer on real FUSE mounts: what a power loss keeps and drops, what it
reports, and what unmounting leaves in the backing directory.

Each test mounts a layer over `tmp_path/backing` on `tmp_path/mnt` (a daemon of its own), acts
through the mountpoint, and unmounts; the fixture checks that nothing stays mounted. They need
root and /dev/fuse, and are skipped, saying so, only where either is missing.
"""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clusters.lazyfs import LazyFS, LazyFSError, daemon_command, mount, mounted
from clusters.lazyfs.journal import TRASH
from clusters.lazyfs.report import DroppedFile, DroppedReport, wall_clock

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
    reason="mounting a FUSE filesystem needs root and /dev/fuse")


def by_path(report: DroppedReport) -> dict[str, DroppedFile]:
    return {f.path: f for f in report.files}


@dataclass
class Layer:
    fs: LazyFS
    backing: Path
    mnt: Path


def _layer(tmp_path: Path, metadata: str, sync: str = "inline", auto_da_alloc: bool = True,
           writeback_expire_s: float | None = 30.0) -> Generator[Layer, None, None]:
    # The model's clock is manual: it stands still (no writeback, no periodic commit) unless a
    # test moves it with `fs.advance`, so that a loaded machine never makes one happen.
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    (backing / "durable").write_bytes(b"D" * 100)  # there before the mount: durable
    fs = mount(backing, mnt, metadata=metadata, sync=sync,  # type: ignore[arg-type]
               auto_da_alloc=auto_da_alloc, writeback_expire_s=writeback_expire_s,
               clock="manual")
    try:
        yield Layer(fs, backing, mnt)
    finally:
        if fs.process.poll() is None:
            fs.unmount()
        assert not mounted(mnt)
        assert not (backing / os.fsdecode(TRASH)).exists()


@pytest.fixture
def layer(tmp_path: Path) -> Iterator[Layer]:
    yield from _layer(tmp_path, "ext4")


@pytest.fixture
def strict(tmp_path: Path) -> Iterator[Layer]:
    yield from _layer(tmp_path, "strict")


@pytest.fixture
def threaded(tmp_path: Path) -> Iterator[Layer]:
    yield from _layer(tmp_path, "ext4", "thread")


@pytest.fixture
def no_da_alloc(tmp_path: Path) -> Iterator[Layer]:
    yield from _layer(tmp_path, "ext4", auto_da_alloc=False)


@pytest.fixture
def no_writeback(tmp_path: Path) -> Iterator[Layer]:
    yield from _layer(tmp_path, "ext4", writeback_expire_s=None)


def write(path: Path, data: bytes, *, sync: str = "", flags: int = 0, mode: str = "a") -> None:
    """Writes `data` to the file (appending, or from the start with mode "w"), then fsyncs or
    fdatasyncs it as `sync` says."""
    base = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "a" else os.O_TRUNC)
    fd = os.open(path, base | flags, 0o644)
    try:
        os.write(fd, data)
        if sync == "fsync":
            os.fsync(fd)
        elif sync == "fdatasync":
            os.fdatasync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tree(root: Path) -> dict[str, bytes | None]:
    """Returns every file under root with its content (None for a directory)."""
    found: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        found[str(path.relative_to(root))] = None if path.is_dir() else path.read_bytes()
    return found


def test_written_and_fsynced_survives_a_power_loss(layer):
    write(layer.mnt / "f", b"hello", sync="fsync")
    report = layer.fs.power_loss()
    assert (layer.mnt / "f").read_bytes() == b"hello"
    assert report.files == () and report.namespace == ()


def test_written_not_synced_is_gone_the_file_back_to_its_synced_content(layer):
    write(layer.mnt / "f", b"synced", sync="fsync")
    write(layer.mnt / "f", b"+later")
    with open(layer.mnt / "durable", "r+b") as f:  # an overwrite inside the durable bytes
        f.seek(10)
        f.write(b"xxxx")
    report = layer.fs.power_loss()
    assert (layer.mnt / "f").read_bytes() == b"synced"
    assert (layer.mnt / "durable").read_bytes() == b"D" * 100
    assert {p: (f.bytes, f.size_before, f.size_after) for p, f in by_path(report).items()} == {
        "f": (6, 12, 6), "durable": (4, 100, 100)}


def test_reads_see_unsynced_writes_before_the_fault(layer):
    write(layer.mnt / "durable", b"tail")
    with open(layer.mnt / "durable", "r+b") as f:
        f.write(b"head")
    assert (layer.mnt / "durable").read_bytes() == b"head" + b"D" * 96 + b"tail"
    assert os.stat(layer.mnt / "durable").st_size == 104
    assert layer.fs.pending()["bytes"] == 8


@pytest.mark.parametrize("flag", [os.O_SYNC, os.O_DSYNC], ids=["O_SYNC", "O_DSYNC"])
def test_a_synchronous_write_survives(layer, flag):
    write(layer.mnt / "durable", b"sync!", flags=flag)
    write(layer.mnt / "durable", b"lost")
    report = layer.fs.power_loss()
    assert (layer.mnt / "durable").read_bytes() == b"D" * 100 + b"sync!"
    assert by_path(report)["durable"].bytes == 4


def test_fdatasync_makes_data_durable(layer):
    write(layer.mnt / "durable", b"data", sync="fdatasync")
    layer.fs.power_loss()
    assert (layer.mnt / "durable").read_bytes() == b"D" * 100 + b"data"


def test_a_file_created_and_never_synced_disappears(layer):
    (layer.mnt / "dir").mkdir()
    write(layer.mnt / "dir" / "new", b"12345")
    write(layer.mnt / "empty", b"")
    report = layer.fs.power_loss()
    assert sorted(os.listdir(layer.mnt)) == ["durable"]
    assert {p: (f.bytes, f.vanished) for p, f in by_path(report).items()} == {
        "dir/new": (5, True), "empty": (0, True)}
    assert report.namespace == ("create empty", "create dir/new", "create dir")


def test_ext4_any_fsync_commits_every_earlier_namespace_change(layer):
    write(layer.mnt / "a", b"a-data")
    os.rename(layer.mnt / "durable", layer.mnt / "renamed")
    write(layer.mnt / "b", b"b-data", sync="fsync")  # commits the journal, not a's data
    os.unlink(layer.mnt / "b")  # after the commit: undone
    report = layer.fs.power_loss()
    assert tree(layer.mnt) == {"a": b"", "b": b"b-data", "renamed": b"D" * 100}
    assert report.namespace == ("remove b",)
    assert by_path(report)["a"].bytes == 6


def test_ext4_a_rename_without_any_fsync_is_undone(layer):
    write(layer.mnt / "tmp", b"new", sync="fsync")
    os.rename(layer.mnt / "tmp", layer.mnt / "durable")  # replaces it
    assert (layer.mnt / "durable").read_bytes() == b"new"
    report = layer.fs.power_loss()
    assert tree(layer.mnt) == {"durable": b"D" * 100, "tmp": b"new"}
    assert report.namespace == ("rename tmp -> durable",)


def test_ext4_a_rename_then_directory_fsync_is_durable(layer):
    (layer.mnt / "d").mkdir()
    fsync_dir(layer.mnt)
    os.rename(layer.mnt / "durable", layer.mnt / "d" / "moved")
    fsync_dir(layer.mnt / "d")
    layer.fs.power_loss()
    assert tree(layer.mnt) == {"d": None, "d/moved": b"D" * 100}


def test_strict_a_create_is_durable_only_once_its_directory_is_fsynced(strict):
    write(strict.mnt / "kept", b"k", sync="fsync")
    write(strict.mnt / "lost", b"l", sync="fsync")
    fd = os.open(strict.mnt, os.O_RDONLY | os.O_DIRECTORY)
    os.close(fd)
    report = strict.fs.power_loss()
    assert sorted(os.listdir(strict.mnt)) == ["durable"]  # fsyncing a file never made its name
    assert {f.path for f in report.files} == {"kept", "lost"}
    write(strict.mnt / "kept", b"k", sync="fsync")
    fsync_dir(strict.mnt)
    strict.fs.power_loss()
    assert tree(strict.mnt) == {"durable": b"D" * 100, "kept": b"k"}


def test_strict_a_rename_is_durable_once_a_directory_it_changes_is_fsynced(strict):
    (strict.mnt / "d").mkdir()
    fsync_dir(strict.mnt)
    os.rename(strict.mnt / "durable", strict.mnt / "d" / "moved")
    (strict.mnt / "d" / "moved").open("rb").close()
    fd = os.open(strict.mnt / "d" / "moved", os.O_RDONLY)
    os.fsync(fd)  # the file, not a directory: the rename stays undone
    os.close(fd)
    strict.fs.power_loss()
    assert tree(strict.mnt) == {"d": None, "durable": b"D" * 100}
    os.rename(strict.mnt / "durable", strict.mnt / "d" / "moved")
    fsync_dir(strict.mnt / "d")
    strict.fs.power_loss()
    assert tree(strict.mnt) == {"d": None, "d/moved": b"D" * 100}


def test_strict_a_directory_never_made_durable_takes_its_files_along(strict):
    (strict.mnt / "d").mkdir()
    write(strict.mnt / "d" / "f", b"x", sync="fsync")
    fsync_dir(strict.mnt / "d")  # d/f is durable in d, but d itself is not in the root
    report = strict.fs.power_loss()
    assert sorted(os.listdir(strict.mnt)) == ["durable"]
    assert report.namespace == ("create d",)


def test_an_unsynced_unlink_is_undone_with_the_file_intact(layer):
    write(layer.mnt / "durable", b"more")
    os.unlink(layer.mnt / "durable")
    assert not (layer.mnt / "durable").exists()
    report = layer.fs.power_loss()
    assert (layer.mnt / "durable").read_bytes() == b"D" * 100
    assert report.namespace == ("remove durable",)
    assert by_path(report)["durable"].bytes == 4


def test_an_unsynced_truncation_is_undone(layer):
    os.truncate(layer.mnt / "durable", 10)
    with open(layer.mnt / "durable", "r+b") as f:
        f.truncate(3)
        f.write(b"abc")
    assert (layer.mnt / "durable").read_bytes() == b"abc"
    report = layer.fs.power_loss()
    assert (layer.mnt / "durable").read_bytes() == b"D" * 100
    assert by_path(report)["durable"].size_before == 3


def test_the_report_counts_bytes_and_files_exactly(layer):
    (layer.mnt / "q").mkdir()
    fsync_dir(layer.mnt)
    write(layer.mnt / "q" / "a", b"x" * 1000, sync="fsync")
    with open(layer.mnt / "q" / "a", "r+b") as f:
        f.seek(500)
        f.write(b"y" * 1000)  # 500 over durable bytes, 500 past them
        f.seek(400)
        f.write(b"z" * 200)  # 100 new, 100 already counted
    write(layer.mnt / "q" / "b", b"b" * 4096)
    write(layer.mnt / "durable", b"t" * 7)
    report = layer.fs.power_loss()
    assert {p: (f.bytes, f.size_before, f.size_after) for p, f in by_path(report).items()} == {
        "q/a": (1100, 1500, 1000), "q/b": (4096, 4096, None), "durable": (7, 107, 100)}
    assert (report.bytes, report.file_count) == (1100 + 4096 + 7, 3)
    assert (layer.mnt / "q" / "a").read_bytes() == b"x" * 1000


def test_a_second_power_loss_drops_only_what_came_after_the_first(layer):
    write(layer.mnt / "durable", b"1")
    first = layer.fs.power_loss()
    fd = os.open(layer.mnt / "durable", os.O_WRONLY | os.O_APPEND)  # open across the next one
    os.write(fd, b"22")
    os.fsync(fd)
    os.write(fd, b"333")
    second = layer.fs.power_loss()
    os.close(fd)
    assert (first.bytes, second.bytes) == (1, 3)
    assert (layer.mnt / "durable").read_bytes() == b"D" * 100 + b"22"


def _chunk(n: int) -> bytes:
    return hashlib.sha256(b"%d" % n).digest() * (1 << 15)  # 1 MiB


@pytest.mark.slow
def test_large_sequential_writes_stay_correct(layer):
    path = layer.mnt / "big"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for n in range(67):  # 64 MiB synced (every 8th chunk), 3 MiB not
            os.write(fd, _chunk(n))
            if n % 8 == 7:
                os.fsync(fd)
    finally:
        os.close(fd)
    assert os.stat(path).st_size == 67 << 20
    report = layer.fs.power_loss()
    assert by_path(report)["big"].bytes == 3 << 20
    with open(path, "rb") as f:
        chunks = iter(lambda: f.read(1 << 20), b"")
        assert all(chunk == _chunk(n) for n, chunk in enumerate(chunks))
    assert os.stat(path).st_size == 64 << 20


def test_unmount_leaves_the_backing_holding_exactly_the_synced_state(layer):
    (layer.mnt / "q").mkdir()
    write(layer.mnt / "q" / "seg", b"synced", sync="fsync")
    write(layer.mnt / "q" / "seg", b"-not")
    write(layer.mnt / "q" / "tmp", b"never synced")
    os.unlink(layer.mnt / "durable")
    report = layer.fs.unmount()
    assert not mounted(layer.mnt)
    assert tree(layer.backing) == {"durable": b"D" * 100, "q": None, "q/seg": b"synced"}
    assert (report.bytes, report.file_count) == (4 + 12, 2)


def test_the_trash_is_hidden_from_the_broker(layer):
    os.unlink(layer.mnt / "durable")
    assert os.listdir(layer.mnt) == []
    assert not (layer.mnt / os.fsdecode(TRASH)).exists()
    with pytest.raises(PermissionError):
        (layer.mnt / os.fsdecode(TRASH)).mkdir()


def test_renaming_a_directory_keeps_its_children_reachable(layer):
    (layer.mnt / "a" / "b").mkdir(parents=True)
    write(layer.mnt / "a" / "b" / "f", b"x", sync="fsync")
    os.rename(layer.mnt / "a", layer.mnt / "c")
    assert (layer.mnt / "c" / "b" / "f").read_bytes() == b"x"
    write(layer.mnt / "c" / "b" / "f", b"y", sync="fsync")
    layer.fs.power_loss()
    assert tree(layer.mnt) == {"c": None, "c/b": None, "c/b/f": b"xy", "durable": b"D" * 100}


def test_rename_keeps_posix_errors(layer):
    (layer.mnt / "d").mkdir()
    (layer.mnt / "d" / "x").write_bytes(b"")
    with pytest.raises(OSError) as caught:
        os.rename(layer.mnt / "durable", layer.mnt / "d")
    assert caught.value.errno == errno.EISDIR
    (layer.mnt / "e").mkdir()
    with pytest.raises(OSError) as caught:
        os.rename(layer.mnt / "e", layer.mnt / "d")
    assert caught.value.errno == errno.ENOTEMPTY
    with pytest.raises(OSError) as caught:
        os.rename(layer.mnt / "d", layer.mnt / "d" / "inside")
    assert caught.value.errno == errno.EINVAL
    assert tree(layer.mnt) == {"d": None, "d/x": b"", "durable": b"D" * 100, "e": None}


def test_a_mount_that_fails_raises_and_leaves_nothing_mounted(tmp_path):
    backing = tmp_path / "backing"
    backing.mkdir()
    with pytest.raises(LazyFSError, match="not a directory"):
        mount(backing, tmp_path / "missing")
    inside = backing / "mnt"
    inside.mkdir()
    with pytest.raises(LazyFSError, match="must not contain each other"):
        mount(backing, inside)
    assert not mounted(inside) and not mounted(tmp_path / "missing")


def test_strict_unsynced_data_in_a_directory_that_vanishes_is_reported_vanished(strict):
    (strict.mnt / "d").mkdir()
    write(strict.mnt / "d" / "f", b"x", sync="fsync")
    fsync_dir(strict.mnt / "d")
    write(strict.mnt / "d" / "f", b"yz")
    report = strict.fs.power_loss()
    assert [(f.path, f.bytes, f.size_before, f.vanished) for f in report.files] == [
        ("d/f", 2, 3, True)]


def test_a_daemon_that_mounted_but_cannot_serve_unmounts_and_exits_2(tmp_path):
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    argv = daemon_command(backing, mnt, tmp_path / "no-such-dir" / "control.sock")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 2, done.stderr
    assert "cannot serve" in done.stderr
    assert not mounted(mnt)
    assert os.listdir(backing) == []


def test_posix_fallocate_falls_back_to_writes_the_layer_records(layer):
    fd = os.open(layer.mnt / "seg", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, 128 << 10)  # no fallocate through FUSE: glibc writes zeros
        os.pwrite(fd, b"entry", 4096)
        os.fsync(fd)
        os.pwrite(fd, b"later", 8192)
    finally:
        os.close(fd)
    report = layer.fs.power_loss()
    data = (layer.mnt / "seg").read_bytes()
    assert len(data) == 128 << 10 and data[4096:4101] == b"entry" and data[8192:8197] == bytes(5)
    assert by_path(report)["seg"].bytes == 5


def test_syncing_in_worker_threads_keeps_the_same_promises(threaded):
    write(threaded.mnt / "f", b"synced", sync="fsync")
    write(threaded.mnt / "durable", b"sync!", flags=os.O_DSYNC)
    (threaded.mnt / "d").mkdir()
    fsync_dir(threaded.mnt / "d")
    write(threaded.mnt / "d" / "g", b"lost")
    report = threaded.fs.power_loss()
    assert tree(threaded.mnt) == {"d": None, "durable": b"D" * 100 + b"sync!", "f": b"synced"}
    assert (report.bytes, report.file_count) == (4, 1)


def commit(layer: Layer) -> None:
    """Commits the ext4 journal, as any fsync does: here, of a file of its own."""
    write(layer.mnt / "other", b"o", sync="fsync")


def test_auto_da_alloc_a_file_created_then_rewritten_survives_the_next_commit(layer):
    # RabbitMQ 3.10's list of enabled feature flags: written at boot into a new file, then
    # rewritten in place (open with O_TRUNC, write, close), never fsynced.
    write(layer.mnt / "ff", b"[a].", mode="w")
    commit(layer)  # its creation is durable, its data not (a new file: no heuristic)
    write(layer.mnt / "ff", b"[a,b].", mode="w")
    commit(layer)  # the rewrite was closed before: this commit writes it
    report = layer.fs.power_loss()
    assert (layer.mnt / "ff").read_bytes() == b"[a,b]."
    assert "ff" not in by_path(report)


def test_without_auto_da_alloc_the_same_file_comes_back_empty(no_da_alloc):
    write(no_da_alloc.mnt / "ff", b"[a].", mode="w")
    commit(no_da_alloc)
    write(no_da_alloc.mnt / "ff", b"[a,b].", mode="w")
    commit(no_da_alloc)
    report = no_da_alloc.fs.power_loss()
    # What the first real power-loss run's n1 read: {ok, []} from an empty file.
    assert (no_da_alloc.mnt / "ff").read_bytes() == b""
    assert by_path(report)["ff"].size_after == 0


def test_auto_da_alloc_makes_nothing_durable_before_a_commit(layer):
    write(layer.mnt / "durable", b"new", mode="w")
    report = layer.fs.power_loss()
    assert (layer.mnt / "durable").read_bytes() == b"D" * 100
    assert by_path(report)["durable"].size_before == 3


@pytest.mark.parametrize(("auto_da_alloc", "kept"), [(True, b"new"), (False, b"")],
                         ids=["on", "off"])
def test_auto_da_alloc_a_rename_over_a_file_carries_the_new_files_data(tmp_path, auto_da_alloc,
                                                                        kept):
    layers = _layer(tmp_path, "ext4", auto_da_alloc=auto_da_alloc)
    fs = next(layers)
    try:
        write(fs.mnt / "tmp", b"new")  # never fsynced
        os.rename(fs.mnt / "tmp", fs.mnt / "durable")  # replaces it
        commit(fs)  # commits the rename (and, with the heuristic, tmp's data before it)
        fs.fs.power_loss()
        assert tree(fs.mnt) == {"durable": kept, "other": b"o"}
    finally:
        layers.close()  # unmounts, and checks nothing stays mounted


def test_auto_da_alloc_a_rename_to_a_new_name_is_no_replacement(layer):
    write(layer.mnt / "tmp", b"new")
    os.rename(layer.mnt / "tmp", layer.mnt / "fresh")
    commit(layer)
    layer.fs.power_loss()
    assert (layer.mnt / "fresh").read_bytes() == b""


def test_auto_da_alloc_what_comes_after_the_close_is_data_as_before(layer):
    write(layer.mnt / "durable", b"new", mode="w")  # truncated, rewritten, closed
    write(layer.mnt / "durable", b"+more")  # an append after the close: no heuristic
    commit(layer)
    report = layer.fs.power_loss()
    assert (layer.mnt / "durable").read_bytes() == b"new"
    assert {p: (f.bytes, f.size_before, f.size_after) for p, f in by_path(report).items()} == {
        "durable": (5, 8, 3)}


def test_auto_da_alloc_the_tied_data_and_what_followed_both_roll_back(layer):
    write(layer.mnt / "durable", b"new", mode="w")
    with open(layer.mnt / "durable", "r+b") as f:  # an overwrite of the tied bytes, unclosed
        f.write(b"N")
        f.flush()
        assert layer.fs.pending()["files"] == 1
        report = layer.fs.power_loss()
    assert (layer.mnt / "durable").read_bytes() == b"D" * 100
    assert {p: (f.bytes, f.size_before, f.size_after) for p, f in by_path(report).items()} == {
        "durable": (4, 3, 100)}


def test_strict_has_no_auto_da_alloc(strict):
    fsync_dir(strict.mnt)
    write(strict.mnt / "durable", b"new", mode="w")
    write(strict.mnt / "other", b"o", sync="fsync")
    fsync_dir(strict.mnt)
    strict.fs.power_loss()
    assert (strict.mnt / "durable").read_bytes() == b"D" * 100


def test_the_daemon_models_auto_da_alloc_unless_told_off(tmp_path):
    from clusters.lazyfs.daemon import parse

    on = daemon_command(tmp_path / "b", tmp_path / "m", tmp_path / "c")
    assert "--auto-da-alloc" in on and parse(on[3:]).auto_da_alloc is True
    off = daemon_command(tmp_path / "b", tmp_path / "m", tmp_path / "c", auto_da_alloc=False)
    assert parse(off[3:]).auto_da_alloc is False
    assert parse(["--backing", "b", "--mountpoint", "m", "--control", "c"]).auto_da_alloc


# -- writeback: the mount's manual clock starts at 0; the flusher's passes at 5, 10, ...; the
# periodic commit 5 s after the running transaction's first change; the expiry is 30 s.

@pytest.mark.parametrize(("now", "kept"), [(39.9, b""), (40.0, b"[a].")])
def test_writeback_a_file_never_fsynced_is_durable_after_expiry_pass_and_commit(layer, now,
                                                                                kept):
    layer.fs.advance(1)
    write(layer.mnt / "ff", b"[a].", mode="w")  # created, written, closed at 1: never fsynced
    # Dirty since 1: the pass at 35 is the first at or after 31 and begins a transaction,
    # committed at 40 (the file's creation was, at 6).
    layer.fs.advance(now - 1)
    report = layer.fs.power_loss()
    assert (layer.mnt / "ff").read_bytes() == kept
    assert report.model == "ext4, writeback 30 s"
    if not kept:  # its creation was committed at 6 (the periodic commit), its data not
        assert by_path(report)["ff"].size_after == 0


@pytest.mark.parametrize(("now", "kept"), [(34.9, b""), (35.0, b"[a].")])
def test_writeback_any_fsync_after_the_pass_commits_it(layer, now, kept):
    layer.fs.advance(1)
    write(layer.mnt / "ff", b"[a].", mode="w")
    layer.fs.advance(now - 1)
    commit(layer)  # an fsync of another file: the journal commits what the pass wrote back
    layer.fs.power_loss()
    assert (layer.mnt / "ff").read_bytes() == kept


def test_writeback_writes_a_file_as_of_the_pass_and_what_follows_is_dirty_anew(layer):
    layer.fs.advance(1)
    write(layer.mnt / "log", b"a")
    layer.fs.advance(19)
    write(layer.mnt / "log", b"b")  # the same record: dirty since 1
    layer.fs.advance(16)  # 36: written back at 35
    write(layer.mnt / "log", b"c")  # dirty since 36: its pass is 70
    layer.fs.advance(4)  # 40: the periodic commit makes "ab" durable
    report = layer.fs.power_loss()
    assert (layer.mnt / "log").read_bytes() == b"ab"
    assert by_path(report)["log"].bytes == 1


def test_writeback_the_feature_flags_file_beside_a_wal_fsynced_every_100_ms(layer):
    # RabbitMQ 4.3's enabled feature flags at a node's first boot: file:write_file (create,
    # write, close, no fsync), then a quorum queue's WAL fsynced every 100 ms.
    def run(seconds: float) -> None:
        for _ in range(round(seconds * 10)):
            layer.fs.advance(0.1)
            write(layer.mnt / "wal", b"w" * 64, sync="fdatasync")

    write(layer.mnt / "ff", b"[a,b].", mode="w")
    run(10)
    layer.fs.power_loss()
    assert (layer.mnt / "ff").read_bytes() == b""  # what the 4.3 run's two nodes read
    write(layer.mnt / "ff", b"[a,b].", mode="w")  # the node boots again, at 10
    run(35)
    report = layer.fs.power_loss()
    assert (layer.mnt / "ff").read_bytes() == b"[a,b]."
    assert "ff" not in by_path(report)


def test_without_writeback_an_unsynced_file_is_lost_however_old(no_writeback):
    write(no_writeback.mnt / "ff", b"[a].", mode="w")
    write(no_writeback.mnt / "durable", b"more")
    no_writeback.fs.advance(3600)
    report = no_writeback.fs.power_loss()
    assert report.model == "ext4, no writeback"
    assert not (no_writeback.mnt / "ff").exists()  # no periodic commit either
    assert by_path(report)["ff"].vanished
    assert (no_writeback.mnt / "durable").read_bytes() == b"D" * 100


def test_strict_has_no_writeback(strict):
    write(strict.mnt / "durable", b"more")
    strict.fs.advance(3600)
    report = strict.fs.power_loss()
    assert report.model == "strict"
    assert (strict.mnt / "durable").read_bytes() == b"D" * 100


def test_the_daemon_writes_back_after_30_s_unless_told_off(tmp_path):
    from clusters.lazyfs.daemon import parse

    base = ["--backing", "b", "--mountpoint", "m", "--control", "c"]
    assert parse(base).writeback_expire_s == 30.0 and parse(base).clock == "monotonic"
    assert parse([*base, "--writeback-expire", "off"]).writeback_expire_s is None
    argv = daemon_command(tmp_path / "b", tmp_path / "m", tmp_path / "c",
                          writeback_expire_s=None, clock="manual")
    assert parse(argv[3:]).writeback_expire_s is None and parse(argv[3:]).clock == "manual"
    assert parse(daemon_command("b", "m", "c", writeback_expire_s=12.5)[3:]).writeback_expire_s \
        == 12.5
    with pytest.raises(SystemExit):
        parse([*base, "--writeback-expire", "-1"])


def test_advance_is_refused_on_a_monotonic_clock(tmp_path):
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    with mount(backing, mnt) as fs, pytest.raises(LazyFSError, match="manual"):
        fs.advance(1)


@pytest.mark.parametrize(("now", "there"), [(7.9, False), (8.0, True)])
def test_writeback_the_periodic_commit_comes_5_s_after_the_transaction_began(layer, now, there):
    layer.fs.advance(3)
    write(layer.mnt / "new", b"")  # a creation at 3 begins the transaction: committed at 8
    layer.fs.advance(now - 3)
    report = layer.fs.power_loss()
    assert (layer.mnt / "new").exists() is there
    assert ("new" in by_path(report)) is not there


@pytest.mark.parametrize(("now", "kept"), [(37.9, b""), (38.0, b"[a].")])
def test_writeback_joins_a_running_transaction_and_is_committed_with_it(layer, now, kept):
    layer.fs.advance(1)
    write(layer.mnt / "ff", b"[a].", mode="w")  # its creation is committed at 6
    layer.fs.advance(32)
    write(layer.mnt / "other", b"")  # at 33 a creation begins the next transaction (38)
    layer.fs.advance(now - 33)  # the pass at 35 ties ff's data to it
    layer.fs.power_loss()
    assert (layer.mnt / "ff").read_bytes() == kept


# -- when each file was written and synced: the report's ages at the cut (the manual clock) ------

def test_the_report_says_when_a_dropped_file_was_written_and_synced(layer):
    layer.fs.advance(1)
    write(layer.mnt / "wal", b"a", sync="fsync")  # created and synced at 1
    layer.fs.advance(1)
    fsync_dir(layer.mnt)  # at 2: nothing pending, but asked
    layer.fs.advance(1)
    write(layer.mnt / "wal", b"bb")  # at 3: the first unsynced write
    layer.fs.advance(4)
    write(layer.mnt / "wal", b"c")  # at 7: the last
    layer.fs.advance(3)
    report = layer.fs.power_loss()  # at 10
    wal = by_path(report)["wal"]
    assert (wal.bytes, wal.size_before, wal.size_after) == (3, 4, 1)
    t = wal.timing
    assert (t.first_unsynced, t.last_write, t.last_sync, t.dir_sync) == (7.0, 3.0, 9.0, 8.0)
    assert (t.durable, t.durable_by, t.written_back) == (9.0, "fsync", None)
    assert (report.mounted_s, report.last_commit_s, report.oldest_unsynced_s) == (10.0, 9.0, 7.0)
    assert report.kept == ()
    data = report.to_dict()
    assert data["oldest_unsynced_s"] == 7.0
    cut = data["cut_at_epoch_s"]
    first = data["paths"][0]["timing"]["first_unsynced"]
    assert first["age_s"] == 7.0 and first["at"] == wall_clock(cut - 7.0)
    assert data["paths"][0]["timing"]["durable"]["by"] == "fsync"
    assert DroppedReport.from_dict(data).files[0].timing == t


def test_a_file_never_synced_is_reported_with_no_sync_and_its_whole_age(no_writeback):
    no_writeback.fs.advance(5)
    write(no_writeback.mnt / "ff", b"[a].", mode="w")  # 4.3's feature flags: never fsynced
    no_writeback.fs.advance(55)
    report = no_writeback.fs.power_loss()
    ff = by_path(report)["ff"]
    assert ff.vanished and ff.bytes == 4
    assert (ff.timing.first_unsynced, ff.timing.last_write) == (55.0, 55.0)
    assert (ff.timing.last_sync, ff.timing.durable, ff.timing.durable_by) == (None, None, "")
    assert report.last_commit_s is None  # nothing committed the journal since the mount
    assert "dropped ff: 4 B (vanished); first unsynced write 55.0 s before the cut, last write " \
        "55.0 s before the cut, last fsync never since the mount" in report.lines()[1]


def test_the_report_lists_the_files_it_kept_and_what_made_them_durable(layer):
    layer.fs.advance(1)
    write(layer.mnt / "ff", b"[a].", mode="w")  # never fsynced: written back at 35, durable at 40
    layer.fs.advance(2)
    write(layer.mnt / "seg", b"s", sync="fdatasync")  # at 3
    layer.fs.advance(39)
    write(layer.mnt / "wal", b"w")  # at 42: dropped
    layer.fs.advance(3)
    report = layer.fs.power_loss()  # at 45
    assert [f.path for f in report.files] == ["wal"]
    kept = {k.path: k for k in report.kept}
    assert [k.path for k in report.kept] == ["seg", "ff"]  # the latest written first
    assert (kept["ff"].size, kept["ff"].timing.last_write, kept["ff"].timing.last_sync) == (
        4, 44.0, None)
    assert (kept["ff"].timing.durable, kept["ff"].timing.durable_by) == (5.0, "writeback")
    assert (kept["seg"].timing.durable, kept["seg"].timing.durable_by) == (42.0, "fsync")
    # Only what was written since the last loss is listed the next time.
    layer.fs.advance(1)
    assert layer.fs.power_loss().kept == ()


def test_a_file_written_back_but_not_yet_committed_says_so(layer):
    layer.fs.advance(1)
    write(layer.mnt / "ff", b"[a].", mode="w")
    layer.fs.advance(36)  # 37: written back at 35 (a new transaction), its commit due at 40
    report = layer.fs.power_loss()
    t = by_path(report)["ff"].timing
    assert (t.first_unsynced, t.written_back, t.durable) == (36.0, 2.0, None)
    assert "written back 2.0 s before the cut (not committed)" in report.lines()[1]


def test_the_daemon_logs_each_dropped_file_with_its_ages(layer):
    write(layer.mnt / "wal", b"w" * 10)
    layer.fs.advance(2.5)
    layer.fs.power_loss()
    text = layer.fs.log_path.read_text()
    assert "10 unsynced bytes in 1 files dropped" in text
    assert "dropped wal: 10 B (vanished); first unsynced write 2.5 s before the cut" in text


def test_strict_a_synced_file_whose_name_was_never_made_durable_is_dropped_not_kept(strict):
    strict.fs.advance(1)
    write(strict.mnt / "seg", b"s", sync="fsync")  # its data durable, its name not
    write(strict.mnt / "durable", b"more", sync="fsync")  # there before the mount: kept
    strict.fs.advance(2)
    report = strict.fs.power_loss()
    seg = by_path(report)["seg"]
    assert seg.vanished and (seg.timing.last_sync, seg.timing.durable_by) == (2.0, "fsync")
    assert [(k.path, k.size, k.timing.durable) for k in report.kept] == [("durable", 104, 2.0)]


# -- sync: the whole layer made durable at once, as sync(2) does on ext4 (LazyFS.sync) ----------

def _unsynced_changes(mnt: Path) -> None:
    """Makes one of each kind of unsynced change: a directory and a file created and written,
    an overwrite and an append inside a durable file, a truncation, a rename and a removal."""
    (mnt / "dir").mkdir()
    write(mnt / "dir" / "vhost.config", b"#{segment_entry_count => 2048}.", mode="w")
    write(mnt / "gone", b"g", sync="fsync")
    write(mnt / "cut", b"0123456789", sync="fsync")
    write(mnt / "old-name", b"n", sync="fsync")
    with open(mnt / "durable", "r+b") as f:
        f.seek(10)
        f.write(b"xxxx")
    write(mnt / "durable", b"tail")
    os.truncate(mnt / "cut", 4)
    os.rename(mnt / "old-name", mnt / "new-name")
    os.unlink(mnt / "gone")


@pytest.mark.parametrize("fixture", ["layer", "strict", "no_writeback", "no_da_alloc"])
def test_after_a_sync_a_power_loss_drops_nothing_written_before_it(request, fixture):
    layer = request.getfixturevalue(fixture)
    _unsynced_changes(layer.mnt)
    before = tree(layer.mnt)
    synced = layer.fs.sync()
    assert layer.fs.pending() == {"files": 0, "bytes": 0, "namespace": 0, "saved_bytes": 0}
    report = layer.fs.power_loss()
    assert tree(layer.mnt) == before
    assert report.files == () and report.namespace == ()
    assert synced.model == report.model


def test_after_a_sync_a_power_loss_drops_what_was_written_after_it(layer):
    write(layer.mnt / "wal", b"before", mode="w")
    layer.fs.sync()
    write(layer.mnt / "wal", b"+after")
    write(layer.mnt / "new", b"new")
    os.rename(layer.mnt / "durable", layer.mnt / "moved")
    report = layer.fs.power_loss()
    assert tree(layer.mnt) == {"durable": b"D" * 100, "wal": b"before"}
    assert {p: (f.bytes, f.vanished) for p, f in by_path(report).items()} == {
        "wal": (6, False), "new": (3, True)}
    assert report.namespace == ("rename durable -> moved", "create new")


def test_sync_answers_the_bytes_and_files_it_wrote_back_and_the_changes_it_committed(layer):
    (layer.mnt / "dir").mkdir()
    write(layer.mnt / "dir" / "new", b"12345")
    with open(layer.mnt / "durable", "r+b") as f:  # 4 bytes written twice: counted once
        f.write(b"head")
        f.seek(0)
        f.write(b"HEAD")
    write(layer.mnt / "durable", b"tail")
    write(layer.mnt / "empty", b"")
    report = layer.fs.sync()
    assert (report.bytes, report.file_count) == (13, 2)
    assert [(f.path, f.bytes) for f in report.files] == [("dir/new", 5), ("durable", 8)]
    assert report.namespace == ("create dir", "create dir/new", "create empty")
    assert report.model == "ext4, writeback 30 s"
    assert report.to_dict()["bytes"] == 13 and report.to_dict()["files"] == 2
    again = layer.fs.sync()  # nothing left to write back
    assert (again.bytes, again.file_count, again.namespace) == (0, 0, ())
    text = layer.fs.log_path.read_text()
    assert "13 unsynced bytes in 2 files written back, 3 namespace changes committed" in text
    assert "synced dir/new: 5 B" in text


def test_sync_writes_back_data_auto_da_alloc_tied_to_the_journal(layer):
    write(layer.mnt / "durable", b"[a].", mode="w")  # truncated to 0, rewritten, closed
    assert layer.fs.pending()["files"] == 1  # tied to the next commit, not durable yet
    report = layer.fs.sync()
    assert [(f.path, f.bytes) for f in report.files] == [("durable", 4)]
    layer.fs.power_loss()
    assert (layer.mnt / "durable").read_bytes() == b"[a]."


def test_a_synced_file_is_kept_and_says_the_sync_made_it_durable(layer):
    layer.fs.advance(1)
    write(layer.mnt / "ff", b"[a].", mode="w")
    layer.fs.advance(2)
    layer.fs.sync()  # at 3
    layer.fs.advance(4)
    report = layer.fs.power_loss()  # at 7
    kept = {k.path: k for k in report.kept}
    assert (kept["ff"].timing.durable, kept["ff"].timing.durable_by) == (4.0, "sync")
    assert kept["ff"].timing.last_sync is None  # no fsync of it was asked
    assert report.last_commit_s == 4.0


def test_an_unlinked_file_still_open_is_written_back_without_a_name(layer):
    fd = os.open(layer.mnt / "tmp", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"abc")
        os.unlink(layer.mnt / "tmp")
        report = layer.fs.sync()
    finally:
        os.close(fd)
    assert [(f.path, f.bytes) for f in report.files] == [(None, 3)]
    assert report.namespace == ("create tmp", "remove tmp")
    assert layer.fs.power_loss().files == ()
    assert tree(layer.mnt) == {"durable": b"D" * 100}
