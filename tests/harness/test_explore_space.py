"""The explorer's search space (no cluster): every candidate Hypothesis draws anywhere in the space
makes a valid spec; the seeded draw gives the same candidates for the same seed; durations are
drawn as multiples of net_ticktime, some below detection on purpose; what a kind or cluster
cannot play is left out; a candidate's scenario file plays the same schedule."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusters.rabbitmq import BrokerConfig
from harness.explore_space import (
    BANDS,
    GAPS,
    MIN_LEAD_S,
    Pick,
    Real,
    Space,
    Whole,
    build,
    candidate_rng,
    candidates,
    draw_candidate,
)
from harness.scenario_file import dumps_scenario, loads_scenario
from harness.spec import SpecError, TestSpec
from workloads.kinds import KINDS
from workloads.queue_spec import QueueSpec

ALL_KINDS = Space(queue_types=tuple(KINDS),
                  partition_handlings=("ignore", "autoheal", "pause_minority"))


def check_candidate(c, base):
    c.spec.validate()  # raises SpecError when the candidate cannot run
    assert c.spec.nemesis.order == "once"
    tick = base.broker.net_ticktime
    end = 0.0
    for item, (start, entry, duration) in zip(c.items, c.spec.nemesis.schedule, strict=True):
        assert (item.start_s, item.entry, item.duration_s) == (start, entry, duration)
        assert start >= end  # one fault at a time
        low, high = BANDS[item.band]
        assert low * tick - 0.06 <= duration <= max(1.0, high * tick) + 0.06
        if item.gap != "lead":
            g_low, g_high = GAPS[item.gap]
            assert g_low * tick - 0.06 <= start - end <= g_high * tick + 0.06
        else:
            assert start >= MIN_LEAD_S
        end = start + duration
    assert c.spec.time_limit_s >= end + 10.0


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_every_candidate_anywhere_in_the_space_is_a_valid_spec(data):
    base = data.draw(st.sampled_from([
        TestSpec(),
        TestSpec(nodes=5, broker=BrokerConfig(net_ticktime=30)),
        TestSpec(broker=BrokerConfig(rabbitmq="4.0")),
        TestSpec(nodes=2)]))
    c = data.draw(candidates(base, ALL_KINDS))
    check_candidate(c, base)


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_a_classic_queue_is_never_aimed_at_by_replica_targets(data):
    c = data.draw(candidates(TestSpec(), Space(queue_types=("classic",))))
    assert not any(i.target in ("follower", "followers") for i in c.items)
    # and a varied kind counts too: candidates must suit the kinds --vary puts them on
    c = data.draw(candidates(TestSpec(), Space(also_kinds=("classic", "stream"))))
    assert not any(i.target in ("follower", "followers") for i in c.items)
    assert c.spec.workload.client.prefetch >= 1


def test_the_same_seed_draws_the_same_candidates_and_another_seed_others():
    def draws(seed):
        return [draw_candidate(TestSpec(), ALL_KINDS, candidate_rng(seed, i, j))
                for i in range(5) for j in range(3)]
    first, again, other = draws(11), draws(11), draws(12)
    assert first == again
    assert [c.spec for c in first] != [c.spec for c in other]
    assert len({c.spec.nemesis.schedule for c in first}) > 10


def test_durations_are_multiples_of_net_ticktime_some_below_detection_on_purpose():
    for tick in (10, 30):
        base = TestSpec(broker=BrokerConfig(net_ticktime=tick))
        items = [i for n in range(60)
                 for i in draw_candidate(base, Space(), candidate_rng(3, n)).items]
        assert {i.band for i in items} == set(BANDS)
        assert {i.gap for i in items} == {"lead", *GAPS}
        below = [i.duration_s for i in items if i.band == "below"]
        assert below and max(below) < 0.75 * tick  # heals before RabbitMQ can notice it
        assert min(i.duration_s for i in items if i.band == "long") >= 3 * tick


def test_the_space_leaves_out_what_the_cluster_or_release_cannot_play():
    fitted = Space(queue_types=("mirrored", "quorum")).fitted(
        TestSpec(nodes=2, broker=BrokerConfig(rabbitmq="4.0")))
    assert fitted.queue_types == ("quorum",)  # mirroring was removed in 4.0
    assert "partition-bridge" not in fitted.faults  # needs 3 nodes
    assert fitted.partition_handlings == ("pause_minority",)  # the base's own
    with pytest.raises(SpecError, match="empty"):
        Space(queue_types=("mirrored",)).fitted(TestSpec(broker=BrokerConfig(rabbitmq="4.0")))
    with pytest.raises(SpecError, match="unknown fault"):
        Space(faults=("kill", "unplug")).fitted(TestSpec())
    with pytest.raises(SpecError, match="not in the cluster"):
        Space(targets=("leader", "n7")).fitted(TestSpec())


def test_on_4_3_the_space_draws_no_partition_handling_and_refuses_one_asked_for():
    base = TestSpec(broker=BrokerConfig(rabbitmq="4.3"))
    fitted = Space(queue_types=("mirrored", "quorum", "stream")).fitted(base)
    assert fitted.queue_types == ("quorum", "stream") and fitted.partition_handlings == (None,)
    rng = random.Random(7)
    for _ in range(20):
        cand = build(lambda dim: dim.sample(rng), base, fitted)
        cand.spec.validate()  # nothing 4.3 lacks is drawn
        assert cand.spec.broker.partition_handling is None
    with pytest.raises(SpecError, match="--partition-handling ignore: RabbitMQ 4.3 has no "
                                        "cluster_partition_handling"):
        Space(partition_handlings=("ignore", "autoheal")).fitted(base)


def test_a_fixed_workload_keeps_the_base_shape():
    base = TestSpec()
    c = draw_candidate(base, Space(workload=False), candidate_rng(1, 0))
    assert c.spec.workload == base.workload


def test_a_candidate_s_scenario_file_plays_the_same_schedule():
    c = draw_candidate(TestSpec(), ALL_KINDS, candidate_rng(5, 2))
    back = loads_scenario(dumps_scenario(c.spec))
    assert back.nemesis.schedule == c.spec.nemesis.schedule
    assert (back.seed, back.time_limit_s, back.queue.type) == (
        c.spec.seed, c.spec.time_limit_s, c.spec.queue.type)
    assert dataclasses.asdict(back.workload) == dataclasses.asdict(c.spec.workload)


DIMS = (Pick((1, 2, 3)), Whole(0, 4), Real(0.3, 0.7))
DOMAINS = [{dim.sample(random.Random(i)) for i in range(500)} for dim in DIMS]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_dimension_draws_the_same_values_both_ways(data):
    for dim, domain in zip(DIMS, DOMAINS, strict=True):
        assert data.draw(dim.strategy()) in domain
    assert DOMAINS[2] == {round(0.3 + k * 0.05, 4) for k in range(9)}


OPERATIONS = ("leader-transfer", "member-remove", "maintenance", "memory-alarm", "disk-alarm")


def test_rabbitmq_s_own_operations_are_in_the_vocabulary_where_every_kind_can_take_them():
    quorum = Space().fitted(TestSpec())
    assert set(OPERATIONS) <= set(quorum.faults)
    # a leader transfer or a member removal acts on quorum queues alone: a space that may
    # draw (or --vary onto) another kind leaves them out, and keeps the other operations
    for space in (Space(queue_types=("quorum", "classic")), Space(also_kinds=("stream",))):
        fitted = space.fitted(TestSpec())
        assert not {"leader-transfer", "member-remove"} & set(fitted.faults)
        assert {"maintenance", "memory-alarm", "disk-alarm"} <= set(fitted.faults)
    with pytest.raises(SpecError, match="every queue kind can play"):
        Space(faults=("leader-transfer",)).fitted(TestSpec(queue=QueueSpec(type="classic")))


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_every_candidate_drawing_operations_is_a_valid_spec(data):
    base = data.draw(st.sampled_from([TestSpec(), TestSpec(nodes=2), TestSpec(nodes=5),
                                      TestSpec(broker=BrokerConfig(rabbitmq="4.0"))]))
    kinds = data.draw(st.sampled_from([(), ("quorum",), ("classic", "stream"),
                                       tuple(KINDS)]))
    c = data.draw(candidates(base, Space(faults=(*OPERATIONS, "kill"), queue_types=kinds)))
    check_candidate(c, base)


def test_explore_draws_operations_on_a_quorum_queue():
    drawn = {i.fault for n in range(40)
             for i in draw_candidate(TestSpec(), Space(), candidate_rng(5, n)).items}
    assert set(OPERATIONS) <= drawn


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_a_disk_corruption_is_drawn_only_at_a_minority_and_every_draw_validates(data):
    base = data.draw(st.sampled_from([TestSpec(), TestSpec(nodes=5), TestSpec(nodes=4)]))
    space = Space(faults=("disk-corrupt", "kill"), queue_types=("quorum", "stream"))
    c = data.draw(candidates(base, space))
    check_candidate(c, base)
    for item in c.items:
        if item.fault == "disk-corrupt":
            assert item.target in ("leader", "follower", "one") + (
                ("minority",) if base.nodes % 2 else ())
            assert ":corrupt_mode=" in item.entry


def test_a_disk_corruption_is_left_out_where_it_cannot_play():
    space = Space(faults=("disk-corrupt", "kill"))
    assert space.fitted(TestSpec(nodes=2)).faults == ("kill",)  # no node is a minority of 2
    docker = dataclasses.replace(TestSpec().backend, kind="docker")
    assert space.fitted(dataclasses.replace(TestSpec(), backend=docker)).faults == ("kill",)
    assert space.fitted(TestSpec()).faults == ("disk-corrupt", "kill")
    assert space.fitted(TestSpec()).minority_targets == ("leader", "follower", "minority", "one")


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_a_power_loss_is_drawn_at_any_target_and_its_run_puts_the_nodes_on_the_layer(data):
    space = Space(faults=("power-loss", "kill"),
                  targets=("one", "leader", "minority", "majority", "all"),
                  queue_types=("quorum", "classic", "stream"))
    c = data.draw(candidates(TestSpec(), space))
    check_candidate(c, TestSpec())
    ran = c.spec.resolved()
    ran.validate()
    # A run with a power loss mounts the unsynced layer (issue 32); one without it does not.
    assert ran.backend.unsynced_fs == any(item.fault == "power-loss" for item in c.items)


def test_a_power_loss_is_left_out_where_the_layer_cannot_be_mounted():
    space = Space(faults=("power-loss", "kill"))
    docker = dataclasses.replace(TestSpec().backend, kind="docker")
    assert space.fitted(dataclasses.replace(TestSpec(), backend=docker)).faults == ("kill",)
    assert space.fitted(TestSpec()).faults == ("power-loss", "kill")


STAYS_SPACE = Space(stays=("none", "publishers", "consumers", "both"))


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_every_candidate_drawing_the_client_mode_is_a_valid_spec(data):
    c = data.draw(candidates(TestSpec(), STAYS_SPACE))
    check_candidate(c, TestSpec())
    stay = c.spec.workload.stay
    assert dict(c.config)["workload.stay"] == stay
    if stay in ("consumers", "both"):  # a staying consumer is never paused in faults
        assert not c.spec.workload.pause_consumers_in_faults


def test_the_client_mode_is_drawn_recorded_in_the_scenario_file_and_left_alone_unasked():
    drawn = [draw_candidate(TestSpec(), Space(stays=("none", "both")), candidate_rng(9, n))
             for n in range(30)]
    assert {c.spec.workload.stay for c in drawn} == {"none", "both"}
    for c in drawn[:5]:
        assert loads_scenario(dumps_scenario(c.spec)).workload.stay == c.spec.workload.stay
    # Unasked, the base's mode and no draw: a seed draws the candidates it drew before.
    plain = [draw_candidate(TestSpec(), Space(), candidate_rng(9, n)) for n in range(10)]
    assert {c.spec.workload.stay for c in plain} == {"none"}
    assert all("workload.stay" not in dict(c.config) for c in plain)
    staying = TestSpec(workload=dataclasses.replace(TestSpec().workload, stay="both"))
    one = [draw_candidate(staying, Space(stays=("both",)), candidate_rng(9, n))
           for n in range(10)]
    assert [c.items for c in one] == [c.items for c in plain]
    assert {c.spec.workload.stay for c in one} == {"both"}


def test_the_space_draws_only_the_client_modes_the_test_can_take():
    crashing = TestSpec(workload=dataclasses.replace(
        TestSpec().workload, client=dataclasses.replace(TestSpec().workload.client,
                                                        crash_after=50)))
    assert STAYS_SPACE.fitted(crashing).stays == ("none", "publishers")
    with pytest.raises(SpecError, match="no client mode of consumers, both suits the test"):
        Space(stays=("consumers", "both")).fitted(crashing)
    impatient = TestSpec(workload=dataclasses.replace(TestSpec().workload,
                                                      confirm_deadline_s=10.0))
    assert STAYS_SPACE.fitted(impatient).stays == ("none", "consumers")
    with pytest.raises(SpecError, match="unknown client mode"):
        Space(stays=("forever",)).fitted(TestSpec())
