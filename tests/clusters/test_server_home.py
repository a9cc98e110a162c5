"""Tests of the RabbitMQ home a local node runs from: rabbit's applications only, linked by the
paths the node sees, and the broker's scripts and CLI calls taking it as their home."""

import os
from pathlib import Path

import pytest

from clusters.base import Node
from clusters.local.cluster import NetnsCluster, make_plan
from clusters.rabbitmq import BrokerConfig, RabbitBroker
from clusters.releases import ChrootLauncher, HostLauncher, release
from clusters.remote import CommandResult
from clusters.server_home import (
    ServerHomeError,
    app_dependencies,
    closure,
    make_home,
    scripts_env,
    server_dir,
)

RABBIT_APP = """{application, rabbit, [
    {description, "RabbitMQ"}, {vsn, "4.0.5"},
    {modules, ['rabbit', 'rabbit_app']},
    {applications, [kernel,stdlib,rabbitmq_prelaunch,
                    ra,'rabbit_common']},
    {included_applications, [cuttlefish]},
    {mod, {rabbit, []}},
    {env, [{tcp_listeners, [5672]}]}]}.
"""
APPS = {  # application: its dependencies (kernel and stdlib are Erlang/OTP's)
    "rabbitmq_prelaunch": ["kernel", "rabbit_common"],
    "rabbit_common": ["kernel", "jsx"],
    "ra": ["kernel", "aten"],
    "aten": ["kernel"],
    "jsx": [],
    "cuttlefish": [],
    "rabbitmq_management": ["rabbit", "cowboy"],
    "cowboy": ["ranch"],
    "ranch": [],
}


def _tree(root: Path, version: str = "4.0.5") -> Path:
    """Makes a Debian-like broker installation under root; returns its server folder."""
    server = root / f"usr/lib/rabbitmq/lib/rabbitmq_server-{version}"
    for name, deps in {"rabbit": None, **APPS}.items():
        ebin = server / "plugins" / f"{name}-1.2.3" / "ebin"
        ebin.mkdir(parents=True)
        text = RABBIT_APP if deps is None else (
            f"{{application,{name},[{{vsn,\"1.2.3\"}},{{applications,[{','.join(deps)}]}}]}}.\n")
        (ebin / f"{name}.app").write_text(text)
    (server / "plugins" / "README").write_text("not an application\n")
    (server / "sbin").mkdir()
    for script in ("rabbitmq-server", "rabbitmqctl", "rabbitmq-env"):
        (server / "sbin" / script).write_text("#!/bin/sh\n")
    (server / "escript").mkdir()
    return server


def test_an_app_file_says_what_it_starts_and_includes_in_order():
    assert app_dependencies(RABBIT_APP) == (
        "kernel", "stdlib", "rabbitmq_prelaunch", "ra", "rabbit_common", "cuttlefish")
    assert app_dependencies("{application,jsx,[{applications,[]}]}.") == ()
    assert app_dependencies("{application,x,[{vsn,\"1\"}]}.") == ()


def test_the_closure_follows_dependencies_among_the_applications_it_knows():
    deps = {"rabbit": app_dependencies(RABBIT_APP), **APPS}
    assert closure(deps, ["rabbit"]) == {
        "rabbit", "rabbitmq_prelaunch", "rabbit_common", "jsx", "ra", "aten", "cuttlefish"}
    assert closure(deps, ["rabbit", "rabbitmq_management"]) >= {"cowboy", "ranch"}
    assert closure(deps, ["nothing"]) == set()


def test_the_home_links_rabbits_applications_and_the_scripts_by_their_paths_inside(tmp_path):
    root = tmp_path / "rootfs"
    _tree(root)
    home = tmp_path / "data" / "rabbitmq-home"
    folders = make_home(root, home)
    assert folders == ["aten-1.2.3", "cuttlefish-1.2.3", "jsx-1.2.3", "ra-1.2.3",
                       "rabbit-1.2.3", "rabbit_common-1.2.3", "rabbitmq_prelaunch-1.2.3"]
    inside = "/usr/lib/rabbitmq/lib/rabbitmq_server-4.0.5"  # where the chrooted node sees them
    assert sorted(os.listdir(home / "plugins")) == folders
    assert os.readlink(home / "plugins" / "ra-1.2.3") == f"{inside}/plugins/ra-1.2.3"
    assert sorted(os.listdir(home / "bin")) == ["rabbitmq-env", "rabbitmq-server", "rabbitmqctl"]
    assert os.readlink(home / "bin" / "rabbitmqctl") == f"{inside}/sbin/rabbitmqctl"
    assert os.readlink(home / "escript") == f"{inside}/escript"
    # Made again (a second launcher for the same data folder), it replaces the first.
    (home / "plugins" / "stale").mkdir()
    assert make_home(root, home, plugins=["rabbitmq_management"]) == sorted(
        [*folders, "cowboy-1.2.3", "rabbitmq_management-1.2.3", "ranch-1.2.3"])
    assert "stale" not in os.listdir(home / "plugins")
    assert scripts_env(str(home)) == {"RABBITMQ_SCRIPTS_DIR": f"{home}/bin"}


def test_a_tree_without_one_broker_or_without_rabbit_is_refused(tmp_path):
    with pytest.raises(ServerHomeError, match="expected one RabbitMQ server .* found 0"):
        make_home(tmp_path, tmp_path / "home")
    _tree(tmp_path / "two", "4.0.5")
    _tree(tmp_path / "two", "4.0.6")
    with pytest.raises(ServerHomeError, match="found 2"):
        server_dir(tmp_path / "two")
    server = _tree(tmp_path / "one")
    with pytest.raises(ServerHomeError, match="has no rabbitmq_shovel"):
        make_home(tmp_path / "one", tmp_path / "home", plugins=["rabbitmq_shovel"])
    (server / "plugins" / "rabbit-1.2.3" / "ebin" / "rabbit.app").unlink()
    with pytest.raises(ServerHomeError, match="has no rabbit$"):
        make_home(tmp_path / "one", tmp_path / "home")


def test_this_hosts_broker_gets_rabbits_twenty_applications_and_no_plugin(tmp_path):
    # Debian 12's rabbitmq-server 3.10.8, which `make setup` installs.
    folders = make_home(Path("/"), tmp_path / "home")
    names = {f.rsplit("-", 1)[0] for f in folders}
    assert {"rabbit", "rabbit_common", "rabbitmq_prelaunch", "ra", "osiris", "cuttlefish"} <= names
    assert not {n for n in names if n.startswith("rabbitmq_") and n != "rabbitmq_prelaunch"}
    assert len(folders) == 20
    everything = os.listdir(server_dir(Path("/")) / "plugins")
    assert len(everything) > 3 * len(folders)


def test_broker_commands_run_from_the_launchers_home():
    cluster = NetnsCluster(make_plan(1), data_root="/d")
    calls = []

    class Remote:
        def run(self, argv, **kw):
            calls.append((argv, kw["env"]))
            return CommandResult(tuple(argv), 0, "3.10.8\n", "")

    node = Node(cluster.nodes[0].name, cluster.nodes[0].ip, Remote())
    broker = RabbitBroker([node], BrokerConfig(), "/d", launcher=HostLauncher("/d/home"))
    broker.ctl(node, "version")
    argv, env = calls[-1]
    assert argv[0] == "/d/home/bin/rabbitmqctl" and env["RABBITMQ_SCRIPTS_DIR"] == "/d/home/bin"
    broker.use(ChrootLauncher("/r", ("/d",), "/d/home"))
    broker.ctl(node, "status", tool="rabbitmq-diagnostics")
    argv, env = calls[-1]
    assert argv[0] == "unshare" and argv[-4:] == [
        "/d/home/bin/rabbitmq-diagnostics", "-n", "rabbit@10.213.0.11", "status"]
    broker.use(HostLauncher())  # no home: the release's own scripts, their own home
    broker.ctl(node, "version")
    argv, env = calls[-1]
    assert argv[0] == "/usr/lib/rabbitmq/bin/rabbitmqctl" and "RABBITMQ_SCRIPTS_DIR" not in env


def test_the_local_backend_makes_the_home_in_the_runs_data_folder(tmp_path, monkeypatch):
    import clusters.local.cluster as netns

    made = []
    monkeypatch.setattr(netns, "make_home", lambda tree, dest: made.append((tree, dest)) or [])
    data = tmp_path / "run1"
    launcher = NetnsCluster(make_plan(3), data_root=str(data)).launcher(release("3.10"))
    assert launcher == HostLauncher(f"{data}/rabbitmq-home")
    assert made == [(Path("/"), data / "rabbitmq-home")]

    def broken(tree, dest):
        raise netns.ServerHomeError("/ has no rabbit")

    monkeypatch.setattr(netns, "make_home", broken)
    from clusters.backend import BackendError
    with pytest.raises(BackendError, match="has no rabbit"):
        NetnsCluster(make_plan(3), data_root=str(data)).launcher(release("3.10"))
