"""Save before leaving when a task is preempted (SIGTERM), then exit 143 (retryable).

TensorFlow's PreemptionCheckpointHandler does this only on Google Cloud (tf_keras enables
``save_before_preemption`` nowhere else), so tfdist does the equivalent itself. Three
forms, one mechanism:

- ``model.fit`` under MultiWorkerMirrored: :func:`preemptible_backup` (in
  ``runtime.callbacks()``) saves the BackupAndRestore state at the agreed step;
- ``model.fit`` on a parameter-server chief: :func:`epoch_end_exit` (in
  ``runtime.callbacks()``) leaves right after the epoch's backup, if that comes within the
  save window (tf_keras runs no batch hooks under ParameterServerStrategy);
- custom loops (any strategy): :class:`PreemptionGuard` says when to save; the loop saves
  its own checkpoint and calls :meth:`PreemptionGuard.exit`.

How the MultiWorkerMirrored forms work:

- SIGTERM on any task only raises a flag (``strategies.defer_sigterm``), with a grace
  timer as the backstop.
- After every training batch all workers agree on the flag with one tiny all-reduce (a
  few milliseconds on loopback), so every worker sees the preemption at the same step.
- Then each worker writes the BackupAndRestore checkpoint of that step (the chief keeps
  it, the others write temporary copies, as tf_keras does) and exits 143, which restart
  policies treat as retryable. tfdist restarts the group; BackupAndRestore resumes at the
  next batch of the same epoch instead of the start of the epoch.

Epoch ends are backed up as usual, so a crash that gives no warning (SIGKILL, OOM) still
loses at most one epoch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any, NoReturn

from tfdist import contract
from tfdist.runtime import strategies as _strategy
from tfdist.runtime.env import read_context

#: int save_freq gives BackupAndRestore step-level restore; it never triggers by count.
_NEVER = 2**62
#: Save window when the launcher's grace is unknown (a plain ``python train.py``).
DEFAULT_WINDOW = 8.0


def save_window(env: Mapping[str, str] | None = None) -> float:
    """Seconds a preempted task may spend saving: the launcher's grace period
    (TFDIST_STOP_GRACE, the job's ``stop_grace_seconds``) less 2 s to exit before SIGKILL,
    at least 1 s."""
    env = os.environ if env is None else env
    try:
        grace = float(env[contract.STOP_GRACE])
    except (KeyError, ValueError):
        return DEFAULT_WINDOW
    return max(1.0, grace - 2.0)


def _any_worker(strategy: Any) -> Any:
    """A tf.function: the sum over all replicas of a 0/1 flag (a one-number all-reduce).
    Every worker calls it at the same steps and gets the same answer."""
    import tensorflow as tf

    @tf.function
    def agree(flag: Any) -> Any:
        per_replica = strategy.run(lambda x: tf.cast(x, tf.float32), args=(flag,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return agree


def _defer(window: float | None) -> Any:
    """From now on SIGTERM asks to save (the returned event) instead of ending the task,
    which exits anyway once the save window (default :func:`save_window`) closes."""
    return _strategy.defer_sigterm(save_window() if window is None else window)


def _arm(task: str, window: float | None) -> Any:
    """:func:`_defer`, with tfdist's SIGTERM handler installed first."""
    _strategy.install_sigterm_exit(task)  # once per process; MWMS has it from strategy()
    return _defer(window)


def _leave(task: str, what: str) -> NoReturn:
    print(f"tfdist: {task} preempted: {what}; exiting", flush=True)
    sys.stderr.flush()
    os._exit(143)


class PreemptionGuard:
    """Tells a custom training loop when to save because the task was asked to stop.

    After it is made, SIGTERM no longer ends the task at once: it sets a flag and starts
    the save window (:func:`save_window`; the task exits when it closes, saved or not).
    Call :meth:`requested` at step boundaries; when it is True, save a checkpoint and call
    :meth:`exit`::

        guard = runtime.preemption_guard()
        for step in ...:
            train_step(iterator)
            if guard.requested():
                runtime.save_checkpoint(checkpoint, ctx.dirs.checkpoints, strategy)
                guard.exit(f"saved step {step}")

    Under MultiWorkerMirrored in a cluster, :meth:`requested` is a collective (a one-number
    all-reduce): every worker must call it at the same steps, and all get the same answer,
    so all save the same step (the save is a collective too). Elsewhere it only reads the
    local flag. Under parameter-server training only the chief runs the loop.
    """

    def __init__(self, strategy: Any | None = None, *, window: float | None = None) -> None:
        ctx = read_context()
        self.task = ctx.task
        self.strategy = strategy or _strategy.current() or _strategy.strategy()
        self._requested = _arm(ctx.task, window)
        self._agree: Any = None
        if _strategy.current_kind() == "multi_worker_mirrored" and ctx.in_cluster:
            self._agree = _any_worker(self.strategy)

    def requested(self) -> bool:
        """True once this task (or, under MultiWorkerMirrored, any worker) got SIGTERM."""
        local = self._requested.is_set()
        if self._agree is None:
            return local
        import tensorflow as tf

        return float(self._agree(tf.constant(1 if local else 0))) > 0

    def exit(self, what: str = "saved") -> NoReturn:
        """Leave with 143 (128 + SIGTERM), which restart policies treat as retryable."""
        _leave(self.task, what)

    def close(self) -> None:
        """SIGTERM ends the task at once again."""
        _strategy.undefer_sigterm()

    def __enter__(self) -> PreemptionGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def epoch_end_exit(task: str, window: float | None = None) -> Any:
    """A callback for ``model.fit`` on a parameter-server chief: a SIGTERM during an epoch
    lets the epoch finish (and BackupAndRestore back it up, which must come earlier in the
    callback list) within the save window, then leaves with 143."""
    import tf_keras

    class EpochEndExit(tf_keras.callbacks.Callback):
        def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
            self._requested = _arm(task, window)

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            if self._requested.is_set():
                _leave(task, f"epoch {epoch + 1} was backed up")

        def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
            _strategy.undefer_sigterm()

    return EpochEndExit()


def preemptible_backup(backup_dir: str, task: str, grace: float | None = None, check_every: int = 1) -> Any:
    """A BackupAndRestore that also saves at the step where a preemption was agreed."""
    import tensorflow as tf
    import tf_keras

    class PreemptibleBackup(tf_keras.callbacks.BackupAndRestore):
        def __init__(self) -> None:
            super().__init__(backup_dir=backup_dir, save_freq=_NEVER)
            self._seen = 0
            self._agree: Any = None
            self._requested: Any = None

        def _implements_train_batch_hooks(self) -> bool:
            return True

        def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
            super().on_train_begin(logs)
            state = self._training_state
            epoch, batch = int(state._ckpt_saved_epoch.numpy()), int(state._ckpt_saved_batch.numpy())
            if epoch >= 0:
                print(f"tfdist: {task} resuming from backup saved at epoch {epoch + 1}, batch {batch + 1}",
                      flush=True)
            self._agree = _any_worker(self.model.distribute_strategy)
            # the SIGTERM handler is strategy()'s (unless exit_on_sigterm=False kept TF's own)
            self._requested = _defer(grace)

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            self._seen += 1
            if self._seen % check_every:
                return
            if float(self._agree(tf.constant(1 if self._requested.is_set() else 0))) > 0:
                self._backup(epoch=self._current_epoch, batch=batch)
                _leave(task, f"saved a backup at epoch {self._current_epoch + 1}, batch {batch + 1}")

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self._backup(epoch=epoch)  # saved batch is the last one: resume at the next epoch

        def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
            _strategy.undefer_sigterm()
            super().on_train_end(logs)

    return PreemptibleBackup()
