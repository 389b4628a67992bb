"""TensorFlow's multi-worker Keras tutorial, in its own shape, as its readers run it.

Peers' code, not tfdist's: it never imports tfdist and knows only TF_CONFIG. MNIST is
replaced by random arrays of MNIST's shape and types (the tutorial downloads it), and the
epoch and step counts can be lowered from the command line so a test stays cheap; the rest
is what the tutorial does: the strategy first, the per-worker batch scaled by the number of
workers, a small CNN compiled in the strategy's scope, ``fit``, and then the process ends
(no save, no explicit shutdown).
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf


def mnist_dataset(batch_size):
    # MNIST's shape: 28x28 uint8 images scaled to [0, 1], int64 labels 0-9.
    rng = np.random.default_rng(0)
    x_train = rng.integers(0, 256, size=(6000, 28, 28), dtype=np.uint8)
    y_train = rng.integers(0, 10, size=(6000,), dtype=np.uint8)
    x_train = x_train / np.float32(255)
    y_train = y_train.astype(np.int64)
    return tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(6000).repeat().batch(batch_size)


def build_and_compile_cnn_model():
    model = tf.keras.Sequential(
        [
            tf.keras.layers.InputLayer(input_shape=(28, 28)),
            tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.001),
        metrics=["accuracy"],
    )
    return model


epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
steps_per_epoch = int(sys.argv[2]) if len(sys.argv) > 2 else 70

per_worker_batch_size = 64
tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_dataset(global_batch_size)

with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    multi_worker_model = build_and_compile_cnn_model()

multi_worker_model.fit(multi_worker_dataset, epochs=epochs, steps_per_epoch=steps_per_epoch)
