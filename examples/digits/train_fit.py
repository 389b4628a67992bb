"""Keras ``fit`` on the digits, under whatever strategy the job declares.

The same script runs as chief and workers of a MultiWorkerMirrored job, as the single
task of a Mirrored job, or alone with ``python train_fit.py``.
"""

from __future__ import annotations

import argparse

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
    x_train, y_train, x_test, y_test = digits_data.load()
    batch = runtime.global_batch_size(args.batch_per_replica)
    steps = len(x_train) // batch
    train = runtime.with_auto_shard(
        tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(2048, seed=1).repeat()
    ).batch(batch)
    test = runtime.with_auto_shard(tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(batch))
    with strategy.scope():
        model = digits_data.dense_model(tf_keras)
    print(f"{ctx.task}: {ctx.num_replicas} replicas in sync, global batch {batch}", flush=True)
    model.fit(
        train,
        epochs=args.epochs,
        steps_per_epoch=steps,
        validation_data=test,
        callbacks=[
            *runtime.callbacks(batch_size=batch),  # BackupAndRestore resumes after a restart
            tf_keras.callbacks.LambdaCallback(
                on_epoch_end=lambda epoch, logs: digits_data.crash_once(
                    ctx, epoch + 1, args.crash_once_at_epoch
                )
            ),
        ],
        verbose=2,
    )
    saved = runtime.save_model(model)  # every worker takes part; only the chief keeps it
    if saved:
        print(f"{ctx.task}: saved the model to {saved}", flush=True)


if __name__ == "__main__":
    main()
