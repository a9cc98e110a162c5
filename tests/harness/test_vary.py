"""One schedule across kinds and release lines (no cluster): --vary parsed and applied, mirrored on
4.0 not applicable, the variant table, and `matrix --scenario-file F --vary ...` end to end with
the runner replaced."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import harness.cli as cli
from harness import matrix, vary
from harness.cli import main
from harness.scenario_file import ScenarioFileError, with_setting, write_scenario
from harness.spec import SpecError, TestSpec
from nemesis.options import NemesisOptions

KINDS = "queue.type=quorum,mirrored,classic,stream"
OK = {"valid": True, "queue": {"valid": True, "anomalies": []}, "run": {"problems": []}}
LOST = {"valid": False, "queue": {"valid": False, "anomalies": ["lost"], "lost_count": 3},
        "run": {"problems": []}}


def scheduled(**kw) -> TestSpec:
    nemesis = NemesisOptions.played_once([(10.0, "kill@leader", 15.0),
                                          (35.0, "partition-one@n3", 20.0)])
    return TestSpec(name="kill-then-partition", seed=4242, time_limit_s=70.0, nemesis=nemesis,
                    **kw)


def test_vary_parses_keys_and_values_and_refuses_what_is_malformed():
    assert vary.parse_vary([KINDS, "broker.rabbitmq=3.10,4.0"]) == [
        ("queue.type", ("quorum", "mirrored", "classic", "stream")),
        ("broker.rabbitmq", ("3.10", "4.0"))]
    for bad in (["queue.type"], ["=quorum"], ["queue.type="], [KINDS, "queue.type=quorum"]):
        with pytest.raises(SpecError):
            vary.parse_vary(bad)
    assert vary.variants([]) == [()]
    assert vary.variants([("a", ("1", "2")), ("b", ("x", "y"))]) == [
        (("a", "1"), ("b", "x")), (("a", "1"), ("b", "y")),
        (("a", "2"), ("b", "x")), (("a", "2"), ("b", "y"))]


def test_a_setting_is_set_by_its_scenario_file_key_and_typed_by_its_field():
    spec = TestSpec()
    assert with_setting(spec, "queue.type", "stream").queue.type == "stream"
    assert with_setting(spec, "broker.rabbitmq", "4.0").broker.rabbitmq == "4.0"  # not 4.0 float
    assert with_setting(spec, "workload.client.prefetch", "1").workload.client.prefetch == 1
    assert with_setting(spec, "workload.consume_rate", "none").workload.consume_rate is None
    with pytest.raises(ScenarioFileError, match="QueueSpec has no such setting"):
        with_setting(spec, "queue.kind", "quorum")
    with pytest.raises(ScenarioFileError, match="must be a whole number"):
        with_setting(spec, "workload.client.prefetch", "many")


def test_one_schedule_across_kinds_and_lines_mirrored_on_4_0_is_not_applicable():
    dims = vary.parse_vary([KINDS, "broker.rabbitmq=3.10,4.0"])
    runnable, refused = vary.expand("k", scheduled(), dims)
    assert [(s.queue.type, s.broker.rabbitmq) for s, _v in runnable] == [
        ("quorum", "3.10"), ("quorum", "4.0"), ("mirrored", "3.10"), ("classic", "3.10"),
        ("classic", "4.0"), ("stream", "3.10"), ("stream", "4.0")]
    assert {s.nemesis.schedule for s, _v in runnable} == {scheduled().nemesis.schedule}
    assert {s.seed for s, _v in runnable} == {4242}
    stream = next(s for s, _v in runnable if s.queue.type == "stream")
    assert stream.check.unflagged_duplicates_invalid is False  # its kind's check rules
    [(variant, why)] = refused
    assert variant == (("queue.type", "mirrored"), ("broker.rabbitmq", "4.0"))
    assert "mirroring was removed in RabbitMQ 4.0" in why
    assert vary.label(variant) == "queue.type=mirrored"


def test_a_kind_varied_away_from_a_stream_is_judged_by_its_own_rules():
    from harness.scenarios import SCENARIOS

    stream = SCENARIOS["stream-partition"].spec
    assert stream.check.unflagged_duplicates_invalid is False
    quorum = vary.apply(stream, (("queue.type", "quorum"),))
    assert quorum.check.unflagged_duplicates_invalid is True
    assert quorum.check == dataclasses.replace(stream.check, unflagged_duplicates_invalid=True)


def test_a_variant_that_cannot_make_a_test_is_an_error_naming_it():
    with pytest.raises(SpecError, match="with queue.type=stream, workload.client.prefetch=0: "
                                        "stream consumers need a prefetch"):
        vary.expand("k", scheduled(), [("queue.type", ("stream",)),
                                       ("workload.client.prefetch", ("0",))])


def summaries(rows):
    return matrix.summarize(rows, {})


def row(kind, line, results):
    return matrix.make_row("kill-then-partition", matrix.Expectation(), 0, 90.0, "r", results,
                           seed=4242, rabbitmq=line, variant=f"queue.type={kind}")


def test_the_variant_table_puts_one_schedule_s_verdicts_side_by_side():
    rows = [row("quorum", "3.10", OK), row("mirrored", "3.10", LOST), row("classic", "3.10", OK),
            row("stream", "3.10", OK), row("quorum", "4.0", OK)]
    na = [matrix.NotApplicable("kill-then-partition", "4.0", "classic queue mirroring was "
                               "removed in RabbitMQ 4.0", "queue.type=mirrored")]
    lines = matrix.variant_table(summaries(rows), na, "queue.type").splitlines()
    assert lines[0] == ("| scenario | expected | queue.type=quorum | queue.type=mirrored | "
                        "queue.type=classic | queue.type=stream |")
    assert lines[2] == ("| kill-then-partition | valid | 1/1 ok | 0/1 FINDING | 1/1 ok | "
                        "1/1 ok |")
    assert lines[3] == ("| kill-then-partition (RabbitMQ 4.0) | valid | 1/1 ok | not "
                        "applicable: classic queue mirroring was removed in RabbitMQ 4.0 | - | - |")
    # the same rows with the release lines as columns: the variant goes into the line's name
    by_line = matrix.variant_table(summaries(rows), na).splitlines()
    assert by_line[0] == "| scenario | expected | RabbitMQ 3.10 | RabbitMQ 4.0 |"
    assert "| kill-then-partition (queue.type=mirrored) | valid | 0/1 FINDING | not applicable: " \
           "classic queue mirroring was removed in RabbitMQ 4.0 |" in by_line
    assert matrix.problems(summaries(rows)) == [
        "kill-then-partition (queue.type=mirrored): 1 of 1 runs contradict the prediction "
        "(valid)"]


def test_the_side_by_side_data_of_a_varied_kind_holds_the_markdown_table_s_cells(tmp_path):
    rows = [row("quorum", "3.10", OK), row("mirrored", "3.10", LOST), row("quorum", "4.0", OK)]
    na = [matrix.NotApplicable("kill-then-partition", "4.0", "mirroring was removed",
                               "queue.type=mirrored")]
    data = matrix.side_by_side(summaries(rows), na, "queue.type")
    assert (data["column"], data["values"], data["titles"]) == (
        "queue.type", ["quorum", "mirrored"], ["queue.type=quorum", "queue.type=mirrored"])
    assert data["lines"] == [
        {"scenario": "kill-then-partition", "expect": "valid",
         "cells": ["1/1 ok", "0/1 FINDING"]},
        {"scenario": "kill-then-partition (RabbitMQ 4.0)", "expect": "valid",
         "cells": ["1/1 ok", "not applicable: mirroring was removed"]}]
    assert matrix.variant_table(summaries(rows), na, "queue.type") == \
        matrix.variant_markdown(data)
    # matrix.json keeps the table of the first varied key, as matrix.md draws it
    js, md = matrix.write(rows, summaries(rows), tmp_path, extra={
        "vary": ["queue.type"], "not_applicable": [dataclasses.asdict(n) for n in na]})
    assert json.loads(js.read_text())["side_by_side"] == data
    assert md.read_text().startswith(matrix.variant_markdown(data))


def test_a_row_stored_before_variants_reads_without_one(tmp_path):
    old = {k: v for k, v in vars(row("quorum", "3.10", OK)).items() if k != "variant"}
    (tmp_path / "matrix.json").write_text(json.dumps({"rows": [old]}))
    assert matrix.read_rows(tmp_path / "matrix.json")[0].variant == ""


def test_matrix_holds_a_scenario_file_fixed_and_varies_the_queue_kind(tmp_path, monkeypatch,
                                                                      capsys):
    path = write_scenario(scheduled(store=str(tmp_path / "store")), tmp_path / "k.toml")
    ran: list[TestSpec] = []

    def fake_run(spec, replay_of=None, progress=True):
        ran.append(spec)
        run_dir = tmp_path / "store" / f"run{len(ran)}"
        run_dir.mkdir(parents=True)
        results = LOST if spec.queue.type == "mirrored" else OK
        return (1 if results is LOST else 0), SimpleNamespace(
            run_dir=run_dir, results=results, error=None, interrupted=False)

    monkeypatch.setattr(cli, "_run_and_report", fake_run)
    monkeypatch.setattr(cli, "_require_root", lambda specs=(): None)
    code = main(["matrix", "--scenario-file", str(path), "--vary", KINDS,
                 "--rabbitmq", "3.10,4.0"])
    assert code == 1  # the mirrored run is a finding against "valid"
    assert [(s.queue.type, s.broker.rabbitmq) for s in ran] == [
        ("quorum", "3.10"), ("mirrored", "3.10"), ("classic", "3.10"), ("stream", "3.10"),
        ("quorum", "4.0"), ("classic", "4.0"), ("stream", "4.0")]
    assert {s.seed for s in ran} == {4242}  # the file's seed: one schedule, same random picks
    assert {s.nemesis.schedule for s in ran} == {scheduled().nemesis.schedule}
    out = capsys.readouterr().out
    assert "not applicable: kill-then-partition (queue.type=mirrored) on RabbitMQ 4.0" in out
    assert ("| kill-then-partition | valid | 1/1 ok | 0/1 FINDING | 1/1 ok | 1/1 ok |"
            in out)
    [md] = (tmp_path / "store" / "matrix").glob("*/matrix.md")
    assert md.read_text().startswith("| scenario | expected | queue.type=quorum | "
                                     "queue.type=mirrored |")
    doc = json.loads(md.with_name("matrix.json").read_text())
    assert doc["vary"] == ["queue.type"]
    assert [r["variant"] for r in doc["rows"]][:2] == ["queue.type=quorum", "queue.type=mirrored"]


def test_matrix_scenario_file_takes_no_scenario_list(tmp_path, capsys):
    path = write_scenario(scheduled(), tmp_path / "k.toml")
    assert main(["matrix", "--scenario-file", str(path), "--scenarios", "kill"]) == 2
    assert "--scenario-file is the matrix's one test" in capsys.readouterr().err
    assert main(["matrix", "--scenario-file", str(path), "--vary", "queue.tpye=quorum"]) == 2
    assert "has no such setting" in capsys.readouterr().err


def test_a_file_run_on_4_0_alone_with_mirrored_among_kinds(tmp_path, monkeypatch):
    path = write_scenario(scheduled(), tmp_path / "k.toml")
    seen = {}

    def fake_series(entries, a, not_applicable=()):
        seen["entries"] = [(n, s.queue.type, s.broker.rabbitmq) for n, s, _e in entries]
        seen["na"] = [(n.rabbitmq, n.variant) for n in not_applicable]
        return 0

    monkeypatch.setattr(cli, "_series", fake_series)
    assert main(["matrix", "--scenario-file", str(path), "--vary", "queue.type=mirrored,quorum",
                 "--rabbitmq", "4.0"]) == 0
    assert seen == {"entries": [("kill-then-partition", "quorum", "4.0")],
                    "na": [("4.0", "queue.type=mirrored")]}
    assert Path(path).exists()


@pytest.mark.parametrize("line", ["3.10", "4.0"])
@pytest.mark.parametrize("kind", ["quorum", "mirrored", "classic", "stream"])
def test_a_run_and_a_matrix_refuse_the_same_specs_with_the_release_table_s_sentence(line, kind):
    # One answer (TestSpec.refusal, read from clusters.releases): `run` exits 2 with it, and a
    # matrix lists the same variant not applicable with the same sentence.
    from clusters.releases import release

    spec = vary.apply(TestSpec(), (("broker.rabbitmq", line), ("queue.type", kind)))
    why = release(line).refuses_kind(kind)
    assert spec.refusal() == why
    runnable, refused = vary.expand(
        "t", TestSpec(), [("broker.rabbitmq", (line,)), ("queue.type", (kind,))])
    if why is None:
        spec.validate()
        assert len(runnable) == 1 and refused == []
    else:
        with pytest.raises(SpecError, match=why.split(';')[0]):
            spec.validate()
        assert runnable == [] and [r for _v, r in refused] == [why]
