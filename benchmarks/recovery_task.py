"""The training task of benchmarks/recovery.py: a custom loop that checkpoints and resumes.

Every training step prints ``STEP <unix time>`` on the task that ran it (tf.print runs
where the step runs: on each worker under all-reduce, on the worker the coordinator picked
under parameter servers), so the benchmark can see when each task trains again.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tfdist import runtime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--steps-per-call", type=int, default=5)
    parser.add_argument("--checkpoint-every", type=int, default=5, help="calls")
    args = parser.parse_args()

    strategy = runtime.strategy()
    import numpy as np
    import tensorflow as tf
    import tf_keras
    from sklearn.datasets import load_digits

    ctx = runtime.context()
    x, y = load_digits(return_X_y=True)
    x, y = (x / 16.0).astype("float32"), y.astype("int64")
    batch = runtime.global_batch_size(16)

    def dataset_fn(input_context):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().shuffle(1024)
        return ds.batch(input_context.get_per_replica_batch_size(batch) if input_context else batch)

    with strategy.scope():
        model = tf_keras.Sequential([tf_keras.layers.Dense(32, activation="relu", input_shape=(64,)),
                                     tf_keras.layers.Dense(10)])
        optimizer = tf_keras.optimizers.SGD(0.1)
        step_var = tf.Variable(0, dtype=tf.int64, trainable=False)
        ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step_var)
    latest = tf.train.latest_checkpoint(str(ctx.dirs.checkpoints))
    if latest:
        ckpt.read(latest).expect_partial()
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(data):
        features, labels = data
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(labels, model(features, training=True)),
                                              global_batch_size=batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=False))
        step_var.assign_add(1)
        tf.print("STEP", tf.timestamp(), output_stream=sys.stdout)
        return loss

    loop = runtime.Loop(dataset_fn, strategy=strategy)
    fn = loop.multi_step(replica_step, args.steps_per_call)
    done_calls = int(step_var.numpy()) // args.steps_per_call // max(1, strategy.num_replicas_in_sync)
    print(f"{ctx.task}: resuming at call {done_calls}", flush=True)
    call = done_calls
    while call < args.calls:
        n = min(args.checkpoint_every, args.calls - call)
        losses = loop.run(fn, n)
        call += n
        runtime.save_checkpoint(ckpt, ctx.dirs.checkpoints, strategy, number=call)
        runtime.report(step=call * args.steps_per_call, loss=float(np.mean(losses)))
    print(f"{ctx.task}: done", flush=True)
    Path(ctx.dirs.checkpoints).mkdir(parents=True, exist_ok=True)


if __name__ == "__main__":
    main()
