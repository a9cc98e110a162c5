"""The cluster benchmark's table and its refusal of unknown release lines (no cluster)."""

import os
from pathlib import Path

from bench.cluster import PHASES, main, report, round_logs


def test_the_table_gives_each_phase_median_the_cpu_spent_and_the_ready_spread():
    cpu = {"cpu_brokers": 9.0, "cpu_cli": 3.0}
    rounds = {"3.10": [dict.fromkeys(PHASES, 1.0) | cpu | {"ready": 6.0, "by_hand": 1},
                       dict.fromkeys(PHASES, 2.0) | cpu | {"ready": 12.0, "by_hand": 0},
                       dict.fromkeys(PHASES, 3.0) | cpu | {"ready": 18.0, "by_hand": 2}]}
    lines = report(rounds).splitlines()
    assert lines[0].startswith("| release | rounds | namespaces | boot | form |")
    assert lines[0].endswith("| cpu_brokers | cpu_cli | joined by hand | ready (median / min / max) |")
    assert lines[2] == ("| 3.10 | 3 | 2.0 | 2.0 | 2.0 | 2.0 | 2.0 | 2.0 | 9.0 | 3.0 | 3 | "
                        "12.0 / 6.0 / 18.0 |")


def test_cpu_seconds_are_read_from_proc():
    from bench.cluster import _cpu_seconds
    t0 = _cpu_seconds(os.getpid())
    sum(i * i for i in range(2_000_000))  # spend some CPU
    assert _cpu_seconds(os.getpid()) > t0


def test_an_unknown_release_line_exits_2(capsys):
    assert main(["--rabbitmq", "3.8", "--rounds", "1"]) == 2
    assert "unknown release(s): 3.8" in capsys.readouterr().err


def test_each_rounds_node_logs_have_a_folder_of_their_own():
    root = Path("/tmp/bench-logs")
    folders = {round_logs(root, line, k) for line in ("3.10", "4.3") for k in (1, 2)}
    assert len(folders) == 4 and all(f.parent == root for f in folders)
    assert round_logs(root, "4.3", 2) == root / "4.3-2"
