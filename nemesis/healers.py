"""The healers: each ends every fault of one kind on every node, whatever happened before.

`HEALERS` maps heal kinds (a fault's `FaultInfo.heals`) to functions, in the
order the interpreter applies them: resume paused brokers, then open the
network, then remove qdiscs, then start stopped brokers (a broker boots only
once it can reach its peers); then, on the running brokers, undo RabbitMQ's
own operations (clusters.rabbitmq_ops, through the broker's CLI): revive the
drained nodes, add back the quorum members the ledger says were removed, and
set every node's memory and disk limits back to its configuration. "none"
heals nothing (a leader transfer leaves nothing to undo). `FaultBase` gives a
fault its `heal_all` through them. Healers log and report a node that fails;
they never raise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from clusters.base import Node
from clusters.rabbitmq_ops import (
    add_member,
    is_drained,
    parse_drained,
    restore_disk_limit,
    restore_memory_limit,
    restored,
    revive,
)
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


# The ledger's kind for quorum members removed: (queue, node name) items.
MEMBERSHIP = "membership"


def heal_maintenance(ctx: FaultContext) -> dict[str, str]:
    """Takes the context. Revives every running broker that says it is drained (or will not say
    what it is). Returns outcomes by node."""

    def revive_if_drained(node: Node) -> str:
        if ctx.broker.beam_pid(node) is None:
            return "not running"
        try:
            drained = parse_drained(ctx.operate(node, is_drained()))
        except ValueError:
            drained = True  # it would not say: revive, which is harmless on a node in service
        if not drained:
            return "not drained"
        ctx.operate(node, revive())
        return "revived"

    return _each(ctx, "maintenance", revive_if_drained)


def heal_membership(ctx: FaultContext) -> dict[str, str]:
    """Takes the context. Adds back, one after another, each quorum member the ledger says a
    fault removed. Returns outcomes by node ({} when none was removed)."""
    out: dict[str, str] = {}
    for queue, name in ctx.ledger.items(MEMBERSHIP):
        node = ctx.node(name)
        try:
            ctx.operate(node, add_member(queue, node.erlang_name))
        except Exception as e:
            log.error("heal membership: adding %s back to %s failed: %s", name, queue,
                      describe_error(e))
            out[name] = f"error: {describe_error(e)}"
            continue
        ctx.ledger.done(MEMBERSHIP, (queue, name))
        out[name] = f"member of {queue}"
    return out


def heal_alarms(ctx: FaultContext) -> dict[str, str]:
    """Takes the context. Sets every running broker's memory high watermark and free-disk limit
    back to its configuration (which clears an alarm the harness set). Returns outcomes."""

    def restore(node: Node) -> str:
        if ctx.broker.beam_pid(node) is None:
            return "not running"
        memory = restored(ctx.operate(node, restore_memory_limit()))
        disk = restored(ctx.operate(node, restore_disk_limit()))
        return f"memory high watermark {memory}, disk free limit {disk}"

    return _each(ctx, "alarm", restore)


def heal_nothing(ctx: FaultContext) -> dict[str, str]:
    """Takes the context. Does nothing (the fault leaves nothing to undo). Returns {}."""
    return {}


HEALERS: dict[str, Callable[[FaultContext], dict[str, str]]] = {
    "pause": heal_paused,
    "iptables": heal_iptables,
    "tc": heal_tc,
    "process": heal_processes,
    "maintenance": heal_maintenance,
    MEMBERSHIP: heal_membership,
    "alarm": heal_alarms,
    "none": heal_nothing,
}


class FaultBase:
    """The shared part of the faults here: `heal_all` through HEALERS."""

    info: FaultInfo

    def heal_all(self, ctx: FaultContext) -> dict[str, str]:
        """Takes the context. Runs this fault's healer on every node. Returns outcomes by node."""
        return HEALERS[self.info.heals](ctx)
