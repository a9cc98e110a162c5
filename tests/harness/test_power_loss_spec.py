"""A power loss in a spec (issue 32): it puts the nodes' data directories on the unsynced layer
(`backend.unsynced_fs`, recorded in the resolved spec), and a backend that cannot host the layer
is refused before anything starts, exit 2, saying why."""

from __future__ import annotations

import dataclasses

import pytest

from harness.cli import main
from harness.spec import SpecError, TestSpec
from nemesis.options import NemesisOptions


def spec(*faults: str, **backend: object) -> TestSpec:
    base = TestSpec()
    return dataclasses.replace(
        base, nemesis=dataclasses.replace(base.nemesis, faults=tuple(faults)),
        backend=dataclasses.replace(base.backend, **backend))  # type: ignore[arg-type]


def test_a_power_loss_turns_the_layer_on_and_nothing_else_does() -> None:
    assert spec("power-loss@minority").resolved().backend.unsynced_fs
    assert spec("power-loss@minority").resolved().resolved() == spec(
        "power-loss@minority").resolved()
    assert not spec("kill@minority").resolved().backend.unsynced_fs
    assert not TestSpec().resolved().backend.unsynced_fs
    assert spec("kill", unsynced_fs=True).resolved().backend.unsynced_fs  # a baseline on it
    spec("power-loss@all").resolved().validate()
    assert isinstance(TestSpec().nemesis, NemesisOptions)


@pytest.mark.parametrize("kind", ["ssh", "docker"])
def test_a_backend_without_the_layer_refuses_a_power_loss(kind: str) -> None:
    with pytest.raises(SpecError, match=f"the {kind} backend cannot put"):
        spec("power-loss@one", kind=kind).validate()
    with pytest.raises(SpecError, match=f"the {kind} backend cannot put"):
        spec(kind=kind, unsynced_fs=True).validate()


@pytest.mark.parametrize("argv", [
    ["run", "--backend", "docker", "--nemesis", "power-loss@one"],
    ["run", "--backend", "ssh", "--nemesis", "kill,power-loss@leader"],
    ["run", "--backend", "docker", "--unsynced-fs"],
])
def test_the_cli_exits_2_before_anything_starts(argv: list[str], capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.runner
    monkeypatch.setattr(harness.runner, "run_test", lambda *a, **k: pytest.fail("run started"))
    assert main(argv) == 2
    assert "cannot put the nodes' data directories on the unsynced layer" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "entry"), [("quorum-power-loss-minority", "power-loss@minority"),
                                             ("quorum-power-loss-majority", "power-loss@majority"),
                                             ("quorum-power-loss-all", "power-loss@all")])
def test_the_power_loss_scenarios_predict_valid_on_the_layer(name: str, entry: str) -> None:
    from harness.scenarios import SCENARIOS

    sc = SCENARIOS[name]
    assert sc.spec.nemesis.faults == (entry,) and sc.spec.queue.type == "quorum"
    assert sc.expect.outcome == "valid" and sc.twin is None
    ran = sc.spec.resolved()
    assert ran.backend.unsynced_fs and ran.backend.kind == "local"
    ran.validate()


@pytest.mark.parametrize(("name", "entry", "kind"), [
    ("classic-power-loss-node", "power-loss@leader", "classic"),
    ("classic-power-loss-all", "power-loss@all", "classic"),
    ("stream-power-loss-minority", "power-loss@minority", "stream"),
    ("stream-power-loss-all", "power-loss@all", "stream"),
])
def test_the_classic_and_stream_power_loss_scenarios_put_their_queue_on_the_layer(
        name: str, entry: str, kind: str) -> None:
    from harness.scenarios import SCENARIOS, not_applicable

    sc = SCENARIOS[name]
    assert sc.spec.nemesis.faults == (entry,)
    assert (sc.spec.nemesis.interval_s, sc.spec.nemesis.duration_s) == (20, 10)
    assert sc.spec.queue.type == kind and sc.spec.queue.durable
    assert sc.spec.workload.client.persistent and sc.spec.workload.client.confirms
    ran = sc.spec.resolved()
    assert ran.backend.unsynced_fs and ran.backend.kind == "local"
    ran.validate()
    assert not_applicable(sc.spec) == []  # every line: the layer is the local backend's
    if kind == "stream":  # a reader sees every message again: repeats are by design
        assert not ran.check.unflagged_duplicates_invalid


@pytest.mark.parametrize("name", ["classic-power-loss-node", "classic-power-loss-all",
                                  "stream-power-loss-minority"])
def test_a_durable_classic_queue_and_a_streams_minority_predict_no_loss(name: str) -> None:
    from harness.scenarios import SCENARIOS

    assert SCENARIOS[name].expect.outcome == "valid" and SCENARIOS[name].twin is None


def test_a_stream_losing_every_node_predicts_the_documented_loss_beside_its_quorum_twin() -> None:
    from harness.matrix import DETECTED, MISSED, judge
    from harness.scenarios import SCENARIOS

    sc = SCENARIOS["stream-power-loss-all"]
    assert sc.expect.anomaly == "lost" and sc.twin == "quorum-power-loss-all"
    twin = SCENARIOS[sc.twin]
    assert twin.expect.anomaly is None and twin.spec.queue.type == "quorum"
    assert twin.spec.nemesis == sc.spec.nemesis  # the same power losses, the same schedule
    lost = {"valid": False, "queue": {"valid": False, "anomalies": ["lost"]}}
    assert judge(sc.expect, lost) == DETECTED  # what the streams guide says may happen
    assert judge(sc.expect, {"valid": True}) == MISSED
