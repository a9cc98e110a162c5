"""RabbitMQ's own operations as faults (nemesis.faults.operations): the exact commands, through
the fake broker's CLI model and through a real RabbitBroker on recording Remotes (3.10 on the
host, 4.0 chrooted), the heal that undoes each, and the interpreter playing them."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from clusters.base import Node
from clusters.rabbitmq import BrokerConfig, RabbitBroker
from clusters.rabbitmq_ops import (
    add_member,
    delete_member,
    drain,
    parse_drained,
    parse_transfer,
    transfer_leadership,
)
from clusters.releases import ChrootLauncher
from clusters.remote import CommandResult, RemoteError
from history.faults import fault_windows
from nemesis.errors import FaultError, FaultUnsupported, NemesisConfigError
from nemesis.faults import fault_info, make_fault
from nemesis.healers import HEALERS
from nemesis.options import FaultEntry, NemesisOptions
from nemesis.protocol import FaultContext
from tests.fakes import FakeRemote as RecordingRemote
from tests.nemesis.fakes import FakeBroker, FakeCluster
from tests.nemesis.test_interpreter import Rig, shape, wait_until

BIN = "/usr/lib/rabbitmq/bin"


def setup(size: int = 3, **opts: object) -> tuple[FaultContext, FakeBroker]:
    cluster = FakeCluster(size)
    broker = FakeBroker(names=[n.name for n in cluster.nodes])
    options = replace(NemesisOptions(), **opts)  # type: ignore[arg-type]
    return FaultContext(cluster, broker, options, queue="q", admin=broker), broker


# -- the commands -----------------------------------------------------------------------------


def test_the_commands_are_argument_lists_with_hard_timeouts() -> None:
    assert drain().words() == ["rabbitmq-upgrade", "drain"] and drain().timeout_s == 120
    assert delete_member("jepsen.queue", "rabbit@10.0.0.2").words() == [
        "rabbitmq-queues", "delete_member", "--vhost", "/", "jepsen.queue", "rabbit@10.0.0.2"]
    assert add_member("q", "rabbit@10.0.0.2").args[0] == "add_member"
    expr = transfer_leadership('a"q', "rabbit@10.0.0.3").args[1]
    assert 'rabbit_misc:r(<<"/">>, queue, <<"a\\"q">>)' in expr
    assert "rabbit_quorum_queue:transfer_leadership(Q, 'rabbit@10.0.0.3')" in expr
    assert expr.startswith('io:format("~p~n", [case ') and expr.endswith("end]).")


def test_the_answers_are_parsed_or_refused() -> None:
    assert parse_transfer("{migrated,'rabbit@10.0.0.3'}\nok\n") == "rabbit@10.0.0.3"
    with pytest.raises(ValueError, match="not transferred: {not_migrated,already_leader}"):
        parse_transfer("{not_migrated,already_leader}\nok\n")
    assert parse_drained("true\nok\n") is True and parse_drained("false\nok") is False
    with pytest.raises(ValueError):
        parse_drained("")


# -- leader transfer ---------------------------------------------------------------------------


def test_leader_transfer_hands_leadership_to_another_member_and_stop_looks_where_it_is() -> None:
    ctx, broker = setup()
    fault = make_fault("leader-transfer")
    desc = fault.start(ctx, random.Random(3))
    assert desc["fault"] == "leader-transfer" and desc["nodes"] == ["n1"]
    assert desc["from"] == "n1" and desc["to"] in ("n2", "n3") and desc["leader"] == desc["to"]
    assert broker.tools() == [("n1", "rabbitmqctl", "eval")]
    assert f"'rabbit@10.0.0.{desc['to'][1:]}'" in broker.cli[0][3]
    assert fault.stop(ctx) == {"fault": "leader-transfer", "nodes": ["n1"],
                               "leader": desc["to"]}
    assert broker.tools() == [("n1", "rabbitmqctl", "eval")]  # stop changes nothing


def test_leader_transfer_without_another_member_or_refused_fails() -> None:
    ctx, broker = setup()
    broker.members = ["n1"]
    with pytest.raises(FaultError, match="no member besides its leader on n1"):
        make_fault("leader-transfer").start(ctx, random.Random(0))
    ctx, broker = setup()
    broker.ctl = lambda *a, **k: "{not_migrated,already_leader}\nok\n"  # type: ignore[method-assign]
    with pytest.raises(FaultError, match="already_leader"):
        make_fault("leader-transfer").start(ctx, random.Random(0))


# -- member removal ----------------------------------------------------------------------------


@pytest.mark.parametrize("targets, could_be", [("leader", {"n1"}), ("follower", {"n2", "n3"})])
def test_member_remove_deletes_the_targets_member_and_stop_adds_it_back(
        targets: str, could_be: set[str]) -> None:
    ctx, broker = setup(targets=targets)
    fault = make_fault("member-remove")
    desc = fault.start(ctx, random.Random(2))
    [removed] = desc["nodes"]
    assert removed in could_be and desc == {"fault": "member-remove", "nodes": [removed],
                                            "queue": "q"}
    erl = f"rabbit@10.0.0.{removed[1:]}"
    assert broker.cli == [(removed, "rabbitmq-queues", "delete_member", "--vhost", "/", "q", erl)]
    assert removed not in (broker.members or [])
    assert ctx.ledger.items("membership") == [("q", removed)]
    stop = fault.stop(ctx)
    assert stop["outcome"] == {removed: "added"}
    assert broker.cli[-1] == (removed, "rabbitmq-queues", "add_member", "--vhost", "/", "q", erl)
    assert sorted(broker.members or []) == ["n1", "n2", "n3"]
    assert ctx.ledger.items("membership") == []


def test_member_remove_of_the_last_member_is_refused_and_named() -> None:
    ctx, broker = setup(targets="all")
    with pytest.raises(FaultError, match=r"member-remove of q failed on n3: RemoteError"):
        make_fault("member-remove").start(ctx, random.Random(0))
    assert broker.members == ["n3"]


def test_a_member_stop_could_not_add_back_is_added_back_by_the_heal_of_any_entry() -> None:
    """The ledger is shared: the heal runs one member-remove's heal_all, whichever removed."""
    ctx, broker = setup(targets="n2")
    fault = make_fault("member-remove")
    fault.start(ctx, random.Random(0))
    broker.cli_fail[("n2", "add_member")] = RemoteError("timed out")
    with pytest.raises(FaultError, match="member-remove undo failed on n2"):
        fault.stop(ctx)
    del broker.cli_fail[("n2", "add_member")]
    other = replace(ctx, options=replace(ctx.options, targets="leader"))
    assert other.ledger is ctx.ledger
    assert make_fault("member-remove").heal_all(other) == {"n2": "member of q"}
    assert sorted(broker.members or []) == ["n1", "n2", "n3"]
    assert make_fault("member-remove").heal_all(other) == {}


# -- maintenance and alarms ----------------------------------------------------------------------


def test_maintenance_drains_the_targets_and_revives_them() -> None:
    ctx, broker = setup(targets="n1,n3")
    fault = make_fault("maintenance")
    assert fault.start(ctx, random.Random(0)) == {"fault": "maintenance", "nodes": ["n1", "n3"]}
    assert sorted(broker.cli) == [("n1", "rabbitmq-upgrade", "drain"),
                                  ("n3", "rabbitmq-upgrade", "drain")]
    assert broker.drained == {"n1", "n3"}
    stop = fault.stop(ctx)
    assert stop["outcome"] == {"n1": "revived", "n3": "revived"} and broker.drained == set()


def test_the_heal_revives_only_the_drained_nodes_that_run() -> None:
    ctx, broker = setup(targets="n2")
    make_fault("maintenance").start(ctx, random.Random(0))
    broker.state["n3"] = "killed"
    broker.cli.clear()
    assert make_fault("maintenance").heal_all(ctx) == {
        "n1": "not drained", "n2": "revived", "n3": "not running"}
    assert ("n2", "rabbitmq-upgrade", "revive") in broker.cli
    assert ("n1", "rabbitmq-upgrade", "revive") not in broker.cli
    assert broker.drained == set()


@pytest.mark.parametrize("name, resource, command", [
    ("memory-alarm", "memory", ("set_vm_memory_high_watermark", "0")),
    ("disk-alarm", "disk", ("set_disk_free_limit", "1000000000000000000")),
])
def test_an_alarm_is_set_on_the_targets_and_their_configured_limit_restored(
        name: str, resource: str, command: tuple[str, ...]) -> None:
    ctx, broker = setup(targets="n2")
    fault = make_fault(name)
    assert fault.start(ctx, random.Random(0)) == {"fault": name, "nodes": ["n2"],
                                                  "resource": resource}
    assert broker.cli == [("n2", "rabbitmqctl", *command)]
    assert broker.alarms == {("n2", resource)}
    said = "0.4" if resource == "memory" else "50000000"
    assert fault.stop(ctx)["outcome"] == {"n2": said}
    assert broker.tools()[-1] == ("n2", "rabbitmqctl", "eval")
    assert broker.alarms == set()


def test_the_heal_restores_every_running_nodes_limits() -> None:
    ctx, broker = setup(targets="all")
    make_fault("memory-alarm").start(ctx, random.Random(0))
    make_fault("disk-alarm").start(ctx, random.Random(0))
    broker.state["n1"] = "stopped"
    broker.alarms.discard(("n1", "memory"))
    broker.alarms.discard(("n1", "disk"))
    healed = make_fault("disk-alarm").heal_all(ctx)
    assert healed == {"n1": "not running",
                      "n2": "memory high watermark 0.4, disk free limit 50000000",
                      "n3": "memory high watermark 0.4, disk free limit 50000000"}
    assert broker.alarms == set()


def test_a_broker_without_the_cli_is_refused_before_the_test() -> None:
    class NoCli:
        def beam_pid(self, node: Node) -> int:
            return 1

    ctx, _ = setup()
    bare = replace(ctx, broker=NoCli())  # type: ignore[arg-type]
    for name in ("leader-transfer", "member-remove", "maintenance", "memory-alarm",
                 "disk-alarm"):
        fault = make_fault(name)
        with pytest.raises(FaultUnsupported, match=f"{name} asks RabbitMQ's CLI tools"):
            fault.preflight(bare)  # type: ignore[attr-defined]
        fault.preflight(ctx)  # type: ignore[attr-defined]
    with pytest.raises(FaultUnsupported, match="rabbitmq-upgrade drain: this broker runs no"):
        make_fault("maintenance").start(replace(bare, options=ctx.options), random.Random(0))


# -- through a real RabbitBroker: the exact argv, on the host and chrooted ---------------------


def rabbit_cluster(answer: dict[str, str]) -> tuple[FakeCluster, RabbitBroker]:
    """A RabbitBroker on recording Remotes whose CLI answers by its first argument."""
    def respond(argv: tuple[str, ...]) -> CommandResult | None:
        words = [a for a in argv if not a.startswith("/")]
        for key, out in answer.items():
            if key in words:
                return CommandResult(argv, 0, out, "")
        return None

    cluster = FakeCluster(3)
    cluster.nodes = [Node(n.name, n.ip, RecordingRemote(n.name, respond)) for n in cluster.nodes]
    broker = RabbitBroker(cluster.nodes, BrokerConfig(), "/data")
    return cluster, broker


def calls(cluster: FakeCluster) -> dict[str, list[tuple[str, ...]]]:
    return {n.name: n.remote.calls for n in cluster.nodes}  # type: ignore[attr-defined]


def test_through_rabbit_broker_each_operation_is_its_tool_against_the_node() -> None:
    cluster, broker = rabbit_cluster({"eval": "50000000\nok\n"})
    ctx = FaultContext(cluster, broker, replace(NemesisOptions(), targets="n2"), queue="q")
    for name in ("maintenance", "member-remove", "memory-alarm", "disk-alarm"):
        fault = make_fault(name)
        fault.preflight(ctx)  # type: ignore[attr-defined]
        fault.start(ctx, random.Random(0))
        fault.stop(ctx)
    n2 = f"{BIN}/rabbitmq-upgrade", "-n", "rabbit@10.0.0.2"
    assert calls(cluster)["n2"][:2] == [(*n2, "drain"), (*n2, "revive")]
    queues = f"{BIN}/rabbitmq-queues", "-n", "rabbit@10.0.0.2"
    assert calls(cluster)["n2"][2:4] == [
        (*queues, "delete_member", "--vhost", "/", "q", "rabbit@10.0.0.2"),
        (*queues, "add_member", "--vhost", "/", "q", "rabbit@10.0.0.2")]
    ctl = f"{BIN}/rabbitmqctl", "-n", "rabbit@10.0.0.2"
    rest = calls(cluster)["n2"][4:]
    assert [c[:4] for c in rest] == [(*ctl, "set_vm_memory_high_watermark"), (*ctl, "eval"),
                                     (*ctl, "set_disk_free_limit"), (*ctl, "eval")]
    assert "vm_memory_monitor:set_vm_memory_high_watermark(W)" in rest[1][4]
    assert "rabbit_disk_monitor:set_disk_free_limit(D)" in rest[3][4]
    assert calls(cluster)["n1"] == calls(cluster)["n3"] == []
    env = cluster.nodes[1].remote.envs[0]  # type: ignore[attr-defined]
    assert env["RABBITMQ_NODENAME"] == "rabbit@10.0.0.2"  # the node's own CLI environment


def test_on_a_chrooted_release_the_operation_runs_inside_its_root() -> None:
    cluster, broker = rabbit_cluster({})
    broker.use(ChrootLauncher("/srv/rootfs/4.0", ("/data",)))
    ctx = FaultContext(cluster, broker, replace(NemesisOptions(), targets="n1"))
    make_fault("maintenance").start(ctx, random.Random(0))
    [argv] = calls(cluster)["n1"]
    assert argv[:2] == ("unshare", "--mount") and "/srv/rootfs/4.0" in argv
    assert argv[-4:] == (f"{BIN}/rabbitmq-upgrade", "-n", "rabbit@10.0.0.1", "drain")


# -- options and the interpreter ---------------------------------------------------------------


def test_the_faults_are_entries_with_targets_where_they_take_them() -> None:
    assert FaultEntry.parse("member-remove@leader").targets == "leader"
    assert FaultEntry.parse("maintenance@n1+n3:duration=30").targets == "n1,n3"
    assert FaultEntry.parse("memory-alarm@follower").fault == "memory-alarm"
    with pytest.raises(NemesisConfigError, match="leader-transfer picks its own nodes"):
        FaultEntry.parse("leader-transfer@n1")
    options = NemesisOptions(faults=("leader-transfer", "member-remove@n2", "disk-alarm"))
    assert options.needs_queue() == ("leader-transfer", "member-remove@n2")
    with pytest.raises(NemesisConfigError, match="needs at least 2 nodes"):
        NemesisOptions(faults=("member-remove",)).validate(["n1"])
    assert {fault_info(n).heals for n in ("maintenance", "member-remove", "memory-alarm",
                                          "leader-transfer")} <= set(HEALERS)


@pytest.mark.parametrize("entry, start_f, stop_f, heal", [
    ("leader-transfer", "transfer-leader", "check-leader", "none"),
    ("member-remove@follower", "remove-member", "add-member", "membership"),
    ("maintenance@n2", "drain-node", "revive-node", "maintenance"),
    ("memory-alarm@n1", "start-alarm", "stop-alarm", "alarm"),
    ("disk-alarm@n3", "start-alarm", "stop-alarm", "alarm"),
])
def test_the_interpreter_plays_each_and_heals(tmp_path: Path, entry: str, start_f: str,
                                              stop_f: str, heal: str) -> None:
    rig = Rig(tmp_path, (entry,))
    rig.interpreter.setup()
    rig.interpreter.start()
    wait_until(lambda: len(rig.completions(stop_f)) >= 2)
    rig.interpreter.stop()
    assert rig.interpreter.join(5) and rig.interpreter.error is None
    healed = rig.interpreter.heal()
    ops = rig.ops()
    assert shape(ops[:4]) == [("invoke", start_f), ("info", start_f),
                              ("invoke", stop_f), ("info", stop_f)]
    assert all(op.error is None for op in ops)
    assert list(healed["healed"]) == [heal]
    windows = fault_windows(ops)
    assert windows and all(w.closed_by == stop_f for w in windows[:2])
    assert windows[0].fault == entry.split("@")[0]
    broker = rig.broker
    assert broker.drained == set() and broker.alarms == set()
    assert sorted(broker.members or ["n1", "n2", "n3"]) == ["n1", "n2", "n3"]


def test_a_heal_in_the_middle_of_a_drain_revives_the_node(tmp_path: Path) -> None:
    rig = Rig(tmp_path, ("maintenance@n2", "memory-alarm@n2"), duration_s=600,
              order="cycle")
    rig.interpreter.start()
    wait_until(lambda: len(rig.completions("drain-node")) == 1)
    assert rig.broker.drained == {"n2"}
    healed = rig.interpreter.heal()
    assert rig.interpreter.join(5)
    assert list(healed["healed"]) == ["maintenance", "alarm"]
    assert healed["healed"]["maintenance"] == dict.fromkeys(["n1", "n2", "n3"], "not drained")
    assert rig.broker.drained == set()
    # The heal's invocation, the drain stopped as its own pair, the heal's completion.
    assert [o.f for o in rig.ops()][-4:] == ["heal", "revive-node", "revive-node", "heal"]
