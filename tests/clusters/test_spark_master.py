"""Tests of the Spark master probe: URLs parsed, local needs nothing, a master that does not answer
is named at once."""

from __future__ import annotations

import socket
import time

import pytest

from clusters.spark_master import SparkMasterUnreachable, check_spark_master, master_addresses


def test_master_urls_are_parsed_into_addresses():
    assert master_addresses("spark://10.0.0.1:7077") == [("10.0.0.1", 7077)]
    assert master_addresses("spark://m1:7077,m2:7078/") == [("m1", 7077), ("m2", 7078)]
    assert master_addresses("spark://m1") == [("m1", 7077)]
    assert master_addresses("local[*]") == [] and master_addresses("yarn") == []
    for bad in ("spark://", "spark://h:notaport", "spark://h:0"):
        with pytest.raises(ValueError, match="malformed Spark master URL"):
            master_addresses(bad)


def test_local_and_absent_masters_need_no_probe():
    check_spark_master(None)
    check_spark_master("local[2]")


def test_a_master_that_answers_passes_and_one_that_does_not_is_named_at_once():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        up = listener.getsockname()[1]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            down = s.getsockname()[1]
        check_spark_master(f"spark://127.0.0.1:{up}")
        check_spark_master(f"spark://127.0.0.1:{down},127.0.0.1:{up}")
        t0 = time.monotonic()
        with pytest.raises(SparkMasterUnreachable,
                           match=rf"Spark master spark://127.0.0.1:{down} does not answer "
                                 rf"\(127.0.0.1:{down}: .*refused"):
            check_spark_master(f"spark://127.0.0.1:{down}", timeout=2)
        assert time.monotonic() - t0 < 3
