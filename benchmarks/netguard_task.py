"""One MWMS worker for benchmarks/netguard.py: a small Keras model, fit on random data.

Prints ``STEPS_PER_S <x> GUARDED <0|1>`` from worker-0: steps per second over the epochs
after the first (graph building and the first collectives excluded).
"""
import os
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

EPOCHS, STEPS = int(sys.argv[1]), int(sys.argv[2])
strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.random((4096, 64), dtype=np.float32)
y = rng.integers(0, 10, 4096)
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)


class Timer(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if epoch == 1:
            self.start = time.perf_counter()

    def on_train_end(self, logs=None):
        rate = (EPOCHS - 1) * STEPS / (time.perf_counter() - self.start)
        if os.environ.get("TFDIST_TASK") == "worker-0":
            guarded = int("TFDIST_LOOPBACK_PORTS" in os.environ)
            print(f"STEPS_PER_S {rate:.1f} GUARDED {guarded}", flush=True)


with strategy.scope():
    model = keras.Sequential([keras.layers.Dense(64, activation="relu", input_shape=(64,)),
                              keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(data, epochs=EPOCHS, steps_per_epoch=STEPS, verbose=0, callbacks=[Timer()])
