"""``SyncTrainer``: the custom training loop of :mod:`tfdist.runtime.sync` (imports TF).

Where things run (chief = coordinator, N workers, P ps; the queues are in
:mod:`tfdist.runtime.sync.ps`):

* **workers**: one long-running ``ClusterCoordinator`` closure each, looping in the graph
  on the worker. Per step one round trip to each ps (:class:`~tfdist.runtime.sync.ps.Exchange`,
  a ``RemoteCall``): it carries the last gradient (packed per ps, labelled with its permit's
  step) into that ps's gradient queue, and on the first ps waits for the loop's next permit
  of a step still open (a step number ``p``) and brings back the parameters, read after
  it. The worker writes them into its own copies of the variables and computes the next
  gradient there. No Python, no scheduling and no other traffic per step.
* **ps**: the queues, the variables, the version; and the aggregator, a tf.function the
  coordinator calls whose ops all sit on the first ps. Per step: take gradients one by one until
  exactly K fresh ones (label >= version - s) are summed, dropping and counting stale
  ones; close the step (a loop holding a permit of it now skips it); apply the average
  with the Keras optimizer; once every variable's update is in, ``version += 1`` and the
  next step's permits, which carry the new version. One call runs ``steps_per_call``
  steps, so the coordinator's round trip is paid once per call, not per step.

Why exact: a gradient labelled ``p`` is accepted only while step ``p`` collects; permits of
``p`` exist only once version ``p`` is fully applied, the parameters are read after the
permit, and they change again only after step ``p`` closed. So an accepted gradient was
computed on exactly the parameters it is applied to (``stale``: at most s steps older).

A blocking dequeue must not run on the default (synchronous) eager executor: measured, the
worker closures then stall as well. On an async executor of its own it blocks only the
caller, so the aggregator runs there, on a thread of its own.

Permits keep ``sync`` (K = N) fair: each step gets ``tokens`` permits (N, or K when
K > N, like TF1's token queue), spread over one queue per loop, so a fast worker cannot
compute two gradients of a step while a slow one has none, nor take the slow one's permit
in ``backup``.

Counting. Workers count the gradients they send in a variable; the aggregator counts what
it applied and what it dropped; ``finish()`` drains what is left in the queues (dropped as
well), so ``attempts == taken + dropped`` exactly, from two independent counters.

A worker loop that fails ends the run, never hangs it: :mod:`tfdist.runtime.sync.failure`.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
import time
import uuid
from typing import Any

import tensorflow as tf
from tensorflow.python.eager import context as tf_context
from tensorflow.python.eager import executor as tf_executor

from tfdist.runtime.sync import failure, ps
from tfdist.runtime.sync.config import UpdateConfig, from_env, resolve
from tfdist.runtime.sync.stats import StepStats, TrainStats
from tfdist.runtime.sync.worker_copies import call_on_copies

_COUNTER = itertools.count()


class SyncTrainer:
    """Custom training loop for ParameterServerStrategy with a chosen update mode.

    ``loss_fn(model, batch) -> scalar`` is traced into the worker loops. Build the model
    (its variables) and the optimizer under ``strategy.scope()`` first. ``update`` is an
    :class:`~tfdist.runtime.sync.config.UpdateConfig`, a dict like ``options.update`` of
    the job spec, or None to read ``TFDIST_OPTIONS``. ``steps_per_call``: steps the
    aggregator applies per call from the coordinator (callbacks run between calls; the
    ``timeout`` mode always uses 1, since its clock is on the coordinator).
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
        steps_per_call: int = 10,
    ):
        if steps_per_call < 1:
            raise ValueError("steps_per_call must be at least 1")
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
        self.steps_per_call = 1 if self.config.mode == "timeout" else steps_per_call
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.variables = ps.flat_variables(list(model.trainable_variables))
        self._sparse: set[int] = set()
        name = self._name = f"tfdist_sync_{next(_COUNTER)}_{uuid.uuid4().hex[:8]}"
        by_device: dict[str, list[int]] = {}
        for i, v in enumerate(self.variables):
            by_device.setdefault(v.device, []).append(i)
        first = self.variables[sorted(by_device.items())[0][1][0]]
        # the step's state on the first ps, beside its gradient queue and variables: the
        # worker's round trip there (permit, version, queue, variables) is one function
        # on one device (PSS would spread these variables round-robin over the ps)
        with strategy.scope(), strategy.extended.colocate_vars_with(first):
            self.version = tf.Variable(0, dtype=tf.int64, name=f"{name}_version")
            self.open_step = tf.Variable(0, dtype=tf.int64, name=f"{name}_open")
            self.target = tf.Variable(0, dtype=tf.int64, name=f"{name}_target")
            self.attempts = tf.Variable(0, dtype=tf.int64, name=f"{name}_attempts")
        with strategy.scope():
            optimizer.build(self.variables)
        self.queues: list[ps.GradientQueue] = []
        self.permits: ps.Permits | None = None
        if self.config.synchronous:
            for j, (device, idx) in enumerate(sorted(by_device.items())):
                self.queues.append(
                    ps.GradientQueue(device, idx, [self.variables[i] for i in idx], f"{name}_q{j}")
                )
            n, t = self.config.num_workers, self.config.tokens
            quotas = [t // n + (1 if j < t % n else 0) for j in range(n)]
            self.permits = ps.Permits(self.version.device, quotas, f"{name}_permits")
            order = [i for q in self.queues for i in q.indices]  # the variables, by ps
            self.exchanges = [
                ps.Exchange(q, [self.variables[i] for i in q.indices], attempts=None) for q in self.queues[1:]
            ]
            self.exchanges.insert(
                0,
                ps.Exchange(
                    self.queues[0],
                    [self.variables[i] for i in self.queues[0].indices],
                    self.permits,
                    self.open_step,
                    self.attempts,
                    staleness=self.config.staleness,
                    latest=self.config.tokens <= self.config.num_workers,
                ),
            )
            self._by_ps = [self.variables[i] for i in order]  # the order values travel in
        self._executor = tf_executor.new_executor(enable_async=True)
        self._thread = concurrent.futures.ThreadPoolExecutor(1, "tfdist-sync-aggregator")
        self._loops: list[Any] = []  # RemoteValues of the running worker loops
        self._loop_iterator: Any = None
        self._version = 0  # the parameter version as of the last aggregator call
        self._attempts_base = 0
        self.stats = TrainStats()
        #: seconds the first run spent starting the worker loops (scheduling them traces the
        #: loop on the chief) and in its first aggregator call (tracing the aggregator, the
        #: workers' first gradients, ``steps_per_call`` steps): where set-up time goes
        self.timings: dict[str, float] = {}
        # autograph only where code is not ours (loss_fn) or not rewritten (the async loop):
        # converting the sync loops' code was most of their tracing time (docs/recsys.md)
        if self.config.synchronous:
            self._worker_fn = tf.function(self._worker_loop, autograph=False)
        else:
            self._worker_fn = tf.function(self._async_loop)
        self._grad_fn = tf.function(self._gradients_at)
        steps_and_issue = [tf.TensorSpec([], tf.int32), tf.TensorSpec([], tf.bool)]
        self._call_signature = steps_and_issue
        self._aggregate_fn = (  # a RemoteCall holds the resources of one device only
            ps.RunOnPs(self._aggregate, self.version.device, steps_and_issue, [tf.float64])
            if len(self.queues) == 1
            else tf.function(self._aggregate, autograph=False)
        )
        self._issue_fn = tf.function(self._issue, autograph=False)
        self._mark_fn = tf.function(self._mark, autograph=False)
        self._stop_fn = tf.function(self._stop, autograph=False)
        self._drain_fn = tf.function(self._drain, autograph=False)
        self._close_fn = tf.function(self._close, autograph=False)
        self._failed = False
        self._read_fn = tf.function(lambda: (self.version.read_value(), self.attempts.read_value()))
        self._keep: list[Any] = []

    # -- worker side ----------------------------------------------------------------

    def _gradients(self, batch: Any) -> tuple[Any, list[Any]]:
        with tf.GradientTape() as tape:
            loss = self.loss_fn(self.model, batch)
        return loss, tape.gradient(loss, self.variables)

    def _gradients_at(self, values: list[Any], batch: Any) -> tuple[Any, list[Any]]:
        """Set the variables to ``values``, then the loss and gradients of ``batch``: traced
        once, and only ever called through :func:`~tfdist.runtime.sync.worker_copies.call_on_copies`,
        with the handles of the worker's own copies in place of the variables'."""
        for v, x in zip(self._by_ps, values, strict=True):
            v.assign(x, read_value=False)
        return self.strategy.run(self._gradients, args=(batch,))

    def _worker_loop(self, iterator: Any, queue: Any) -> Any:
        """Until a stop permit: one round trip per ps (the last gradient out, the next
        permit and the parameters in), then one gradient on those parameters."""
        first, others = self.exchanges[0], self.exchanges[1:]
        none = tf.constant(-1, tf.int64)
        permit, values = first.swap(queue, none, first.queue.empty(), tf.constant(0.0), none)
        for e in others:
            with tf.control_dependencies([permit]):
                values = values + e.read()
        copies = [  # this worker's copies of the variables (created by the first write)
            tf.raw_ops.VarHandleOp(dtype=v.dtype, shape=v.shape, shared_name=f"{self._name}_copy_{j}")
            for j, v in enumerate(self._by_ps)
        ]

        def step(n: Any, permit: Any, *values: Any) -> Any:
            worker, batch = next(iterator)
            loss, grads = call_on_copies(self._grad_fn, self._by_ps, copies, list(values), batch)
            packed = [e.queue.pack(grads, self._sparse) for e in self.exchanges]
            pushed = [e.push(permit, g, loss, worker) for e, g in zip(others, packed[1:], strict=True)]
            with tf.control_dependencies(pushed):  # other ps first: the first one's waits
                permit, new = first.swap(queue, permit, packed[0], loss, worker)
            for e in others:
                with tf.control_dependencies([permit]):
                    new = new + e.read()
            return (n + 1, permit, *new)

        state = [tf.constant(0, tf.int64), permit, *values]
        return tf.while_loop(lambda n, permit, *_: permit >= 0, step, state, parallel_iterations=1)[0]

    def _async_step(self, batch: Any) -> Any:
        loss, grads = self._gradients(batch)
        pairs = [(g, v) for g, v in zip(grads, self.variables, strict=True) if g is not None]
        applied = self.optimizer.apply_gradients(pairs)
        with tf.control_dependencies([applied]):
            return self.version.assign_add(1, read_value=False)

    def _async_loop(self, iterator: Any) -> Any:
        """Plain PSS, one closure per worker: apply own gradients until the target step."""
        n = tf.constant(0, tf.int64)
        while self.version.read_value() < self.target.read_value():
            tf.autograph.experimental.set_loop_options(parallel_iterations=1)
            _, batch = next(iterator)
            done = self.strategy.run(self._async_step, args=(batch,))
            with tf.control_dependencies([done]):
                counted = self.attempts.assign_add(1, read_value=False)
            with tf.control_dependencies([counted]):
                n = n + 1
        return n

    # -- the aggregator (ops on the ps) ----------------------------------------------------

    def _aggregate(self, steps: Any, issue_last: Any) -> Any:
        """``steps`` updates, each of exactly K fresh gradients (see the module docstring).

        Every op, the loop's own included, is placed on the first ps: an op left without a
        device runs on the coordinator, and a loop split between two processes crosses
        between them several times per step."""
        with tf.device(self.version.device):
            return self._aggregate_on_ps(steps, issue_last)

    def _aggregate_on_ps(self, steps: Any, issue_last: Any) -> Any:
        assert self.permits is not None
        cfg = self.config
        k = cfg.replicas_to_aggregate
        cap = max(k, cfg.tokens)  # worker ids kept per step (``stale`` takes what is queued)
        minimum = tf.constant(cfg.min_replicas) if cfg.mode == "timeout" else None
        counts = tf.TensorArray(tf.int32, size=steps)
        drops = tf.TensorArray(tf.int32, size=steps)
        losses = tf.TensorArray(tf.float32, size=steps)
        who = tf.TensorArray(tf.int64, size=steps, element_shape=[cap])

        def step(i: Any, counts: Any, drops: Any, losses: Any, who: Any) -> Any:
            v = self.version.read_value()
            threshold = v - cfg.staleness
            first = self.queues[0]
            n, dropped, total, loss, workers = ps.collect(
                first, k, threshold, v, cap, self._sparse, minimum=minimum, greedy=cfg.mode == "stale"
            )
            with tf.control_dependencies([n]):
                closed = self.open_step.assign(v + 1)  # leftover permits of step v: skipped
            sums: dict[int, Any] = {0: total}
            with tf.control_dependencies([closed]):
                for j, q in enumerate(self.queues[1:], 1):
                    _, _, sums[j], _, _ = ps.collect(q, n, threshold, v, cap, self._sparse)
            scale = 1.0 / tf.cast(n, tf.float32)
            grads: dict[int, Any] = {}
            for j, q in enumerate(self.queues):
                dense, rows, values = sums[j]
                grads.update(q.unpack(dense, rows, values, scale, self._sparse))
            pairs = [(tf.cast(grads[i], v_.dtype), v_) for i, v_ in enumerate(self.variables)]
            applied = self.optimizer.apply_gradients(pairs, skip_gradients_aggregation=True)
            with tf.control_dependencies([applied]):
                # reads ordered after every variable's update: the version (and so the
                # permits, which carry it) advances only once the whole update is in
                updated = [x.read_value() for x in self.variables]
            with tf.control_dependencies(updated):
                advanced = self.version.assign(v + 1, read_value=False)
            with tf.control_dependencies([advanced]):
                new_version = self.version.read_value()
            assert self.permits is not None
            self.permits.put(new_version, tf.logical_or(i < steps - 1, issue_last))
            return (
                i + 1, counts.write(i, n), drops.write(i, dropped), losses.write(i, loss * scale),
                who.write(i, workers),
            )

        # one step after the other: a step must not dequeue while the one before collects
        _, counts, drops, losses, who = tf.while_loop(
            lambda i, *_: i < steps, step, [tf.constant(0), counts, drops, losses, who], parallel_iterations=1
        )
        # one tensor back, not five: the coordinator fetches each output with a round trip
        # (float64 holds the counts, ids and version exactly, and every float32 loss)
        table = tf.concat(
            [
                tf.cast(tf.stack([counts.stack(), drops.stack()], 1), tf.float64),
                tf.cast(losses.stack(), tf.float64)[:, None],
                tf.cast(who.stack(), tf.float64),
            ],
            1,
        )
        with tf.control_dependencies([table]):
            version = tf.cast(self.version.read_value(), tf.float64)
        return tf.concat([tf.reshape(table, [-1]), [version]], 0)

    def _issue(self) -> Any:
        assert self.permits is not None
        self.open_step.assign(self.version.read_value())
        self.permits.put(self.version.read_value())
        return tf.constant(0)

    def _mark(self, step: Any) -> Any:
        q = self.queues[0]
        q.put(step, q.empty(), tf.constant(0.0), tf.constant(ps.MARKER, tf.int64))
        return tf.constant(0)

    def _stop(self) -> Any:
        assert self.permits is not None
        self.permits.stop()
        return tf.constant(0)

    def _close(self) -> Any:
        for q in self.queues:
            q.close()
        return tf.constant(0)

    def _drain(self) -> Any:
        assert self.permits is not None
        left = [q.drain() for q in self.queues]
        self.permits.drain()
        return left[0]

    # -- the loop ---------------------------------------------------------------------

    def _run_on_ps(self, fn: Any, *args: Any) -> Any:
        """Run a coordinator function (ops on the ps) on the aggregator thread."""
        return self._thread.submit(self._run_blocking, fn, *args).result()

    def _run_blocking(self, fn: Any, *args: Any) -> Any:
        with tf_context.executor_scope(self._executor):
            out = fn(*args)
        self._executor.wait()
        return tf.nest.map_structure(lambda t: t.numpy(), out)

    def _start_loops(self, iterator: Any) -> None:
        if self._loops and self._loop_iterator is iterator:
            return
        if self._loops:
            self.finish()
        self._loop_iterator = iterator
        if self.config.synchronous:
            self._run_on_ps(self._issue_fn)
        assert self.permits is not None
        self._loops = [
            self.coordinator.schedule(self._worker_fn, args=(iterator, handle))
            for handle in self.permits.handles
        ]

    def run(self, iterator: Any, steps: int, callback: Any = None, *, join: bool = True) -> TrainStats:
        """``steps`` applied updates. ``callback(trainer, step_stats)`` runs after each step
        (after each call of ``steps_per_call`` steps; ``None`` stats in async mode);
        returning True stops early. ``join=False`` returns without waiting for the worker
        loops to end (``finish()`` does)."""
        if self._failed:
            raise RuntimeError(
                "tfdist.runtime.sync: a worker loop failed in an earlier run; build a new trainer"
            )
        if not self.config.synchronous:
            return self._run_async(iterator, steps, callback, join=join)
        if self._loops and self._loop_iterator is iterator:
            self._run_on_ps(self._issue_fn)  # a run after a run: the first step's permits
        started = time.monotonic()
        self._start_loops(iterator)
        self.timings.setdefault("start_loops", round(time.monotonic() - started, 3))
        watch = None
        if "first_call" not in self.timings:  # the first run: split its set-up (``timings``)
            traced = time.monotonic()
            self._aggregate_fn.get_concrete_function(*self._call_signature)
            self.timings["trace_aggregator"] = round(time.monotonic() - traced, 3)
            watch = self._watch_first_gradients(started)
        done = 0
        while done < steps:
            n = min(self.steps_per_call, steps - done)
            last = done + n >= steps
            started = time.monotonic()
            counts, drops, losses, who, version = self._call(n, not last)
            self.timings.setdefault("first_call", round(time.monotonic() - started, 3))
            if watch is not None:
                watch.set()
                watch = None
            stop = False
            for c, d, loss, w in zip(counts, drops, losses, who, strict=True):
                self.stats.steps += 1
                self.stats.taken += int(c)
                self.stats.dropped += int(d)
                st = StepStats(self.stats.steps, int(c), int(d), float(loss), [int(x) for x in w if x >= 0])
                self.stats.history.append(st)
                if callback is not None and callback(self, st):
                    stop = True
            self._version = int(version)
            done += n
            if stop:
                break
        if join:
            self.finish()
        return self.stats

    def _watch_first_gradients(self, started: float) -> threading.Event:
        """Measure, beside the first aggregator call, when every worker loop has sent its
        first gradient (``timings["first_gradients"]``, seconds from scheduling the loops):
        the workers' share of the set-up (receiving and instantiating the loop, their
        input pipelines' first batch, the first gradient), against the aggregator's. Polls
        the ps's attempts counter every 50 ms until then or until the call returned
        (set the event)."""
        done = threading.Event()
        want = self._attempts_base + self.config.num_workers

        def poll() -> None:
            while not done.is_set():
                try:
                    attempts = int(self._read_fn()[1])
                except Exception:  # noqa: BLE001 - a measurement only: a failed run says why elsewhere
                    return
                if attempts >= want:
                    self.timings["first_gradients"] = round(time.monotonic() - started, 3)
                    return
                done.wait(0.05)

        threading.Thread(target=poll, name="tfdist-sync-first-gradients", daemon=True).start()
        return done

    def _call(self, n: int, issue_last: bool) -> Any:
        """(counts, dropped, losses, worker ids, version) of ``n`` aggregator steps."""
        args = (tf.constant(n, tf.int32), tf.constant(issue_last))
        future = self._thread.submit(self._run_blocking, self._aggregate_fn, *args)
        packed = None
        if self.config.mode == "timeout":
            try:
                packed = future.result(timeout=self.config.timeout_seconds)
            except concurrent.futures.TimeoutError:
                self._mark_fn(tf.constant(self._version, tf.int64))  # time is up for this step
        if packed is None:
            packed = self._result(future)
        table = packed[:-1].reshape(n, -1)
        return table[:, 0], table[:, 1], table[:, 2], table[:, 3:], packed[-1]

    def _result(self, future: Any) -> Any:
        """The aggregator call's result, or a failed worker loop's error (see :mod:`failure`)."""
        return failure.result_or_loop_error(future, self.coordinator, lambda: self._abort(future))

    def _abort(self, future: Any) -> None:
        """After a loop failed: stop permits end the others, closed queues fail the aggregator's
        dequeue (a step still collecting is not applied, so every applied update holds exactly
        K); all is waited for, within a bound. The trainer cannot run again."""
        self._failed = True
        if self.config.synchronous:
            self._stop_fn()
            self._close_fn()
        else:
            self.target.assign(self.version.read_value())
        if future is not None:
            concurrent.futures.wait([future], timeout=failure.ABORT_WAIT_SECONDS)
            self._executor.clear_error()
        failure.wait_idle(self.coordinator)
        self._loops = []
        self._loop_iterator = None

    def _run_async(self, iterator: Any, steps: int, callback: Any, *, join: bool) -> TrainStats:
        start = int(self._run_on_ps(self._read_fn)[0])
        self.target.assign(start + steps)
        self._loops = [
            self.coordinator.schedule(self._worker_fn, args=(iterator,))
            for _ in range(self.config.num_workers)
        ]
        self._loop_iterator = None  # the loops end by themselves at the target
        last = start
        while True:
            done = int(self._run_on_ps(self._read_fn)[0])
            self.stats.steps = done - start
            if done - start >= steps:
                break
            if done != last:
                last = done
                if callback is not None and callback(self, None):
                    self.target.assign(done)
                    break
            failure.raise_if_loop_failed(self.coordinator, lambda: self._abort(None))
            time.sleep(0.002)
        if join:
            self.finish()
            self.stats.steps = int(self._run_on_ps(self._read_fn)[0]) - start
        return self.stats

    def finish(self) -> TrainStats:
        """End the worker loops, wait for them, and count exactly what was dropped."""
        if self.config.synchronous and self._loops:
            self._run_on_ps(self._stop_fn)
        self.coordinator.join()
        self._loops = []
        self._loop_iterator = None
        version, attempts = self._run_on_ps(self._read_fn)
        self._version = int(version)
        self.stats.attempts = int(attempts) - self._attempts_base
        if self.config.synchronous:
            self.stats.dropped += int(self._run_on_ps(self._drain_fn))
        else:
            self.stats.taken = self.stats.attempts
        return self.stats

    def reset(self) -> None:
        """Start a new run with the same variables (benchmarks): end the loops, empty the
        queues, zero the counters."""
        self.finish()
        self._attempts_base = int(self._run_on_ps(self._read_fn)[1])
        self.stats = TrainStats()

    def per_worker_iterator(self, dataset_fn: Any) -> Any:
        """An iterator over per-worker datasets; ``dataset_fn(worker_id)`` builds one.

        ParameterServerStrategy gives every worker the same input context, so the worker
        id comes from a counter on the ps that each worker's dataset creation increments
        (0..N-1 in the order workers built it; a restarted worker gets a new id). Each
        element is ``(worker_id, batch)``: the id travels with the worker's gradients, so
        a step says whose gradients it applied.
        """
        with self.strategy.scope():
            counter = tf.Variable(0, dtype=tf.int64, name="tfdist_sync_dataset_ids")
        self._keep.append(counter)

        def per_worker() -> Any:
            worker = counter.assign_add(1) - 1
            ids = tf.data.Dataset.from_tensors(worker).repeat()
            return tf.data.Dataset.zip((ids, dataset_fn(worker)))

        return iter(self.coordinator.create_per_worker_dataset(per_worker))
