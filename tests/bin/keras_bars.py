"""tf_keras ``fit`` with Keras's default progress bar (verbose=1: redrawn with backspaces
and carriage returns even into a pipe) and tfdist's callbacks, two short epochs whose steps
take long enough for step reports; the script's own lines, and a traceback it prints, too."""

import sys
import time
import traceback

from tfdist import runtime

strategy = runtime.strategy()
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

ctx = runtime.context()
x = np.random.default_rng(1).random((640, 4), dtype=np.float32)
y = (x.sum(axis=1) > 2).astype("float32")
with strategy.scope():
    model = tf_keras.Sequential([tf_keras.layers.Dense(1, activation="sigmoid", input_shape=(4,))])
    model.compile("sgd", "binary_crossentropy")
print(f"script: {ctx.task} starts", flush=True)


class Slow(tf_keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):  # type: ignore[no-untyped-def]
        time.sleep(0.1)
        if batch == 10:
            print(f"script: {ctx.task} in the middle of an epoch", flush=True)


data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
model.fit(data, epochs=2, steps_per_epoch=20, callbacks=[*runtime.callbacks(batch_size=32), Slow()])
if ctx.task == "worker-1":
    try:
        raise ValueError("a handled error, printed")
    except ValueError:
        traceback.print_exc()
print(f"script: {ctx.task} done", flush=True)
sys.exit(0)
