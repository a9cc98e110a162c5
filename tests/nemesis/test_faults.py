"""Tests for the faults (nemesis.faults.network, nemesis.faults.process) against fakes."""

from __future__ import annotations

import json
import random
import threading
from dataclasses import replace

import pytest

from clusters.remote import CommandTimeout
from nemesis.errors import FaultError, FaultUnsupported
from nemesis.faults import make_fault
from nemesis.options import NemesisOptions
from nemesis.protocol import FaultContext, on_nodes, raise_for_errors
from tests.nemesis.fakes import FakeBroker, FakeCluster

W = ("iptables", "-w", "5")


def setup(
    size: int = 3, *, netem: bool = True, **opts: object
) -> tuple[FaultContext, FakeCluster, FakeBroker]:
    cluster = FakeCluster(size, netem=netem)
    broker = FakeBroker(names=[n.name for n in cluster.nodes])
    options = replace(NemesisOptions(), **opts)  # type: ignore[arg-type]
    return FaultContext(cluster, broker, options, queue="q", admin=broker), cluster, broker


def dropped(cluster: FakeCluster) -> dict[str, set[str]]:
    return {n.name: cluster.remote(n.name).dropped_ips() for n in cluster.nodes}


# -- partitions -------------------------------------------------------------------------


def test_partition_halves_cuts_and_heals() -> None:
    ctx, cluster, _ = setup()
    fault = make_fault("partition-halves")
    desc = fault.start(ctx, random.Random(1))
    assert desc == {
        "fault": "partition-halves",
        "nodes": ["n1"],
        "components": [["n1"], ["n2", "n3"]],
        "grudge": {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]},
    }
    assert dropped(cluster) == {
        "n1": {"10.0.0.2", "10.0.0.3"},
        "n2": {"10.0.0.1"},
        "n3": {"10.0.0.1"},
    }
    assert cluster.remote("n2").rules()["RMQH-OUT"] == [("-d", "10.0.0.1", "-j", "DROP")]
    assert fault.stop(ctx) == {"fault": "partition-halves", "nodes": ["n1"]}
    assert cluster.all_clean()


def test_partition_one_uses_the_targets() -> None:
    ctx, cluster, _ = setup(targets="n2")
    desc = make_fault("partition-one").start(ctx, random.Random(0))
    assert desc["nodes"] == ["n2"]
    assert dropped(cluster)["n2"] == {"10.0.0.1", "10.0.0.3"}
    assert dropped(cluster)["n1"] == {"10.0.0.2"}


def test_partition_random_halves_same_seed_same_cut() -> None:
    grudges = []
    for _ in range(2):
        ctx, _, _ = setup(5)
        grudges.append(
            make_fault("partition-random-halves").start(ctx, random.Random(42))["grudge"]
        )
    assert grudges[0] == grudges[1]


def test_partition_majorities_ring_five_nodes() -> None:
    ctx, cluster, _ = setup(5)
    desc = make_fault("partition-majorities-ring").start(ctx, random.Random(3))
    assert desc["nodes"] == ["n1", "n2", "n3", "n4", "n5"]
    assert all(len(ips) == 2 for ips in dropped(cluster).values())


def test_partition_bridge() -> None:
    ctx, cluster, _ = setup(5)
    desc = make_fault("partition-bridge").start(ctx, random.Random(3))
    middle = desc["bridge"]
    assert middle not in desc["grudge"]
    assert dropped(cluster)[middle] == set()
    ip = cluster.node(middle).ip
    assert all(ip not in ips for ips in dropped(cluster).values())
    small, large = desc["components"]
    assert len(small) == 2 and len(large) == 2


def test_partition_leader_asks_the_broker_at_fault_time() -> None:
    ctx, cluster, broker = setup()
    broker.leader = "n3"
    fault = make_fault("partition-leader")
    desc = fault.start(ctx, random.Random(0))
    assert ("queue_leader", "q") in broker.calls
    assert desc["nodes"] == ["n3"] and desc["leader"] == "n3"
    assert dropped(cluster)["n3"] == {"10.0.0.1", "10.0.0.2"}


@pytest.mark.parametrize(("leader", "message"), [(None, "not known"), ("n9", "not a cluster node")])
def test_partition_leader_unknown_leader_fails(leader: str | None, message: str) -> None:
    ctx, cluster, broker = setup()
    broker.leader = leader
    with pytest.raises(FaultError, match=message):
        make_fault("partition-leader").start(ctx, random.Random(0))
    assert cluster.all_clean()


def test_partition_failing_on_one_node_names_it_and_still_cuts_the_others() -> None:
    ctx, cluster, _ = setup()
    cluster.remote("n2").fail[(*W, "-A")] = CommandTimeout("iptables timed out after 5s")
    fault = make_fault("partition-halves")
    with pytest.raises(FaultError, match=r"partition-halves failed on n2: CommandTimeout"):
        fault.start(ctx, random.Random(0))
    assert dropped(cluster)["n1"] == {"10.0.0.2", "10.0.0.3"}
    cluster.remote("n2").fail.clear()
    fault.stop(ctx)
    assert cluster.all_clean()


def test_partition_start_twice_replaces_rather_than_accumulates() -> None:
    ctx, cluster, _ = setup(5)
    fault = make_fault("partition-one")
    fault.start(ctx, random.Random(1))
    desc = fault.start(ctx, random.Random(2))
    loner = desc["nodes"][0]
    others = {n: ips for n, ips in dropped(cluster).items() if n != loner}
    assert all(ips == {cluster.node(loner).ip} for ips in others.values())


def test_every_command_has_the_configured_timeout() -> None:
    ctx, cluster, _ = setup(command_timeout_s=2.5)
    fault = make_fault("partition-random-halves")
    fault.start(ctx, random.Random(0))
    fault.stop(ctx)
    for n in cluster.nodes:
        assert set(cluster.remote(n.name).timeouts) == {2.5}


# -- packets ----------------------------------------------------------------------------


def test_packet_loss_for_peers() -> None:
    ctx, cluster, _ = setup(targets="n1", packet_loss=0.3)
    fault = make_fault("packet-loss")
    desc = fault.start(ctx, random.Random(0))
    assert desc == {"fault": "packet-loss", "nodes": ["n1"], "probability": 0.3, "scope": "peers"}
    stat = ("-m", "statistic", "--mode", "random", "--probability", "0.3", "-j", "DROP")
    assert cluster.remote("n1").rules() == {
        "RMQH-IN": [("-s", "10.0.0.2", *stat), ("-s", "10.0.0.3", *stat)],
        "RMQH-OUT": [("-d", "10.0.0.2", *stat), ("-d", "10.0.0.3", *stat)],
    }
    assert cluster.remote("n2").calls == []
    fault.stop(ctx)
    assert cluster.all_clean()


def test_packet_loss_for_all_traffic() -> None:
    ctx, cluster, _ = setup(targets="n2", packet_scope="all")
    make_fault("packet-loss").start(ctx, random.Random(0))
    rules = cluster.remote("n2").rules()
    assert rules["RMQH-IN"][0][:2] == ("-i", "eth0")
    assert rules["RMQH-OUT"][0][:2] == ("-o", "eth0")


def test_bandwidth() -> None:
    ctx, cluster, _ = setup(targets="all", bandwidth_kbit=512)
    fault = make_fault("bandwidth")
    desc = fault.start(ctx, random.Random(0))
    assert desc == {
        "fault": "bandwidth",
        "nodes": ["n1", "n2", "n3"],
        "rate_kbit": 512,
        "burst_bytes": 32768,
        "latency_ms": 400,
    }
    assert cluster.remote("n3").qdiscs["eth0"][:3] == ("tbf", "rate", "512kbit")
    fault.stop(ctx)
    assert cluster.all_clean()


def test_netem_delay_where_netem_exists() -> None:
    ctx, cluster, _ = setup(targets="n1", delay_ms=50, jitter_ms=0)
    fault = make_fault("netem-delay")
    assert fault.start(ctx, random.Random(0))["delay_ms"] == 50
    assert cluster.remote("n1").qdiscs == {"eth0": ("netem", "delay", "50ms")}
    fault.stop(ctx)
    assert cluster.all_clean()


@pytest.mark.parametrize("name", ["netem-delay", "netem-duplicate", "netem-reorder"])
def test_netem_without_netem_is_unsupported(name: str) -> None:
    ctx, _, _ = setup(netem=False, targets="n2")
    with pytest.raises(FaultUnsupported, match="netem is not available on node n2's kernel"):
        make_fault(name).start(ctx, random.Random(0))


def test_netem_preflight_names_the_nodes_without_it() -> None:
    ctx, _, _ = setup(netem=False)
    fault = make_fault("netem-delay")
    with pytest.raises(FaultUnsupported, match=r"'netem-delay' needs tc netem.*n1, n2, n3"):
        fault.preflight(ctx)  # type: ignore[attr-defined]
    ok, _, _ = setup(netem=True)
    fault.preflight(ok)  # type: ignore[attr-defined]


# -- processes --------------------------------------------------------------------------


def test_kill_and_start() -> None:
    ctx, _, broker = setup(targets="n2")
    fault = make_fault("kill")
    assert fault.info.start_f == "kill" and fault.info.stop_f == "start"
    assert fault.start(ctx, random.Random(0)) == {"fault": "kill", "nodes": ["n2"]}
    assert broker.state["n2"] == "killed"
    assert fault.stop(ctx) == {"fault": "kill", "nodes": ["n2"], "outcome": {"n2": "started"}}
    assert broker.all_running()


def test_kill_majority_then_start_all_of_them() -> None:
    ctx, _, broker = setup(5, targets="majority")
    fault = make_fault("kill")
    desc = fault.start(ctx, random.Random(0))
    assert len(desc["nodes"]) == 3
    assert sorted(broker.of("kill")) == desc["nodes"]
    fault.stop(ctx)
    assert sorted(broker.of("start")) == desc["nodes"]
    assert broker.all_running()


def test_kill_failing_on_one_node_then_stop_starts_only_what_is_down() -> None:
    ctx, _, broker = setup(targets="all")
    broker.fail[("kill", "n3")] = CommandTimeout("kill timed out")
    fault = make_fault("kill")
    with pytest.raises(FaultError, match="kill failed on n3: CommandTimeout"):
        fault.start(ctx, random.Random(0))
    broker.fail.clear()
    desc = fault.stop(ctx)
    # n3 was never killed: it must not be started a second time.
    assert desc["outcome"] == {"n1": "started", "n2": "started", "n3": "running"}
    assert broker.all_running()


def test_graceful_stop_and_start() -> None:
    ctx, _, broker = setup(targets="n1")
    fault = make_fault("stop")
    assert (fault.info.start_f, fault.info.stop_f) == ("stop", "start")
    fault.start(ctx, random.Random(0))
    assert broker.state["n1"] == "stopped"
    fault.stop(ctx)
    assert broker.all_running()


def test_pause_and_resume() -> None:
    ctx, _, broker = setup(targets="n3")
    fault = make_fault("pause")
    assert (fault.info.start_f, fault.info.stop_f) == ("pause", "resume")
    fault.start(ctx, random.Random(0))
    assert broker.state["n3"] == "paused"
    fault.stop(ctx)
    assert broker.of("resume") == ["n3"]
    assert broker.all_running()


def test_rolling_restart_restarts_each_node_in_turn() -> None:
    ctx, _, broker = setup()
    fault = make_fault("rolling-restart")
    desc = fault.start(ctx, random.Random(5))
    assert sorted(desc["nodes"]) == ["n1", "n2", "n3"]
    acts = [c for c in broker.calls if c[0] in ("stop", "start")]
    assert acts == [(m, n) for n in desc["nodes"] for m in ("stop", "start")]
    assert broker.all_running()
    assert fault.stop(ctx)["outcome"] == {"n1": "running", "n2": "running", "n3": "running"}


def test_rolling_restart_failure_names_the_node_and_stop_recovers_it() -> None:
    ctx, _, broker = setup()
    fault = make_fault("rolling-restart")
    order = fault.start(ctx, random.Random(5))["nodes"]
    broker.calls.clear()
    broker.fail[("start", order[1])] = CommandTimeout("boot timed out")
    with pytest.raises(FaultError, match=f"failed at {order[1]}"):
        fault.start(ctx, random.Random(5))
    broker.fail.clear()
    assert fault.stop(ctx)["outcome"][order[1]] == "started"
    assert broker.all_running()


def test_rolling_restart_stops_between_nodes_when_cancelled() -> None:
    ctx, _, broker = setup()
    ctx.cancel.set()
    desc = make_fault("rolling-restart").start(ctx, random.Random(0))
    assert desc["cancelled"] is True and desc["nodes"] == []
    assert broker.of("stop") == []


def test_full_restart_keeps_the_cluster_down_until_stop() -> None:
    ctx, _, broker = setup()
    fault = make_fault("full-restart")
    assert fault.info.start_f == "start-full-restart"
    desc = fault.start(ctx, random.Random(0))
    assert sorted(desc["nodes"]) == ["n1", "n2", "n3"]
    assert set(broker.state.values()) == {"stopped"}
    assert fault.stop(ctx)["outcome"] == {"n1": "started", "n2": "started", "n3": "started"}
    assert broker.all_running()


def test_full_restart_starts_the_nodes_concurrently() -> None:
    ctx, _, broker = setup()
    fault = make_fault("full-restart")
    fault.start(ctx, random.Random(0))
    # Each start blocks until all three have begun: sequential starts would deadlock.
    barrier = threading.Barrier(3, timeout=5)
    real_start = broker.start

    def start(node):  # type: ignore[no-untyped-def]
        barrier.wait()
        real_start(node)

    broker.start = start  # type: ignore[method-assign]
    fault.stop(ctx)
    assert broker.all_running()


# -- heal_all ---------------------------------------------------------------------------


def test_heal_all_per_kind_ends_everything() -> None:
    ctx, cluster, broker = setup(targets="all")
    for name in ("partition-halves", "bandwidth", "pause"):
        make_fault(name).start(ctx, random.Random(0))
    broker.state["n2"] = "killed"
    broker.state["n1"] = "running"
    assert make_fault("pause").heal_all(ctx) == {
        "n1": "resumed",
        "n2": "not running",
        "n3": "resumed",
    }
    assert make_fault("partition-one").heal_all(ctx) == dict.fromkeys(["n1", "n2", "n3"], "flushed")
    assert make_fault("netem-delay").heal_all(ctx) == dict.fromkeys(["n1", "n2", "n3"], "removed")
    assert make_fault("kill").heal_all(ctx) == {"n1": "running", "n2": "started", "n3": "running"}
    assert cluster.all_clean() and broker.all_running()


def test_heal_all_goes_on_past_a_failing_node() -> None:
    ctx, cluster, _ = setup()
    make_fault("partition-halves").start(ctx, random.Random(0))
    cluster.remote("n1").fail[("iptables",)] = CommandTimeout("timed out")
    outcome = make_fault("partition-halves").heal_all(ctx)
    assert outcome["n1"].startswith("error: CommandTimeout")
    assert outcome["n2"] == outcome["n3"] == "flushed"
    assert cluster.remote("n2").clean() and cluster.remote("n3").clean()


def test_heal_all_on_untouched_nodes_is_harmless() -> None:
    ctx, cluster, broker = setup()
    for name in ("partition-one", "bandwidth", "pause", "kill"):
        make_fault(name).heal_all(ctx)
        make_fault(name).heal_all(ctx)
    assert cluster.all_clean() and broker.all_running()
    assert broker.of("start") == []


# -- descriptions and helpers -----------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "partition-one",
        "partition-halves",
        "partition-random-halves",
        "partition-majorities-ring",
        "partition-bridge",
        "partition-leader",
        "kill",
        "stop",
        "pause",
        "rolling-restart",
        "full-restart",
        "packet-loss",
        "bandwidth",
        "netem-delay",
        "netem-duplicate",
        "netem-reorder",
    ],
)
def test_every_fault_round_trip_is_json_and_leaves_nothing(name: str) -> None:
    ctx, cluster, broker = setup(5, targets="minority")
    fault = make_fault(name)
    start = fault.start(ctx, random.Random(9))
    stop = fault.stop(ctx)
    for desc in (start, stop):
        assert desc["fault"] == name
        assert isinstance(desc["nodes"], list)
        json.dumps(desc)
    assert cluster.all_clean() and broker.all_running()


def test_on_nodes_collects_results_and_errors() -> None:
    cluster = FakeCluster(3)

    def act(node):  # type: ignore[no-untyped-def]
        if node.name == "n2":
            raise ValueError("boom")
        return node.name.upper()

    results, errors = on_nodes(cluster.nodes, act)
    assert results == {"n1": "N1", "n3": "N3"}
    assert list(errors) == ["n2"]
    with pytest.raises(FaultError, match="doing failed on n2: ValueError: boom"):
        raise_for_errors("doing", errors)
    raise_for_errors("doing", {})
