"""Tests of the host executor: exit codes, hard timeouts, environment."""

import time

import pytest

from clusters.remote import CommandTimeout, LocalRemote, RemoteError


def test_run_returns_output_and_checks_exit_code():
    r = LocalRemote()
    assert r.run(["echo", "hi"], timeout=5).stdout == "hi\n"
    assert r.run(["false"], timeout=5, check=False).returncode == 1
    with pytest.raises(RemoteError, match="exited 1"):
        r.run(["false"], timeout=5)


def test_run_kills_a_hanging_command_at_its_timeout():
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout):
        LocalRemote().run(["sleep", "30"], timeout=0.5)
    assert time.monotonic() - t0 < 5


def test_run_passes_env_and_stdin():
    r = LocalRemote()
    assert r.run(["sh", "-c", "echo $FOO"], timeout=5, env={"FOO": "bar"}).stdout == "bar\n"
    assert r.run(["cat"], timeout=5, stdin="x").stdout == "x"


def test_missing_binary_is_a_remote_error():
    with pytest.raises(RemoteError, match="cannot run"):
        LocalRemote().run(["/nonexistent/tool"], timeout=5)


def test_files_roundtrip(tmp_path):
    r = LocalRemote()
    p = str(tmp_path / "a" / "b.txt")
    r.write_file(p, "hello", mode=0o600)
    assert r.read_file(p) == "hello"
    assert r.read_file(str(tmp_path / "missing")) is None
