"""The op model's queue fields: a delivery's x-delivery-count and a dead letter's death, written
and read back; a history written before they existed reads with them null."""

from __future__ import annotations

import json
from pathlib import Path

from history import DEAD_LETTER, HistoryWriter, Op, read_history


def test_delivery_count_and_a_dead_letters_death_roundtrip(tmp_path: Path) -> None:
    p = tmp_path / "h.jsonl"
    with HistoryWriter(p, start_ns=0) as w:
        w.append(Op(type="ok", process=3, f="drain", value="0-1", publisher=0, seq=1,
                    redelivered=True, delivery_count=2, phase="drain"))
        w.append(Op(type="ok", process=4, f=DEAD_LETTER, value="0-0", publisher=0, seq=0,
                    queue="q.harness-dlq", phase="drain",
                    extra={"reason": "maxlen", "death_count": 1, "death_queue": "q"}))
    lines = [json.loads(x) for x in p.read_text().splitlines()]
    assert lines[0]["delivery_count"] == 2 and lines[1]["delivery_count"] is None
    assert (lines[1]["f"], lines[1]["reason"], lines[1]["death_count"],
            lines[1]["death_queue"]) == ("dead-letter", "maxlen", 1, "q")
    drain, dead = read_history(p)
    assert drain.delivery_count == 2 and drain.extra == {}
    assert dead.extra == {"reason": "maxlen", "death_count": 1, "death_queue": "q"}


def test_a_history_written_before_delivery_count_reads_it_as_null(tmp_path: Path) -> None:
    p = tmp_path / "old.jsonl"
    p.write_text('{"index": 0, "time": 5, "type": "ok", "process": 3, "f": "consume", '
                 '"value": "1-0", "node": "n1", "queue": "q", "publisher": 1, "seq": 0, '
                 '"consumer": "consume-3", "redelivered": false, "phase": "main", '
                 '"error": null}\n')
    [op] = read_history(p)
    assert op.delivery_count is None and op.extra == {} and op.value == "1-0"


def test_a_gzip_compressed_history_reads_as_the_plain_one(tmp_path: Path) -> None:
    import gzip

    plain = tmp_path / "history.jsonl"
    with HistoryWriter(plain, start_ns=0) as w:
        w.append(Op(type="invoke", process=0, f="publish", value="0-0", publisher=0, seq=0))
        w.append(Op(type="ok", process=0, f="publish", value="0-0", publisher=0, seq=0))
    packed = tmp_path / "history.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_history(packed) == read_history(plain)
    assert [op.type for op in read_history(packed)] == ["invoke", "ok"]
