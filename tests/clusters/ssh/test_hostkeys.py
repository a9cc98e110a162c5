"""Tests of the host-key policies: an unknown key is refused naming host, key and file; accept-new
records the key; a missing known_hosts file is made for accept-new only."""

from __future__ import annotations

import paramiko
import pytest

from clusters.ssh.hostkeys import (
    AcceptNew,
    RejectUnknown,
    UnknownHostKey,
    fingerprint,
    known_hosts_line,
    policy_for,
)


@pytest.fixture(scope="module")
def key() -> paramiko.PKey:
    return paramiko.RSAKey.generate(1024)


def test_fingerprint_is_openssh_style(key):
    fp = fingerprint(key)
    assert fp.startswith("SHA256:") and not fp.endswith("=") and len(fp) == 7 + 43


def test_an_unknown_key_is_refused_naming_host_key_and_file(key):
    client = paramiko.SSHClient()
    with pytest.raises(UnknownHostKey) as e:
        RejectUnknown("/home/u/.ssh/known_hosts").missing_host_key(client, "[10.0.0.5]:2222", key)
    msg = str(e.value)
    assert "host key of [10.0.0.5]:2222 (ssh-rsa SHA256:" in msg
    assert "not in known_hosts (/home/u/.ssh/known_hosts)" in msg
    assert "--accept-new-host-keys" in msg
    assert isinstance(e.value, paramiko.SSHException)  # SshRemote wraps it as SshConnectError


def test_accept_new_records_the_key_for_the_next_run(key, tmp_path):
    kh = tmp_path / "ssh" / "known_hosts"
    policy = policy_for(kh, accept_new=True)
    assert isinstance(policy, AcceptNew) and kh.exists() and kh.read_text() == ""
    client = paramiko.SSHClient()
    policy.missing_host_key(client, "10.0.0.5", key)
    assert kh.read_text() == known_hosts_line("10.0.0.5", key)
    assert client.get_host_keys().lookup("10.0.0.5") is not None
    loaded = paramiko.HostKeys(str(kh))
    assert loaded.check("10.0.0.5", key)


def test_reject_is_the_default_and_makes_no_file(tmp_path):
    kh = tmp_path / "known_hosts"
    assert isinstance(policy_for(kh, accept_new=False), RejectUnknown)
    assert not kh.exists()
