"""RabbitMQ's own operations as faults: a leader transfer, a member removed, maintenance, alarms.

Each asks RabbitMQ, through its own CLI (`FaultContext.operate`: the broker's
`ctl`, with a hard timeout, through the release's launcher), to do at start
what an operator would, and to undo it at stop; the commands are
clusters.rabbitmq_ops's.

- `LeaderTransfer`: hands the queue's leadership from its leader's node to another of its
  members, picked at random, asked of the server itself (rabbitmq-queues rebalance would
  never move the leader of one queue); stop asks where the leader is now (nothing to undo).
- `MemberRemoval`: removes the queue's members on the target nodes, one membership change at
  a time as Raft makes them, each noted in the ledger before it is asked for (so the heal
  adds back even a half-done removal); stop adds them back.
- `OnTargets`: one command on every target at once at start, its inverse on the same nodes
  at stop: maintenance mode (drain / revive), the memory and the disk alarm (a limit that
  trips it / the configured limit).

Every one of them checks before the test that the broker runs the CLI (`preflight`).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from clusters.base import Node
from clusters.rabbitmq_ops import (
    Command,
    add_member,
    delete_member,
    parse_transfer,
    transfer_leadership,
)
from nemesis.errors import FaultError, FaultUnsupported
from nemesis.healers import MEMBERSHIP, FaultBase
from nemesis.protocol import (
    Description,
    FaultContext,
    FaultInfo,
    describe_error,
    on_nodes,
    raise_for_errors,
)

log = logging.getLogger(__name__)


class Operation(FaultBase):
    """What the operations share: their declaration, and the check that the broker runs the
    CLI."""

    def __init__(self, info: FaultInfo) -> None:
        self.info = info

    def preflight(self, ctx: FaultContext) -> None:
        """Takes the context. Returns None when the broker runs RabbitMQ's CLI tools.

        Raises FaultUnsupported when it does not.
        """
        if not ctx.can_operate():
            raise FaultUnsupported(f"{self.info.name} asks RabbitMQ's CLI tools, which this "
                                   f"cluster's broker does not run")


def _names(ctx: FaultContext) -> dict[str, str]:
    """Returns each node's short name by its Erlang name."""
    return {n.erlang_name: n.name for n in ctx.nodes}


class LeaderTransfer(Operation):
    """Hands the queue's leadership to another of its members at start; stop looks where it
    is."""

    def __init__(self, info: FaultInfo) -> None:
        super().__init__(info)
        self._from: str | None = None

    def start(self, ctx: FaultContext, rng: random.Random) -> Description:
        """Takes the context and a Random. Transfers the queue's leadership from its leader to
        a random other member. Returns the nodes (the old leader), from, to and what the server
        said leads.

        Raises FaultError when the queue has no other member or the server would not transfer.
        """
        queue = ctx.queue_name()
        leader = ctx.leader()
        self._from = leader
        others = ctx.followers()
        if not others:
            raise FaultError(f"queue {queue!r} has no member besides its leader on {leader} "
                             f"to hand leadership to")
        to = rng.choice(others)
        out = ctx.operate(ctx.node(leader), transfer_leadership(queue, ctx.node(to).erlang_name))
        try:
            said = parse_transfer(out)
        except ValueError as e:
            raise FaultError(f"queue {queue!r} from {leader} to {to}: {e}") from e
        return {"fault": self.info.name, "nodes": [leader], "queue": queue, "from": leader,
                "to": to, "leader": _names(ctx).get(said, said)}

    def stop(self, ctx: FaultContext) -> Description:
        """Takes the context. Asks where the queue's leader is now (nothing to undo). Returns
        it ("leader": None and an "error" when the broker does not say)."""
        old, self._from = self._from, None
        out: Description = {"fault": self.info.name, "nodes": [old] if old else []}
        try:
            out["leader"] = ctx.leader()
        except Exception as e:
            out.update(leader=None, error=describe_error(e))
        return out


class MemberRemoval(Operation):
    """Removes the queue's members on the target nodes at start; adds them back at stop."""

    def __init__(self, info: FaultInfo) -> None:
        super().__init__(info)
        self._hit: list[Node] = []
        self._queue: str | None = None

    def start(self, ctx: FaultContext, rng: random.Random) -> Description:
        """Takes the context and a Random. Removes the queue's member on each target, one
        after another. Returns the nodes and the queue.

        Raises FaultError naming each node whose member could not be removed (the server
        refuses to remove the last one).
        """
        queue = ctx.queue_name()
        targets = ctx.targets(rng)
        self._hit, self._queue = targets, queue
        errors: dict[str, Exception] = {}
        for node in targets:
            # Noted first: a removal that times out may still have happened.
            ctx.ledger.note(MEMBERSHIP, (queue, node.name))
            try:
                ctx.operate(node, delete_member(queue, node.erlang_name))
            except Exception as e:
                errors[node.name] = e
        raise_for_errors(f"{self.info.name} of {queue}", errors)
        return {"fault": self.info.name, "nodes": [n.name for n in targets], "queue": queue}

    def stop(self, ctx: FaultContext) -> Description:
        """Takes the context. Adds the queue's member back on each node it was removed from, one
        after another. Returns the nodes and what each did.

        Raises FaultError naming each node that could not be added back (the heal tries again).
        """
        hit, queue, self._hit, self._queue = self._hit, self._queue, [], None
        outcome: dict[str, str] = {}
        errors: dict[str, Exception] = {}
        for node in hit:
            assert queue is not None
            try:
                ctx.operate(node, add_member(queue, node.erlang_name))
            except Exception as e:
                errors[node.name] = e
                continue
            ctx.ledger.done(MEMBERSHIP, (queue, node.name))
            outcome[node.name] = "added"
        raise_for_errors(f"{self.info.name} undo", errors)
        return {"fault": self.info.name, "nodes": [n.name for n in hit], "queue": queue,
                "outcome": outcome}


class OnTargets(Operation):
    """Runs one command on every target at once at start and its inverse on the same nodes at
    stop. `said` turns the inverse's output into each node's outcome; `extra` goes into the
    start's description (the alarm's resource)."""

    def __init__(self, info: FaultInfo, act: Callable[[], Command], undo: Callable[[], Command],
                 said: Callable[[str], str] = lambda _out: "done",
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__(info)
        self._act, self._undo, self._said = act, undo, said
        self._extra = dict(extra or {})
        self._hit: list[Node] = []

    def start(self, ctx: FaultContext, rng: random.Random) -> Description:
        """Takes the context and a Random. Runs the command on the targets at once. Returns
        them."""
        targets = ctx.targets(rng)
        self._hit = targets  # every target: the inverse is safe on all of them
        _, errors = on_nodes(targets, lambda node: ctx.operate(node, self._act()))
        raise_for_errors(self.info.name, errors)
        return {"fault": self.info.name, "nodes": [n.name for n in targets], **self._extra}

    def stop(self, ctx: FaultContext) -> Description:
        """Takes the context. Runs the inverse on the nodes hit. Returns what each said."""
        hit, self._hit = self._hit, []
        results, errors = on_nodes(hit, lambda node: self._said(ctx.operate(node, self._undo())))
        raise_for_errors(f"{self.info.name} undo", errors)
        return {"fault": self.info.name, "nodes": [n.name for n in hit],
                "outcome": {n.name: results[n.name] for n in hit}}
