"""Unit tests of the queue admin: list_queues parsing, policies and queries through a fake
Remote."""

import json

import pytest

from clusters.base import Node
from clusters.rabbitmq import BrokerConfig, RabbitBroker
from clusters.rabbitmq_admin import (
    QueueDepth,
    RabbitAdmin,
    classic_depth_eval,
    exists_eval,
    parse_depth,
    parse_exists,
    parse_queue_placement,
    quorum_depth_eval,
)
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


def test_depth_evals_ask_the_record_then_the_queue_itself():
    """Never list_queues: it leaves out a queue whose process does not answer."""
    classic = classic_depth_eval("jepsen.queue")
    assert classic.startswith('case rabbit_amqqueue:lookup(rabbit_misc:r(<<"/">>, queue, '
                              '<<"jepsen.queue">>)) of {error, not_found} -> io:format("absent~n")')
    assert "rabbit_amqqueue:info(Q, [messages_ready, messages_unacknowledged])" in classic
    assert "list_queues" not in classic and classic.endswith(" end end.")
    quorum = quorum_depth_eval("q", 6000)
    assert quorum.count("ra:leader_query(amqqueue:get_pid(Q), fun rabbit_fifo:") == 2
    assert "6000" in quorum and 'no counts: ~0p' in quorum
    # Ra 3 (RabbitMQ 4.3): leader_query takes the query only as {M, F, A}, still with a timeout
    ra3 = quorum_depth_eval("q", 6000, mfa=True)
    assert "ra:leader_query(amqqueue:get_pid(Q), {rabbit_fifo, query_messages_ready, []}, " \
           "6000)" in ra3
    assert "{rabbit_fifo, query_messages_checked_out, []}, 6000)" in ra3 and "fun " not in ra3
    assert '<<"a\\"b">>' in exists_eval('a"b')


def test_a_depth_is_two_counts_or_absent_anything_else_is_loud():
    assert parse_depth("12 3\nok\n", "classic") == QueueDepth(True, "classic", 12, 3)
    assert parse_depth("absent\nok\n", "quorum") == QueueDepth(False)
    for text in ("no counts: {'EXIT',{noproc,x}}\nok", "", "'' ''"):
        with pytest.raises(ValueError, match="no classic queue depth"):
            parse_depth(text, "classic")
    assert parse_exists("present\nok") is True and parse_exists("absent\nok") is False
    with pytest.raises(ValueError):
        parse_exists("{badrpc,nodedown}")


def test_the_policy_in_effect_is_read_and_compared_with_the_one_set():
    from clusters.rabbitmq_admin import parse_effective_policy, policy_mismatch
    # As 3.10.8 prints them: list_queues names the policy, list_policies holds its definition.
    queues = json.dumps([{"name": "other", "policy": ""}, {"name": "q", "policy": "harness-ha"}])
    policies = json.dumps([{"vhost": "/", "name": "harness-ha", "pattern": "^q$",
                            "apply-to": "queues", "priority": 1,
                            "definition": {"ha-mode": "all", "ha-sync-mode": "manual"}}])
    applied = parse_effective_policy(queues, policies, "q")
    assert applied == {"policy": "harness-ha",
                       "definition": {"ha-mode": "all", "ha-sync-mode": "manual"}}
    as_text = json.dumps([{"name": "harness-ha",
                           "definition": json.dumps({"ha-mode": "all", "ha-sync-mode": "manual"})}])
    assert parse_effective_policy(queues, as_text, "q") == applied
    assert policy_mismatch({"ha-mode": "all", "ha-sync-mode": "manual"}, applied) == []
    assert policy_mismatch({"ha-mode": "all", "ha-sync-mode": "automatic"}, applied) == [
        "ha-sync-mode is 'manual', not 'automatic'"]
    unmirrored = parse_effective_policy(queues, policies, "other")
    assert unmirrored == {"policy": None, "definition": {}}
    assert policy_mismatch({"ha-mode": "all"}, unmirrored) == ["ha-mode is 'not set', not 'all'"]
    assert parse_effective_policy(queues, policies, "nope") is None
    assert policy_mismatch({"ha-mode": "all"}, None) == ["the queue is not listed"]
    with pytest.raises(ValueError, match="not listed"):
        parse_effective_policy(queues, "[]", "q")
