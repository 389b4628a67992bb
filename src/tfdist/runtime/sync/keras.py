"""``fit``: a thin training loop for a compiled tf_keras model (imports TensorFlow).

``Model.fit`` under ParameterServerStrategy has no hook to change how updates are applied
(its train step applies each worker's gradient itself), so instead of patching ``fit``
this runs :class:`~tfdist.runtime.sync.trainer.SyncTrainer` with the model's compiled loss
and optimizer::

    with strategy.scope():
        model = build_model()
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1),
                      loss="sparse_categorical_crossentropy")
    from tfdist.runtime.sync.keras import fit
    history = fit(model, dataset_fn, steps=200, update={"mode": "backup"}, strategy=strategy)

``dataset_fn(worker_id)`` returns a dataset of ``(x, y)`` batches (repeat it: the loop
takes as many as it needs). Keras callbacks are not run; ``callback(trainer, step_stats)``
is, after every applied step (in async mode with ``None``). Metrics: the returned dict
holds the mean training loss (of the gradients applied) of each ``log_every`` steps and
the trainer's counters; ``setup_s``, the seconds it took to build the trainer
(variables on the ps, the optimizer's slots, the queues), the per-worker datasets, and
(sync modes) to start the worker loops and run the first aggregator call
(``SyncTrainer.timings``).
"""

from __future__ import annotations

import time
from typing import Any

import tensorflow as tf

from tfdist.runtime.sync.trainer import SyncTrainer


def keras_loss_fn(model: Any) -> Any:
    """``loss_fn(model, (x, y[, sample_weight]))`` from the model's compiled loss."""
    import tf_keras as keras

    if model.loss is None:
        raise ValueError("compile the model with a loss first (model.compile(loss=...))")
    loss_obj = keras.losses.get(model.loss)
    if isinstance(loss_obj, keras.losses.Loss):  # per-example values, we average them
        config = dict(loss_obj.get_config(), reduction=keras.losses.Reduction.NONE)
        loss_obj = type(loss_obj).from_config(config)

    def loss_fn(m: Any, batch: Any) -> Any:
        x, y = batch[0], batch[1]
        pred = m(x, training=True)
        per_example = loss_obj(y, pred)
        if len(batch) > 2 and batch[2] is not None:
            per_example = per_example * tf.cast(batch[2], per_example.dtype)
        loss = tf.reduce_mean(per_example)
        if m.losses:
            loss += tf.add_n(m.losses)
        return loss

    return loss_fn


def fit(
    model: Any,
    dataset_fn: Any,
    steps: int,
    *,
    update: Any = None,
    strategy: Any = None,
    coordinator: Any = None,
    callback: Any = None,
    log_every: int = 10,
    steps_per_call: int = 10,
) -> dict[str, Any]:
    """Train ``model`` (compiled, built under ``strategy.scope()``) for ``steps`` updates.

    ``update``: ``options.update`` of the job spec (dict or UpdateSpec); None reads
    ``TFDIST_OPTIONS``. ``strategy``: defaults to the strategy the model was built with.
    """
    strategy = strategy or model.distribute_strategy
    started = time.monotonic()
    trainer = SyncTrainer(
        strategy,
        model,
        model.optimizer,
        keras_loss_fn(model),
        update,
        coordinator=coordinator,
        steps_per_call=steps_per_call,
    )
    built = time.monotonic()
    iterator = trainer.per_worker_iterator(dataset_fn)
    # where set-up time goes before the first update (the first call then traces the loops)
    setup_s = {"trainer": round(built - started, 3), "iterator": round(time.monotonic() - built, 3)}
    losses: list[float] = []
    window: list[float] = []

    def on_step(tr: SyncTrainer, st: Any) -> Any:
        if st is not None:
            window.append(st.loss)
            if len(window) >= log_every:
                losses.append(sum(window) / len(window))
                window.clear()
        return callback(tr, st) if callback is not None else False

    stats = trainer.run(iterator, steps, on_step)
    setup_s.update(trainer.timings)
    return {"loss": losses, **stats.as_dict(), "setup_s": setup_s, "trainer": trainer}
