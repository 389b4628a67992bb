"""Input pipelines: global batch size, auto-sharding, per-worker datasets.

The job file says how datasets are sharded across workers (``options.auto_shard``), so
the script need not hard-code it. Parameter-server training wants datasets created *on
each worker* from a function: :func:`dataset_creator` wraps such a function for
``model.fit``; :func:`per_worker_dataset` does the same for ClusterCoordinator loops.
Both also work, unchanged, under every other strategy. :class:`FileShards` reads a list of
files sharded *by file* across the input pipelines, under every strategy, and warns when
there are too few files for that.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
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


# -- sharding by file -----------------------------------------------------------------------


class FileShardingWarning(UserWarning):
    """Fewer files than input pipelines: every pipeline reads every file (DATA sharding)."""


_warned_few_files = False


def few_files_message(num_files: int, num_pipelines: int) -> str | None:
    """Why sharding by file cannot work here, or None when it can."""
    if num_files >= num_pipelines:
        return None
    return (
        f"tfdist: {num_files} input file(s) for {num_pipelines} input pipelines: each pipeline "
        f"reads ALL the files and keeps 1/{num_pipelines} of the records (DATA sharding), so the "
        f"job reads its data {num_pipelines} times; write at least {num_pipelines} files "
        "(ideally many more) to shard by file"
    )


def warn_few_files(num_files: int, num_pipelines: int) -> bool:
    """Warn, once per process, when there are fewer files than pipelines; True if short."""
    global _warned_few_files
    message = few_files_message(num_files, num_pipelines)
    if message is None:
        return False
    if not _warned_few_files:
        _warned_few_files = True
        warnings.warn(message, FileShardingWarning, stacklevel=3)
    return True


def shard_files(files: Sequence[str], num_pipelines: int, index: int) -> list[str]:
    """The files input pipeline ``index`` of ``num_pipelines`` reads: every
    ``num_pipelines``-th file from ``index`` (what AutoShardPolicy.FILE does), or all of
    them, with a warning, when there are fewer files than pipelines."""
    if num_pipelines < 1 or not 0 <= index < num_pipelines:
        raise ValueError(f"input pipeline {index} of {num_pipelines}: need 0 <= index < count")
    files = [str(f) for f in files]
    if warn_few_files(len(files), num_pipelines):
        return files
    return files[index::num_pipelines]


class FileShards:
    """Records of a list of files, sharded by file across the job's input pipelines.

    Make it once, after ``runtime.strategy()`` and outside any dataset function, and call
    :meth:`dataset` inside the dataset function::

        shards = runtime.FileShards(files, compression="GZIP")
        def dataset_fn(batch_size, input_context):
            return shards.dataset(input_context).batch(batch_size).map(parse)

    Which files a pipeline reads:

    * with an ``input_context`` of several pipelines (MultiWorkerMirrored's
      ``distribute_datasets_from_function``, a ``DatasetCreator`` under it): the
      pipeline's share, chosen here (:func:`shard_files`), auto-sharding off;
    * under ParameterServerStrategy (every worker gets the same input context): a share
      chosen in the graph by a worker id from a counter on the ps (0..N-1 in the order the
      workers build their datasets; a restarted worker takes id mod N), or by the
      ``worker_id`` given (``tfdist.runtime.sync`` passes one);
    * otherwise (a dataset a strategy will distribute, e.g. ``model.fit(dataset)`` under
      MultiWorkerMirrored): every file, with AutoShardPolicy.FILE, so TensorFlow gives each
      worker its files.

    With fewer files than pipelines each pipeline reads every file and keeps its share of
    the records (DATA sharding), after one warning (:class:`FileShardingWarning`): TF's
    own AUTO policy falls back the same way without a word.
    """

    def __init__(
        self,
        files: Sequence[str],
        *,
        compression: str | None = None,
        cycle_length: int = 4,
        strategy: Any | None = None,
        num_workers: int | None = None,
        share: bool = False,
    ) -> None:
        import tensorflow as tf

        #: ``files`` are this task's own share already (the job's ``data:`` section dealt them
        #: with ``shard: file``): every pipeline of the task reads them all, none is dropped.
        self.share = bool(share)
        self.files = [str(f) for f in files]
        if not self.files:
            raise ValueError("FileShards: no input files (check the glob or the job's data section)")
        self.compression = compression or ""
        self.cycle_length = int(cycle_length)
        self.strategy = _active(strategy)
        self.num_workers = int(num_workers or read_context().num_workers or 1)
        self._counter = None
        if getattr(self.strategy, "_should_use_with_coordinator", False) and not self.share:
            warn_few_files(len(self.files), self.num_workers)
            with self.strategy.scope():
                self._counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="tfdist_file_shard_ids")

    def _read(self, names: Any) -> Any:
        import tensorflow as tf

        return tf.data.Dataset.from_tensor_slices(names).interleave(
            lambda f: tf.data.TFRecordDataset(f, compression_type=self.compression),
            cycle_length=self.cycle_length,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=False,
        )

    @classmethod
    def for_input(cls, name: str, **kwargs: Any) -> FileShards:
        """The files of the job's input ``name`` (``tfdist.runtime.input_files``), sharded
        once: a list the job's ``data:`` section already cut for this task (``shard: file``)
        is read whole by this task; a whole list (``shard: none``, or the parameter-server
        coordinator's streamed URIs) is sharded here as for any list."""
        from tfdist.runtime.env import input_files, input_is_share

        return cls(input_files(name), share=input_is_share(name), **kwargs)

    def _off(self, dataset: Any) -> Any:
        return with_auto_shard(dataset, "off")

    def dataset(self, input_context: Any | None = None, worker_id: Any | None = None) -> Any:
        """The records (serialized strings) this input pipeline reads."""
        import tensorflow as tf

        if self.share:
            print(f"tfdist: input pipeline reads this task's share {self.files}", flush=True)
            return self._off(self._read(self.files))
        if worker_id is not None or self._counter is not None:
            n = self.num_workers
            wid = worker_id if worker_id is not None else self._counter.assign_add(1) - 1  # type: ignore[union-attr]
            wid = tf.math.floormod(tf.cast(wid, tf.int64), n)
            if few_files_message(len(self.files), n):
                warn_few_files(len(self.files), n)
                return self._off(self._read(self.files).shard(n, wid))
            mine = tf.gather(tf.constant(self.files), tf.range(wid, len(self.files), n))
            tf.print("tfdist: input pipeline", wid, "of", n, "reads", mine, summarize=-1)
            return self._off(self._read(mine))
        if input_context is not None and input_context.num_input_pipelines > 1:
            n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
            mine = shard_files(self.files, n, i)
            if len(mine) == len(self.files):  # fewer files than pipelines: shard the records
                return self._off(self._read(mine).shard(n, i))
            print(f"tfdist: input pipeline {i} of {n} reads {mine}", flush=True)
            return self._off(self._read(mine))
        if warn_few_files(len(self.files), self.num_workers):
            return with_auto_shard(self._read(self.files), "data")
        return with_auto_shard(self._read(self.files), "file")
