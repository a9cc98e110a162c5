"""The nightly's remaining budget goes to explore (no cluster: runs are a fake function): the
explore runs after the scenarios within the time left, its findings, weak runs, infrastructure
errors and skipped runs are told apart in matrix.json, the JUnit file and the page, its coverage
table is on the page, and `python -m harness nightly` hands it the default test."""

from __future__ import annotations

import json
import re
from pathlib import Path

from junitparser import Error, Failure, JUnitXml, Skipped

from harness import matrix
from harness.cli import main
from harness.nightly import Nightly, explore_code, tally
from harness.spec import TestSpec
from tests.harness.test_nightly import LOST, OK, Clock, entries, outcome

WEAK = {**OK, "strength": {"weak": True, "reason": "no fault was noticed", "faults": 1,
                           "noticed": 0}}


def explored(spec, effects=("failover",)):
    """Results of an explored run: each scheduled fault noticed, with `effects`."""
    faults = [{"fault": e.split("@")[0].split(":")[0], "kind": "kill", "noticed": True,
               "effects": [{"kind": k} for k in effects]} for _s, e, _d in spec.nemesis.schedule]
    return {**OK, "faults": faults}


class NightRuns:
    """Scenario runs take 130 s; explored runs take their time limit plus 70 s (what the nightly
    learnt) and show what `script` says for the explored run of that number."""

    def __init__(self, store: Path, clock: Clock, script=None) -> None:
        self.store, self.clock, self.script = store, clock, script or {}
        self.calls: list[tuple[str, float]] = []
        self.explored = 0

    def __call__(self, name, spec, tries):
        self.calls.append((name, self.clock.t))
        run_dir = self.store / name / f"r{len(self.calls):03d}"
        run_dir.mkdir(parents=True)
        (run_dir / "report.html").write_text("<html></html>")
        if not name.startswith("explore-"):
            self.clock.t += 130.0
            return 0, outcome(run_dir, OK)
        self.clock.t += spec.time_limit_s + 70.0
        what = self.script.get(self.explored, explored(spec))
        self.explored += 1
        if callable(what):
            return what(run_dir)
        code = 0 if what["valid"] is True else 1 if what["valid"] is False else 2
        return code, outcome(run_dir, what)


def test_the_budget_left_after_the_scenarios_goes_to_explore(tmp_path):
    clock = Clock()
    n = Nightly(entries("a", "b"), 1500, tmp_path, base_seed=3, clock=clock)
    runs = NightRuns(tmp_path, clock)
    said: list[str] = []
    assert n.execute(runs, said.append, explore=TestSpec()) == 0
    names = [c[0] for c in runs.calls]
    assert names[:2] == ["a", "b"] and len(names) > 3
    assert set(names[2:]) == {"explore-quorum"}  # the default test's queue kind
    assert clock.t <= 1500  # no explored run started that the time left could not hold
    assert n.explorer is not None and n.explorer.seed == 3  # the nightly's seed, recorded
    assert n.explorer.out_dir.parent == tmp_path / "explore"
    assert any(s.startswith("explore: the 20.7 min left (at most 17 runs), seed 3") for s in said)
    assert any(s.startswith("coverage: runs that reached each effect") for s in said)
    doc = json.loads((n.out_dir / "matrix.json").read_text())
    ex = doc["explore"]
    assert ex["seed"] == 3 and ex["runs"] == len(names) - 2 == len(ex["rows"])
    assert {"effect": "failover", "fault_kind": "kill", "runs": ex["runs"]} in ex["coverage"]
    assert [r["scenario"] for r in doc["rows"]] == ["a", "b"]  # the scenarios' rows alone
    assert doc["tally"]["scenarios"]["as expected"] == 2
    assert doc["tally"]["explore"]["as expected"] == ex["runs"]


def test_explored_findings_weak_runs_and_errors_are_told_apart(tmp_path):
    clock = Clock()
    n = Nightly(entries("a", "b", "c"), 1500, tmp_path, base_seed=4, clock=clock)

    def crash(run_dir):
        raise RuntimeError("the cluster would not start")

    script = {0: LOST, 1: WEAK, 2: crash}
    assert n.execute(NightRuns(tmp_path, clock, script), lambda _s: None,
                     explore=TestSpec()) == 2  # an infrastructure error in the explore
    judgements = [r.judgement for r in n.explorer.rows]
    assert judgements[:3] == [matrix.FINDING, matrix.WEAK, matrix.ERROR]
    (suite,) = list(JUnitXml.fromfile(str(n.out_dir / "junit.xml")))
    cases = {c.classname: c.result for c in suite}
    assert [type(x) for x in cases["explore.candidate-000"]] == [Failure]
    (weak,) = cases["explore.candidate-001"]
    assert isinstance(weak, Skipped) and weak.type == "weak"
    assert [type(x) for x in cases["explore.candidate-002"]] == [Error]
    assert cases["a"] == [] and cases["explore.candidate-003"] == []
    props = {p.name: p.value for p in suite.properties()}
    assert (props["findings"], props["weak"], props["infrastructure_errors"],
            props["skipped"]) == ("1", "1", "1", "0")
    html = (n.out_dir / "index.html").read_text()
    assert "Scenario runs: as expected 3, findings 0, missed 0, weak 0," in html
    part = html[html.index("<h2>Explore with the budget left</h2>"):]
    assert re.search(r"Seed 4; as expected \d+, findings 1, missed 0, weak 1, "
                     r"infrastructure errors 1, no verdict 0, skipped 0\.", part)
    assert re.search(r'href="../../explore/[^/"]+/explore.html">explore.html</a>', part)
    assert "<h3>Coverage: runs that reached each effect, by fault kind</h3>" in part
    assert "<td>failover</td>" in part and "<th>effect \\ fault kind</th>" in part
    assert "candidate-000" in part and "5 confirmed messages lost" in part


def test_a_weak_explored_run_counts_against_nothing_a_finding_exits_1():
    def row(results, infrastructure=None):
        return matrix.make_row("candidate-000", matrix.Expectation(), 0, 1, "", results,
                               infrastructure=infrastructure)

    assert explore_code([row(WEAK), row(OK)]) == 0
    assert explore_code([row(WEAK), row(LOST)]) == 1
    assert explore_code([row(LOST), row(None)]) == 2
    assert explore_code([row(OK, infrastructure="the cluster would not start")]) == 2
    counted = tally([row(WEAK), row(LOST), row(None), row(OK)], ())
    assert counted == {"as expected": 1, "findings": 1, "missed": 0, "weak": 1,
                       "infrastructure errors": 0, "no verdict": 1, "skipped": 0}


def test_no_explore_without_time_left_or_after_an_interruption(tmp_path):
    clock = Clock()
    n = Nightly(entries("a"), 190, tmp_path, base_seed=1, clock=clock)
    said: list[str] = []
    runs = NightRuns(tmp_path, clock)
    n.execute(runs, said.append, explore=TestSpec())
    assert n.explorer is None and [c[0] for c in runs.calls] == ["a"]
    assert "explore: 60 s of the budget left, not enough to explore" in said
    assert json.loads((n.out_dir / "matrix.json").read_text())["explore"] is None

    def ctrl_c(_run_dir):
        raise KeyboardInterrupt

    clock = Clock()
    n = Nightly(entries("a"), 1500, tmp_path / "2", base_seed=1, clock=clock)
    runs = NightRuns(tmp_path / "2", clock, {1: ctrl_c})
    assert n.execute(runs, lambda _s: None, explore=TestSpec()) == 2
    assert n.interrupted and n.explorer.interrupted
    assert len(n.explorer.rows) == 2  # the finished run is kept, and the interrupted one said
    doc = json.loads((n.out_dir / "matrix.json").read_text())
    assert doc["explore"]["interrupted"] and doc["explore"]["coverage"]


def test_cli_nightly_explores_the_default_test_with_the_budget_left(
        tmp_path, monkeypatch, capsys):
    import harness.cli as cli

    monkeypatch.setattr(cli, "_require_root", lambda *_specs: None)
    seen: list[TestSpec] = []

    def fake(spec, replay_of=None, progress=True):
        seen.append(spec)
        run_dir = Path(spec.store) / spec.name / f"2026T{len(seen)}"
        run_dir.mkdir(parents=True)
        return 0, outcome(run_dir, explored(spec) if spec.name.startswith("explore") else OK)

    monkeypatch.setattr(cli, "_run_and_report", fake)
    store = tmp_path / "store"
    main(["nightly", "--budget", "10", "--scenarios", "transient-node-restart", "--seed", "8",
          "--store", str(store), "--rabbitmq", "4.0", "--no-progress"])
    out = capsys.readouterr().out
    explore = seen[2:]
    # the runs take no time: at most one a 70 s of the 10 min, so it cannot spin
    assert 1 <= len(explore) <= 8
    assert all(s.name == "explore-quorum" and s.broker.rabbitmq == "4.0"
               and Path(s.store) == store for s in explore)
    assert "coverage: runs that reached each effect, by fault kind" in out
    (out_dir,) = (store / "matrix").iterdir()
    assert json.loads((out_dir / "matrix.json").read_text())["explore"]["runs"] == len(explore)
    assert (store / "explore").is_dir()
