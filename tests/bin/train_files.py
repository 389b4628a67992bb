"""A tiny MultiWorkerMirrored job that trains on its own staged files (tests/data): reads
``runtime.input_files("train")`` (CSV lines of 4 features and a target), prints them, trains a
few steps and saves with ``runtime.save_model`` (into the ``model_dir`` output)."""

import json

from tfdist import runtime

strategy = runtime.strategy()
files = runtime.input_files("train")
print("FILES " + json.dumps(files), flush=True)

import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402


def parse(line):
    cols = tf.io.decode_csv(line, [0.0] * 5)
    return tf.stack(cols[:4]), cols[4]


dataset = tf.data.TextLineDataset(files).map(parse).repeat().batch(8)
dataset = runtime.with_auto_shard(dataset, "off")  # the files are this worker's own already
with strategy.scope():
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(4,))])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
model.fit(dataset, epochs=1, steps_per_epoch=5, verbose=0)
print("SAVED " + str(runtime.save_model(model)), flush=True)
