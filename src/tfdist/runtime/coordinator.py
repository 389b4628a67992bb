"""Custom training loops under ClusterCoordinator, with one code path for all strategies.

With ParameterServerStrategy the chief schedules functions on workers and joins them;
each scheduled call should run several steps, because one RPC round trip per step
dominates with small models. :class:`Loop` hides the coordinator: under any other
strategy (or a plain ``python train.py``) the same calls run in this process.

:meth:`Loop.run` also sends step reports while it waits (at most once a second by
default): under ParameterServerStrategy this is the only step-level progress there is,
since tf_keras runs no batch hooks there. The chief learns of finished steps by waiting
for the scheduled calls in order, so a report lags the fastest worker by up to one call
and counts ``steps_per_call`` steps at a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tfdist import contract
from tfdist.runtime import data as _data
from tfdist.runtime import progress
from tfdist.runtime import strategies as _strategy
from tfdist.runtime.env import read_context
from tfdist.runtime.sync.config import warn_if_update_ignored


class Loop:
    """Schedule multi-step functions over per-worker datasets.

    ``dataset_fn(input_context)`` (or ``dataset_fn(batch, input_context)`` with
    ``global_batch``) builds the dataset on each worker; it should repeat forever.
    """

    def __init__(
        self,
        dataset_fn: Callable[..., Any],
        *,
        global_batch: int | None = None,
        strategy: Any | None = None,
        report_every_seconds: float | None = progress.EVERY_SECONDS,
        report_every_steps: int | None = None,
    ) -> None:
        import tensorflow as tf

        self.strategy = strategy or _strategy.current() or _strategy.strategy()
        warn_if_update_ignored(read_context().options, "runtime.Loop")
        self.coordinator = None
        if getattr(self.strategy, "_should_use_with_coordinator", False):
            self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(self.strategy)
            per_worker = _data.per_worker_dataset(self.coordinator, dataset_fn, global_batch, self.strategy)
        else:
            per_worker = _data.distributed_from_function(dataset_fn, global_batch, self.strategy)
        self.iterator = iter(per_worker)
        self.steps_done = 0
        self.seconds = 0.0  # wall time of the last run()
        self.global_batch = global_batch
        self.throttle = progress.Throttle(report_every_seconds, report_every_steps)
        self._begun = False

    def begin(self, step: int) -> None:
        """Training starts (or, after a restore, resumes) at ``step``: step reports count on
        from it, and the launcher's goodput learns which steps were done again. Call it after
        restoring and before the first :meth:`run`; without it the first run marks the start
        with no step, and the launcher judges lost work from the checkpoints reported."""
        self.steps_done = int(step)
        self._begun = True
        progress.mark(contract.MARK_BEGIN, step=self.steps_done)

    def multi_step(self, replica_fn: Callable[[Any], Any], steps_per_call: int) -> Any:
        """A tf.function running ``replica_fn(batch)`` ``steps_per_call`` times.

        ``replica_fn`` returns a scalar (e.g. the loss); the function returns its mean
        over the steps and replicas.
        """
        import tensorflow as tf

        strat = self.strategy
        mean = tf.distribute.ReduceOp.MEAN

        @tf.function
        def fn(iterator: Any) -> Any:
            total = tf.constant(0.0)
            for _ in tf.range(steps_per_call):
                out = strat.run(replica_fn, args=(next(iterator),))
                total += tf.cast(strat.reduce(mean, out, axis=None), tf.float32)
            return total / steps_per_call

        fn.steps_per_call = steps_per_call  # type: ignore[attr-defined]
        return fn

    def run(self, fn: Any, calls: int) -> list[float]:
        """Schedule ``fn`` ``calls`` times, wait for all, return each call's value."""
        if not self._begun:
            self._begun = True
            progress.mark(contract.MARK_BEGIN)
        start = time.monotonic()
        per_call = getattr(fn, "steps_per_call", 1)
        self.throttle.restart(self.steps_done)
        if self.coordinator is None:
            values = []
            for i in range(calls):
                values.append(fn(self.iterator))
                self._maybe_report(self.steps_done + (i + 1) * per_call, values[-1])
        else:
            values = [self.coordinator.schedule(fn, args=(self.iterator,)) for _ in range(calls)]
            if self.throttle.enabled:
                for i, value in enumerate(values):  # all are queued: waiting in order costs nothing
                    _wait(value)
                    self._maybe_report(self.steps_done + (i + 1) * per_call, value)
            self.coordinator.join()
        self.seconds = time.monotonic() - start
        self.steps_done += calls * per_call
        return [float(_fetch(v)) for v in values]

    def _maybe_report(self, step: int, value: Any) -> None:
        rate = self.throttle.due(step)
        if rate is None:
            return
        # the last call's value, read only when a report is due
        progress.report_step(rate, step, self.global_batch, _fetch(value))


def _wait(value: Any) -> None:
    """Until a scheduled call has finished, without copying its result to the chief: TF
    2.21's RemoteValue has an event for that (private). Fetching every result as it came
    instead cost ~7 % of the step rate here (a copy per call, competing with the workers);
    a report fetches one result, at most once a second."""
    event = getattr(value, "_status_available_event", None)
    if event is not None:
        event.wait()
    else:
        value.fetch()


def _fetch(value: Any) -> Any:
    if hasattr(value, "fetch"):
        return value.fetch()
    return value.numpy() if hasattr(value, "numpy") else value
