"""One worker of the slow-network benchmark (benchmarks/hosts_slow_network.py): Keras fit of
a small dense model on the digits under MultiWorkerMirroredStrategy, then the step rate of
the timed epochs as one ``RATE steps_per_s`` line (the first epoch warms up)."""

import json
import os
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

steps, epochs = int(sys.argv[1]), int(sys.argv[2])
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(1)
x = rng.random((2048, 64), dtype=np.float32)
y = rng.integers(0, 10, 2048)
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)
with strategy.scope():
    model = keras.Sequential([keras.layers.Dense(64, activation="relu", input_shape=(64,)), keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
ends: list[float] = []
model.fit(data, epochs=epochs, steps_per_epoch=steps, verbose=0,
          callbacks=[keras.callbacks.LambdaCallback(on_epoch_end=lambda *_: ends.append(time.monotonic()))])
print("RATE " + json.dumps((epochs - 1) * steps / (ends[-1] - ends[0])), flush=True)
