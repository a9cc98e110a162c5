"""Tests of the release table: what each RabbitMQ line offers, and how a root filesystem's
binaries are reached (chroot in a private mount namespace, the data folder at its own path)."""

from pathlib import Path

import pytest

from clusters.local.cluster import BACKEND as LOCAL
from clusters.local.cluster import NetnsCluster, make_plan
from clusters.rabbitmq import BrokerConfig, RabbitBroker, enabled_flags
from clusters.releases import (
    RELEASES,
    ChrootLauncher,
    HostLauncher,
    ReleaseError,
    chroot_argv,
    default_delivery_limit,
    known_line,
    line_of,
    release,
)


def test_every_line_says_what_it_offers():
    assert set(RELEASES) == {"3.10", "4.0", "4.3"}
    old, new = release("3.10"), release("4.0")
    assert old.rootfs is None and new.rootfs == "4.0"  # 3.10 is this host's package
    assert old.refuses_kind("mirrored") is None
    assert "classic queue mirroring was removed in RabbitMQ 4.0" in new.refuses_kind("mirrored")
    assert new.refuses_kind("quorum") is None and new.refuses_kind("stream") is None
    assert (old.delivery_limit, new.delivery_limit) == (None, 20)
    assert "slave_pids" in old.placement_columns and "slave_pids" not in new.placement_columns


def test_4_3_is_khepri_only_without_partition_handling_or_transient_queues():
    line = release("4.3")
    assert line.rootfs == "4.3" and line.metadata_stores == ("khepri",)
    assert line.default_metadata_store == "khepri" and release("4.0").default_metadata_store == \
        "mnesia"
    assert "classic queue mirroring was removed" in line.refuses_kind("mirrored")
    assert line.delivery_limit == 20 and line.ra_query_mfa and not release("4.0").ra_query_mfa
    # every partition handling is refused, none set is none run
    for handling in ("ignore", "autoheal", "pause_minority"):
        why = line.partition_handling_refusal(handling)
        assert why.startswith(f"--partition-handling {handling}: RabbitMQ 4.3 has no "
                              "cluster_partition_handling")
    assert line.partition_handling_refusal(None) is None
    assert line.partition_handling_of(None) is None and line.partition_handling_of("ignore") is None
    assert not line.partition_handling_applies("khepri")
    assert release("3.10").partition_handling_of(None) == "pause_minority"
    assert release("4.0").partition_handling_of("ignore") == "ignore"
    assert release("4.0").partition_handling_refusal("ignore") is None
    # Mnesia is gone
    assert line.metadata_store_refusal("mnesia") == (
        "--metadata-store mnesia: RabbitMQ 4.3 has no Mnesia; Khepri, its Raft metadata store, "
        "is the only one")
    # transient non-exclusive queues need the deprecated feature's permission on 4.3 only
    assert "--permit-transient-queues" in line.transient_queue_refusal(False)
    assert line.transient_queue_refusal(True) is None and line.permission_refusal() is None
    assert release("4.0").transient_queue_refusal(False) is None
    # no Mnesia partitions to ask about; the joiners start once the first node's VM answers
    assert line.partitions_call is None
    assert release("4.0").partitions_call == release("3.10").partitions_call == (
        "rabbit_node_monitor", "partitions")
    assert line.joiners_wait_for_first and line.joiners_start_when_first_answers
    assert not release("4.0").joiners_start_when_first_answers
    assert "takes transient non-exclusive queues without a permission" in \
        release("4.0").permission_refusal()
    assert "Erlang 29" in line.caveat and release("4.0").caveat is None


def test_an_unknown_line_or_store_is_refused_naming_what_is_known():
    with pytest.raises(ReleaseError, match="unknown RabbitMQ release '3.8'; known: 3.10, 4.0, 4.3"):
        release("3.8")
    with pytest.raises(ReleaseError, match=r"RabbitMQ 3.10 has no khepri metadata store \(it "
                       r"needs 4.0 or 4.3\)"):
        release("3.10").check_metadata_store("khepri")
    with pytest.raises(ReleaseError, match="unknown metadata store 'etcd'"):
        release("4.0").check_metadata_store("etcd")
    release("4.0").check_metadata_store("khepri")


def test_partition_handling_governs_mnesia_only():
    assert release("4.0").partition_handling_applies("mnesia")
    assert not release("4.0").partition_handling_applies("khepri")


@pytest.mark.parametrize("text,line", [
    ("4.0.5", "4.0"), ("3.10.8", "3.10"), ("RabbitMQ 4.0.5 on Erlang 27", "4.0"),
    ("3.10.25", "3.10"), (" 4.1.0-rc.1", "4.1"), ("4.0.5-6", "4.0"), ("3.10.8-1.1", "3.10"),
    ("", None), ("unknown", None), ("x", None),
])
def test_the_line_of_a_reported_version(text, line):
    # what a broker reports, and what dpkg-query says of Debian's package
    assert line_of(text) == line


@pytest.mark.parametrize("line,limit", [
    ("3.10", None), ("4.0", 20), ("4.1", 20), ("4.0.5", 20), ("3.13", None), ("3.8", None),
    ("10.2", 20), ("not a version", None),
])
def test_the_brokers_default_delivery_limit_by_the_nearest_line_at_or_below(line, limit):
    assert default_delivery_limit(line) == limit


@pytest.mark.parametrize("version,line", [
    ("3.10.8", "3.10"), ("3.13.7", "3.10"), ("4.0.5", "4.0"), ("4.1.0", "4.0"), ("4.3.6", "4.3"),
    ("4.4.0", "4.3"), ("3.8.9", None),
    ("", None), ("unknown", None),
])
def test_a_version_is_answered_by_the_nearest_known_line_at_or_below(version, line):
    assert known_line(version) == line


def test_the_checkers_log_pattern_table_has_one_entry_per_release_line():
    from checkers.broker_log import PATTERNS

    assert set(PATTERNS) == set(RELEASES)


def test_a_chrooted_command_mounts_proc_and_binds_the_data_folder_in_a_private_namespace():
    argv = chroot_argv("/r", ["/data/run1"], ["/usr/lib/rabbitmq/bin/rabbitmqctl", "status"])
    assert argv[:4] == ["unshare", "--mount", "--propagation", "private"]
    assert argv[4:6] == ["sh", "-c"]
    assert argv[7:] == ["sh", "/r", "1", "/data/run1", "/usr/lib/rabbitmq/bin/rabbitmqctl",
                        "status"]
    script = argv[6]
    assert 'mount -t proc proc "$root/proc"' in script
    assert 'mount --bind "$1" "$root$1"' in script and 'exec chroot "$root" "$@"' in script
    with pytest.raises(ReleaseError, match="absolute"):
        chroot_argv("r", [], ["x"])
    assert ChrootLauncher("/r", ("/d",)).wrap(["x"]) == chroot_argv("/r", ["/d"], ["x"])
    assert HostLauncher().wrap(["x", "y"]) == ["x", "y"]


def test_the_broker_runs_its_cli_through_the_launcher():
    cluster = NetnsCluster(make_plan(1), data_root="/d")
    broker = RabbitBroker(cluster.nodes, BrokerConfig(rabbitmq="4.0"), "/d",
                          launcher=ChrootLauncher("/r", ("/d",)))
    calls = []

    class Remote:
        def run(self, argv, **kw):
            calls.append(argv)
            from clusters.remote import CommandResult
            return CommandResult(tuple(argv), 0, "4.0.5\n", "")

    node = cluster.nodes[0].__class__(cluster.nodes[0].name, cluster.nodes[0].ip, Remote())
    assert broker.ctl(node, "version").strip() == "4.0.5"
    assert calls[0][:2] == ["unshare", "--mount"]
    assert calls[0][-4:] == ["/usr/lib/rabbitmq/bin/rabbitmqctl", "-n", "rabbit@10.213.0.11",
                             "version"]
    assert broker.release.line == "4.0"


def test_the_local_backend_provides_every_line():
    assert LOCAL.lines == ("3.10", "4.0", "4.3")


def test_enabled_feature_flags_from_the_cli_json():
    # Shape of `rabbitmqctl list_feature_flags --silent --formatter json name state` (4.0.5).
    text = ('[{"name":"khepri_db","state":"enabled"},{"name":"quorum_queue","state":"enabled"},'
            '{"name":"stream_filtering","state":"disabled"}]')
    assert enabled_flags(text) == ["khepri_db", "quorum_queue"]
    with pytest.raises(ValueError, match="unparseable feature flags"):
        enabled_flags("Error: nodedown")


def test_a_backend_refuses_a_line_it_cannot_provide_and_docker_picks_the_lines_image():
    from clusters.backend import Backend, BackendConfigError, BackendOptions
    from clusters.docker.cluster import DockerCluster, default_image
    from clusters.registry import BACKENDS, check_options

    BACKENDS["only310"] = Backend(check=lambda o, n: None, make=None, cleanup=lambda d: [],
                                  lines=("3.10",))
    try:
        with pytest.raises(BackendConfigError,
                           match=r"the only310 backend provides RabbitMQ 3.10, not 4.0"):
            check_options(BackendOptions(kind="only310"), 3, "4.0")
    finally:
        del BACKENDS["only310"]
    check_options(BackendOptions(kind="docker"), 3, "4.0")
    default = DockerCluster(BackendOptions(kind="docker"), 3, "r1")
    default.launcher(release("4.0"))
    assert default.image == default_image("4.0") == "rmqh/rabbitmq:4.0-local"
    named = DockerCluster(BackendOptions(kind="docker", docker_image="mine:1"), 3, "r1")
    named.launcher(release("4.0"))
    assert named.image == "mine:1"  # a named image is the user's choice; its version is checked


def test_the_local_backend_runs_a_rootfs_release_chrooted_with_its_data_bound(tmp_path,
                                                                            monkeypatch):
    import clusters.local.cluster as netns

    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    monkeypatch.setattr(netns, "ensure_rootfs", lambda version: root)
    monkeypatch.setattr(netns, "cleanup", lambda prefix: [])
    made = []
    monkeypatch.setattr(netns, "make_home", lambda tree, dest: made.append(tree) or [])
    data = tmp_path / "state" / "cluster" / "run1"
    cluster = NetnsCluster(make_plan(3), data_root=str(data))
    assert isinstance(cluster.launcher(release("3.10")), HostLauncher)
    launcher = cluster.launcher(release("4.0"))
    # The nodes' home is made from the tree's broker, in the data folder the chroot binds.
    assert launcher == ChrootLauncher(str(root), (str(data),), f"{data}/rabbitmq-home")
    assert made == [Path("/"), root]
    assert (root / "etc" / "hosts").read_text() == Path("/etc/hosts").read_text()
    # The launcher's script makes the mount point; destroy removes it once empty.
    mountpoint = root / str(data).lstrip("/")
    mountpoint.mkdir(parents=True)
    cluster.destroy()
    assert not mountpoint.exists()


def test_a_root_filesystem_that_cannot_be_built_is_a_backend_error(monkeypatch):
    import clusters.local.cluster as netns
    from clusters.backend import BackendError
    from clusters.rootfs import RootfsError

    def fail(version):
        raise RootfsError("building the RabbitMQ 4.0 root filesystem failed (exit 2): no mirror")

    monkeypatch.setattr(netns, "ensure_rootfs", fail)
    with pytest.raises(BackendError, match="no mirror"):
        NetnsCluster(make_plan(1), data_root="/d").launcher(release("4.0"))
