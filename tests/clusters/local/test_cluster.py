"""Unit tests of the local backend's pure parts: the plan and its command lists."""

import pytest

from clusters.local.cluster import make_plan, setup_commands


def test_plan_names_and_addresses():
    p = make_plan(5)
    assert p.names == ("n1", "n2", "n3", "n4", "n5")
    assert p.host_ip == "10.213.0.1"
    assert [p.ip(n) for n in p.names] == [f"10.213.0.{i}" for i in range(11, 16)]
    assert p.namespace("n3") == "rmqh-n3"
    assert all(len(p.veth_host(n)) <= 15 for n in p.names)


@pytest.mark.parametrize("n", [0, -1])
def test_plan_rejects_impossible_sizes(n):
    with pytest.raises(ValueError, match="at least 1 node"):
        make_plan(n)


def test_plan_rejects_small_subnet_and_bad_prefix():
    with pytest.raises(ValueError, match="too small"):
        make_plan(9, subnet="10.0.0.0/29")
    with pytest.raises(ValueError, match="prefix"):
        make_plan(3, prefix="way-too-long")


def test_setup_commands_build_bridge_then_each_namespace_without_a_default_route():
    cmds = setup_commands(make_plan(2))
    assert cmds[0] == ["ip", "link", "add", "rmqh-br", "type", "bridge"]
    assert ["ip", "netns", "add", "rmqh-n1"] in cmds
    assert ["ip", "netns", "exec", "rmqh-n2", "ip", "addr", "add", "10.213.0.12/24", "dev", "eth0"] in cmds
    assert ["ip", "link", "set", "rmqh-n2-h", "master", "rmqh-br"] in cmds
    # nothing routes out of the namespaces
    assert not any("route" in c for c in cmds)
    assert all(isinstance(x, str) for c in cmds for x in c)
