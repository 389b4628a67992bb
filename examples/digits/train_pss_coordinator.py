"""A custom loop under ParameterServerStrategy, with a partitioned embedding.

Each digit image becomes 64 tokens (pixel position x intensity) looked up in an
embedding table. The job's ``options.partition`` (MinSizePartitioner) splits that table
across the two ps tasks. The chief schedules multi-step functions on the workers
through ``runtime.Loop`` (a ClusterCoordinator); ps and worker tasks only serve.

The chief checkpoints every epoch (the variables live on the ps tasks; the chief reads
and writes them) and a restarted chief resumes from the last one. On SIGTERM the chief
finishes the epoch it is in, within the save window, saves it and exits 143.
"""

from __future__ import annotations

import argparse

from tfdist import runtime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-per-replica", type=int, default=32)
    parser.add_argument("--steps-per-call", type=int, default=10)
    parser.add_argument("--report-every-steps", type=int, help="step reports (default: at most one a second)")
    args = parser.parse_args()

    strategy = runtime.strategy()  # ps and worker tasks serve here until stopped
    import digits_data
    import tensorflow as tf
    import tf_keras

    x_train, y_train, _, _ = digits_data.load()
    tokens = digits_data.tokens(x_train)
    batch = runtime.global_batch_size(args.batch_per_replica)
    vocab = digits_data.NUM_PIXELS * digits_data.PIXEL_LEVELS

    def dataset_fn(batch_size, input_context):
        ds = tf.data.Dataset.from_tensor_slices((tokens, y_train))
        return runtime.shard_for(ds, input_context).shuffle(2048).repeat().batch(batch_size)

    with strategy.scope():
        model = tf_keras.Sequential(
            [
                tf_keras.layers.Input(shape=(digits_data.NUM_PIXELS,), dtype="int32"),
                tf_keras.layers.Embedding(vocab, 16),
                tf_keras.layers.GlobalAveragePooling1D(),
                tf_keras.layers.Dense(digits_data.NUM_CLASSES),
            ]
        )
        optimizer = tf_keras.optimizers.legacy.Adam(0.02)
        accuracy = tf_keras.metrics.SparseCategoricalAccuracy()
        loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf_keras.losses.Reduction.NONE
        )
        epoch_var = tf.Variable(0, dtype=tf.int64)
    ctx = runtime.context()
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch_var)
    latest = tf.train.latest_checkpoint(str(ctx.dirs.checkpoints))
    if latest:  # a restarted chief resumes at the last epoch it saved
        checkpoint.read(latest).expect_partial()
        print(f"chief: resumed from {latest} at epoch {int(epoch_var.numpy()) + 1}", flush=True)
    table = model.layers[0].embeddings
    shards = [v.shape.as_list() for v in getattr(table, "variables", [table])]
    print(f"chief: embedding {vocab}x16 in {len(shards)} shards {shards}", flush=True)

    def replica_step(example):
        x, y = example
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        accuracy.update_state(y, logits)
        return loss

    # Loop reports steps as their scheduled calls finish (tf_keras has no PSS batch hooks)
    loop = runtime.Loop(dataset_fn, global_batch=batch, report_every_steps=args.report_every_steps)
    step = loop.multi_step(replica_step, steps_per_call=args.steps_per_call)
    calls = max(1, len(x_train) // batch // args.steps_per_call)
    guard = runtime.preemption_guard()  # SIGTERM: finish and save this epoch, then exit 143
    loss = None
    for epoch in range(int(epoch_var.numpy()), args.epochs):
        accuracy.reset_state()
        losses = loop.run(step, calls)
        loss = sum(losses) / len(losses)
        epoch_var.assign(epoch + 1)
        runtime.save_checkpoint(checkpoint, ctx.dirs.checkpoints, strategy, number=epoch + 1)
        runtime.report(
            epoch=epoch + 1,
            epochs=args.epochs,
            step=loop.steps_done,
            loss=loss,
            metrics={"accuracy": float(accuracy.result())},
            examples_per_sec=calls * args.steps_per_call * batch / loop.seconds,
            final=False,
        )
        if guard.requested():
            guard.exit(f"epoch {epoch + 1} was saved")
    runtime.report(
        epoch=args.epochs,
        loss=loss,
        metrics={"accuracy": float(accuracy.result())},
        shards=len(shards),
        final=True,
    )
    print(f"chief: saved the model to {runtime.save_model(model)}", flush=True)


if __name__ == "__main__":
    main()
