"""Keras callbacks every distributed job wants, pointed at the job's directories.

- BackupAndRestore into ``dirs.backup``: a restarted group resumes at the last epoch;
  under MultiWorkerMirrored a SIGTERM (preemption) first saves the current step
  (see preemption.py), so the group resumes there.
- ModelCheckpoint (weights, one per epoch) into ``dirs.checkpoints``: what the sidecar
  evaluator reads. The chief marks the end of training there (see :func:`mark_done`)
  so the evaluator knows when to stop.
- TensorBoard into ``dirs.tensorboard`` (epoch-level: batch-level hooks are not allowed
  under ParameterServerStrategy).
- Progress reports to the launcher: every epoch, and within epochs at most once a second
  (:class:`tfdist.runtime.progress.Throttle`), from the step count and the ``logs`` tf_keras
  passes (tensors: read only when a report is due, so the host waits for the device once
  a second at most). Under ParameterServerStrategy tf_keras allows no batch hooks, so
  ``fit`` there reports per epoch only (``runtime.Loop`` reports its steps).
- Goodput marks (see :func:`tfdist.runtime.progress.mark`): where training begins (the
  first batch, or the first epoch under ParameterServerStrategy: after BackupAndRestore
  restored, so its step is the restored one), how long the epoch-end backup and checkpoint
  saves blocked training (timed by a pair of callbacks around them), how long evaluation
  inside ``fit`` took. One line per save, restore or evaluation; nothing per step.

Non-chief MultiWorkerMirrored workers write their copies to temporary directories that
tf_keras removes itself, so only the chief's files remain.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

from tfdist import contract
from tfdist.contract import DONE_MARKER
from tfdist.runtime import progress
from tfdist.runtime import strategies as _strategy
from tfdist.runtime.env import Dirs, read_context
from tfdist.runtime.sync.config import warn_if_update_ignored

#: Strategies BackupAndRestore supports (tf_keras raises for the others).
_BACKUP_STRATEGIES = ("multi_worker_mirrored", "parameter_server", "mirrored", "none")


def mark_done(checkpoint_dir: str | Path | None = None, final: str | None = None) -> Path | None:
    """Write the end-of-training marker on the chief (a no-op elsewhere): the evaluator's cue.

    Its content names the last checkpoint. Returns the marker's path on the chief.
    """
    ctx = read_context()
    if not ctx.is_chief:
        return None
    directory = Path(checkpoint_dir) if checkpoint_dir else ctx.dirs.checkpoints
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / DONE_MARKER
    tmp = marker.with_suffix(".tmp")
    tmp.write_text((final or "") + "\n")
    tmp.replace(marker)  # atomic: an evaluator never reads half a marker
    return marker


def clear_done(checkpoint_dir: str | Path | None = None) -> None:
    """On the chief, remove a marker left by an earlier run in the same directory."""
    ctx = read_context()
    if not ctx.is_chief:
        return
    directory = Path(checkpoint_dir) if checkpoint_dir else ctx.dirs.checkpoints
    (directory / DONE_MARKER).unlink(missing_ok=True)


def split_logs(logs: dict[str, Any] | None) -> tuple[float | None, dict[str, Any]]:
    """``(loss, metrics)`` from Keras logs: everything but ``loss`` is a metric."""
    logs = dict(logs or {})
    loss = logs.pop("loss", None)
    return loss, logs


# the class is made here so tf_keras is imported only when asked; mccabe adds its methods up
def _make_progress_callback() -> Any:  # noqa: C901
    import tf_keras

    class ProgressCallback(tf_keras.callbacks.Callback):
        """Reports each epoch, steps within epochs (throttled), and the final metrics with
        ``final: true``."""

        def __init__(self, batch_size: int | None, dirs: Dirs | None, chief: bool,
                     throttle: progress.Throttle | None = None) -> None:
            super().__init__()
            self.batch_size = batch_size
            self.dirs = dirs
            self.chief = chief
            self.throttle = throttle or progress.Throttle()
            self.step_reports = self.throttle.enabled and _strategy.current_kind() != "parameter_server"
            self._supports_tf_logs = True  # tensors in, read only when a report is due
            self.last: dict[str, Any] = {}
            self.epochs: int | None = None
            self.step = 0
            self.epoch = 0
            self._begun = False
            self._testing: float | None = None

        def _implements_train_batch_hooks(self) -> bool:
            return bool(self.step_reports)  # tf_keras refuses batch hooks under PSS

        def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
            self.epochs = self.params.get("epochs")
            if self.chief and self.dirs is not None:
                clear_done(self.dirs.checkpoints)

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.started = time.monotonic()
            self.epoch = epoch
            self.throttle.restart(epoch * (self.params.get("steps") or 0))
            if not self._begun and not self.step_reports:  # no batch hooks: the epoch begins it
                self._begin(epoch * (self.params.get("steps") or 0))

        def _begin(self, step: int) -> None:
            self._begun = True
            progress.mark(contract.MARK_BEGIN, step=step)

        def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            if not self._begun:  # a resumed epoch starts at the batch after the backup's
                self._begin(self.epoch * (self.params.get("steps") or 0) + batch)

        def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
            self._testing = time.monotonic()

        def on_test_end(self, logs: dict[str, Any] | None = None) -> None:
            if self._testing is not None:
                progress.mark(contract.MARK_EVAL, seconds=time.monotonic() - self._testing)
                self._testing = None

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            step = self.epoch * (self.params.get("steps") or 0) + batch + 1
            rate = self.throttle.due(step)
            if rate is None:
                return
            # the loss is a tensor: reading it waits for this step, once per report
            progress.report_step(rate, step, self.batch_size, (logs or {}).get("loss"), epochs=self.epochs)

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            seconds = max(time.monotonic() - self.started, 1e-9)
            steps = self.params.get("steps") or 0
            # From the epoch number, so a run resumed by BackupAndRestore counts on.
            self.step = (epoch + 1) * steps if steps else self.step
            loss, metrics = split_logs(logs)
            rate = steps * self.batch_size / seconds if self.batch_size and steps else None
            self.last = {"epoch": epoch + 1, "loss": loss, "metrics": metrics}
            progress.report(
                epoch=epoch + 1,
                epochs=self.epochs,
                step=self.step,
                loss=loss,
                metrics=metrics,
                examples_per_sec=rate,
                steps_per_sec=steps / seconds if steps else None,
                final=False,
            )

        def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
            progress.report(**self.last, epochs=self.epochs, step=self.step, final=True)
            if self.chief and self.dirs is not None:
                mark_done(self.dirs.checkpoints, _latest(self.dirs.checkpoints))

    return ProgressCallback


def _save_timers() -> tuple[Any, Any]:
    """Two callbacks to put before and after the epoch-end savers (backup, checkpoints):
    the second sends a goodput mark with the seconds between them, the saves' cost."""
    import tf_keras

    class Clock:
        started: float | None = None

    clock = Clock()

    class SaveStarts(tf_keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            clock.started = time.monotonic()

    class SaveEnds(tf_keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            if clock.started is not None:
                steps = self.params.get("steps") or 0
                progress.mark(contract.MARK_CHECKPOINT, step=(epoch + 1) * steps if steps else None,
                              seconds=time.monotonic() - clock.started)
                clock.started = None

    return SaveStarts(), SaveEnds()


def _latest(directory: Path) -> str | None:
    import tensorflow as tf

    return tf.train.latest_checkpoint(str(directory))


def progress_callback(batch_size: int | None = None, dirs: Dirs | None = None, *,
                      every_seconds: float | None = progress.EVERY_SECONDS,
                      every_steps: int | None = None) -> Any:
    """Only the progress reporter (for scripts that manage their own callbacks); step
    reports come every ``every_steps`` steps or ``every_seconds`` seconds (None: off)."""
    ctx = read_context()
    throttle = progress.Throttle(every_seconds, every_steps)
    return _make_progress_callback()(batch_size, dirs, ctx.is_chief, throttle)


def callbacks(
    batch_size: int | None = None,
    *,
    backup: bool = True,
    checkpoints: bool = True,
    tensorboard: bool | None = None,
    report: bool = True,
    dirs: Dirs | None = None,
    report_every_seconds: float | None = progress.EVERY_SECONDS,
    report_every_steps: int | None = None,
) -> list[Any]:
    """The job's callbacks for ``model.fit``; ``batch_size`` (global) gives examples/sec.

    Step reports within epochs come every ``report_every_steps`` steps or
    ``report_every_seconds`` seconds, whichever first (None turns either off).

    Call after :func:`tfdist.runtime.strategy`. BackupAndRestore is left out under
    CentralStorage and OneDevice strategies, which tf_keras does not support for it.
    TensorBoard logs are written when the ``tensorboard`` package is installed (TF 2.21
    no longer depends on it, and tf.summary fails without it); True insists.
    """
    import tf_keras

    ctx = read_context()
    dirs = dirs or ctx.dirs
    kind = _strategy.current_kind() or ctx.strategy
    warn_if_update_ignored(ctx.options, "model.fit")
    found: list[Any] = []
    if backup and kind == "multi_worker_mirrored" and ctx.in_cluster:
        from tfdist.runtime.preemption import preemptible_backup

        found.append(preemptible_backup(str(dirs.backup), ctx.task))
    elif backup and kind in _BACKUP_STRATEGIES:
        found.append(tf_keras.callbacks.BackupAndRestore(backup_dir=str(dirs.backup)))
    if checkpoints:
        dirs.checkpoints.mkdir(parents=True, exist_ok=True)
        found.append(
            tf_keras.callbacks.ModelCheckpoint(
                filepath=str(dirs.checkpoints / "ckpt-{epoch:03d}"), save_weights_only=True
            )
        )
    if report and found:
        starts, ends = _save_timers()
        found = [starts, *found, ends]
    if tensorboard is None:
        tensorboard = importlib.util.find_spec("tensorboard") is not None
    if tensorboard:
        found.append(
            tf_keras.callbacks.TensorBoard(log_dir=str(dirs.tensorboard), write_graph=False, profile_batch=0)
        )
    if report:
        throttle = progress.Throttle(report_every_seconds, report_every_steps)
        found.append(_make_progress_callback()(batch_size, dirs, ctx.is_chief, throttle))
    if backup and kind == "parameter_server" and ctx.task_type == "chief":
        from tfdist.runtime.preemption import epoch_end_exit

        found.append(epoch_end_exit(ctx.task))  # last: it leaves once the epoch is saved
    return found
