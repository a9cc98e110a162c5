"""The fault shapes of the 4.3 promises (issue 31): priorities, delayed retry and consumer
timeouts each under a partition cutting off the queue leader's node, a leader kill and a Khepri
minority, beside a fault-free control. The shapes added beside the first scenarios
(harness.scenarios: quorum-priorities and quorum-delayed-retry killed the leader,
quorum-consumer-timeout cut a random node off) are built here for line 4.3 without a cluster:
that each validates, plays the fault its name says, keeps its promise's queue arguments and
workload, is refused where its line or metadata store lacks what it needs, and, for the
priorities, still leaves over 1,000 deliveries to judge through its faults."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from harness.cli import main
from harness.scenarios import KHEPRI, KHEPRI_CUT_S, SCENARIOS, not_applicable
from harness.spec import TestSpec
from nemesis.schedule import schedule
from workloads.queue_spec import queue_arguments
from workloads.queue_workload import WorkloadOptions

ROOT = Path(__file__).resolve().parents[2]
# Each promise's first faulted scenario and its control.
FAMILIES = {"priorities": ("quorum-priorities", "quorum-priorities-healthy"),
            "delayed-retry": ("quorum-delayed-retry", "quorum-delayed-retry-healthy"),
            "consumer-timeout": ("quorum-consumer-timeout", "quorum-consumer-timeout-healthy")}
# The shapes added: name -> (promise, fault entry, whether on a Khepri minority).
ADDED = {
    "quorum-priorities-leader-partition": ("priorities", "partition-leader", False),
    "quorum-priorities-khepri-minority": ("priorities", "partition-one@follower", True),
    "quorum-delayed-retry-leader-partition": ("delayed-retry", "partition-leader", False),
    "quorum-delayed-retry-khepri-minority": ("delayed-retry", "partition-one@follower", True),
    "quorum-consumer-timeout-leader-kill": ("consumer-timeout", "kill@leader", False),
    "quorum-consumer-timeout-khepri-minority": ("consumer-timeout", "partition-one@follower",
                                                True),
}
# Where each promise's scenarios cannot run (RabbitMQ's release lines), without and with the
# Khepri store asked for: priorities and consumer timeouts exist from 4.0 (4.0's two priority
# levels are served at a ratio: the run goes on, its section judges their rule; its consumer
# timeout is the queue's argument: harness.spec.TestSpec.consumer_timeout_as_run), delayed
# retry from 4.3.
NOT_ON = {("priorities", False): ["3.10"], ("priorities", True): ["3.10", "4.0"],
          ("delayed-retry", False): ["3.10", "4.0", "4.0 with --metadata-store khepri"],
          ("delayed-retry", True): ["3.10", "4.0", "4.0 with --metadata-store khepri"],
          ("consumer-timeout", False): ["3.10"],
          ("consumer-timeout", True): ["3.10", "4.0"]}
# The leader's kill (kill@leader) and each shape's fault on 4.3.
SHAPES = {"kill@leader", "partition-leader", "partition-one@follower"}


def test_each_promise_has_every_fault_shape_and_a_control() -> None:
    for promise, (first, control) in FAMILIES.items():
        faults = {SCENARIOS[first].spec.nemesis.faults} | {
            SCENARIOS[n].spec.nemesis.faults for n, (p, _, _) in ADDED.items() if p == promise}
        assert SCENARIOS[control].spec.nemesis.faults == ()
        shapes = {f for (f,) in faults} & SHAPES
        # quorum-consumer-timeout's own partition cuts a random node off (partition-one).
        assert shapes | ({"partition-leader"} if promise == "consumer-timeout" else set()) \
            == SHAPES, promise
    assert SCENARIOS["quorum-consumer-timeout"].spec.nemesis.faults == ("partition-one",)


@pytest.mark.parametrize("name", list(ADDED))
def test_each_shape_validates_on_4_3_and_plays_its_fault(name: str) -> None:
    promise, fault, khepri = ADDED[name]
    spec = SCENARIOS[name].spec
    assert spec.broker.rabbitmq == "4.3" and spec.refusal() is None
    spec.validate()
    assert spec.warnings() == []
    assert spec.nemesis.faults == (fault,) and spec.queue.type == "quorum"
    assert SCENARIOS[name].expect.anomaly is None and SCENARIOS[name].twin is None
    run = spec.resolved().nemesis
    if khepri:
        assert run.duration_s == KHEPRI_CUT_S and spec.needs_metadata_store == "khepri"
    elif fault == "partition-leader":  # the default cut: 2 x net_ticktime
        assert run.duration_s == 2 * spec.resolved().broker.net_ticktime == 20
    else:
        assert run.duration_s == 15
    assert spec.resolved().broker.store == "khepri"  # 4.3's only store, asked or not
    assert [line for line, _ in not_applicable(spec)] == NOT_ON[(promise, khepri)]


@pytest.mark.parametrize("name", list(ADDED))
def test_each_shape_keeps_its_promises_queue_and_workload(name: str) -> None:
    promise, _, khepri = ADDED[name]
    spec, base = SCENARIOS[name].spec, SCENARIOS[FAMILIES[promise][0]].spec
    args = queue_arguments(spec.queue)
    assert args == queue_arguments(base.queue)
    if promise == "delayed-retry":
        assert args == {"x-queue-type": "quorum", "x-delivery-limit": 5,
                        "x-delayed-retry-type": "all", "x-delayed-retry-min": 200,
                        "x-delayed-retry-max": 2000}
        assert (spec.workload.client.reject_share, spec.workload.client.nack_share) == (0.2, 0.1)
    else:  # priorities are always on in 4.3 (no x-max-priority); the timeout is the consumer's
        assert args == {"x-queue-type": "quorum"}
    if promise == "consumer-timeout":
        c = spec.workload.client
        assert (c.consumer_timeout_ms, c.hold_share, c.hold_s) == (5000, 0.05, 8.0)
        assert spec.workload.consumers == 3  # one on each node: one on the side cut off
    if promise == "priorities":
        w = spec.workload
        assert (w.consumers, w.client.prefetch, w.priorities) == (1, 1, "0:5,none:2,5:2,9:1")
    if khepri:  # the promise's workload, with KHEPRI's probe and patient publishers
        k, w = KHEPRI["workload"], spec.workload
        assert isinstance(k, WorkloadOptions)
        assert (w.metadata_probe_interval_s, w.metadata_probe_timeout_s) == (1.0, 35.0) == (
            k.metadata_probe_interval_s, k.metadata_probe_timeout_s)
        assert w.client.publish_timeout_s == 30.0 == k.client.publish_timeout_s
        kept = dataclasses.replace(
            w, metadata_probe_interval_s=base.workload.metadata_probe_interval_s,
            metadata_probe_timeout_s=base.workload.metadata_probe_timeout_s,
            client=dataclasses.replace(w.client,
                                       publish_timeout_s=base.workload.client.publish_timeout_s))
        assert kept == base.workload
        assert spec.time_limit_s >= base.time_limit_s
    else:  # the same run but for its faults
        assert dataclasses.replace(spec, name=base.name, description=base.description,
                                   nemesis=base.nemesis) == base


def downtime_s(spec: TestSpec) -> float:
    """Returns the seconds of the main phase the spec's schedule spends in faults (a fault
    still on at the time limit counts up to it)."""
    t, down = 0.0, 0.0
    for step in schedule(spec.resolved().nemesis, random.Random(0)):
        if t >= spec.time_limit_s:
            return down
        seconds = min(step.seconds, spec.time_limit_s - t)
        down += seconds if step.kind == "fault" else 0.0
        t += seconds
    return down


@pytest.mark.parametrize("name", [n for n, (p, _, _) in ADDED.items() if p == "priorities"])
def test_the_priority_shapes_leave_over_1000_deliveries_to_judge(name: str) -> None:
    # As the first scenario's test estimates it: half the asked consume rate over the main
    # phase, with the consumer idle through every fault (its node the one cut off).
    spec = SCENARIOS[name].spec
    w = spec.workload
    assert w.consume_rate is not None and w.backlog >= 1000
    assert w.consume_rate / 2 * (spec.time_limit_s - downtime_s(spec)) >= 1000
    assert "judged" in spec.description


def test_the_khepri_priority_shape_cuts_once() -> None:
    spec = SCENARIOS["quorum-priorities-khepri-minority"].spec
    assert downtime_s(spec) == KHEPRI_CUT_S
    assert downtime_s(SCENARIOS["quorum-priorities-leader-partition"].spec) == 40.0


def test_scenarios_lists_them_with_where_they_do_not_apply(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios"]) == 0
    blocks: dict[str, list[str]] = {}
    for line in capsys.readouterr().out.splitlines():
        if not line.startswith(" "):
            blocks[line.split()[0]] = [line]
        else:
            blocks[list(blocks)[-1]].append(line.strip())
    for name, (promise, _, khepri) in ADDED.items():
        head, predicts, *where = blocks[name]
        assert head.split(maxsplit=1)[1] == SCENARIOS[name].spec.description
        assert predicts == f"predicts valid: {SCENARIOS[name].expect_text}"
        # Where it cannot run, one line per reason: the store's first on a Khepri minority.
        said = [w.split(": ", 1)[0].removeprefix("not applicable on RabbitMQ ").split(", ")
                for w in where]
        assert [line for lines in said for line in lines] == NOT_ON[(promise, khepri)]


def test_the_makefile_runs_each() -> None:
    text = (ROOT / "Makefile").read_text().split("RUN_ARGS")[0]
    for name in ADDED:
        assert f" {name} " in text.replace("\\\n", " ").replace("\n", " ")
