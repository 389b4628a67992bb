"""Sharding by file: which files an input pipeline reads, and the one warning when a job
has fewer files than input pipelines (the pure part of runtime.FileShards; no TensorFlow)."""

from __future__ import annotations

import warnings

import pytest

from tfdist.runtime import data


@pytest.fixture(autouse=True)
def _fresh_warning(monkeypatch):
    monkeypatch.setattr(data, "_warned_few_files", False)


def test_each_file_goes_to_exactly_one_pipeline():
    files = [f"train-{i}" for i in range(10)]
    shares = [data.shard_files(files, 3, i) for i in range(3)]
    assert shares == [files[0::3], files[1::3], files[2::3]]
    assert sorted(f for share in shares for f in share) == sorted(files)


def test_one_pipeline_reads_everything_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert data.shard_files(["a", "b"], 1, 0) == ["a", "b"]
        assert data.shard_files(["a", "b"], 2, 1) == ["b"]


def test_fewer_files_than_pipelines_reads_all_and_warns_once():
    with pytest.warns(data.FileShardingWarning, match=r"2 input file\(s\) for 3 input pipelines.*DATA") as got:
        assert data.shard_files(["a", "b"], 3, 2) == ["a", "b"]
        assert data.shard_files(["a", "b"], 3, 0) == ["a", "b"]
        assert data.warn_few_files(1, 4) is True
    assert len(got) == 1


def test_the_message_says_how_many_files_to_write():
    assert data.few_files_message(4, 4) is None
    assert "write at least 5 files" in (data.few_files_message(4, 5) or "")


@pytest.mark.parametrize("count,index", [(0, 0), (2, 2), (2, -1)])
def test_bad_pipeline_numbers_are_refused(count, index):
    with pytest.raises(ValueError, match="input pipeline"):
        data.shard_files(["a"], count, index)
