"""Multi-worker Keras training written for plain TF_CONFIG, as in TensorFlow's tutorial.

It never imports tfdist: tfdist only provides TF_CONFIG (and TF_USE_LEGACY_KERAS=1, so
``tf.keras`` is tf_keras, which MultiWorkerMirroredStrategy needs), exactly what the
TensorFlow multi-worker tutorial expects. Everything else is the tutorial's own
boilerplate: the chief check, the per-worker batch scaling and the temporary
directories non-chief workers save to.
"""

import argparse
import json
import os

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
num_workers = max(1, len(tf_config.get("cluster", {}).get("worker", [])))

# The strategy comes first: collective ops must be configured at program startup.
strategy = tf.distribute.MultiWorkerMirroredStrategy()


def digits_dataset(global_batch_size):
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=1).repeat().batch(global_batch_size)


def build_and_compile_model():
    model = tf.keras.Sequential(
        [
            tf.keras.layers.InputLayer(input_shape=(64,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.Adam(learning_rate=0.01),
        metrics=["accuracy"],
    )
    return model


def _is_chief(task_type, task_id):
    # With no chief in the cluster, worker 0 is the chief.
    has_chief = "chief" in tf_config.get("cluster", {})
    return (
        task_type is None
        or task_type == "chief"
        or (task_type == "worker" and task_id == 0 and not has_chief)
    )


def _get_temp_dir(dirpath, task_id):
    base_dirpath = "workertemp_" + str(task_id)
    temp_dir = os.path.join(dirpath, base_dirpath)
    tf.io.gfile.makedirs(temp_dir)
    return temp_dir


def write_filepath(filepath, task_type, task_id):
    dirpath = os.path.dirname(filepath)
    base = os.path.basename(filepath)
    if not _is_chief(task_type, task_id):
        dirpath = _get_temp_dir(dirpath, task_id)
    return os.path.join(dirpath, base)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    # Under tfdist the job's run directory is a natural home; any shared path works.
    default_dir = os.path.join(os.environ.get("TFDIST_RUN_DIR", "/tmp/keras-tutorial"), "model")
    parser.add_argument("--model-dir", default=default_dir)
    args = parser.parse_args()

    per_worker_batch_size = 32
    global_batch_size = per_worker_batch_size * strategy.num_replicas_in_sync
    dataset = digits_dataset(global_batch_size)
    with strategy.scope():
        model = build_and_compile_model()
    model.fit(dataset, epochs=args.epochs, steps_per_epoch=1797 // global_batch_size, verbose=2)

    task_type = strategy.cluster_resolver.task_type
    task_id = strategy.cluster_resolver.task_id
    write_model_path = write_filepath(args.model_dir, task_type, task_id)
    model.save(write_model_path)
    if not _is_chief(task_type, task_id):
        tf.io.gfile.rmtree(os.path.dirname(write_model_path))
    else:
        print(f"saved the model to {write_model_path}", flush=True)


if __name__ == "__main__":
    main()
