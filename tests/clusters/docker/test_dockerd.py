"""Tests of starting a Docker daemon for the backend: it leaves the host's firewall alone, and a
missing dockerd is a clear error."""

from __future__ import annotations

import shutil

import pytest

from clusters.backend import BackendError
from clusters.docker.dockerd import dockerd_argv, start_dockerd


def test_the_daemon_leaves_host_firewall_forwarding_and_default_bridge_alone():
    argv = dockerd_argv("/usr/sbin/dockerd")
    assert argv[0] == "/usr/sbin/dockerd"
    assert {"--iptables=false", "--ip-forward=false", "--bridge=none"} <= set(argv)


def test_a_missing_dockerd_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(BackendError, match="dockerd is not installed"):
        start_dockerd(tmp_path / "d.log")
