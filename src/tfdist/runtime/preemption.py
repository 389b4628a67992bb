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
- At its next step the preempted worker proposes a step a little ahead through the
  coordination service's key-value store; every worker learns it from a background
  watcher, so the per-step check reads a local attribute: no collective, no host sync
  (``agreement.py`` has the protocol and why every worker saves the same step).
- At that step each worker writes the BackupAndRestore checkpoint (the chief keeps it,
  the others write temporary copies, as tf_keras does) and exits 143, which restart
  policies treat as retryable. tfdist restarts the group; BackupAndRestore resumes at the
  next batch of the same epoch instead of the start of the epoch.
- A preemption that comes too late for the step check (the agreed step lies beyond the
  last step) is found at the end of training by one all-reduce: every worker then keeps
  the final backup and exits 143; the restarted group has nothing left to train.

Epoch ends are backed up as usual, so a crash that gives no warning (SIGKILL, OOM) still
loses at most one epoch.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any, NoReturn

from tfdist import contract
from tfdist.runtime import progress
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


def _agreement(strategy_kind: str | None, window: float | None, requested: Any) -> Any:
    """An :class:`~tfdist.runtime.agreement.Agreement` for this run under MultiWorkerMirrored
    in a cluster (the SIGTERM flag must be armed first), else None: alone, the local flag
    is the answer."""
    ctx = read_context()
    if strategy_kind != "multi_worker_mirrored" or not ctx.in_cluster:
        return None
    from tfdist.runtime.agreement import Agreement, KeyValue, training_tasks

    return Agreement(KeyValue(), ctx.task, training_tasks(ctx.cluster), requested,
                     window=save_window() if window is None else window)


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
    Call :meth:`requested` after every step; when it is True, save a checkpoint and call
    :meth:`exit`. After the loop, :meth:`at_end` catches a SIGTERM that came during the
    last steps::

        guard = runtime.preemption_guard()
        for step in ...:
            train_step(iterator)
            if guard.requested():
                runtime.save_checkpoint(checkpoint, ctx.dirs.checkpoints, strategy)
                guard.exit(f"saved step {step}")
        if guard.at_end():
            runtime.save_checkpoint(checkpoint, ctx.dirs.checkpoints, strategy)
            guard.exit("saved the end of training")

    Under MultiWorkerMirrored in a cluster every worker must call :meth:`requested` after
    every step: it counts steps and reads a flag a background thread sets when a worker
    proposes a save step (no collective, see ``agreement.py``), so all workers say True at
    the same step. :meth:`at_end` is one all-reduce. Elsewhere both only read the local
    flag. Under parameter-server training only the chief runs the loop.
    """

    def __init__(self, strategy: Any | None = None, *, window: float | None = None) -> None:
        ctx = read_context()
        self.task = ctx.task
        self.strategy = strategy or _strategy.current() or _strategy.strategy()
        self._requested = _arm(ctx.task, window)
        self._agreement = _agreement(_strategy.current_kind(), window, self._requested)

    def requested(self) -> bool:
        """Count a step; True when this is the step to save at (every worker alike)."""
        if self._agreement is None:
            return self._requested.is_set()
        return bool(self._agreement.tick())

    def at_end(self) -> bool:
        """Once, after the last step: True (on every worker) if a preemption came too late
        for :meth:`requested`; save and :meth:`exit` then. A collective under
        MultiWorkerMirrored; it also ends the guard's background watcher."""
        if self._agreement is None:
            return self._requested.is_set()
        from tfdist.runtime.agreement import any_worker_fn

        return bool(self._agreement.pending(any_worker_fn(self.strategy)))

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


def preemptible_backup(backup_dir: str, task: str, grace: float | None = None) -> Any:
    """A BackupAndRestore that also saves at the step where a preemption was agreed.

    Its per-batch work is a step count and an attribute read: it touches no tensor and
    does not assign ``_ckpt_saved_batch`` before every batch as tf_keras does with an
    integer ``save_freq`` (it sets it right before each save instead)."""
    import tf_keras

    class PreemptibleBackup(tf_keras.callbacks.BackupAndRestore):
        def __init__(self) -> None:
            super().__init__(backup_dir=backup_dir, save_freq=_NEVER)
            self._agreement: Any = None
            self._last_batch = -1

        def _implements_train_batch_hooks(self) -> bool:
            return True

        def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
            super().on_train_begin(logs)
            state = self._training_state
            epoch, batch = int(state._ckpt_saved_epoch.numpy()), int(state._ckpt_saved_batch.numpy())
            if epoch >= 0:
                print(f"tfdist: {task} resuming from backup saved at epoch {epoch + 1}, batch {batch + 1}",
                      flush=True)
            # the SIGTERM handler is strategy()'s (unless exit_on_sigterm=False kept TF's own)
            self._agreement = _agreement("multi_worker_mirrored", grace, _defer(grace))

        def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            pass  # the saved batch is set at each save (see _save)

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            self._last_batch = batch  # the last step this call ran (steps_per_execution)
            if self._agreement.tick():
                started = time.monotonic()
                self._save(self._current_epoch, batch)
                steps = self.params.get("steps") or 0
                progress.mark(contract.MARK_CHECKPOINT, step=self._current_epoch * steps + batch + 1,
                              seconds=time.monotonic() - started)
                _leave(task, f"saved a backup at epoch {self._current_epoch + 1}, batch {batch + 1}")

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self._save(epoch, self._last_batch)  # its last batch: resume at the next epoch

        def _save(self, epoch: int, batch: int) -> None:
            self._training_state._ckpt_saved_epoch.assign(epoch)
            self._training_state._ckpt_saved_batch.assign(batch)
            self._backup(epoch=epoch, batch=batch)

        def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
            from tfdist.runtime.agreement import any_worker_fn

            if self._agreement.pending(any_worker_fn(self.model.distribute_strategy)):
                # the last epoch's backup stays: the restarted group finds nothing to train
                _leave(task, f"training ended; kept the backup of epoch {self._current_epoch + 1}")
            _strategy.undefer_sigterm()
            super().on_train_end(logs)

    return PreemptibleBackup()
