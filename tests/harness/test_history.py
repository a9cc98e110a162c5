"""Tests of the history writer: indexes, times, flushing, concurrency, reading back."""

import json
import threading

import pytest

from history import HistoryWriter, Op, read_history


def test_ops_are_stamped_flushed_and_read_back(tmp_path):
    p = tmp_path / "h.jsonl"
    w = HistoryWriter(p)
    inv = w.append(Op(type="invoke", process=0, f="publish", value="0-0", publisher=0, seq=0))
    # flushed at once: readable before close, as a crash would leave it
    assert json.loads(p.read_text())["value"] == "0-0"
    w.append(Op(type="ok", process=0, f="publish", value="0-0", extra={"note": 1}))
    w.close()
    ops = read_history(p)
    assert [o.index for o in ops] == [0, 1]
    assert ops[0].time == inv.time and ops[1].time >= ops[0].time
    assert ops[1].extra == {"note": 1}
    with pytest.raises(ValueError, match="closed"):
        w.append(Op(type="ok", process=0, f="publish"))


def test_concurrent_appends_keep_indexes_unique_and_lines_whole(tmp_path):
    p = tmp_path / "h.jsonl"
    w = HistoryWriter(p)

    def work(k):
        for i in range(500):
            w.append(Op(type="ok", process=k, f="consume", value=f"{k}-{i}"))

    ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    w.close()
    ops = read_history(p)
    assert [o.index for o in ops] == list(range(4000))
    times = [o.time for o in ops]
    assert times == sorted(times)


def test_malformed_line_is_named(tmp_path):
    p = tmp_path / "h.jsonl"
    good = '{"index":0,"type":"ok","process":1,"f":"consume"}'
    p.write_text(good + "\nnot json\n")
    with pytest.raises(ValueError, match=":2: not JSON"):
        read_history(p)
    p.write_text(good + '\n{"index":1}\n')
    with pytest.raises(ValueError, match=":2: missing type, process, f"):
        read_history(p)
