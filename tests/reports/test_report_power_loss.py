"""The strength table's cell for a power loss (issue 32): the bytes and files its layers dropped,
in total and per node, before its effects; other faults' cells are as before."""

from __future__ import annotations

from reports.report_strength import dropped_text, fault_cells

LOSS = {"kind": "power-loss", "noticed": True, "noticed_ms": 800.0, "effects": [],
        "at_risk": {"count": 120, "source": "history"},
        "dropped": {"nodes": {"n2": {"bytes": 4096, "files": 1},
                              "n1": {"bytes": 8192, "files": 2}},
                    "bytes": 12288, "files": 3}}


def test_the_effects_cell_says_what_was_dropped_per_node() -> None:
    assert dropped_text(LOSS) == ("dropped 12,288 unsynced bytes in 3 files "
                                  "(n1: 8,192 B in 2; n2: 4,096 B in 1)")
    _, effects, _ = fault_cells(LOSS)
    assert effects.text == ("dropped 12,288 unsynced bytes in 3 files "
                            "(n1: 8,192 B in 2; n2: 4,096 B in 1); none seen")


def test_the_cell_says_how_old_the_oldest_dropped_write_was_where_the_layers_said() -> None:
    aged = {**LOSS, "dropped": {**LOSS["dropped"], "oldest_unsynced_s": 33.04}}
    assert dropped_text(aged) == ("dropped 12,288 unsynced bytes in 3 files (n1: 8,192 B in 2; "
                                  "n2: 4,096 B in 1); the oldest written 33.0 s before the cut")


def test_a_fault_without_a_dropped_entry_keeps_its_cell() -> None:
    kill = {k: v for k, v in LOSS.items() if k != "dropped"}
    assert dropped_text(kill) is None
    assert fault_cells(kill)[1].text == "none seen"
    assert dropped_text({"dropped": "garbage"}) is None


def test_a_node_that_did_not_boot_again_is_said_in_the_effects_cell() -> None:
    unbooted = {**LOSS, "effects": [{"kind": "node-did-not-boot", "node": "n1",
                                     "at_ms": 290400.0, "evidence": "n1/startup.out:428",
                                     "text": "n1 did not boot: error:{case_clause,{ok,[]}}"}]}
    assert fault_cells(unbooted)[1].text == (
        "dropped 12,288 unsynced bytes in 3 files (n1: 8,192 B in 2; n2: 4,096 B in 1); "
        "n1 did not boot again at 290.4 s")
