"""A tiny training job whose task SIGKILLs itself at a chosen step, for the goodput tests.

``--kill TASK:STEP`` SIGKILLs TASK on its first attempt once it has run STEP steps (a real
kill: no handler runs, the epoch-end backup before it is what the restarted group resumes
from). ``--loop`` trains with ``runtime.Loop`` and ``runtime.save_checkpoint`` (the custom
loop path: ``begin`` and ``checkpoint`` marks) instead of ``fit`` with ``runtime.callbacks``.
"""

from __future__ import annotations

import argparse
import os
import signal

from tfdist import runtime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--kill", default="")
    parser.add_argument("--loop", action="store_true")
    args = parser.parse_args()

    strategy = runtime.strategy()
    import numpy as np
    import tensorflow as tf
    import tf_keras

    ctx = runtime.context()
    victim, _, at = args.kill.partition(":")
    kill_at = int(at) if victim == ctx.task and ctx.restart_count == 0 else None

    def maybe_kill(step: int) -> None:
        if kill_at is not None and step >= kill_at:
            print(f"{ctx.task}: SIGKILL to myself at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    rng = np.random.default_rng(0)
    x = rng.random((512, 8), dtype=np.float32)
    y = (x.sum(axis=1) > 4).astype("int32")
    batch = runtime.global_batch_size(16)

    def dataset_fn(input_context=None):
        ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat()
        size = input_context.get_per_replica_batch_size(batch) if input_context else batch
        return ds.batch(size)

    with strategy.scope():
        model = tf_keras.Sequential([tf_keras.layers.Input(shape=(8,)), tf_keras.layers.Dense(16),
                                     tf_keras.layers.Dense(2)])
        optimizer = tf_keras.optimizers.SGD(0.05)
        model.compile(optimizer=optimizer,
                      loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    if not args.loop:
        data = runtime.with_auto_shard(dataset_fn())
        if ctx.strategy == "parameter_server":
            data = tf_keras.utils.experimental.DatasetCreator(dataset_fn)
        killer = tf_keras.callbacks.LambdaCallback(
            on_epoch_begin=lambda e, logs: epoch.__setitem__(0, e),
            on_train_batch_end=lambda b, logs: maybe_kill(epoch[0] * args.steps + b + 1))
        epoch = [0]
        model.fit(data, epochs=args.epochs, steps_per_epoch=args.steps, verbose=0,
                  callbacks=[killer, *runtime.callbacks(batch_size=batch)])
        return

    step = tf.Variable(0, dtype=tf.int64, trainable=False)
    with strategy.scope():
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    latest = tf.train.latest_checkpoint(str(ctx.dirs.checkpoints))
    if latest:
        checkpoint.read(latest).expect_partial()
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(data):
        features, labels = data
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(labels, model(features, training=True)),
                                              global_batch_size=batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=False))
        return loss

    loop = runtime.Loop(dataset_fn, strategy=strategy)
    fn = loop.multi_step(replica_step, 5)
    loop.begin(int(step.numpy()))
    total = args.epochs * args.steps
    while loop.steps_done < total:
        loop.run(fn, min(args.steps, total - loop.steps_done) // 5)
        maybe_kill(loop.steps_done)
        step.assign(loop.steps_done)
        runtime.save_checkpoint(checkpoint, ctx.dirs.checkpoints, strategy, step=loop.steps_done)
    runtime.report(step=loop.steps_done, final=True)


if __name__ == "__main__":
    main()
