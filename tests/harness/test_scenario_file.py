"""Scenario files: the TOML writer, spec -> file -> spec for every catalogue scenario, bad files
exiting 2 with what is wrong, `run --scenario-file`, `scenarios --write`, and the scenario.toml
a run writes from its history (no cluster: the runner is replaced)."""

from __future__ import annotations

import dataclasses
import json
import re
import textwrap
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import harness.cli as cli
import harness.runner
from harness import scenario_file
from harness.cli import main
from harness.scenario_file import (
    RUN_FILE,
    ScenarioFileError,
    dumps_scenario,
    loads_scenario,
    read_scenario,
    write_run_scenario,
    write_scenario,
)
from harness.scenarios import SCENARIOS
from harness.series import same_scenario
from harness.spec import TestSpec, spec_from_dict
from harness.toml_text import COMMENT, dumps
from nemesis.options import NemesisOptions
from workloads.clients import ClientOptions
from workloads.queue_spec import QueueSpec
from workloads.queue_workload import WorkloadOptions

S = 1_000_000_000


# -- the TOML writer -------------------------------------------------------------------------------

def test_the_writer_writes_what_tomllib_reads_back() -> None:
    data = {"name": 'a "quoted"\tname\nwith\\ and \x01', "n": 3, "x": 0.1, "big": 1e20,
            "yes": True, "list": ["a", "b"], "pairs": [["k", "v"]], "empty": [],
            "odd key": 1,
            "t": {COMMENT: "a table\nof two lines", "a": 1, "sub": {"b": 2.5}},
            "items": [{COMMENT: "first", "x": 1}, {"x": 2}]}
    text = dumps(data, "head")
    assert text.startswith("# head\n") and "# a table\n# of two lines\n" in text
    expected = json.loads(json.dumps(data))
    expected["t"].pop(COMMENT)
    expected["items"][0].pop(COMMENT)
    assert tomllib.loads(text) == expected


@pytest.mark.parametrize("bad", [{"a": None}, {"a": float("inf")}, {"a": [1, "x"]},
                                 {"a": {1, 2}}, {"items": [{"sub": {"x": 1}}]}])
def test_the_writer_refuses_what_toml_cannot_hold_as_given(bad: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        dumps(bad)


# -- spec -> file -> spec --------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_catalogue_scenario_reads_back_as_the_same_spec(name: str) -> None:
    spec = SCENARIOS[name].spec
    back = loads_scenario(dumps_scenario(spec), name)
    assert back == spec
    assert same_scenario(back.to_dict(), spec)
    seeded = dataclasses.replace(spec, seed=77).resolved()
    assert loads_scenario(dumps_scenario(seeded)) == seeded


def once_spec(**changes: Any) -> TestSpec:
    nemesis = NemesisOptions.played_once(
        [(10.0, "kill@leader", 15.0), (30.5, "packet-loss@n1+n3:packet_loss=0.5", 20.25)],
        targets="minority")
    return dataclasses.replace(
        TestSpec(name="mine", nodes=3, time_limit_s=60.0, seed=5, description='say "hi"\n',
                 queue=QueueSpec(type="mirrored", ha_mode="nodes", ha_params=["n1", "n2"]),
                 workload=WorkloadOptions(consume_rate=None,
                                          client=ClientOptions(stream_offset=None)),
                 nemesis=nemesis), **changes)


def test_a_schedule_an_unset_setting_and_lists_read_back() -> None:
    spec = once_spec()
    text = dumps_scenario(spec, notes=["hit n2", None])
    assert 'consume_rate = "none"' in text and "stream_offset" not in text
    assert "\nfaults =" not in text  # the schedule's entries
    assert text.count("[[nemesis.schedule]]") == 2 and "# hit n2\nstart_s = 10.0" in text
    assert loads_scenario(text) == spec
    assert same_scenario(loads_scenario(text).to_dict(), spec)


def test_a_schedule_reads_back_from_test_json_and_warns_of_short_silent_faults() -> None:
    spec = dataclasses.replace(once_spec(), nemesis=NemesisOptions.played_once(
        [(1.0, "partition-one@n2", 5.0), (10.0, "kill", 5.0)]))
    assert spec_from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    (warning,) = spec.warnings()
    assert warning.startswith("fault partition-one@n2 lasts 5 s, but RabbitMQ declares")


def test_the_documented_examples_are_scenario_files() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    example = re.search(r"```toml\n(.*?)```", readme, re.S)
    assert example is not None
    spec = loads_scenario(example.group(1), "README.md")
    assert spec.nemesis.schedule == ((10.0, "kill@leader", 15.0),
                                     (45.0, "partition-one@n3", 25.0))
    doc = re.search(r"For example:\n\n(.*?)\n\nA run's", scenario_file.__doc__ or "", re.S)
    assert doc is not None and loads_scenario(textwrap.dedent(doc.group(1))) == spec


# -- bad files -------------------------------------------------------------------------------------

SCHEDULE = '[[nemesis.schedule]]\nstart_s = {}\nfault = "{}"\nduration_s = {}\n'

BAD_FILES = [
    ('name = "x"\nnodez = 3\n', "line 2: nodez: unknown key; the file takes name, nodes"),
    ('[workload]\nrate = 10\n\n[workload.client]\nprefetchh = 3\n',
     "line 5: workload.client.prefetchh: unknown key; workload.client takes publish_timeout_s"),
    ('nodes = "3"\n', 'line 1: nodes: must be a whole number, got "3" (text)'),
    ('[broker]\nnet_ticktime = 10.5\n', "line 2: broker.net_ticktime: must be a whole number"),
    ('[broker]\npartition_handling = "sometimes"\n',
     "line 2: broker.partition_handling: must be one of ignore, autoheal, pause_minority"),
    ('[workload]\nrate = "none"\n', 'line 2: workload.rate: must be a number, got "none"'),
    ('broker = 3\n', "line 1: broker: must be a table of BrokerConfig settings"),
    ('time_limit_s = 90\n\n' + SCHEDULE.format(10, "kill", 20) + "\n"
     + SCHEDULE.format(20, "pause", 5),
     "line 8: nemesis.schedule[2]: scheduled fault 2 (pause) starts at 20 s, before scheduled "
     "fault 1 (kill) ends at 30 s: faults play one at a time"),
    ("\n" + SCHEDULE.format(10, "explode", 20),
     "line 2: nemesis.schedule[1]: scheduled fault 1 (explode): unknown fault 'explode'"),
    ('[nemesis]\nfaults = ["explode"]\n', "line 1: nemesis: unknown fault 'explode'"),
    (SCHEDULE.format(1, "kill@n4", 2), "scheduled fault 1 (kill@n4): targets 'n4' names n4"),
    (SCHEDULE.format(-1, "kill", 2), "scheduled fault 1 (kill): start_s must be >= 0"),
    (SCHEDULE.format(1, "kill", 0), "scheduled fault 1 (kill): duration_s must be > 0"),
    ('time_limit_s = 30\n' + SCHEDULE.format(20, "kill", 20),
     "line 2: nemesis.schedule[1]: scheduled fault 1 (kill) ends at 40 s, past the main "
     "phase's 30 s"),
    (SCHEDULE.format(1, "kill", 2).replace("duration_s", "duration"),
     "line 4: nemesis.schedule[1].duration: unknown key; a scheduled fault takes start_s, "
     "fault, duration_s"),
    ('[nemesis]\norder = "random"\n\n' + SCHEDULE.format(1, "kill", 2),
     "a schedule is played with order 'once', not 'random'"),
    ('nodes = 3\n\n[queue]\ntype = "lifo"\n', "line 3: queue: unknown queue type 'lifo'"),
    ("name = \n", "not valid TOML: Invalid value (at line 1, column 8)"),
]


@pytest.mark.parametrize("text,message", BAD_FILES)
def test_a_bad_file_exits_2_naming_file_line_key_and_what_is_wrong(
        text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness.runner, "run_test", _never)
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ScenarioFileError, match=re.escape(message)):
        read_scenario(path)
    assert main(["run", "--scenario-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: scenario file {path}") and message in err
    assert "--nemesis-duration" not in err


def _never(*_a: Any, **_k: Any) -> Any:
    raise AssertionError("nothing may start for a bad scenario file")


def test_a_missing_file_and_a_file_with_a_scenario_exit_2(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(harness.runner, "run_test", _never)
    assert main(["run", "--scenario-file", str(tmp_path / "nope.toml")]) == 2
    assert "cannot read it" in capsys.readouterr().err
    good = write_scenario(once_spec(), tmp_path / "good.toml")
    assert main(["run", "--scenario-file", str(good), "--scenario", "kill"]) == 2
    assert "takes neither --scenario nor --replay" in capsys.readouterr().err


# -- running one -----------------------------------------------------------------------------------

@pytest.fixture
def fake_runner(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Replaces run_test: records the spec it was given; the run never got checked."""
    calls: list[Any] = []

    def run_test(spec, store_root, observer=None, replay_of=None):
        calls.append(spec)
        return 2, SimpleNamespace(run_dir=Path(store_root) / spec.name / "x", results=None,
                                  error="BrokerError: no boot", interrupted=False,
                                  phase_times={})

    monkeypatch.setattr(harness.runner, "run_test", run_test)
    monkeypatch.setattr(cli, "_require_root", lambda *_specs: None)
    return calls


def test_run_scenario_file_runs_the_files_spec(fake_runner, tmp_path) -> None:
    spec = dataclasses.replace(once_spec(), store=str(tmp_path / "store"))
    path = write_scenario(spec, tmp_path / "s.toml")
    assert main(["run", "--scenario-file", str(path), "--no-progress"]) == 2
    (ran,) = fake_runner
    assert ran == spec.for_queue().resolved()
    assert ran.seed == 5 and ran.nemesis.schedule == spec.nemesis.schedule


def test_options_override_the_file_and_faults_given_are_drawn_instead(fake_runner,
                                                                       tmp_path) -> None:
    path = write_scenario(once_spec(store=str(tmp_path / "store")), tmp_path / "s.toml")
    main(["run", "--scenario-file", str(path), "--time-limit", "120", "--seed", "9",
          "--no-progress"])
    main(["run", "--scenario-file", str(path), "--nemesis", "kill,pause", "--no-progress"])
    main(["run", "--scenario-file", str(path), "--nemesis-order", "cycle", "--no-progress"])
    timed, drawn, cycled = fake_runner
    assert (timed.time_limit_s, timed.seed, timed.nemesis.order) == (120, 9, "once")
    assert (drawn.nemesis.order, drawn.nemesis.faults, drawn.nemesis.schedule) == (
        "random", ("kill", "pause"), ())
    assert (cycled.nemesis.order, cycled.nemesis.faults) == (
        "cycle", ("kill@leader", "packet-loss@n1+n3:packet_loss=0.5"))
    assert drawn.nemesis.targets == "minority"  # the file's other options stay


def test_scenarios_write_writes_the_catalogue_as_files(tmp_path, capsys) -> None:
    assert main(["scenarios", "--write", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out.split()
    assert len(printed) == len(SCENARIOS)
    for name, sc in SCENARIOS.items():
        path = tmp_path / "out" / f"{name}.toml"
        assert str(path) in printed
        assert same_scenario(read_scenario(path).to_dict(), sc.spec)
        assert read_scenario(path) == sc.spec


# -- the run's own scenario.toml -------------------------------------------------------------------

def history_line(t: float, process: Any, f: str, value: Any, type_: str = "info",
                 **kw: Any) -> str:
    return json.dumps({"index": 0, "time": int(t * S), "type": type_, "process": process,
                       "f": f, "value": value, **kw})


def stored_run(tmp_path: Path, spec: TestSpec) -> Path:
    run = tmp_path / "store" / spec.name / "20260101T000000.000000Z"
    run.mkdir(parents=True)
    lines = [
        history_line(0.0, "harness", "phase", {"phase": "setup", "state": "start"}),
        history_line(3.0, "harness", "phase", {"phase": "main", "state": "start"}),
        history_line(3.1, 0, "publish", "0-1", "invoke", publisher=0, seq=1),
        history_line(13.0, "nemesis", "start-partition", {"fault": "partition-random-halves"},
                     "invoke"),
        history_line(13.2, "nemesis", "start-partition",
                     {"fault": "partition-random-halves", "nodes": ["n1", "n2", "n3"],
                      "grudge": {"n1": ["n2", "n3"]}}, node="n1"),
        history_line(33.2, "nemesis", "stop-partition", {"fault": "partition-random-halves"},
                     "invoke"),
        history_line(33.3, "nemesis", "stop-partition", {"fault": "partition-random-halves"}),
        history_line(43.3, "nemesis", "kill", {"fault": "kill", "entry": "kill@leader"},
                     "invoke"),
        history_line(43.5, "nemesis", "kill", {"fault": "kill", "nodes": ["n2"]}, node="n2"),
        history_line(58.5, "nemesis", "start", {"fault": "kill"}, "invoke", node="n2"),
        history_line(59.0, "nemesis", "start", {"fault": "kill", "nodes": ["n2"]}, node="n2"),
        history_line(63.0, "harness", "phase", {"phase": "main", "state": "end"}),
    ]
    (run / "history.jsonl").write_text("\n".join(lines) + "\n")
    return run


def test_a_run_writes_its_faults_as_played(tmp_path) -> None:
    spec = dataclasses.replace(
        SCENARIOS["partition"].spec, seed=4242,
        nemesis=NemesisOptions(faults=("partition-random-halves", "kill@leader"),
                               duration_s=20.0)).resolved()
    run = stored_run(tmp_path, spec)
    path = write_run_scenario(run, spec)
    assert path == run / RUN_FILE
    text = path.read_text()
    assert text.startswith(f"# Run {run.name} of partition, seed 4242")
    assert "# hit n1, n2, n3\nstart_s = 10.0" in text and "# hit n2\nstart_s = 40.3" in text
    again = read_scenario(path)
    assert again.seed == 4242 and again.nemesis.order == "once"
    assert again.nemesis.schedule == ((10.0, "partition-random-halves", 20.2),
                                      (40.3, "kill@leader", 15.2))
    drop = {"nemesis"}
    assert {k: v for k, v in again.to_dict().items() if k not in drop} == \
        {k: v for k, v in spec.to_dict().items() if k not in drop}


def test_a_run_that_never_reached_its_main_phase_writes_its_spec(tmp_path) -> None:
    spec = dataclasses.replace(SCENARIOS["kill"].spec, seed=1).resolved()
    run = tmp_path / "run"
    run.mkdir()
    (run / "history.jsonl").write_text(
        history_line(0.0, "harness", "phase", {"phase": "setup", "state": "start"}) + "\n")
    assert read_scenario(write_run_scenario(run, spec) or Path()) == spec
    (run / "history.jsonl").unlink()
    assert read_scenario(write_run_scenario(run, spec) or Path()) == spec


def test_writing_a_runs_scenario_never_fails_the_run(tmp_path, caplog) -> None:
    assert write_run_scenario(tmp_path / "gone", SCENARIOS["kill"].spec) is None
    assert "could not write scenario.toml" in caplog.text


def test_the_runner_writes_scenario_toml_beside_test_json(tmp_path, monkeypatch) -> None:
    """run_test with every phase replaced: its faults as the history recorded them come back
    as the run directory's scenario.toml."""
    import contextlib

    from history import HARNESS, NEMESIS, Op

    def main_phase(self: Any) -> None:
        self.history.append(Op(type="info", process=HARNESS, f="phase",
                               value={"phase": "main", "state": "start"}))
        self.history.append(Op(type="invoke", process=NEMESIS, f="kill",
                               value={"fault": "kill", "entry": "kill@n2"}))
        self.history.append(Op(type="info", process=NEMESIS, f="kill",
                               value={"fault": "kill", "nodes": ["n2"]}, node="n2"))
        self.history.append(Op(type="invoke", process=NEMESIS, f="start", value={"fault": "kill"},
                               node="n2"))
        self.outcome.error = "BrokerError: gone"  # no main phase time: nothing is checked

    for phase in ("setup", "heal", "recover", "drain", "teardown"):
        monkeypatch.setattr(harness.runner.Run, phase, lambda self: None)
    monkeypatch.setattr(harness.runner.Run, "main", main_phase)
    monkeypatch.setattr(harness.runner, "run_lock", contextlib.nullcontext)
    spec = dataclasses.replace(TestSpec(name="t", seed=8),
                               nemesis=NemesisOptions(faults=("kill@n2",)))
    code, outcome = harness.runner.run_test(spec, tmp_path)
    assert code == 2 and (outcome.run_dir / "test.json").exists()
    again = read_scenario(outcome.run_dir / RUN_FILE)
    assert again.seed == 8 and again.nemesis.faults == ("kill@n2",)
    ((start, entry, duration),) = again.nemesis.schedule
    assert entry == "kill@n2" and 0 <= start < 1 and 0 < duration < 1


def test_the_faults_played_are_read_from_only_the_lines_that_can_hold_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every client op names its phase ("phase":"main"): the scan must not decode those (an
    # hour's history is 2.6 million lines; decoding each took 39 s of the verdict's delay).
    from history import HistoryWriter, Op
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as w:
        w.append(Op(type="info", process="harness", f="phase",
                    value={"phase": "main", "state": "start"}, time=1))
        for i in range(500):
            w.append(Op(type="invoke", process=1, f="publish", value=f"1-{i}", node="n1",
                        queue="q", publisher=1, seq=i, phase="main", time=10 + i))
        w.append(Op(type="info", process="nemesis", f="start-partition",
                    value={"fault": "partition-one", "nodes": ["n3"]}, node="n3", time=700))
        w.append(Op(type="info", process="harness", f="phase",
                    value={"phase": "main", "state": "end"}, time=900))
    decoded = []
    real = scenario_file.json.loads
    monkeypatch.setattr(scenario_file.json, "loads", lambda b: decoded.append(b) or real(b))
    ops = scenario_file.nemesis_ops(path)
    assert [(o.process, o.f) for o in ops] == [
        ("harness", "phase"), ("nemesis", "start-partition"), ("harness", "phase")]
    assert len(decoded) == 3
