"""Unit tests of workloads.queue_spec and the workload options: validation, x-arguments,
mirroring policies, message ids."""

import pytest

from workloads.clients import message_id, parse_message_id
from workloads.queue_spec import (
    DeadLettering,
    QueueConfigError,
    QueueSpec,
    dead_letter_queue_spec,
    dead_lettering,
    ha_policy,
    queue_arguments,
    reads_whole_log,
)
from workloads.queue_workload import WorkloadConfigError, WorkloadOptions

NAMES = {"n1": "rabbit@10.0.0.1", "n2": "rabbit@10.0.0.2", "n3": "rabbit@10.0.0.3"}


def test_quorum_arguments():
    spec = QueueSpec(type="quorum", quorum_initial_group_size=3, delivery_limit=5,
                     single_active_consumer=True)
    assert queue_arguments(spec) == {
        "x-queue-type": "quorum", "x-quorum-initial-group-size": 3, "x-delivery-limit": 5,
        "x-single-active-consumer": True,
    }
    assert ha_policy(spec, NAMES) is None


def test_mirrored_policy_with_every_setting():
    spec = QueueSpec(type="mirrored", ha_mode="nodes", ha_params=["n1", "n3"],
                     ha_sync_mode="manual", ha_promote_on_shutdown="always",
                     ha_promote_on_failure="when-synced", queue_master_locator="min-masters")
    assert queue_arguments(spec) == {"x-queue-type": "classic"}
    assert ha_policy(spec, NAMES) == {
        "ha-mode": "nodes", "ha-params": ["rabbit@10.0.0.1", "rabbit@10.0.0.3"],
        "ha-sync-mode": "manual", "ha-promote-on-shutdown": "always",
        "ha-promote-on-failure": "when-synced", "queue-master-locator": "min-masters",
    }


def test_exactly_takes_a_count():
    assert ha_policy(QueueSpec(type="mirrored", ha_mode="exactly", ha_params=2), NAMES) == {
        "ha-mode": "exactly", "ha-params": 2, "ha-sync-mode": "manual"}


def test_a_mirrored_queue_nobody_configured_synchronises_as_rabbitmq_does_by_default():
    """RabbitMQ's ha-sync-mode default is manual: a new mirror starts empty. A run "with
    defaults" tests that, not a safer configuration few users have."""
    policy = ha_policy(QueueSpec(type="mirrored"), NAMES)
    assert policy["ha-sync-mode"] == "manual"
    assert ha_policy(QueueSpec(type="mirrored", ha_sync_mode="automatic"), NAMES)[
        "ha-sync-mode"] == "automatic"


@pytest.mark.parametrize("spec,msg", [
    (QueueSpec(type="lifo"), "unknown queue type"),  # type: ignore[arg-type]
    (QueueSpec(type="quorum", durable=False), "always durable"),
    (QueueSpec(quorum_initial_group_size=4), "initial group size"),
    (QueueSpec(type="mirrored", ha_mode="exactly"), "ha-params"),
    (QueueSpec(type="mirrored", ha_mode="nodes", ha_params=[]), "ha-params"),
    (QueueSpec(type="mirrored", ha_mode="all", ha_params=2), "no ha-params"),
    (QueueSpec(type="mirrored", ha_sync_mode="eventually"), "ha-sync-mode"),
    (QueueSpec(type="mirrored", ha_promote_on_failure="never"), "ha-promote-on-failure"),
    (QueueSpec(type="mirrored", queue_master_locator="closest"), "queue-master-locator"),
])
def test_impossible_queue_settings_are_refused(spec, msg):
    with pytest.raises(QueueConfigError, match=msg):
        spec.validate(node_count=3)


@pytest.mark.parametrize("opts,msg", [
    (WorkloadOptions(publishers=0), "publishers"),
    (WorkloadOptions(consumers=-1), "consumers"),
    (WorkloadOptions(rate=0), "rate"),
])
def test_impossible_workload_options_are_refused(opts, msg):
    with pytest.raises(WorkloadConfigError, match=msg):
        opts.validate()


def test_message_ids_roundtrip_and_foreign_ids_are_not_ours():
    assert parse_message_id(message_id(12, 345)) == (12, 345)
    for bad in ("", "x-1", "1-", "-1", "1-2-3", "abc"):
        assert parse_message_id(bad) is None


def test_stream_arguments_and_rules():
    spec = QueueSpec(type="stream", quorum_initial_group_size=3)
    assert queue_arguments(spec) == {"x-queue-type": "stream", "x-initial-cluster-size": 3}
    assert ha_policy(spec, NAMES) is None
    assert reads_whole_log(spec) and not reads_whole_log(QueueSpec())
    spec.validate(3)
    for bad, msg in [(QueueSpec(type="stream", durable=False), "always durable"),
                     (QueueSpec(type="stream", single_active_consumer=True), "single active"),
                     (QueueSpec(type="stream", delivery_limit=3),
                      "--delivery-limit applies to quorum queues, not stream"),
                     (QueueSpec(type="stream", dead_letter_exchange="x"), "do not dead-letter"),
                     (QueueSpec(type="stream", quorum_initial_group_size=4), "1..3")]:
        with pytest.raises(QueueConfigError, match=msg):
            bad.validate(3)


@pytest.mark.parametrize("spec,msg", [
    (QueueSpec(delivery_limit=0), "--delivery-limit must be > 0 deliveries, got 0"),
    (QueueSpec(delivery_limit=-1), "--delivery-limit must be > 0"),
    (QueueSpec(type="classic", delivery_limit=5),
     "--delivery-limit applies to quorum queues, not classic"),
    (QueueSpec(type="mirrored", delivery_limit=5),
     "--delivery-limit applies to quorum queues, not mirrored"),
    (QueueSpec(dead_letter_exchange=""), "--dead-letter-exchange must be 1-255"),
])
def test_a_delivery_limit_is_positive_and_for_quorum_queues_only(spec, msg):
    with pytest.raises(QueueConfigError, match=msg):
        spec.validate(node_count=3)
    QueueSpec(delivery_limit=1).validate(3)


def test_where_a_queue_dead_letters_and_under_which_limits():
    harness = ("q.harness-dlx", "q.harness-dlq")

    def plan(spec: QueueSpec, line: str | None = "3.10") -> DeadLettering | None:
        return dead_lettering(spec, line)

    assert plan(QueueSpec(name="q")) is None  # 3.10: no default limit, nothing dropped
    assert plan(QueueSpec(name="q", max_length=5, overflow="reject-publish")) is None  # nacks
    assert plan(QueueSpec(name="q", type="classic")) is None
    assert plan(QueueSpec(name="q", type="classic", max_length=5)) == DeadLettering(
        *harness, ("max length 5 (drop-head)",))
    assert plan(QueueSpec(name="q", delivery_limit=3, max_length=5, overflow="drop-head")) == \
        DeadLettering(*harness, ("max length 5 (drop-head)", "delivery limit 3"))
    assert plan(QueueSpec(name="q"), "4.0") == DeadLettering(
        *harness, ("delivery limit 20 (RabbitMQ 4.0's default)",))
    assert plan(QueueSpec(name="q", delivery_limit=50), "4.0") == DeadLettering(
        *harness, ("delivery limit 50",))
    assert plan(QueueSpec(name="q", type="classic"), "4.0") is None  # no delivery limit there
    assert plan(QueueSpec(name="q"), None) is None  # a version nobody announced: no default
    mine = plan(QueueSpec(name="q", dead_letter_exchange="mine"))
    assert mine == DeadLettering("mine", None, ())
    assert mine.observation("q")["by"] == "user"
    declared = queue_arguments(QueueSpec(name="q", max_length=5), plan(QueueSpec(name="q",
                                                                              max_length=5)))
    assert declared["x-dead-letter-exchange"] == "q.harness-dlx"


def test_the_dead_letter_queue_is_the_queues_kind_without_its_limits():
    spec = QueueSpec(name="q", type="mirrored", ha_mode="exactly", ha_params=2, max_length=9,
                     single_active_consumer=True, durable=False)
    dlq = dead_letter_queue_spec(spec)
    assert (dlq.name, dlq.type, dlq.durable, dlq.max_length, dlq.overflow) == (
        "q.harness-dlq", "mirrored", True, None, None)
    assert not dlq.single_active_consumer
    assert ha_policy(dlq, NAMES) == ha_policy(spec, NAMES)
    assert queue_arguments(dead_letter_queue_spec(QueueSpec(name="q", delivery_limit=4))) == {
        "x-queue-type": "quorum"}
