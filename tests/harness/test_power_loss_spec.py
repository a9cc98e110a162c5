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
                                             ("quorum-power-loss-all", "power-loss@all")])
def test_the_power_loss_scenarios_predict_valid_on_the_layer(name: str, entry: str) -> None:
    from harness.scenarios import SCENARIOS

    sc = SCENARIOS[name]
    assert sc.spec.nemesis.faults == (entry,) and sc.spec.queue.type == "quorum"
    assert sc.expect.outcome == "valid" and sc.twin is None
    ran = sc.spec.resolved()
    assert ran.backend.unsynced_fs and ran.backend.kind == "local"
    ran.validate()
