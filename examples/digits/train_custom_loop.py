"""A custom training loop under MultiWorkerMirroredStrategy.

Shows what ``fit`` does for you, with the runtime still doing the chores: the global
batch, auto-sharding, checkpoints every worker takes part in (only the chief's are
kept), resuming from the last checkpoint after a restart, progress reports, saving, and
preemption: on SIGTERM every worker saves the same step and exits 143, and the restarted
group resumes at that step (the data iterator starts over; its position is not saved).
The guard's per-step check reads a flag (no collective), so it costs no throughput.
"""

from __future__ import annotations

import argparse
import time

from tfdist import runtime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-per-replica", type=int, default=32)
    parser.add_argument("--crash-once-at-epoch", type=int, help="to try restarts")
    args = parser.parse_args()

    strategy = runtime.strategy()  # first, before any TensorFlow op
    import digits_data
    import tensorflow as tf
    import tf_keras

    ctx = runtime.context()
    x_train, y_train, _, _ = digits_data.load()
    batch = runtime.global_batch_size(args.batch_per_replica)
    steps = len(x_train) // batch
    data = runtime.distribute(
        tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(2048, seed=1).repeat().batch(batch)
    )

    with strategy.scope():
        model = tf_keras.Sequential(
            [
                tf_keras.layers.Input(shape=(digits_data.NUM_PIXELS,)),
                tf_keras.layers.Dense(64, activation="relu"),
                tf_keras.layers.Dense(digits_data.NUM_CLASSES),
            ]
        )
        optimizer = tf_keras.optimizers.Adam(0.01)
        accuracy = tf_keras.metrics.SparseCategoricalAccuracy()
        loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf_keras.losses.Reduction.NONE
        )
        step_var = tf.Variable(0, dtype=tf.int64)  # global steps done
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step_var)
    runtime.clear_done()  # a marker from an earlier run would stop an evaluator at once
    latest = tf.train.latest_checkpoint(str(ctx.dirs.checkpoints))
    if latest:  # a restarted group resumes where the chief last checkpointed
        checkpoint.read(latest).expect_partial()
        print(f"{ctx.task}: resumed from {latest} at step {int(step_var.numpy())}", flush=True)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        accuracy.update_state(y, logits)
        return loss

    @tf.function
    def train_step(iterator):
        losses = strategy.run(replica_step, args=next(iterator))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    iterator = iter(data)
    guard = runtime.preemption_guard()  # SIGTERM: all save at one agreed step, exit 143
    loss = None
    done = int(step_var.numpy())
    for epoch in range(done // steps, args.epochs):
        accuracy.reset_state()
        start = time.monotonic()
        total = 0.0
        first = done - epoch * steps if epoch == done // steps else 0  # > 0: resumed mid-epoch
        for _ in range(first, steps):
            total += float(train_step(iterator))
            step_var.assign_add(1)
            if guard.requested():  # every worker asks after every step (no collective)
                runtime.save_checkpoint(checkpoint, ctx.dirs.checkpoints, strategy)
                guard.exit(f"saved a checkpoint at step {int(step_var.numpy())}")
        seconds = time.monotonic() - start
        loss = total / max(1, steps - first)
        runtime.save_checkpoint(checkpoint, ctx.dirs.checkpoints, strategy, number=epoch + 1)
        runtime.report(
            epoch=epoch + 1,
            epochs=args.epochs,
            step=(epoch + 1) * steps,
            loss=loss,
            metrics={"accuracy": float(accuracy.result())},
            examples_per_sec=(steps - first) * batch / seconds,
            final=False,
        )
        digits_data.crash_once(ctx, epoch + 1, args.crash_once_at_epoch)
    if guard.at_end():  # SIGTERM during the last steps: every worker saves the end (one collective)
        runtime.save_checkpoint(checkpoint, ctx.dirs.checkpoints, strategy)
        guard.exit(f"saved a checkpoint at step {int(step_var.numpy())}")
    runtime.report(epoch=args.epochs, loss=loss, metrics={"accuracy": float(accuracy.result())}, final=True)
    runtime.mark_done()
    saved = runtime.save_model(model)  # every worker takes part; only the chief keeps it
    if saved:
        print(f"{ctx.task}: saved the model to {saved}", flush=True)


if __name__ == "__main__":
    main()
