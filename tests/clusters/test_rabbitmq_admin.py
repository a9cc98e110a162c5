"""Unit tests of the queue admin: list_queues parsing, policies and queries through a fake
Remote."""

import json

from clusters.base import Node
from clusters.rabbitmq import BrokerConfig, RabbitBroker
from clusters.rabbitmq_admin import RabbitAdmin, parse_queue_placement
from clusters.remote import CommandResult
from tests.fakes import FakeRemote

# Captured from `rabbitmqctl list_queues --silent name type leader members pid slave_pids
# synchronised_slave_pids` on RabbitMQ 3.10.8.
LIST_QUEUES = (
    "q1\tquorum\trabbit@10.213.0.11\t[rabbit@10.213.0.11, rabbit@10.213.0.13, rabbit@10.213.0.12]"
    "\t<rabbit@10.213.0.11.1795323982.1315.0>\t\t\n"
    "q2\tclassic\t\t\t<rabbit@10.213.0.11.1795323982.1434.0>\t[<rabbit@10.213.0.13.1795323983.1635.0>,"
    " <rabbit@10.213.0.12.1795323983.1825.0>]\t[<rabbit@10.213.0.13.1795323983.1635.0>]\n"
)
IPS = {"10.213.0.11": "n1", "10.213.0.12": "n2", "10.213.0.13": "n3"}


def test_parse_queue_placement_quorum_and_mirrored():
    q1 = parse_queue_placement(LIST_QUEUES, "q1", IPS)
    assert q1 == {"type": "quorum", "leader": "n1", "members": ["n1", "n2", "n3"],
                  "mirrors": [], "synchronised_mirrors": []}
    q2 = parse_queue_placement(LIST_QUEUES, "q2", IPS)
    assert q2["leader"] == "n1" and q2["mirrors"] == ["n2", "n3"]
    assert q2["synchronised_mirrors"] == ["n3"]
    assert parse_queue_placement(LIST_QUEUES, "nope", IPS) == {}


def _admin(respond=None):
    nodes = [Node(f"n{i}", f"10.0.0.{i}", FakeRemote(f"n{i}", respond)) for i in (1, 2, 3)]
    return nodes, RabbitAdmin(RabbitBroker(nodes, BrokerConfig(), "/data"))


def test_set_policy_applies_to_that_queue_alone_through_the_first_node():
    nodes, admin = _admin()
    admin.set_policy("harness-ha", "jepsen.queue", {"ha-mode": "all"})
    assert nodes[0].remote.calls == [(
        "/usr/lib/rabbitmq/bin/rabbitmqctl", "-n", "rabbit@10.0.0.1", "set_policy",
        "--apply-to", "queues", "--priority", "1", "harness-ha", r"^jepsen\.queue$",
        json.dumps({"ha-mode": "all"}))]
    assert nodes[1].remote.calls == [] and nodes[2].remote.calls == []


def test_queue_placement_asks_each_node_in_turn_until_one_answers():
    def respond(argv):
        if "rabbit@10.0.0.1" in argv:
            return CommandResult(argv, 69, "", "nodedown")
        out = "q\tquorum\trabbit@10.0.0.2\t[rabbit@10.0.0.2, rabbit@10.0.0.3]\t\t\t\n"
        return CommandResult(argv, 0, out, "")
    nodes, admin = _admin(respond)
    assert admin.queue_leader("q") == "n2"
    assert admin.queue_placement("q")["members"] == ["n2", "n3"]
    assert nodes[2].remote.calls == []
