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


@pytest.mark.integration
def test_file_shards_read_only_their_files(tmp_path, monkeypatch):
    """FileShards reads real TFRecord files: a pipeline's share by input context or by
    worker id (the ParameterServer path, chosen in the graph), and every file with
    AutoShardPolicy.FILE for a dataset a strategy distributes (TensorFlow in-process, no
    cluster)."""
    tf = pytest.importorskip("tensorflow")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    files = []
    for i in range(4):
        path = str(tmp_path / f"part-{i}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for j in range(3):
                writer.write(f"{i}:{j}".encode())
        files.append(path)

    def read(ds):
        return sorted({r.decode().split(":")[0] for r in ds.as_numpy_iterator()})

    shards = data.FileShards(files, strategy=tf.distribute.get_strategy(), num_workers=2)
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1)
    assert read(shards.dataset(context)) == ["1", "3"]
    assert read(shards.dataset(worker_id=tf.constant(2, tf.int64))) == ["0", "2"]  # id mod 2
    whole = shards.dataset()
    assert read(whole) == ["0", "1", "2", "3"]
    policy = whole.options().experimental_distribute.auto_shard_policy
    assert policy == tf.data.experimental.AutoShardPolicy.FILE
    few = data.FileShards(files[:1], strategy=tf.distribute.get_strategy(), num_workers=2)
    with pytest.warns(data.FileShardingWarning):
        records = list(few.dataset(context).as_numpy_iterator())
    assert [r.decode() for r in records] == ["0:1"]  # every file read, every 2nd record kept
