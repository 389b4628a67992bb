"""Which worker gets which file: a pure function of the sorted file list (with sizes) and the
number of workers, so every backend, and a restarted task, computes the same shares.

Balanced by bytes with the longest-processing-time rule: files from the largest down (ties:
by URI), each to the worker with the fewest bytes so far (ties: the lowest index). No worker
ends more than one file's size above the mean; each share is then sorted by URI, the order a
script reading its files sees.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class DataFile:
    """One file of an input: its URI, its size in bytes, and its path relative to the input's
    common directory (where a staged copy goes, so two ``part-0`` of two directories differ)."""

    uri: str
    size: int
    rel: str

    def to_dict(self) -> dict[str, object]:
        return {"uri": self.uri, "size": self.size, "rel": self.rel}


class TooFewFiles(ValueError):
    """Fewer files than workers: a worker would get nothing to read."""


def shard(files: Sequence[DataFile], workers: int) -> list[list[DataFile]]:
    """``workers`` shares of ``files`` (see the module's doc); TooFewFiles if a share would be
    empty."""
    if workers < 1:
        raise ValueError("shard over at least one worker")
    if len(files) < workers:
        raise TooFewFiles(f"{len(files)} file{'s' if len(files) != 1 else ''} for {workers} workers")
    loads = [0] * workers
    shares: list[list[DataFile]] = [[] for _ in range(workers)]
    for f in sorted(files, key=lambda f: (-f.size, f.uri)):
        i = min(range(workers), key=lambda w: (loads[w], len(shares[w]), w))
        shares[i].append(f)
        loads[i] += f.size
    return [sorted(share) for share in shares]
