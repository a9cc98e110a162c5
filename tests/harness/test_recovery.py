"""Which node recovery mends, and in what order (pure ranking, and the loop on a scripted broker)."""

from collections.abc import Callable

from clusters.base import Node
from clusters.rabbitmq import NodeStatus
from clusters.remote import LocalRemote
from harness.recovery import partition_peers, recover, restart_each, unhealthy_nodes
from history import HistoryWriter, read_history

NODES = [Node(f"n{i}", f"10.0.0.{10 + i}", LocalRemote()) for i in range(1, 6)]
ALL = frozenset(n.erlang_name for n in NODES)


def e(name: str) -> str:
    return f"rabbit@10.0.0.{10 + int(name[1:])}"


def status(name: str, *, running=True, sees=ALL, partitions=None) -> NodeStatus:
    parts = {e(a): [e(b) for b in bs] for a, bs in (partitions or {}).items()}
    return NodeStatus(e(name), running, frozenset(sees), parts)


def everyone_reports(partitions: dict[str, list[str]]) -> list[NodeStatus]:
    return [status(n.name, partitions=partitions) for n in NODES]


def names(nodes: list[Node]) -> list[str]:
    return [n.name for n in nodes]


def test_a_whole_cluster_has_nothing_to_mend():
    assert unhealthy_nodes([status(n.name) for n in NODES], NODES) == []


def test_nodes_reporting_a_partition_they_are_not_party_to_are_not_mended():
    # What a 5-node majorities ring left behind: every node reports n2 and n4 cut from each other.
    st = everyone_reports({"n2": ["n4"], "n4": ["n2"]})
    assert partition_peers(st) == {e("n2"): {e("n4")}, e("n4"): {e("n2")}}
    assert names(unhealthy_nodes(st, NODES)) == ["n2", "n4"]
    # Once n2 was mended and the record stays, n4 is next.
    assert names(unhealthy_nodes(st, NODES, {"n2": 1})) == ["n4", "n2"]


def test_the_node_cut_from_most_peers_comes_first():
    st = everyone_reports({"n1": ["n2", "n3", "n4", "n5"], "n2": ["n1"], "n3": ["n1"]})
    assert names(unhealthy_nodes(st, NODES))[0] == "n1"


def test_a_silent_node_comes_before_partitions_and_missing_peers():
    st = [status("n1", sees=ALL - {e("n3")}), status("n2", partitions={"n2": ["n5"]}),
          status("n3", running=False), status("n4"), status("n5")]
    assert names(unhealthy_nodes(st, NODES)) == ["n3", "n2", "n5", "n1"]


class ScriptedBroker:
    """A broker whose cluster heals when a given node is mended."""

    def __init__(self, broken: list[NodeStatus], heals_when: Callable[[list[str]], bool]):
        self.nodes = NODES
        self.broken = broken
        self.heals_when = heals_when
        self.mended: list[str] = []

    def statuses(self) -> list[NodeStatus]:
        if self.heals_when(self.mended):
            return [status(n.name) for n in NODES]
        return self.broken

    def resume(self, node: Node) -> None:
        pass

    def restart_app(self, node: Node) -> None:
        self.mended.append(node.name)

    def kill(self, node: Node) -> None:
        pass

    def start(self, node: Node) -> None:
        self.mended.append(node.name)


def test_recover_mends_the_parties_to_a_partition_and_records_it(tmp_path):
    broker = ScriptedBroker(everyone_reports({"n2": ["n4"], "n4": ["n2"]}),
                            heals_when=lambda m: {"n2", "n4"} <= set(m))
    h = HistoryWriter(tmp_path / "h.jsonl")
    rep = recover(broker, h, timeout=30, grace=0)  # type: ignore[arg-type]
    h.close()
    assert rep.healthy
    assert broker.mended == ["n2", "n4"]
    assert [a["action"] for a in rep.actions] == ["restart-app", "restart-app"]
    ops = read_history(tmp_path / "h.jsonl")
    assert [(o.f, o.value["node"]) for o in ops] == [("recover-node", "n2"), ("recover-node", "n4")]


def test_recover_escalates_to_kill_and_gives_up_at_its_deadline(tmp_path):
    broker = ScriptedBroker([status("n1", running=False)] + [status(n.name) for n in NODES[1:]],
                            heals_when=lambda m: False)
    h = HistoryWriter(tmp_path / "h.jsonl")
    rep = recover(broker, h, timeout=0.5, grace=0)  # type: ignore[arg-type]
    h.close()
    assert not rep.healthy
    assert [a["action"] for a in rep.actions][:2] == ["restart-app", "kill-restart"]
    assert {a["node"] for a in rep.actions} == {"n1"}
    assert rep.last_status[0]["running"] is False


def test_restart_each_restarts_every_app_in_turn_and_records_recover_queue(tmp_path):
    broker = ScriptedBroker([], heals_when=lambda m: True)
    h = HistoryWriter(tmp_path / "h.jsonl")
    rep = restart_each(broker, h, "queue not drained: timeout", timeout=10, grace=0)  # type: ignore[arg-type]
    h.close()
    assert rep.healthy and broker.mended == [n.name for n in NODES]
    ops = read_history(tmp_path / "h.jsonl")
    assert [o.f for o in ops] == ["recover-queue"] * len(NODES)
    assert ops[0].value["reason"] == "queue not drained: timeout"


def test_a_node_stuck_in_boot_is_killed_and_restarted_at_once(tmp_path):
    stuck = NodeStatus(e("n2"), False, error="Error: this command requires the 'rabbit' app to "
                       "be running on the target node. Start it with 'rabbitmqctl start_app'.")
    broker = ScriptedBroker([status("n1"), stuck, status("n3"), status("n4"), status("n5")],
                            heals_when=lambda m: "n2" in m)
    h = HistoryWriter(tmp_path / "h.jsonl")
    rep = recover(broker, h, timeout=30, grace=0)  # type: ignore[arg-type]
    h.close()
    assert rep.healthy
    assert [(a["node"], a["action"]) for a in rep.actions] == [("n2", "kill-restart")]


def test_only_nodes_down_while_the_rest_are_whole_without_them_are_all_that_is_wrong():
    from harness.recovery import whole_but
    without = ALL - {e("n1"), e("n2")}
    st = [status("n1", running=False), status("n2", running=False)] + [
        status(n, sees=without) for n in ("n3", "n4", "n5")]
    assert whole_but(st, NODES, NODES[:2])
    assert not whole_but(st, NODES, NODES[:1])  # n2 is down too
    assert not whole_but(st, NODES, [])
    st[4] = status("n5", sees=without - {e("n4")})
    assert not whole_but(st, NODES, NODES[:2])  # n5 does not see n4
    st[4] = status("n5", sees=without, partitions={"n5": ["n3"]})
    assert not whole_but(st, NODES, NODES[:2])  # n5 is cut from n3
    st[0] = status("n1")
    assert not whole_but(st, NODES, NODES[:2])  # n1 runs
