"""A tiny real training job for integration tests, written against plain TF_CONFIG.

multi_worker_mirrored: every task trains with model.fit on digits (sharded).
parameter_server: ps/worker tasks serve; the chief coordinates with model.fit.
The chief prints a TFDIST_PROGRESS line with its final accuracy.
"""
import argparse
import importlib.util
import json
import os
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()

strategy_name = os.environ.get("TFDIST_STRATEGY", "multi_worker_mirrored")
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
if strategy_name == "parameter_server":
    if resolver.task_type in ("worker", "ps"):
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                      task_index=resolver.task_id, protocol="grpc", start=True)
        server.join()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
else:
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)

# scikit-learn's digits, read from the file it ships (importing sklearn costs ~1.5 s of CPU)
sklearn_dir = Path(importlib.util.find_spec("sklearn").submodule_search_locations[0])
digits = np.loadtxt(sklearn_dir / "datasets" / "data" / "digits.csv.gz", delimiter=",")
x, y = digits[:, :-1], digits[:, -1]
x = (x / 16.0).astype("float32")
y = y.astype("int64")


def make_dataset(input_context=None):
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=1).repeat()
    if input_context is not None:
        ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds.batch(64).prefetch(2)


with strategy.scope():
    model = keras.Sequential([keras.layers.Dense(64, activation="relu", input_shape=(64,)),
                              keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])

if strategy_name == "parameter_server":
    data = keras.utils.experimental.DatasetCreator(make_dataset)
else:
    data = make_dataset()
model.fit(data, epochs=args.epochs, steps_per_epoch=args.steps, verbose=2)
logits = model.predict(x, verbose=0, batch_size=256) if strategy_name != "parameter_server" else model(x)
accuracy = float(np.mean(np.argmax(logits, axis=1) == y))
is_chief = resolver.task_type in ("chief", None) or (
    resolver.task_type == "worker" and resolver.task_id == 0 and "chief" not in resolver.cluster_spec().jobs
)
if is_chief:
    print("TFDIST_PROGRESS " + json.dumps({"final": True, "metrics": {"accuracy": accuracy}}), flush=True)
print(f"done accuracy={accuracy:.3f}", flush=True)
