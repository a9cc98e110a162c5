"""The SSH backend: broker nodes on real hosts, reached with paramiko.

`SshRemote` implements the `Remote` protocol over one SSH connection per host,
opened lazily and shared by every thread (a paramiko transport carries many
concurrent channels). Each command runs as `shlex.join(argv)`, wrapped in the
remote `timeout --signal=KILL` and, when there is an environment, in `env
K=V ...`, so the server's AcceptEnv does not matter and a command we gave up
on does not outlive us. Files move over SFTP. Host keys are checked against a
known_hosts file (paramiko's RejectPolicy); accepting unknown keys is an
explicit test-only option.

The backend's cluster (`clusters.ssh.cluster.SshHostsCluster`) gives each
inventory host's node one, so the broker lifecycle in `clusters.rabbitmq` runs
unchanged on real machines. The command strings are built by pure functions
(`remote_command`, `spawn_command`) that the tests check on a real shell.

The remote login shell must be POSIX (sh, bash, dash, zsh), as for any SSH
automation: the command string is parsed by it once.
"""

from __future__ import annotations

import errno
import logging
import posixpath
import re
import shlex
import stat
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, Literal

import paramiko  # type: ignore[import-untyped]  # no stubs in .venv (types-paramiko)

from clusters.remote import CommandResult, CommandTimeout, RemoteError

log = logging.getLogger(__name__)

ACCEPT_NEW_FOR_TESTS: Final = "accept-new-for-tests"
KnownHosts = str | Path | Literal["accept-new-for-tests"] | None

# The remote `timeout` fires this long after our own deadline, so that we
# always give up first (CommandTimeout) and the remote kill is only the backstop.
REMOTE_GRACE = 1.0
# Hard limit for the short shell line that starts a detached process.
SPAWN_TIMEOUT = 30.0
# Hard limit for each SFTP request of write_file / read_file.
FILE_TIMEOUT = 30.0
# OpenSSH's sshd allows 10 sessions per connection (MaxSessions); we queue
# past this many instead of having the server refuse the channel.
MAX_CHANNELS = 8
KEEPALIVE_S = 15

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class SshConnectError(RemoteError):
    """The SSH connection could not be made: unreachable, host key refused, or login failed."""


# ---------------------------------------------------------------- pure builders


def env_argv(env: Mapping[str, str] | None) -> list[str]:
    """Takes an environment. Returns the `env K=V ...` argv prefix that sets it ([] when empty).

    Raises ValueError for a name a shell could not export or a value with a NUL byte.
    """
    if not env:
        return []
    out = ["env"]
    for k, v in env.items():
        if not _ENV_NAME.match(k):
            raise ValueError(f"invalid environment variable name {k!r}")
        if "\0" in v:
            raise ValueError(f"environment variable {k} contains a NUL byte")
        out.append(f"{k}={v}")
    return out


def _check_argv(argv: Sequence[str]) -> None:
    if isinstance(argv, str) or not argv:
        raise ValueError(f"argv must be a non-empty list of strings, got {argv!r}")
    for a in argv:
        if not isinstance(a, str) or "\0" in a:
            raise ValueError(f"argv items must be strings without NUL bytes, got {a!r}")


def _seconds(x: float) -> str:
    return f"{x:.1f}"


def remote_command(
    argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None
) -> str:
    """Takes an argv, our hard timeout and an environment. Returns the SSH command string.

    The argv runs under `timeout --signal=KILL` set REMOTE_GRACE past our own
    deadline, so it dies on the host even when we closed the channel. Every word
    is quoted with shlex, so spaces, quotes, `$` and `;` reach the command intact.
    """
    _check_argv(argv)
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    words = ["timeout", "--signal=KILL", _seconds(timeout + REMOTE_GRACE)]
    return shlex.join([*words, *env_argv(env), *argv])


def spawn_command(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, log_path: str
) -> str:
    """Takes an argv, environment and log path. Returns the SSH command that starts argv detached.

    The command prints the pid of the started process. Output is appended to
    log_path (whose directory is created), stdin is /dev/null, and the process
    leads its own session so it survives the SSH session ending.
    """
    _check_argv(argv)
    if not log_path:
        raise ValueError("spawn needs a log_path")
    # The one place we need a shell: backgrounding with `&`, redirecting and
    # reporting `$!` have no argv form. Every argv word and path is shlex-quoted,
    # so nothing from the caller is parsed as shell syntax. `setsid` execs
    # (a background job of a non-interactive sh is no process-group leader), as
    # do nohup and env, so `$!` is argv's own pid.
    q = shlex.quote
    log_dir = posixpath.dirname(log_path) or "."
    script = (
        f"mkdir -p -- {q(log_dir)} || exit 1; "
        f"setsid nohup {shlex.join([*env_argv(env), *argv])} "
        f">> {q(log_path)} 2>&1 < /dev/null & echo $!"
    )
    return shlex.join(["sh", "-c", script])


# ---------------------------------------------------------------- the Remote


class SshRemote:
    """A Remote on one host over SSH: commands on exec channels, files over SFTP.

    One paramiko client per instance, connected on first use and shared by all
    threads; a transport found dead is replaced once per call. Only commands
    whose channel could not even be opened are retried, never one that may
    have started. `close()` drops the connection; a later call reconnects.
    """

    def __init__(
        self,
        name: str,
        host: str,
        *,
        user: str = "root",
        port: int = 22,
        key_filename: str | None = None,
        password: str | None = None,
        known_hosts: KnownHosts = None,
        connect_timeout: float = 10.0,
        host_key_policy: paramiko.MissingHostKeyPolicy | None = None,
    ) -> None:
        if connect_timeout <= 0:
            raise ValueError(f"connect_timeout must be positive, got {connect_timeout}")
        self.name = name
        self.host = host
        self.user = user
        self.port = port
        self.key_filename = key_filename
        self.password = password
        self.known_hosts = known_hosts
        self.connect_timeout = connect_timeout
        # What to do with a host key known_hosts lacks (default: refuse; see clusters.ssh.hostkeys).
        self.host_key_policy = host_key_policy
        self._lock = threading.Lock()
        self._client: paramiko.SSHClient | None = None
        self._channels = threading.BoundedSemaphore(MAX_CHANNELS)

    def __repr__(self) -> str:
        return f"SshRemote({self.name!r}, {self.user}@{self.host}:{self.port})"

    # -- connection

    def _new_client(self) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        if self.known_hosts == ACCEPT_NEW_FOR_TESTS:
            log.warning("%s: accepting any host key for %s (test-only option)", self.name, self.host)
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
            return client
        if self.known_hosts is None:
            client.load_system_host_keys()
            system = Path("/etc/ssh/ssh_known_hosts")
            if system.exists():
                client.load_system_host_keys(str(system))
        else:
            try:
                client.load_host_keys(str(self.known_hosts))
            except OSError as e:
                raise SshConnectError(
                    f"{self.name}: cannot read known_hosts {self.known_hosts}: {e}"
                ) from e
        client.set_missing_host_key_policy(self.host_key_policy or paramiko.RejectPolicy())
        return client

    def _connect(self, timeout: float) -> paramiko.SSHClient:
        client = self._new_client()
        explicit = self.key_filename is not None or self.password is not None
        where = f"{self.user}@{self.host}:{self.port}"
        try:
            client.connect(
                self.host,
                port=self.port,
                username=self.user,
                key_filename=self.key_filename,
                password=self.password,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                allow_agent=not explicit,
                look_for_keys=not explicit,
            )
        except paramiko.BadHostKeyException as e:
            client.close()
            raise SshConnectError(f"{self.name}: host key of {where} does not match: {e}") from e
        except paramiko.AuthenticationException as e:
            client.close()
            raise SshConnectError(f"{self.name}: login to {where} failed: {e}") from e
        except (paramiko.SSHException, OSError, EOFError) as e:
            client.close()
            # RejectPolicy raises a bare SSHException naming known_hosts.
            raise SshConnectError(f"{self.name}: cannot connect to {where}: {e}") from e
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(KEEPALIVE_S)
        log.info("%s: connected to %s", self.name, where)
        return client

    def _transport(self, deadline: float) -> paramiko.Transport:
        """Returns a live transport, connecting (under the lock) when there is none."""
        if not self._lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise CommandTimeout("waiting for the connection")
        try:
            t = self._client.get_transport() if self._client else None
            if t is None or not t.is_active():
                if self._client is not None:
                    log.warning("%s: connection to %s lost, reconnecting", self.name, self.host)
                    self._client.close()
                    self._client = None
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CommandTimeout(f"no time left to connect to {self.host}")
                self._client = self._connect(min(self.connect_timeout, remaining))
                t = self._client.get_transport()
                if t is None:
                    raise SshConnectError(f"{self.name}: connected without a transport")
            return t
        finally:
            self._lock.release()

    def _drop(self, transport: paramiko.Transport) -> None:
        """Forgets the client if it still owns this (dead) transport."""
        with self._lock:
            if self._client is not None and self._client.get_transport() is transport:
                self._client.close()
                self._client = None

    def _open_session(self, deadline: float) -> paramiko.Channel:
        """Returns a new session channel, reconnecting once if the transport died."""
        for attempt in (1, 2):
            transport = self._transport(deadline)
            try:
                return transport.open_session(timeout=max(0.1, deadline - time.monotonic()))
            except paramiko.ChannelException as e:
                # The server refused this channel (e.g. its MaxSessions); the
                # connection itself is fine and carries other commands.
                raise RemoteError(f"{self.name}: server refused an SSH channel: {e}") from e
            except (paramiko.SSHException, OSError, EOFError) as e:
                if transport.is_active() and time.monotonic() >= deadline:
                    # No answer to a channel open for the whole timeout: the
                    # connection is wedged (e.g. the path to the host is cut),
                    # and TCP would take many minutes to notice. Start afresh next time.
                    self._drop(transport)
                    raise CommandTimeout("opening an SSH channel") from e
                if transport.is_active() or attempt == 2:
                    raise RemoteError(f"{self.name}: cannot open an SSH channel: {e}") from e
                self._drop(transport)
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Closes the connection, if any. A later call connects again."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- commands

    def _exec(
        self, command: str, argv: Sequence[str], *, timeout: float, stdin: str | None
    ) -> CommandResult:
        """Runs one command string on a fresh channel. Returns its result within `timeout` s.

        Raises CommandTimeout when the deadline passes at any stage (waiting for
        the connection, a free channel, or the command), RemoteError on SSH failure.
        """
        deadline = time.monotonic() + timeout
        try:
            if not self._channels.acquire(timeout=timeout):
                raise CommandTimeout("no free SSH channel")
            try:
                log.debug("%s: %s", self.name, command)
                chan = self._open_session(deadline)
                try:
                    chan.settimeout(max(0.1, deadline - time.monotonic()))
                    chan.exec_command(command)
                    out, err = self._collect(chan, stdin, deadline)
                    status = chan.recv_exit_status()
                    if status == -1 and not chan.get_transport().is_active():
                        raise RemoteError(
                            f"{' '.join(argv)} on {self.name}: connection lost, outcome unknown"
                        )
                    return CommandResult(tuple(argv), status, out, err)
                except (paramiko.SSHException, OSError, EOFError) as e:
                    raise RemoteError(f"{' '.join(argv)} on {self.name}: SSH failure: {e}") from e
                finally:
                    # Closing the channel does not signal the process; the
                    # remote `timeout` kills it REMOTE_GRACE after our deadline.
                    chan.close()
            finally:
                self._channels.release()
        except CommandTimeout as e:
            raise CommandTimeout(
                f"{' '.join(argv)} timed out after {timeout:.0f}s on {self.name} ({e})"
            ) from None

    def _collect(
        self, chan: paramiko.Channel, stdin: str | None, deadline: float
    ) -> tuple[str, str]:
        """Feeds stdin and reads both streams until exit and EOF; raises CommandTimeout at the deadline.

        Both streams are read as data comes, so a chatty stderr cannot fill the
        channel window and stall the command.
        """
        out, err = bytearray(), bytearray()
        pending = memoryview(stdin.encode("utf-8")) if stdin else None
        if pending is None:
            chan.shutdown_write()
        idle = 0.001
        while True:
            moved = False
            if pending is not None and chan.send_ready():
                n = chan.send(pending[:32768])
                pending, moved = pending[n:], n > 0
                if not pending:
                    chan.shutdown_write()
                    pending = None
            while chan.recv_ready():
                out += chan.recv(65536)
                moved = True
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
                moved = True
            finished = chan.exit_status_ready() and (chan.eof_received or chan.closed)
            if finished and not chan.recv_ready() and not chan.recv_stderr_ready():
                return out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
            if time.monotonic() >= deadline:
                raise CommandTimeout("the command did not finish")
            idle = 0.001 if moved else min(idle * 2, 0.02)
            if not moved:
                time.sleep(idle)

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        stdin: str | None = None,
    ) -> CommandResult:
        """Runs argv on the host; see Remote.run.

        A command killed by a signal reports returncode -1 (SSH carries no number).
        Raises CommandTimeout, RemoteError (SshConnectError when the host cannot be reached).
        """
        command = remote_command(argv, timeout=timeout, env=env)
        res = self._exec(command, argv, timeout=timeout, stdin=stdin)
        return res.check() if check else res

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, log_path: str
    ) -> int:
        """Starts argv detached on the host; see Remote.spawn. Returns its pid on the host."""
        res = self._exec(
            spawn_command(argv, env=env, log_path=log_path), argv, timeout=SPAWN_TIMEOUT,
            stdin=None,
        )
        res.check()
        last = res.stdout.strip().splitlines()[-1:] or [""]
        if not last[0].isdigit():
            raise RemoteError(f"spawn of {' '.join(argv)} on {self.name} printed no pid: {res.stdout!r}")
        pid = int(last[0])
        log.debug("%s: spawned pid %d: %s", self.name, pid, " ".join(argv))
        return pid

    # -- files

    def _sftp(self) -> paramiko.SFTPClient:
        """Returns an SFTP session on its own channel (holding a channel slot until _sftp_done)."""
        deadline = time.monotonic() + FILE_TIMEOUT
        if not self._channels.acquire(timeout=FILE_TIMEOUT):
            raise RemoteError(f"{self.name}: no free SSH channel for SFTP")
        chan = None
        try:
            chan = self._open_session(deadline)
            chan.settimeout(FILE_TIMEOUT)
            chan.invoke_subsystem("sftp")
            return paramiko.SFTPClient(chan)
        except BaseException as e:
            if chan is not None:
                chan.close()
            self._channels.release()
            if isinstance(e, paramiko.SSHException | OSError | EOFError):
                raise RemoteError(f"{self.name}: cannot start SFTP: {e}") from e
            raise

    def _sftp_done(self, sftp: paramiko.SFTPClient) -> None:
        try:
            sftp.close()
        finally:
            self._channels.release()

    @staticmethod
    def _makedirs(sftp: paramiko.SFTPClient, path: str) -> None:
        if path in ("", "/", "."):
            return
        try:
            if not stat.S_ISDIR(sftp.stat(path).st_mode or 0):
                raise RemoteError(f"{path} exists and is not a directory")
            return
        except FileNotFoundError:
            pass
        SshRemote._makedirs(sftp, posixpath.dirname(path.rstrip("/")))
        try:
            sftp.mkdir(path)
        except OSError:
            # Another writer may have made it meanwhile; only a real failure remains.
            if not stat.S_ISDIR(sftp.stat(path).st_mode or 0):
                raise

    def write_file(self, path: str, content: str, mode: int = 0o644) -> None:
        """Writes a text file on the host over SFTP, making parent directories; see Remote.write_file."""
        sftp = self._sftp()
        try:
            self._makedirs(sftp, posixpath.dirname(path))
            with sftp.open(path, "w") as f:
                f.chmod(mode)  # before the content, so a 0600 file is never readable by others
                f.write(content.encode("utf-8"))
        except (OSError, paramiko.SSHException, EOFError) as e:
            raise RemoteError(f"{self.name}: cannot write {path}: {e}") from e
        finally:
            self._sftp_done(sftp)

    def read_file(self, path: str) -> str | None:
        """Reads a text file on the host over SFTP, or None when missing; see Remote.read_file."""
        sftp = self._sftp()
        try:
            with sftp.open(path, "r") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.ENOENT:
                return None
            raise RemoteError(f"{self.name}: cannot read {path}: {e}") from e
        except (paramiko.SSHException, EOFError) as e:
            raise RemoteError(f"{self.name}: cannot read {path}: {e}") from e
        finally:
            self._sftp_done(sftp)
        return data.decode("utf-8", "replace")
