"""TensorFlow helpers of tfdist.runtime.sync.ps, in one process (no cluster)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
tf = pytest.importorskip("tensorflow")

from tfdist.runtime.sync import ps  # noqa: E402
from tfdist.runtime.sync.ps import flat_variables  # noqa: E402

STEP = 5  # the step being collected: labels below it are stale


def _gradients(table, wide, bias, ids, scale):
    """A worker's gradients: the table's are IndexedSlices with a row repeated once per lookup."""
    with tf.GradientTape() as tape:
        rows = tf.nn.embedding_lookup(table, tf.constant(ids))
        loss = tf.reduce_sum(rows * tf.constant([[1.0, 2.0, 3.0]]) * scale)
        loss += tf.reduce_sum(tf.nn.embedding_lookup(wide, tf.constant(ids))) * scale
        loss += tf.reduce_sum(bias * scale)
    return tape.gradient(loss, [table, wide, bias])


def _aggregate(workers, want, *, minimum=None, marker=None):
    """Put each (label, ids, scale) worker's packed gradients into a queue, then collect
    ``want`` fresh ones as the aggregator does: (count, dropped, gradients, worker ids)."""
    table, wide, bias = tf.Variable(tf.zeros([8, 3])), tf.Variable(tf.zeros([8])), tf.Variable(tf.zeros([2]))
    variables = [table, wide, bias]
    queue = ps.GradientQueue("/cpu:0", [0, 1, 2], variables, f"q{np.random.randint(1 << 30)}")
    sparse: set[int] = set()

    for worker, (label, ids, scale) in enumerate(workers):

        @tf.function
        def put(label=label, ids=ids, scale=scale, worker=worker):
            grads = _gradients(table, wide, bias, ids, scale)
            queue.put(tf.constant(label, tf.int64), queue.pack(grads, sparse), 1.0, tf.constant(worker, tf.int64))

        put()
        if marker == worker:  # a timeout marker for this step after this worker's gradient
            queue.put(tf.constant(STEP, tf.int64), queue.empty(), 0.0, tf.constant(ps.MARKER, tf.int64))

    @tf.function
    def take():
        step = tf.constant(STEP, tf.int64)
        n, dropped, summed, _, who = ps.collect(
            queue, want, step, step, 3, sparse, minimum=None if minimum is None else tf.constant(minimum)
        )
        grads = queue.unpack(*summed, 1.0 / tf.cast(n, tf.float32), sparse)
        return n, dropped, [grads[i] for i in range(3)], who

    n, dropped, grads, who = take()
    expected = [tf.zeros_like(v) for v in variables]  # the old path: dense sums of the fresh ones
    for worker, (label, ids, scale) in enumerate(workers):
        if label >= STEP and worker in who.numpy().tolist():
            dense = [tf.convert_to_tensor(g) for g in _gradients(table, wide, bias, ids, scale)]
            expected = [e + d for e, d in zip(expected, dense, strict=True)]
    expected = [e / float(n) for e in expected]
    return int(n), int(dropped), grads, expected, sparse, who.numpy().tolist()


def test_sparse_rows_travel_not_the_table():
    table = tf.Variable(tf.zeros([1000, 3]))
    queue = ps.GradientQueue("/cpu:0", [0], [table], "one")
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.nn.embedding_lookup(table, tf.constant([7, 3, 7, 7])))
    sparse: set[int] = set()
    packed = queue.pack([tape.gradient(loss, table)], sparse)
    assert sparse == {0}
    assert packed.dense.shape.as_list() == [0]
    assert sorted(packed.rows.numpy().tolist()) == [3, 7]  # each row once, summed
    assert packed.values.shape.as_list() == [2 * 3]
    assert packed.counts.numpy().tolist() == [2]
    by_row = dict(zip(packed.rows.numpy().tolist(), packed.values.numpy().reshape(2, 3).tolist(), strict=True))
    assert by_row == {3: [1.0, 1.0, 1.0], 7: [3.0, 3.0, 3.0]}


def test_sparse_sum_equals_dense_with_overlapping_rows():
    """Two workers touch overlapping rows, each with duplicates: the average equals the
    dense average, row by row, and is IndexedSlices of only the touched rows."""
    n, dropped, grads, expected, sparse, _ = _aggregate([(STEP, [4, 1, 4], 1.0), (STEP, [1, 2, 1, 1], 2.0)], 2)
    assert (n, dropped) == (2, 0)
    assert sparse == {0, 1}
    assert isinstance(grads[0], tf.IndexedSlices) and isinstance(grads[1], tf.IndexedSlices)
    assert sorted(grads[0].indices.numpy().tolist()) == [1, 2, 4]
    for got, want in zip(grads, expected, strict=True):
        np.testing.assert_allclose(tf.convert_to_tensor(got).numpy(), want.numpy(), rtol=1e-6)


def test_dropped_stale_gradient_adds_no_rows():
    """Backup (K = 1 of 3) with a stale gradient first: it is dropped and its rows (5) are
    not in the sum; of the two fresh ones only the first taken counts."""
    n, dropped, grads, expected, _, who = _aggregate(
        [(STEP - 1, [5, 5, 1], 3.0), (STEP, [4, 1, 4], 1.0), (STEP, [1, 2], 2.0)], 1
    )
    assert (n, dropped) == (1, 1)
    assert who[0] == 1
    assert sorted(grads[0].indices.numpy().tolist()) == [1, 4]
    for got, want in zip(grads, expected, strict=True):
        np.testing.assert_allclose(tf.convert_to_tensor(got).numpy(), want.numpy(), rtol=1e-6)


def test_timeout_marker_carries_nothing():
    n, dropped, grads, expected, _, _ = _aggregate([(STEP, [4, 1, 4], 1.0), (STEP, [1, 2], 2.0)], 2, minimum=1,
                                                   marker=0)
    assert (n, dropped) == (1, 0)
    for got, want in zip(grads, expected, strict=True):
        np.testing.assert_allclose(tf.convert_to_tensor(got).numpy(), want.numpy(), rtol=1e-6)


def test_sparse_average_updates_like_the_dense_one():
    """Applied by Adam (whose sparse update decays every row's moments) and SGD, the sparse
    average moves the variables exactly as the old path's densified average did."""
    _, _, grads, expected, _, _ = _aggregate([(STEP, [4, 1, 4], 1.0), (STEP, [1, 2, 1], 2.0)], 2)
    for opt in (tf.keras.optimizers.SGD, tf.keras.optimizers.Adam):
        a, b = tf.Variable(tf.ones([8, 3])), tf.Variable(tf.ones([8, 3]))
        opt_a, opt_b = opt(0.1), opt(0.1)
        for _ in range(2):  # the second step: Adam's moments from the first decay
            opt_a.apply_gradients([(grads[0], a)])
            opt_b.apply_gradients([(expected[0], b)])
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
        assert float(tf.reduce_max(tf.abs(a - 1.0))) > 0.0


def test_flat_variables_expands_shards():
    from tensorflow.python.distribute.sharded_variable import ShardedVariable

    shards = [tf.Variable(tf.zeros([2, 2]), name="a/part_0"), tf.Variable(tf.zeros([1, 2]), name="a/part_1")]
    plain = tf.Variable(1.0)
    out = flat_variables([ShardedVariable(shards), plain])
    assert [v.shape.as_list() for v in out] == [[2, 2], [1, 2], []]
