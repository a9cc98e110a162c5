"""What RabbitMQ says about a queue, and what it is told about one: placement, depth, policies.

`RabbitAdmin` asks a cluster's nodes (through `RabbitBroker.ctl`, so every
call has a hard timeout) where a queue lives, how many messages it holds,
and sets the policy a queue needs; it implements the `QueueAdmin` protocol
the nemeses use to find a queue's leader. The parsers of the CLI tools'
output are pure and tested on captured output. Starting and stopping the
nodes is clusters.rabbitmq's.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from clusters.base import Node
from clusters.rabbitmq import BrokerError, RabbitBroker
from clusters.remote import RemoteError

log = logging.getLogger(__name__)
T = TypeVar("T")

# The placement columns of RabbitMQ 3.10 (4.0 has no mirrors: clusters.releases has each
# release's own list).
PLACEMENT_COLUMNS = (
    "name", "type", "leader", "members", "pid", "slave_pids", "synchronised_slave_pids",
)
# Depth, after the placement columns: a queue's own count, asked of its leader or master.
DEPTH_COLUMNS = ("messages_ready", "messages_unacknowledged", "messages")
_NODE_IP = re.compile(r"rabbit@(\d+\.\d+\.\d+\.\d+)")


def parse_queue_placement(text: str, queue: str, names_by_ip: dict[str, str],
                          columns: tuple[str, ...] = PLACEMENT_COLUMNS) -> dict[str, Any]:
    """Takes `list_queues --silent` output of placement `columns`, a queue name and a map
    ip -> node.

    Returns {"type", "leader", "members", "mirrors", "synchronised_mirrors"} with
    short node names (quorum: leader and members; classic: master pid's node and
    mirrors; a release without mirroring lists none), or {} when the queue is not listed. Pids
    print as `<rabbit@IP.creation.id.serial>`, hence the address pattern.
    """
    row = parse_queue_row(text, queue, names_by_ip, columns)
    if row is None:
        return {}
    return {k: row[k] for k in ("type", "leader", "members", "mirrors", "synchronised_mirrors")}


def _count(cell: str) -> int | None:
    return int(cell) if cell.strip().isdigit() else None


def parse_queue_row(text: str, queue: str, names_by_ip: dict[str, str],
                    columns: tuple[str, ...] = PLACEMENT_COLUMNS) -> dict[str, Any] | None:
    """Takes `list_queues --silent` output of placement `columns` (name first), optionally
    followed by DEPTH_COLUMNS, a queue name and a map ip -> node.

    Returns the placement (as `parse_queue_placement`) and, when the depth columns are there,
    "ready", "unacked" and "messages" (None where the broker printed no number); None when the
    queue is not listed at all.
    """
    def nodes(cell: str) -> list[str]:
        return [names_by_ip.get(ip, f"rabbit@{ip}") for ip in _NODE_IP.findall(cell)]

    for line in text.splitlines():
        cells = line.split("\t")
        if len(cells) < len(columns) or cells[0] != queue:
            continue
        cell = dict(zip(columns, cells, strict=False))
        lead = nodes(cell.get("leader", "")) or nodes(cell.get("pid", ""))
        row: dict[str, Any] = {
            "type": cell.get("type", ""),
            "leader": lead[0] if lead else None,
            "members": sorted(nodes(cell.get("members", ""))),
            "mirrors": sorted(nodes(cell.get("slave_pids", ""))),
            "synchronised_mirrors": sorted(nodes(cell.get("synchronised_slave_pids", ""))),
        }
        depth = cells[len(columns):len(columns) + len(DEPTH_COLUMNS)]
        if depth:
            depth += [""] * (len(DEPTH_COLUMNS) - len(depth))
            row.update(ready=_count(depth[0]), unacked=_count(depth[1]),
                       messages=_count(depth[2]))
        return row
    return None


@dataclass(frozen=True)
class QueueDepth:
    """How many messages a queue holds, from a source that fails loudly instead of answering 0
    (each queue kind knows its source: workloads.kinds).

    `exists` is False when the queue's record is gone (deleted, or never recovered). For a stream, `last_offset` is the
    offset of its last committed message (-1 when empty) and ready/unacked are None.
    """

    exists: bool
    type: str | None = None
    ready: int | None = None
    unacked: int | None = None
    last_offset: int | None = None

    @property
    def empty(self) -> bool:
        """Returns whether the queue holds nothing (or does not exist)."""
        return not self.exists or (self.ready == 0 and self.unacked == 0)


# Every depth asks the queue's own record and its own process, through rabbitmqctl eval, never
# list_queues: list_queues leaves out, silently, a queue whose process does not answer (a mirrored
# queue's master hung after autoheal was listed by no node while its record and messages were
# there), and a quorum queue's counts in it are metrics the leader emits every few seconds (a
# passive declare answers 0 when the leader is slow). "absent" means the record is gone (the
# queue was deleted or never recovered); a queue process that does not answer makes the call time
# out, one that answers without counts prints them for the error: all loud.
def _queue_eval(queue: str, present: str) -> str:
    """Returns the eval expression that prints "absent" when the queue's record is gone, else
    runs `present` (Erlang, with the record bound to Q)."""
    name = queue.replace("\\", "\\\\").replace('"', '\\"')
    return (f'case rabbit_amqqueue:lookup(rabbit_misc:r(<<"/">>, queue, <<"{name}">>)) of '
            f'{{error, not_found}} -> io:format("absent~n"); {{ok, Q}} -> {present} end.')


def _counts_or_say(call: str) -> str:
    """Returns Erlang that prints "<ready> <unacked>" when `call` gives [{_, R}, {_, U}] of
    integers, else "no counts: <what it gave>"."""
    return (f'case catch {call} of [{{_, R}}, {{_, U}}] when is_integer(R), is_integer(U) -> '
            f'io:format("~p ~p~n", [R, U]); Other -> io:format("no counts: ~0p~n", [Other]) end')


def classic_depth_eval(queue: str) -> str:
    """Asks a classic queue's process (a mirrored queue's master) for its ready and unacked
    counts."""
    return _queue_eval(queue, _counts_or_say(
        "rabbit_amqqueue:info(Q, [messages_ready, messages_unacknowledged])"))


def quorum_depth_eval(queue: str, timeout_ms: int, mfa: bool = False) -> str:
    """Asks a quorum queue's Raft leader for its ready and checked-out counts, each query with
    a timeout (ra:leader_query/3), the query a fun, or an {M, F, A} tuple when `mfa` (Ra 3,
    RabbitMQ 4.3: its leader_query takes only a tuple, and a fun raises function_clause)."""
    query = ("{{rabbit_fifo, query_messages_{}, []}}" if mfa
             else "fun rabbit_fifo:query_messages_{}/1")
    leader = f"ra:leader_query(amqqueue:get_pid(Q), {query}, {timeout_ms})"
    both = (f'[{{ready, element(2, element(2, {leader.format("ready")}))}}, '
            f'{{checked_out, element(2, element(2, {leader.format("checked_out")}))}}]')
    return _queue_eval(queue, _counts_or_say(both))


def exists_eval(queue: str) -> str:
    """Asks whether the queue's record exists: prints "absent" or "present"."""
    return _queue_eval(queue, 'io:format("present~n")')


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def parse_depth(text: str, kind: str) -> QueueDepth:
    """Takes the output of a depth eval and the queue's kind. Returns the depth. Raises
    ValueError when it is neither two counts nor "absent"."""
    first = _first_line(text)
    if first == "absent":
        return QueueDepth(False)
    ready, _, unacked = first.partition(" ")
    if not (ready.isdigit() and unacked.isdigit()):
        raise ValueError(f"no {kind} queue depth: {text.strip()[:200]!r}")
    return QueueDepth(True, kind, int(ready), int(unacked))


def parse_exists(text: str) -> bool:
    """Takes the output of exists_eval. Returns whether the record exists. Raises ValueError."""
    first = _first_line(text)
    if first not in ("absent", "present"):
        raise ValueError(f"unexpected answer to whether the queue exists: {text.strip()[:200]!r}")
    return first == "present"


def parse_effective_policy(queues: str, policies: str, queue: str) -> dict[str, Any] | None:
    """Takes `list_queues --formatter json name policy` output (the policy in effect on each
    queue, by name: 3.10 has no column with its definition), `list_policies --formatter json`
    output and a queue name. Returns {"policy": name or None, "definition": that policy's keys}
    for the queue, or None when it is not listed. Raises ValueError for output that is not
    that, or a policy in effect that list_policies does not list."""
    rows, defined = json.loads(queues), json.loads(policies)
    if not isinstance(rows, list) or not isinstance(defined, list):
        raise ValueError(f"unexpected list_queues/list_policies output: {queues.strip()[:200]!r}")
    row = next((r for r in rows if isinstance(r, dict) and r.get("name") == queue), None)
    if row is None:
        return None
    name = row.get("policy") or None
    if name is None:
        return {"policy": None, "definition": {}}
    policy = next((p for p in defined if isinstance(p, dict) and p.get("name") == name), None)
    if policy is None:
        raise ValueError(f"policy {name!r} is in effect on {queue} but not listed")
    definition = policy.get("definition")
    if isinstance(definition, str):  # some releases print the definition as JSON text
        definition = json.loads(definition)
    return {"policy": name, "definition": definition if isinstance(definition, dict) else {}}


def policy_mismatch(asked: Mapping[str, Any], applied: Mapping[str, Any] | None) -> list[str]:
    """Takes a policy definition the harness set and what the broker says is in effect on the
    queue (parse_effective_policy). Returns a phrase for each key that did not take effect as
    asked (empty when all did)."""
    if applied is None:
        return ["the queue is not listed"]
    have = applied.get("definition") or {}
    return [f"{k} is {have.get(k, 'not set')!r}, not {v!r}" for k, v in asked.items()
            if have.get(k) != v]


def parse_stream_end(text: str) -> int:
    """Takes `rabbitmq-streams stream_status --formatter json` output. Returns the highest
    committed offset any member reports (-1 for an empty stream). Raises ValueError."""
    rows = json.loads(text)
    offsets = [r.get("committed_offset") for r in rows if isinstance(r, dict)]
    known = [o for o in offsets if isinstance(o, int)]
    if not known:
        raise ValueError(f"no committed offset in stream_status: {text.strip()[:200]!r}")
    return max(known)


class RabbitAdmin:
    """Queue queries and policies on a RabbitMQ cluster, through its broker's CLI calls.

    Takes the cluster's RabbitBroker (its nodes and `ctl`).
    """

    def __init__(self, broker: RabbitBroker) -> None:
        self.broker = broker
        self.nodes = broker.nodes
        # The placement columns the broker's release has (4.0 has no mirror columns).
        self.columns: tuple[str, ...] = broker.release.placement_columns

    def _names_by_ip(self) -> dict[str, str]:
        return {x.ip: x.name for x in self.nodes}

    def set_policy(self, name: str, queue: str, definition: Mapping[str, Any],
                   priority: int = 1) -> None:
        """Takes a policy name, the queue it applies to (that name exactly) and its definition.
        Sets it, through the first node. Raises RemoteError when the broker refuses."""
        pattern = "^" + queue.replace(".", r"\.") + "$"
        self.broker.ctl(self.nodes[0], "set_policy", "--apply-to", "queues", "--priority",
                        str(priority), name, pattern, json.dumps(definition))

    def effective_policy(self, queue: str, timeout: float = 20.0) -> dict[str, Any] | None:
        """Asks the first node which policy is in effect on the queue and its definition.
        Returns parse_effective_policy's dict (None: no such queue). Raises CommandTimeout,
        RemoteError or BrokerError."""
        node = self.nodes[0]
        policies = self.broker.ctl(node, "list_policies", "--silent", "--formatter", "json",
                                   timeout=timeout)
        return self._parsed(node, lambda out: parse_effective_policy(out, policies, queue),
                            "list_queues", "--silent", "--formatter", "json", "name", "policy",
                            timeout=timeout)

    def queue_placement(self, queue: str) -> dict[str, Any]:
        """Returns where the queue lives: leader/master and members/mirrors, as short node names.

        Asks each node in turn until one answers. Returns {} when none does or
        the queue does not exist.
        """
        for n in self.nodes:
            try:
                out = self.broker.ctl(n, "list_queues", "--silent", *self.columns, timeout=10)
            except RemoteError:
                continue
            return parse_queue_placement(out, queue, self._names_by_ip(), self.columns)
        return {}

    def queue_leader(self, queue: str) -> str | None:
        """Returns the short name of the node hosting the queue's leader or master."""
        return self.queue_placement(queue).get("leader")

    def queue_stats(self, node: Node, queue: str, timeout: float = 10.0) -> dict[str, Any] | None:
        """Asks one node where the queue lives and how many messages it holds (the count comes
        from the queue's leader or master, as that node reaches it).

        Returns `parse_queue_row`'s dict, or None when the node lists no such queue. Raises
        CommandTimeout or RemoteError when the node does not answer: never a silent 0.
        """
        out = self.broker.ctl(node, "list_queues", "--silent", *self.columns, *DEPTH_COLUMNS,
                              timeout=timeout)
        return parse_queue_row(out, queue, self._names_by_ip(), self.columns)

    def _parsed(self, node: Node, parse: Callable[[str], T], *args: str, timeout: float,
                tool: str = "rabbitmqctl") -> T:
        """Runs a CLI tool against the node and parses its output; output the parser refuses
        raises BrokerError naming the node."""
        out = self.broker.ctl(node, *args, tool=tool, timeout=timeout)
        try:
            return parse(out)
        except ValueError as e:
            raise BrokerError(f"{node.name}: {e}") from e

    def classic_depth(self, node: Node, queue: str, timeout: float = 20.0) -> QueueDepth:
        """Asks a classic queue's process (a mirrored queue's master), through the node, for its
        ready and unacked counts. Returns the QueueDepth (exists False when the queue's record
        is gone). Raises CommandTimeout, RemoteError or BrokerError when it does not answer."""
        return self._parsed(node, lambda out: parse_depth(out, "classic"),
                            "eval", classic_depth_eval(queue), timeout=timeout)

    def quorum_depth(self, node: Node, queue: str, timeout: float = 20.0) -> QueueDepth:
        """Asks a quorum queue's Raft leader, through the node, for its ready and checked-out
        counts. Returns the QueueDepth (exists False when the queue's record is gone). Raises
        CommandTimeout, RemoteError or BrokerError when the leader does not answer."""
        return self._parsed(node, lambda out: parse_depth(out, "quorum"), "eval",
                            quorum_depth_eval(queue, int(timeout * 1000 / 3),
                                              self.broker.release.ra_query_mfa),
                            timeout=timeout)

    def queue_exists(self, node: Node, queue: str, timeout: float = 20.0) -> bool:
        """Asks the node whether the queue's record exists. Raises CommandTimeout, RemoteError or
        BrokerError when it does not answer."""
        return self._parsed(node, parse_exists, "eval", exists_eval(queue), timeout=timeout)

    def stream_end(self, node: Node, queue: str, timeout: float = 20.0) -> int:
        """Returns a stream's last committed offset (-1 when empty), as its members report it
        through the node. Raises CommandTimeout, RemoteError or BrokerError."""
        return self._parsed(node, parse_stream_end, "stream_status", queue, "--formatter", "json",
                            tool="rabbitmq-streams", timeout=timeout)

