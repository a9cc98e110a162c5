"""Series of runs (no cluster): rounds, shared seeds for twins, tables kept and rebuilt."""

import dataclasses
import json
from dataclasses import replace as dc
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import matrix
from harness.series import Series, rebuild
from harness.spec import TestSpec

LOSS = matrix.loss()
LOST = {"valid": False, "queue": {"valid": False, "anomalies": ["lost"], "lost_count": 5}}
OK = {"valid": True, "queue": {"valid": True, "anomalies": [], "lost_count": 0}}


def test_runs_go_round_by_round_and_a_round_shares_one_seed(tmp_path):
    s = Series([("a", TestSpec(name="a"), LOSS), ("b", TestSpec(name="b"), None)], 3, tmp_path,
               base_seed=10)
    got = [(name, spec.seed, s.round) for name, spec in s.runs()]
    assert got == [("a", 10, 0), ("b", 10, 0), ("a", 11, 1), ("b", 11, 1), ("a", 12, 2),
                   ("b", 12, 2)]
    with pytest.raises(ValueError):
        Series([], 0, tmp_path)


def test_record_keeps_the_table_current_and_a_cut_series_exits_2(tmp_path):
    s = Series([("a", TestSpec(name="a"), LOSS)], 2, tmp_path, base_seed=1)
    run = tmp_path / "run1"
    s.record("a", TestSpec(name="a", seed=1), 1, 60.0,
             SimpleNamespace(run_dir=run, results=LOST, error=None))
    doc = json.loads((s.out_dir / "matrix.json").read_text())
    assert [r["judgement"] for r in doc["rows"]] == ["detected"] and doc["rows"][0]["seed"] == 1
    assert s.exit_code() == 2  # one of two runs happened
    s.record("a", TestSpec(name="a", seed=2), 1, 61.0,
             SimpleNamespace(run_dir=run, results=LOST, error=None))
    assert s.exit_code() == 0 and s.summaries()[0].rate == 1.0


def test_rebuild_judges_each_run_again_from_its_results(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "results.json").write_text(json.dumps(OK))
    row = matrix.make_row("a", LOSS, 2, 50, run, None, "checker crashed", seed=4)
    gone = matrix.make_row("a", LOSS, 1, 50, tmp_path / "gone", LOST, seed=5)
    matrix.write([row, gone], [], tmp_path / "m")
    rows = rebuild([tmp_path / "m" / "matrix.json"], {"a": LOSS})
    assert [(r.judgement, r.seed) for r in rows] == [("MISSED", 4), ("detected", 5)]
    rechecked = rebuild([tmp_path / "m" / "matrix.json"], {"a": LOSS},
                        recheck=lambda d: LOST)
    assert rechecked[0].judgement == "MISSED"  # no history.jsonl there: nothing to recheck
    (run / "history.jsonl").write_text("")
    rechecked = rebuild([tmp_path / "m" / "matrix.json"], {"a": LOSS}, recheck=lambda d: LOST)
    assert [r.judgement for r in rechecked] == ["detected", "detected"]
    assert isinstance(rechecked[0].run_dir, str) and Path(rechecked[0].run_dir) == run


def test_rebuild_leaves_out_runs_of_an_older_definition_of_a_scenario(tmp_path):
    from dataclasses import replace as dc_replace

    from harness.series import same_scenario

    spec = TestSpec(name="a", time_limit_s=60)
    runs = []
    for k, stored in enumerate([dc_replace(spec, seed=1, store="/x"), dc_replace(spec, seed=2),
                                dc_replace(spec, time_limit_s=30, seed=3)]):
        run = tmp_path / f"r{k}"
        run.mkdir()
        (run / "test.json").write_text(json.dumps({"spec": stored.to_dict()}))
        (run / "results.json").write_text(json.dumps(LOST))
        runs.append(matrix.make_row("a", LOSS, 1, 50, run, LOST, seed=stored.seed))
    matrix.write(runs, [], tmp_path / "m")
    dropped: dict[str, int] = {}
    rows = rebuild([tmp_path / "m" / "matrix.json"], {"a": LOSS}, specs={"a": spec},
                   dropped=dropped)
    assert [r.seed for r in rows] == [1, 2] and dropped == {"a": 1}
    assert same_scenario(dc_replace(spec, seed=9).to_dict(), spec)
    assert not same_scenario(dc_replace(spec, nodes=5).to_dict(), spec)


def test_a_run_stored_before_a_field_was_added_or_retired_is_the_same_scenario():
    from harness.series import same_scenario

    old = TestSpec(name="a").to_dict()
    del old["workload"]["client"]["window"]  # added since: its default then
    old["broker"]["cookie"] = "RMQHARNESSCOOKIE"  # retired since
    assert same_scenario(old, TestSpec(name="a"))
    assert not same_scenario({"nodes": "three"}, TestSpec(name="a"))


def test_an_archive_rebuilds_the_table_once_the_store_is_gone(tmp_path):
    import shutil

    from harness.series import ARCHIVE_LIST_CAP, archive, read_archive

    spec = TestSpec(name="a", time_limit_s=60)
    big = {**LOST, "queue": {**LOST["queue"], "lost": list(range(500)), "lost_count": 500,
                             "details": {"lost": [{"id": "1-1", "story": "..."}]}}}
    rows = []
    for k, (stored, results) in enumerate([(dc(spec, seed=1), big), (dc(spec, seed=2), OK),
                                           (dc(spec, time_limit_s=30, seed=3), big)]):
        run = tmp_path / "store" / f"r{k}"
        run.mkdir(parents=True)
        (run / "test.json").write_text(json.dumps({"spec": stored.to_dict()}))
        (run / "results.json").write_text(json.dumps(results))
        rows.append(matrix.make_row("a", LOSS, 1, 50, run, results, seed=stored.seed))
    cut = tmp_path / "store" / "cut"  # a run the series was stopped in: it measured nothing
    cut.mkdir()
    (cut / "test.json").write_text(json.dumps({"spec": spec.to_dict(), "interrupted": True}))
    matrix.write([matrix.make_row("a", LOSS, 2, 5, cut, None, "interrupted", seed=4)], [],
                 tmp_path / "cut")
    matrix.write(rows, [], tmp_path / "m")
    both = [tmp_path / "m" / "matrix.json", tmp_path / "cut" / "matrix.json"]
    assert [r.seed for r in rebuild(both, {"a": LOSS})] == [1, 2, 3]
    out = tmp_path / "measurements" / "detection.jsonl"
    assert archive(both, out) == (3, 0)
    assert archive([tmp_path / "m" / "matrix.json"], out) == (0, 0)  # each run once
    # A run judged again (harness check RUN_DIR) keeps its line and takes its new results.
    rejudged = {**OK, "queue": {**OK["queue"], "valid": "unknown"}}
    (tmp_path / "store" / "r1" / "results.json").write_text(json.dumps(rejudged))
    assert archive([tmp_path / "m" / "matrix.json"], out) == (0, 1)
    assert read_archive(out)[1][2]["queue"]["valid"] == "unknown"
    assert [r.seed for r, _s, _r in read_archive(out)] == [1, 2, 3]
    (tmp_path / "store" / "r1" / "results.json").write_text(json.dumps(OK))
    assert archive([tmp_path / "m" / "matrix.json"], out) == (0, 1)
    shutil.rmtree(tmp_path / "store")

    row, stored_spec, results = read_archive(out)[0]
    assert stored_spec == json.loads(json.dumps(dc(spec, seed=1).to_dict())) and row.seed == 1
    assert results["queue"]["lost_count"] == 500  # counts stay
    assert len(results["queue"]["lost"]) == ARCHIVE_LIST_CAP and "details" not in results["queue"]
    dropped: dict[str, int] = {}
    got = rebuild([out, tmp_path / "m" / "matrix.json"], {"a": LOSS}, specs={"a": spec},
                  dropped=dropped)
    assert [(r.seed, r.judgement, r.lost) for r in got] == [(1, "detected", 500),
                                                            (2, "MISSED", 0)]
    assert dropped == {"a": 1}  # the older definition's run; the matrix.json repeats none


def test_a_torn_archive_line_is_named(tmp_path):
    from harness.series import read_archive

    bad = tmp_path / "a.jsonl"
    bad.write_text('{"row": {"scenario": "a"}}\n')
    with pytest.raises(ValueError, match="a.jsonl:1"):
        read_archive(bad)


# Every scenario's spec as test.json stored it while a fault entry was a bare string
# ("kill@leader") and interval/duration were the nemesis's only ones (written by that code).
STORED_CATALOGUE = Path(__file__).parent / "fixtures" / "catalogue_specs_global_fault_options.json"


@pytest.mark.parametrize("name", ["mirrored-unsynced-promotion", "mirrored-master-partition"])
def test_a_run_stored_with_global_fault_options_is_the_same_scenario_as_the_catalogue(name):
    from harness.scenarios import scenario
    from harness.series import same_scenario

    stored = json.loads(STORED_CATALOGUE.read_text())[name]
    assert same_scenario(stored, scenario(name))


def test_every_stored_catalogue_spec_still_loads_and_matches_its_scenario():
    from harness.scenarios import SCENARIOS
    from harness.series import same_scenario
    from harness.spec import spec_from_dict

    stored = json.loads(STORED_CATALOGUE.read_text())
    # Scenarios added after fault options moved into each entry were never stored that way.
    newer = {"quorum-delayed-retry", "quorum-delayed-retry-healthy", "quorum-consumer-timeout",
             "quorum-consumer-timeout-healthy", "quorum-consumer-timeout-sac",
             "quorum-consumer-timeout-sac-healthy", "quorum-consumer-timeout-close",
             "quorum-consumer-timeout-close-healthy", "quorum-power-loss-minority",
             "quorum-power-loss-majority", "quorum-power-loss-all", "quorum-leader-partition-returns",
             "durable-graceful-restart", "quorum-disk-corrupt-minority",
             "quorum-disk-corrupt-leader-truncate", "classic-power-loss-node",
             "classic-power-loss-all", "stream-power-loss-minority", "stream-power-loss-all",
             "quorum-delayed-retry-leader-partition",
             "quorum-delayed-retry-khepri-minority", "quorum-consumer-timeout-leader-kill",
             "quorum-consumer-timeout-khepri-minority", "quorum-priorities-leader-partition",
             "quorum-priorities-khepri-minority"}
    assert set(stored) == set(SCENARIOS) - newer
    # Redefined since, on purpose: 20% packet loss was never noticed by RabbitMQ (a weak run
    # every time); the scenario now loses 90%. Its older runs are left out of tables.
    redefined = {"quorum-packet-loss"}
    for name, spec in stored.items():
        assert spec_from_dict(spec).nemesis.validate()
        assert same_scenario(spec, SCENARIOS[name].spec) is (name not in redefined), name
    unsynced = stored["mirrored-unsynced-promotion"]
    other = json.loads(json.dumps(unsynced))
    other["nemesis"]["duration_s"] = 10
    assert not same_scenario(other, SCENARIOS["mirrored-unsynced-promotion"].spec)


# -- one settings object for checks (CheckOptions in the spec, where CheckSpec was) -------------

FIXTURES = Path(__file__).resolve().parent / "fixtures"
OLD_CHECK_KEYS = {"strict_order", "flagged_duplicates_invalid", "unflagged_duplicates_invalid",
                  "spark_master"}


def test_runs_stored_with_the_old_check_section_are_the_same_scenario():
    from harness.check import check_options
    from harness.scenarios import SCENARIOS
    from harness.series import same_scenario
    from harness.spec import spec_from_dict

    # Every scenario's check section as test.json recorded it before CheckSpec became
    # CheckOptions (frozen from that code): read with defaults, it is the scenario's check now.
    before = json.loads((FIXTURES / "check-sections-before.json").read_text())
    assert len(before) >= 20
    for name, check in before.items():
        if name not in SCENARIOS:
            continue
        current = SCENARIOS[name].spec
        assert set(check) == OLD_CHECK_KEYS
        stored = {**current.to_dict(), "check": check}
        assert spec_from_dict(stored).check == current.check, name
        assert check_options({"spec": stored}) == current.check, name
        assert same_scenario(stored, current), name
        recorded = current.to_dict()["check"]
        assert {k: recorded[k] for k in OLD_CHECK_KEYS} == check, name  # the old keys stay


def test_a_run_of_the_series_recorded_during_the_change_is_kept_by_table(tmp_path):
    from harness.scenarios import SCENARIOS

    # A spec as the series recording while this changed stored it (test.json's "spec").
    stored = json.loads((FIXTURES / "series-spec-quorum-ignore.json").read_text())
    assert set(stored["check"]) == OLD_CHECK_KEYS
    run = tmp_path / "run"
    run.mkdir()
    (run / "test.json").write_text(json.dumps({"spec": stored}))
    (run / "results.json").write_text(json.dumps(LOST))
    expect = SCENARIOS["quorum-ignore"].expect
    matrix.write([matrix.make_row("quorum-ignore", expect, 1, 90, run, LOST, seed=1003)], [],
                 tmp_path / "m")
    dropped: dict[str, int] = {}
    rows = rebuild([tmp_path / "m" / "matrix.json"], {"quorum-ignore": expect},
                   specs={n: sc.spec for n, sc in SCENARIOS.items()}, dropped=dropped)
    assert [r.seed for r in rows] == [1003] and dropped == {}


def test_a_spec_records_the_checks_judgement_not_this_machines_spark_tuning():
    from dataclasses import replace as dc_replace

    from checkers.options import CheckOptions
    from harness.spec import spec_from_dict

    check = CheckOptions(strict_order=True, require_drain=False, sample_size=7,
                         driver_memory="8g", work_dir=Path("/scratch"))
    spec = dc_replace(TestSpec(name="a"), check=check)
    recorded = spec.to_dict()["check"]
    assert recorded == {
        "strict_order": True, "flagged_duplicates_invalid": False,
        "unflagged_duplicates_invalid": True, "unflagged_redeliveries_invalid": False,
        "require_drain": False, "sample_size": 7,
        "example_size": 20, "quantile_accuracy": 10000, "spark_master": None}
    again = spec_from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again.check == dc_replace(check, driver_memory="2g", work_dir=None)


def test_an_archive_keeps_run_directories_relative_to_the_store_and_judgements_current(tmp_path):
    from harness.series import archive, read_archive

    store = tmp_path / "store"
    run = store / "a" / "20261125T000000Z"
    run.mkdir(parents=True)
    spec = TestSpec(name="a")
    (run / "test.json").write_text(json.dumps({"spec": spec.to_dict()}))
    weak = {**OK, "strength": {"weak": True, "reason": "none of 2 partitions was noticed",
                               "summary": "faults noticed 0 of 2"}}
    (run / "results.json").write_text(json.dumps(weak))
    # Judged when it ended, before strength was judged: "as expected".
    matrix.write([matrix.make_row("a", matrix.Expectation(), 0, 50, run, OK, seed=1)], [],
                 tmp_path / "m")
    out = tmp_path / "detection.jsonl"
    assert archive([tmp_path / "m" / "matrix.json"], out, {"a": matrix.Expectation()},
                   store=store) == (1, 0)  # added, judged as it stands
    [(row, _spec, results)] = read_archive(out)
    assert row.run_dir == "a/20261125T000000Z"
    assert row.judgement == matrix.WEAK and results["strength"]["weak"] is True
    assert archive([out], out, {"a": matrix.Expectation()}, store=store) == (0, 0)
    # A line archived before a Row field existed gains it empty: nothing judged again.
    line = json.loads(out.read_text())
    del line["row"]["repeated_in_subscription"]
    out.write_text(json.dumps(line) + "\n")
    assert archive([out], out, {"a": matrix.Expectation()}, store=store) == (0, 0)


def test_khepri_runs_are_a_line_of_their_own_in_rows_archives_and_tables(tmp_path):
    from harness import vary
    from harness.series import archive, read_archive

    assert vary.with_store("", "khepri") == "broker.metadata_store=khepri"
    assert vary.with_store("queue.type=stream", "khepri") == \
        "queue.type=stream, broker.metadata_store=khepri"
    assert vary.with_store("broker.metadata_store=khepri", "khepri") == \
        "broker.metadata_store=khepri"  # varied on purpose: said once
    assert vary.with_store("", "mnesia") == "" and vary.with_store("", None) == ""
    on_40 = TestSpec(name="a", seed=1)
    khepri = dc(on_40, broker=dc(on_40.broker, rabbitmq="4.0", metadata_store="khepri"))
    mnesia = dc(khepri, broker=dc(khepri.broker, metadata_store="mnesia"))
    # A new series' rows say the store.
    s = Series([("a", khepri, matrix.Expectation())], 1, tmp_path / "s", base_seed=1)
    new = s.make_row("a", khepri, 0, 60.0,
                     SimpleNamespace(run_dir=tmp_path / "x", results=OK, error=None))
    assert new.variant == "broker.metadata_store=khepri"
    # Rows stored before they said it (a matrix.json, an archive) take it from their spec.
    rows = []
    for k, spec in enumerate([khepri, mnesia]):
        run = tmp_path / "store" / f"r{k}"
        run.mkdir(parents=True)
        (run / "test.json").write_text(json.dumps({"spec": spec.to_dict()}))
        (run / "results.json").write_text(json.dumps(OK))
        rows.append(matrix.make_row("a", matrix.Expectation(), 0, 50, run, OK, seed=k,
                                    rabbitmq="4.0"))
    matrix.write(rows, [], tmp_path / "m")
    got = rebuild([tmp_path / "m" / "matrix.json"], {"a": matrix.Expectation()})
    assert [r.variant for r in got] == ["broker.metadata_store=khepri", ""]
    names = [s.scenario + " " + s.variant
             for s in matrix.summarize(got, {"a": matrix.Expectation()})]
    assert names == ["a broker.metadata_store=khepri", "a "]  # two lines, never one of 2 runs
    out = tmp_path / "a.jsonl"
    archive([tmp_path / "m" / "matrix.json"], out, store=tmp_path / "store")
    assert [r.variant for r, _s, _res in read_archive(out)] == ["broker.metadata_store=khepri", ""]


def test_a_table_rebuilt_across_release_lines_says_what_a_line_cannot_run(tmp_path):
    from harness.cli import _refused
    from harness.scenarios import SCENARIOS

    specs = {n: sc.spec for n, sc in SCENARIOS.items()}
    rows = [matrix.make_row(name, SCENARIOS[name].expect, 0, 90, tmp_path / name, OK,
                            seed=1, rabbitmq=line)
            for name, line in [("mirrored-master-partition", "3.10"),
                               ("quorum-ignore", "3.10"), ("quorum-ignore", "4.0")]]
    refused = _refused(rows, specs)
    assert [(n.scenario, n.rabbitmq) for n in refused] == [("mirrored-master-partition", "4.0")]
    assert "mirroring was removed" in refused[0].reason
    assert _refused(rows[:2], specs) == []  # one release line: nothing to put side by side
    out = tmp_path / "t"
    matrix.write(rows, matrix.summarize(rows, {n: SCENARIOS[n].expect for n in SCENARIOS}), out,
                 {"not_applicable": [dataclasses.asdict(n) for n in refused]})
    cells = {line["scenario"]: line["cells"]
             for line in json.loads((out / "matrix.json").read_text())["side_by_side"]["lines"]}
    assert cells["mirrored-master-partition"][1].startswith("not applicable: ")


def test_a_reworded_description_is_still_the_same_scenario():
    # A description is prose (partition's said pause_minority, which 4.3 has not): rewording it
    # keeps the scenario's archived runs in its tables; a changed setting does not.
    from dataclasses import replace as dc_replace

    from harness.scenarios import SCENARIOS
    from harness.series import same_scenario

    spec = SCENARIOS["partition"].spec
    stored = dc_replace(spec, description="quorum queue, pause_minority, partitions").to_dict()
    assert same_scenario(stored, spec)
    assert not same_scenario(dc_replace(spec, time_limit_s=91.0).to_dict(), spec)
