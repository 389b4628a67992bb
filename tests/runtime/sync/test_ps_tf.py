"""TensorFlow helpers of tfdist.runtime.sync.ps, in one process (no cluster)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
tf = pytest.importorskip("tensorflow")

from tfdist.runtime.sync.ps import flat_variables, to_slices  # noqa: E402


def test_dense_gradient_back_to_slices_of_nonzero_rows():
    table = tf.Variable(tf.zeros([6, 3]))
    with tf.GradientTape() as tape:
        rows = tf.nn.embedding_lookup(table, tf.constant([4, 1, 4]))
        loss = tf.reduce_sum(rows * tf.constant([[1.0, 2.0, 3.0]]))
    sparse = tape.gradient(loss, table)
    assert isinstance(sparse, tf.IndexedSlices)
    dense = tf.convert_to_tensor(sparse)  # what a worker sends to the accumulator
    back = to_slices(dense)
    assert isinstance(back, tf.IndexedSlices)
    assert sorted(back.indices.numpy().tolist()) == [1, 4]
    assert back.dense_shape.numpy().tolist() == [6, 3]
    # the same update either way
    a, b = tf.Variable(tf.ones([6, 3])), tf.Variable(tf.ones([6, 3]))
    tf.keras.optimizers.SGD(0.5).apply_gradients([(sparse, a)])
    tf.keras.optimizers.SGD(0.5).apply_gradients([(back, b)])
    assert float(tf.reduce_max(tf.abs(a - b))) == 0.0
    assert float(tf.reduce_max(tf.abs(a - 1.0))) > 0.0


def test_all_zero_gradient_gives_no_rows():
    back = to_slices(tf.zeros([4, 2]))
    assert back.indices.numpy().tolist() == []


def test_flat_variables_expands_shards():
    from tensorflow.python.distribute.sharded_variable import ShardedVariable

    shards = [tf.Variable(tf.zeros([2, 2]), name="a/part_0"), tf.Variable(tf.zeros([1, 2]), name="a/part_1")]
    plain = tf.Variable(1.0)
    out = flat_variables([ShardedVariable(shards), plain])
    assert [v.shape.as_list() for v in out] == [[2, 2], [1, 2], []]
