"""Shrinking a finding (no cluster: replays are a fake runner with a planted failure condition):
reductions kept only when they still fail at the rate, the minimal scenario file reproducing it,
its rate, the side-by-side page read from stored files, and `python -m harness shrink RUN_DIR`."""

from __future__ import annotations

import dataclasses
import html as html_lib
import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import harness.cli as cli
from harness import shrink
from harness.cli import main
from harness.scenario_file import read_scenario, write_scenario
from harness.shrink import (
    MIN_LEAD_S,
    MIN_TAIL_S,
    Rule,
    Shrinker,
    Trial,
    fewer_faults,
    finding_spec,
    shorter_faults,
    shorter_main_phase,
    smaller_workload,
)
from harness.spec import SpecError, TestSpec
from nemesis.options import NemesisOptions
from reports.shrink_page import DROPPED, render_page, side_by_side
from workloads.queue_workload import WorkloadOptions

RUNS = itertools.count()
SCHEDULE = [(10.0, "partition-one@n3", 20.0), (40.0, "kill@leader", 16.0),
            (62.0, "pause@one", 12.0)]


def lost(summary="3 lost under the kill of n1"):
    return {"valid": False, "queue": {"valid": False, "anomalies": ["lost"], "lost_count": 3},
            "incidents": [{"id": 1, "summary": summary, "start_ms": 40000, "end_ms": 56000,
                           "counts": {"lost": 3}, "timeline": [
                               {"at_ms": 40000, "what": "fault start", "node": "n1",
                                "text": "kill on n1"},
                               {"at_ms": 41200, "what": "failover", "node": "n2",
                                "text": "n2 leads the queue"}]}]}


VALID = {"valid": True, "queue": {"valid": True, "anomalies": []}}
DUPLICATED = {"valid": False, "queue": {"valid": False, "anomalies": ["unflagged_duplicated"]}}


def planted(spec: TestSpec) -> bool:
    """The planted failure: the run fails iff a kill@leader of >= 10 s is in its schedule."""
    return any(e.startswith("kill@leader") and d >= 10 for _s, e, d in spec.nemesis.schedule)


class FakeReplays:
    """Replays a spec: its results by `rule(spec, n)` (n: how often this spec was replayed),
    stored in a run directory of its own as a run's results.json."""

    def __init__(self, store: Path, rule=lambda spec, n: lost() if planted(spec) else VALID):
        self.store, self.rule = store, rule
        self.specs: list[TestSpec] = []
        self.seen: dict[str, int] = {}

    def __call__(self, spec):
        key = json.dumps(spec.to_dict(), sort_keys=True, default=str)
        self.seen[key] = self.seen.get(key, 0) + 1
        self.specs.append(spec)
        results = self.rule(spec, self.seen[key])
        run_dir = self.store / spec.name / f"replay{next(RUNS):04d}"
        run_dir.mkdir(parents=True)
        (run_dir / "results.json").write_text(json.dumps(results))
        code = 1 if results["valid"] is False else 0
        return code, SimpleNamespace(run_dir=run_dir, results=results, error=None,
                                     interrupted=False)


def finding(tmp_path: Path, schedule=SCHEDULE, results=None) -> Path:
    spec = TestSpec(name="finding", seed=5, time_limit_s=90.0,
                    nemesis=NemesisOptions.played_once(schedule),
                    workload=WorkloadOptions(backlog=4000, publishers=3, consumers=2))
    run = tmp_path / "store" / "finding" / "20260101T000000.000000Z"
    run.mkdir(parents=True)
    write_scenario(spec, run / "scenario.toml")
    (run / "results.json").write_text(json.dumps(results or lost()))
    return run


def test_reductions_make_smaller_valid_specs(tmp_path):
    spec, _r = finding_spec(finding(tmp_path))
    dropped = list(fewer_faults(spec))
    assert [w for w, _s in dropped] == ["drop fault 3 (pause@one)", "drop fault 2 (kill@leader)",
                                        "drop fault 1 (partition-one@n3)"]
    assert dropped[2][1].nemesis.schedule == ((40.0, "kill@leader", 16.0),
                                              (62.0, "pause@one", 12.0))
    shorter = list(shorter_faults(spec))
    assert shorter[0][0] == "fault 1 (partition-one@n3) 20 s -> 1 s"
    assert shorter[1][1].nemesis.schedule == ((10.0, "partition-one@n3", 10.0),
                                              (30.0, "kill@leader", 16.0),
                                              (52.0, "pause@one", 12.0))
    [(what, short), (_w, half)] = list(shorter_main_phase(spec))
    assert what == "main phase 90 s -> 59 s"
    assert short.nemesis.schedule == ((MIN_LEAD_S, "partition-one@n3", 20.0),
                                      (21.0, "kill@leader", 16.0), (37.0, "pause@one", 12.0))
    assert short.time_limit_s == 49.0 + MIN_TAIL_S
    assert half.nemesis.schedule[0][0] == 5.0
    smaller = [w for w, _s in smaller_workload(spec)]
    assert smaller == ["backlog 4000 -> 0", "backlog 4000 -> 2000", "publishers 3 -> 1",
                       "publishers 3 -> 2", "consumers 2 -> 1", "rate 200/s -> 100/s"]
    for reduce in (fewer_faults, shorter_faults, shorter_main_phase, smaller_workload):
        for _what, s in reduce(spec):
            s.validate()


def test_a_candidate_is_kept_only_when_it_fails_at_the_rate(tmp_path):
    run = finding(tmp_path)
    script = {"a": [True, False, False], "b": [True, True], "c": [False, True, True],
              "d": [False, False]}
    calls = []

    def scripted(name):
        outcomes = iter(script[name])

        def run_spec(spec):
            calls.append(name)
            results = lost() if next(outcomes) else VALID
            return (1 if results is not VALID else 0), SimpleNamespace(
                run_dir="", results=results, error=None, interrupted=False)
        return run_spec

    shrinker = Shrinker(run, Rule(replays=3, min_fails=2), tmp_path / "store")
    spec = shrinker.original
    got = {n: shrinker.trial("x", n, spec, scripted(n)) for n in script}
    assert {n: (t.kept, t.rate()) for n, t in got.items()} == {
        "a": (False, "1 of 3"), "b": (True, "2 of 2"), "c": (True, "2 of 3"),
        "d": (False, "0 of 2")}  # replays stop once the rate is reached or out of reach
    assert calls.count("d") == 2


def test_a_failure_of_another_kind_is_not_the_finding_unless_any_anomaly(tmp_path):
    run = finding(tmp_path)
    strict = Shrinker(run, Rule(), tmp_path / "store")
    assert strict.fails(lost()) and not strict.fails(DUPLICATED) and not strict.fails(VALID)
    assert Shrinker(run, Rule(any_anomaly=True), tmp_path / "store").fails(DUPLICATED)


def test_shrinking_finds_the_planted_failure_and_the_minimal_file_reproduces_it(tmp_path):
    run = finding(tmp_path)
    replays = FakeReplays(tmp_path / "store")
    said: list[str] = []
    shrinker = Shrinker(run, Rule(), tmp_path / "store")
    assert shrinker.execute(replays, said.append) == 1
    minimal = read_scenario(shrinker.out_dir / "minimal.toml")
    [(start, entry, duration)] = minimal.nemesis.schedule
    assert entry == "kill@leader" and 10 <= duration < 16 and start == MIN_LEAD_S
    assert minimal.time_limit_s == start + duration + MIN_TAIL_S
    assert (minimal.workload.backlog, minimal.workload.publishers) == (0, 1)
    assert minimal.seed == 5  # the finding's seed: the same random picks
    assert planted(minimal) and replays(minimal)[0] == 1  # the minimal file reproduces
    assert shrinker.minimal is not None and shrinker.minimal.rate() == "5 of 5"
    assert (shrinker.out_dir / "minimal.toml").read_text().startswith(
        f"# Shrunk from the finding {run}: fails 5 of 5 replays (lost).")
    # every reduction kept failed at the rate; every one that passed was dropped
    doc = json.loads((shrinker.out_dir / "shrink.json").read_text())
    for trial in doc["trials"]:
        assert trial["kept"] == (trial["fails"] >= 2)
        assert all(r["fails"] == planted(_spec_of(trial)) for r in trial["runs"])
    assert doc["minimal_rate"] == "5 of 5" and doc["status"] == "minimal: fails 5 of 5"
    assert doc["replays"] == len(replays.specs) - 1  # all but the check above
    assert said[0].startswith(f"shrink {run}: anomalies lost; replaying it up to 3 times")
    assert "  fewer faults: drop fault 2 (kill@leader): fails 0 of 2 -> dropped" in said


def _spec_of(trial):
    return SimpleNamespace(nemesis=SimpleNamespace(schedule=[tuple(i) for i in trial["schedule"]]))


def test_a_flaky_failure_is_shrunk_at_its_rate_and_its_rate_is_told(tmp_path):
    # the kill fails on every replay but each third; the other faults do nothing
    def flaky(spec, n):
        return lost() if planted(spec) and n % 3 != 0 else VALID

    shrinker = Shrinker(finding(tmp_path), Rule(replays=3, min_fails=2, confirm=6),
                        tmp_path / "store")
    assert shrinker.execute(FakeReplays(tmp_path / "store", flaky), lambda _s: None) == 1
    assert shrinker.minimal is not None
    assert [e for _s, e, _d in shrinker.minimal.spec.nemesis.schedule] == ["kill@leader"]
    assert shrinker.minimal.rate() == "4 of 6"


def test_a_finding_that_does_not_reproduce_is_not_shrunk(tmp_path):
    shrinker = Shrinker(finding(tmp_path), Rule(), tmp_path / "store")
    replays = FakeReplays(tmp_path / "store", lambda spec, n: VALID)
    assert shrinker.execute(replays, lambda _s: None) == 2
    assert len(replays.specs) == 2  # 0 of 2: 2 of 3 is out of reach
    assert shrinker.status == ("the finding does not reproduce at the rate: it failed 0 of 2, "
                               "needs 2 of 3")
    assert not (shrinker.out_dir / "minimal.toml").exists()
    assert "does not reproduce" in (shrinker.out_dir / "shrink.html").read_text()


def test_the_budget_bounds_the_replays(tmp_path):
    shrinker = Shrinker(finding(tmp_path), Rule(max_runs=8, confirm=0), tmp_path / "store")
    replays = FakeReplays(tmp_path / "store")
    assert shrinker.execute(replays, lambda _s: None) == 1
    assert shrinker.spent() <= 8
    with pytest.raises(ValueError):
        Rule(replays=3, min_fails=4)


def test_only_an_invalid_stored_run_is_a_finding(tmp_path):
    run = finding(tmp_path, results=VALID)
    with pytest.raises(SpecError, match="is not a finding"):
        finding_spec(run)
    with pytest.raises(SpecError, match="has no results.json"):
        finding_spec(tmp_path)


def test_a_finding_without_scenario_toml_reads_its_faults_from_its_history(tmp_path):
    run = tmp_path / "old"
    run.mkdir()
    spec = TestSpec(name="old", seed=9, nemesis=NemesisOptions(faults=("kill@leader",),
                                                               duration_s=15.0))
    (run / "test.json").write_text(json.dumps({"spec": spec.to_dict()}))
    (run / "results.json").write_text(json.dumps(lost()))

    def op(t, process, f, value, type_="info"):
        return json.dumps({"index": 0, "time": int(t * 1e9), "type": type_,
                           "process": process, "f": f, "value": value})
    (run / "history.jsonl").write_text("\n".join([
        op(2.0, "harness", "phase", {"phase": "main", "state": "start"}),
        op(12.0, "nemesis", "kill", {"fault": "kill", "entry": "kill@leader"}, "invoke"),
        op(12.1, "nemesis", "kill", {"fault": "kill", "nodes": ["n1"]}),
        op(27.0, "nemesis", "start", {"fault": "kill"}, "invoke"),
        op(62.0, "harness", "phase", {"phase": "main", "state": "end"})]) + "\n")
    played, results = finding_spec(run)
    assert played.nemesis.schedule == ((10.0, "kill@leader", 15.0),)
    assert played.seed == 9 and results["valid"] is False


def test_the_page_shows_original_and_minimal_side_by_side_with_their_incidents(tmp_path):
    run = finding(tmp_path, results=lost("3 lost <script>x</script> under the kill"))
    shrinker = Shrinker(run, Rule(), tmp_path / "store")
    shrinker.execute(FakeReplays(tmp_path / "store"), lambda _s: None)
    html = (shrinker.out_dir / "shrink.html").read_text()
    assert html == render_page(shrinker.out_dir, *shrink.page_shapes(shrinker.out_dir))  # drawn again from the stored files alone
    assert "<script>x</script>" not in html and "&lt;script&gt;x&lt;/script&gt;" in html
    assert "original (replayed: fails 2 of 2)" in html and "minimal (fails 5 of 5)" in html
    assert html.count("kill on n1") == 2  # the finding's incident and the minimal's
    assert "n2 leads the queue" in html
    assert "python -m harness run --scenario-file minimal.toml" in html
    assert html.count('class="minimal dropped"') == 2
    # the minimal scenario file itself, as stored, with its rate and a link to it
    minimal = (shrinker.out_dir / "minimal.toml").read_text()
    assert "<h2>The minimal scenario file (fails 5 of 5 replays)</h2>" in html
    assert '<a href="minimal.toml">minimal.toml</a>' in html
    shown = html.split('<pre class="scenario">', 1)[1].split("</pre>", 1)[0]
    assert html_lib.unescape(shown) == minimal and "[[nemesis.schedule]]" in minimal


def test_the_side_by_side_table_matches_each_original_fault_to_what_became_of_it():
    original = TestSpec(time_limit_s=90.0, nemesis=NemesisOptions.played_once(SCHEDULE),
                        workload=WorkloadOptions(backlog=4000))
    minimal = dataclasses.replace(
        original, time_limit_s=23.0, workload=WorkloadOptions(backlog=0, publishers=1),
        nemesis=NemesisOptions.played_once([(1.0, "kill@leader", 12.0)]))
    lines = side_by_side(shrink.shape_of(original), shrink.shape_of(minimal))
    assert [(x.what, x.original, x.minimal) for x in lines[:5]] == [
        ("fault 1", "10 s: partition-one@n3 for 20 s", DROPPED),
        ("fault 2", "40 s: kill@leader for 16 s", "1 s: kill@leader for 12 s"),
        ("fault 3", "62 s: pause@one for 12 s", DROPPED),
        ("main phase", "90 s", "23 s"),
        ("backlog", "4000", "0")]
    assert all(x.changed for x in lines[:5])
    assert [x.minimal for x in side_by_side(shrink.shape_of(original), None)][:2] == ["-", "-"]


def test_python_m_harness_shrink_run_dir(tmp_path, monkeypatch, capsys):
    run = finding(tmp_path)
    replays = FakeReplays(tmp_path / "store")
    monkeypatch.setattr(cli, "_run_and_report", lambda spec, progress=True: replays(spec))
    monkeypatch.setattr(cli, "_require_root", lambda specs=(): None)
    assert main(["shrink", str(run), "--replays", "2", "--min-fails", "2", "--confirm", "4",
                 "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "shrink: minimal: fails 4 of 4;" in out
    [minimal] = (tmp_path / "store" / "shrink").glob("*/minimal.toml")
    assert f"minimal scenario: {minimal}" in out
    assert {Path(s.store) for s in replays.specs} == {tmp_path / "store"}  # beside the finding
    assert main(["shrink", str(run), "--replays", "2", "--min-fails", "3"]) == 2
    assert "the rate must be" in capsys.readouterr().err
    assert main(["shrink", str(tmp_path)]) == 2


def test_a_trial_records_each_replay(tmp_path):
    t = Trial("fewer faults", "drop fault 1", TestSpec())
    t.runs += [{"fails": True}, {"fails": False}]
    assert (t.fails, t.rate()) == (1, "1 of 2")
    assert t.to_dict()["rate"] == "1 of 2"


def test_a_replay_that_crashes_is_one_that_did_not_fail(tmp_path):
    shrinker = Shrinker(finding(tmp_path), Rule(), tmp_path / "store")
    replays = FakeReplays(tmp_path / "store")
    calls = []

    def run_spec(spec):
        calls.append(spec)
        if len(calls) == 1:
            raise RuntimeError("the cluster would not start")
        return replays(spec)

    t = shrinker.trial("original", "as played", shrinker.original, run_spec)
    assert t.rate() == "2 of 3" and t.kept
    assert t.runs[0]["error"] == "RuntimeError: the cluster would not start"


STUCK = {"valid": False, "queue": {"valid": True, "anomalies": []},
         "liveness": {"valid": False, "settlement": {"valid": False, "stuck_channels": 1,
                                                     "stuck_consumers": 0}}}


def staying_finding(tmp_path: Path, results) -> Path:
    spec = TestSpec(name="finding", seed=5, time_limit_s=90.0,
                    nemesis=NemesisOptions.played_once(SCHEDULE),
                    workload=WorkloadOptions(publishers=1, consumers=0, consume_rate=None,
                                             stay="both"))
    run = tmp_path / "store" / "finding" / "20260101T000000.000000Z"
    run.mkdir(parents=True)
    write_scenario(spec, run / "scenario.toml")
    (run / "results.json").write_text(json.dumps(results))
    return run


def test_fewer_staying_clients_tries_retiring_clients_then_one_role_staying():
    both = TestSpec(workload=WorkloadOptions(stay="both"))
    assert [(what, s.workload.stay) for what, s in shrink.fewer_staying_clients(both)] == [
        ("clients that stay: both -> none", "none"),
        ("clients that stay: both -> publishers", "publishers"),
        ("clients that stay: both -> consumers", "consumers")]
    one = TestSpec(workload=WorkloadOptions(stay="consumers"))
    assert [s.workload.stay for _w, s in shrink.fewer_staying_clients(one)] == ["none"]
    assert list(shrink.fewer_staying_clients(TestSpec())) == []


def test_a_stuck_client_is_a_finding_class_of_its_own():
    assert shrink.finding_classes(STUCK) == {shrink.STUCK_PUBLISH}
    consumer = json.loads(json.dumps(STUCK))
    consumer["liveness"]["settlement"].update(stuck_channels=0, stuck_consumers=2)
    assert shrink.finding_classes(consumer) == {shrink.STUCK_CONSUMER}
    assert shrink.finding_classes(lost()) == {"lost"} and shrink.finding_classes(None) == set()


def test_a_minimal_scenario_keeps_the_staying_clients_a_finding_needs(tmp_path):
    # Stuck only while publishers stay through the partition.
    def needs_publishers(spec, n):
        partitioned = any(e.startswith("partition") for _s, e, _d in spec.nemesis.schedule)
        return STUCK if partitioned and spec.workload.publishers_stay else VALID
    run = staying_finding(tmp_path, STUCK)
    shrinker = Shrinker(run, Rule(), tmp_path / "store")
    assert shrinker.execute(FakeReplays(tmp_path / "store", needs_publishers), print) == 1
    minimal = read_scenario(shrinker.out_dir / "minimal.toml")
    assert minimal.workload.stay == "publishers"
    assert [e for _s, e, _d in minimal.nemesis.schedule] == ["partition-one@n3"]
    trials = json.loads((shrinker.out_dir / "shrink.json").read_text())["trials"]
    tried = {t["what"]: t["kept"] for t in trials if t["reduction"] == "fewer staying clients"}
    assert tried["clients that stay: both -> none"] is False
    assert tried["clients that stay: both -> publishers"] is True
    # A loss that does not need them drops them.
    run = tmp_path / "other"
    other = staying_finding(run, lost())
    shrinker = Shrinker(other, Rule(), run / "store")
    assert shrinker.execute(FakeReplays(run / "store"), print) == 1
    assert read_scenario(shrinker.out_dir / "minimal.toml").workload.stay == "none"
