"""The cluster settled before the faults (harness.settle, Run.settle, backend.settle_layers): the
runner syncs every node's unsynced layer once, after setup and before the main phase, only with
the layers and not with --young-cluster, and records each in the history and test.json; the
option and a scenario file's key, refused without the layer; an older test.json read back as
what its run did."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from clusters.base import Node
from harness import store
from harness.cli import build_parser, main, replay_spec, unchecked_spec
from harness.progress import ObservedHistory
from harness.runner import Run, RunOutcome
from harness.scenario_file import ScenarioFileError, loads_scenario
from harness.scenarios import SCENARIOS
from harness.series import same_scenario
from harness.settle import PATHS_KEPT, settle_layers, settled_value
from harness.spec import SpecError, TestSpec, spec_from_dict
from history import HARNESS, LAYER_SETTLED, Op, read_history


def synced(n: int, size: int = 100) -> dict[str, Any]:
    """A layer's sync report (SyncedReport.to_dict) of n files of `size` bytes."""
    return {"bytes": n * size, "files": n, "model": "ext4, writeback 30 s",
            "paths": [{"path": f"vhosts/v/f{i}", "bytes": size} for i in range(n)],
            "namespace": ["create vhosts/v/.config", "create feature_flags"]}


class LayeredCluster:
    """A fake cluster on unsynced layers (clusters.base.UnsyncedDisks) that notes each settle in
    a shared list of what happened, and answers the planted report."""

    def __init__(self, seen: list[str], unsynced: bool = True,
                 reports: dict[str, dict[str, Any]] | None = None) -> None:
        self.nodes = [Node(f"n{i}", f"10.0.0.{i}", None) for i in (1, 2, 3)]  # type: ignore[arg-type]
        self.unsynced = unsynced
        self.seen = seen
        self.reports = reports or {}

    def power_loss(self, node: Node) -> dict[str, Any]:
        raise AssertionError("no power loss here")

    def settle(self, node: Node) -> dict[str, Any]:
        self.seen.append(f"settle {node.name}")
        return self.reports.get(node.name, synced(0))


class Recorded:
    """A history that keeps its ops."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def append(self, op: Op) -> Op:
        self.ops.append(op)
        return op


# -- harness.settle --------------------------------------------------------------------------------

def test_every_node_is_settled_in_order_recorded_and_logged(caplog) -> None:
    seen: list[str] = []
    cluster = LayeredCluster(seen, reports={"n1": synced(3), "n3": synced(1, 31)})
    history = Recorded()
    with caplog.at_level(logging.INFO, logger="harness.settle"):
        out = settle_layers(cluster, history)  # type: ignore[arg-type]
    assert seen == ["settle n1", "settle n2", "settle n3"]
    assert out == {"n1": {"bytes": 300, "files": 3, "namespace": 2},
                   "n2": {"bytes": 0, "files": 0, "namespace": 2},
                   "n3": {"bytes": 31, "files": 1, "namespace": 2}}
    assert [(o.type, o.process, o.f, o.node) for o in history.ops] == [
        ("info", HARNESS, LAYER_SETTLED, n) for n in ("n1", "n2", "n3")]
    assert history.ops[0].value == {
        "node": "n1", "bytes": 300, "files": 3, "namespace": 2, "model": "ext4, writeback 30 s",
        "paths": [{"path": f"vhosts/v/f{i}", "bytes": 100} for i in range(3)]}
    assert "lazyfs: settled n1 (300 bytes in 3 files written back, 2 namespace changes " \
        "committed)" in caplog.text


def test_a_cluster_without_layers_is_not_settled() -> None:
    seen: list[str] = []
    history = Recorded()
    assert settle_layers(LayeredCluster(seen, unsynced=False), history) == {}  # type: ignore[arg-type]
    plain = type("Plain", (), {"nodes": []})()
    assert settle_layers(plain, history) == {}
    assert seen == [] and history.ops == []


def test_the_observation_names_at_most_paths_kept_files_and_counts_them_all() -> None:
    value = settled_value(Node("n2", "10.0.0.2", None), synced(PATHS_KEPT + 7))  # type: ignore[arg-type]
    assert (value["files"], value["bytes"]) == (PATHS_KEPT + 7, (PATHS_KEPT + 7) * 100)
    assert len(value["paths"]) == PATHS_KEPT and value["paths"][0] == {"path": "vhosts/v/f0",
                                                                      "bytes": 100}
    assert settled_value(Node("n1", "x", None), {})["bytes"] == 0  # type: ignore[arg-type]


# -- the runner ------------------------------------------------------------------------------------

def _run(tmp_path: Path, spec: TestSpec, cluster: LayeredCluster,
         monkeypatch: pytest.MonkeyPatch) -> Run:
    """A Run whose phases only note themselves in the cluster's list, its cluster the fake."""
    for name in ("setup", "main", "heal", "recover", "drain", "clean_probe", "teardown"):
        monkeypatch.setattr(Run, name, lambda self, name=name: cluster.seen.append(name))
    run = Run.__new__(Run)
    run.spec, run.run_dir = spec, tmp_path
    run.outcome, run.nemesis = RunOutcome(tmp_path), None
    run.history = ObservedHistory(tmp_path / store.HISTORY, lambda op: None)
    run.cluster = cluster  # type: ignore[assignment]
    run.test_info = {"spec": spec.to_dict()}
    return run


def power_loss_spec(**backend: Any) -> TestSpec:
    spec = SCENARIOS["quorum-power-loss-all"].spec.resolved()
    return dataclasses.replace(spec, backend=dataclasses.replace(spec.backend, **backend))


def test_the_runner_settles_each_layer_once_after_setup_and_before_the_main_phase(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    cluster = LayeredCluster(seen, reports={"n2": synced(2)})
    spec = power_loss_spec()
    assert spec.backend.unsynced_fs and spec.backend.settle_layers
    _run(tmp_path, spec, cluster, monkeypatch).execute()
    assert seen == ["setup", "settle n1", "settle n2", "settle n3", "main", "heal", "recover",
                    "drain", "clean_probe", "teardown"]
    info = json.loads((tmp_path / store.TEST).read_text())
    assert info["spec"]["backend"]["settle_layers"] is True
    assert info["settled"]["n2"] == {"bytes": 200, "files": 2, "namespace": 2}
    ops = [o for o in read_history(tmp_path / store.HISTORY) if o.f == LAYER_SETTLED]
    assert [(o.node, o.value["bytes"]) for o in ops] == [("n1", 0), ("n2", 200), ("n3", 0)]


@pytest.mark.parametrize(("spec", "unsynced"), [
    (power_loss_spec(settle_layers=False), True),  # --young-cluster
    (TestSpec().resolved(), False),  # no layer
])
def test_the_runner_does_not_settle_a_young_cluster_nor_one_without_layers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: TestSpec, unsynced: bool,
        caplog) -> None:
    seen: list[str] = []
    with caplog.at_level(logging.INFO, logger="harness.runner"):
        _run(tmp_path, spec, LayeredCluster(seen, unsynced=unsynced), monkeypatch).execute()
    assert seen == ["setup", "main", "heal", "recover", "drain", "clean_probe", "teardown"]
    assert "settled" not in json.loads((tmp_path / store.TEST).read_text())
    assert not [o for o in read_history(tmp_path / store.HISTORY) if o.f == LAYER_SETTLED]
    assert ("not settled (--young-cluster)" in caplog.text) is unsynced


def test_a_layer_that_cannot_settle_ends_the_run_before_its_main_phase(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clusters.lazyfs import LazyFSError

    seen: list[str] = []
    cluster = LayeredCluster(seen)

    def broken(node: Node) -> dict[str, Any]:
        raise LazyFSError(f"lazyfs on {node.name} did not answer 'sync'")

    cluster.settle = broken  # type: ignore[method-assign]
    outcome = _run(tmp_path, power_loss_spec(), cluster, monkeypatch).execute()
    assert seen == ["setup", "teardown"]
    assert outcome.error == "LazyFSError: lazyfs on n1 did not answer 'sync'"


# -- the option, a scenario file's key, test.json ----------------------------------------------

def test_young_cluster_turns_the_settle_off_on_the_layer() -> None:
    assert TestSpec().backend.settle_layers
    a = build_parser().parse_args(["run", "--scenario", "quorum-power-loss-all",
                                   "--young-cluster"])
    spec = unchecked_spec(a)
    assert spec.backend.unsynced_fs and not spec.backend.settle_layers
    spec.validate()
    a = build_parser().parse_args(["run", "--unsynced-fs", "--young-cluster"])
    unchecked_spec(a).validate()  # a baseline on the layer may be young too


@pytest.mark.parametrize("argv", [
    ["run", "--young-cluster"],
    ["run", "--scenario", "kill", "--young-cluster"],
    ["matrix", "--scenarios", "quorum-power-loss-all,partition", "--young-cluster"],
])
def test_young_cluster_without_the_layer_exits_2_saying_why(
        argv: list[str], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.runner
    monkeypatch.setattr(harness.runner, "run_test", lambda *a, **k: pytest.fail("run started"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "settle_layers (--young-cluster: the nodes' layers left unsettled before the faults)" \
        " needs the unsynced layer" in err
    assert "there is nothing to settle" in err


def test_a_scenario_file_takes_the_key_and_is_refused_without_the_layer() -> None:
    young = loads_scenario('[nemesis]\nfaults = ["power-loss@all"]\n\n'
                           '[backend]\nsettle_layers = false\n')
    assert young.resolved().backend.unsynced_fs and not young.backend.settle_layers
    with pytest.raises(ScenarioFileError, match="there is nothing to settle"):
        loads_scenario('[backend]\nsettle_layers = false\n')


def test_test_json_round_trips_the_settle_and_an_older_file_reads_what_its_run_did(
        tmp_path: Path) -> None:
    settled, young = power_loss_spec(), power_loss_spec(settle_layers=False)
    for spec in (settled, young, TestSpec().resolved()):
        assert spec_from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    # Before the settle (2026-11-28) test.json had no such key: a run on the layer was young.
    old = settled.to_dict()
    del old["backend"]["settle_layers"]
    assert spec_from_dict(old) == young
    plain = TestSpec().resolved().to_dict()
    del plain["backend"]["settle_layers"]
    assert spec_from_dict(plain).backend.settle_layers  # no layer: nothing to settle, valid
    spec_from_dict(plain).validate()
    # A replay of an older run on the layer plays it young, as it ran.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "test.json").write_text(json.dumps({"spec": {**old, "seed": 4001}}))
    replayed = replay_spec(run_dir)
    assert replayed.backend.unsynced_fs and not replayed.backend.settle_layers


def test_an_older_run_on_the_layer_is_not_the_scenario_as_it_is_now() -> None:
    old = power_loss_spec().to_dict()
    del old["backend"]["settle_layers"]
    assert not same_scenario(old, SCENARIOS["quorum-power-loss-all"].spec)
    assert same_scenario(power_loss_spec().to_dict(), SCENARIOS["quorum-power-loss-all"].spec)
    plain = SCENARIOS["partition"].spec.resolved().to_dict()
    del plain["backend"]["settle_layers"]
    assert same_scenario(plain, SCENARIOS["partition"].spec)  # nothing to settle: unchanged


def test_the_spec_refuses_a_young_cluster_without_the_layer() -> None:
    spec = dataclasses.replace(TestSpec(), backend=dataclasses.replace(
        TestSpec().backend, settle_layers=False))
    with pytest.raises(SpecError, match="nothing to settle"):
        spec.validate()
