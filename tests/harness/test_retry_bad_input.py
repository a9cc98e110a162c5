"""Bad input about delayed retry and consumer timeouts (issue 31): delayed retry on a line or a
queue kind without it, an unknown retry type, a min above the max, a consumer timeout below
1000 ms or on 3.10. Each is refused by TestSpec.validate naming the option, and the command
line exits 2 before anything starts."""

from __future__ import annotations

import dataclasses

import pytest

import harness.options
import harness.runner
from clusters.rabbitmq import render_advanced_config
from harness.cli import main
from harness.spec import CONSUMER_TIMEOUT_TICK_MS, SpecError, TestSpec
from workloads.clients import ClientOptions
from workloads.kinds import kind_of
from workloads.kinds.quorum import Quorum
from workloads.queue_spec import QueueSpec, queue_arguments
from workloads.queue_workload import WorkloadOptions


def spec(line: str, queue: dict[str, object] | None = None,
         client: dict[str, object] | None = None) -> TestSpec:
    broker = dataclasses.replace(TestSpec().broker, rabbitmq=line)
    return TestSpec(broker=broker, queue=QueueSpec(**queue or {}),  # type: ignore[arg-type]
                    workload=WorkloadOptions(client=ClientOptions(**client or {})))  # type: ignore[arg-type]


@pytest.mark.parametrize("line", ["3.10", "4.0"])
def test_delayed_retry_on_a_line_without_it_is_refused(line):
    why = spec(line, {"delayed_retry_type": "all"}).refusal()
    assert why is not None and why.startswith("--delayed-retry-type: delayed retry")
    assert "Choose --rabbitmq 4.3" in why
    assert spec("4.3", {"delayed_retry_type": "all"}).refusal() is None


def test_a_consumer_timeout_is_refused_on_3_10_and_taken_on_4_0_and_4_3():
    why = spec("3.10", client={"consumer_timeout_ms": 5000}).refusal()
    assert why is not None and why.startswith("--consumer-timeout-ms: RabbitMQ 3.10")
    assert "Choose --rabbitmq 4.0 or 4.3" in why
    for line in ("4.0", "4.3"):
        assert spec(line, client={"consumer_timeout_ms": 5000}).refusal() is None


def test_on_4_0_the_consumer_timeout_is_the_queues_argument_on_a_one_second_channel_tick():
    # 4.0.5's channel reads a consumer timeout from the queue's argument or policy only
    # (rabbit_channel:get_queue_consumer_timeout; seed 4001 of the five consumer-timeout shapes
    # sent only the consumer's argument and ended no consumer) and evaluates it on its tick
    # (channel_tick_interval, 60 s by default).
    on_4_0 = spec("4.0", client={"consumer_timeout_ms": 5000}).resolved()
    assert on_4_0.queue.consumer_timeout_ms == 5000
    assert kind_of(on_4_0.queue).arguments(on_4_0.queue)["x-consumer-timeout"] == 5000
    assert on_4_0.broker.channel_tick_interval_ms == CONSUMER_TIMEOUT_TICK_MS == 1000
    assert render_advanced_config("10.0.0.1", on_4_0.broker) == (
        "[{kernel, [{inet_dist_use_interface, {10,0,0,1}}]}, "
        "{rabbit, [{channel_tick_interval, 1000}]}].\n")
    assert {"setting": "channel_tick_interval_ms", "harness": 1000, "rabbitmq": 60_000} \
        .items() <= on_4_0.broker_differences()[-1].items()
    assert on_4_0.resolved() == on_4_0  # idempotent
    on_4_3 = spec("4.3", client={"consumer_timeout_ms": 5000}).resolved()
    assert on_4_3.queue.consumer_timeout_ms is None  # 4.3 takes the consumer's argument
    assert on_4_3.broker.channel_tick_interval_ms is None
    assert spec("4.0").resolved().queue.consumer_timeout_ms is None  # none asked


@pytest.mark.parametrize("queue, msg", [
    ({"type": "classic", "delayed_retry_type": "all"},
     "--delayed-retry-type applies to quorum queues, not classic"),
    ({"type": "stream", "delayed_retry_min_ms": 10},
     "--delayed-retry-min applies to quorum queues, not stream"),
    ({"delayed_retry_type": "sometimes"}, "unknown --delayed-retry-type 'sometimes'"),
    ({"delayed_retry_type": "all", "delayed_retry_min_ms": -1},
     "--delayed-retry-min must be >= 0 ms"),
    ({"delayed_retry_max_ms": 100}, "--delayed-retry-max needs --delayed-retry-type"),
    ({"delayed_retry_type": "all", "delayed_retry_min_ms": 500, "delayed_retry_max_ms": 100},
     "--delayed-retry-min \\(500 ms\\) must not exceed --delayed-retry-max \\(100 ms\\)"),
])
def test_impossible_delayed_retry_settings_are_refused(queue, msg):
    with pytest.raises(SpecError, match=msg):
        spec("4.3", queue).validate()


def test_a_quorum_queue_is_declared_with_the_delayed_retry_arguments():
    q = QueueSpec(delayed_retry_type="failed", delayed_retry_min_ms=200,
                  delayed_retry_max_ms=1000)
    args = queue_arguments(q)
    assert (args["x-delayed-retry-type"], args["x-delayed-retry-min"],
            args["x-delayed-retry-max"]) == ("failed", 200, 1000)
    assert "x-delayed-retry-type" not in queue_arguments(QueueSpec())
    assert Quorum.takes_delayed_retry


@pytest.fixture
def nothing_starts(monkeypatch):
    monkeypatch.setattr(harness.runner, "run_test", lambda *a, **k: pytest.fail("run started"))
    monkeypatch.setattr(harness.runner, "make_cluster",
                        lambda *a, **k: pytest.fail("cluster made"))


@pytest.mark.parametrize("argv, msg", [
    (["run", "--rabbitmq", "4.0", "--delayed-retry-type", "all"], "--delayed-retry-type"),
    (["run", "--rabbitmq", "3.10", "--consumer-timeout-ms", "5000"], "--consumer-timeout-ms"),
    (["run", "--rabbitmq", "4.3", "--consumer-timeout-ms", "500"],
     "--consumer-timeout-ms must be >= 1000 ms"),
    (["run", "--rabbitmq", "4.3", "--queue-type", "classic", "--delayed-retry-min", "5"],
     "--delayed-retry-min applies to quorum queues"),
])
def test_the_command_line_exits_2_naming_the_option(argv, msg, capsys, nothing_starts):
    assert main(argv) == 2
    assert msg in capsys.readouterr().err


def test_the_promise_scenarios_validate_and_are_refused_on_lines_without_the_feature():
    from harness.scenarios import SCENARIOS, not_applicable
    for name in ("quorum-delayed-retry", "quorum-delayed-retry-healthy"):
        spec = SCENARIOS[name].spec
        assert spec.broker.rabbitmq == "4.3" and spec.refusal() is None
        assert [line for line, _ in not_applicable(spec)] == [
            "3.10", "4.0", "4.0 with --metadata-store khepri"]
    for name in ("quorum-consumer-timeout", "quorum-consumer-timeout-healthy",
                 "quorum-consumer-timeout-sac", "quorum-consumer-timeout-sac-healthy",
                 "quorum-consumer-timeout-close", "quorum-consumer-timeout-close-healthy"):
        spec = SCENARIOS[name].spec
        assert spec.broker.rabbitmq == "4.3" and spec.refusal() is None
        assert [line for line, _ in not_applicable(spec)] == ["3.10"]  # 4.0: the queue's


# x-consumer-disconnected-timeout (4.3): how long a consumer cut off keeps its messages.
@pytest.mark.parametrize("line", ["3.10", "4.0"])
def test_a_disconnected_timeout_on_a_line_without_it_is_refused(line):
    why = spec(line, {"consumer_disconnected_timeout_ms": 0}).refusal()
    assert why is not None and why.startswith("--consumer-disconnected-timeout: ")
    assert "Choose --rabbitmq 4.3" in why
    assert spec("4.3", {"consumer_disconnected_timeout_ms": 0}).refusal() is None


@pytest.mark.parametrize("queue, msg", [
    ({"type": "classic", "consumer_disconnected_timeout_ms": 0},
     "--consumer-disconnected-timeout applies to quorum queues, not classic"),
    ({"consumer_disconnected_timeout_ms": -5}, "--consumer-disconnected-timeout must be >= 0 ms"),
])
def test_impossible_disconnected_timeouts_are_refused(queue, msg):
    with pytest.raises(SpecError, match=msg):
        spec("4.3", queue).validate()


def test_a_quorum_queue_is_declared_with_the_disconnected_timeout_zero_included():
    args = queue_arguments(QueueSpec(consumer_disconnected_timeout_ms=0))
    assert args["x-consumer-disconnected-timeout"] == 0
    assert "x-consumer-disconnected-timeout" not in queue_arguments(QueueSpec())
    # The harness's own dead-letter queue does not inherit it.
    from workloads.queue_spec import dead_letter_queue_spec
    dlq = dead_letter_queue_spec(QueueSpec(consumer_disconnected_timeout_ms=0))
    assert dlq.consumer_disconnected_timeout_ms is None


def test_the_returns_scenario_runs_on_4_3_only(capsys, nothing_starts):
    from harness.scenarios import SCENARIOS, not_applicable
    sc = SCENARIOS["quorum-leader-partition-returns"].spec
    assert sc.refusal() is None and sc.queue.consumer_disconnected_timeout_ms == 0
    assert [line for line, _ in not_applicable(sc)] == [
        "3.10", "4.0", "4.0 with --metadata-store khepri"]
    assert main(["run", "--rabbitmq", "4.0", "--consumer-disconnected-timeout", "0"]) == 2
    assert "--consumer-disconnected-timeout" in capsys.readouterr().err


@pytest.mark.parametrize("given, argument, reply", [
    (["--delayed-retry-type", "all"], "'x-delayed-retry-type': 'all'",
     "PRECONDITION_FAILED - invalid arg 'x-delayed-retry-type' for queue 'jepsen.queue' in "
     "vhost '/' of queue type rabbit_quorum_queue"),
    (["--max-priority", "10"], "'x-max-priority': 10",
     "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'jepsen.queue' in vhost '/' "
     "of queue type rabbit_quorum_queue"),
])
def test_a_declare_the_broker_refuses_ends_the_run_with_exit_2_torn_down(
        given, argument, reply, tmp_path, monkeypatch, capsys):
    """A quorum queue declared with an argument the broker refuses (an AMQP server on loopback,
    tests.fake_amqp, closing the channel with RabbitMQ's precondition_failed reply as its
    check_declare_arguments does): the workload's setup raises DeclareRefused, the run stops
    before its main phase, exits 2 with the queue, the arguments sent and the broker's reply
    word for word as its error (on stderr and in test.json, beside the queue's settings), and
    is torn down."""
    import contextlib
    import json

    from clusters.base import Node
    from tests.fake_amqp import FakeBroker
    from tests.fakes import ListRecorder
    from workloads.queue_workload import QueueWorkload

    broker = FakeBroker(version="4.3.6")
    broker.refuse_argument = (argument.split("'")[1], 406, reply)
    phases: list[str] = []

    def setup(self: harness.runner.Run) -> None:
        opts = WorkloadOptions(client=ClientOptions(port=broker.port, heartbeat_s=0))
        workload = QueueWorkload(self.spec.queue, opts,
                                 [Node("n1", "127.0.0.1", None)],  # type: ignore[arg-type]
                                 ListRecorder())
        with self.phase("setup"):
            workload.setup(None)  # type: ignore[arg-type]  # a quorum queue sets no policy

    monkeypatch.setattr(harness.runner.Run, "setup", setup)
    for name in ("main", "heal", "recover", "drain", "teardown"):
        monkeypatch.setattr(harness.runner.Run, name,
                            lambda self, name=name: phases.append(name))
    monkeypatch.setattr(harness.runner, "run_lock", contextlib.nullcontext)
    try:
        code = main(["run", "--rabbitmq", "4.3", "--nemesis", "none", "--no-progress",
                     "--store", str(tmp_path), *given])
    finally:
        broker.close()
    said = (f"DeclareRefused: RabbitMQ 4.3.6 refused to declare queue jepsen.queue with "
            f"arguments {{'x-queue-type': 'quorum', {argument}, 'x-dead-letter-exchange': "
            f"'jepsen.queue.harness-dlx'}}: 406 {reply}")  # 4.3's default delivery limit: a DLX
    assert code == 2 and f"error: {said}\n" in capsys.readouterr().err
    assert phases == ["teardown"]  # nothing checked, all torn down
    (test_json,) = tmp_path.glob("*/*/test.json")
    recorded = json.loads(test_json.read_text())
    assert recorded["error"] == said and not (test_json.parent / "results.json").exists()
    flag, value = given
    option = next(o for o in harness.options.OPTIONS if o.flag == flag)
    assert recorded["spec"]["queue"][option.field.split(".")[1]] == (
        int(value) if value.isdigit() else value)
