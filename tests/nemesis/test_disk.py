"""The power-loss fault (nemesis.faults.disk) against fake nodes, a fake broker and a fake layer:
which brokers it kills, in which order it drops their unsynced writes, what its op's value
records, and that it refuses a cluster without the layer."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from clusters.base import Node, UnsyncedDisks
from history.faults import kind_for_start
from nemesis.errors import FaultError, FaultUnsupported
from nemesis.faults import fault_info, make_fault
from nemesis.faults.disk import PATHS_KEPT, dropped_summary
from nemesis.options import NemesisOptions
from nemesis.protocol import FaultContext
from tests.nemesis.fakes import FakeBroker, FakeCluster


class LayeredCluster(FakeCluster):
    """A fake cluster whose nodes sit on a fake unsynced layer: each power loss is recorded,
    with the broker's state at that moment, and answers the planted report."""

    def __init__(self, size: int, broker: FakeBroker, reports: dict[str, dict[str, Any]]) -> None:
        super().__init__(size)
        self.broker = broker
        self.reports = reports
        self.losses: list[tuple[str, str]] = []
        self.fail: set[str] = set()
        self.unsynced = True

    def power_loss(self, node: Node) -> dict[str, Any]:
        self.losses.append((node.name, self.broker.state[node.name]))
        if node.name in self.fail:
            raise RuntimeError("daemon gone")
        return self.reports.get(node.name, {"bytes": 0, "files": 0, "paths": [], "namespace": []})

    def settle(self, node: Node) -> dict[str, Any]:
        raise AssertionError(f"a fault settled {node.name}'s layer: only the runner does")


def report(n: int, size: int = 4096) -> dict[str, Any]:
    paths = [{"path": f"/quorum/seg{i}.wal", "bytes": size, "size_before": 9, "size_after": 0}
             for i in range(n)]
    return {"bytes": n * size, "files": n, "paths": paths, "namespace": ["create /q/seg0.wal"]}


def setup(size: int = 3, reports: dict[str, dict[str, Any]] | None = None,
          **opts: object) -> tuple[FaultContext, LayeredCluster, FakeBroker]:
    broker = FakeBroker(names=[f"n{i}" for i in range(1, size + 1)])
    cluster = LayeredCluster(size, broker, reports or {})
    options = replace(NemesisOptions(), **opts)  # type: ignore[arg-type]
    return FaultContext(cluster, broker, options, queue="q", admin=broker), cluster, broker


def test_declared_with_targets_and_the_layer() -> None:
    info = fault_info("power-loss")
    assert info.takes_targets and info.needs_unsynced_fs and info.heals == "process"
    assert (info.start_f, info.stop_f) == ("start-power-loss", "stop-power-loss")
    assert kind_for_start("start-power-loss") is info.kind


def test_kills_then_drops_then_boots_on_stop() -> None:
    ctx, cluster, broker = setup(reports={"n2": report(2)}, targets="n2")
    assert isinstance(cluster, UnsyncedDisks)
    fault = make_fault("power-loss")
    desc = fault.start(ctx, random.Random(0))
    # The layer drops what is unsynced only once the broker is dead, as Jepsen's lazyfs does.
    assert cluster.losses == [("n2", "killed")]
    assert desc == {"fault": "power-loss", "nodes": ["n2"], "dropped": {"n2": {
        "bytes": 8192, "files": 2, "namespace": 1,
        "paths": [{"path": "/quorum/seg0.wal", "bytes": 4096, "vanished": False},
                  {"path": "/quorum/seg1.wal", "bytes": 4096, "vanished": False}]}}}
    assert broker.state["n2"] == "killed" and broker.of("start") == []
    assert fault.stop(ctx) == {"fault": "power-loss", "nodes": ["n2"],
                               "outcome": {"n2": "started"}}
    assert broker.all_running()


@pytest.mark.parametrize(("targets", "count"), [("one", 1), ("minority", 1), ("majority", 2),
                                                ("all", 3)])
def test_targets_like_the_process_faults(targets: str, count: int) -> None:
    ctx, cluster, broker = setup(targets=targets)
    desc = make_fault("power-loss").start(ctx, random.Random(1))
    assert len(desc["nodes"]) == count
    assert sorted(broker.of("kill")) == sorted(desc["nodes"])
    assert sorted(n for n, _ in cluster.losses) == sorted(desc["nodes"])
    assert set(desc["dropped"]) == set(desc["nodes"])
    assert all(d["bytes"] == 0 and d["files"] == 0 for d in desc["dropped"].values())


def test_at_the_leader() -> None:
    ctx, cluster, broker = setup(targets="leader")
    broker.leader = "n3"
    desc = make_fault("power-loss").start(ctx, random.Random(0))
    assert desc["nodes"] == ["n3"] and cluster.losses == [("n3", "killed")]


def test_a_failed_power_loss_raises_and_stop_still_boots_every_target() -> None:
    ctx, cluster, broker = setup(targets="all")
    cluster.fail.add("n1")
    fault = make_fault("power-loss")
    with pytest.raises(FaultError, match="power-loss failed on n1"):
        fault.start(ctx, random.Random(0))
    desc = fault.stop(ctx)
    assert desc["outcome"] == {"n1": "started", "n2": "started", "n3": "started"}
    assert broker.all_running()


@pytest.mark.parametrize("layered", [False, True])
def test_a_cluster_without_the_layer_is_refused_before_anything_is_killed(layered: bool) -> None:
    broker = FakeBroker(names=["n1", "n2", "n3"])
    cluster = LayeredCluster(3, broker, {}) if layered else FakeCluster(3)
    if layered:
        cluster.unsynced = False  # type: ignore[attr-defined]  # a backend that could, did not
    ctx = FaultContext(cluster, broker, replace(NemesisOptions(), targets="one"),
                       queue="q", admin=broker)
    fault = make_fault("power-loss")
    with pytest.raises(FaultUnsupported, match="backend.unsynced_fs"):
        fault.preflight(ctx)  # type: ignore[attr-defined]
    with pytest.raises(FaultUnsupported):
        fault.start(ctx, random.Random(0))
    assert broker.of("kill") == []


def test_the_summary_keeps_the_totals_and_a_few_paths() -> None:
    got = dropped_summary(report(PATHS_KEPT + 5))
    assert got["files"] == PATHS_KEPT + 5 and got["bytes"] == (PATHS_KEPT + 5) * 4096
    assert len(got["paths"]) == PATHS_KEPT
    vanished = {"path": "/a", "bytes": 3, "size_before": 3, "size_after": None}
    assert dropped_summary({"bytes": 3, "files": 1, "paths": [vanished]})["paths"] == [
        {"path": "/a", "bytes": 3, "vanished": True}]


def test_a_broker_that_survives_its_kill_loses_no_writes() -> None:
    ctx, cluster, broker = setup(targets="n1")
    broker.kill = lambda node: None  # type: ignore[method-assign]  # the SIGKILL did nothing
    fault = make_fault("power-loss")
    with pytest.raises(FaultError, match="n1's broker still runs after SIGKILL"):
        fault.start(ctx, random.Random(0))
    assert cluster.losses == []


def test_the_summary_carries_the_layers_model() -> None:
    got = dropped_summary({"bytes": 0, "files": 0, "paths": [], "model": "ext4, no writeback"})
    assert got["model"] == "ext4, no writeback"
    assert "model" not in dropped_summary({"bytes": 0, "files": 0})


def test_the_summary_keeps_each_dropped_files_ages_and_the_files_kept() -> None:
    from clusters.lazyfs.report import DroppedFile, DroppedReport, KeptFile, Timing

    layer = DroppedReport(
        (DroppedFile("feature_flags", 762, 762, 0, Timing(first_unsynced=33.0, last_write=33.0,
                                                          dir_sync=50.0)),
         DroppedFile("quorum/1.wal", 64, 128, 64, Timing(
             first_unsynced=0.1, last_write=0.0, last_sync=0.1, durable=0.1,
             durable_by="fsync"))),
        (), "ext4, writeback 30 s",
        tuple(KeptFile(f"k{i}", i, Timing(last_write=float(i), durable=float(i),
                                          durable_by="writeback"))
              for i in range(PATHS_KEPT + 2)),
        1_800_000_000.0, 61.0, 0.1).to_dict()
    got = dropped_summary(layer)
    assert got["paths"] == [
        {"path": "feature_flags", "bytes": 762, "vanished": False, "first_unsynced_s": 33.0,
         "last_write_s": 33.0, "dir_sync_s": 50.0},
        {"path": "quorum/1.wal", "bytes": 64, "vanished": False, "first_unsynced_s": 0.1,
         "last_write_s": 0.0, "last_sync_s": 0.1, "durable_s": 0.1, "durable_by": "fsync"}]
    assert (got["oldest_unsynced_s"], got["cut_at"], got["model"]) == (
        33.0, "2027-01-15T08:00:00.000Z", "ext4, writeback 30 s")
    assert got["kept"] == PATHS_KEPT + 2 and len(got["kept_paths"]) == PATHS_KEPT
    assert got["kept_paths"][1] == {"path": "k1", "size": 1, "last_write_s": 1.0,
                                    "durable_s": 1.0, "durable_by": "writeback"}
    # An older layer said no times: none are made up.
    old = dropped_summary(report(1))
    assert set(old) == {"bytes", "files", "namespace", "paths"}
    assert set(old["paths"][0]) == {"path", "bytes", "vanished"}
