"""The healers: each ends every fault of one kind on every node, whatever happened before.

`HEALERS` maps heal kinds (a fault's `FaultInfo.heals`) to functions, in the
order the interpreter applies them: resume paused brokers, then open the
network, then remove qdiscs, then start stopped brokers (a broker boots only
once it can reach its peers). `FaultBase` gives a fault its `heal_all`
through them. Healers log and report a node that fails; they never raise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from clusters.base import Node
from nemesis import net
from nemesis.protocol import FaultContext, FaultInfo, describe_error, on_nodes

log = logging.getLogger(__name__)


def _each(ctx: FaultContext, what: str, fn: Callable[[Node], str]) -> dict[str, str]:
    results, errors = on_nodes(ctx.nodes, fn)
    out = dict(results)
    for name, e in errors.items():
        log.error("heal %s on %s failed: %s", what, name, describe_error(e))
        out[name] = f"error: {describe_error(e)}"
    return {n: out[n] for n in ctx.names if n in out}


def heal_paused(ctx: FaultContext) -> dict[str, str]:
    """Takes the context. Resumes (SIGCONT) every running broker. Returns outcomes by node."""

    def resume(node: Node) -> str:
        if ctx.broker.beam_pid(node) is None:
            return "not running"
        ctx.broker.resume(node)
        return "resumed"

    return _each(ctx, "pause", resume)


def heal_iptables(ctx: FaultContext) -> dict[str, str]:
    """Takes the context. Flushes our iptables chains on every node. Returns outcomes by node."""

    def flush(node: Node) -> str:
        net.heal_iptables(node, ctx.timeout)
        return "flushed"

    return _each(ctx, "iptables", flush)


def heal_tc(ctx: FaultContext) -> dict[str, str]:
    """Takes the context. Removes the root qdisc of every node's interface. Returns outcomes."""

    def clear(node: Node) -> str:
        removed = net.clear_root_qdisc(node, node.interface, ctx.timeout)
        return "removed" if removed else "none"

    return _each(ctx, "tc", clear)


def heal_processes(ctx: FaultContext) -> dict[str, str]:
    """Takes the context. Starts every broker that is not running, all at once. Returns outcomes."""

    def start(node: Node) -> str:
        if ctx.broker.beam_pid(node) is not None:
            return "running"
        ctx.broker.start(node)
        return "started"

    return _each(ctx, "process", start)


HEALERS: dict[str, Callable[[FaultContext], dict[str, str]]] = {
    "pause": heal_paused,
    "iptables": heal_iptables,
    "tc": heal_tc,
    "process": heal_processes,
}


class FaultBase:
    """The shared part of the faults here: `heal_all` through HEALERS."""

    info: FaultInfo

    def heal_all(self, ctx: FaultContext) -> dict[str, str]:
        """Takes the context. Runs this fault's healer on every node. Returns outcomes by node."""
        return HEALERS[self.info.heals](ctx)
