"""The disk-corrupt fault (nemesis.faults.disk.DiskCorrupt) against a fake broker whose nodes'
data directories are real folders in tmp_path, reached through this host's Remote: it kills
before it damages, damages what its op's value records and nothing else, the same from the same
seed, boots on stop, and records a node where it found nothing as nothing damaged."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from clusters.base import DataDirs, Node
from clusters.remote import LocalRemote
from history.faults import kind_for_start
from nemesis.errors import FaultUnsupported
from nemesis.faults import fault_info, make_fault
from nemesis.faults.corrupt import uid_prefix
from nemesis.options import NemesisOptions
from nemesis.protocol import FaultContext
from tests.nemesis.fakes import FakeBroker

Q = "jepsen.queue"
SEGMENT = f"quorum/rabbit@{{ip}}/{uid_prefix(Q)}ABCDEFGHIJKL/00000001.segment"


class Cluster:
    """Three nodes whose Remote is this host."""

    def __init__(self) -> None:
        self.nodes = [Node(f"n{i}", f"10.0.0.{i}", LocalRemote(f"n{i}")) for i in (1, 2, 3)]

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)


@dataclass
class DiskBroker(FakeBroker):
    """A fake broker that says where each node's data is (clusters.base.DataDirs)."""

    root: Path = Path("/nonexistent")

    def data_dir(self, node: Node) -> str:
        return str(self.root / node.name)


def setup(tmp_path: Path, with_files: tuple[str, ...] = ("n1", "n2", "n3"),
          **opts: object) -> tuple[FaultContext, DiskBroker]:
    broker = DiskBroker(names=["n1", "n2", "n3"], root=tmp_path)
    for i, name in enumerate(("n1", "n2", "n3"), 1):
        if name in with_files:
            path = tmp_path / name / SEGMENT.format(ip=f"10.0.0.{i}")
            path.parent.mkdir(parents=True)
            path.write_bytes(bytes(range(256)) * 4)
    options = replace(NemesisOptions(), **opts)  # type: ignore[arg-type]
    return FaultContext(Cluster(), broker, options, queue=Q, admin=broker), broker


def test_declared_for_a_minority_on_the_local_backend() -> None:
    info = fault_info("disk-corrupt")
    assert info.takes_targets and info.minority_only and info.backends == ("local",)
    assert set(info.options) == {"corrupt_mode", "corrupt_bytes", "corrupt_probability"}
    assert (info.start_f, info.stop_f) == ("start-disk-corrupt", "stop-disk-corrupt")
    assert kind_for_start("start-disk-corrupt") is info.kind


def test_kills_damages_what_it_records_and_boots_on_stop(tmp_path: Path) -> None:
    ctx, broker = setup(tmp_path, targets="n2", corrupt_bytes=64, corrupt_probability=0.02)
    assert isinstance(broker, DataDirs)
    fault = make_fault("disk-corrupt")
    desc = fault.start(ctx, random.Random(5))
    assert broker.state["n2"] == "killed" and broker.of("kill") == ["n2"]
    assert desc["nodes"] == ["n2"] and desc["mode"] == "bitflip"
    done = desc["damaged"]["n2"]
    assert (done["candidates"], done["files"]) == (1, 1) and done["bits"] >= 1
    (record,) = done["paths"]
    assert record["path"] == SEGMENT.format(ip="10.0.0.2") and record["length"] == 64
    expected = bytearray(bytes(range(256)) * 4)
    for bit in record["bits"]:
        expected[bit // 8] ^= 1 << (bit % 8)
    assert (tmp_path / "n2" / record["path"]).read_bytes() == bytes(expected)
    for untouched in ("n1", "n3"):  # the other members' copies are whole
        assert (tmp_path / untouched / SEGMENT.format(ip=f"10.0.0.{untouched[1]}")).read_bytes() \
            == bytes(range(256)) * 4
    assert fault.stop(ctx) == {"fault": "disk-corrupt", "nodes": ["n2"],
                               "outcome": {"n2": "started"}}
    assert broker.all_running()


def test_the_same_seed_does_the_same_damage(tmp_path: Path) -> None:
    records = []
    for run in ("a", "b"):
        ctx, _ = setup(tmp_path / run, targets="minority", corrupt_mode="truncate",
                       corrupt_bytes=100)
        desc = make_fault("disk-corrupt").start(ctx, random.Random(9))
        records.append((desc["nodes"], desc["damaged"]))
    assert records[0] == records[1]
    (node,) = records[0][0]
    (record,) = records[0][1][node]["paths"]
    assert (record["mode"], record["offset"], record["size_after"]) == ("truncate", 924, 924)


def test_a_node_without_the_queues_files_is_recorded_as_undamaged(tmp_path: Path) -> None:
    ctx, broker = setup(tmp_path, with_files=("n1",), targets="n3")
    (tmp_path / "n3").mkdir()
    desc = make_fault("disk-corrupt").start(ctx, random.Random(0))
    assert desc["damaged"] == {"n3": {"candidates": 0, "files": 0, "bytes": 0, "bits": 0,
                                      "paths": []}}
    assert broker.state["n3"] == "killed"


def test_a_broker_that_keeps_no_known_data_directory_is_refused(tmp_path: Path) -> None:
    ctx, broker = setup(tmp_path, targets="n1")
    ctx = replace(ctx, broker=FakeBroker(names=["n1", "n2", "n3"]))
    fault = make_fault("disk-corrupt")
    with pytest.raises(FaultUnsupported, match="DataDirs"):
        fault.preflight(ctx)  # type: ignore[attr-defined]
    with pytest.raises(FaultUnsupported):
        fault.start(ctx, random.Random(0))
    assert broker.of("kill") == []


def test_the_interpreter_records_the_damage_in_the_history_and_heals(tmp_path: Path) -> None:
    from history import NEMESIS, HistoryWriter, read_history
    from nemesis.interpreter import NemesisInterpreter

    _, broker = setup(tmp_path / "data")
    entry = "disk-corrupt@n3:corrupt_mode=truncate:corrupt_bytes=24"
    options = NemesisOptions.played_once([(0.01, entry, 0.01)])
    path = tmp_path / "history.jsonl"
    interpreter = NemesisInterpreter(Cluster(), broker, HistoryWriter(path), options, 3, Q,
                                     admin=broker)
    interpreter.setup()
    interpreter.start()
    assert interpreter.join(20) and interpreter.error is None
    ops = [op for op in read_history(path) if op.process == NEMESIS]
    assert [(op.type, op.f) for op in ops] == [
        ("invoke", "start-disk-corrupt"), ("info", "start-disk-corrupt"),
        ("invoke", "stop-disk-corrupt"), ("info", "stop-disk-corrupt")]
    start = ops[1]
    assert start.node == "n3" and start.value["mode"] == "truncate" and start.error is None
    (record,) = start.value["damaged"]["n3"]["paths"]
    assert (record["size_before"], record["size_after"], record["bytes"]) == (1024, 1000, 24)
    assert (tmp_path / "data" / "n3" / record["path"]).stat().st_size == 1000
    assert broker.of("kill") == ["n3"] and broker.all_running()
