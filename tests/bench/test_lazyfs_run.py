"""bench.lazyfs_run: a run's figures from what the checker stored, the sides' order, the summary."""

from pathlib import Path

import pytest

from bench.lazyfs_run import LAYER, PLAIN, figures, newest_run, order, summary


def results(ok: int, start_ms: float, end_ms: float, p50: float = 10.0) -> dict:
    return {"valid": True, "perf": {"main_phase": {"start_ms": start_ms, "end_ms": end_ms},
                                    "overall": {"ok": ok, "latency_ms": {
                                        "p50": p50, "p95": 3 * p50, "p99": 5 * p50, "max": 90.0}}}}


def test_a_run_s_rate_is_its_confirmed_publishes_over_its_main_phase() -> None:
    got = figures(results(9000, 10_000.0, 70_000.0), {"spec": {"backend": {"unsynced_fs": True}}})
    assert got == {"valid": True, "main_phase_s": 60.0, "publishes_ok": 9000, "ok_per_s": 150.0,
                   "latency_ms": {"p50": 10.0, "p95": 30.0, "p99": 50.0, "max": 90.0},
                   "unsynced_fs": True}
    assert figures(results(1, 5.0, 5.0), {"spec": {}})["ok_per_s"] is None
    assert figures(results(1, 0.0, 1000.0), {"spec": {}})["unsynced_fs"] is False


def test_the_sides_alternate_which_goes_first() -> None:
    assert order(3) == [PLAIN, LAYER, LAYER, PLAIN, PLAIN, LAYER]
    assert order(1) == [PLAIN, LAYER]


def test_the_summary_gives_the_means_the_cost_and_the_worst_round() -> None:
    def run(side: str, rnd: int, rate: float, p50: float) -> dict:
        return {"side": side, "round": rnd, "ok_per_s": rate,
                "latency_ms": {"p50": p50, "p95": 2 * p50, "p99": 3 * p50}}
    s = summary([run(PLAIN, 0, 200.0, 10.0), run(LAYER, 0, 180.0, 12.0),
                 run(LAYER, 1, 190.0, 14.0), run(PLAIN, 1, 200.0, 8.0)])
    assert s[PLAIN]["mean_ok_per_s"] == 200.0 and s[LAYER]["mean_ok_per_s"] == 185.0
    assert s["slower_pct"] == 7.5 and s["worst_round_slower_pct"] == 10.0
    assert s[PLAIN]["median_latency_ms"] == {"p50": 9.0, "p95": 18.0, "p99": 27.0}
    assert s[LAYER]["ok_per_s"] == [180.0, 190.0]
    only_plain = summary([run(PLAIN, 0, 200.0, 10.0)])
    assert only_plain["slower_pct"] is None and only_plain["worst_round_slower_pct"] is None


def test_the_run_a_bench_made_is_the_one_new_directory(tmp_path: Path) -> None:
    (tmp_path / "healthy" / "a").mkdir(parents=True)
    before = set((tmp_path / "healthy").glob("*/"))
    (tmp_path / "healthy" / "b").mkdir()
    assert newest_run(tmp_path, "healthy", before).name == "b"
    with pytest.raises(RuntimeError, match="expected one new run"):
        newest_run(tmp_path, "healthy", set())
