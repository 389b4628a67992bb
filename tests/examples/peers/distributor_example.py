"""spark-tensorflow-distributor's README example, in its own shape, as its users run it.

Peers' code, not tfdist's: it never imports tfdist and knows only TF_CONFIG. Its users
write a ``train()`` that holds its own imports, builds a dataset that repeats, shuffles and
batches, compiles a small CNN and calls ``fit``; ``MirroredStrategyRunner(num_slots=N)
.run(train)`` then starts one Spark barrier task per slot, each of which makes a
``MultiWorkerMirroredStrategy`` and calls ``train()`` inside its scope. Under tfdist each
task is one such slot: the runner's part is the three lines at the end. MNIST is replaced
by random arrays of its shape and types (the example downloads it); the data is sharded
by DATA, as the example asks, and epochs and steps can be lowered from the command line.
"""

import sys

EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 5


def train():
    import numpy as np
    import tensorflow as tf

    buffer_size, batch_size = 10000, 64

    def make_datasets():
        rng = np.random.default_rng(1)  # MNIST's shape: 28x28 uint8 images, labels 0-9
        images = rng.integers(0, 256, size=(6000, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=(6000,), dtype=np.uint8)
        dataset = tf.data.Dataset.from_tensor_slices(
            (tf.cast(images[..., tf.newaxis] / 255.0, tf.float32), tf.cast(labels, tf.int64)))
        return dataset.repeat().shuffle(buffer_size).batch(batch_size)

    def build_and_compile_cnn_model():
        model = tf.keras.Sequential([
            tf.keras.layers.Conv2D(32, 3, activation="relu", input_shape=(28, 28, 1)),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10, activation="softmax"),
        ])
        model.compile(loss=tf.keras.losses.sparse_categorical_crossentropy,
                      optimizer=tf.keras.optimizers.SGD(learning_rate=0.001), metrics=["accuracy"])
        return model

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train_datasets = make_datasets().with_options(options)
    model = build_and_compile_cnn_model()
    model.fit(x=train_datasets, epochs=EPOCHS, steps_per_epoch=STEPS)


# What MirroredStrategyRunner does in each slot.
import tensorflow as tf  # noqa: E402

with tf.distribute.MultiWorkerMirroredStrategy().scope():
    train()
