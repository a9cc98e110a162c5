"""Which of a queue's files a disk corruption damages, and how: pure, in the spirit of Jepsen's
file nemesis (jepsen.nemesis.file: `bitflip` flips bits of a chunk of a file with a probability
per bit; `truncate`, cutting a file's tail as a lost write at the end of a log would, is this
harness's own addition).

A node's data directory is listed once (`listing_command`, `parse_listing`: each file's size
and path under the RABBITMQ_MNESIA_BASE). `queue_files` picks the queue's own files out of it,
by the names RabbitMQ gives them (rabbitmq-server's deps/rabbit and Ra/Osiris), whatever the
queue's kind; the names of other queues never match:

- quorum: the queue's Ra server directory `quorum/<node>/<UId>/` (the UId is the first six
  base64url characters of its Ra name, `%2F_<queue>` for vhost "/", upper-cased, then twelve
  random ones: ra:new_uid; the server's `config` file, which names the queue, settles a
  prefix two queues share) and its `*.segment` files; and the node's Ra WAL,
  `quorum/<node>/*.wal`, shared by every quorum queue of the node (`shared`);
- classic: the queue's index and per-queue store, `msg_stores/vhosts/<vhost>/queues/<queue>/`
  (each a base-36 MD5: rabbit_vhost:dir, rabbit_classic_queue_index_v2:queue_name_to_dir_name,
  of `"queue" ++ vhost ++ name`, or on older lines of the #resource{} record's external term
  format: queue_name_to_dir_name_legacy; either names only this queue), and the vhost's
  persistent message store, `msg_store_persistent/*.rdq` (`shared`);
- stream: the Osiris directory `stream/<vhost>_<queue>_<timestamp>/` (base64url, `/` as `_`)
  and its `*.segment` and `*.index` files.

`plan_damage` picks, from a Random, one non-empty file of a node's and the damage:
`bitflip` flips each bit of a chunk of `chunk` bytes at a random offset with a probability
(at least one bit, at most MAX_FLIPS: the first of the chunk), `truncate` cuts the file's last
`chunk` bytes. The plan is the record (`Damage.to_dict`): the history keeps it and
checkers.efficacy counts it; `corrupt_command` is the command that does exactly that damage on
the node, and nothing else.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

# The most bits one bitflip flips: the history keeps each, and the node's command carries them
# in one argument (Linux takes at most 128 KiB in one).
MAX_FLIPS: Final = 8192
BASE64URI: Final = re.compile(r"[A-Za-z0-9_-]")
# What ra_lib:derive_safe_string keeps (its ?BASE64_URI_CHARS, "=" besides).
RA_SAFE: Final = re.compile(r"[A-Za-z0-9_=-]")
# Ra's UId: its prefix, then twelve characters of ?GENERATED_UID_CHARS.
UID_TAIL: Final = r"[A-Z0-9]{12}"
# The folders under a node's data directory that Ra's quorum system and Osiris write in.
RA_DIR: Final = "quorum"
OSIRIS_DIR: Final = "stream"

# The program the node runs: it refuses a file whose size is not the planned one (the plan
# would damage other bytes than it records), flips or cuts, fsyncs, and prints the new size.
PROGRAM: Final = """\
import os, sys
path, mode, size, off, n, bits = sys.argv[1:7]
size, off, n = int(size), int(off), int(n)
if os.path.getsize(path) != size:
    sys.exit("%s is %d bytes, not the %d planned" % (path, os.path.getsize(path), size))
if mode == "truncate":
    os.truncate(path, off)
else:
    with open(path, "r+b") as f:
        f.seek(off)
        chunk = bytearray(f.read(n))
        for b in (int(x) for x in bits.split(",") if x):
            chunk[b // 8] ^= 1 << (b % 8)
        f.seek(off)
        f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
print(os.path.getsize(path))
"""


@dataclass(frozen=True)
class QueueFile:
    """One file of a queue's: its path under the data directory, its size, what it is
    (`segment`, `wal`, `index`, `message-store`, `stream-segment`, `stream-index`) and whether
    other queues keep data in it too."""

    path: str
    size: int
    role: str
    shared: bool = False


@dataclass(frozen=True)
class Damage:
    """What a corruption does to one file: the file, the mode, its size before, the chunk
    (`offset`, `length` bytes) and, for a bitflip, the bits flipped (offsets in the chunk)."""

    file: QueueFile
    mode: str
    offset: int
    length: int
    bits: tuple[int, ...] = ()

    @property
    def bytes(self) -> int:
        """Returns how many bytes the damage changes: those holding a flipped bit, or those cut."""
        if self.mode == "truncate":
            return self.length
        return len({b // 8 for b in self.bits})

    def to_dict(self) -> dict[str, Any]:
        """Returns the record the history keeps (bits as offsets in the file)."""
        return {"path": self.file.path, "role": self.file.role, "shared": self.file.shared,
                "mode": self.mode, "size_before": self.file.size, "offset": self.offset,
                "length": self.length, "bytes": self.bytes,
                "size_after": self.offset if self.mode == "truncate" else self.file.size,
                "bits": [self.offset * 8 + b for b in self.bits]}


def listing_command(root: str) -> list[str]:
    """Takes a node's data directory. Returns the command listing its files, one a line: size,
    a tab, the path under the directory."""
    return ["find", root, "-type", "f", "-printf", "%s\\t%P\\n"]


def parse_listing(text: str) -> dict[str, int]:
    """Takes the listing command's output. Returns each file's size by path."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        size, sep, path = line.partition("\t")
        if sep and size.strip().isdigit() and path:
            out[path] = int(size)
    return out


def base36_md5(data: bytes) -> str:
    """Takes bytes. Returns their MD5 as Erlang's `~.36B` writes it (upper-case base 36)."""
    n = int.from_bytes(hashlib.md5(data).digest(), "big")  # RabbitMQ's own naming
    digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def legacy_queue_term(queue: str, vhost: str = "/") -> bytes:
    """Takes a queue and its vhost. Returns term_to_binary(#resource{virtual_host, kind = queue,
    name}, [{minor_version, 1}]): a 4-tuple of atom, binary, atom, binary."""
    def atom(a: str) -> bytes:
        return b"d" + len(a).to_bytes(2, "big") + a.encode("latin-1")

    def binary(b: str) -> bytes:
        raw = b.encode()
        return b"m" + len(raw).to_bytes(4, "big") + raw

    return b"\x83h\x04" + atom("resource") + binary(vhost) + atom("queue") + binary(queue)


def classic_dirs(queue: str, vhost: str = "/") -> tuple[str, ...]:
    """Takes a queue and its vhost. Returns the names its classic queue directory may have: the
    current one, then the older lines'."""
    return (base36_md5(b"queue" + vhost.encode() + queue.encode()),
            base36_md5(legacy_queue_term(queue, vhost)))


def ra_name(queue: str, vhost: str = "/") -> str:
    """Takes a queue and its vhost. Returns its quorum queue's Ra name
    (rabbit_quorum_queue:qname_to_internal_name)."""
    return f"%2F_{queue}" if vhost == "/" else f"{vhost}_{queue}"


def uid_prefix(queue: str, vhost: str = "/") -> str:
    """Takes a queue and its vhost. Returns the first characters of its Ra UId (ra:new_uid)."""
    return "".join(RA_SAFE.findall(ra_name(queue, vhost)))[:6].upper()


def stream_dir_pattern(queue: str, vhost: str = "/") -> re.Pattern[str]:
    """Takes a queue and its vhost. Returns the pattern of its Osiris directory's name."""
    safe = "".join(c if BASE64URI.fullmatch(c) else "_" for c in f"{vhost}_{queue}_")
    return re.compile(re.escape(safe) + r"\d+")


def names_queue(config: str, queue: str, vhost: str = "/") -> bool:
    """Takes the text of a Ra server's `config` file. Returns whether it is the queue's."""
    name = re.escape(ra_name(queue, vhost))
    return re.search(rf"(?<![\w%.-])'?{name}'?(?![\w%.-])", config) is not None


def ra_dirs(files: Mapping[str, int], queue: str, vhost: str = "/") -> list[str]:
    """Takes a listing. Returns the Ra server directories whose name fits the queue's UId."""
    uid = re.compile(re.escape(uid_prefix(queue, vhost)) + UID_TAIL)
    dirs = set()
    for path in files:
        parts = path.split("/")
        if RA_DIR in parts[:-2] and uid.fullmatch(parts[-2]):
            dirs.add("/".join(parts[:-1]))
    return sorted(dirs)


def _quorum(files: Mapping[str, int], own: set[str]) -> list[QueueFile]:
    if not own:  # the WAL is the queue's only on a node that holds one of its members
        return []
    out = []
    for path, size in files.items():
        parts = path.split("/")
        if "/".join(parts[:-1]) in own and path.endswith(".segment"):
            out.append(QueueFile(path, size, "segment"))
        elif RA_DIR in parts[:-1] and path.endswith(".wal"):
            out.append(QueueFile(path, size, "wal", shared=True))
    return out


def _classic(files: Mapping[str, int], queue: str, vhost: str) -> list[QueueFile]:
    vdir = base36_md5(vhost.encode())
    mine = tuple(f"msg_stores/vhosts/{vdir}/queues/{q}/" for q in classic_dirs(queue, vhost))
    store = f"msg_stores/vhosts/{vdir}/msg_store_persistent/"
    out = [QueueFile(path, size, "index") for path, size in files.items()
           if any(m in path for m in mine)]
    if out:  # the store is the queue's only on a node that holds the queue
        out += [QueueFile(path, size, "message-store", shared=True)
                for path, size in files.items() if store in path and path.endswith(".rdq")]
    return out


def _stream(files: Mapping[str, int], queue: str, vhost: str) -> list[QueueFile]:
    pattern = stream_dir_pattern(queue, vhost)
    out = []
    for path, size in files.items():
        parts = path.split("/")
        if (len(parts) >= 3 and parts[-3] == OSIRIS_DIR and pattern.fullmatch(parts[-2])
                and path.endswith((".segment", ".index"))):
            out.append(QueueFile(path, size, "stream-" + path.rsplit(".", 1)[1]))
    return out


def queue_files(files: Mapping[str, int], queue: str, configs: Mapping[str, str | None],
                vhost: str = "/") -> list[QueueFile]:
    """Takes a node's listing, the queue, the text of the `config` file of each Ra directory
    `ra_dirs` found (None: it has none) and the vhost. Returns the queue's own files (and the
    node's files it shares, WAL and message store, where it has files of its own), by path; a
    Ra directory whose config names another queue is left out."""
    own = {d for d in ra_dirs(files, queue, vhost)
           if configs.get(d) is None or names_queue(str(configs[d]), queue, vhost)}
    found = _quorum(files, own) + _classic(files, queue, vhost) + _stream(files, queue, vhost)
    return sorted(found, key=lambda f: f.path)


def plan_damage(candidates: list[QueueFile], mode: str, chunk: int, probability: float,
                rng: random.Random) -> Damage | None:
    """Takes a node's queue files, the mode, the chunk's bytes, the bitflip's probability per
    bit and a Random. Returns the damage to one non-empty file picked at random, or None when
    every file is empty (or there is none)."""
    files = [f for f in candidates if f.size > 0]
    if not files:
        return None
    file = rng.choice(files)
    length = min(chunk, file.size)
    if mode == "truncate":
        return Damage(file, mode, file.size - length, length)
    offset = rng.randrange(file.size - length + 1)
    bits = tuple(b for b in range(length * 8) if rng.random() < probability)[:MAX_FLIPS]
    return Damage(file, mode, offset, length, bits or (rng.randrange(length * 8),))


def corrupt_command(damage: Damage, root: str, python: str = "python3") -> list[str]:
    """Takes a planned damage, the node's data directory and its Python. Returns the command
    that does exactly that damage."""
    return [python, "-c", PROGRAM, f"{root}/{damage.file.path}", damage.mode,
            str(damage.file.size), str(damage.offset), str(damage.length),
            ",".join(map(str, damage.bits))]


def damaged_summary(damages: list[Damage]) -> dict[str, Any]:
    """Takes what was done to one node's files. Returns its record: files, bytes, bits and each
    damage."""
    return {"files": len(damages), "bytes": sum(d.bytes for d in damages),
            "bits": sum(len(d.bits) for d in damages), "paths": [d.to_dict() for d in damages]}
