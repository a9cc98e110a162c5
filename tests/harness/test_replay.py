"""`run --replay RUN_DIR` and what every run prints (no cluster: the runner is replaced)."""

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import harness.cli as cli
import harness.runner
from harness.cli import main
from harness.scenarios import SCENARIOS


@pytest.fixture
def stored(tmp_path):
    """A stored run of mirrored-partition with seed 4242 (test.json as the runner writes it: its
    faults' durations resolved from net_ticktime)."""
    spec = dataclasses.replace(SCENARIOS["mirrored-partition"].spec, seed=4242).resolved()
    run = tmp_path / "store" / "mirrored-partition" / "20260101T000000.000000Z"
    run.mkdir(parents=True)
    (run / "test.json").write_text(json.dumps({"name": spec.name, "spec": spec.to_dict(),
                                               "seed": 4242, "history_ops": 10}))
    return spec, run


@pytest.fixture
def fake_runner(monkeypatch, tmp_path):
    """Replaces run_test: records what it was given and returns a run that never got checked."""
    calls = []

    def run_test(spec, store_root, observer=None, replay_of=None):
        calls.append(SimpleNamespace(spec=spec, store_root=store_root, observer=observer,
                                     replay_of=replay_of))
        run_dir = Path(store_root) / spec.name / "20260202T000000.000000Z"
        return 2, SimpleNamespace(run_dir=run_dir, results=None, error="BrokerError: no boot",
                                  interrupted=False, phase_times={})

    monkeypatch.setattr(harness.runner, "run_test", run_test)
    monkeypatch.setattr(cli, "_require_root", lambda *_specs: None)
    return calls


def test_replay_repeats_the_stored_spec_and_seed(stored, fake_runner, tmp_path, capsys):
    spec, run = stored
    store = tmp_path / "again"
    assert main(["run", "--replay", str(run), "--store", str(store), "--no-progress"]) == 2
    (call,) = fake_runner
    assert call.spec == dataclasses.replace(spec, store=str(store))
    assert call.replay_of == str(run.resolve()) and call.observer is not None
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"run mirrored-partition: seed 4242 (replay of {run.resolve()})"
    assert out[-2].startswith("seed: 4242 (repeat it: python -m harness run --replay ")
    assert out[-1].startswith("run directory: ")


def test_options_given_override_the_replayed_run(stored, fake_runner, tmp_path):
    _spec, run = stored
    assert main(["run", "--replay", str(run), "--store", str(tmp_path / "s"), "--seed", "9",
                 "--time-limit", "30", "--nodes", "5", "--no-progress"]) == 2
    (call,) = fake_runner
    assert (call.spec.seed, call.spec.time_limit_s, call.spec.nodes) == (9, 30, 5)
    assert call.spec.queue.type == "mirrored" and call.spec.broker.partition_handling == "autoheal"


def test_a_replay_through_store_latest_records_the_real_run(stored, fake_runner, tmp_path):
    _spec, run = stored
    latest = tmp_path / "store" / "latest"
    latest.symlink_to(run.relative_to(tmp_path / "store"))
    main(["run", "--replay", str(latest), "--store", str(tmp_path / "s"), "--no-progress"])
    assert fake_runner[0].replay_of == str(run.resolve())


def write_test_json(run: Path, text: str) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "test.json").write_text(text)
    return run


@pytest.mark.parametrize(("content", "message"), [
    (None, "has no test.json"),
    ("{not json", "not readable JSON"),
    ("[1, 2]", "has no spec"),
    ('{"seed": 1}', "has no spec"),
    ('{"spec": {"bogus": 1}, "seed": 1}', "malformed spec in test.json: unknown TestSpec"),
    ('{"spec": {"nodes": "three"}, "seed": 1}', "malformed spec"),
    ('{"spec": {"broker": "autoheal"}, "seed": 1}', "malformed spec"),
    ('{"spec": {"nodes": 0}, "seed": 1}', "node count"),
    ('{"spec": {"nodes": 3}}', "no integer seed"),
])
def test_a_replay_of_no_run_or_a_malformed_one_exits_2_before_anything_starts(
        content, message, tmp_path, fake_runner, capsys):
    run = tmp_path / "run"
    if content is not None:
        write_test_json(run, content)
    assert main(["run", "--replay", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot replay {run}") and message in err
    assert fake_runner == []


def test_replay_takes_neither_repeat_nor_scenario(stored, fake_runner, capsys):
    _spec, run = stored
    assert main(["run", "--replay", str(run), "--repeat", "2"]) == 2
    assert main(["run", "--replay", str(run), "--scenario", "kill"]) == 2
    assert "--replay repeats one stored run" in capsys.readouterr().err
    assert fake_runner == []


def test_every_run_prints_its_seed_first_and_last_and_rewrites_the_store_index(
        fake_runner, tmp_path, monkeypatch, capsys):
    written = []
    monkeypatch.setattr(cli, "_refresh_index", written.append)
    store = tmp_path / "s"
    assert main(["run", "--scenario", "kill", "--seed", "77", "--store", str(store),
                 "--no-progress"]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "run kill: seed 77" and out[-2].startswith("seed: 77 ")
    assert written == [store]


def test_the_store_index_is_skipped_quietly_when_reports_index_is_missing(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_index(name, *args, **kwargs):
        if name == "reports.index":
            raise ModuleNotFoundError("No module named 'reports.index'", name="reports.index")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_index)
    cli._refresh_index(tmp_path)  # no error, nothing written
    assert not (tmp_path / "index.html").exists()


def test_a_run_shows_its_progress_and_gives_the_console_its_stream_back(fake_runner, tmp_path):
    import sys

    assert main(["run", "--scenario", "kill", "--seed", "1", "--store", str(tmp_path)]) == 2
    assert fake_runner[0].observer is not None
    assert cli._console is not None and cli._console.stream is sys.stderr
