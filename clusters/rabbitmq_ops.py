"""RabbitMQ's own operations as commands: what an operator does to a running cluster.

Pure: each builder returns a `Command` (the CLI tool, its arguments, a hard
timeout) that one node runs through the broker's `ctl` (clusters.base.BrokerCli:
RabbitBroker.ctl wraps it in the release's launcher, so it reaches a 4.0 root
filesystem as well), and each parser reads a tool's answer. The nemesis plays
them as faults (nemesis.faults.operations) and heals them (nemesis.healers).

- maintenance mode: `rabbitmq-upgrade drain` (the node closes its clients' connections,
  suspends its listeners, hands its quorum leaders over and stops its quorum members) and
  `rabbitmq-upgrade revive`; whether a node is drained, asked of the node itself by eval.
- a quorum queue's membership: `rabbitmq-queues delete_member --vhost / Q NODE` and
  `add_member` (both idempotent in the server: removing a non-member or adding a member
  answers ok; removing the last member is refused).
- a quorum queue's leadership: `rabbitmq-queues rebalance quorum` moves leaders only off a
  node holding more than its share (one queue on three nodes: a share of one), so with the
  harness's one queue it never moves; the transfer is asked of the server function rebalance
  calls, `rabbit_quorum_queue:transfer_leadership/2`, by eval.
- resource alarms: `set_vm_memory_high_watermark 0` (RabbitMQ's documented way to block every
  publisher) and `set_disk_free_limit` of an exabyte; each restored from the node's own
  configuration by eval (the CLI changes the monitor, never the application environment it
  was started from), so a restore needs no memory of what was there and can run any time.

These commands are the same on 3.10 and 4.0 (read from both lines' CLI and server sources,
3.10.8 and 4.0.5); a release on which one differs says so in its `clusters.releases.Release`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

CTL: Final = "rabbitmqctl"
QUEUES: Final = "rabbitmq-queues"
UPGRADE: Final = "rabbitmq-upgrade"
VHOST: Final = "/"
# Hard timeouts (s): a drain hands leaders over and stops members, a revive restarts them.
TIMEOUT_S: Final = 30.0
MAINTENANCE_TIMEOUT_S: Final = 120.0
# A free-disk limit no disk meets (1 EB): the disk alarm goes off at once.
DISK_ALARM_LIMIT_BYTES: Final = 10**18
_MIGRATED = re.compile(r"^\{migrated,'?([^'}]+)'?\}$")


@dataclass(frozen=True)
class Command:
    """One CLI call: the tool (rabbitmqctl, rabbitmq-queues, rabbitmq-upgrade), its arguments
    after the node (`-n NODE` is the runner's), and its hard timeout in seconds."""

    tool: str
    args: tuple[str, ...]
    timeout_s: float = TIMEOUT_S

    def words(self) -> list[str]:
        """Returns the command as words, for descriptions and logs."""
        return [self.tool, *self.args]


def erlang_binary(text: str) -> str:
    """Takes text. Returns it as an Erlang binary literal, <<"text">>."""
    return '<<"' + text.replace("\\", "\\\\").replace('"', '\\"') + '">>'


def erlang_atom(text: str) -> str:
    """Takes text. Returns it as a quoted Erlang atom, 'text'."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _printed(expr: str) -> str:
    """Returns an eval expression that prints `expr`'s value on a line of its own."""
    return f'io:format("~p~n", [{expr}]).'


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0].strip() if text.strip() else ""


# -- maintenance mode ------------------------------------------------------------------------


def drain() -> Command:
    """Returns the command putting the node it runs against into maintenance mode."""
    return Command(UPGRADE, ("drain",), MAINTENANCE_TIMEOUT_S)


def revive() -> Command:
    """Returns the command taking the node it runs against out of maintenance mode."""
    return Command(UPGRADE, ("revive",), MAINTENANCE_TIMEOUT_S)


def is_drained() -> Command:
    """Returns the command asking the node whether it is in maintenance mode (parse_drained)."""
    return Command(CTL, ("eval", _printed(
        "rabbit_maintenance:is_being_drained_local_read(node())")))


def parse_drained(text: str) -> bool:
    """Takes is_drained's output. Returns whether the node is drained. Raises ValueError."""
    first = _first_line(text)
    if first not in ("true", "false"):
        raise ValueError(f"not an answer to whether the node is drained: {text.strip()[:200]!r}")
    return first == "true"


# -- a quorum queue's members and leader -----------------------------------------------------


def delete_member(queue: str, node: str) -> Command:
    """Takes a quorum queue's name and an Erlang node name. Returns the command removing the
    queue's member on that node."""
    return Command(QUEUES, ("delete_member", "--vhost", VHOST, queue, node))


def add_member(queue: str, node: str) -> Command:
    """Takes a quorum queue's name and an Erlang node name. Returns the command adding a member
    of the queue on that node."""
    return Command(QUEUES, ("add_member", "--vhost", VHOST, queue, node))


def transfer_leadership(queue: str, to: str) -> Command:
    """Takes a quorum queue's name and the Erlang node name of one of its members. Returns the
    command asking the queue's leader to hand leadership to that member (parse_transfer)."""
    lookup = f"rabbit_amqqueue:lookup(rabbit_misc:r({erlang_binary(VHOST)}, queue, " \
             f"{erlang_binary(queue)}))"
    call = (f"case {lookup} of {{ok, Q}} -> rabbit_quorum_queue:transfer_leadership(Q, "
            f"{erlang_atom(to)}); {{error, not_found}} -> {{not_migrated, no_such_queue}} end")
    return Command(CTL, ("eval", _printed(call)))


def parse_transfer(text: str) -> str:
    """Takes transfer_leadership's output. Returns the Erlang node the server says leads now
    (the old leader, when the new one is not elected yet). Raises ValueError with the server's
    answer when it did not transfer ({not_migrated, already_leader}, ...)."""
    first = _first_line(text)
    m = _MIGRATED.match(first)
    if m is None:
        raise ValueError(f"leadership not transferred: {(first or text.strip())[:200]}")
    return m.group(1)


# -- resource alarms ---------------------------------------------------------------------------


def memory_alarm() -> Command:
    """Returns the command setting the node's memory high watermark to 0: its memory alarm goes
    off at once, and every publisher in the cluster is blocked."""
    return Command(CTL, ("set_vm_memory_high_watermark", "0"))


def restore_memory_limit() -> Command:
    """Returns the command setting the node's memory high watermark back to its configured
    value (printed)."""
    return Command(CTL, ("eval",
                         "{ok, W} = application:get_env(rabbit, vm_memory_high_watermark), "
                         "ok = vm_memory_monitor:set_vm_memory_high_watermark(W), "
                         + _printed("W")))


def disk_alarm() -> Command:
    """Returns the command setting the node's free-disk limit past any disk: its disk alarm goes
    off at once, and every publisher in the cluster is blocked."""
    return Command(CTL, ("set_disk_free_limit", str(DISK_ALARM_LIMIT_BYTES)))


def restore_disk_limit() -> Command:
    """Returns the command setting the node's free-disk limit back to its configured value
    (printed)."""
    return Command(CTL, ("eval",
                         "{ok, D} = application:get_env(rabbit, disk_free_limit), "
                         "ok = rabbit_disk_monitor:set_disk_free_limit(D), "
                         + _printed("D")))


def restored(text: str) -> str:
    """Takes a restore command's output. Returns the value it restored, as printed."""
    return _first_line(text)
