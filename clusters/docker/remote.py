"""A Remote inside a Docker container, through the Docker Engine API (the `docker` SDK).

Commands run as `docker exec` (root, no TTY) wrapped in the container's own
`timeout --signal=KILL`, set REMOTE_GRACE past our deadline, because the API
has no way to kill an exec: we give up at the deadline (CommandTimeout) and
the container's `timeout` kills the command just after. Long-lived processes
start through the same `setsid nohup ... & echo $!` line the SSH backend uses
(`clusters.ssh.remote.spawn_command`), so the pid is the process's pid inside the
container, and RabbitBroker's pid-file signals (kill -KILL/-STOP/-CONT) work
as on every other backend; the container runs `docker-init` as PID 1, which
reaps what we kill. Files move as tar archives (get_archive / put_archive),
which also works on a stopped container.
"""

from __future__ import annotations

import io
import logging
import posixpath
import shlex
import tarfile
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from clusters.remote import CommandResult, CommandTimeout, RemoteError
from clusters.ssh.remote import REMOTE_GRACE, SPAWN_TIMEOUT, env_argv, spawn_command

log = logging.getLogger(__name__)

# Runs "$@" with stdin from the file $1, then removes the file: an exec has no stdin we could
# write to without a raw socket.
_STDIN_SCRIPT = 'f=$1; shift; "$@" < "$f"; rc=$?; rm -f -- "$f"; exit $rc'


def exec_argv(argv: Sequence[str], *, timeout: float,
              env: Mapping[str, str] | None = None) -> list[str]:
    """Takes an argv, our hard timeout and an environment. Returns the argv the exec runs: argv
    under `timeout --signal=KILL`, REMOTE_GRACE past our deadline, with `env K=V` when given."""
    if isinstance(argv, str) or not argv:
        raise ValueError(f"argv must be a non-empty list of strings, got {argv!r}")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    return ["timeout", "--signal=KILL", f"{timeout + REMOTE_GRACE:.1f}", *env_argv(env), *argv]


class DockerRemote:
    """A Remote for one container, named `container` (a name or id), through an API client
    that `api()` returns (so the remote can be built before the cluster connects)."""

    def __init__(self, name: str, container: str, api: Callable[[], Any]) -> None:
        self.name = name
        self.container = container
        self._api = api

    def __repr__(self) -> str:
        return f"DockerRemote({self.name!r}, {self.container!r})"

    def _client(self) -> Any:
        try:
            return self._api()
        except RemoteError:
            raise
        except Exception as e:  # the factory's own failure, whatever the SDK raised
            raise RemoteError(f"{self.name}: no Docker connection: {e}") from e

    def _exec(self, words: list[str], argv: Sequence[str], timeout: float) -> CommandResult:
        """Runs words in the container, waiting at most `timeout` s. Returns the result."""
        from docker.errors import DockerException

        api = self._client()
        box: dict[str, Any] = {}

        def call() -> None:
            try:
                ex = api.exec_create(self.container, words, stdout=True, stderr=True,
                                     user="root")
                box["id"] = ex["Id"]
                box["out"] = api.exec_start(ex["Id"], demux=True)
            except (DockerException, OSError) as e:
                box["error"] = e

        t = threading.Thread(target=call, name=f"docker-exec-{self.name}", daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            raise CommandTimeout(f"{' '.join(argv)} timed out after {timeout:.0f}s on "
                                 f"{self.name}")
        if "error" in box:
            raise RemoteError(f"{' '.join(argv)} on {self.name} ({self.container}): "
                              f"{box['error']}") from box["error"]
        out, err = box["out"] if isinstance(box.get("out"), tuple) else (box.get("out"), None)
        try:
            code = api.exec_inspect(box["id"]).get("ExitCode")
        except (DockerException, OSError) as e:
            raise RemoteError(f"{' '.join(argv)} on {self.name}: exit status unknown: {e}") from e
        return CommandResult(tuple(argv), -1 if code is None else int(code),
                             (out or b"").decode("utf-8", "replace"),
                             (err or b"").decode("utf-8", "replace"))

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        stdin: str | None = None,
    ) -> CommandResult:
        """Runs argv in the container; see Remote.run. A command the container's `timeout`
        killed exits 137."""
        words = exec_argv(argv, timeout=timeout, env=env)
        if stdin is not None:
            path = f"/tmp/rmqh-stdin-{uuid.uuid4().hex}"
            self.write_file(path, stdin, mode=0o600)
            words = ["sh", "-c", _STDIN_SCRIPT, "sh", path, *words]
        res = self._exec(words, argv, timeout)
        return res.check() if check else res

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, log_path: str
    ) -> int:
        """Starts argv detached in the container; see Remote.spawn. Returns its pid there."""
        words = shlex.split(spawn_command(argv, env=env, log_path=log_path))
        res = self._exec(words, argv, SPAWN_TIMEOUT).check()
        last = res.stdout.strip().splitlines()[-1:] or [""]
        if not last[0].isdigit():
            raise RemoteError(f"spawn of {' '.join(argv)} on {self.name} printed no pid: "
                              f"{res.stdout!r}")
        return int(last[0])

    def write_file(self, path: str, content: str, mode: int = 0o644) -> None:
        """Writes a text file in the container (as root), making parent directories; see
        Remote.write_file."""
        from docker.errors import DockerException

        parent = posixpath.dirname(path) or "/"
        self.run(["mkdir", "-p", parent], timeout=30)
        data = content.encode("utf-8")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(posixpath.basename(path))
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        try:
            ok = self._client().put_archive(self.container, parent, buf.getvalue())
        except (DockerException, OSError) as e:
            raise RemoteError(f"{self.name}: cannot write {path}: {e}") from e
        if not ok:
            raise RemoteError(f"{self.name}: cannot write {path}")

    def read_file(self, path: str) -> str | None:
        """Reads a text file in the container, or None when it does not exist; see
        Remote.read_file."""
        from docker.errors import DockerException, NotFound

        try:
            stream, _stat = self._client().get_archive(self.container, path)
            raw = b"".join(stream)
        except NotFound:
            return None
        except (DockerException, OSError) as e:
            raise RemoteError(f"{self.name}: cannot read {path}: {e}") from e
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            for member in tar:
                if member.isfile():
                    f = tar.extractfile(member)
                    return None if f is None else f.read().decode("utf-8", "replace")
        return None
