"""Bad input about the broker release (issue 20): an unknown version, a version the backend
cannot provide, the Khepri metadata store on 3.10, a mirrored queue on 4.0. Each exits 2 with a
clear message before anything starts, whether it comes from the options, a scenario file or a
matrix; the runner is never reached (tests/harness/test_spec_cli.py holds the option forms of
the first, third and fourth)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import clusters.registry
import harness.runner
from harness.cli import main

MIRRORED_REMOVED = "classic queue mirroring was removed in RabbitMQ 4.0"


@pytest.fixture
def nothing_starts(monkeypatch):
    """Fails the test if a run, or a cluster, is started at all."""
    monkeypatch.setattr(harness.runner, "run_test", lambda *a, **k: pytest.fail("run started"))
    monkeypatch.setattr(harness.runner, "make_cluster",
                        lambda *a, **k: pytest.fail("cluster made"))


def _scenario(tmp_path: Path, broker: str, queue: str = 'type = "quorum"') -> str:
    path = tmp_path / "s.toml"
    path.write_text(f'name = "bad"\ntime_limit_s = 30.0\n\n[broker]\n{broker}\n\n'
                    f"[queue]\n{queue}\n")
    return str(path)


@pytest.mark.parametrize("broker, queue, msg", [
    ('rabbitmq = "5.0"', 'type = "quorum"', "unknown RabbitMQ release '5.0'; known: 3.10, 4.0, 4.3"),
    ('rabbitmq = "3.10"\nmetadata_store = "khepri"', 'type = "quorum"',
     "RabbitMQ 3.10 has no khepri metadata store (it needs 4.0 or 4.3)"),
    ('rabbitmq = "4.3"\npartition_handling = "pause_minority"', 'type = "quorum"',
     "--partition-handling pause_minority: RabbitMQ 4.3 has no cluster_partition_handling"),
    ('rabbitmq = "4.3"\nmetadata_store = "mnesia"', 'type = "quorum"',
     "--metadata-store mnesia: RabbitMQ 4.3 has no Mnesia"),
    ('rabbitmq = "4.3"', 'type = "mirrored"', MIRRORED_REMOVED),
    ('rabbitmq = "4.3"', 'type = "classic"\ndurable = false',
     "RabbitMQ 4.3 refuses transient (non-durable) non-exclusive queues"),
    ('rabbitmq = "4.0"', 'type = "mirrored"', MIRRORED_REMOVED),
    ('rabbitmq = "4.0"\nmetadata_store = "etcd"', 'type = "quorum"',
     "unknown metadata store 'etcd'"),
])
def test_a_scenario_file_naming_a_release_it_cannot_have_exits_2(broker, queue, msg, tmp_path,
                                                                 capsys, nothing_starts):
    assert main(["run", "--scenario-file", _scenario(tmp_path, broker, queue)]) == 2
    assert msg in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["run", "--rabbitmq", "4.0"],
    ["run", "--rabbitmq", "4.0", "--metadata-store", "khepri"],
    ["matrix", "--scenarios", "partition", "--rabbitmq", "3.10,4.0"],
])
def test_a_release_the_backend_cannot_provide_exits_2(argv, capsys, monkeypatch, nothing_starts):
    local = clusters.registry.BACKENDS["local"]
    monkeypatch.setitem(clusters.registry.BACKENDS, "local",
                        dataclasses.replace(local, lines=("3.10",)))
    assert main(argv) == 2
    assert "the local backend provides RabbitMQ 3.10, not 4.0 (--rabbitmq)" in \
        capsys.readouterr().err


def test_a_matrix_of_mirrored_scenarios_on_4_0_alone_has_nothing_to_run(capsys, nothing_starts):
    assert main(["matrix", "--scenarios", "mirrored-partition,mirrored-pause-minority",
                 "--rabbitmq", "4.0"]) == 2
    err = capsys.readouterr().err
    assert "no scenario asked for can run on the release(s) asked for" in err
    assert "mirrored-partition on 4.0" in err and "mirrored-pause-minority on 4.0" in err


@pytest.mark.parametrize("argv, msg", [
    (["matrix", "--scenarios", "partition", "--rabbitmq", "3.10,5.0"],
     "unknown RabbitMQ release 5.0; known: 3.10, 4.0, 4.3"),
    (["run", "--rabbitmq", "4"], "unknown RabbitMQ release 4; known: 3.10, 4.0, 4.3"),
    (["run", "--rabbitmq", "4.0.5"], "unknown RabbitMQ release 4.0.5; known: 3.10, 4.0, 4.3"),
])
def test_an_unknown_release_in_any_command_exits_2_naming_the_known(argv, msg, capsys,
                                                                    nothing_starts):
    assert main(argv) == 2
    assert msg in capsys.readouterr().err


@pytest.mark.parametrize("argv, msg", [
    *[(["run", "--rabbitmq", "4.3", "--partition-handling", h],
       f"--partition-handling {h}: RabbitMQ 4.3 has no cluster_partition_handling")
      for h in ("ignore", "autoheal", "pause_minority")],
    (["run", "--rabbitmq", "4.3", "--metadata-store", "mnesia"],
     "--metadata-store mnesia: RabbitMQ 4.3 has no Mnesia; Khepri, its Raft metadata store, is "
     "the only one"),
    (["run", "--rabbitmq", "4.3", "--queue-type", "mirrored"], MIRRORED_REMOVED),
    (["run", "--rabbitmq", "4.3", "--queue-type", "classic", "--transient-queue"],
     "add --permit-transient-queues to set that permission"),
    (["run", "--rabbitmq", "4.0", "--queue-type", "classic", "--transient-queue",
      "--permit-transient-queues"],
     "--permit-transient-queues: RabbitMQ 4.0 takes transient non-exclusive queues without a "
     "permission"),
    (["run", "--rabbitmq", "4.4"], "unknown RabbitMQ release 4.4; known: 3.10, 4.0, 4.3"),
])
def test_what_4_3_lacks_is_refused_before_anything_starts(argv, msg, capsys, nothing_starts):
    assert main(argv) == 2
    assert msg in capsys.readouterr().err


def test_a_transient_queue_on_4_3_with_the_permission_sets_it_on_every_node():
    from clusters.rabbitmq import BrokerConfig, render_config
    from harness.spec import TestSpec
    from workloads.queue_spec import QueueSpec

    broker = BrokerConfig(rabbitmq="4.3", permit_transient_queues=True)
    spec = TestSpec(broker=broker, queue=QueueSpec(type="classic", durable=False))
    spec.validate()
    assert spec.resolved().to_dict()["broker"]["permit_transient_queues"] is True
    text = render_config(broker, "10.0.0.1")
    assert "deprecated_features.permit.transient_nonexcl_queues = true" in text
    assert "cluster_partition_handling" not in text
    assert "cluster_partition_handling = pause_minority" in render_config(BrokerConfig(),
                                                                          "10.0.0.1")
