"""The explorer (no cluster: runs are a fake function): what a run provoked, the coverage table,
the guide's preference for features that reach unseen effects, the budget, the record, the same
seed giving the same search, one schedule across kinds, and `python -m harness explore`."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import harness.cli as cli
from clusters.rabbitmq import BrokerConfig
from harness import matrix
from harness.cli import main
from harness.explore import (
    FINDING_BONUS,
    Budget,
    Coverage,
    Explorer,
    Guide,
    fault_marks,
    item_rewards,
    run_faults,
)
from harness.explore_space import Candidate, Item, Space
from harness.scenario_file import read_scenario
from harness.spec import TestSpec

KIND = {"kill": "kill", "stop": "stop", "pause": "pause"}
RUN_NUMBERS = itertools.count()


def fault(name, effects=(), noticed=True, when="during"):
    return {"fault": name, "kind": KIND.get(name, "partition"), "noticed": noticed,
            "noticed_when": when, "effects": [{"kind": k} for k in effects]}


class FakeRuns:
    """Runs a spec by a rule: fault name -> effect kinds it provokes (a callable for fresh ones);
    a spec `invalid(spec)` says is a finding. Writes nothing but an empty run directory."""

    def __init__(self, store: Path, provokes=None, invalid=lambda spec: False):
        self.store, self.provokes, self.invalid = store, provokes or {}, invalid
        self.specs: list[TestSpec] = []

    def __call__(self, spec):
        self.specs.append(spec)
        run_dir = self.store / spec.name / f"run{next(RUN_NUMBERS):04d}"
        run_dir.mkdir(parents=True)
        faults = []
        for _s, entry, _d in spec.nemesis.schedule:
            name = entry.split("@")[0].split(":")[0]
            made = self.provokes.get(name, ())
            faults.append(fault(name, made() if callable(made) else made))
        bad = self.invalid(spec)
        results = {"valid": not bad, "faults": faults,
                   "queue": {"valid": not bad, "anomalies": ["lost"] if bad else []}}
        return (1 if bad else 0), SimpleNamespace(run_dir=run_dir, results=results, error=None,
                                                  interrupted=False)


def test_what_a_fault_provoked_is_its_effects_and_whether_it_was_noticed():
    assert fault_marks(fault("kill", ["failover", "node-restart", "failover"])) == [
        "failover", "node-restart", "noticed"]
    assert fault_marks(fault("partition-one", [], noticed=False)) == ["not-noticed"]
    assert fault_marks(fault("pause", [], when="after_heal")) == ["noticed-after-heal"]
    assert fault_marks({"noticed": "unknown"}) == ["notice-unknown"]
    assert run_faults(None) == [] and run_faults({"faults": "?"}) == []
    [f] = run_faults({"faults": [fault("kill", ["failover"])]})
    assert (f["fault"], f["kind"], f["marks"]) == ("kill", "kill", ["failover", "noticed"])


def test_coverage_counts_runs_per_cell_and_says_which_cells_are_new():
    cov = Coverage()
    first = run_faults({"faults": [fault("kill", ["failover"]), fault("stop", ["failover"])]})
    assert cov.add(first) == [{("failover", "kill"), ("noticed", "kill")},
                              {("failover", "stop"), ("noticed", "stop")}]
    again = run_faults({"faults": [fault("kill", ["failover"]), fault("kill", ["failover"])]})
    assert cov.add(again) == [set(), set()]
    assert cov.runs[("failover", "kill")] == 2  # runs, not faults
    assert cov.table().splitlines() == [
        "| effect \\ fault kind | kill | stop |", "|---|---|---|",
        "| failover | 2 | 1 |", "| noticed | 2 | 1 |"]
    assert cov.grid() == (["kill", "stop"], [("failover", [2, 1]), ("noticed", [2, 1])])
    assert Coverage().table() == "no fault reached anything yet\n"


def item(entry, band="above", gap="lead", start=5.0):
    return Item(start, entry, 20.0, band, gap)


def cand(*entries):
    return Candidate(TestSpec(), tuple(item(e) for e in entries))


def test_the_guide_prefers_features_that_reached_unseen_effects():
    guide = Guide()
    kill, part = cand("kill@leader"), cand("partition-one@leader")
    for _ in range(4):  # kills keep reaching what is known; partitions something new each time
        guide.credit(kill, [0.0])
        guide.credit(part, [3.0])
    assert guide.score(part) > guide.score(kill)
    # an untried feature (pause, band "below") still beats a tried one that yielded nothing
    assert guide.feature_score(("fault", "pause")) > guide.feature_score(("fault", "kill"))
    assert guide.score(Candidate(TestSpec(), (item("pause@one", "below", "lead"),))) > \
        guide.score(kill)
    assert guide.to_dict()["fault=kill"]["tries"] == 4


def test_a_run_s_new_cells_are_credited_to_the_scheduled_fault_that_reached_them():
    c = cand("kill@leader", "partition-one@n2", "kill@one")
    faults = run_faults({"faults": [fault("kill"), fault("partition-one"), fault("kill")]})
    new = [{("a", "kill")}, set(), {("b", "kill"), ("c", "kill")}]
    assert item_rewards(c, faults, new, invalid=False) == [1.0, 0.0, 2.0]
    assert item_rewards(c, faults, new, invalid=True) == [1.0 + FINDING_BONUS, FINDING_BONUS,
                                                          2.0 + FINDING_BONUS]
    # a window the schedule does not hold is passed over
    extra = run_faults({"faults": [fault("stop"), fault("kill")]})
    assert item_rewards(c, extra, [{("x", "stop")}, {("y", "kill")}], False) == [1.0, 0, 0]


def explorer(tmp_path, runs=6, seed=7, pool=4, space=None, dims=(), base=None, **kw):
    return Explorer(base or TestSpec(), space or Space(), seed, tmp_path / "store",
                    Budget(runs=runs, **kw), pool, dims)


def test_the_same_seed_and_the_same_run_results_give_the_same_search(tmp_path):
    provokes = {"kill": ("failover",), "partition-one": ("pause-minority",)}
    a, b = explorer(tmp_path / "a"), explorer(tmp_path / "b")
    ra, rb = FakeRuns(tmp_path / "a" / "runs", provokes), FakeRuns(tmp_path / "b" / "runs",
                                                                   provokes)
    assert a.execute(ra, lambda _s: None) == 0
    b.execute(rb, lambda _s: None)
    assert [s.to_dict() for s in ra.specs] == [s.to_dict() for s in rb.specs]
    assert [s["pool_scores"] for s in a.steps] == [s["pool_scores"] for s in b.steps]
    other = explorer(tmp_path / "c", seed=8)
    rc = FakeRuns(tmp_path / "c" / "runs", provokes)
    other.execute(rc, lambda _s: None)
    assert [s.nemesis.schedule for s in rc.specs] != [s.nemesis.schedule for s in ra.specs]


def test_guided_search_spends_more_on_what_reaches_new_effects_than_random_search(tmp_path):
    fresh = itertools.count()
    provokes = {"partition-one": lambda: (f"novel-{next(fresh)}",), "kill": ("failover",)}
    space = Space(faults=("partition-one", "kill"))

    def share(pool, seed):
        ex = explorer(tmp_path / f"{pool}-{seed}", runs=15, seed=seed, pool=pool, space=space)
        ex.execute(FakeRuns(tmp_path / f"{pool}-{seed}" / "runs", provokes), lambda _s: None)
        entries = [i["entry"] for s in ex.steps[5:] for i in s["schedule"]]
        return sum(e.startswith("partition") for e in entries) / len(entries)

    for seed in (0, 1, 2):
        assert share(8, seed) > share(1, seed)
        assert share(8, seed) > 0.6


def test_every_run_is_recorded_with_its_candidate_file_and_the_coverage(tmp_path):
    said: list[str] = []
    ex = explorer(tmp_path, runs=3)
    runs = FakeRuns(tmp_path / "runs", {"kill": ("failover",), "stop": ("node-restart",)})
    assert ex.execute(runs, said.append) == 0
    doc = json.loads((ex.out_dir / "explore.json").read_text())
    assert ex.out_dir.parent == tmp_path / "store" / "explore"
    assert doc["seed"] == 7 and doc["runs"] == 3 and len(doc["steps"]) == 3
    for step, spec in zip(doc["steps"], runs.specs, strict=True):
        assert read_scenario(Path(step["scenario_file"])).nemesis.schedule == \
            spec.nemesis.schedule
        [run] = step["runs"]
        assert set(run) >= {"run_dir", "verdict", "faults", "new_cells", "exit_code"}
        assert Path(run["run_dir"]).is_dir() and run["verdict"] == "valid"
        assert step["score"] == max(step["pool_scores"]) and len(step["pool_scores"]) == 4
    assert doc["coverage"] and doc["features"]
    md = (ex.out_dir / "explore.md").read_text()
    assert "## Coverage: runs that reached each effect, by fault kind" in md
    assert "| effect \\ fault kind |" in md
    assert any(line.startswith("=== candidate 0 (score") for line in said)
    assert said[-1] == "explore: budget spent (3 of 3 runs made)"


def test_an_invalid_run_makes_the_explore_exit_1_and_a_crash_does_not_end_it(tmp_path):
    calls = []

    def run(spec):
        calls.append(spec)
        if len(calls) == 1:
            raise RuntimeError("the cluster would not start")
        return FakeRuns(tmp_path / "r", invalid=lambda s: len(calls) == 3)(spec)

    ex = explorer(tmp_path, runs=3)
    assert ex.execute(run, lambda _s: None) == 1
    verdicts = [s["runs"][0]["verdict"] for s in ex.steps]
    assert verdicts == ["unknown", "valid", "invalid"]
    assert "RuntimeError" in ex.steps[0]["runs"][0]["error"]
    # a run that crashed is an infrastructure error, apart from findings (the nightly's JUnit)
    assert [r.judgement for r in ex.rows] == [matrix.ERROR, matrix.AS_EXPECTED, matrix.FINDING]
    assert ex.rows[0].infrastructure.startswith("harness error: RuntimeError")


def test_an_hours_budget_starts_no_step_the_time_left_cannot_hold(tmp_path):
    clock = SimpleNamespace(t=0.0)
    ex = Explorer(TestSpec(), Space(), 1, tmp_path, Budget(hours=0.1), 2,
                  clock=lambda: clock.t)
    fake = FakeRuns(tmp_path / "runs")

    def run(spec):
        clock.t += spec.time_limit_s + 30  # 30 s of overhead a run
        return fake(spec)

    said: list[str] = []
    ex.execute(run, said.append)
    assert clock.t <= 360
    assert said[-1].startswith("explore: budget spent (") and "s of the budget left" in said[-1]
    with pytest.raises(ValueError):
        Budget()


def test_one_schedule_runs_across_kinds_mirrored_on_4_0_is_not_applicable(tmp_path):
    dims = [("queue.type", ("quorum", "mirrored", "classic")), ("broker.rabbitmq", ("3.10", "4.0"))]
    ex = explorer(tmp_path, runs=5, dims=dims, space=Space(max_faults=2))
    runs = FakeRuns(tmp_path / "runs", invalid=lambda s: s.queue.type == "mirrored")
    assert ex.execute(runs, lambda _s: None) == 1
    assert [(s.queue.type, s.broker.rabbitmq) for s in runs.specs] == [
        ("quorum", "3.10"), ("quorum", "4.0"), ("mirrored", "3.10"), ("classic", "3.10"),
        ("classic", "4.0")]
    assert len({s.nemesis.schedule for s in runs.specs}) == 1
    assert not any(i.target in ("follower", "followers")  # classic has no replicas
                   for i in ex.choose(0)[0].items)
    md = (ex.out_dir / "explore.md").read_text()
    assert "## One schedule across variants" in md
    assert ("| candidate-000 | valid | 1/1 ok | 0/1 FINDING | 1/1 ok |" in md)
    assert ("| candidate-000 (RabbitMQ 4.0) | valid | 1/1 ok | not applicable: classic queue "
            "mirroring was removed in RabbitMQ 4.0;") in md
    assert "candidate-001" not in md  # the budget ended before it: nothing said of it


def test_python_m_harness_explore_runs_stored_runs_and_prints_the_coverage(
        tmp_path, monkeypatch, capsys):
    fake = FakeRuns(tmp_path / "runs", {"kill": ("failover",)})
    monkeypatch.setattr(cli, "_run_and_report", lambda spec, progress=True: fake(spec))
    monkeypatch.setattr(cli, "_require_root", lambda specs=(): None)
    args = ["explore", "--runs", "2", "--seed", "5", "--pool", "3", "--faults", "kill,stop",
            "--targets", "leader,minority", "--store", str(tmp_path / "store")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "explore: seed 5, budget 2 runs, pool 3" in out
    assert "coverage: runs that reached each effect, by fault kind" in out
    assert "explore: 2 runs, seed 5 (repeat: --seed 5)" in out
    assert all(e.split("@")[0] in ("kill", "stop") and e.split("@")[1] in ("leader", "minority")
               for s in fake.specs for _st, e, _d in s.nemesis.schedule)
    first = [s.to_dict() for s in fake.specs]
    fake.specs.clear()
    assert main(args) == 0
    assert [s.to_dict() for s in fake.specs] == first  # the recorded seed repeats the search
    assert main(["explore", "--store", str(tmp_path)]) == 2
    assert "needs a budget" in capsys.readouterr().err
    assert main(["explore", "--runs", "1", "--nemesis", "kill"]) == 2
    assert "--faults" in capsys.readouterr().err
    assert main(["explore", "--runs", "1", "--faults", "unplug"]) == 2


def test_explore_on_a_slower_detector_draws_longer_faults(tmp_path):
    ex = explorer(tmp_path, base=TestSpec(broker=BrokerConfig(net_ticktime=30)))
    c, _scores = ex.choose(0)
    assert all(i.duration_s >= 0.3 * 30 - 0.1 for i in c.items)


def test_explore_shrink_stops_at_the_first_finding_and_shrinks_it(tmp_path, monkeypatch, capsys):
    # A stand-in run: stored like a real one (scenario.toml, results.json); a schedule holding
    # a kill loses messages, so the minimal test is one kill, nothing else.
    from harness.scenario_file import write_scenario

    def kills(spec):
        return any(e.startswith("kill") for _s, e, _d in spec.nemesis.schedule)

    specs: list[TestSpec] = []

    def run(spec, progress=True):
        specs.append(spec)
        run_dir = tmp_path / "store" / spec.name / f"run{next(RUN_NUMBERS):04d}"
        run_dir.mkdir(parents=True)
        write_scenario(spec, run_dir / "scenario.toml")
        bad = kills(spec)
        results = {"valid": not bad, "faults": [],
                   "queue": {"valid": not bad, "anomalies": ["lost"] if bad else []}}
        (run_dir / "results.json").write_text(json.dumps(results))
        return (1 if bad else 0), SimpleNamespace(run_dir=run_dir, results=results, error=None,
                                                  interrupted=False)

    monkeypatch.setattr(cli, "_run_and_report", run)
    monkeypatch.setattr(cli, "_require_root", lambda specs=(): None)
    args = ["explore", "--runs", "20", "--seed", "5", "--pool", "2", "--faults", "kill,stop",
            "--max-faults", "3", "--fixed-workload", "--shrink", "--shrink-max-runs", "40",
            "--store", str(tmp_path / "store")]
    assert main(args) == 1
    out = capsys.readouterr().out
    explored = specs[:next(i for i, s in enumerate(specs) if kills(s)) + 1]
    assert f"explore: {len(explored)} runs, seed 5" in out  # the search stopped at its finding
    assert f"a finding at candidate {len(explored) - 1}; the search stops there" in out
    [explore_dir] = (tmp_path / "store" / "explore").iterdir()
    doc = json.loads((explore_dir / "explore.json").read_text())
    [shrunk] = doc["shrinks"]
    assert shrunk["finding"] == doc["steps"][-1]["runs"][0]["run_dir"]
    assert shrunk["status"] == "minimal: fails 5 of 5" and shrunk["rate"] == "5 of 5"
    minimal = read_scenario(Path(shrunk["minimal"]))
    assert [e.split("@")[0] for _s, e, _d in minimal.nemesis.schedule] == ["kill"]
    assert shrunk["replays"] == len(specs) - len(explored)
    assert "## Findings shrunk" in (explore_dir / "explore.md").read_text()
    page = (explore_dir / "explore.html").read_text()
    assert "Findings shrunk" in page and "shrink page" in page and "minimal.toml" in page


def test_explore_draws_the_client_mode_and_records_it_per_candidate(tmp_path, monkeypatch,
                                                                    capsys):
    fake = FakeRuns(tmp_path / "runs")
    monkeypatch.setattr(cli, "_run_and_report", lambda spec, progress=True: fake(spec))
    monkeypatch.setattr(cli, "_require_root", lambda specs=(): None)
    main(["explore", "--runs", "6", "--seed", "3", "--pool", "2", "--faults", "partition-one",
          "--stays", "none,both", "--store", str(tmp_path / "store")])
    [record] = (tmp_path / "store" / "explore").glob("*/explore.json")
    steps = json.loads(record.read_text())["steps"]
    modes = [step["config"]["workload.stay"] for step in steps]
    assert set(modes) == {"none", "both"}
    for step, spec in zip(steps, fake.specs, strict=True):
        assert read_scenario(Path(step["scenario_file"])).workload.stay == \
            spec.workload.stay == step["config"]["workload.stay"]
        said = "; clients that stay: both" in step["workload"]
        assert said == (spec.workload.stay == "both")
    assert main(["explore", "--runs", "1", "--stays", "forever",
                 "--store", str(tmp_path / "store")]) == 2
    assert "unknown client mode(s) forever" in capsys.readouterr().err
