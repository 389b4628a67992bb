"""A tiny MultiWorkerMirrored job that SIGTERMs its own tasks at chosen steps, so the
preemption tests hit exact moments (the last steps, an epoch boundary, two workers at
once) without racing a test process against training.

``--kill ATTEMPT:TASK:EPOCH:BATCH`` (repeatable; 1-based epoch; BATCH a 1-based batch, or
``end`` for the epoch's end) sends SIGTERM to TASK itself on attempt ATTEMPT, and waits
until tfdist's signal thread has raised the flag, so the step check of that very batch
sees it. ``--loop`` trains with a custom loop and ``runtime.preemption_guard()`` instead
of ``fit`` (its BATCH counts steps from the start of training).
"""

from __future__ import annotations

import argparse
import os
import signal
import time

from tfdist import runtime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--kill", action="append", default=[])
    parser.add_argument("--loop", action="store_true")
    args = parser.parse_args()

    strategy = runtime.strategy()
    import numpy as np
    import tensorflow as tf
    import tf_keras

    from tfdist.runtime import strategies

    ctx = runtime.context()
    kills = set()
    for spec in args.kill:
        attempt, task, epoch, batch = spec.split(":")
        if int(attempt) == ctx.restart_count and task == ctx.task:
            kills.add((int(epoch), batch))

    def maybe_kill(epoch: int, batch: str) -> None:
        if (epoch, batch) in kills:
            print(f"{ctx.task}: SIGTERM to myself at epoch {epoch}, batch {batch}", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + 5
            while not strategies._DEFER["requested"].is_set() and time.monotonic() < deadline:
                time.sleep(0.005)

    rng = np.random.default_rng(0)
    x = rng.random((512, 8), dtype=np.float32)
    y = (x.sum(axis=1) > 4).astype("int32")
    batch = runtime.global_batch_size(8)
    data = runtime.with_auto_shard(tf.data.Dataset.from_tensor_slices((x, y)).repeat()).batch(batch)
    with strategy.scope():
        model = tf_keras.Sequential([tf_keras.layers.Input(shape=(8,)), tf_keras.layers.Dense(2)])
        model.compile(optimizer="sgd", loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    if not args.loop:
        killer = tf_keras.callbacks.LambdaCallback(
            on_train_batch_end=lambda b, logs: maybe_kill(epoch_now[0] + 1, str(b + 1)),
            on_epoch_begin=lambda e, logs: epoch_now.__setitem__(0, e),
            on_epoch_end=lambda e, logs: maybe_kill(e + 1, "end"),
        )
        epoch_now = [0]
        # first, so that the step check of the same batch sees the flag; step reports every 3 steps
        model.fit(data, epochs=args.epochs, steps_per_epoch=args.steps, verbose=0,
                  callbacks=[killer, *runtime.callbacks(batch_size=batch, checkpoints=False, report_every_steps=3)])
        print(f"{ctx.task}: training done", flush=True)
        return

    step_var = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(model=model, step=step_var)
    latest = tf.train.latest_checkpoint(str(ctx.dirs.checkpoints))
    if latest:
        checkpoint.read(latest).expect_partial()
        print(f"{ctx.task}: resumed at step {int(step_var.numpy())}", flush=True)

    @tf.function
    def train_step(iterator):
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model.compiled_loss(y, model(x, training=True)))
            model.optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                                model.trainable_variables, strict=True))
        strategy.run(step, args=next(iterator))

    iterator = iter(runtime.distribute(data))
    guard = runtime.preemption_guard()
    total = args.epochs * args.steps
    while int(step_var.numpy()) < total:
        train_step(iterator)
        step_var.assign_add(1)
        done = int(step_var.numpy())
        maybe_kill(1, str(done))
        if guard.requested():
            runtime.save_checkpoint(checkpoint, ctx.dirs.checkpoints, strategy)
            guard.exit(f"saved a checkpoint at step {done}")
    if guard.at_end():
        runtime.save_checkpoint(checkpoint, ctx.dirs.checkpoints, strategy)
        guard.exit(f"saved the end at step {int(step_var.numpy())}")
    print(f"{ctx.task}: training done", flush=True)


if __name__ == "__main__":
    main()
