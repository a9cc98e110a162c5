"""Tests of the SSH backend: command quoting and hosts files (pure), then a real sshd in a namespace."""

from __future__ import annotations

import os
import shlex
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.local.cluster import list_namespaces, namespace_pids
from clusters.remote import CommandTimeout, LocalRemote, RemoteError
from clusters.ssh.remote import (
    ACCEPT_NEW_FOR_TESTS,
    REMOTE_GRACE,
    SshConnectError,
    SshRemote,
    env_argv,
    remote_command,
    spawn_command,
)
from tests.clusters.ssh.sshd import PREFIX, SSHD, SshdHost, exclusive, keygen, sshd_in_namespace

TRICKY = [
    "two words", "it's", 'say "hi"', "$HOME", "${PATH}", "a;b", "x && y", "`id`", "$(id)",
    "back\\slash", "*", "~", "", " lead", "new\nline", "tab\there", "-n", "ünï", "!x", "#c",
]
TRICKY_ENV = {"V1": "a b; c", "V2": "it's \"$HOME\" `id`", "V3": "", "V4": "line1\nline2"}


def _printf_argv(args: list[str]) -> list[str]:
    # printf repeats its format for each argument: every arg NUL-terminated.
    return ["printf", "%s\\0", *args]


def _split_nul(out: str) -> list[str]:
    assert out.endswith("\0") or out == ""
    return out.split("\0")[:-1]


# ---------------------------------------------------------------- pure builders


def test_remote_command_runs_argv_under_remote_timeout_and_env():
    cmd = remote_command(["echo", "a b"], timeout=5, env={"K": "v w"})
    assert shlex.split(cmd) == ["timeout", "--signal=KILL", f"{5 + REMOTE_GRACE:.1f}",
                                "env", "K=v w", "echo", "a b"]
    assert shlex.split(remote_command(["true"], timeout=0.5)) == [
        "timeout", "--signal=KILL", f"{0.5 + REMOTE_GRACE:.1f}", "true"]


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_tricky_argv_and_env_reach_the_command_intact_through_a_login_shell(shell):
    # sshd hands the command string to the user's shell with -c: do the same here.
    argv = ["sh", "-c", 'printf "%s\\0" "$V1" "$V2" "$V3" "$V4" "$@"', "sh", *TRICKY]
    res = LocalRemote().run([shell, "-c", remote_command(argv, timeout=5, env=TRICKY_ENV)],
                            timeout=10)
    assert _split_nul(res.stdout) == [*TRICKY_ENV.values(), *TRICKY]


@pytest.mark.parametrize("env,msg", [
    ({"A-B": "x"}, "invalid environment variable name"),
    ({"1A": "x"}, "invalid environment variable name"),
    ({"A B": "x"}, "invalid environment variable name"),
    ({"A": "x\0y"}, "NUL"),
])
def test_env_rejects_names_a_shell_cannot_export(env, msg):
    with pytest.raises(ValueError, match=msg):
        env_argv(env)
    assert env_argv(None) == [] and env_argv({}) == []


@pytest.mark.parametrize("argv", [[], "echo hi", ["echo", "a\0b"]])
def test_argv_must_be_a_nonempty_list_of_clean_strings(argv):
    with pytest.raises(ValueError, match="argv"):
        remote_command(argv, timeout=5)
    with pytest.raises(ValueError, match="argv"):
        spawn_command(argv, log_path="/tmp/x.log")


def test_timeout_must_be_positive():
    with pytest.raises(ValueError, match="timeout"):
        remote_command(["true"], timeout=0)


def _wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def _becomes_sleep_60(pid: int) -> bool:
    # setsid, nohup and env exec in turn under the same pid: wait for the last exec.
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        if Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x0060\x00":
            return True
        time.sleep(0.01)
    return False


def test_spawn_command_detaches_and_prints_the_pid_of_argv_itself(tmp_path):
    log_path = tmp_path / "sub" / "out.log"
    cmd = spawn_command(["sleep", "60"], log_path=str(log_path))
    res = LocalRemote().run(["bash", "-c", cmd], timeout=10)
    pid = int(res.stdout.strip())
    try:
        assert _becomes_sleep_60(pid)
        assert os.getsid(pid) == pid  # its own session: survives the SSH session
        assert log_path.exists()
    finally:
        os.kill(pid, 9)
    assert _wait_gone(pid)


def test_spawn_command_appends_output_with_env_and_tricky_args(tmp_path):
    log_path = tmp_path / "out.log"
    log_path.write_text("before\n")
    argv = ["sh", "-c", 'printf "%s\\0" "$V1" "$V2" "$V3" "$V4" "$@"', "sh", *TRICKY]
    res = LocalRemote().run(
        ["bash", "-c", spawn_command(argv, env=TRICKY_ENV, log_path=str(log_path))], timeout=10)
    assert _wait_gone(int(res.stdout.strip()))
    text = log_path.read_text()
    assert text.startswith("before\n")
    assert _split_nul(text.removeprefix("before\n")) == [*TRICKY_ENV.values(), *TRICKY]


def test_unreachable_host_is_a_connect_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = SshRemote("x", "127.0.0.1", port=port, known_hosts=ACCEPT_NEW_FOR_TESTS,
                  key_filename="/nonexistent", connect_timeout=2)
    with pytest.raises(SshConnectError, match="cannot connect"):
        r.run(["true"], timeout=5)


def test_missing_known_hosts_file_is_a_connect_error(tmp_path):
    r = SshRemote("x", "127.0.0.1", known_hosts=str(tmp_path / "nope"), connect_timeout=2)
    with pytest.raises(SshConnectError, match="cannot read known_hosts"):
        r.run(["true"], timeout=5)


# ---------------------------------------------------------------- a real sshd


@pytest.fixture(scope="module")
def sshd(tmp_path_factory) -> Iterator[SshdHost]:
    if os.geteuid() != 0:
        pytest.fail("the SSH integration tests need root (network namespaces)")
    if not os.path.exists(SSHD):
        pytest.skip(f"{SSHD} is not installed")
    with exclusive():
        try:
            with sshd_in_namespace(tmp_path_factory.mktemp("sshd")) as host:
                yield host
        finally:
            left = list_namespaces(PREFIX)
            assert not left, f"namespaces left behind: {left}"


@pytest.fixture
def remote(sshd):
    r = SshRemote("n1", sshd.ip, key_filename=sshd.client_key, known_hosts=sshd.known_hosts,
                  connect_timeout=5)
    yield r
    r.close()


def _procs_in_namespace(ns: str, comm: str) -> list[int]:
    found = []
    for pid in namespace_pids(ns):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                found.append(pid)
        except FileNotFoundError:
            pass
    return found


def _wait_until(pred, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


@pytest.mark.integration
def test_ssh_runs_inside_the_namespace_with_tricky_args_env_and_stdin(sshd, remote):
    res = remote.run(["sh", "-c", 'printf "%s\\0" "$V1" "$V2" "$V3" "$V4" "$@"', "sh", *TRICKY],
                     timeout=10, env=TRICKY_ENV)
    assert _split_nul(res.stdout) == [*TRICKY_ENV.values(), *TRICKY]
    assert res.argv[0] == "sh" and res.returncode == 0
    addr = remote.run(["ip", "-o", "-4", "addr", "show", "eth0"], timeout=10).stdout
    assert f"inet {sshd.ip}/" in addr
    assert remote.run(["cat"], timeout=10, stdin="x\ny").stdout == "x\ny"
    big = "0123456789abcdef" * 65536  # 1 MiB each way, with stderr as chatty as stdout
    res = remote.run(["sh", "-c", "tee /dev/stderr"], timeout=20, stdin=big)
    assert res.stdout == big and res.stderr == big


@pytest.mark.integration
def test_ssh_exit_codes_with_and_without_check(remote):
    res = remote.run(["sh", "-c", "echo oops >&2; exit 3"], timeout=10, check=False)
    assert (res.returncode, res.stderr, res.ok) == (3, "oops\n", False)
    with pytest.raises(RemoteError, match="exited 3: oops"):
        remote.run(["sh", "-c", "echo oops >&2; exit 3"], timeout=10)
    assert remote.run(["/nonexistent/tool"], timeout=10, check=False).returncode == 127


@pytest.mark.integration
def test_ssh_timeout_returns_promptly_and_the_remote_command_dies(sshd, remote):
    t0 = time.monotonic()
    with pytest.raises(CommandTimeout, match="sleep 30 timed out after 1s on n1"):
        remote.run(["sleep", "30"], timeout=1)
    assert time.monotonic() - t0 < 3
    # Closing the channel leaves it running; the remote `timeout` kills it REMOTE_GRACE later.
    assert _procs_in_namespace(sshd.namespace, "sleep"), "the test would prove nothing"
    assert _wait_until(lambda: not _procs_in_namespace(sshd.namespace, "sleep"),
                       timeout=REMOTE_GRACE + 5), "a timed-out sleep outlived the timeout"
    assert remote.run(["echo", "still usable"], timeout=10).stdout == "still usable\n"


@pytest.mark.integration
def test_ssh_spawn_detaches_and_returns_the_pid(sshd, remote, tmp_path):
    log_path = str(tmp_path / "logs" / "sleeper.log")
    pid = remote.spawn(["sleep", "60"], log_path=log_path)
    try:
        assert pid in namespace_pids(sshd.namespace)
        assert _becomes_sleep_60(pid)
        assert os.getsid(pid) == pid
        assert remote.run(["kill", "-0", str(pid)], timeout=10, check=False).ok
        remote.run(["kill", "-KILL", str(pid)], timeout=10)
        assert _wait_gone(pid)
    finally:
        if not _wait_gone(pid, timeout=0):
            os.kill(pid, 9)
    greet = remote.spawn(["sh", "-c", 'echo "$G"'], env={"G": "hi; $there"}, log_path=log_path)
    assert _wait_gone(greet)
    assert remote.read_file(log_path) == "hi; $there\n"


@pytest.mark.integration
def test_ssh_files_roundtrip_over_sftp(remote, tmp_path):
    path = tmp_path / "a" / "b c" / "f.conf"
    remote.write_file(str(path), "ünïcode\nline 2\n", mode=0o600)
    assert remote.read_file(str(path)) == "ünïcode\nline 2\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    remote.write_file(str(path), "shorter\n")
    assert path.read_text() == "shorter\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert remote.read_file(str(tmp_path / "missing")) is None
    with pytest.raises(RemoteError, match="cannot write"):
        remote.write_file(str(tmp_path), "x")  # a directory


@pytest.mark.integration
def test_ssh_concurrent_commands_share_one_connection(remote):
    remote.run(["true"], timeout=10)
    transport = remote._client.get_transport()
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            results[i] = remote.run(["sh", "-c", f"sleep 0.3; echo {i}"], timeout=10).stdout
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == {i: f"{i}\n" for i in range(16)}
    assert remote._client.get_transport() is transport


@pytest.mark.integration
def test_ssh_reconnects_after_the_connection_dies_or_is_closed(remote):
    assert remote.run(["echo", "1"], timeout=10).stdout == "1\n"
    remote._client.get_transport().close()  # as if the TCP connection had dropped
    assert remote.run(["echo", "2"], timeout=10).stdout == "2\n"
    remote.close()
    assert remote.run(["echo", "3"], timeout=10).stdout == "3\n"


@pytest.mark.integration
def test_ssh_host_keys_are_checked(sshd, tmp_path):
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    r = SshRemote("n1", sshd.ip, key_filename=sshd.client_key, known_hosts=str(empty))
    with pytest.raises(SshConnectError, match="cannot connect.*not found in known_hosts"):
        r.run(["true"], timeout=10)
    other_pub = keygen(tmp_path / "other_host")
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(f"{sshd.ip} {' '.join(other_pub.split()[:2])}\n")
    r = SshRemote("n1", sshd.ip, key_filename=sshd.client_key, known_hosts=str(wrong))
    with pytest.raises(SshConnectError, match="does not match"):
        r.run(["true"], timeout=10)
    r = SshRemote("n1", sshd.ip, key_filename=sshd.client_key, known_hosts=ACCEPT_NEW_FOR_TESTS)
    assert r.run(["true"], timeout=10).ok
    r.close()


@pytest.mark.integration
def test_ssh_login_with_an_unknown_key_fails(sshd, tmp_path):
    keygen(tmp_path / "stranger")
    r = SshRemote("n1", sshd.ip, key_filename=str(tmp_path / "stranger"),
                  known_hosts=sshd.known_hosts)
    with pytest.raises(SshConnectError, match="login to root@.* failed"):
        r.run(["true"], timeout=10)
