"""Tests for nemesis.options: the options, their fault entries and their validation."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from nemesis.errors import NemesisConfigError
from nemesis.faults import fault_names
from nemesis.options import NemesisOptions
from nemesis.schedule import plan

NODES = ["n1", "n2", "n3"]


def test_defaults_are_valid() -> None:
    opts = NemesisOptions()
    assert opts.validate(NODES) is opts


def bad(**changes: object) -> NemesisOptions:
    return replace(NemesisOptions(), **changes)  # type: ignore[arg-type]


def test_unknown_fault_lists_the_known_ones() -> None:
    with pytest.raises(NemesisConfigError) as e:
        bad(faults=("partition-halves", "partition-sideways")).validate()
    assert "partition-sideways" in str(e.value)
    for name in fault_names():
        assert name in str(e.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"faults": "kill"}, "tuple of fault names"),
        ({"faults": ["kill"]}, "tuple of fault names"),
        ({"interval_s": -1}, "interval_s must be > 0"),
        ({"interval_s": 0}, "interval_s must be > 0"),
        ({"duration_s": -0.5}, "duration_s must be > 0"),
        ({"duration_s": 0}, "duration_s must be > 0"),
        ({"duration_s": math.nan}, "duration_s must be a finite number"),
        ({"interval_s": math.inf}, "interval_s must be a finite number"),
        ({"interval_s": "10"}, "interval_s must be a finite number"),
        ({"command_timeout_s": 0}, "command_timeout_s must be > 0"),
        ({"heal_wait_s": -1}, "heal_wait_s must be >= 0"),
        ({"packet_loss": 0}, r"packet_loss is a probability in \(0, 1\]"),
        ({"packet_loss": 1.5}, "packet_loss is a probability"),
        ({"packet_scope": "some"}, "packet_scope must be one of peers, all"),
        ({"bandwidth_kbit": 0}, "bandwidth_kbit must be > 0"),
        ({"bandwidth_burst_bytes": 100}, "must hold a full packet"),
        ({"delay_ms": -5}, "delay_ms must be >= 0"),
        ({"duplicate_pct": 150}, "duplicate_pct is a percentage"),
        ({"faults": ("netem-reorder",), "delay_ms": 0}, "netem-reorder needs delay_ms"),
        ({"targets": ""}, "targets must be one of"),
        ({"targets": "n1,n9"}, "n9"),
    ],
)
def test_bad_options(changes: dict[str, object], message: str) -> None:
    with pytest.raises(NemesisConfigError, match=message):
        bad(**changes).validate(NODES)


def test_fault_needing_more_nodes_than_the_cluster_has() -> None:
    opts = NemesisOptions(faults=("partition-majorities-ring",))
    opts.validate(NODES)
    with pytest.raises(NemesisConfigError, match="needs at least 3 nodes; the cluster has 2"):
        opts.validate(["n1", "n2"])


def test_needs_queue() -> None:
    assert NemesisOptions(faults=("kill",)).needs_queue() == ()
    assert NemesisOptions(faults=("partition-leader", "kill")).needs_queue() == (
        "partition-leader",
    )
    assert NemesisOptions(faults=("kill",), targets="leader").needs_queue() == ("targets=leader",)


def test_to_dict_from_dict_round_trip() -> None:
    opts = NemesisOptions(faults=("kill", "partition-bridge"), interval_s=1.5, targets="n1,n2")
    data = json.loads(json.dumps(opts.to_dict()))
    assert data["faults"] == ["kill", "partition-bridge"]
    assert NemesisOptions.from_dict(data) == opts


def test_from_dict_rejects_unknown_keys_and_bad_values() -> None:
    with pytest.raises(NemesisConfigError, match="unknown nemesis option.*intervall"):
        NemesisOptions.from_dict({"intervall": 3})
    with pytest.raises(NemesisConfigError, match="unknown fault"):
        NemesisOptions.from_dict({"faults": ["nope"]})


def test_cycle_plays_the_faults_in_order_and_entries_carry_their_targets() -> None:
    opts = NemesisOptions(faults=("stop@follower", "kill@leader"), order="cycle")
    assert opts.validate(NODES) is opts
    assert [s.fault for s in plan(opts, 1, 8)[1::2]] == ["stop@follower", "kill@leader"] * 2
    assert opts.fault_names() == ("stop", "kill")
    assert opts.needs_queue() == ("stop@follower", "kill@leader")


def test_bad_entries_and_orders_are_refused() -> None:
    with pytest.raises(NemesisConfigError, match="unknown fault"):
        NemesisOptions(faults=("explode@leader",)).validate(NODES)
    with pytest.raises(NemesisConfigError, match="n9"):
        NemesisOptions(faults=("kill@n9",)).validate(NODES)
    with pytest.raises(NemesisConfigError, match="order"):
        NemesisOptions(order="sorted").validate(NODES)  # type: ignore[arg-type]


def test_an_entry_carries_its_own_targets_and_options() -> None:
    from nemesis.options import FaultEntry

    entry = FaultEntry.parse("kill@n1+n3:duration=10:interval=20")
    assert (entry.fault, entry.targets) == ("kill", "n1,n3")
    assert dict(entry.settings) == {"duration_s": 10.0, "interval_s": 20.0}
    assert FaultEntry.parse("kill") == FaultEntry("kill", "kill")
    loss = FaultEntry.parse("packet-loss@n2:packet_loss=0.5:packet_scope=all")
    assert dict(loss.settings) == {"packet_loss": 0.5, "packet_scope": "all"}
    opts = NemesisOptions(faults=("kill", "kill@leader:duration=10", "packet-loss@n2:packet_loss=0.5"),
                          duration_s=3, packet_loss=0.1).validate(NODES)
    assert opts.resolve("kill") is opts
    assert (opts.resolve("kill@leader:duration=10").duration_s,
            opts.resolve("kill@leader:duration=10").targets) == (10.0, "leader")
    assert opts.resolve("packet-loss@n2:packet_loss=0.5").packet_loss == 0.5
    assert opts.resolve("packet-loss@n2:packet_loss=0.5").duration_s == 3
    assert opts.fault_names() == ("kill", "packet-loss")
    assert opts.needs_queue() == ("kill@leader:duration=10",)
    assert NemesisOptions.from_dict(json.loads(json.dumps(opts.to_dict()))) == opts


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("kill:duration", r"'duration' is not KEY=VALUE \(e.g. duration=10\)"),
        ("kill:duration=", "is not KEY=VALUE"),
        ("kill@leader:", "'' is not KEY=VALUE"),
        ("kill:duration=ten", "duration must be a number, got 'ten'"),
        ("kill:duration=inf", "duration must be a finite number"),
        ("kill:duration=-1", r"fault entry 'kill:duration=-1': duration_s must be > 0"),
        ("kill:duration=1:duration=2", "duration is given twice"),
        ("kill:packet_loss=0.5", "kill takes no option 'packet_loss'; it takes duration, interval"),
        ("packet-loss:loss=0.5", "it takes duration, interval, packet_loss, packet_scope"),
        ("packet-loss:packet_loss=2", r"packet_loss is a probability in \(0, 1\]"),
        ("bandwidth:bandwidth_kbit=1.5", "bandwidth_kbit must be a whole number"),
        ("netem-reorder:delay_ms=0", "netem-reorder needs delay_ms > 0"),
        ("partition-halves@n1", "partition-halves picks its own nodes and takes no targets"),
        ("kill@n9:duration=5", "n9"),
        ("explode:duration=5", "unknown fault 'explode'"),
    ],
)
def test_bad_entries_are_refused_with_what_is_wrong(entry: str, message: str) -> None:
    with pytest.raises(NemesisConfigError, match=message):
        NemesisOptions(faults=("kill", entry)).validate(NODES)
