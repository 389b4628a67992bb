"""Input pipelines: global batch size, auto-sharding, per-worker datasets.

The job file says how datasets are sharded across workers (``options.auto_shard``), so
the script need not hard-code it. Parameter-server training wants datasets created *on
each worker* from a function: :func:`dataset_creator` wraps such a function for
``model.fit``; :func:`per_worker_dataset` does the same for ClusterCoordinator loops.
Both also work, unchanged, under every other strategy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tfdist.runtime import strategies as _strategy
from tfdist.runtime.env import read_context

_POLICIES = {"auto": "AUTO", "file": "FILE", "data": "DATA", "off": "OFF"}


def _active(strategy: Any | None) -> Any:
    if strategy is not None:
        return strategy
    return _strategy.current() or _strategy.strategy()


def global_batch_size(per_replica: int, strategy: Any | None = None) -> int:
    """``per_replica`` times the replicas training in sync.

    Under ParameterServerStrategy each worker steps on its own, so the "global" batch
    of one step is the batch of one worker's replicas.
    """
    return int(per_replica) * int(_active(strategy).num_replicas_in_sync)


def auto_shard_policy(name: str | None = None) -> Any:
    """The tf.data AutoShardPolicy for ``name`` (default: the job's ``auto_shard``)."""
    import tensorflow as tf

    name = name or read_context().options.get("auto_shard") or "auto"
    if name not in _POLICIES:
        raise ValueError(f"auto_shard {name!r}: use one of {', '.join(_POLICIES)}")
    return getattr(tf.data.experimental.AutoShardPolicy, _POLICIES[name])


def with_auto_shard(dataset: Any, policy: str | None = None) -> Any:
    """``dataset`` with the job's auto-shard policy, applied when a strategy distributes it."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = auto_shard_policy(policy)
    return dataset.with_options(options)


def distribute(dataset: Any, strategy: Any | None = None, policy: str | None = None) -> Any:
    """A distributed dataset for a custom loop (``strategy.run`` over its elements)."""
    return _active(strategy).experimental_distribute_dataset(with_auto_shard(dataset, policy))


def shard_for(dataset: Any, input_context: Any | None) -> Any:
    """Shard by input pipeline (for dataset functions); a no-op with one pipeline."""
    if input_context is None or input_context.num_input_pipelines <= 1:
        return dataset
    return dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)


def _with_context(dataset_fn: Callable[..., Any], global_batch: int | None) -> Callable[[Any], Any]:
    """Adapt ``dataset_fn(input_context)`` or ``dataset_fn(batch_size, input_context)``.

    With ``global_batch`` the function receives this replica's batch size first.
    """

    def fn(input_context: Any) -> Any:
        if global_batch is None:
            return dataset_fn(input_context)
        batch = input_context.get_per_replica_batch_size(global_batch)
        return dataset_fn(batch, input_context)

    return fn


def dataset_creator(
    dataset_fn: Callable[..., Any], global_batch: int | None = None, policy: str | None = None
) -> Any:
    """A ``DatasetCreator`` for ``model.fit``: each worker builds its own dataset.

    Needed for ParameterServerStrategy fit (which also needs ``steps_per_epoch``); works
    under the other strategies too, so a script need not branch.
    """
    import tf_keras

    fn = _with_context(dataset_fn, global_batch)
    return tf_keras.utils.experimental.DatasetCreator(lambda ctx: with_auto_shard(fn(ctx), policy))


def distributed_from_function(
    dataset_fn: Callable[..., Any], global_batch: int | None = None, strategy: Any | None = None
) -> Any:
    """``strategy.distribute_datasets_from_function`` with the batch-size convention above."""
    return _active(strategy).distribute_datasets_from_function(_with_context(dataset_fn, global_batch))


def per_worker_dataset(
    coordinator: Any,
    dataset_fn: Callable[..., Any],
    global_batch: int | None = None,
    strategy: Any | None = None,
) -> Any:
    """A per-worker dataset for ClusterCoordinator: built on every worker, iterated there."""
    import tensorflow as tf

    strat = _active(strategy)
    fn = _with_context(dataset_fn, global_batch)

    @tf.function
    def per_worker_fn() -> Any:
        return strat.distribute_datasets_from_function(fn)

    return coordinator.create_per_worker_dataset(per_worker_fn)
