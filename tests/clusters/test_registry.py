"""Tests of the backend registry: names, option checks at option time, the spec
record, and cleanup running every backend."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from clusters import registry
from clusters.backend import Backend, BackendConfigError, BackendOptions
from clusters.local.cluster import NetnsCluster
from clusters.registry import (
    BACKENDS,
    check_options,
    clean_leftovers,
    make_cluster,
)


def test_three_backends_are_registered_and_local_is_the_default():
    assert list(BACKENDS) == ["local", "ssh", "docker"]
    assert BackendOptions().kind == "local"
    with pytest.raises(BackendConfigError, match="unknown backend 'k8s'; known: local, ssh, docker"):
        check_options(BackendOptions(kind="k8s"), 3)


def test_options_are_plain_json_data_without_secrets():
    d = dataclasses.asdict(BackendOptions())
    assert json.loads(json.dumps(d)) == d
    assert set(d) == {"kind", "inventory", "accept_new_host_keys", "install_rabbitmq",
                      "docker_image", "docker_network", "docker_subnet", "unsynced_fs",
                      "writeback_expire_s", "settle_layers"}
    assert not any(w in k for k in d for w in ("password", "cookie", "secret"))


@pytest.mark.parametrize(("kind", "why"), [("ssh", "run on other hosts"),
                                           ("docker", "keep their data elsewhere")])
def test_only_the_local_backend_hosts_the_unsynced_layer(kind: str, why: str) -> None:
    assert BACKENDS["local"].unsynced_fs
    options = BackendOptions(kind=kind, unsynced_fs=True, inventory="/x.toml")
    with pytest.raises(BackendConfigError, match=f"the {kind} backend cannot put .*unsynced "
                                                 f"layer .*{why}; use --backend local"):
        check_options(options, 3)


@pytest.mark.parametrize("options,nodes,match", [
    (BackendOptions(kind="ssh"), 3, "needs --inventory"),
    (BackendOptions(kind="ssh", inventory="/no/such.toml"), 3, "no such file"),
    (BackendOptions(kind="local", inventory="/x.toml"), 3, "option of the ssh backend"),
    (BackendOptions(kind="docker", accept_new_host_keys=True), 3, "options of the ssh backend"),
    (BackendOptions(kind="docker", docker_subnet="10.0.0.0/29"), 3, "too small"),
    (BackendOptions(kind="docker", docker_subnet="nonsense"), 3, "invalid --docker-subnet"),
    (BackendOptions(kind="docker", docker_image=" "), 3, "must name an image"),
    (BackendOptions(kind="local"), 0, "at least 1 node"),
])
def test_bad_options_fail_before_anything_starts(options, nodes, match):
    with pytest.raises(BackendConfigError, match=match):
        check_options(options, nodes)


def test_an_inventory_with_too_few_hosts_is_refused(tmp_path):
    inv = tmp_path / "inv.toml"
    inv.write_text("[[host]]\naddress = '10.0.0.1'\n[[host]]\naddress = '10.0.0.2'\n")
    check_options(BackendOptions(kind="ssh", inventory=str(inv)), 2)
    with pytest.raises(BackendConfigError, match="3-node cluster needs 3 hosts"):
        check_options(BackendOptions(kind="ssh", inventory=str(inv)), 3)


def test_local_cluster_is_today_s_namespaces_with_data_in_the_state_dir(tmp_path):
    c = make_cluster(BackendOptions(), 3, "20260101T000000Z", tmp_path)
    assert isinstance(c, NetnsCluster) and c.kind == "local"
    assert [n.name for n in c.nodes] == ["n1", "n2", "n3"]
    assert c.data_root == str(tmp_path.resolve() / "cluster" / "20260101T000000Z")


def test_local_cluster_data_is_named_by_its_real_path_when_the_state_dir_is_a_link(tmp_path):
    # mountinfo names a mount by its real path: through a link the layer check found nothing
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    c = make_cluster(BackendOptions(unsynced_fs=True), 3, "20260101T000000Z", tmp_path / "link")
    want = str(tmp_path.resolve() / "real" / "cluster" / "20260101T000000Z")
    assert isinstance(c, NetnsCluster) and c.data_root == want
    assert c.layers is not None and all(p.startswith(want + "/")
                                        for p in c.layers.points.values())


def test_clean_leftovers_runs_every_backend_even_when_one_fails(monkeypatch, tmp_path):
    def boom(_state: Path) -> list[str]:
        raise RuntimeError("daemon exploded")

    fake = {
        "a": Backend(check=lambda o, n: None, make=None, cleanup=lambda s: ["a: x"]),  # type: ignore[arg-type]
        "b": Backend(check=lambda o, n: None, make=None, cleanup=boom),  # type: ignore[arg-type]
        "c": Backend(check=lambda o, n: None, make=None, cleanup=lambda s: [f"c: {s.name}"]),  # type: ignore[arg-type]
    }
    monkeypatch.setattr(registry, "BACKENDS", fake)
    assert clean_leftovers(tmp_path) == ["a: x", "b: cleanup failed: daemon exploded",
                                         f"c: {tmp_path.name}"]
