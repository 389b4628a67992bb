"""Digits with synchronous updates and backup workers (tfdist.runtime.sync, docs/sync.md).

The chief is the coordinator; ps and worker tasks only serve. The update mode comes from
the job's ``options.update`` (TFDIST_OPTIONS). Both APIs are shown: ``--api keras`` (the
thin loop over a compiled tf_keras model, the default) and ``--api loop`` (SyncTrainer
with your own loss function).
"""

from __future__ import annotations

import argparse
import json

from tfdist import runtime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--api", choices=("keras", "loop"), default="keras")
    args = parser.parse_args()

    strategy = runtime.strategy()  # ps and worker tasks serve here until stopped
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from tfdist.runtime.sync.keras import fit
    from tfdist.runtime.sync.trainer import SyncTrainer

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y.astype(np.int32), test_size=0.25, random_state=0)

    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )

    def dataset_fn(worker_id):
        ds = tf.data.Dataset.from_tensor_slices((x_tr, y_tr)).repeat()
        ds = ds.skip(tf.cast(worker_id, tf.int64) * 211)  # each worker its own order
        return ds.shuffle(2048).batch(args.batch, drop_remainder=True)

    if args.api == "keras":
        result = fit(model, dataset_fn, args.steps)
        trainer = result.pop("trainer")
    else:

        def loss_fn(m, batch):
            xb, yb = batch
            logits = m(xb, training=True)
            return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(yb, logits, True))

        trainer = SyncTrainer(strategy, model, model.optimizer, loss_fn)
        result = trainer.run(trainer.per_worker_iterator(dataset_fn), args.steps).as_dict()

    w1, b1, w2, b2 = model.get_weights()
    accuracy = float(np.mean(np.argmax(np.maximum(x_te @ w1 + b1, 0) @ w2 + b2, 1) == y_te))
    cfg = trainer.config
    print(
        json.dumps(
            {
                "mode": cfg.mode,
                "replicas_to_aggregate": cfg.replicas_to_aggregate,
                "workers": cfg.num_workers,
                "test_accuracy": round(accuracy, 4),
                **{k: result[k] for k in ("steps", "attempts", "taken", "dropped")},
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
