"""The local backend's unsynced layers (clusters.local.layers): the mountpoints and the command
that asks a node what it sees there, against the project's fake Remote; mounting with a fake
mounter (the run record, a failed mount undone); the cleanup of a daemon a killed run left, by
pid; and, where root and /dev/fuse allow, real layers mounted under tmp_path."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from clusters.base import Node
from clusters.lazyfs import LazyFSError, mounted
from clusters.local.layers import (
    RECORD,
    Layers,
    backing,
    clean_records,
    is_daemon,
    mount_fstype,
    mountinfo_command,
    mountpoint,
    not_visible,
)
from clusters.releases import ChrootLauncher, chroot_argv
from clusters.remote import CommandResult
from clusters.state import RunRecord
from tests.fakes import FakeRemote

FUSE = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                          reason="mounting a FUSE filesystem needs root and /dev/fuse")

INFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
95 22 0:50 / /state/cluster/r1/n1/mnesia rw,nosuid,nodev,relatime shared:60 - fuse /dev/fuse rw
96 22 0:51 / /state/cluster/r1/n2/mnesia rw,relatime shared:61 - fuse.lazyfs lazyfs rw
97 22 8:1 /x /with\\040space rw shared:1 - ext4 /dev/sda1 rw
"""


def test_mountpoints_are_the_brokers_data_directories() -> None:
    assert mountpoint("/state/cluster/r1", "n2") == "/state/cluster/r1/n2/mnesia"
    assert backing("/state/cluster/r1/n2/mnesia") == "/state/cluster/r1/n2/mnesia.backing"


def test_mount_fstype_reads_the_mount_on_exactly_that_path() -> None:
    assert mount_fstype(INFO, "/state/cluster/r1/n1/mnesia") == "fuse"
    assert mount_fstype(INFO, "/state/cluster/r1/n2/mnesia") == "fuse.lazyfs"
    assert mount_fstype(INFO, "/state/cluster/r1/n3/mnesia") is None
    assert mount_fstype(INFO, "/state/cluster/r1/n1") is None
    assert mount_fstype(INFO, "/with space") == "ext4"


def test_the_mountinfo_command_goes_through_the_launcher() -> None:
    assert mountinfo_command(None) == ["cat", "/proc/self/mountinfo"]
    launcher = ChrootLauncher("/rootfs/4.0", ("/state/cluster/r1", "/state/cluster/r1/n1/mnesia"))
    assert mountinfo_command(launcher) == chroot_argv(
        "/rootfs/4.0", ("/state/cluster/r1", "/state/cluster/r1/n1/mnesia"),
        ["cat", "/proc/self/mountinfo"])


def _nodes(answers: dict[str, CommandResult | None]) -> list[Node]:
    return [Node(name, f"10.0.0.{i}", FakeRemote(name, lambda argv, a=answer: a))
            for i, (name, answer) in enumerate(answers.items(), 1)]


def test_not_visible_names_each_node_that_does_not_see_fuse_on_its_data_directory() -> None:
    argv = ("cat", "/proc/self/mountinfo")
    points = {f"n{i}": f"/state/cluster/r1/n{i}/mnesia" for i in (1, 2, 3)}
    nodes = _nodes({"n1": CommandResult(argv, 0, INFO, ""),
                    "n2": CommandResult(argv, 0, INFO.replace("fuse.lazyfs", "ext4"), ""),
                    "n3": CommandResult(argv, 1, "", "chroot: no such file")})
    assert not_visible(nodes, points, None) == [
        "n2 sees ext4 on /state/cluster/r1/n2/mnesia",
        "n3 sees nothing on /state/cluster/r1/n3/mnesia (mountinfo unreadable: chroot: no such "
        "file)"]
    for node in nodes:
        assert node.remote.calls == [argv]  # type: ignore[attr-defined]


class FakeFS:
    """What `Layers` needs of a mounted LazyFS."""

    def __init__(self, backing_dir: str, point: str, pid: int) -> None:
        self.mountpoint = Path(point)
        self.backing = Path(backing_dir)
        self.process = type("P", (), {"pid": pid})()
        self.log_path = Path(backing_dir).parent / f"daemon-{pid}.log"
        self.unmounted = False

    def power_loss(self) -> Any:
        from clusters.lazyfs import DroppedFile, DroppedReport
        return DroppedReport((DroppedFile("/quorum/x.wal", 10, 10, 0),))

    def sync(self) -> Any:
        from clusters.lazyfs import SyncedFile, SyncedReport
        return SyncedReport((SyncedFile("vhosts/v/.config", 31),), ("create vhosts/v/.config",),
                            "ext4, writeback 30 s")

    def unmount(self) -> Any:
        from clusters.lazyfs import DroppedReport
        self.unmounted = True
        return DroppedReport()


def test_mount_all_records_each_daemon_and_unmount_all_removes_the_record(tmp_path: Path) -> None:
    made: list[FakeFS] = []

    def mounter(b: str, p: str) -> Any:
        made.append(FakeFS(b, p, 700 + len(made)))
        return made[-1]

    data = str(tmp_path / "cluster" / "r1")
    layers = Layers(data, ("n1", "n2"), (tmp_path, "r1"), mounter=mounter)
    layers.mount_all()
    assert [(str(f.backing), str(f.mountpoint)) for f in made] == [
        (f"{data}/n1/mnesia.backing", f"{data}/n1/mnesia"),
        (f"{data}/n2/mnesia.backing", f"{data}/n2/mnesia")]
    assert os.path.isdir(f"{data}/n1/mnesia.backing")
    (rec,) = RunRecord.find(tmp_path, RECORD)
    assert rec.info == {"mounts": layers.points}
    assert (rec.pids("n1"), rec.pids("n2")) == ([700], [701])
    assert layers.power_loss("n2") == {"bytes": 10, "files": 1, "namespace": [], "paths": [
        {"path": "/quorum/x.wal", "bytes": 10, "size_before": 10, "size_after": 0,
         "timing": {}}], "model": "", "kept": [], "cut_at": None, "cut_at_epoch_s": None,
        "mounted_s": None, "last_commit_s": None, "oldest_unsynced_s": None}
    layers.unmount_all()
    assert all(f.unmounted for f in made) and RunRecord.find(tmp_path, RECORD) == []
    with pytest.raises(LazyFSError, match="n1 has no unsynced layer"):
        layers.power_loss("n1")


def test_copy_logs_puts_each_daemons_log_beside_its_nodes_broker_logs(tmp_path: Path) -> None:
    made: list[FakeFS] = []

    def mounter(b: str, p: str) -> Any:
        made.append(FakeFS(b, p, 700 + len(made)))
        return made[-1]

    layers = Layers(str(tmp_path / "d"), ("n1", "n2", "n3"), (tmp_path, "r1"), mounter=mounter)
    layers.mount_all()
    made[0].log_path.write_text("INFO model: ext4, writeback 30 s\n")
    made[2].log_path.write_text("INFO power loss: 10 bytes in 1 files dropped\n")
    nodes = tmp_path / "run" / "nodes"
    (nodes / "n1").mkdir(parents=True)
    (nodes / "n1" / "rabbit.log").write_text("broker")
    assert layers.copy_logs(nodes) == [nodes / "n1" / "lazyfs.log", nodes / "n3" / "lazyfs.log"]
    assert (nodes / "n1" / "lazyfs.log").read_text() == "INFO model: ext4, writeback 30 s\n"
    assert (nodes / "n3" / "lazyfs.log").read_text().startswith("INFO power loss: 10 bytes")
    assert (nodes / "n1" / "rabbit.log").read_text() == "broker"
    assert not (nodes / "n2").exists()  # its daemon wrote no log: nothing to copy
    layers.unmount_all()


def test_a_mount_that_fails_unmounts_the_others_and_says_why(tmp_path: Path) -> None:
    made: list[FakeFS] = []

    def mounter(b: str, p: str) -> Any:
        if made:
            raise LazyFSError("lazyfs could not mount: fuse: device not found")
        made.append(FakeFS(b, p, 700))
        return made[-1]

    layers = Layers(str(tmp_path / "d"), ("n1", "n2", "n3"), (tmp_path, "r1"), mounter=mounter)
    with pytest.raises(LazyFSError, match="could not be mounted: .*device not found"):
        layers.mount_all()
    assert made[0].unmounted and layers.mounted == {}
    assert RunRecord.find(tmp_path, RECORD) == []


def _sleeper(point: str) -> subprocess.Popen[bytes]:
    """A process whose argv names the daemon's module and a mountpoint, as a daemon's does."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                             "-m", "clusters.lazyfs", "--mountpoint", point])


def test_clean_ends_a_leftover_daemon_by_pid_and_spares_a_reused_pid(tmp_path: Path) -> None:
    point = str(tmp_path / "cluster" / "r9" / "n1" / "mnesia")
    daemon = _sleeper(point)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        deadline = time.monotonic() + 10
        while not is_daemon(daemon.pid, point) and time.monotonic() < deadline:
            time.sleep(0.05)
        rec = RunRecord.create(tmp_path, RECORD, "r9", {"mounts": {"n1": point, "n2": "/x"}})
        rec.add_pid("n1", daemon.pid)
        rec.add_pid("n2", stranger.pid)  # a pid the system gave to another process since
        lines = clean_records(tmp_path)
        assert daemon.wait(15) is not None
        assert stranger.poll() is None
        assert lines == [f"lazyfs daemon pid {daemon.pid} (n1)"]
        assert RunRecord.find(tmp_path, RECORD) == []
    finally:
        for p in (daemon, stranger):
            p.kill()
            p.wait()


@FUSE
def test_real_layers_mount_drop_and_unmount(tmp_path: Path) -> None:
    data = str(tmp_path / "cluster" / "r1")
    layers = Layers(data, ("n1",), (tmp_path, "r1"))
    layers.mount_all()
    try:
        point = layers.points["n1"]
        assert mounted(point) and not_visible(
            [Node("n1", "10.0.0.1", FakeRemote("n1", lambda argv: CommandResult(
                argv, 0, Path("/proc/self/mountinfo").read_text(), "")))],
            layers.points, None) == []
        with open(f"{point}/unsynced.wal", "wb") as f:
            f.write(b"x" * 5000)
        report = layers.power_loss("n1")
        assert (report["bytes"], report["files"]) == (5000, 1)
    finally:
        layers.unmount_all()
    assert not mounted(layers.points["n1"]) and RunRecord.find(tmp_path, RECORD) == []


@FUSE
def test_clean_ends_a_real_daemon_a_killed_run_left(tmp_path: Path) -> None:
    data = str(tmp_path / "cluster" / "r2")
    layers = Layers(data, ("n1",), (tmp_path, "r2"))
    layers.mount_all()
    point, fs = layers.points["n1"], layers.mounted["n1"]
    try:
        with open(f"{point}/synced", "wb") as f:
            f.write(b"kept")
            f.flush()
            os.fsync(f.fileno())
        lines = clean_records(tmp_path)  # the run "was killed": only its record is left
        fs.process.wait(15)
        assert lines == [f"lazyfs daemon pid {fs.process.pid} (n1)"]
        assert not mounted(point) and RunRecord.find(tmp_path, RECORD) == []
        assert Path(backing(point), "synced").read_bytes() == b"kept"
    finally:
        if fs.process.poll() is None:
            fs.process.kill()
        layers.mounted.clear()
        layers.unmount_all()


# -- the cluster's use of them ------------------------------------------------------------------


def _cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: list[FakeFS]) -> Any:
    import clusters.local.cluster as local
    from clusters.backend import BackendOptions

    calls: list[str] = []
    monkeypatch.setattr(local, "cleanup", lambda prefix: calls.append("cleanup") or [])
    monkeypatch.setattr(local, "run_local", lambda cmd, timeout: None)
    monkeypatch.setattr(local, "become_subreaper", lambda: True)

    def mounter(b: str, p: str) -> Any:
        made.append(FakeFS(b, p, 800 + len(made)))
        return made[-1]

    cluster = local.make(BackendOptions(unsynced_fs=True), 3, "r1", tmp_path)
    assert cluster.layers is not None and cluster.unsynced
    cluster.layers._mount = mounter
    assert not local.make(BackendOptions(), 3, "r1", tmp_path).unsynced
    return cluster, calls


def test_a_chrooted_release_binds_each_layer_after_the_data_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import clusters.local.cluster as local
    from clusters.releases import RELEASES

    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    monkeypatch.setattr(local, "ensure_rootfs", lambda recipe: root)
    monkeypatch.setattr(local, "make_home", lambda tree, home: [])
    cluster, _ = _cluster(tmp_path, monkeypatch, [])
    release = next(r for r in RELEASES.values() if r.rootfs is not None)
    launcher = cluster.launcher(release)
    data = os.path.abspath(cluster.data_root)
    assert launcher.binds == (data, f"{data}/n1/mnesia", f"{data}/n2/mnesia", f"{data}/n3/mnesia")


def test_a_node_that_does_not_see_its_layer_stops_the_run_with_nothing_mounted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import clusters.local.cluster as local
    from clusters.backend import BackendError

    made: list[FakeFS] = []
    cluster, calls = _cluster(tmp_path, monkeypatch, made)
    monkeypatch.setattr(local, "not_visible", lambda nodes, points, launcher: [
        f"n2 sees ext4 on {points['n2']}"])
    with pytest.raises(BackendError, match="not under every node's data directory: n2 sees ext4"):
        cluster.create()
    assert len(made) == 3 and all(f.unmounted for f in made)
    assert calls == ["cleanup", "cleanup"] and RunRecord.find(tmp_path, RECORD) == []


def test_power_loss_and_teardown_through_the_cluster(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import clusters.local.cluster as local

    made: list[FakeFS] = []
    cluster, calls = _cluster(tmp_path, monkeypatch, made)
    monkeypatch.setattr(local, "not_visible", lambda nodes, points, launcher: [])
    cluster.create()
    assert len(RunRecord.find(tmp_path, RECORD)) == 1
    assert cluster.power_loss(cluster.node("n3"))["bytes"] == 10
    assert cluster.settle(cluster.node("n2")) == {
        "bytes": 31, "files": 1, "paths": [{"path": "vhosts/v/.config", "bytes": 31}],
        "namespace": ["create vhosts/v/.config"], "model": "ext4, writeback 30 s"}
    for fs in made:
        fs.log_path.write_text(f"INFO lazyfs on {fs.mountpoint}\n")
    collected: list[Path] = []
    broker = type("B", (), {"collect_logs": lambda self, dest: collected.append(dest)})()
    cluster.fetch_logs(broker, tmp_path / "nodes")
    assert collected == [tmp_path / "nodes"]
    assert (tmp_path / "nodes" / "n3" / "lazyfs.log").read_text() == \
        f"INFO lazyfs on {made[2].mountpoint}\n"
    cluster.destroy()
    assert all(f.unmounted for f in made) and RunRecord.find(tmp_path, RECORD) == []
    assert calls == ["cleanup", "cleanup"]


@FUSE
def test_a_chrooted_command_sees_the_layer_bound_after_the_data_folder(tmp_path: Path) -> None:
    """As a 4.x node does: a private mount namespace, a root filesystem (here: this host's /usr
    bound into an empty tree), the data folder bound at its own path, then the layer; without
    the layer's own bind the node would see the data folder's directory, not the layer."""
    from clusters.remote import LocalRemote

    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True)
    for link in ("bin", "lib", "lib64"):
        (root / link).symlink_to(f"usr/{link}")
    data = str(tmp_path / "cluster" / "r3")
    layers = Layers(data, ("n1",), (tmp_path, "r3"))
    layers.mount_all()
    try:
        node, point = Node("n1", "127.0.0.1", LocalRemote("n1")), layers.points["n1"]
        with_layer = ChrootLauncher(str(root), ("/usr", data, point))
        assert not_visible([node], layers.points, with_layer) == []
        data_only = ChrootLauncher(str(root), ("/usr", data))
        assert not_visible([node], layers.points, data_only) == [f"n1 sees nothing on {point}"]
    finally:
        layers.unmount_all()
    assert not mounted(layers.points["n1"])


@pytest.mark.parametrize("expiry", [30.0, None])
def test_the_local_backend_mounts_each_layer_with_the_runs_writeback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, expiry: float | None) -> None:
    import clusters.local.cluster as local
    from clusters.backend import BackendOptions

    seen: list[Any] = []
    monkeypatch.setattr(local, "mount", lambda b, p, **kw: seen.append(kw) or FakeFS(b, p, 900))
    cluster = local.make(BackendOptions(unsynced_fs=True, writeback_expire_s=expiry), 2, "r1",
                         tmp_path)
    assert cluster.layers is not None
    cluster.layers.mount_all()
    assert seen == [{"writeback_expire_s": expiry}] * 2
    cluster.layers.unmount_all()


def test_a_node_without_a_layer_cannot_be_settled(tmp_path: Path) -> None:
    import clusters.local.cluster as local
    from clusters.backend import BackendOptions

    layers = Layers(str(tmp_path / "d"), ("n1",), (tmp_path, "r1"))
    with pytest.raises(LazyFSError, match="n1 has no unsynced layer mounted"):
        layers.settle("n1")
    plain = local.make(BackendOptions(), 1, "r1", tmp_path)
    with pytest.raises(LazyFSError, match="this cluster has no unsynced layer"):
        plain.settle(plain.node("n1"))


@FUSE
def test_a_settled_layer_drops_only_what_is_written_after_it(tmp_path: Path) -> None:
    """Real layers: the files a broker writes at setup without fsync, settled, survive the power
    loss; what it writes after the settle does not."""
    data = str(tmp_path / "cluster" / "r4")
    layers = Layers(data, ("n1",), (tmp_path, "r4"))
    layers.mount_all()
    try:
        point = Path(layers.points["n1"])
        (point / "vhosts").mkdir()
        (point / "vhosts" / ".config").write_bytes(b"#{segment_entry_count => 2048}.")
        (point / "feature_flags").write_bytes(b"[a,b].")
        settled = layers.settle("n1")
        assert (settled["bytes"], settled["files"]) == (37, 2)
        assert "create vhosts/.config" in settled["namespace"]
        (point / "wal").write_bytes(b"after")
        dropped = layers.power_loss("n1")
        assert [p["path"] for p in dropped["paths"]] == ["wal"]
        assert (point / "vhosts" / ".config").read_bytes() == b"#{segment_entry_count => 2048}."
        assert (point / "feature_flags").read_bytes() == b"[a,b]."
        assert not (point / "wal").exists()
    finally:
        layers.unmount_all()
