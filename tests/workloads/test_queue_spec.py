"""Unit tests of workloads.queue_spec and the workload options: validation, x-arguments,
mirroring policies, message ids."""

import pytest

from workloads.clients import message_id, parse_message_id
from workloads.queue_spec import (
    QueueConfigError,
    QueueSpec,
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
                     (QueueSpec(type="stream", delivery_limit=3), "delivery limit"),
                     (QueueSpec(type="stream", quorum_initial_group_size=4), "1..3")]:
        with pytest.raises(QueueConfigError, match=msg):
            bad.validate(3)
