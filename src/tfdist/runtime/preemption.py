"""Save a backup when a MultiWorkerMirrored task is preempted (SIGTERM), then leave.

TensorFlow's PreemptionCheckpointHandler does this only on Google Cloud (tf_keras enables
``save_before_preemption`` nowhere else), so tfdist does the equivalent itself:

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
from typing import Any

from tfdist.runtime import strategies as _strategy

#: int save_freq gives BackupAndRestore step-level restore; it never triggers by count.
_NEVER = 2**62


def preemptible_backup(backup_dir: str, task: str, grace: float = 8.0, check_every: int = 1) -> Any:
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
            strategy = self.model.distribute_strategy

            @tf.function
            def agree(flag: Any) -> Any:
                per_replica = strategy.run(lambda x: tf.cast(x, tf.float32), args=(flag,))
                return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

            self._agree = agree
            self._requested = _strategy.defer_sigterm(grace)

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            self._seen += 1
            if self._seen % check_every:
                return
            if float(self._agree(tf.constant(1 if self._requested.is_set() else 0))) > 0:
                self._backup(epoch=self._current_epoch, batch=batch)
                print(f"tfdist: {task} preempted: saved a backup at epoch {self._current_epoch + 1}, "
                      f"batch {batch + 1}; exiting", flush=True)
                sys.stderr.flush()
                os._exit(143)

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self._backup(epoch=epoch)  # saved batch is the last one: resume at the next epoch

        def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
            _strategy.undefer_sigterm()
            super().on_train_end(logs)

    return PreemptibleBackup()
