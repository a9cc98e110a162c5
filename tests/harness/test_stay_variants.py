"""Clients that stay as a variant of the catalogue (no cluster): the partition and leader-kill
scenarios chosen by their faults, each staying mode a line of its own beside its scenario,
predicted as its scenario and settled after the heal, through `matrix --stay-variants`, the
rows a table rebuilds and an archive keeps."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace as dc
from types import SimpleNamespace

import harness.cli as cli
from harness import matrix, vary
from harness.cli import main
from harness.scenarios import SCENARIOS, partitions_or_kills_leader, staying_candidates
from harness.series import Series, archive, read_archive, rebuild
from harness.spec import TestSpec
from nemesis import NemesisOptions


def results(valid: bool | str = True, settled: bool | str | None = True,
            lost: int = 0) -> dict:
    """A run's results: its queue section (lost or not) and its liveness section's settlement."""
    out: dict = {"valid": valid, "run": {"problems": []},
                 "queue": {"valid": not lost, "anomalies": ["lost"] if lost else [],
                           "lost_count": lost}}
    if settled is not None:
        out["liveness"] = {"valid": settled is not False,
                           "settlement": {"valid": settled, "stuck_channels": int(not settled),
                                          "publishes": {"settled": 9, **(
                                              {} if settled else {"stuck": 1})},
                                          "consumers": {"fed": 2}}}
    return out


def with_faults(*faults: str, targets: str = "one") -> TestSpec:
    return TestSpec(name="t", nemesis=NemesisOptions(faults=faults, targets=targets))


def test_the_partition_and_leader_kill_scenarios_are_chosen_by_their_faults():
    chosen = staying_candidates()
    for name in ("partition", "quorum-leader-partition", "quorum-majorities-ring",
                 "khepri-minority", "mirrored-master-partition", "transient-node-restart",
                 "quorum-delayed-retry", "mirrored-unsynced-promotion"):
        assert name in chosen, name
    for name in ("healthy", "kill", "pause", "quorum-rolling-restart", "quorum-packet-loss",
                 "durable-full-restart", "quorum-power-loss-all", "durable-graceful-restart"):
        assert name not in chosen, name
    assert chosen == [n for n in SCENARIOS if n in chosen]  # the catalogue's order
    # Any shape of partition; a kill only of the leader's node, by the entry's or the options'
    # targets.
    assert partitions_or_kills_leader(with_faults("partition-bridge"))
    assert partitions_or_kills_leader(with_faults("kill@leader"))
    assert partitions_or_kills_leader(with_faults("kill", targets="leader"))
    assert not partitions_or_kills_leader(with_faults("kill@one", "pause"))
    assert not partitions_or_kills_leader(with_faults("stop@leader"))
    assert not partitions_or_kills_leader(with_faults())


def test_a_staying_prediction_is_its_scenario_s_and_settled_after_the_heal():
    valid, loss = matrix.Expectation(), matrix.loss()
    staying = matrix.expectation_of({"a": loss}, "a", "workload.stay=both")
    assert staying == dataclasses.replace(loss, settled=True)
    assert matrix.expectation_of({"a": loss}, "a", "") == loss
    assert matrix.expectation_of({"a": loss}, "a", "workload.stay=none") == loss
    assert staying.describe() == ("lost in >= 90% of runs, no publish stuck, no consumer stuck "
                                  "after the heal")
    settled = dataclasses.replace(valid, settled=True)
    assert matrix.judge(settled, results()) == matrix.AS_EXPECTED
    # A stuck publisher or consumer fails the prediction, beside a loss it predicted too.
    assert matrix.judge(settled, results(valid=False, settled=False)) == matrix.FINDING
    assert matrix.judge(staying, results(valid=False, settled=False, lost=4)) == matrix.FINDING
    assert matrix.judge(staying, results(valid=False, lost=4)) == matrix.DETECTED
    # Half a prediction judged is no prediction held.
    assert matrix.judge(settled, results(settled="unknown")) == matrix.UNKNOWN
    assert matrix.judge(settled, results(settled=None)) == matrix.UNKNOWN
    assert matrix.judge(staying, results(valid=False, settled="unknown", lost=4)) == \
        matrix.UNKNOWN
    assert matrix.judge(staying, results(settled=True)) == matrix.MISSED
    # The parent's prediction does not look at settlement.
    assert matrix.judge(loss, results(valid=False, settled=False, lost=4)) == matrix.DETECTED
    assert matrix.judge(valid, results(settled="unknown")) == matrix.AS_EXPECTED


def test_a_staying_run_s_row_names_its_mode_and_is_judged_by_the_settled_prediction(tmp_path):
    assert vary.with_stay("", "both") == "workload.stay=both"
    assert vary.with_stay("queue.type=stream", "publishers") == \
        "queue.type=stream, workload.stay=publishers"
    assert vary.with_stay("workload.stay=both", "both") == "workload.stay=both"  # said once
    assert vary.with_stay("", "none") == "" and vary.with_stay("", None) == ""
    spec = TestSpec(name="a", seed=1)
    staying = dc(spec, workload=dc(spec.workload, stay="both"))
    s = Series([("a", spec, matrix.Expectation()), ("a", staying, matrix.Expectation())], 1,
               tmp_path, base_seed=1)
    stuck = results(valid=False, settled=False)
    plain = s.record("a", spec, 1, 60.0, SimpleNamespace(run_dir=tmp_path / "x", results=stuck,
                                                         error=None))
    stayed = s.record("a", staying, 1, 60.0,
                      SimpleNamespace(run_dir=tmp_path / "y", results=stuck, error=None))
    assert (plain.variant, plain.settled) == ("", False)
    assert (stayed.variant, stayed.settled) == ("workload.stay=both", True)
    [first, second] = s.summaries()
    assert (first.variant, second.variant) == ("", "workload.stay=both")  # never one of 2 runs
    assert second.expected == "valid, no publish stuck, no consumer stuck after the heal"
    assert first.expected == "valid"


def test_a_mode_a_scenario_cannot_take_is_not_applicable_with_the_spec_s_reason():
    crashing = SCENARIOS["quorum-crashing-consumers"].spec.with_seed()
    made, refused = vary.stay_modes("quorum-crashing-consumers", crashing,
                                    ("none", "publishers", "both"))
    assert [s.workload.stay for s in made] == ["none", "publishers"]
    [(mode, why)] = refused
    assert mode == "both"
    assert why.startswith("quorum-crashing-consumers with --stay both: ")
    assert "crashed" in why


def _fake_runs(tmp_path, ran):
    """A runner that records each spec and returns results: stuck for a staying run of
    quorum-leader-partition, lost for a scenario that predicts it, else valid and settled."""
    def fake_run(spec, replay_of=None, progress=True):
        ran.append(spec)
        run_dir = tmp_path / "store" / spec.name / f"run{len(ran)}"
        run_dir.mkdir(parents=True)
        (run_dir / "test.json").write_text(json.dumps({"spec": spec.to_dict()}))
        stuck = spec.name == "quorum-leader-partition" and spec.workload.stay != "none"
        lost = 5 if SCENARIOS[spec.name].expect.anomaly else 0
        res = results(valid=not (stuck or lost), settled=not stuck, lost=lost)
        (run_dir / "results.json").write_text(json.dumps(res))
        return (1 if stuck else 0), SimpleNamespace(run_dir=run_dir, results=res, error=None,
                                                    interrupted=False)
    return fake_run


def test_matrix_runs_every_partition_and_leader_kill_scenario_with_clients_that_stay(
        tmp_path, monkeypatch, capsys):
    ran: list[TestSpec] = []
    monkeypatch.setattr(cli, "_run_and_report", _fake_runs(tmp_path, ran))
    monkeypatch.setattr(cli, "_require_root", lambda specs=(): None)
    code = main(["matrix", "--rabbitmq", "4.3", "--stay-variants", "none,both", "--seed", "7",
                 "--store", str(tmp_path / "store"), "--no-progress"])
    assert code == 1  # the stuck staying runs are a finding
    names = {s.name for s in ran}
    assert names <= set(staying_candidates()) and {"partition", "khepri-minority"} <= names
    assert "healthy" not in names and "kill" not in names
    modes = [(s.name, s.workload.stay) for s in ran if s.name == "partition"]
    assert modes == [("partition", "none"), ("partition", "both")]  # side by side, one seed
    assert {s.seed for s in ran} == {7} and {s.broker.rabbitmq for s in ran} == {"4.3"}
    assert ("quorum-crashing-consumers", "both") not in {(s.name, s.workload.stay) for s in ran}
    [js] = (tmp_path / "store" / "matrix").glob("*/matrix.json")
    doc = json.loads(js.read_text())
    assert doc["stay_variants"] == ["none", "both"]
    assert doc["side_by_side"]["titles"] == ["RabbitMQ 4.3"]
    lines = {line["scenario"]: (line["expect"], line["cells"])
             for line in doc["side_by_side"]["lines"]}
    settled = "valid, no publish stuck, no consumer stuck after the heal"
    assert lines["partition"] == ("valid", ["1/1 ok"])
    # A staying cell also says its seeds and what settled across the heals.
    assert lines["partition (workload.stay=both)"] == (settled, [
        "1/1 ok (seeds 7; publishes across a heal: 9 settled; consumers through a heal: 2 fed)"])
    assert lines["quorum-leader-partition (workload.stay=both)"] == (settled, [
        "0/1 FINDING (seeds 7; publishes across a heal: 9 settled, 1 stuck; consumers through "
        "a heal: 2 fed)"])
    crashing = lines["quorum-crashing-consumers (workload.stay=both)"][1][0]
    assert crashing.startswith("not applicable: quorum-crashing-consumers with --stay both")
    mirrored = lines["mirrored-master-partition (workload.stay=both)"][1][0]
    assert mirrored.startswith("not applicable: ") and "mirroring" in mirrored
    out = capsys.readouterr().out
    assert "| partition (RabbitMQ 4.3, workload.stay=both) | " + settled in out


def test_a_table_and_an_archive_keep_staying_runs_beside_their_scenario(tmp_path, monkeypatch):
    ran: list[TestSpec] = []
    monkeypatch.setattr(cli, "_run_and_report", _fake_runs(tmp_path, ran))
    monkeypatch.setattr(cli, "_require_root", lambda specs=(): None)
    main(["matrix", "--rabbitmq", "4.3", "--stay-variants", "none,both", "--scenarios",
          "partition,quorum-leader-partition", "--store", str(tmp_path / "store"),
          "--no-progress"])
    [js] = (tmp_path / "store" / "matrix").glob("*/matrix.json")
    expectations = {n: sc.expect for n, sc in SCENARIOS.items()}
    specs = {n: sc.spec for n, sc in SCENARIOS.items()}
    dropped: dict[str, int] = {}
    rows = rebuild([js], expectations, specs=specs, dropped=dropped)
    assert dropped == {}  # a staying run is a run of its scenario, varied: kept
    got = [(r.scenario, r.variant, r.judgement) for r in rows]
    assert got == [("partition", "", "as expected"),
                   ("partition", "workload.stay=both", "as expected"),
                   ("quorum-leader-partition", "", "as expected"),
                   ("quorum-leader-partition", "workload.stay=both", "FINDING")]
    # A row stored before rows named the mode takes it from its spec, in a table and an archive.
    doc = json.loads(js.read_text())
    for r in doc["rows"]:
        r["variant"] = ""
        del r["settled"]
    js.write_text(json.dumps(doc))
    again = rebuild([js], expectations, specs=specs)
    assert [(r.variant, r.settled) for r in again] == [(r.variant, r.settled) for r in rows]
    out = tmp_path / "m.jsonl"
    archive([js], out, expectations, store=tmp_path / "store")
    kept = [(r.scenario, r.variant, r.judgement) for r, _s, _res in read_archive(out)]
    assert kept == got
    summaries = matrix.summarize(again, expectations)
    assert [(s.scenario, s.variant, s.runs) for s in summaries] == [
        ("partition", "", 1), ("partition", "workload.stay=both", 1),
        ("quorum-leader-partition", "", 1), ("quorum-leader-partition", "workload.stay=both", 1)]
    # The detection table pairs scenarios with their twins: a staying line is neither.
    pairs = matrix.pair_table([dc(s, expect="lost") for s in summaries], {})
    assert pairs.count("| partition |") == 1
    # The staying run of a scenario changed since is left out like any other.
    changed = {**specs, "partition": dc(specs["partition"], time_limit_s=91.0)}
    dropped = {}
    rebuild([js], expectations, specs=changed, dropped=dropped)
    assert dropped == {"partition": 2}
