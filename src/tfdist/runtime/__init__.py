"""tfdist.runtime: the tf.distribute boilerplate, taken care of, inside training scripts.

Typical script (every role of the job runs it)::

    from tfdist import runtime

    strategy = runtime.strategy()          # first: before any other TensorFlow op
    ctx = runtime.context()
    with strategy.scope():
        model = build_and_compile()
    model.fit(data, epochs=3, callbacks=runtime.callbacks(batch_size=...))
    runtime.save_model(model)              # every worker calls it; only the chief keeps it

Importing this package does not import TensorFlow: each function imports it when
called, so a script can read its role (and a launcher can import tfdist) cheaply. It does
make TensorFlow's own import, whoever asks for it, cheaper for the task
(:mod:`tfdist.node.import_gc`): import it first.
"""

from __future__ import annotations

import dataclasses
import os

from tfdist.node import import_gc
from tfdist.runtime.coordinator import Loop
from tfdist.runtime.data import (
    FileShardingWarning,
    FileShards,
    auto_shard_policy,
    dataset_creator,
    distribute,
    distributed_from_function,
    global_batch_size,
    per_worker_dataset,
    shard_files,
    shard_for,
    with_auto_shard,
)
from tfdist.runtime.env import Context, Dirs, input_files, input_is_share, output_dir, read_context
from tfdist.runtime.evaluator import model_checkpoint_loader, run_sidecar_evaluator
from tfdist.runtime.keras_callbacks import callbacks, clear_done, mark_done, progress_callback
from tfdist.runtime.preemption import PreemptionGuard
from tfdist.runtime.progress import report
from tfdist.runtime.saving import save_checkpoint, save_model
from tfdist.runtime.strategies import StrategyOrderError, serve_forever, strategy

import_gc.install()  # before the script imports TensorFlow (none of the above does)


def context(**dirs: str | os.PathLike[str] | None) -> Context:
    """This task's :class:`Context`; ``num_replicas`` is set once :func:`strategy` ran.

    Keyword arguments (``model=``, ``checkpoints=``, ``backup=``, ``tensorboard=``)
    override the job's directories.
    """
    from tfdist.runtime import strategies as _strategy

    ctx = read_context(**dirs)
    built = _strategy.current()
    if built is not None:
        ctx = dataclasses.replace(ctx, num_replicas=int(built.num_replicas_in_sync))
        kind = _strategy.current_kind()
        if kind:
            ctx = dataclasses.replace(ctx, strategy=kind)
    return ctx


def preemption_guard(strategy: object | None = None, *, window: float | None = None) -> PreemptionGuard:
    """For custom loops: SIGTERM now asks to save at a step every worker agrees on, a few
    steps on (see PreemptionGuard)."""
    return PreemptionGuard(strategy, window=window)


__all__ = [
    "Context",
    "Dirs",
    "FileShardingWarning",
    "FileShards",
    "Loop",
    "PreemptionGuard",
    "StrategyOrderError",
    "auto_shard_policy",
    "callbacks",
    "clear_done",
    "context",
    "dataset_creator",
    "distribute",
    "distributed_from_function",
    "global_batch_size",
    "input_files",
    "input_is_share",
    "mark_done",
    "model_checkpoint_loader",
    "output_dir",
    "per_worker_dataset",
    "preemption_guard",
    "progress_callback",
    "read_context",
    "report",
    "run_sidecar_evaluator",
    "save_checkpoint",
    "save_model",
    "serve_forever",
    "shard_files",
    "shard_for",
    "strategy",
    "with_auto_shard",
]
