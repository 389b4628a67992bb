"""Sharding by file: balanced by bytes, deterministic, and refused when a worker would get
nothing."""

from __future__ import annotations

import random

import pytest

from tfdist.data.shard import DataFile, TooFewFiles, shard


def files(sizes: list[int]) -> list[DataFile]:
    return [DataFile(f"/d/part-{i:03d}", size, f"part-{i:03d}") for i, size in enumerate(sizes)]


def test_every_file_goes_to_exactly_one_worker() -> None:
    given = files([random.Random(1).randrange(1, 10_000) for _ in range(37)])
    shares = shard(given, 5)
    dealt = [f for share in shares for f in share]
    assert sorted(dealt) == sorted(given) and len(dealt) == len(set(dealt))
    assert all(share == sorted(share) for share in shares)  # each share in URI order


def test_balanced_by_bytes_not_by_count() -> None:
    # one big file and many small ones: a count split would give one worker all the bytes
    shares = shard(files([1000] + [100] * 10), 2)
    loads = sorted(sum(f.size for f in share) for share in shares)
    assert loads == [1000, 1000]
    assert sorted(len(share) for share in shares) == [1, 10]


def test_no_worker_is_more_than_one_file_above_the_mean() -> None:
    rng = random.Random(7)
    for workers in (2, 3, 8):
        sizes = [rng.randrange(1, 1_000_000) for _ in range(50)]
        shares = shard(files(sizes), workers)
        mean = sum(sizes) / workers
        assert max(sum(f.size for f in s) for s in shares) <= mean + max(sizes)


def test_deterministic_whatever_the_order_given() -> None:
    given = files([5, 3, 3, 8, 1, 9, 2, 2])
    first = shard(given, 3)
    shuffled = list(given)
    random.Random(3).shuffle(shuffled)
    assert shard(shuffled, 3) == first
    assert shard(list(reversed(given)), 3) == first


def test_equal_sizes_dealt_round_robin_by_uri() -> None:
    shares = shard(files([10] * 4), 2)
    assert [[f.rel for f in s] for s in shares] == [["part-000", "part-002"], ["part-001", "part-003"]]


def test_as_many_files_as_workers_gives_one_each() -> None:
    shares = shard(files([0, 0, 7]), 3)  # empty files too
    assert [len(s) for s in shares] == [1, 1, 1]


def test_fewer_files_than_workers_is_refused() -> None:
    with pytest.raises(TooFewFiles, match="2 files for 3 workers"):
        shard(files([1, 2]), 3)
