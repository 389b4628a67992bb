"""The click-through model: wide and deep, with DLRM's dot-product interactions.

All 26 categorical features share ONE embedding table (feature f's ids are offset by the
sizes of the features before it), ``rows x (dim + 1)``: column 0 is the id's wide (linear)
weight, the other ``dim`` columns its deep embedding. One table is what a
``variable_partitioner`` splits across the ps tasks (MinSizePartitioner, ``max_shards``),
and what MultiWorkerMirroredStrategy copies whole onto every worker, with the optimizer's
slots (Adam: two more tables).

    logit = sum_f wide[id_f] + w . z + top_mlp([bottom(z), pairwise dots of bottom(z) and the 26 embeddings])

where ``z = log1p(numeric)``. The wide part has the shape of the generator's hidden model,
so the model can approach the attainable AUC; the deep part is the DLRM of Naumov et al.
(arXiv 1906.00091) at a small size.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras as keras

NUM_NUMERIC = 13
NUM_CATEGORICAL = 26
FEATURES = {
    "num": tf.io.FixedLenFeature([NUM_NUMERIC], tf.float32),
    "cat": tf.io.FixedLenFeature([NUM_CATEGORICAL], tf.int64),
    "label": tf.io.FixedLenFeature([1], tf.int64),
}


def parse(serialized: Any) -> tuple[dict[str, Any], Any]:
    """A batch of serialized Examples -> ({"num", "cat"}, label as float (batch, 1))."""
    rows = tf.io.parse_example(serialized, FEATURES)
    return {"num": rows["num"], "cat": rows["cat"]}, tf.cast(rows["label"], tf.float32)


class Interactions(keras.layers.Layer):
    """DLRM's feature interactions: the dot product of every pair of the vectors."""

    def call(self, vectors: Any) -> Any:  # (batch, n, dim)
        dots = tf.linalg.matmul(vectors, vectors, transpose_b=True)  # (batch, n, n)
        n = vectors.shape[1]
        upper = [(i, j) for i in range(n) for j in range(i + 1, n)]
        flat = tf.reshape(dots, [-1, n * n])
        return tf.gather(flat, [i * n + j for i, j in upper], axis=1)


def build(
    vocab_sizes: list[int], *, dim: int = 8, hidden: int = 32, table_rows: int | None = None
) -> keras.Model:
    """The model (build it under ``strategy.scope()``). ``table_rows`` above the total
    vocabulary pads the table (rows no id uses): how the benchmark grows it."""
    rows = max(sum(vocab_sizes), int(table_rows or 0))
    # a list, not a tensor: the Lambda's closure goes into the saved model's JSON config
    offsets = [sum(vocab_sizes[:f]) for f in range(len(vocab_sizes))]
    num = keras.Input((NUM_NUMERIC,), name="num")
    cat = keras.Input((NUM_CATEGORICAL,), dtype="int64", name="cat")
    z = keras.layers.Lambda(lambda x: tf.math.log1p(tf.maximum(x, 0.0)), name="log1p")(num)
    ids = keras.layers.Lambda(lambda c: c + tf.constant(offsets, tf.int64), name="offset_ids")(cat)
    table = keras.layers.Embedding(
        rows, dim + 1, name="table", embeddings_initializer=keras.initializers.RandomUniform(-0.05, 0.05)
    )
    looked_up = table(ids)  # (batch, 26, dim + 1)
    wide = keras.layers.Lambda(lambda e: tf.reduce_sum(e[:, :, 0], axis=1, keepdims=True), name="wide")(
        looked_up
    )
    deep = keras.layers.Lambda(lambda e: e[:, :, 1:], name="deep")(looked_up)
    bottom = keras.layers.Dense(dim, activation="relu", name="bottom")(z)
    vectors = keras.layers.Concatenate(axis=1)([keras.layers.Reshape((1, dim))(bottom), deep])
    top = keras.layers.Concatenate()([bottom, Interactions(name="interactions")(vectors)])
    top = keras.layers.Dense(hidden, activation="relu", name="top")(top)
    logit = keras.layers.Add(name="logit")(
        [keras.layers.Dense(1, name="top_out")(top), wide, keras.layers.Dense(1, name="wide_numeric")(z)]
    )
    return keras.Model({"num": num, "cat": cat}, logit, name="wide_deep_dlrm")


def compile_model(model: keras.Model, learning_rate: float, *, legacy: bool = False) -> keras.Model:
    """Adam, binary cross-entropy on the logit. ``legacy``: tf_keras's legacy Adam, which
    ParameterServerStrategy's ``fit`` and ClusterCoordinator loops need for a partitioned
    table; ``tfdist.runtime.sync`` needs the current one (it calls ``optimizer.build``).
    Both are the same algorithm."""
    optimizer = keras.optimizers.legacy.Adam if legacy else keras.optimizers.Adam
    model.compile(
        optimizer=optimizer(learning_rate),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    return model


def table_shards(model: keras.Model) -> list[list[int]]:
    """The shapes of the table's shards (one entry when it is not partitioned)."""
    table = model.get_layer("table").embeddings
    return [v.shape.as_list() for v in getattr(table, "variables", [table])]
