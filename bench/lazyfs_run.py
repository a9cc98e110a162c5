"""What the lazyfs layer costs a real run: a scenario (default `healthy`) run without and with the
layer (`--unsynced-fs`), alternating, the same seed each time, and the confirmed publishes per
second each recorded over its main phase.

    python -m bench.lazyfs_run [--rabbitmq 4.3] [--rounds 3] [--rate 200] [--seed 4011]
                               [--scenario healthy] [--store store] [--json FILE]

Round i runs plain then layer when i is even, layer then plain when odd, so that a machine
that slows down or warms up over the bench weighs on both alike. Each run is `python -m harness
run` as a user would start it (its check included, so runs never overlap); its figures come from
its results.json (the checker's perf section: the main phase's `ok` publishes, its length, the
publish latency percentiles) and test.json, never recomputed from the history. The summary
gives each side's mean confirmed publishes/s, how much slower the layer is (by the means, and
the worst of the rounds' pairs), and the latency percentiles' medians. `--rate` is what the
workload offers (publishes/s in all): at a rate the machine keeps up with, both sides confirm
about what is offered and the difference shows mostly in latency; an offer above what the
machine can confirm measures the throughput the layer takes away. Only one cluster at a time:
run it when nothing else does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import store

PLAIN, LAYER = "plain", "lazyfs"


def figures(results: dict[str, Any], test: dict[str, Any]) -> dict[str, Any]:
    """Takes a run's results.json and test.json. Returns its figures: valid, the main phase's
    length (s), its confirmed publishes and their rate, the latency percentiles (ms)."""
    perf = results["perf"]
    start, end = perf["main_phase"]["start_ms"], perf["main_phase"]["end_ms"]
    main_s = (end - start) / 1000.0
    ok = perf["overall"]["ok"]
    latency = perf["overall"].get("latency_ms") or {}
    return {"valid": results["valid"], "main_phase_s": round(main_s, 3), "publishes_ok": ok,
            "ok_per_s": round(ok / main_s, 1) if main_s > 0 else None,
            "latency_ms": {k: latency.get(k) for k in ("p50", "p95", "p99", "max")},
            "unsynced_fs": bool(test["spec"].get("backend", {}).get("unsynced_fs"))}


def order(rounds: int) -> list[str]:
    """Takes the number of rounds. Returns the sides in the order they run: plain first in even
    rounds, the layer first in odd ones."""
    out: list[str] = []
    for i in range(rounds):
        out += [PLAIN, LAYER] if i % 2 == 0 else [LAYER, PLAIN]
    return out


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Takes the runs' figures, each with its `side` and `round`. Returns each side's mean
    ok/s and median latencies, the layer's cost by the means (`slower_pct`) and the worst
    round's (`worst_round_slower_pct`); None where a side has no rate."""
    out: dict[str, Any] = {}
    for side in (PLAIN, LAYER):
        mine = [r for r in runs if r["side"] == side and r.get("ok_per_s")]
        out[side] = {
            "runs": len(mine),
            "mean_ok_per_s": round(statistics.fmean(r["ok_per_s"] for r in mine), 1) if mine else None,
            "ok_per_s": [r["ok_per_s"] for r in mine],
            "median_latency_ms": {
                k: round(statistics.median(r["latency_ms"][k] for r in mine), 3)
                for k in ("p50", "p95", "p99") if mine and all(r["latency_ms"][k] is not None
                                                               for r in mine)},
        }
    plain, layer = out[PLAIN]["mean_ok_per_s"], out[LAYER]["mean_ok_per_s"]
    out["slower_pct"] = round(100.0 * (plain - layer) / plain, 1) if plain and layer else None
    worst = None
    for rnd in sorted({r["round"] for r in runs}):
        pair: dict[str, float] = {r["side"]: r["ok_per_s"] for r in runs
                                  if r["round"] == rnd and r.get("ok_per_s")}
        if PLAIN in pair and LAYER in pair:
            pct = 100.0 * (pair[PLAIN] - pair[LAYER]) / pair[PLAIN]
            worst = pct if worst is None else max(worst, pct)
    out["worst_round_slower_pct"] = round(worst, 1) if worst is not None else None
    return out


def newest_run(store: Path, scenario: str, before: set[Path]) -> Path:
    """Takes the store, the scenario and the run directories there before a run. Returns the one
    the run made; raises RuntimeError when there is not exactly one."""
    made = sorted(set((store / scenario).glob("*/")) - before)
    if len(made) != 1:
        raise RuntimeError(f"expected one new run under {store / scenario}, found {made}")
    return made[0]


def one_run(args: argparse.Namespace, side: str) -> dict[str, Any]:
    """Runs the scenario once, with the layer when `side` is LAYER. Returns its figures with its
    run directory and wall time."""
    before = set((args.store / args.scenario).glob("*/"))
    cmd = [sys.executable, "-m", "harness", "run", "--scenario", args.scenario, "--no-progress",
           "--rabbitmq", args.rabbitmq, "--seed", str(args.seed), "--rate", str(args.rate),
           "--store", str(args.store)] + (["--unsynced-fs"] if side == LAYER else [])
    started = time.monotonic()
    rc = subprocess.call(cmd)
    wall = time.monotonic() - started
    run_dir = newest_run(args.store, args.scenario, before)
    got = figures(store.read_json(run_dir / store.RESULTS), store.read_json(run_dir / store.TEST))
    if got["unsynced_fs"] != (side == LAYER):
        raise RuntimeError(f"{run_dir}: unsynced_fs is {got['unsynced_fs']}, expected the {side} side")
    return {"side": side, "run_dir": str(run_dir), "exit_code": rc, "wall_s": round(wall, 1), **got}


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the rounds, prints each run and the summary (and writes --json). Returns 0, or 1
    when a run was not valid (its figures are then no measure of the layer)."""
    parser = argparse.ArgumentParser(prog="python -m bench.lazyfs_run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rabbitmq", default="4.3")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=200.0,
                        help="publishes/s the workload offers (default the scenario's 200)")
    parser.add_argument("--seed", type=int, default=4011)
    parser.add_argument("--scenario", default="healthy")
    parser.add_argument("--store", type=Path, default=Path("store"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    runs = []
    for i, side in enumerate(order(args.rounds)):
        runs.append({"round": i // 2, **one_run(args, side)})
        r = runs[-1]
        print(f"round {r['round']} {side:>6}: {r['ok_per_s']} confirmed/s over {r['main_phase_s']} s, "
              f"p50 {r['latency_ms']['p50']} ms, p99 {r['latency_ms']['p99']} ms, valid {r['valid']} "
              f"({r['run_dir']})", flush=True)
    out: dict[str, Any] = {"what": f"{args.scenario} on RabbitMQ {args.rabbitmq}, seed {args.seed}, offered "
                   f"{args.rate:g} publishes/s, {args.rounds} rounds, without and with the lazyfs "
                   "layer (--unsynced-fs), alternating",
           "runs": runs, "summary": summary(runs)}
    s = out["summary"]
    print(f"plain {s[PLAIN]['mean_ok_per_s']} confirmed/s, lazyfs {s[LAYER]['mean_ok_per_s']}: "
          f"{s['slower_pct']}% slower (worst round {s['worst_round_slower_pct']}%)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0 if all(r["valid"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
