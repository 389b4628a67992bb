"""What lives on the ps tasks, and the graph code that runs there (imports TensorFlow).

Per ps task one *gradient queue* (a ``FIFOQueueV2`` created by the coordinator with its op
placed on that ps): each element is one worker's gradient of the variables on that ps,
flattened into one vector, labelled with the step it was computed for (its permit's), with
its loss and the worker's id. Beside the version, one *permit queue* per worker loop: each
permit is a step number, the right to compute one gradient for that step; -1 tells the
loop to end.

Why queues and not ``ConditionalAccumulator``: a take from an accumulator averages all it
holds (at least K, maybe more) and cannot say how many; a queue hands over one gradient at
a time, so the aggregator takes exactly K fresh ones, and drops and counts each stale one
itself. And a blocking dequeue is an async kernel, so a loop that waits on the ps holds no
thread there.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
from tensorflow.python.eager import context as tf_context

STOP = -1  # the permit that ends a worker loop
MARKER = -1  # the worker id of a timeout marker in a gradient queue


class GradientQueue:
    """The gradients of the variables on one ps device, one element per worker step."""

    def __init__(self, device: str, indices: list[int], variables: list[Any], name: str):
        self.device = device
        self.indices = indices
        self.shapes = [v.shape for v in variables]
        self.sizes = [int(v.shape.num_elements()) for v in variables]
        self.size = sum(self.sizes)
        self.dtypes = [tf.int64, tf.float32, tf.float32, tf.int64]  # label, flat, loss, worker
        with tf.device(device):
            self.handle = tf.raw_ops.FIFOQueueV2(
                component_types=self.dtypes,
                shapes=[[], [self.size], [], []],
                capacity=-1,
                shared_name=name,
            )

    def put(self, label: Any, flat: Any, loss: Any, worker: Any) -> Any:
        with tf.device(self.device):
            return tf.raw_ops.QueueEnqueueV2(
                handle=self.handle,
                components=[label, flat, tf.cast(loss, tf.float32), tf.cast(worker, tf.int64)],
            )

    def get(self) -> list[Any]:
        """One element (blocks until there is one)."""
        with tf.device(self.device):
            parts = tf.raw_ops.QueueDequeueV2(handle=self.handle, component_types=self.dtypes)
            return [
                tf.ensure_shape(p, shape) for p, shape in zip(parts, [[], [self.size], [], []], strict=True)
            ]

    def close(self) -> Any:
        """Close the queue: a pending or later dequeue fails instead of waiting (a worker loop
        failed, no gradient may come); enqueues fail too."""
        with tf.device(self.device):
            return tf.raw_ops.QueueCloseV2(handle=self.handle, cancel_pending_enqueues=True)

    def drain(self) -> Any:
        """Remove what is queued; the number of gradients (not markers) removed. Only when no
        one else dequeues (after the worker loops ended): it must not block."""
        with tf.device(self.device):
            n = tf.raw_ops.QueueSizeV2(handle=self.handle)
            parts = tf.raw_ops.QueueDequeueManyV2(handle=self.handle, n=n, component_types=self.dtypes)
            return tf.reduce_sum(tf.cast(parts[3] >= 0, tf.int64))

    def pack(self, grads: list[Any], sparse: set[int]) -> Any:
        """One flat float32 vector of this ps's gradients (None: zeros; sparse: densified)."""
        parts = []
        for i, shape in zip(self.indices, self.shapes, strict=True):
            g = grads[i]
            if g is None:
                g = tf.zeros(shape, tf.float32)
            elif isinstance(g, tf.IndexedSlices):
                sparse.add(i)
                g = tf.convert_to_tensor(g)
            parts.append(tf.reshape(tf.cast(g, tf.float32), [-1]))
        return tf.concat(parts, 0) if len(parts) > 1 else parts[0]

    def unpack(self, flat: Any, sparse: set[int]) -> dict[int, Any]:
        """Variable index -> its gradient, from a flat vector (sparse ones as IndexedSlices)."""
        pieces = tf.split(flat, self.sizes) if len(self.sizes) > 1 else [flat]
        out = {}
        for i, piece, shape in zip(self.indices, pieces, self.shapes, strict=True):
            g = tf.reshape(piece, shape)
            out[i] = to_slices(g) if i in sparse else g
        return out


class Permits:
    """One queue of step numbers per worker loop; a loop takes one before each gradient.

    One queue per loop, not one shared: with a shared queue a fast worker takes the permit
    a slow one has not come for yet and computes a second gradient for a step that will
    close before it lands (measured: one wasted gradient per step in ``backup``). A loop
    is the only one to take from its queue, so ``quotas[j]`` permits per step are loop
    ``j``'s alone (``tokens`` spread over the loops: K > N gives fast loops several).
    """

    def __init__(self, device: str, quotas: list[int], name: str):
        self.device = device
        self.quotas = quotas
        with tf.device(device):
            self.handles = [
                tf.raw_ops.FIFOQueueV2(
                    component_types=[tf.int64], shapes=[[]], capacity=-1, shared_name=f"{name}_{j}"
                )
                for j in range(len(quotas))
            ]

    def put(self, value: Any, issue: Any = True) -> list[Any]:
        """Each loop's quota of permits for step ``value`` (none where ``issue`` is False)."""
        ops = []
        with tf.device(self.device):
            for handle, quota in zip(self.handles, self.quotas, strict=True):
                count = tf.where(issue, quota, 0)
                values = tf.fill([count], tf.cast(value, tf.int64))
                ops.append(tf.raw_ops.QueueEnqueueManyV2(handle=handle, components=[values]))
        return ops

    def stop(self) -> list[Any]:
        """Two stop permits per loop: the ps half of a loop whose worker was killed may still
        be waiting on the queue and take one; the loop re-run elsewhere takes the other
        (what is left is drained once every loop ended)."""
        with tf.device(self.device):
            stops = tf.fill([2], tf.constant(STOP, tf.int64))
            return [tf.raw_ops.QueueEnqueueManyV2(handle=h, components=[stops]) for h in self.handles]

    def get(self, handle: Any, *, latest: bool) -> Any:
        """The next permit of the loop whose queue is ``handle`` (blocks until there is one).

        ``latest`` (every quota is at most 1): take all that is queued and keep the newest,
        so a slow worker back from a long step skips the steps it missed at once (a stop
        permit among them wins)."""
        with tf.device(self.device):
            one = tf.raw_ops.QueueDequeueV2
            if not latest:
                return tf.ensure_shape(one(handle=handle, component_types=[tf.int64])[0], [])
            queued = tf.raw_ops.QueueSizeV2(handle=handle)

            def newest() -> Any:
                got = tf.raw_ops.QueueDequeueManyV2(handle=handle, n=queued, component_types=[tf.int64])[0]
                return tf.where(tf.reduce_min(got) < 0, tf.constant(STOP, tf.int64), tf.reduce_max(got))

            permit = tf.cond(queued > 1, newest, lambda: one(handle=handle, component_types=[tf.int64])[0])
            return tf.ensure_shape(permit, [])

    def drain(self) -> list[Any]:
        ops = []
        with tf.device(self.device):
            for h in self.handles:
                n = tf.raw_ops.QueueSizeV2(handle=h)
                ops.append(tf.raw_ops.QueueDequeueManyV2(handle=h, n=n, component_types=[tf.int64]))
        return ops


def collect(
    queue: GradientQueue,
    want: Any,
    threshold: Any,
    step: Any,
    cap: int,
    *,
    minimum: Any = None,
    greedy: bool = False,
) -> tuple[Any, Any, Any, Any, Any]:
    """Take gradients from ``queue`` until ``want`` fresh ones (label >= ``threshold``) are
    summed; stale ones are dropped and counted. With ``minimum``: a timeout marker for
    ``step`` makes it stop as soon as ``minimum`` fresh ones are in. ``greedy`` (the
    ``stale`` mode): then also take what is already queued, so gradients do not pile up.

    Returns (fresh, dropped, sum, loss sum, the fresh gradients' worker ids padded with -1
    to ``cap`` >= ``want``). Runs on the ps: every op is on the queue's device, so the loop
    costs no round trip.
    """
    with tf.device(queue.device):
        fresh = tf.constant(0, tf.int32)
        dropped = tf.constant(0, tf.int32)
        total = tf.zeros([queue.size], tf.float32)
        loss = tf.constant(0.0)
        workers = tf.fill([cap], tf.constant(-1, tf.int64))
        timed_out = tf.constant(False)

        def more(fresh, dropped, total, loss, workers, timed_out):  # type: ignore[no-untyped-def]
            if minimum is None:
                return fresh < want
            return tf.logical_and(fresh < want, tf.logical_not(tf.logical_and(timed_out, fresh >= minimum)))

        def body(fresh, dropped, total, loss, workers, timed_out):  # type: ignore[no-untyped-def]
            label, flat, g_loss, worker = queue.get()
            marker = worker < 0
            ok = tf.logical_and(tf.logical_not(marker), label >= threshold)
            okf = tf.cast(ok, tf.float32)
            slot = tf.minimum(fresh, cap - 1)
            workers = tf.tensor_scatter_nd_update(workers, [[slot]], [tf.where(ok, worker, workers[slot])])
            return (
                fresh + tf.cast(ok, tf.int32),
                dropped + tf.cast(tf.logical_and(tf.logical_not(marker), tf.logical_not(ok)), tf.int32),
                total + flat * okf,
                loss + g_loss * okf,
                workers,
                tf.logical_or(timed_out, tf.logical_and(marker, tf.equal(label, step))),
            )

        state = tf.while_loop(
            more, body, [fresh, dropped, total, loss, workers, timed_out], parallel_iterations=1
        )
        if greedy:  # only the aggregator takes from the queue: what is queued can be taken
            queued = tf.raw_ops.QueueSizeV2(handle=queue.handle)
            state = tf.while_loop(
                lambda left, *_: left > 0,
                lambda left, *s: (left - 1, *body(*s)),
                [queued, *state],
                parallel_iterations=1,
            )[1:]
        fresh, dropped, total, loss, workers, _ = state
    return fresh, dropped, total, loss, workers


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


def to_slices(dense: Any) -> Any:
    """The non-zero rows of a dense gradient as IndexedSlices.

    TF2 has no resource-based sparse queue or accumulator usable from tf.function, so an
    embedding's gradient travels dense; turning the average back into slices keeps the
    optimizer's sparse behaviour (only the rows that were looked up change)."""
    nonzero = tf.reduce_any(tf.not_equal(tf.reshape(dense, [tf.shape(dense)[0], -1]), 0.0), 1)
    rows = tf.cast(tf.reshape(tf.where(nonzero), [-1]), tf.int32)
    return tf.IndexedSlices(tf.gather(dense, rows), rows, tf.shape(dense, out_type=tf.int32))


def remote_call(device: str, fn: Any, args: list[Any], tout: list[Any]) -> list[Any]:
    """A ``RemoteCall`` op of the concrete function ``fn`` on ``device``, its captured
    resources passed after ``args``: ``device``'s runtime runs the function whole."""
    return tf.raw_ops.RemoteCall(target=device, args=[*args, *fn.captured_inputs], Tout=tout, f=fn)


class Exchange:
    """A worker loop's one round trip per step to one ps: a ``RemoteCall`` of a function
    that runs there whole.

    On the first ps (built with ``permits``; the version, the permits and the counters are
    there): :meth:`swap` puts the worker's last gradient into the queue (none when its
    label is < 0) and counts it, takes the loop's next permit of a step still open (blocks
    until there is one), and reads this ps's variables after it. On another ps:
    :meth:`push` (the gradient, before the first ps's round trip, which waits for the step
    to be applied) and :meth:`read` (its variables, after the permit). One request carries
    the gradient and one response the permit and the parameters, so with one ps a step
    costs a worker one round trip; a loop whose ops are spread over two processes instead
    crosses between them for every tensor and for its own control flow (measured in
    docs/sync.md).
    """

    def __init__(
        self,
        queue: GradientQueue,
        variables: list[Any],
        permits: Permits | None = None,
        open_step: Any = None,
        attempts: Any = None,
        *,
        staleness: int = 0,
        latest: bool = True,
    ):
        self.queue = queue
        self.variables = variables
        self.device = queue.device
        self.dtypes = [v.dtype for v in variables]
        label = tf.TensorSpec([], tf.int64)
        grad = tf.TensorSpec([queue.size], tf.float32)
        scalar, worker = tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.int64)
        handle = tf.TensorSpec([], tf.resource)

        def push(label: Any, flat: Any, loss: Any, worker: Any) -> Any:
            with tf.device(self.device):
                if label >= 0:  # noqa: SIM108 - autograph: a cond on the ps
                    n = tf.identity(self._put(label, flat, loss, worker, attempts))
                else:
                    n = tf.constant(0, tf.int64)
                return n

        def read() -> Any:
            with tf.device(self.device):
                return [tf.identity(v.read_value()) for v in self.variables]

        def swap(handle: Any, label: Any, flat: Any, loss: Any, worker: Any) -> Any:
            assert permits is not None
            with tf.device(self.device):
                pushed = push(label, flat, loss, worker)
                with tf.control_dependencies([pushed]):
                    permit = permits.get(handle, latest=latest)
                # a permit of a step that closed meanwhile is skipped (a slow worker back
                # from a long step); the stop permit (< 0) ends the loop
                while tf.logical_and(permit >= 0, permit < open_step.read_value() - staleness):
                    tf.autograph.experimental.set_loop_options(parallel_iterations=1)
                    permit = permits.get(handle, latest=latest)
                with tf.control_dependencies([permit]):  # the parameters after the permit
                    values = read()
                return [permit, *values]

        self._push = tf.function(push, input_signature=[label, grad, scalar, worker]).get_concrete_function()
        self._read = tf.function(read, input_signature=[]).get_concrete_function()
        self._swap = None
        if permits is not None:
            signature = [handle, label, grad, scalar, worker]
            self._swap = tf.function(swap, input_signature=signature).get_concrete_function()

    def _put(self, label: Any, flat: Any, loss: Any, worker: Any, attempts: Any) -> Any:
        done = self.queue.put(label, flat, loss, worker)
        if attempts is None:
            return tf.constant(1, tf.int64)
        with tf.control_dependencies([done]):
            return attempts.assign_add(1)

    def _call(self, fn: Any, args: list[Any], tout: list[Any]) -> list[Any]:
        return remote_call(self.device, fn, args, tout)

    def swap(self, handle: Any, label: Any, flat: Any, loss: Any, worker: Any) -> tuple[Any, list[Any]]:
        """(next permit, this ps's variables read after it), having pushed the gradient."""
        out = self._call(
            self._swap, [handle, label, flat, tf.cast(loss, tf.float32), worker], [tf.int64, *self.dtypes]
        )
        return out[0], list(out[1:])

    def push(self, label: Any, flat: Any, loss: Any, worker: Any) -> Any:
        return self._call(self._push, [label, flat, tf.cast(loss, tf.float32), worker], [tf.int64])[0]

    def read(self) -> list[Any]:
        return list(self._call(self._read, [], self.dtypes))


class RunOnPs:
    """A coordinator function whose whole graph runs on one ps: the coordinator calls it
    through one ``RemoteCall`` op, so the ps's runtime partitions and runs it.

    Called directly, the coordinator's own runtime partitions the function; with a loop in
    it (the aggregator's), every iteration then involved the coordinator process too, even
    with every op placed on the ps (measured in docs/sync.md). Traced on the first call, in
    the caller's context, as a plain ``tf.function`` would be. Only for a function whose
    resources are all on ``device``: the ``RemoteCall`` op is placed with them (it cannot
    hold resources of two devices).
    """

    def __init__(self, fn: Any, device: str, signature: list[Any], tout: list[Any]):
        self._fn, self.device, self._signature, self._tout = fn, device, signature, tout
        self._call: Any = None

    def __call__(self, *args: Any) -> Any:
        if self._call is None:
            inner = tf.function(self._fn, input_signature=self._signature).get_concrete_function()
            here = tf_context.context().host_address_space() + "/device:CPU:0"

            @tf.function(input_signature=self._signature)
            def call(*args: Any) -> Any:
                with tf.device(here):  # the placer moves it beside the resources it holds
                    out = remote_call(self.device, inner, list(args), self._tout)
                return out[0] if len(out) == 1 else out

            self._call = call
        return self._call(*args)
