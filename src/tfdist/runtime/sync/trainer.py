"""``SyncTrainer``: the custom training loop of :mod:`tfdist.runtime.sync` (imports TF).

Where things run (chief = coordinator, N workers, P ps):

* **workers** (``ClusterCoordinator.schedule`` closures): read the global step ``g``, take
  one batch from their per-worker dataset, compute the gradients and apply them, packed
  per ps, to that ps's accumulator with ``local_step=g``;
* **ps**: one ``ResourceConditionalAccumulator`` per ps, created by the coordinator with
  its op placed on the ps device. It averages what it accepted and atomically rejects
  gradients whose ``local_step`` is below its global step;
* **coordinator**: one tf.function per step whose ops all sit on the ps devices: take
  (blocks until K gradients and the step's marker arrived), set the accumulators' global
  step to ``g + 1 - s``, drain the gradients that slipped in between take and set (they
  are stale: counted, discarded), apply the zero marker of the next step, rescale, apply
  the average with the Keras optimizer, ``g += 1``.

A blocking take must not run on the default (synchronous) eager executor: measured, the
worker closures then stall as well, so nothing ever arrives. On an async executor of its
own it blocks only the caller (see ``_run_on_ps``; it also runs on a thread of its own).

Counting. A take's mean tells the count: each gradient carries a 1 in an extra slot and
the coordinator puts one zero "marker" per step, so the slot's mean is n / (n + 1). A
worker closure counts its attempts in a variable, so at any time
``dropped = attempts - taken - pending`` (exact once no closure is in flight).

Sparse gradients (embeddings) are densified: TF2 has no resource-based sparse
accumulator (``SparseConditionalAccumulator`` takes a TF1 ref handle, which eager and
tf.function cannot pass). The coordinator turns the averaged dense gradient of such a
variable back into ``IndexedSlices`` of its non-zero rows, so optimizers keep their
sparse behaviour; the cost is one dense vocab x dim vector per worker per step.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf
from tensorflow.python.eager import context as tf_context
from tensorflow.python.eager import executor as tf_executor

from tfdist.runtime.sync import policy
from tfdist.runtime.sync.config import UpdateConfig, from_env, resolve

_COUNTER = itertools.count()


@dataclass
class StepStats:
    """What one applied step did."""

    step: int
    counts: list[int]  # gradients averaged, per ps accumulator
    drained: int  # late gradients discarded between take and set-global-step
    seconds: float


@dataclass
class TrainStats:
    """Totals over a run; ``dropped`` is exact once no closure is in flight."""

    steps: int = 0
    attempts: int = 0
    taken: int = 0
    pending: int = 0
    dropped: int = 0
    history: list[StepStats] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "attempts": self.attempts,
            "taken": self.taken,
            "pending": self.pending,
            "dropped": self.dropped,
        }


def flat_variables(variables: list[Any]) -> list[Any]:
    """Trainable variables with ShardedVariables expanded into their shards."""
    out: list[Any] = []
    for v in variables:
        shards = getattr(v, "variables", None)
        if shards is not None and not isinstance(v, tf.Variable):
            out.extend(shards)
        else:
            out.append(v)
    return out


class _Group:
    """The variables on one ps device and their accumulator."""

    def __init__(self, device: str, indices: list[int], variables: list[Any], name: str):
        self.device = device
        self.indices = indices
        self.shapes = [v.shape for v in variables]
        self.sizes = [int(v.shape.num_elements()) for v in variables]
        self.size = sum(self.sizes) + 1  # + count slot
        with tf.device(device):
            self.handle = tf.raw_ops.ResourceConditionalAccumulator(
                dtype=tf.float32,
                shape=[self.size],
                shared_name=name,
                container="",
                reduction_type="MEAN",
            )


class SyncTrainer:
    """Custom training loop for ParameterServerStrategy with a chosen update mode.

    ``loss_fn(model, batch) -> scalar`` is traced into the worker closures. Build the
    model (its variables) and the optimizer under ``strategy.scope()`` first. ``update``
    is a :class:`~tfdist.runtime.sync.config.UpdateConfig`, a dict like ``options.update`` of the
    job spec, or None to read ``TFDIST_OPTIONS``. ``aux_fn(batch)`` adds a value to each
    closure's output (tests use it to see which batch went where).
    """

    def __init__(
        self,
        strategy: Any,
        model: Any,
        optimizer: Any,
        loss_fn: Any,
        update: Any = None,
        *,
        coordinator: Any = None,
        aux_fn: Any = None,
    ):
        self.strategy = strategy
        self.coordinator = coordinator or tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
        # not public in TF 2.21 (strategy.cluster_resolver is None under PSS)
        num_workers = int(getattr(strategy.extended, "_num_workers", 0)) or int(
            self.coordinator._cluster._num_workers
        )
        if isinstance(update, UpdateConfig):
            self.config = update
        elif update is None:
            self.config = from_env(num_workers)
        else:
            self.config = resolve(update, num_workers)
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.aux_fn = aux_fn
        self.variables = flat_variables(list(model.trainable_variables))
        self._sparse: set[int] = set()
        name = f"tfdist_sync_{next(_COUNTER)}_{uuid.uuid4().hex[:8]}"
        with strategy.scope():
            self.global_step = tf.Variable(0, dtype=tf.int64, name=f"{name}_step")
            self.attempts = tf.Variable(0, dtype=tf.int64, name=f"{name}_attempts")
            self.started = tf.Variable(0, dtype=tf.int64, name=f"{name}_started")
            optimizer.build(self.variables)
        self.groups: list[_Group] = []
        if self.config.synchronous:
            by_device: dict[str, list[int]] = {}
            for i, v in enumerate(self.variables):
                by_device.setdefault(v.device, []).append(i)
            for j, (device, idx) in enumerate(sorted(by_device.items())):
                self.groups.append(_Group(device, idx, [self.variables[i] for i in idx], f"{name}_acc{j}"))
        # A blocking take on the default sync executor stalls the worker closures too
        # (measured); on an async executor of its own it only blocks its caller.
        self._executor = tf_executor.new_executor(enable_async=True)
        self._thread = concurrent.futures.ThreadPoolExecutor(1, "tfdist-sync-aggregator")
        self._scheduled = 0
        self.outputs: list[Any] = []  # RemoteValues of the closures (loss, step, aux)
        self.stats = TrainStats()
        self._worker_fn = tf.function(self._worker_step)
        self._aggregate_fn = tf.function(self._aggregate)
        self._pending_fn = tf.function(self._pending)
        self._started_fn = tf.function(self._read_started)
        self._step_fn = tf.function(lambda: self.global_step.read_value())
        self._next_started: int | None = None
        self._attempts_base = 0
        self._reset_fn = tf.function(self._reset)
        self._started = False
        self._warm = False
        self._keep: list[Any] = []

    # -- worker side ----------------------------------------------------------------

    def _replica(self, batch: Any, local: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = self.loss_fn(self.model, batch)
        grads = tape.gradient(loss, self.variables)
        done = []
        if not self.config.synchronous:
            pairs = [(g, v) for g, v in zip(grads, self.variables, strict=False) if g is not None]
            done.append(self.optimizer.apply_gradients(pairs))
            with tf.control_dependencies(done):
                done = [self.global_step.assign_add(1)]
        else:
            for group in self.groups:
                parts = []
                for i in group.indices:
                    g = grads[i]
                    if g is None:
                        g = tf.zeros(self.variables[i].shape, tf.float32)
                    elif isinstance(g, tf.IndexedSlices):
                        self._sparse.add(i)
                        g = tf.convert_to_tensor(g)
                    parts.append(tf.reshape(tf.cast(g, tf.float32), [-1]))
                parts.append(tf.ones([1], tf.float32))
                flat = tf.concat(parts, 0)
                with tf.device(group.device):
                    done.append(
                        tf.raw_ops.ResourceAccumulatorApplyGradient(
                            handle=group.handle, local_step=local, gradient=flat
                        )
                    )
        with tf.control_dependencies(done):
            self.attempts.assign_add(1)
            aux = self.aux_fn(batch) if self.aux_fn is not None else tf.constant(0)
            return tf.identity(loss), tf.identity(local), aux

    def _worker_step(self, iterator: Any) -> Any:
        # Count the start, then read the step, then the batch and the parameters: the
        # gradient is labelled with a step no newer than the parameters it used.
        started = self.started.assign_add(1)
        with tf.control_dependencies([started]):
            local = self.global_step.read_value()
        with tf.control_dependencies([local]):
            batch = next(iterator)
        return self.strategy.run(self._replica, args=(batch, local))

    # -- coordinator side (ops on the ps devices) ---------------------------------------

    def _pending(self) -> Any:
        counts = []
        for group in self.groups:
            with tf.device(group.device):
                counts.append(tf.raw_ops.ResourceAccumulatorNumAccumulated(handle=group.handle))
        return tf.stack(counts), self.started.read_value()

    def _read_started(self) -> Any:
        return self.started.read_value()

    def _aggregate(self, num_required: Any) -> Any:
        new_step = self.global_step.read_value() + 1
        threshold = tf.maximum(new_step - self.config.staleness, 0)
        counts, drained, markers, grads = [], [], [], [None] * len(self.variables)
        for group in self.groups:
            with tf.device(group.device):
                avg = tf.raw_ops.ResourceAccumulatorTakeGradient(
                    handle=group.handle, num_required=num_required, dtype=tf.float32
                )
                with tf.control_dependencies([avg]):
                    set_op = tf.raw_ops.ResourceAccumulatorSetGlobalStep(
                        handle=group.handle, new_global_step=threshold
                    )
                with tf.control_dependencies([set_op]):
                    leaked = tf.raw_ops.ResourceAccumulatorNumAccumulated(handle=group.handle)

                def _drain(group: _Group = group, leaked: Any = leaked) -> Any:
                    t = tf.raw_ops.ResourceAccumulatorTakeGradient(
                        handle=group.handle, num_required=leaked, dtype=tf.float32
                    )
                    with tf.control_dependencies([t]):
                        return tf.identity(leaked)

                n_drained = tf.cond(leaked > 0, _drain, lambda leaked=leaked: tf.identity(leaked))
                with tf.control_dependencies([n_drained]):
                    marker = tf.raw_ops.ResourceAccumulatorApplyGradient(
                        handle=group.handle,
                        local_step=new_step,
                        gradient=tf.zeros([group.size], tf.float32),
                    )
                m = avg[-1]
                n = tf.round(m / (1.0 - m))
                scale = (n + 1.0) / tf.maximum(n, 1.0)
                flat = avg[:-1] * scale
                pieces = tf.split(flat, group.sizes) if len(group.sizes) > 1 else [flat]
                for i, piece, shape in zip(group.indices, pieces, group.shapes, strict=False):
                    g = tf.reshape(piece, shape)
                    if i in self._sparse:
                        g = _to_slices(g)
                    grads[i] = g
                counts.append(tf.cast(n, tf.int64))
                drained.append(n_drained)
                markers.append(marker)
        with tf.control_dependencies(counts + markers):
            pairs = [(tf.cast(g, v.dtype), v) for g, v in zip(grads, self.variables, strict=False)]
            applied = self.optimizer.apply_gradients(pairs, skip_gradients_aggregation=True)
        with tf.control_dependencies([applied]):
            advanced = self.global_step.assign(new_step)
        with tf.control_dependencies([advanced]):
            started = self.started.read_value()
        return tf.stack(counts), tf.add_n(drained), started

    # -- the loop ---------------------------------------------------------------------

    def _top_up(self, iterator: Any, started: int | None = None) -> None:
        """Schedule closures so that ``tokens`` of them have not read the step yet.

        A closure not started yet will read the new step, so it is fresh; one already
        running may deliver a stale gradient and does not count (TF1's token queue).
        ``started`` comes from the ps (read after the step advanced)."""
        if started is None:
            started = int(self._run_on_ps(self._started_fn))
        queued = self._scheduled - started
        for _ in range(policy.closures_to_schedule(self.config, queued)):
            self.outputs.append(self.coordinator.schedule(self._worker_fn, args=(iterator,)))
            self._scheduled += 1

    def _run_on_ps(self, fn: Any, *args: Any) -> Any:
        """Run a coordinator function (ops on the ps) on the aggregator thread."""
        return self._thread.submit(self._run_blocking, fn, *args).result()

    def _run_blocking(self, fn: Any, *args: Any) -> Any:
        with tf_context.executor_scope(self._executor):
            out = fn(*args)
        self._executor.wait()
        return tf.nest.map_structure(lambda t: t.numpy(), out)

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        if self.config.synchronous:  # the marker of step 1

            @tf.function
            def first_markers() -> Any:
                for group in self.groups:
                    with tf.device(group.device):
                        tf.raw_ops.ResourceAccumulatorSetGlobalStep(
                            handle=group.handle, new_global_step=self.global_step + 0
                        )
                        tf.raw_ops.ResourceAccumulatorApplyGradient(
                            handle=group.handle,
                            local_step=self.global_step.read_value(),
                            gradient=tf.zeros([group.size], tf.float32),
                        )
                return tf.constant(0)

            self._run_on_ps(first_markers)

    def step(self, iterator: Any) -> StepStats:
        """Apply one step (synchronous modes): keep workers busy, wait, aggregate, apply."""
        self._start()
        t0 = time.monotonic()
        if self._next_started is None:
            self._top_up(iterator)
        else:
            self._top_up(iterator, self._next_started)
        k = self.config.replicas_to_aggregate
        if self.config.mode == "timeout" or not self._warm:
            # Poll (non-blocking) instead of a blocking take: always in timeout mode, and
            # for the first step, as a precaution: an early version hung in its first
            # blocking take (the cause turned out to be a closure top-up race, fixed in
            # _top_up; without polling 3 runs of 10 steps did not hang).
            while True:
                elapsed = time.monotonic() - t0
                pending, _ = self._run_on_ps(self._pending_fn)
                arrived = int(min(pending)) - 1
                take = policy.take_now(self.config, arrived, elapsed)
                if take:
                    k = take
                    break
                timeout = self.config.timeout_seconds or 0.0
                if self.config.mode == "timeout" and elapsed >= timeout:
                    k = self.config.min_replicas  # waits (blocking) for the minimum
                    break
                time.sleep(policy.poll_interval(elapsed))
            self._warm = True
        counts, drained, started = self._run_on_ps(self._aggregate_fn, tf.constant(k + 1, tf.int32))
        self._next_started = int(started)
        self.stats.steps += 1
        self.stats.taken += int(min(counts))
        out = StepStats(
            step=self.stats.steps,
            counts=[int(c) for c in counts],
            drained=int(drained),
            seconds=time.monotonic() - t0,
        )
        self.stats.history.append(out)
        return out

    def run(self, iterator: Any, steps: int, callback: Any = None, *, join: bool = True) -> TrainStats:
        """``steps`` applied updates (gradients applied, in async mode). ``callback(trainer,
        step_stats)`` runs after each step (``None`` stats in async mode); returning True
        stops early. ``join=False`` returns without waiting for closures in flight."""
        if not self.config.synchronous:
            return self._run_async(iterator, steps, callback, join=join)
        for _ in range(steps):
            st = self.step(iterator)
            if callback is not None and callback(self, st):
                break
        if join:
            self.finish()
        return self.stats

    def _run_async(self, iterator: Any, steps: int, callback: Any, *, join: bool) -> TrainStats:
        start = int(self._run_on_ps(self._step_fn))
        last = start
        while True:
            self._top_up(iterator)
            done = int(self._run_on_ps(self._step_fn))
            self.stats.steps = done - start
            if done - start >= steps:
                break
            if done != last:
                last = done
                if callback is not None and callback(self, None):
                    break
            time.sleep(0.002)
        if join:
            self.finish()
            self.stats.steps = int(self._run_on_ps(self._step_fn)) - start
        return self.stats

    def reset(self) -> None:
        """Start a new run with the same variables (benchmarks): wait for closures in
        flight, discard every pending gradient, advance the step, zero the counters."""
        self.coordinator.join()
        if self.config.synchronous and self._started:
            self._run_on_ps(self._reset_fn)
        self._attempts_base = int(self.attempts.numpy())
        self._next_started = None
        self.stats = TrainStats()

    def _reset(self) -> Any:
        new_step = self.global_step.read_value() + 1
        done = []
        for group in self.groups:
            with tf.device(group.device):
                n = tf.raw_ops.ResourceAccumulatorNumAccumulated(handle=group.handle)
                taken = tf.cond(
                    n > 0,
                    lambda g=group, n=n: tf.reduce_sum(
                        tf.raw_ops.ResourceAccumulatorTakeGradient(
                            handle=g.handle, num_required=n, dtype=tf.float32
                        )
                    ),
                    lambda: tf.constant(0.0),
                )
                with tf.control_dependencies([taken]):
                    set_op = tf.raw_ops.ResourceAccumulatorSetGlobalStep(
                        handle=group.handle,
                        new_global_step=tf.maximum(new_step - self.config.staleness, 0),
                    )
                with tf.control_dependencies([set_op]):
                    done.append(
                        tf.raw_ops.ResourceAccumulatorApplyGradient(
                            handle=group.handle,
                            local_step=new_step,
                            gradient=tf.zeros([group.size], tf.float32),
                        )
                    )
        with tf.control_dependencies(done):
            self.global_step.assign(new_step)
        return tf.constant(0)

    def finish(self) -> TrainStats:
        """Wait for closures in flight, then count exactly what was dropped."""
        self.coordinator.join()
        self.stats.attempts = int(self.attempts.numpy()) - self._attempts_base
        if self.config.synchronous:
            pending, _ = self._run_on_ps(self._pending_fn)
            self.stats.pending = int(min(pending)) - 1
            self.stats.dropped = policy.dropped(self.stats.attempts, self.stats.taken, self.stats.pending)
        else:
            self.stats.taken = self.stats.attempts
        return self.stats

    def per_worker_iterator(self, dataset_fn: Any) -> Any:
        """An iterator over per-worker datasets; ``dataset_fn(worker_id)`` builds one.

        ParameterServerStrategy gives every worker the same input context, so the worker
        id comes from a counter on the ps that each worker's dataset creation increments
        (0..N-1 in the order workers built it; a restarted worker gets a new id).
        """
        with self.strategy.scope():
            counter = tf.Variable(0, dtype=tf.int32, name="tfdist_sync_dataset_ids")
        self._keep.append(counter)

        def per_worker() -> Any:
            return dataset_fn(counter.assign_add(1) - 1)

        return iter(self.coordinator.create_per_worker_dataset(per_worker))


def _to_slices(dense: Any) -> Any:
    """The non-zero rows of a dense gradient as IndexedSlices."""
    nonzero = tf.reduce_any(tf.not_equal(tf.reshape(dense, [tf.shape(dense)[0], -1]), 0.0), 1)
    rows = tf.cast(tf.reshape(tf.where(nonzero), [-1]), tf.int32)
    return tf.IndexedSlices(tf.gather(dense, rows), rows, tf.shape(dense, out_type=tf.int32))
