"""Which of a queue's files a disk corruption picks and what it does to them
(nemesis.faults.corrupt), on fake data directories in tmp_path: per queue kind the right files,
only that queue's (and the node's files it shares), the damage exactly as recorded, and the same
damage from the same seed."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from nemesis.faults.corrupt import (
    base36_md5,
    classic_dirs,
    corrupt_command,
    damaged_summary,
    listing_command,
    parse_listing,
    plan_damage,
    queue_files,
    ra_dirs,
    uid_prefix,
)

NODE = "rabbit@10.0.0.1"
Q = "jepsen.queue"
# The vhost "/"'s directory as RabbitMQ names it on every line (rabbit_vhost:dir).
ROOT_VHOST = "628WB79CIFDYO9LJI6DKMI09L"


def tree(root: Path, files: dict[str, bytes]) -> dict[str, int]:
    """Writes the files under root. Returns the listing the node's `find` gives of them."""
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    out = subprocess.run(listing_command(str(root)), capture_output=True, text=True, check=True)
    return parse_listing(out.stdout)


def data_dir(root: Path) -> dict[str, int]:
    """A node's data directory with a quorum queue, a classic queue and a stream all called Q,
    and others besides (a quorum queue sharing Q's UId prefix, other classic queues, other
    streams), each file 64 bytes; laid out as the paths a real power loss dropped say
    (measurements/findings/quorum-power-loss-minority-3.10-seed4001: `rabbit@<ip>/quorum/
    rabbit@<ip>/meta.dets`, `rabbit@<ip>/msg_stores/vhosts/628WB79CIFDYO9LJI6DKMI09L/.vhost`)."""
    qdir, other = classic_dirs(Q)[0], classic_dirs("other")[0]
    mine, twin = f"{uid_prefix(Q)}ABCDEFGHIJKL", f"{uid_prefix(Q)}ZYXWVUTSRQPO"
    names = [
        f"{NODE}/quorum/{NODE}/00000003.wal",
        f"{NODE}/quorum/{NODE}/{mine}/00000001.segment",
        f"{NODE}/quorum/{NODE}/{mine}/00000002.segment",
        f"{NODE}/quorum/{NODE}/{twin}/00000001.segment",
        f"{NODE}/quorum/{NODE}/OTHERQ123456789012/00000001.segment",
        f"{NODE}/msg_stores/vhosts/{ROOT_VHOST}/queues/{qdir}/0.qi",
        f"{NODE}/msg_stores/vhosts/{ROOT_VHOST}/queues/{qdir}/0.qs",
        f"{NODE}/msg_stores/vhosts/{ROOT_VHOST}/queues/{other}/0.qi",
        f"{NODE}/msg_stores/vhosts/{ROOT_VHOST}/msg_store_persistent/0.rdq",
        f"{NODE}/msg_stores/vhosts/{ROOT_VHOST}/msg_store_transient/0.rdq",
        f"{NODE}/stream/__jepsen_queue_1700000000000000000/00000000000000000000.segment",
        f"{NODE}/stream/__jepsen_queue_1700000000000000000/00000000000000000000.index",
        f"{NODE}/stream/__jepsen_queue_2_1700000000000000000/00000000000000000000.segment",
        f"{NODE}/coordination/{NODE}/00000001.wal.bak",
        f"{NODE}/rabbit_durable_queue.DCD",
    ]
    files = {n: bytes(range(64)) for n in names}
    files[f"{NODE}/quorum/{NODE}/{mine}/config"] = f"#{{cluster_name => '%2F_{Q}'}}.".encode()
    files[f"{NODE}/quorum/{NODE}/{twin}/config"] = f"#{{cluster_name => '%2F_{Q}2'}}.".encode()
    return tree(root, files)


def test_names_as_rabbitmq_writes_them() -> None:
    assert base36_md5(b"/") == ROOT_VHOST
    assert uid_prefix(Q) == "2F_JEP"  # '%' is no base64url character; six, upper-cased
    assert uid_prefix("q", vhost="v1") == "V1_Q"
    assert uid_prefix("a=b.c") == "2F_A=B"  # Ra keeps "=" too
    assert len(set(classic_dirs(Q))) == 2 and classic_dirs(Q) != classic_dirs("other")


def test_only_the_queues_own_files_and_the_nodes_shared_ones(tmp_path: Path) -> None:
    listing = data_dir(tmp_path)
    dirs = ra_dirs(listing, Q)
    assert len(dirs) == 2  # the prefix alone cannot tell Q from Q2
    configs = {d: (tmp_path / d / "config").read_text() for d in dirs}
    got = {(f.path.split("/", 1)[1], f.role, f.shared) for f in queue_files(listing, Q, configs)}
    qdir = classic_dirs(Q)[0]
    assert got == {
        (f"quorum/{NODE}/00000003.wal", "wal", True),
        (f"quorum/{NODE}/2F_JEPABCDEFGHIJKL/00000001.segment", "segment", False),
        (f"quorum/{NODE}/2F_JEPABCDEFGHIJKL/00000002.segment", "segment", False),
        (f"msg_stores/vhosts/{ROOT_VHOST}/queues/{qdir}/0.qi", "index", False),
        (f"msg_stores/vhosts/{ROOT_VHOST}/queues/{qdir}/0.qs", "index", False),
        (f"msg_stores/vhosts/{ROOT_VHOST}/msg_store_persistent/0.rdq", "message-store", True),
        ("stream/__jepsen_queue_1700000000000000000/00000000000000000000.segment",
         "stream-segment", False),
        ("stream/__jepsen_queue_1700000000000000000/00000000000000000000.index",
         "stream-index", False),
    }


def test_a_ra_directory_without_a_config_is_taken_by_its_prefix(tmp_path: Path) -> None:
    listing = data_dir(tmp_path)
    files = queue_files(listing, Q, {d: None for d in ra_dirs(listing, Q)})
    assert sum(f.role == "segment" for f in files) == 3


def test_the_older_lines_classic_directory_is_found_too(tmp_path: Path) -> None:
    legacy = classic_dirs(Q)[1]
    listing = tree(tmp_path, {f"msg_stores/vhosts/{ROOT_VHOST}/queues/{legacy}/journal.jif": b"x",
                              f"msg_stores/vhosts/{ROOT_VHOST}/queues/{legacy}/0.idx": b"y"})
    assert [f.role for f in queue_files(listing, Q, {})] == ["index", "index"]


def test_an_empty_or_missing_queue_leaves_nothing_to_damage(tmp_path: Path) -> None:
    assert queue_files(data_dir(tmp_path), "absent", {}) == []
    listing = tree(tmp_path / "empty", {f"quorum/{NODE}/00000001.wal": b"",
                                        f"quorum/{NODE}/2F_JEPABCDEFGHIJKL/00000001.segment": b""})
    files = queue_files(listing, Q, {})
    assert len(files) == 2  # found, but empty: nothing to flip or cut
    assert plan_damage(files, "bitflip", 16, 0.5, random.Random(0)) is None


def run(command: list[str]) -> str:
    return subprocess.run([sys.executable, *command[1:]], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_a_bitflip_flips_exactly_the_bits_it_records(tmp_path: Path, seed: int) -> None:
    listing = data_dir(tmp_path)
    files = queue_files(listing, Q, {})
    damage = plan_damage(files, "bitflip", 16, 0.05, random.Random(seed))
    assert damage is not None and damage.length == 16 and damage.bits
    path = tmp_path / damage.file.path
    before = bytearray(path.read_bytes())
    assert run(corrupt_command(damage, str(tmp_path))).strip() == "64"
    record = damage.to_dict()
    for bit in record["bits"]:
        before[bit // 8] ^= 1 << (bit % 8)
    assert path.read_bytes() == bytes(before)  # the recorded bits, and only they, differ
    assert all(damage.offset * 8 <= b < (damage.offset + 16) * 8 for b in record["bits"])
    assert record["bytes"] == len({b // 8 for b in record["bits"]}) and record["size_after"] == 64


def test_a_truncate_cuts_exactly_the_tail_it_records(tmp_path: Path) -> None:
    files = queue_files(data_dir(tmp_path), Q, {})
    damage = plan_damage(files, "truncate", 24, 0.5, random.Random(3))
    assert damage is not None
    path = tmp_path / damage.file.path
    before = path.read_bytes()
    run(corrupt_command(damage, str(tmp_path)))
    record = damage.to_dict()
    assert (record["offset"], record["length"], record["bytes"], record["size_after"]) == (
        40, 24, 24, 40)
    assert path.read_bytes() == before[:40] and record["bits"] == []
    big = plan_damage(files, "truncate", 4096, 0.5, random.Random(3))
    assert big is not None and (big.offset, big.length) == (0, 64)  # never past the file


def test_the_node_refuses_a_file_that_changed_since_the_plan(tmp_path: Path) -> None:
    files = queue_files(data_dir(tmp_path), Q, {})
    damage = plan_damage(files, "bitflip", 8, 0.5, random.Random(0))
    assert damage is not None
    (tmp_path / damage.file.path).write_bytes(b"shorter")
    done = subprocess.run([sys.executable, *corrupt_command(damage, str(tmp_path))[1:]],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "not the 64 planned" in done.stderr
    assert (tmp_path / damage.file.path).read_bytes() == b"shorter"


def test_the_same_seed_plans_the_same_damage(tmp_path: Path) -> None:
    files = queue_files(data_dir(tmp_path), Q, {})
    plans = [plan_damage(files, "bitflip", 32, 0.01, random.Random(42)) for _ in range(2)]
    assert plans[0] == plans[1]
    others = {plan_damage(files, "bitflip", 32, 0.01, random.Random(s)) for s in range(20)}
    assert len(others) > 1


def test_no_more_than_max_flips_are_flipped(tmp_path: Path) -> None:
    from nemesis.faults.corrupt import MAX_FLIPS, QueueFile

    big = [QueueFile("q/0.segment", 4 * MAX_FLIPS, "segment")]
    damage = plan_damage(big, "bitflip", 4 * MAX_FLIPS, 1.0, random.Random(0))
    assert damage is not None and damage.bits == tuple(range(MAX_FLIPS))
    assert len(",".join(map(str, damage.bits))) < 128 * 1024  # one argument of the command


def test_at_least_one_bit_flips_however_small_the_probability(tmp_path: Path) -> None:
    files = queue_files(data_dir(tmp_path), Q, {})
    damage = plan_damage(files, "bitflip", 4, 1e-9, random.Random(0))
    assert damage is not None and len(damage.bits) == 1


def test_the_summary_counts_files_bytes_and_bits(tmp_path: Path) -> None:
    files = queue_files(data_dir(tmp_path), Q, {})
    a = plan_damage(files, "bitflip", 8, 0.5, random.Random(0))
    b = plan_damage(files, "truncate", 10, 0.5, random.Random(0))
    assert a is not None and b is not None
    got = damaged_summary([a, b])
    assert (got["files"], got["bytes"], got["bits"]) == (2, a.bytes + 10, len(a.bits))
    assert [p["mode"] for p in got["paths"]] == ["bitflip", "truncate"]
    assert damaged_summary([]) == {"files": 0, "bytes": 0, "bits": 0, "paths": []}
