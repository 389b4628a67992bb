"""A MultiWorkerMirrored script whose worker-1 is late to leave: it sleeps after ``fit``.

In the peers' shape (it never imports tfdist and knows only TF_CONFIG), as small as a
MultiWorkerMirrored ``fit`` gets: a one-layer model, one epoch of a few steps. Worker-1 then
sleeps ``LATE`` seconds (the first argument) before its script returns, standing in for a
peer that is still busy when worker-0 (the coordination service's leader) is done, and both
print the wall-clock time at which their script returns.
"""

import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

late = float(sys.argv[1]) if len(sys.argv) > 1 else 6.0
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
    model.compile(loss="mse", optimizer="sgd")

x = np.zeros((64, 4), np.float32)
y = np.zeros((64, 1), np.float32)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16).with_options(options)
model.fit(dataset, epochs=1, steps_per_epoch=3, verbose=0)
if index == 1:
    time.sleep(late)
print(f"script returns at {time.time():.3f}", flush=True)
