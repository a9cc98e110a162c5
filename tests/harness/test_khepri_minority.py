"""The Khepri minority's scenarios (harness.scenarios khepri-minority, khepri-minority-leader):
their specs, their refusal where the metadata store is not Khepri (3.10; 4.0 with Mnesia), how
`scenarios` and a matrix say so, and the runner's metadata probe (a Run without a cluster)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from clusters.base import Node
from clusters.releases import lines_with_store
from harness import store
from harness.cli import _matrix_entries, build_parser, main
from harness.progress import ObservedHistory
from harness.runner import Run
from harness.scenarios import SCENARIOS, not_applicable
from harness.spec import SpecError, TestSpec
from workloads.metadata_probe import MetadataProbe
from workloads.queue_workload import QueueWorkload, WorkloadOptions

NAMES = ("khepri-minority", "khepri-minority-leader")
NEEDS = ("needs the Khepri metadata store (RabbitMQ 4.3, or 4.0 with --metadata-store khepri), "
         "not Mnesia")


def on(spec: TestSpec, line: str, store_: str | None = None) -> TestSpec:
    return dataclasses.replace(spec, broker=dataclasses.replace(
        spec.broker, rabbitmq=line, metadata_store=store_))


@pytest.mark.parametrize("name", NAMES)
def test_the_scenarios_run_on_khepri_with_the_probe_on_and_a_minority_cut_off(name: str) -> None:
    spec = SCENARIOS[name].spec
    spec.validate()
    assert (spec.broker.rabbitmq, spec.broker.store, spec.needs_metadata_store) == (
        "4.3", "khepri", "khepri")
    assert spec.workload.metadata_probe_interval_s == 1.0
    assert spec.queue.type == "quorum" and SCENARIOS[name].expect.anomaly is None
    fault = {"khepri-minority": "partition-one@follower",
             "khepri-minority-leader": "partition-leader"}[name]
    assert spec.nemesis.faults == (fault,)
    on(spec, "4.0", "khepri").validate()  # 4.0 with Khepri switched on runs it too


@pytest.mark.parametrize("name", NAMES)
def test_on_3_10_or_4_0_with_mnesia_they_are_refused_as_not_applicable(name: str) -> None:
    spec = SCENARIOS[name].spec
    for line in ("3.10", "4.0"):
        assert on(spec, line).refusal() == f"{name} {NEEDS}"
        with pytest.raises(SpecError, match="needs the Khepri metadata store"):
            on(spec, line).validate()
    assert on(spec, "4.0", "mnesia").refusal() == f"{name} {NEEDS}"
    # A store the line lacks is refused by the line's own sentence first.
    assert "RabbitMQ 3.10 has no khepri" in (on(spec, "3.10", "khepri").refusal() or "")
    assert not_applicable(spec) == [("3.10", f"{name} {NEEDS}"), ("4.0", f"{name} {NEEDS}")]


def test_where_a_store_runs_comes_from_the_release_table() -> None:
    assert lines_with_store("khepri") == "RabbitMQ 4.3, or 4.0 with --metadata-store khepri"
    assert lines_with_store("mnesia") == "RabbitMQ 3.10 or 4.0"
    assert lines_with_store("etcd") == "no release line"
    with pytest.raises(SpecError, match="needs_metadata_store 'etcd' is no metadata store"):
        dataclasses.replace(TestSpec(), needs_metadata_store="etcd").validate()
    assert TestSpec().store_refusal() is None  # a test about no store runs on any


def test_scenarios_and_a_matrix_say_where_they_do_not_apply(capsys) -> None:
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    for name in NAMES:
        assert f"not applicable on RabbitMQ 3.10, 4.0: {name} {NEEDS}" in out
    a = build_parser().parse_args(["matrix", "--scenarios", "khepri-minority",
                                   "--rabbitmq", "3.10,4.3"])
    entries, refused = _matrix_entries(a, with_twins=False)
    assert [(n, s.broker.rabbitmq) for n, s, _ in entries] == [("khepri-minority", "4.3")]
    assert [(r.scenario, r.rabbitmq, r.reason) for r in refused] == [
        ("khepri-minority", "3.10", f"khepri-minority {NEEDS}")]


def test_the_probe_option_is_off_by_default_and_validated() -> None:
    assert WorkloadOptions().metadata_probe_interval_s == 0.0
    for bad, said in ((WorkloadOptions(metadata_probe_interval_s=-1.0), "interval must be >= 0"),
                      (WorkloadOptions(metadata_probe_timeout_s=0.0), "timeout must be > 0")):
        with pytest.raises(SpecError, match=said):
            dataclasses.replace(TestSpec(), workload=bad).validate()


def _run(tmp_path: Path, spec: TestSpec) -> Run:
    run = Run.__new__(Run)
    run.spec = spec
    run.history = ObservedHistory(tmp_path / store.HISTORY, lambda op: None)
    nodes = [Node(n, "127.0.0.1", None) for n in ("n1", "n2", "n3")]  # type: ignore[arg-type]
    run.cluster = SimpleNamespace(nodes=nodes)  # type: ignore[assignment]
    run.workload = QueueWorkload(spec.queue, spec.workload, nodes, run.history)
    run.test_info = {}
    return run


def test_the_runner_probes_every_node_when_the_spec_asks_and_records_the_cleanup(
        tmp_path: Path) -> None:
    off = _run(tmp_path, TestSpec())
    assert off.metadata_probe() is None
    off.probe = None
    off.clean_probe()
    assert "metadata_probe" not in off.test_info
    spec = SCENARIOS["khepri-minority"].spec
    run = _run(tmp_path, spec)
    probe = run.metadata_probe()
    assert isinstance(probe, MetadataProbe)
    assert [p.node.name for p in probe.probes] == ["n1", "n2", "n3"]
    assert (probe.settings.interval_s, probe.settings.timeout_s) == (1.0, 35.0)
    assert probe.settings.client is spec.workload.client
    assert [p.process for p in probe.probes] == [0, 1, 2]
    assert isinstance(run.workload, QueueWorkload)
    assert run.workload.pids.next() == 3  # numbered in the queue workload's own sequence
    run.probe = probe
    run.clean_probe()  # nothing left over: nothing to connect to
    assert run.test_info["metadata_probe"] == {"leftovers": 0, "deleted": 0, "left": [],
                                               "error": None}

