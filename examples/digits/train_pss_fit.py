"""Keras ``fit`` under ParameterServerStrategy, with a sidecar evaluator.

One script for every role: on ps and worker tasks ``runtime.strategy()`` runs the
tf.distribute server and never returns; the chief coordinates ``fit``; the evaluator
evaluates each checkpoint the chief writes and exits when training is done.
"""

from __future__ import annotations

import argparse

from tfdist import runtime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-per-replica", type=int, default=32)
    args = parser.parse_args()

    strategy = runtime.strategy()  # ps and worker tasks serve here until stopped
    import digits_data
    import tensorflow as tf
    import tf_keras

    ctx = runtime.context()
    x_train, y_train, x_test, y_test = digits_data.load()
    if ctx.is_evaluator:
        model = digits_data.dense_model(tf_keras)
        test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(256)
        metrics = runtime.run_sidecar_evaluator(model, test, idle_timeout=300)
        print(f"evaluator: last evaluation {metrics}", flush=True)
        return

    batch = runtime.global_batch_size(args.batch_per_replica)

    def dataset_fn(batch_size, input_context):
        # Built on every worker; workers train asynchronously, so each shuffles on its own.
        ds = tf.data.Dataset.from_tensor_slices((x_train, y_train))
        ds = runtime.shard_for(ds, input_context)
        return ds.shuffle(2048).repeat().batch(batch_size).prefetch(2)

    with strategy.scope():
        model = digits_data.dense_model(tf_keras)
    model.fit(
        runtime.dataset_creator(dataset_fn, global_batch=batch),
        epochs=args.epochs,
        steps_per_epoch=len(x_train) // batch,
        callbacks=runtime.callbacks(batch_size=batch),
        verbose=2,
    )
    print(f"chief: saved the model to {runtime.save_model(model)}", flush=True)


if __name__ == "__main__":
    main()
