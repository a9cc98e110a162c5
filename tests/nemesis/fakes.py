"""Test doubles for the nemesis: a Remote that records argv lists and a Broker that records calls.

`FakeRemote` keeps a small model of one node's iptables (chains, jumps,
rules) and root qdiscs, answering the commands `nemesis.commands` builds the
way iptables and tc do, exit codes and messages included; a node "without
netem" answers netem like a kernel without sch_netem. `fail` plants a result
or an exception for commands starting with a given argv prefix. `FakeBroker`
keeps each node's broker state and records every call in order; its `ctl`
answers RabbitMQ's own operations (clusters.rabbitmq_ops) from a small model:
nodes drained, the queue's members and leader, nodes alarmed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clusters.base import Node
from clusters.remote import CommandResult, RemoteError

NO_CHAIN = "iptables: No chain/target/match by that name.\n"


class FakeRemote:
    """A Remote for one fake node: records argv lists, models iptables and tc."""

    def __init__(self, name: str, *, netem: bool = True) -> None:
        self.name = name
        self.netem = netem
        self.calls: list[tuple[str, ...]] = []
        self.timeouts: list[float] = []
        self.chains: dict[str, list[tuple[str, ...]]] = {}
        self.jumps: list[tuple[str, str]] = []
        self.qdiscs: dict[str, tuple[str, ...]] = {}
        self.fail: dict[tuple[str, ...], CommandResult | Exception] = {}
        self._lock = threading.Lock()

    # -- Remote protocol ------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        stdin: str | None = None,
    ) -> CommandResult:
        """Records argv and answers it from the model (or a planted failure)."""
        with self._lock:
            args = tuple(argv)
            self.calls.append(args)
            self.timeouts.append(timeout)
            planted = self._planted(args)
            if isinstance(planted, Exception):
                raise planted
            rc, err = planted if planted is not None else self._answer(args)
        result = CommandResult(args, rc, "", err)
        return result.check() if check else result

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, log_path: str
    ) -> int:
        """Records argv. Returns a fake pid."""
        self.calls.append(tuple(argv))
        return 4242

    def write_file(self, path: str, content: str, mode: int = 0o644) -> None:
        """Does nothing."""

    def read_file(self, path: str) -> str | None:
        """Returns None."""
        return None

    # -- inspection -----------------------------------------------------------------

    def rules(self) -> dict[str, list[tuple[str, ...]]]:
        """Returns our chains' rules (chain -> rule specs)."""
        return {c: list(r) for c, r in self.chains.items()}

    def dropped_ips(self) -> set[str]:
        """Returns the addresses with an unconditional DROP rule in RMQH-IN."""
        return {
            r[r.index("-s") + 1]
            for r in self.chains.get("RMQH-IN", [])
            if "-s" in r and "statistic" not in r
        }

    def clean(self) -> bool:
        """Returns True when no rule and no root qdisc is in place."""
        return not any(self.chains.values()) and not self.qdiscs

    # -- the model ------------------------------------------------------------------

    def _planted(self, args: tuple[str, ...]) -> tuple[int, str] | Exception | None:
        for prefix, outcome in self.fail.items():
            if args[: len(prefix)] == prefix:
                if isinstance(outcome, Exception):
                    return outcome
                return outcome.returncode, outcome.stderr
        return None

    def _answer(self, args: tuple[str, ...]) -> tuple[int, str]:
        if args[:3] == ("iptables", "-w", "5"):
            return self._iptables(args[3:])
        if args[:2] == ("tc", "qdisc"):
            return self._tc(args[2:])
        return 127, f"fake: {args[0]}: command not found\n"

    def _iptables(self, a: tuple[str, ...]) -> tuple[int, str]:
        op = a[0] if a[0] != "-n" else a[1]
        if a[:2] == ("-n", "-L"):
            return (0, "") if a[2] in self.chains else (1, NO_CHAIN)
        answer = _IPTABLES.get(op)
        if answer is None:
            return 2, f"fake iptables: unsupported {a}\n"
        return answer(self, a)

    def _new_chain(self, a: tuple[str, ...]) -> tuple[int, str]:
        if a[1] in self.chains:
            return 1, "iptables: Chain already exists.\n"
        self.chains[a[1]] = []
        return 0, ""

    def _check_jump(self, a: tuple[str, ...]) -> tuple[int, str]:
        return (0, "") if (a[1], a[3]) in self.jumps else (1, "iptables: Bad rule.\n")

    def _insert_jump(self, a: tuple[str, ...]) -> tuple[int, str]:
        if a[4] not in self.chains:
            return 2, f"iptables v1.8.7 (legacy): Couldn't load target `{a[4]}'\n"
        self.jumps.insert(0, (a[1], a[4]))
        return 0, ""

    def _delete_jump(self, a: tuple[str, ...]) -> tuple[int, str]:
        if (a[1], a[3]) not in self.jumps:
            return 1, "iptables: Bad rule.\n"
        self.jumps.remove((a[1], a[3]))
        return 0, ""

    def _append_rule(self, a: tuple[str, ...]) -> tuple[int, str]:
        if a[1] not in self.chains:
            return 1, NO_CHAIN
        self.chains[a[1]].append(a[2:])
        return 0, ""

    def _flush_chain(self, a: tuple[str, ...]) -> tuple[int, str]:
        if a[1] not in self.chains:
            return 1, NO_CHAIN
        self.chains[a[1]] = []
        return 0, ""

    def _delete_chain(self, a: tuple[str, ...]) -> tuple[int, str]:
        if a[1] not in self.chains:
            return 1, NO_CHAIN
        del self.chains[a[1]]
        return 0, ""

    def _tc(self, a: tuple[str, ...]) -> tuple[int, str]:
        verb, dev, iface, where = a[0], a[1], a[2], a[3]
        assert dev == "dev" and where == "root", a
        if verb in ("replace", "add"):
            kind = a[4]
            if kind == "netem" and not self.netem:
                return 2, "Error: Specified qdisc kind is unknown.\n"
            if verb == "add" and iface in self.qdiscs:
                return 2, "Error: Exclusivity flag on, cannot modify.\n"
            self.qdiscs[iface] = a[4:]
            return 0, ""
        if verb == "del":
            if iface not in self.qdiscs:
                return 2, "Error: Cannot delete qdisc with handle of zero.\n"
            del self.qdiscs[iface]
            return 0, ""
        return 2, f"fake tc: unsupported {a}\n"


# How the model answers each iptables operation (after -w 5): its argv from the operation on.
_IPTABLES: dict[str, Callable[[FakeRemote, tuple[str, ...]], tuple[int, str]]] = {
    "-N": FakeRemote._new_chain,
    "-C": FakeRemote._check_jump,
    "-I": FakeRemote._insert_jump,
    "-D": FakeRemote._delete_jump,
    "-A": FakeRemote._append_rule,
    "-F": FakeRemote._flush_chain,
    "-X": FakeRemote._delete_chain,
}


class FakeCluster:
    """A Cluster of fake nodes n1..nN at 10.0.0.1..N."""

    nodes: Sequence[Node]

    def __init__(self, size: int = 3, *, netem: bool = True) -> None:
        self.nodes = [
            Node(f"n{i}", f"10.0.0.{i}", FakeRemote(f"n{i}", netem=netem))
            for i in range(1, size + 1)
        ]

    def node(self, name: str) -> Node:
        """Returns the node called name; KeyError if none."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def remote(self, name: str) -> FakeRemote:
        """Returns the fake Remote of a node."""
        remote = self.node(name).remote
        assert isinstance(remote, FakeRemote)
        return remote

    def all_clean(self) -> bool:
        """Returns True when no node has a rule or a qdisc in place."""
        return all(self.remote(n.name).clean() for n in self.nodes)


@dataclass
class FakeBroker:
    """A Broker whose brokers are states in a dict, and the QueueAdmin of its queue (its leader
    and members are set); records calls, can be told to fail."""

    names: Sequence[str] = ("n1", "n2", "n3")
    leader: str | None = "n1"
    members: list[str] | None = None
    state: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    fail: dict[tuple[str, str], Exception] = field(default_factory=dict)
    # Set to make start() block until released (to test heal against an action in flight).
    start_gate: threading.Event | None = None
    # The CLI's model: nodes drained, (node, resource) alarms set, and every ctl call as
    # (node, tool, *args); `cli_fail` plants an exception for (node, first argument).
    drained: set[str] = field(default_factory=set)
    alarms: set[tuple[str, str]] = field(default_factory=set)
    cli: list[tuple[str, ...]] = field(default_factory=list)
    cli_fail: dict[tuple[str, str], Exception] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        for n in self.names:
            self.state.setdefault(n, "running")

    def _call(self, method: str, node: Node) -> str:
        with self._lock:
            self.calls.append((method, node.name))
            err = self.fail.get((method, node.name))
            if err is not None:
                raise err
            return self.state[node.name]

    def beam_pid(self, node: Node) -> int | None:
        """Returns a pid unless the node's broker is stopped or killed."""
        state = self._call("beam_pid", node)
        return None if state in ("stopped", "killed") else 1000 + int(node.name[1:])

    def kill(self, node: Node) -> None:
        """Marks the node killed; raises if it was not running."""
        if self._call("kill", node) == "stopped":
            raise RemoteError(f"{node.name}: no beam to kill")
        self.state[node.name] = "killed"

    def stop(self, node: Node) -> None:
        """Marks the node stopped."""
        self._call("stop", node)
        self.state[node.name] = "stopped"

    def start(self, node: Node) -> None:
        """Marks the node running; raises if it already was (a double start is a bug)."""
        state = self._call("start", node)
        if self.start_gate is not None:
            self.start_gate.wait(10)
        if state in ("running", "paused"):
            raise RemoteError(f"{node.name}: broker already running")
        self.state[node.name] = "running"

    def pause(self, node: Node) -> None:
        """Marks the node paused; raises if its broker is down."""
        if self._call("pause", node) in ("stopped", "killed"):
            raise RemoteError(f"{node.name}: no beam to pause")
        self.state[node.name] = "paused"

    def resume(self, node: Node) -> None:
        """Marks a paused node running; a no-op on a running one; raises if down."""
        if self._call("resume", node) in ("stopped", "killed"):
            raise RemoteError(f"{node.name}: no beam to resume")
        self.state[node.name] = "running"

    def ctl(self, node: Node, *args: str, timeout: float = 30.0, check: bool = True,
            tool: str = "rabbitmqctl") -> str:
        """Records the call and answers it from the model, as the CLI prints."""
        assert timeout > 0, "every CLI call needs a hard timeout"
        with self._lock:
            self.cli.append((node.name, tool, *args))
            err = self.cli_fail.get((node.name, args[0]))
        if err is not None:
            raise err
        if self.state[node.name] in ("stopped", "killed"):
            raise RemoteError(f"{node.name}: unable to perform an operation on node")
        expr = args[1] if args[0] == "eval" else ""
        for part in (self._ctl_drain, self._ctl_members, self._ctl_leader, self._ctl_alarms):
            out = part(node, args, expr)
            if out is not None:
                return out
        raise AssertionError(f"fake CLI: unexpected {tool} {args}")

    def _short(self) -> dict[str, str]:
        """Returns each node's name by its Erlang node name."""
        return {f"rabbit@10.0.0.{n[1:]}": n for n in self.names}

    def _ctl_drain(self, node: Node, args: tuple[str, ...], expr: str) -> str | None:
        """Answers drain, revive and whether the node is drained; None for another call."""
        if args == ("drain",):
            self.drained.add(node.name)
        elif args == ("revive",):
            self.drained.discard(node.name)
        elif "is_being_drained_local_read" in expr:
            return f"{str(node.name in self.drained).lower()}\nok\n"
        else:
            return None
        return ""

    def _ctl_members(self, node: Node, args: tuple[str, ...], expr: str) -> str | None:
        """Answers delete_member and add_member (removing the leader elects the first of the
        rest; the last member stays); None for another call."""
        if args[0] not in ("delete_member", "add_member"):
            return None
        members = self.members if self.members is not None else list(self.names)
        member = self._short()[args[-1]]
        if args[0] == "delete_member" and member in members:
            if members == [member]:
                raise RemoteError(f"{args}: last_node")
            members = [m for m in members if m != member]
            if self.leader == member:  # the rest elect one of themselves
                self.leader = members[0]
        elif args[0] == "add_member" and member not in members:
            members = [*members, member]
        self.members = members
        return ""

    def _ctl_leader(self, node: Node, args: tuple[str, ...], expr: str) -> str | None:
        """Answers a leadership transfer; None for another call."""
        if "transfer_leadership" not in expr:
            return None
        to = self._short()[expr.split("transfer_leadership(Q, '")[1].split("'")[0]]
        self.leader = to
        return f"{{migrated,'rabbit@10.0.0.{to[1:]}'}}\nok\n"

    def _ctl_alarms(self, node: Node, args: tuple[str, ...], expr: str) -> str | None:
        """Answers setting a memory or disk alarm and clearing it (the eval restoring the
        limit); None for another call."""
        if args == ("set_vm_memory_high_watermark", "0"):
            self.alarms.add((node.name, "memory"))
        elif args[0] == "set_disk_free_limit":
            self.alarms.add((node.name, "disk"))
        elif "vm_memory_high_watermark" in expr:
            self.alarms.discard((node.name, "memory"))
            return "0.4\nok\n"
        elif "disk_free_limit" in expr:
            self.alarms.discard((node.name, "disk"))
            return "50000000\nok\n"
        else:
            return None
        return ""

    def tools(self) -> list[tuple[str, ...]]:
        """Returns the CLI calls but the evals' expressions: (node, tool, args...)."""
        return [c[:3] if c[2] == "eval" else c for c in self.cli]

    def queue_leader(self, queue: str) -> str | None:
        """Returns the configured leader."""
        with self._lock:
            self.calls.append(("queue_leader", queue))
        return self.leader

    def queue_placement(self, queue: str) -> dict[str, Any]:
        """Returns the configured leader and members (every node, unless set)."""
        with self._lock:
            self.calls.append(("queue_placement", queue))
        members = self.members if self.members is not None else list(self.state)
        return {"leader": self.leader, "members": members, "mirrors": []}

    def of(self, method: str) -> list[str]:
        """Returns the nodes `method` was called on, in order."""
        return [n for m, n in self.calls if m == method]

    def all_running(self) -> bool:
        """Returns True when every broker is running (not paused, stopped or killed)."""
        return all(s == "running" for s in self.state.values())
