"""Tests of the one atomic write (history.files)."""

from __future__ import annotations

import os
import threading

import pytest

from history.files import replacing, temp_path, write_atomic


def test_text_and_bytes_replace_the_file_and_leave_no_temporary(tmp_path):
    path = tmp_path / "results.json"
    path.write_text("old")
    assert write_atomic(path, "néw\n") == path
    assert path.read_text(encoding="utf-8") == "néw\n"
    write_atomic(str(path), b"\x89PNG")
    assert path.read_bytes() == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    path = tmp_path / "test.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), replacing(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed half-way")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.json"]


def test_a_symlink_is_replaced_too(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    link = tmp_path / "latest"
    for target in ("a", "b"):
        with replacing(link) as tmp:
            os.symlink(target, tmp)
    assert os.readlink(link) == "b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "latest"]


def test_each_thread_writes_through_a_hidden_name_of_its_own(tmp_path):
    path = tmp_path / "index.html"
    names: list[str] = []
    t = threading.Thread(target=lambda: names.append(temp_path(path).name))
    t.start()
    t.join()
    mine = temp_path(path).name
    assert mine.startswith(".index.html.") and mine.endswith(".tmp")
    assert names[0] != mine
