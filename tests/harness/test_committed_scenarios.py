"""Every scenario file the repository keeps (a finding's scenario.toml and its minimal or held
variants, an exploration's, the hour run's) reads as a spec the harness would run: the README
tells readers to run them, so a format change that breaks one fails here, not in their hands."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.scenario_file import read_scenario

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "measurements").rglob("*.toml"))


def test_the_repository_keeps_scenario_files() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in FILES}
    assert "measurements/stay-hour-4.3/scenario.toml" in names
    assert ("measurements/findings/stream-partition-stay-both-rabbitmq-4.3-seed4002/"
            "held-5-min.toml") in names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_committed_scenario_file_reads_as_a_runnable_spec(path: Path) -> None:
    spec = read_scenario(path)  # validated as the CLI runs it; raises ScenarioFileError if not
    assert spec.name and spec.broker.rabbitmq in ("3.10", "4.0", "4.3")
    # Its name and line match the folder it is filed under, where the folder names them.
    folder = path.parent.name
    if "rabbitmq-" in folder:
        assert f"rabbitmq-{spec.broker.rabbitmq}-" in folder
