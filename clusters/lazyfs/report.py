"""What a power loss dropped, per file: the answer of `LazyFS.power_loss()` and of the daemon's
control socket, as plain data that goes into a fault's efficacy entry unchanged."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class DroppedFile:
    """One file a power loss changed. `path` is under the mount's root, as the broker last saw it;
    `bytes` the unsynced bytes written since its last sync (each byte once, however often it was
    written); `size_before` its size at the fault; `size_after` its size now (None: it vanished,
    its creation was never made durable)."""

    path: str
    bytes: int
    size_before: int
    size_after: int | None

    @property
    def vanished(self) -> bool:
        """Returns whether the file no longer exists."""
        return self.size_after is None


@dataclass(frozen=True)
class DroppedReport:
    """Every file a power loss changed (sorted by path), the namespace changes it took back
    (creations, removals, renames, links), newest first, and the durability model in force, in
    words (model.describe: e.g. "ext4, writeback 30 s")."""

    files: tuple[DroppedFile, ...] = ()
    namespace: tuple[str, ...] = ()
    model: str = ""

    @property
    def bytes(self) -> int:
        """Returns the unsynced bytes dropped, over every file."""
        return sum(f.bytes for f in self.files)

    @property
    def file_count(self) -> int:
        """Returns how many files lost unsynced data or vanished."""
        return len(self.files)

    def to_dict(self) -> dict[str, Any]:
        """Returns the report as JSON-ready data (totals included)."""
        return {"bytes": self.bytes, "files": self.file_count,
                "paths": [asdict(f) for f in self.files], "namespace": list(self.namespace),
                "model": self.model}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DroppedReport:
        """Takes what `to_dict` returned. Returns the report."""
        files = tuple(DroppedFile(str(f["path"]), int(f["bytes"]), int(f["size_before"]),
                                  None if f["size_after"] is None else int(f["size_after"]))
                      for f in data.get("paths", []))
        return cls(files, tuple(str(t) for t in data.get("namespace", [])),
                   str(data.get("model") or ""))
