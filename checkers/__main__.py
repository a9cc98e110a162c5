"""The checkers' CLI: python -m checkers HISTORY [options].

Checks a history, optionally writes results.json, prints a one-line verdict,
and exits 0 valid, 1 invalid, 2 unknown or bad input (shared/DESIGN.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from checkers.api import check_history, convert_to_parquet
from checkers.errors import HistoryError
from checkers.options import CheckOptions


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Takes argv. Returns the parsed options."""
    p = argparse.ArgumentParser(prog="python -m checkers", description=__doc__)
    p.add_argument("history", type=Path, help="history.jsonl, or a Parquet directory")
    p.add_argument("--spark-master", help="Spark master URL (default local[*])")
    p.add_argument("--out", type=Path, help="write results.json here")
    p.add_argument("--strict-order", action="store_true",
                   help="ordering includes redelivered deliveries (single active consumer)")
    p.add_argument("--flagged-duplicates-invalid", action="store_true",
                   help="duplicates flagged redelivered also make the queue invalid")
    p.add_argument("--unflagged-duplicates-valid", action="store_true",
                   help="duplicates without the redelivered flag do not make the queue invalid")
    p.add_argument("--no-require-drain", action="store_true",
                   help="judge lost messages even without a completed drain")
    p.add_argument("--parquet", type=Path, metavar="DIR",
                   help="convert the JSONL history to Parquet in DIR, then check that")
    p.add_argument("--work-dir", type=Path, help="scratch directory for Spark's tables")
    p.add_argument("--driver-memory", default="2g")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def summary_line(results: dict[str, Any]) -> str:
    """Takes results. Returns the one-line verdict."""
    q, o, perf = results.get("queue", {}), results.get("ordering", {}), results.get("perf", {})
    parts = [f"valid={json.dumps(results.get('valid'))}"]
    if "attempt_count" in q:
        parts.append(
            f"queue={json.dumps(q['valid'])} (attempted {q['attempt_count']}, acked "
            f"{q['acknowledged_count']}, lost {q['lost_count']} "
            f"[{q.get('lost_unacked_count', 0)} unacked], unexpected "
            f"{q['unexpected_count']}, duplicated {q['duplicated_count']} "
            f"[{q['unflagged_duplicated_count']} unflagged], unflagged after ack "
            f"{q.get('unflagged_after_ack_count', 0)}, recovered {q['recovered_count']}, "
            f"delivered after nack {q['delivered_failed_count']})")
    else:
        parts.append(f"queue={json.dumps(q.get('valid'))} ({q.get('error', '')})")
    if "violation_count" in o:
        parts.append(f"ordering={json.dumps(o['valid'])} ({o['violation_count']} violations, "
                     f"{o.get('flagged_violation_count', 0)} flagged, "
                     f"{o.get('unconfirmed_reorder_count', 0)} unconfirmed reorders)")
    else:
        parts.append(f"ordering={json.dumps(o.get('valid'))} ({o.get('error', '')})")
    overall = perf.get("overall")
    if overall:
        parts.append(f"perf: ok share {overall['ok_share']}, p99 "
                     f"{overall['latency_ms']['p99']} ms, {len(perf.get('windows', []))} "
                     f"fault windows")
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Runs the CLI. Returns the exit code."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        options = CheckOptions(
            strict_order=args.strict_order,
            flagged_duplicates_invalid=args.flagged_duplicates_invalid,
            unflagged_duplicates_invalid=not args.unflagged_duplicates_valid,
            require_drain=not args.no_require_drain,
            work_dir=args.work_dir,
            driver_memory=args.driver_memory,
        )
        path = args.history
        if args.parquet is not None:
            path = convert_to_parquet(path, args.parquet, spark_master=args.spark_master,
                                      options=options)
        results = check_history(path, spark_master=args.spark_master, options=options)
    except HistoryError as e:
        print(f"bad history: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.out:
        args.out.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    print(summary_line(results))
    valid = results.get("valid")
    return 0 if valid is True else 1 if valid is False else 2


if __name__ == "__main__":
    sys.exit(main())
