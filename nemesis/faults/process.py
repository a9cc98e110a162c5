"""Process faults: kill, stop and pause brokers, and restart them rolling or all at once.

All of them act through the `Broker` only. `NodeProcessFault` is Jepsen's
`node-start-stopper` (`jepsen/src/jepsen/nemesis.clj`): pick target nodes,
apply an action to each at once, and apply its inverse to the same nodes on
stop; it makes `kill` (SIGKILL, like Jepsen's db `kill!`), `stop` (graceful)
and `pause` (SIGSTOP, like `hammer-time`). Restoring a killed or stopped node
starts it only when its beam is not running, so a half-failed start is
safe to stop. Brokers are started all at once, never one after another: a
RabbitMQ node that was not the last to stop waits for its peers while it boots.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

from clusters.base import Broker, Node
from nemesis.errors import FaultError
from nemesis.healers import FaultBase
from nemesis.partition import shuffled
from nemesis.protocol import (
    Description,
    FaultContext,
    FaultInfo,
    describe_error,
    on_nodes,
    raise_for_errors,
)

log = logging.getLogger(__name__)

# Something done to one node's broker; returns a word saying what happened.
Action = Callable[[Broker, Node], str]


def kill(broker: Broker, node: Node) -> str:
    """Takes the broker and a node. Kills its beam with SIGKILL. Returns "killed"."""
    broker.kill(node)
    return "killed"


def stop_gracefully(broker: Broker, node: Node) -> str:
    """Takes the broker and a node. Stops its broker cleanly. Returns "stopped"."""
    broker.stop(node)
    return "stopped"


def pause(broker: Broker, node: Node) -> str:
    """Takes the broker and a node. Pauses its beam with SIGSTOP. Returns "paused"."""
    broker.pause(node)
    return "paused"


def resume(broker: Broker, node: Node) -> str:
    """Takes the broker and a node. Resumes its beam with SIGCONT. Returns "resumed"."""
    broker.resume(node)
    return "resumed"


def start_if_down(broker: Broker, node: Node) -> str:
    """Takes the broker and a node. Starts its broker unless its beam runs. Returns which."""
    if broker.beam_pid(node) is not None:
        return "running"
    broker.start(node)
    return "started"


def start_all_down(ctx: FaultContext, nodes: list[Node], what: str) -> dict[str, str]:
    """Takes the context, nodes and what for. Starts, all at once, those not running.

    Returns each node's outcome; raises FaultError when any start failed.
    """
    results, errors = on_nodes(nodes, lambda node: start_if_down(ctx.broker, node))
    raise_for_errors(what, errors)
    return {n.name: results[n.name] for n in nodes}


class NodeProcessFault(FaultBase):
    """Applies `act` to the target nodes on start and `undo` to the same nodes on stop."""

    def __init__(self, info: FaultInfo, act: Action, undo: Action) -> None:
        self.info = info
        self._act = act
        self._undo = undo
        self._hit: list[Node] = []

    def start(self, ctx: FaultContext, rng: random.Random) -> Description:
        """Takes the context and a Random. Acts on the targets at once. Returns them."""
        targets = ctx.targets(rng)
        # Remember every target, not only successes: undo is safe on all of them.
        self._hit = targets
        _, errors = on_nodes(targets, lambda node: self._act(ctx.broker, node))
        raise_for_errors(self.info.name, errors)
        return {"fault": self.info.name, "nodes": [n.name for n in targets]}

    def stop(self, ctx: FaultContext) -> Description:
        """Takes the context. Undoes the action on the nodes hit. Returns what each did."""
        hit, self._hit = self._hit, []
        results, errors = on_nodes(hit, lambda node: self._undo(ctx.broker, node))
        raise_for_errors(f"{self.info.name} undo", errors)
        return {
            "fault": self.info.name,
            "nodes": [n.name for n in hit],
            "outcome": {n.name: results[n.name] for n in hit},
        }


class RollingRestart(FaultBase):
    """Stops and starts each broker in turn (random order), waiting for each to boot."""

    def __init__(self, info: FaultInfo) -> None:
        self.info = info

    def start(self, ctx: FaultContext, rng: random.Random) -> Description:
        """Takes the context and a Random. Restarts every node in turn. Returns the order.

        Stops early, between nodes, when the context is cancelled. Raises
        FaultError naming the node where a stop or start failed.
        """
        order = shuffled(ctx.names, rng)
        done: list[str] = []
        for name in order:
            if ctx.cancel.is_set():
                log.info("rolling restart cancelled after %s", done)
                return {"fault": self.info.name, "nodes": done, "order": order, "cancelled": True}
            node = ctx.node(name)
            try:
                ctx.broker.stop(node)
                ctx.broker.start(node)
            except Exception as e:
                raise FaultError(
                    f"rolling restart failed at {name} (restarted before it: {done}): "
                    f"{describe_error(e)}"
                ) from e
            done.append(name)
        return {"fault": self.info.name, "nodes": done, "order": order}

    def stop(self, ctx: FaultContext) -> Description:
        """Takes the context. Starts any broker a failed restart left down. Returns outcomes."""
        outcome = start_all_down(ctx, ctx.nodes, "rolling restart recovery")
        return {"fault": self.info.name, "nodes": [], "outcome": outcome}


class FullRestart(FaultBase):
    """Stops every broker at start (random order); starts them all, at once, at stop.

    The cluster is down for the whole fault period.
    """

    def __init__(self, info: FaultInfo) -> None:
        self.info = info

    def start(self, ctx: FaultContext, rng: random.Random) -> Description:
        """Takes the context and a Random. Stops every broker in turn. Returns the order.

        Raises FaultError naming the node whose stop failed.
        """
        order = shuffled(ctx.names, rng)
        done: list[str] = []
        for name in order:
            try:
                ctx.broker.stop(ctx.node(name))
            except Exception as e:
                raise FaultError(
                    f"full restart failed to stop {name} (stopped before it: {done}): "
                    f"{describe_error(e)}"
                ) from e
            done.append(name)
        return {"fault": self.info.name, "nodes": done}

    def stop(self, ctx: FaultContext) -> Description:
        """Takes the context. Starts every broker that is down, all at once. Returns outcomes."""
        outcome = start_all_down(ctx, ctx.nodes, "full restart")
        return {"fault": self.info.name, "nodes": ctx.names, "outcome": outcome}
