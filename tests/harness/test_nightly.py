"""The nightly matrix (no cluster): the budget, retries of infrastructure failures, exit codes,
and its outputs: matrix.json, JUnit XML read back by junitparser, the HTML page, the workflow."""

import dataclasses
import json
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from junitparser import Error, Failure, JUnitXml, Skipped

from harness import matrix
from harness.cli import main
from harness.nightly import Nightly, infrastructure_failure
from harness.spec import TestSpec

ROOT = Path(__file__).resolve().parents[2]
LOSS = matrix.loss()
OK = {"valid": True, "queue": {"valid": True, "anomalies": [], "attempt_count": 10,
                               "acknowledged_count": 10, "lost_count": 0},
      "run": {"valid": True, "problems": []}}
LOST = {"valid": False, "queue": {"valid": False, "anomalies": ["lost"], "lost_count": 5,
                                  "attempt_count": 10, "acknowledged_count": 10},
        "run": {"valid": True, "problems": []}}
STUCK = {"valid": "unknown", "queue": {"valid": "unknown", "anomalies": []},
         "run": {"valid": "unknown", "problems": ["cluster did not recover after the faults"]}}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def outcome(run_dir, results=None, error=None, main=True, interrupted=False):
    phases = {"setup": 15.0, **({"main": 60.0} if main else {})} if (main or error is None) \
        else {}
    return SimpleNamespace(run_dir=run_dir, results=results, error=error, phase_times=phases,
                           interrupted=interrupted)


class FakeRuns:
    """Plays a script: per (scenario, try) the results (or a callable), and the wall time."""

    def __init__(self, store: Path, clock: Clock, script: dict, wall: float = 130.0) -> None:
        self.store, self.clock, self.script, self.wall = store, clock, script, wall
        self.calls: list[tuple[str, int | None, int]] = []

    def __call__(self, name, spec, tries):
        self.calls.append((name, spec.seed, tries))
        self.clock.t += self.wall
        run_dir = self.store / name / f"2026010{len(self.calls)}T000000.000000Z"
        run_dir.mkdir(parents=True)
        (run_dir / "report.html").write_text("<html></html>")
        what = self.script.get((name, tries), OK)
        if callable(what):
            return what(run_dir)
        code = 0 if what["valid"] is True else 1 if what["valid"] is False else 2
        return code, outcome(run_dir, what)


def no_boot(run_dir):
    return 2, outcome(run_dir, None, "BrokerError: n2 did not boot", main=False)


def entries(*names, limit=60.0):
    return [(n, TestSpec(name=n, time_limit_s=limit), LOSS if n.startswith("m") else None)
            for n in names]


def test_no_run_starts_that_the_budget_cannot_hold(tmp_path):
    clock = Clock()
    n = Nightly(entries("a", "b", "c", "d"), 300, tmp_path, base_seed=7, clock=clock)
    runs = FakeRuns(tmp_path, clock, {})
    said = []
    assert n.estimate_s("a", TestSpec(time_limit_s=60)) == 130  # limit + 70 s before any row
    code = n.execute(runs, said.append)
    # a: 300 left >= 130; b: 170 left >= 60 + learned 70; c: 40 left < 130: c and d skipped
    assert [c[0] for c in runs.calls] == ["a", "b"] and {c[1] for c in runs.calls} == {7}
    assert [(s.scenario, s.seed) for s in n.skipped] == [("c", 7), ("d", 7)]
    assert "40 s of the budget left" in n.skipped[0].reason and "budget" in said[0]
    assert code == 0  # skipped runs do not count against the night
    doc = json.loads((n.out_dir / "matrix.json").read_text())
    assert {"exit_code", "problems", "summaries", "rows"} <= set(doc)  # the matrix's own fields
    assert [s["scenario"] for s in doc["skipped"]] == ["c", "d"]
    assert doc["nightly"]["budget_s"] == 300 and doc["nightly"]["base_seed"] == 7
    assert matrix.read_rows(n.out_dir / "matrix.json") == n.series.rows


def test_estimates_learn_from_earlier_runs(tmp_path):
    clock = Clock()
    n = Nightly(entries("a", "b"), 10_000, tmp_path, base_seed=1, clock=clock)
    n.execute(FakeRuns(tmp_path, clock, {}, wall=100.0), lambda _s: None)
    assert n.estimate_s("a", TestSpec(time_limit_s=60)) == 100  # its own earlier run
    assert n.estimate_s("z", TestSpec(time_limit_s=90)) == 130  # 90 + the 40 s others took


def test_an_infrastructure_failure_is_retried_once_with_the_same_seed(tmp_path):
    clock = Clock()
    n = Nightly(entries("a", "b"), 10_000, tmp_path, base_seed=3, clock=clock)
    runs = FakeRuns(tmp_path, clock, {("a", 1): no_boot})
    said = []
    assert n.execute(runs, said.append) == 0
    assert runs.calls == [("a", 3, 1), ("a", 3, 2), ("b", 3, 1)]
    a, b = n.series.rows
    assert (a.judgement, a.tries, a.infrastructure) == (matrix.AS_EXPECTED, 2, None)
    doc = json.loads((n.out_dir / "matrix.json").read_text())
    assert [r["tries"] for r in doc["rows"]] == [2, 1]
    (first,) = doc["retries"]
    assert first["scenario"] == "a" and first["seed"] == 3 and first["judgement"] == "error"
    assert first["reason"].startswith("the cluster would not start: BrokerError")
    assert any("retrying once with seed 3" in s for s in said)
    xml = JUnitXml.fromfile(str(n.out_dir / "junit.xml"))
    case = next(c for s in xml for c in s if c.classname == "a")
    assert case.is_passed and "retried once with the same seed" in case.system_out


@pytest.mark.parametrize("failing", [
    no_boot,
    lambda d: (2, outcome(d, STUCK)),
    lambda d: (2, outcome(d, OK, error="ClientError: drain connection refused")),
])
def test_an_infrastructure_failure_twice_is_an_error_never_a_finding(tmp_path, failing):
    clock = Clock()
    n = Nightly(entries("a"), 10_000, tmp_path, base_seed=3, clock=clock)
    assert n.execute(FakeRuns(tmp_path, clock, {("a", 1): failing, ("a", 2): failing}),
                     lambda _s: None) == 2
    (row,) = n.series.rows
    assert row.judgement == matrix.ERROR and row.tries == 2 and row.infrastructure
    (s,) = n.summaries()
    assert s.verdict == matrix.ERROR and s.errors == 1 and s.invalid == 0
    assert "infrastructure" in matrix.problems([s])[0]
    (case,) = [c for suite in JUnitXml.fromfile(str(n.out_dir / "junit.xml")) for c in suite]
    (result,) = case.result
    assert isinstance(result, Error) and result.type == "infrastructure"
    assert result.message.startswith("Infrastructure failure on 2 tries (seed 3)")


def test_a_runner_that_raises_is_an_infrastructure_error_and_the_night_goes_on(tmp_path):
    clock = Clock()
    n = Nightly(entries("a", "b"), 10_000, tmp_path, base_seed=3, clock=clock)

    def boom(_d):
        raise RuntimeError("spark died")

    assert n.execute(FakeRuns(tmp_path, clock, {("a", 1): boom, ("a", 2): boom}),
                     lambda _s: None) == 2
    a, b = n.series.rows
    assert a.judgement == matrix.ERROR and "harness error: RuntimeError: spark died" in \
        a.infrastructure and b.judgement == matrix.AS_EXPECTED


def test_infrastructure_failure_tells_a_flake_from_a_result():
    assert infrastructure_failure(outcome("d", OK)) is None
    assert infrastructure_failure(outcome("d", LOST)) is None
    assert infrastructure_failure(outcome("d", None, "interrupted", interrupted=True)) is None
    assert "would not start" in infrastructure_failure(outcome("d", None, "boot", main=False))
    assert "did not recover" in infrastructure_failure(outcome("d", STUCK))


def test_findings_and_misses_are_failures_with_a_sentence_and_the_run_directory(tmp_path):
    clock = Clock()
    n = Nightly(entries("q", "m"), 10_000, tmp_path, base_seed=11, clock=clock)
    # q is predicted valid but loses messages; m is predicted to lose but stays valid
    assert n.execute(FakeRuns(tmp_path, clock, {("q", 1): LOST, ("m", 1): OK}),
                     lambda _s: None) == 2  # m falls short of its detection rate: insensitive
    assert [r.judgement for r in n.series.rows] == [matrix.FINDING, matrix.MISSED]
    xml = JUnitXml.fromfile(str(n.out_dir / "junit.xml"))
    (suite,) = list(xml)
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (2, 2, 0, 0)
    cases = {c.classname: c for c in suite}
    assert cases["q"].name == "seed 11, RabbitMQ 3.10" and cases["q"].time == 130.0
    (finding,) = cases["q"].result
    assert isinstance(finding, Failure) and finding.type == "FINDING"
    assert finding.message == ("Expected a valid run but the run (seed 11) was invalid: "
                               "5 confirmed messages lost.")
    assert f"run directory: {n.series.rows[0].run_dir}" in finding.text
    (missed,) = cases["m"].result
    assert isinstance(missed, Failure) and "did not show it" in missed.message
    only_finding = Nightly(entries("q"), 10_000, tmp_path / "2", base_seed=1, clock=Clock())
    assert only_finding.execute(FakeRuns(tmp_path / "2", only_finding.clock, {("q", 1): LOST}),
                                lambda _s: None) == 1


def test_an_interrupted_night_skips_the_rest_and_exits_2(tmp_path):
    clock = Clock()
    n = Nightly(entries("a", "b", "c"), 10_000, tmp_path, base_seed=1, clock=clock)
    stop = {("a", 1): lambda d: (2, outcome(d, None, "interrupted (KeyboardInterrupt)",
                                            interrupted=True))}
    assert n.execute(FakeRuns(tmp_path, clock, stop), lambda _s: None) == 2
    assert [r.scenario for r in n.series.rows] == ["a"]
    assert [s.scenario for s in n.skipped] == ["b", "c"]
    assert all("interrupted" in s.reason for s in n.skipped)

    def ctrl_c(_d):
        raise KeyboardInterrupt

    n = Nightly(entries("a", "b"), 10_000, tmp_path / "2", base_seed=1, clock=Clock())
    assert n.execute(FakeRuns(tmp_path / "2", n.clock, {("b", 1): ctrl_c}), lambda _s: None) == 2
    assert [s.scenario for s in n.skipped] == ["b"] and n.interrupted


def test_the_page_and_the_junit_file_cover_every_run_and_link_reports_relatively(tmp_path):
    clock = Clock()
    n = Nightly(entries("a", "b", "c"), 400, tmp_path, base_seed=5, clock=clock)
    n.execute(FakeRuns(tmp_path, clock, {("a", 1): no_boot, ("b", 1): LOST}), lambda _s: None)
    html = (n.out_dir / "index.html").read_text()
    for row in n.series.rows:
        rel = Path(row.run_dir).relative_to(tmp_path).as_posix()
        assert f'href="../../{rel}/report.html"' in html
    assert "<script" not in html and not re.search(r"""(src|href)=["']?https?:""", html)
    assert "Nightly scenario matrix" in html and "skipped" in html and "FINDING" in html
    xml = JUnitXml.fromfile(str(n.out_dir / "junit.xml"))
    results = {c.classname: [type(r) for r in c.result] for s in xml for c in s}
    assert results == {"a": [], "b": [Failure], "c": [Skipped]}
    (suite,) = list(xml)
    props = {p.name: p.value for p in suite.properties()}
    assert props["base_seed"] == "5" and props["exit_code"] == "1"


def test_the_junit_file_holds_only_characters_xml_can(tmp_path):
    clock = Clock()
    n = Nightly(entries("a"), 10_000, tmp_path, base_seed=5, clock=clock)
    bad = lambda d: (2, outcome(d, None, "BrokerError: \x1b[31mboot\x00 failed", main=False))  # noqa: E731
    n.execute(FakeRuns(tmp_path, clock, {("a", 1): bad, ("a", 2): bad}), lambda _s: None)
    (case,) = [c for s in JUnitXml.fromfile(str(n.out_dir / "junit.xml")) for c in s]
    assert "boot? failed" in case.result[0].message


def test_matrix_rows_of_infrastructure_errors_read_back_and_rebuild(tmp_path):
    from harness.series import rebuild

    row = matrix.make_row("a", matrix.Expectation(), 1, 9, tmp_path / "gone", LOST,
                          infrastructure="the cluster did not recover", tries=2)
    assert row.judgement == matrix.ERROR and row.problems[0] == "the cluster did not recover"
    matrix.write([row], matrix.summarize([row], {}), tmp_path / "m", extra={"rows": "no"})
    doc = json.loads((tmp_path / "m" / "matrix.json").read_text())
    assert doc["exit_code"] == 2 and isinstance(doc["rows"], list)  # extra never replaces
    assert matrix.read_rows(tmp_path / "m" / "matrix.json") == [row]
    assert rebuild([tmp_path / "m" / "matrix.json"], {})[0].judgement == matrix.ERROR
    old = {k: v for k, v in doc["rows"][0].items() if k not in ("infrastructure", "tries")}
    (tmp_path / "old.json").write_text(json.dumps({"rows": [old]}))
    assert matrix.read_rows(tmp_path / "old.json")[0].tries == 1  # matrices from before


def test_cli_nightly_adds_twins_runs_within_the_budget_and_prints_a_summary(
        tmp_path, monkeypatch, capsys):
    import harness.cli as cli

    monkeypatch.setattr(cli, "_require_root", lambda *_specs: None)
    seen = []

    def fake(spec, replay_of=None, progress=True):
        seen.append((spec.name, spec.seed, Path(spec.store)))
        run_dir = Path(spec.store) / spec.name / f"2026T{len(seen)}"
        run_dir.mkdir(parents=True)
        return 0, outcome(run_dir, OK)

    monkeypatch.setattr(cli, "_run_and_report", fake)
    store = tmp_path / "store"
    code = main(["nightly", "--budget", "30", "--scenarios", "transient-node-restart",
                 "--seed", "8", "--store", str(store), "--no-progress"])
    out = capsys.readouterr().out
    assert [s[:2] for s in seen[:2]] == [("transient-node-restart", 8),
                                         ("durable-node-restart", 8)]
    assert {s[0] for s in seen[2:]} == {"explore-quorum"}  # the budget left (test_nightly_explore)
    assert code == 2  # the loss scenario came out valid: MISSED, so insensitive
    assert "| transient-node-restart |" in out and "junit: " in out and "nightly exit code 2" in out
    (out_dir,) = (store / "matrix").iterdir()
    assert {"matrix.json", "matrix.md", "junit.xml", "index.html"} <= {
        p.name for p in out_dir.iterdir()}


def test_cli_nightly_refuses_bad_options_before_anything_starts(capsys):
    assert main(["nightly", "--budget", "0"]) == 2
    assert "--budget must be > 0" in capsys.readouterr().err
    assert main(["nightly", "--scenarios", "nope"]) == 2
    assert "unknown scenarios: nope" in capsys.readouterr().err
    assert main(["nightly", "--scenario", "kill"]) == 2


def test_make_nightly_passes_the_budget_and_the_scenarios():
    def dry(*args):
        return subprocess.run(["make", "-n", "nightly", *args], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout

    assert "-m harness nightly --budget 60" in dry()
    assert "-m harness nightly --budget 5 --scenarios kill,pause" in dry(
        "NIGHTLY_BUDGET=5", "NIGHTLY_SCENARIOS=kill,pause")


def test_the_nightly_workflow_runs_make_nightly_as_root_on_debian_and_always_uploads():
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly.yml").read_text())
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` as true
    assert on["schedule"][0]["cron"] and "workflow_dispatch" in on
    (job,) = doc["jobs"].values()
    assert job["runs-on"].startswith("ubuntu") and 0 < job["timeout-minutes"] <= 360
    # Debian 12 as measured (RabbitMQ 3.10.8, chromium), privileged and root: namespaces, iptables.
    assert job["container"]["image"] == "debian:12"
    assert "--privileged" in job["container"]["options"]
    steps = job["steps"]
    runs = [s for s in steps if "make nightly" in s.get("run", "")]
    assert len(runs) == 1 and runs[0]["run"].startswith("make nightly")
    uploads = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert uploads and all(s.get("if") == "always()" for s in uploads)
    paths = [s["with"]["path"] for s in uploads]
    assert "store/" in paths and any(p.endswith("junit.xml") for p in paths)
    assert steps.index(runs[0]) < min(steps.index(s) for s in uploads)


WEAK_STRENGTH = {"faults": 2, "noticed": 0, "failovers": 0, "max_at_risk": 0, "weak": True,
                 "reason": "neither of 2 faults was noticed by RabbitMQ",
                 "summary": "faults noticed 0 of 2, failovers 0, most messages at risk 0"}
STRONG_STRENGTH = {"faults": 2, "noticed": 2, "failovers": 1, "max_at_risk": 40, "weak": False,
                   "reason": "", "summary": "faults noticed 2 of 2, failovers 1, most messages "
                   "at risk 40"}


def test_a_weak_run_is_never_a_pass_in_junit_or_on_the_page(tmp_path):
    clock = Clock()
    n = Nightly(entries("w", "s", "q"), 10_000, tmp_path, base_seed=3, clock=clock)
    script = {("w", 1): {**OK, "strength": WEAK_STRENGTH},
              ("s", 1): {**OK, "strength": STRONG_STRENGTH},
              ("q", 1): {**LOST, "strength": STRONG_STRENGTH}}
    assert n.execute(FakeRuns(tmp_path, clock, script), lambda _s: None) == 2
    xml = JUnitXml.fromfile(str(n.out_dir / "junit.xml"))
    (suite,) = list(xml)
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (3, 1, 0, 1)
    cases = {c.classname: c for c in suite}
    (weak,) = cases["w"].result
    assert isinstance(weak, Skipped) and weak.type == "weak"
    seed = n.series.rows[0].seed
    assert weak.message == (
        f"Valid but weak (seed {seed}): neither of 2 faults was noticed by RabbitMQ. No anomaly "
        "was found, but the run tested nothing: not a pass. Test strength: faults noticed 0 of "
        "2, failovers 0, most messages at risk 0.")
    assert cases["s"].result == [] and cases["s"].system_out.startswith(
        f"Valid, as expected (seed {seed}). Test strength: faults noticed 2 of 2, failovers 1, "
        "most messages at risk 40.\nrun directory: ")
    (finding,) = cases["q"].result
    assert isinstance(finding, Failure) and finding.message.endswith(
        "5 confirmed messages lost. Test strength: faults noticed 2 of 2, failovers 1, most "
        "messages at risk 40.")
    html = (n.out_dir / "index.html").read_text()
    runs = html[html.index("<h2>Runs</h2>"):]
    assert re.search(r'<td><span class="badge" style="background:#6a1b9a">valid but weak</span>'
                     r"</td><td>Valid but weak \(seed \d+\): neither of 2 faults", runs)
    assert ">as expected</span></td><td>Valid, as expected (seed" in runs
    sums = html[html.index("<h2>Scenarios</h2>"):html.index("<h2>Runs</h2>")]
    assert '<th class="num">weak</th>' in sums and ">weak</span>" in sums
    assert "exit code 2 (0: all as expected, 1: a finding, 2: unknown, weak," in html


def test_a_rows_versions_are_testcase_properties_and_a_column_of_the_page(tmp_path):
    from harness import junit
    from harness.nightly import nightly_html

    base = matrix.make_row("a", matrix.Expectation(), 0, 90, tmp_path / "a", OK, seed=1)
    four = matrix.make_row("a", matrix.Expectation(), 0, 90, tmp_path / "a",
                           OK | {"versions": {"rabbitmq": "4.0.5", "erlang": "26.2",
                                              "feature_flags": ["khepri_db", "quorum_queue"]}},
                           seed=1, rabbitmq="4.0")
    rows = [dataclasses.replace(four, versions=four.versions | {"feature_flags": [
        "khepri_db", "quorum_queue"]}), dataclasses.replace(base, rabbitmq="3.10"), base]
    assert four.versions == {"rabbitmq": "4.0.5", "erlang": "26.2"}  # flags stay in results
    root = ET.fromstring(junit.junit_xml([junit.case_for_row(r) for r in rows], "n", "t"))
    props = [{p.get("name"): p.get("value") for p in case.iter("property")}
             for case in root.iter("testcase")]
    assert props == [{"rabbitmq": "4.0.5", "erlang": "26.2",
                      "feature_flags": "khepri_db, quorum_queue"}, {"rabbitmq": "3.10"},
                     {"rabbitmq": "3.10"}]
    html = nightly_html(tmp_path, rows, [], [], [], {}, 0, {})
    assert '<th>seed</th><th>version</th>' in html.replace(' class="num"', "")
    assert ('<td>4.0.5<span class="cell-note">erlang 26.2, feature flags khepri_db, '
            "quorum_queue</span></td>") in html
    assert html.count("<td>3.10</td>") == 2  # a row from before release lines ran 3.10


def test_a_nightly_over_two_lines_keeps_them_side_by_side_in_matrix_json_and_on_its_page(
        tmp_path):
    clock = Clock()
    on = [(n, dataclasses.replace(s, broker=dataclasses.replace(s.broker, rabbitmq=line)), e)
          for line in ("3.10", "4.0") for n, s, e in entries("a")]
    n = Nightly(on, 10_000, tmp_path, base_seed=3, clock=clock)
    n.series.extra["not_applicable"] = [{"scenario": "m", "rabbitmq": "4.0",
                                         "reason": "mirroring was removed"}]
    n.execute(FakeRuns(tmp_path, clock, {}), lambda _s: None)
    doc = json.loads((n.out_dir / "matrix.json").read_text())
    assert doc["not_applicable"][0]["scenario"] == "m"  # the CLI's field outlives every write
    assert doc["side_by_side"]["titles"] == ["RabbitMQ 3.10", "RabbitMQ 4.0"]
    assert doc["side_by_side"]["lines"] == [
        {"scenario": "a", "expect": "valid", "cells": ["1/1 ok", "1/1 ok"]},
        {"scenario": "m", "expect": "-", "cells": ["-", "not applicable: mirroring was removed"]}]
    html = (n.out_dir / "index.html").read_text()
    side = html[html.index("<h2>Side by side</h2>"):html.index("<h2>Scenarios</h2>")]
    assert "<th>RabbitMQ 3.10</th><th>RabbitMQ 4.0</th>" in side
    assert "<td>m</td><td>-</td><td>-</td><td>not applicable: mirroring was removed</td>" in side
    sums = html[html.index("<h2>Scenarios</h2>"):html.index("<h2>Runs</h2>")]
    assert "<td>a</td>" in sums and "<td>a (RabbitMQ 4.0)</td>" in sums  # which line is which
    one = Nightly(entries("a"), 10_000, tmp_path / "one", base_seed=3, clock=clock)
    one.execute(FakeRuns(tmp_path / "one", clock, {}), lambda _s: None)
    assert "Side by side" not in (one.out_dir / "index.html").read_text()


def test_a_run_that_does_not_fit_is_skipped_and_the_night_goes_on(tmp_path):
    clock = Clock()
    long_one = [("long", TestSpec(name="long", time_limit_s=600), None)]
    n = Nightly(entries("a") + long_one + entries("b"), 300, tmp_path, base_seed=7, clock=clock)
    runs = FakeRuns(tmp_path, clock, {}, wall=100.0)
    n.execute(runs, lambda _s: None)
    # a runs (100 s); long needs 670 s of the 200 left: skipped; b still fits.
    assert [c[0] for c in runs.calls] == ["a", "b"]
    assert [s.scenario for s in n.skipped] == ["long"]


def test_the_rotation_puts_pairs_first_and_the_least_recently_run_first(tmp_path):
    from harness.nightly import last_nightly_runs, nights_needed, rotation

    es = entries("healthy", "kill", "m-unsafe", "q-safe", "m-other", "q-other")
    twins = {"m-unsafe": "q-safe", "m-other": "q-other"}
    # A nightly ran m-other's pair and kill last night, m-unsafe's pair two nights ago.
    for stamp, started, names in (("a", "2026-11-23T01:00:00+00:00", ["m-unsafe", "q-safe"]),
                                  ("b", "2026-11-24T01:00:00+00:00",
                                   ["m-other", "q-other", "kill"])):
        d = tmp_path / "matrix" / stamp
        d.mkdir(parents=True)
        (d / "matrix.json").write_text(json.dumps(
            {"nightly": {"started": started}, "rows": [{"scenario": x} for x in names]}))
    (tmp_path / "matrix" / "plain").mkdir()
    (tmp_path / "matrix" / "plain" / "matrix.json").write_text(json.dumps(
        {"rows": [{"scenario": "healthy"}]}))  # not a nightly: does not count
    last = last_nightly_runs(tmp_path)
    assert last == {"m-unsafe": "2026-11-23T01:00:00+00:00", "q-safe": "2026-11-23T01:00:00+00:00",
                    "m-other": "2026-11-24T01:00:00+00:00", "q-other": "2026-11-24T01:00:00+00:00",
                    "kill": "2026-11-24T01:00:00+00:00"}
    order = [n for n, _s, _e in rotation(es, twins, last)]
    assert order == ["m-unsafe", "q-safe", "m-other", "q-other", "healthy", "kill"]
    assert nights_needed([130.0] * 6, 400) == 2 and nights_needed([500.0], 400) is None


def staying(spec: TestSpec, mode: str = "both") -> TestSpec:
    """The spec with its clients staying (`--stay MODE`)."""
    return dataclasses.replace(spec, workload=dataclasses.replace(spec.workload, stay=mode))


SETTLED = {**OK, "liveness": {"valid": True, "settlement": {"valid": True,
                                                             "stuck_channels": 0}}}
STUCK_AFTER_HEAL = {**OK, "valid": False,
                    "liveness": {"valid": False, "settlement": {"valid": False,
                                                                "stuck_channels": 1}}}


def test_cli_nightly_runs_each_client_mode_of_stay_variants_as_a_testcase_of_its_own(
        tmp_path, monkeypatch, capsys):
    import harness.cli as cli

    monkeypatch.setattr(cli, "_require_root", lambda *_specs: None)
    ran: list[TestSpec] = []

    def fake(spec, replay_of=None, progress=True):
        ran.append(spec)
        run_dir = Path(spec.store) / spec.name / f"2026T{len(ran)}"
        run_dir.mkdir(parents=True)
        stays = spec.name == "partition" and spec.workload.stay != "none"
        return (1 if stays else 0), outcome(run_dir, STUCK_AFTER_HEAL if stays else SETTLED)

    monkeypatch.setattr(cli, "_run_and_report", fake)
    store = tmp_path / "store"
    code = main(["nightly", "--budget", "30", "--scenarios", "partition", "--no-twins",
                 "--stay-variants", "none,both", "--seed", "8", "--store", str(store),
                 "--no-progress"])
    assert code == 1  # the staying run stuck after the heal: a finding
    assert [(s.name, s.workload.stay, s.seed) for s in ran[:2]] == [
        ("partition", "none", 8), ("partition", "both", 8)]  # one seed, side by side
    (out_dir,) = (store / "matrix").iterdir()
    doc = json.loads((out_dir / "matrix.json").read_text())
    assert doc["stay_variants"] == ["none", "both"]
    rows = [(r["scenario"], r["variant"], r["judgement"]) for r in doc["rows"]]
    assert rows == [("partition", "", matrix.AS_EXPECTED),
                    ("partition", "workload.stay=both", matrix.FINDING)]
    (suite,) = list(JUnitXml.fromfile(str(out_dir / "junit.xml")))
    cases = {(c.classname, c.name): c for c in suite if not c.classname.startswith("explore.")}
    assert set(cases) == {("partition", "seed 8, RabbitMQ 3.10"),
                          ("partition (workload.stay=both)", "seed 8, RabbitMQ 3.10")}
    assert cases[("partition", "seed 8, RabbitMQ 3.10")].result == []
    (stuck,) = cases[("partition (workload.stay=both)", "seed 8, RabbitMQ 3.10")].result
    assert isinstance(stuck, Failure) and stuck.type == matrix.FINDING
    html = (out_dir / "index.html").read_text()
    assert "<td>partition (workload.stay=both)</td>" in html
    assert "| partition (workload.stay=both) |" in capsys.readouterr().out


def test_a_skipped_variant_run_keeps_its_variant_in_junit_and_on_the_page(tmp_path):
    clock = Clock()
    [(name, spec, expect)] = entries("a")
    n = Nightly([(name, spec, expect), (name, staying(spec), expect)], 150, tmp_path,
                base_seed=2, clock=clock)
    n.execute(FakeRuns(tmp_path, clock, {("a", 1): SETTLED}), lambda _s: None)
    # "a" took 130 s of the 150; its staying run, expected to take as long, did not start.
    assert [(r.scenario, r.variant) for r in n.series.rows] == [("a", "")]
    assert [(s.scenario, s.variant) for s in n.skipped] == [("a", "workload.stay=both")]
    xml = JUnitXml.fromfile(str(n.out_dir / "junit.xml"))
    results = {c.classname: [type(r) for r in c.result] for s in xml for c in s}
    assert results == {"a": [], "a (workload.stay=both)": [Skipped]}
    runs = (n.out_dir / "index.html").read_text().split("<h2>Runs</h2>")[1]
    assert "<td>a (workload.stay=both)</td>" in runs
    doc = json.loads((n.out_dir / "matrix.json").read_text())
    assert doc["skipped"][0]["variant"] == "workload.stay=both"


def test_a_seed_run_on_two_release_lines_is_two_testcases():
    from harness.junit import case_for_row, skipped_case

    rows = [matrix.make_row("partition", matrix.Expectation(), 0, 10.0, "r", OK, seed=5,
                            rabbitmq=line) for line in ("3.10", "4.3")]
    names = {(c.classname, c.name) for c in map(case_for_row, rows)}
    assert names == {("partition", "seed 5, RabbitMQ 3.10"),
                     ("partition", "seed 5, RabbitMQ 4.3")}
    assert skipped_case("partition", 5, "budget", rabbitmq="4.3").name == "seed 5, RabbitMQ 4.3"

