"""The cluster benchmark's table and its refusal of unknown release lines (no cluster)."""

from bench.cluster import PHASES, main, report


def test_the_table_gives_each_phase_median_and_the_ready_spread():
    rounds = {"3.10": [dict.fromkeys(PHASES, 1.0) | {"ready": 6.0},
                       dict.fromkeys(PHASES, 2.0) | {"ready": 12.0},
                       dict.fromkeys(PHASES, 3.0) | {"ready": 18.0}]}
    lines = report(rounds).splitlines()
    assert lines[0].startswith("| release | rounds | namespaces | boot | form |")
    assert lines[2] == "| 3.10 | 3 | 2.0 | 2.0 | 2.0 | 2.0 | 2.0 | 2.0 | 12.0 / 6.0 / 18.0 |"


def test_an_unknown_release_line_exits_2(capsys):
    assert main(["--rabbitmq", "3.8", "--rounds", "1"]) == 2
    assert "unknown release(s): 3.8" in capsys.readouterr().err
