"""What a power loss dropped, per file: the answer of `LazyFS.power_loss()` and of the daemon's
control socket, as plain data that goes into a fault's efficacy entry unchanged; and what a
sync of the whole layer wrote back (`SyncedReport`: the answer of `LazyFS.sync()`).

Each file comes with its `Timing`: when the layer saw it written and made durable, as seconds
before the cut (ages), so that a file lost at a power loss can be told apart as written just
before the cut (any kernel would have lost it) or long before (one whose writeback the model
did not make). The report's `cut_at` is the wall clock at the cut; an event's wall-clock time is
`cut_at` minus its age, which `to_dict` writes beside each age.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, fields
from typing import Any

# Timing's events, in the order a file lives them, and what each means.
EVENTS: dict[str, str] = {
    "first_unsynced": "the oldest write or truncation not durable at the cut",
    "last_write": "the last write or truncation",
    "last_sync": "the file's last fsync or fdatasync (or O_SYNC/O_DSYNC write)",
    "dir_sync": "the last fsync of the directory it is in",
    "written_back": "its data tied to the journal (writeback or auto_da_alloc), not committed",
    "durable": "its data last made durable (by `durable_by`)",
}


@dataclass(frozen=True)
class Timing:
    """When the layer saw one file change and become durable, each as seconds before the cut
    (EVENTS says what each is); None: not since the layer was mounted (or not at all).
    `durable_by` says what made the data durable last: "fsync", "writeback", "auto_da_alloc",
    "sync" (a sync of the whole layer, as sync(2): `LazyFS.sync`) ("" when nothing did since
    the mount)."""

    first_unsynced: float | None = None
    last_write: float | None = None
    last_sync: float | None = None
    dir_sync: float | None = None
    written_back: float | None = None
    durable: float | None = None
    durable_by: str = ""

    def ages(self) -> dict[str, float]:
        """Returns the events that happened, each with its age in seconds (rounded to ms)."""
        return {f.name: round(getattr(self, f.name), 3) for f in fields(self)
                if f.name in EVENTS and getattr(self, f.name) is not None}

    def to_dict(self, cut_at: float) -> dict[str, Any]:
        """Takes the wall clock at the cut (epoch seconds). Returns each event that happened as
        {"age_s": seconds before the cut, "at": its wall-clock time in ISO 8601, UTC}, the
        durable one with "by"."""
        out: dict[str, Any] = {}
        for name, age in self.ages().items():
            out[name] = {"age_s": age, "at": wall_clock(cut_at - age)}
        if "durable" in out and self.durable_by:
            out["durable"]["by"] = self.durable_by
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Timing:
        """Takes what `to_dict` returned (None or {}: nothing known). Returns the timing."""
        data = data or {}
        ages = {name: float(data[name]["age_s"]) for name in EVENTS
                if isinstance(data.get(name), dict) and data[name].get("age_s") is not None}
        durable = data.get("durable")
        by = durable.get("by") if isinstance(durable, dict) else None
        return cls(**ages, durable_by=str(by or ""))


# How many kept files `DroppedReport.lines` names (the latest written): the others are counted.
KEPT_LINES = 20


def _ago(seconds: float | None) -> str:
    return "never since the mount" if seconds is None else f"{seconds:.1f} s before the cut"


def timing_text(timing: Timing) -> str:
    """Takes a file's timing. Returns it in words ("first unsynced write 12.0 s before the cut,
    ..."), every event named whether it happened or not, but writeback only when it did."""
    parts = [f"first unsynced write {_ago(timing.first_unsynced)}"] if timing.first_unsynced \
        is not None else []
    parts += [f"last write {_ago(timing.last_write)}", f"last fsync {_ago(timing.last_sync)}",
              f"directory fsync {_ago(timing.dir_sync)}"]
    if timing.written_back is not None:
        parts.append(f"written back {_ago(timing.written_back)} (not committed)")
    by = f" ({timing.durable_by})" if timing.durable_by else ""
    parts.append(f"data durable {_ago(timing.durable)}{by}")
    return ", ".join(parts)


def wall_clock(epoch_s: float) -> str:
    """Takes epoch seconds. Returns them in ISO 8601, UTC, to the millisecond."""
    when = dt.datetime.fromtimestamp(epoch_s, tz=dt.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class DroppedFile:
    """One file a power loss changed. `path` is under the mount's root, as the broker last saw it;
    `bytes` the unsynced bytes written since its last sync (each byte once, however often it was
    written); `size_before` its size at the fault; `size_after` its size now (None: it vanished,
    its creation was never made durable); `timing` when it was written and synced."""

    path: str
    bytes: int
    size_before: int
    size_after: int | None
    timing: Timing = field(default_factory=Timing)

    @property
    def vanished(self) -> bool:
        """Returns whether the file no longer exists."""
        return self.size_after is None


@dataclass(frozen=True)
class KeptFile:
    """A file written since the layer's mount (or its last power loss) that a power loss left
    whole: everything written to it was durable. `size` is its size; `timing` says when it was
    written and how it was made durable."""

    path: str
    size: int
    timing: Timing = field(default_factory=Timing)


class _Totals:
    """A report's totals over its files, each with its `bytes`: what a power loss dropped from
    them (DroppedReport) or a sync wrote back (SyncedReport)."""

    files: tuple[DroppedFile, ...] | tuple[SyncedFile, ...]

    @property
    def bytes(self) -> int:
        """Returns the bytes, over every file."""
        return sum(f.bytes for f in self.files)

    @property
    def file_count(self) -> int:
        """Returns how many files it names."""
        return len(self.files)


@dataclass(frozen=True)
class DroppedReport(_Totals):
    """Every file a power loss changed (sorted by path), the namespace changes it took back
    (creations, removals, renames, links), newest first, and the durability model in force, in
    words (model.describe: e.g. "ext4, writeback 30 s"); the files it kept (the most recently
    written first); the wall clock at the cut (epoch seconds; 0: not said), how long before it
    the layer was mounted and the journal last committed (seconds; None: not known, never)."""

    files: tuple[DroppedFile, ...] = ()
    namespace: tuple[str, ...] = ()
    model: str = ""
    kept: tuple[KeptFile, ...] = ()
    cut_at: float = 0.0
    mounted_s: float | None = None
    last_commit_s: float | None = None

    @property
    def oldest_unsynced_s(self) -> float | None:
        """Returns the age at the cut of the oldest write it dropped (None: none known)."""
        ages = [f.timing.first_unsynced for f in self.files if f.timing.first_unsynced is not None]
        return max(ages) if ages else None

    def lines(self) -> list[str]:
        """Returns the report in words, a line per file: what it dropped from each, and when
        each was written and synced; the kept files (at most KEPT_LINES named, the latest
        written first)."""
        out = [f"power loss at {wall_clock(self.cut_at) if self.cut_at else 'an unknown time'}"
               f" ({self.model or 'model not said'}; mounted {_ago(self.mounted_s)}, journal "
               f"last committed {_ago(self.last_commit_s)}): {self.bytes} unsynced bytes in "
               f"{self.file_count} files dropped, {len(self.namespace)} namespace changes "
               f"undone, {len(self.kept)} files written since kept whole"]
        for f in self.files:
            after = "vanished" if f.vanished else f"size {f.size_before} -> {f.size_after}"
            out.append(f"dropped {f.path}: {f.bytes} B ({after}); {timing_text(f.timing)}")
        out += [f"kept {k.path} ({k.size} B): {timing_text(k.timing)}"
                for k in self.kept[:KEPT_LINES]]
        if len(self.kept) > KEPT_LINES:
            out.append(f"kept {len(self.kept) - KEPT_LINES} more files")
        return out

    def to_dict(self) -> dict[str, Any]:
        """Returns the report as JSON-ready data (totals included)."""
        def ages(seconds: float | None) -> float | None:
            return None if seconds is None else round(seconds, 3)

        return {"bytes": self.bytes, "files": self.file_count,
                "paths": [{"path": f.path, "bytes": f.bytes, "size_before": f.size_before,
                           "size_after": f.size_after, "timing": f.timing.to_dict(self.cut_at)}
                          for f in self.files],
                "namespace": list(self.namespace), "model": self.model,
                "kept": [{"path": k.path, "size": k.size, "timing": k.timing.to_dict(self.cut_at)}
                         for k in self.kept],
                "cut_at": wall_clock(self.cut_at) if self.cut_at else None,
                "cut_at_epoch_s": self.cut_at or None,
                "mounted_s": ages(self.mounted_s), "last_commit_s": ages(self.last_commit_s),
                "oldest_unsynced_s": ages(self.oldest_unsynced_s)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DroppedReport:
        """Takes what `to_dict` returned (or an older daemon's answer, without times). Returns the
        report."""
        files = tuple(DroppedFile(str(f["path"]), int(f["bytes"]), int(f["size_before"]),
                                  None if f["size_after"] is None else int(f["size_after"]),
                                  Timing.from_dict(f.get("timing")))
                      for f in data.get("paths", []))
        kept = tuple(KeptFile(str(k["path"]), int(k["size"]), Timing.from_dict(k.get("timing")))
                     for k in data.get("kept") or [])

        def seconds(key: str) -> float | None:
            return None if data.get(key) is None else float(data[key])

        return cls(files, tuple(str(t) for t in data.get("namespace", [])),
                   str(data.get("model") or ""), kept, float(data.get("cut_at_epoch_s") or 0.0),
                   seconds("mounted_s"), seconds("last_commit_s"))


@dataclass(frozen=True)
class SyncedFile:
    """One file a sync of the whole layer wrote back: its path under the mount's root (None: it
    has no name left, unlinked while open) and its unsynced bytes made durable (each byte once,
    however often it was written; 0 for a truncation alone)."""

    path: str | None
    bytes: int


@dataclass(frozen=True)
class SyncedReport(_Totals):
    """What a sync of the whole layer (as sync(2) on ext4) made durable: every file whose data
    was not (sorted by path, the nameless last), the namespace changes it committed (creations,
    removals, renames, links), oldest first, and the durability model in force, in words."""

    files: tuple[SyncedFile, ...] = ()
    namespace: tuple[str, ...] = ()
    model: str = ""

    def lines(self) -> list[str]:
        """Returns the report in words: the totals, then a line per file written back."""
        out = [f"sync ({self.model or 'model not said'}): {self.bytes} unsynced bytes in "
               f"{self.file_count} files written back, {len(self.namespace)} namespace changes "
               f"committed"]
        out += [f"synced {f.path or '(unlinked)'}: {f.bytes} B" for f in self.files]
        return out

    def to_dict(self) -> dict[str, Any]:
        """Returns the report as JSON-ready data (totals included)."""
        return {"bytes": self.bytes, "files": self.file_count,
                "paths": [{"path": f.path, "bytes": f.bytes} for f in self.files],
                "namespace": list(self.namespace), "model": self.model}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SyncedReport:
        """Takes what `to_dict` returned. Returns the report."""
        files = tuple(SyncedFile(None if f.get("path") is None else str(f["path"]),
                                 int(f["bytes"])) for f in data.get("paths") or [])
        return cls(files, tuple(str(t) for t in data.get("namespace") or []),
                   str(data.get("model") or ""))
