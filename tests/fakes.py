"""Test doubles: a Remote that records argv lists and answers from a script of canned results;
a history recorder that keeps ops in a list."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from clusters.remote import CommandResult, RemoteError
from history import Op

Responder = Callable[[tuple[str, ...]], CommandResult | None]


class FakeRemote:
    """Records every call; `respond` may return a CommandResult for an argv (default: ok, empty)."""

    def __init__(self, name: str = "n1", respond: Responder | None = None) -> None:
        self.name = name
        self.calls: list[tuple[str, ...]] = []
        self.envs: list[Mapping[str, str] | None] = []
        self.files: dict[str, str] = {}
        self.modes: dict[str, int] = {}
        self.spawned: list[tuple[str, ...]] = []
        self.respond = respond or (lambda argv: None)

    def run(self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None,
            check: bool = True, stdin: str | None = None) -> CommandResult:
        assert timeout > 0, "every command needs a hard timeout"
        a = tuple(argv)
        self.calls.append(a)
        self.envs.append(env)
        res = self.respond(a) or self._cat(a) or CommandResult(a, 0, "", "")
        if check and not res.ok:
            raise RemoteError(f"{a} failed")
        return res

    def _cat(self, argv: tuple[str, ...]) -> CommandResult | None:
        """`cat FILE` of a file under /proc answers from `files`: exit 1 when it is not there
        (a process that is gone)."""
        if len(argv) == 2 and argv[0] == "cat" and argv[1].startswith("/proc/"):
            text = self.files.get(argv[1])
            return (CommandResult(argv, 0, text, "") if text is not None
                    else CommandResult(argv, 1, "", f"cat: {argv[1]}: No such file or directory"))
        return None

    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              log_path: str) -> int:
        self.spawned.append(tuple(argv))
        return 1000 + len(self.spawned)

    def write_file(self, path: str, content: str, mode: int = 0o644) -> None:
        self.files[path] = content
        self.modes[path] = mode

    def read_file(self, path: str) -> str | None:
        return self.files.get(path)


class ListRecorder:
    """A history recorder (history.Recorder) that keeps the ops it is given, unstamped."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def append(self, op: Op) -> Op:
        self.ops.append(op)
        return op
