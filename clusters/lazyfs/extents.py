"""A set of disjoint byte ranges: which bytes of a file were written since its last sync, and
which durable bytes the layer saved before they were overwritten.

Ranges are half-open `[start, end)`, kept sorted and merged, so the common case (appends at
the end of a file) costs one comparison.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator


class Extents:
    """Takes nothing. A sorted set of disjoint, merged half-open ranges of bytes."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def add(self, start: int, end: int) -> None:
        """Takes a range. Adds it, merging it with every range it touches."""
        if start >= end:
            return
        if self._ends and self._ends[-1] == start:  # an append: the common case
            self._ends[-1] = end
            return
        first = bisect_left(self._ends, start)
        last = bisect_right(self._starts, end)
        if first < last:
            start = min(start, self._starts[first])
            end = max(end, self._ends[last - 1])
        self._starts[first:last] = [start]
        self._ends[first:last] = [end]

    def gaps(self, start: int, end: int) -> list[tuple[int, int]]:
        """Takes a range. Returns its parts that no range of the set covers, in order."""
        found: list[tuple[int, int]] = []
        at = start
        index = bisect_right(self._ends, start)
        while at < end and index < len(self._starts) and self._starts[index] < end:
            if self._starts[index] > at:
                found.append((at, self._starts[index]))
            at = max(at, self._ends[index])
            index += 1
        if at < end:
            found.append((at, end))
        return found

    def clip(self, size: int) -> None:
        """Takes a size. Drops every byte at or past it (a file truncated to that size)."""
        index = bisect_left(self._ends, size)
        del self._starts[index + 1:], self._ends[index + 1:]
        if index < len(self._starts):
            if self._starts[index] >= size:
                del self._starts[index], self._ends[index]
            else:
                self._ends[index] = size

    def total(self) -> int:
        """Returns how many bytes the set covers."""
        return sum(end - start for start, end in zip(self._starts, self._ends, strict=True))

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(zip(self._starts, self._ends, strict=True))

    def __bool__(self) -> bool:
        return bool(self._starts)
