"""A disk corruption in a spec (issue 32): only a minority of the nodes may be hit and only on
the local backend; anything else is refused before a cluster starts, exit 2, saying why."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.cli import main
from harness.spec import SpecError, TestSpec
from nemesis.targets import leaves_a_majority

ROOT = Path(__file__).resolve().parents[2]


def spec(*faults: str, nodes: int = 3, targets: str = "one", **backend: object) -> TestSpec:
    base = TestSpec()
    return dataclasses.replace(
        base, nodes=nodes,
        nemesis=dataclasses.replace(base.nemesis, faults=tuple(faults), targets=targets),
        backend=dataclasses.replace(base.backend, **backend))  # type: ignore[arg-type]


@pytest.mark.parametrize("entry", ["disk-corrupt", "disk-corrupt@one", "disk-corrupt@minority",
                                   "disk-corrupt@leader", "disk-corrupt@follower",
                                   "disk-corrupt@n2", "disk-corrupt@minority:corrupt_mode=truncate"
                                   ":corrupt_bytes=512"])
def test_a_minority_on_the_local_backend_is_accepted(entry: str) -> None:
    spec(entry).validate()
    assert not spec(entry).resolved().backend.unsynced_fs  # the layer is not needed


@pytest.mark.parametrize(("entry", "nodes", "most"), [
    ("disk-corrupt@majority", 3, 2), ("disk-corrupt@all", 3, 3), ("disk-corrupt@random", 3, 3),
    ("disk-corrupt@followers", 3, 2), ("disk-corrupt@n1,n2", 3, 2),
    ("disk-corrupt@minority", 4, 2), ("disk-corrupt@one", 2, 1), ("disk-corrupt@leader", 1, 1)])
def test_targets_that_may_reach_a_majority_are_refused(entry: str, nodes: int, most: int) -> None:
    with pytest.raises(SpecError, match=f"only a minority of the {nodes} nodes.*may select {most}"):
        spec(entry, nodes=nodes).validate()


def test_the_options_targets_count_for_an_entry_without_its_own() -> None:
    with pytest.raises(SpecError, match="targets 'majority' may select 2"):
        spec("disk-corrupt", targets="majority").validate()
    spec("kill", targets="majority").validate()  # a kill may hit a majority


@pytest.mark.parametrize("kind", ["ssh", "docker"])
def test_other_backends_are_refused(kind: str) -> None:
    with pytest.raises(SpecError, match=f"local backend only.*this test's backend is {kind}"):
        spec("disk-corrupt@one", kind=kind).validate()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(SpecError, match="corrupt_mode must be one of bitflip, truncate"):
        spec("disk-corrupt@one:corrupt_mode=shred").validate()
    with pytest.raises(SpecError, match="corrupt_bytes must be"):
        spec("disk-corrupt@one:corrupt_bytes=0").validate()
    with pytest.raises(SpecError, match="corrupt_probability is a probability"):
        spec("disk-corrupt@one:corrupt_probability=2").validate()
    with pytest.raises(SpecError, match="at most 4096, got 8192"):
        spec("disk-corrupt@one:corrupt_bytes=1024:corrupt_probability=1").validate()
    spec("disk-corrupt@one:corrupt_bytes=1048576:corrupt_mode=truncate").validate()  # no flips


def test_leaving_a_majority() -> None:
    assert [leaves_a_majority("minority", n) for n in (1, 2, 3, 4, 5)] == [
        True, False, True, False, True]  # of 2 nodes, 1 leaves no majority; of 1, none is picked
    assert leaves_a_majority("n1,n3", 5) and not leaves_a_majority("n1,n3,n5", 5)


@pytest.mark.parametrize(("argv", "says"), [
    (["run", "--backend", "docker", "--nemesis", "disk-corrupt@one"], "local backend only"),
    (["run", "--nemesis", "disk-corrupt@majority"], "may hit only a minority"),
    (["run", "--nemesis", "kill,disk-corrupt@all"], "may hit only a minority"),
])
def test_the_cli_exits_2_before_anything_starts(argv: list[str], says: str,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.runner
    monkeypatch.setattr(harness.runner, "run_test", lambda *a, **k: pytest.fail("run started"))
    assert main(argv) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(("name", "entry", "mode"), [
    ("quorum-disk-corrupt-minority", "disk-corrupt@minority", "bitflip"),
    ("quorum-disk-corrupt-leader-truncate", "disk-corrupt@leader:corrupt_mode=truncate",
     "truncate")])
def test_the_disk_corruption_scenarios_predict_valid(name: str, entry: str, mode: str) -> None:
    from harness.scenarios import SCENARIOS

    sc = SCENARIOS[name]
    assert sc.spec.nemesis.faults == (entry,) and sc.spec.queue.type == "quorum"
    assert sc.expect.outcome == "valid" and sc.twin is None
    ran = sc.spec.resolved()
    ran.validate()
    assert ran.backend.kind == "local" and not ran.backend.unsynced_fs
    assert ran.nemesis.resolve(entry).corrupt_mode == mode
    assert name in (ROOT / "Makefile").read_text().split("RUN_ARGS")[0]  # make test-<name>
