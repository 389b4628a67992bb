"""What lives on the ps tasks, and the graph code that runs there (imports TensorFlow).

Per ps task one *gradient queue* (a ``FIFOQueueV2`` created by the coordinator with its op
placed on that ps): each element is one worker's gradient of the variables on that ps
(the dense ones flattened into one vector, the sparse ones as the rows the batch touched:
:class:`Packed`), labelled with the step it was computed for (its permit's), with
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

from typing import Any, NamedTuple

import tensorflow as tf
from tensorflow.python.eager import context as tf_context

STOP = -1  # the permit that ends a worker loop
MARKER = -1  # the worker id of a timeout marker in a gradient queue


class Packed(NamedTuple):
    """One worker's gradient of the variables on one ps, as it travels.

    ``dense``: the dense gradients, flattened and concatenated; ``rows`` / ``values``: the
    sparse ones (an embedding's ``IndexedSlices``), each variable's distinct rows and their
    summed values (flattened), one variable after the other; ``counts``: how many rows each
    of the ps's variables sent (0 for a dense one). So the wire carries the rows a batch
    touched, not the whole table."""

    dense: Any
    rows: Any
    values: Any
    counts: Any


def combine_rows(indices: Any, values: Any) -> tuple[Any, Any]:
    """(distinct rows, the values of each summed): a lookup's gradient repeats a row once
    per time the batch looked it up; summing them first sends each row once."""
    rows, where = tf.unique(tf.cast(indices, tf.int64))
    return rows, tf.math.unsorted_segment_sum(values, where, tf.shape(rows)[0])


class GradientQueue:
    """The gradients of the variables on one ps device, one element per worker step.

    An element: (label, dense, loss, worker, rows, values, counts) (see :class:`Packed`).
    Which variables' gradients are sparse is known once the worker loop is traced (its
    gradients are ``IndexedSlices`` or not), after the queue exists, so ``dense``, ``rows``
    and ``values`` have no fixed length here (a padding queue: ``drain`` can still take
    several at once)."""

    def __init__(self, device: str, indices: list[int], variables: list[Any], name: str):
        self.device = device
        self.indices = indices
        self.shapes = [v.shape for v in variables]
        self.sizes = [int(v.shape.num_elements()) for v in variables]
        #: floats in one row of each variable (a sparse gradient's values are rows)
        self.widths = [int(v.shape[1:].num_elements()) if v.shape.rank else 1 for v in variables]
        self.dtypes = [tf.int64, tf.float32, tf.float32, tf.int64, tf.int64, tf.float32, tf.int32]
        self._shapes: list[list[int | None]] = [[], [None], [], [], [None], [None], [len(indices)]]
        with tf.device(device):
            self.handle = tf.raw_ops.PaddingFIFOQueueV2(
                component_types=self.dtypes,
                shapes=[[-1 if d is None else d for d in s] for s in self._shapes],
                capacity=-1,
                shared_name=name,
            )

    def empty(self) -> Packed:
        """No gradient (a timeout marker's, the label -1 a loop starts with): nothing to carry."""
        return Packed(
            tf.zeros([0], tf.float32), tf.zeros([0], tf.int64), tf.zeros([0], tf.float32),
            tf.zeros([len(self.indices)], tf.int32),
        )

    def put(self, label: Any, grad: Packed, loss: Any, worker: Any) -> Any:
        with tf.device(self.device):
            return tf.raw_ops.QueueEnqueueV2(
                handle=self.handle,
                components=[label, grad.dense, tf.cast(loss, tf.float32), tf.cast(worker, tf.int64),
                            grad.rows, grad.values, grad.counts],
            )

    def get(self) -> tuple[Any, Packed, Any, Any]:
        """One element, (label, gradient, loss, worker) (blocks until there is one)."""
        with tf.device(self.device):
            parts = tf.raw_ops.QueueDequeueV2(handle=self.handle, component_types=self.dtypes)
            label, dense, loss, worker, rows, values, counts = (
                tf.ensure_shape(p, shape) for p, shape in zip(parts, self._shapes, strict=True)
            )
            return label, Packed(dense, rows, values, counts), loss, worker

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

    def dense_size(self, sparse: set[int]) -> int:
        return sum(n for i, n in zip(self.indices, self.sizes, strict=True) if i not in sparse)

    def pack(self, grads: list[Any], sparse: set[int]) -> Packed:
        """This ps's share of one worker's gradients (None: zeros). An ``IndexedSlices``
        travels as its distinct rows and their summed values, and its variable's index
        goes into ``sparse`` (read when the aggregator is traced, after the worker loop)."""
        dense, rows, values, counts = [], [], [], []
        for i, shape in zip(self.indices, self.shapes, strict=True):
            g = grads[i]
            if isinstance(g, tf.IndexedSlices):
                sparse.add(i)
                r, v = combine_rows(g.indices, tf.cast(g.values, tf.float32))
                rows.append(r)
                values.append(tf.reshape(v, [-1]))
                counts.append(tf.shape(r, out_type=tf.int32)[0])
                continue
            if g is None:
                g = tf.zeros(shape, tf.float32)
            dense.append(tf.reshape(tf.cast(g, tf.float32), [-1]))
            counts.append(tf.constant(0, tf.int32))

        def cat(parts: list[Any], dtype: Any) -> Any:
            return tf.concat(parts, 0) if parts else tf.zeros([0], dtype)

        return Packed(cat(dense, tf.float32), cat(rows, tf.int64), cat(values, tf.float32), tf.stack(counts))

    def unpack(self, dense: Any, rows: dict[int, Any], values: dict[int, Any], scale: Any,
               sparse: set[int]) -> dict[int, Any]:
        """Variable index -> its gradient times ``scale``: the dense ones from the summed
        ``dense`` vector, the sparse ones as ``IndexedSlices`` of the rows any worker sent
        (``rows``/``values`` as :meth:`Accumulator.add` collected them: a row may appear
        once per worker, :func:`combine_rows` sums them)."""
        dense_idx = [i for i in self.indices if i not in sparse]
        sizes = [self.sizes[self.indices.index(i)] for i in dense_idx]
        pieces = dict(zip(dense_idx, tf.split(dense, sizes) if len(sizes) > 1 else [dense], strict=False))
        out = {}
        for i, shape in zip(self.indices, self.shapes, strict=True):
            if i in sparse:
                r, v = combine_rows(rows[i], values[i])
                v = tf.reshape(v, [-1, *shape.as_list()[1:]])
                out[i] = tf.IndexedSlices(v * scale, r, tf.constant(shape.as_list(), tf.int64))
            else:
                out[i] = tf.reshape(pieces[i], shape) * scale
        return out


class Accumulator:
    """What :func:`collect` keeps while it takes gradients: the dense sum, and per sparse
    variable the rows and values of every accepted gradient, appended (summed per row only
    once, at the end). Its state is a flat list of tensors (a while loop's variables)."""

    def __init__(self, queue: GradientQueue, sparse: set[int]):
        self.queue = queue
        self.sparse_idx = [i for i in queue.indices if i in sparse]
        self.where = [queue.indices.index(i) for i in self.sparse_idx]  # position on the ps
        self.widths = [queue.widths[k] for k in self.where]
        self.dense_size = queue.dense_size(sparse)

    def initial(self) -> list[Any]:
        state = [tf.zeros([self.dense_size], tf.float32)]
        for w in self.widths:
            state += [tf.zeros([0], tf.int64), tf.zeros([0, w], tf.float32)]
        return state

    def invariants(self) -> list[Any]:
        out = [tf.TensorShape([self.dense_size])]
        for w in self.widths:
            out += [tf.TensorShape([None]), tf.TensorShape([None, w])]
        return out

    def add(self, state: list[Any], grad: Packed, ok: Any) -> list[Any]:
        """``state`` with ``grad`` added when ``ok`` (a dropped gradient adds nothing)."""
        # a timeout marker carries no dense part: only an accepted gradient's is read
        dense = state[0]
        out = [tf.cond(ok, lambda: dense + tf.ensure_shape(grad.dense, [self.dense_size]), lambda: dense)]
        if not self.sparse_idx:
            return out
        n_rows = tf.gather(grad.counts, self.where)
        widths = tf.constant(self.widths, tf.int32)
        rows = tf.split(grad.rows, n_rows) if len(self.where) > 1 else [grad.rows]
        values = tf.split(grad.values, n_rows * widths) if len(self.where) > 1 else [grad.values]
        for j, w in enumerate(self.widths):
            acc_rows, acc_values = state[1 + 2 * j], state[2 + 2 * j]
            keep = tf.fill(tf.shape(rows[j]), ok)  # a dropped gradient's rows: none kept
            out.append(tf.concat([acc_rows, tf.boolean_mask(rows[j], keep)], 0))
            out.append(tf.concat([acc_values, tf.boolean_mask(tf.reshape(values[j], [-1, w]), keep)], 0))
        return out

    def result(self, state: list[Any]) -> tuple[Any, dict[int, Any], dict[int, Any]]:
        """(dense sum, rows by variable, values by variable)."""
        rows = {i: state[1 + 2 * j] for j, i in enumerate(self.sparse_idx)}
        values = {i: state[2 + 2 * j] for j, i in enumerate(self.sparse_idx)}
        return state[0], rows, values


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
    sparse: set[int],
    *,
    minimum: Any = None,
    greedy: bool = False,
) -> tuple[Any, Any, Any, Any, Any]:
    """Take gradients from ``queue`` until ``want`` fresh ones (label >= ``threshold``) are
    summed; stale ones are dropped and counted. With ``minimum``: a timeout marker for
    ``step`` makes it stop as soon as ``minimum`` fresh ones are in. ``greedy`` (the
    ``stale`` mode): then also take what is already queued, so gradients do not pile up.

    Returns (fresh, dropped, the sum as (dense, rows, values): see :meth:`Accumulator.result`,
    loss sum, the fresh gradients' worker ids padded with -1 to ``cap`` >= ``want``). Runs on
    the ps: every op is on the queue's device, so the loop costs no round trip.
    """
    acc = Accumulator(queue, sparse)
    with tf.device(queue.device):
        fresh = tf.constant(0, tf.int32)
        dropped = tf.constant(0, tf.int32)
        loss = tf.constant(0.0)
        workers = tf.fill([cap], tf.constant(-1, tf.int64))
        timed_out = tf.constant(False)

        def more(fresh, dropped, loss, workers, timed_out, *_):  # type: ignore[no-untyped-def]
            if minimum is None:
                return fresh < want
            return tf.logical_and(fresh < want, tf.logical_not(tf.logical_and(timed_out, fresh >= minimum)))

        def body(fresh, dropped, loss, workers, timed_out, *total):  # type: ignore[no-untyped-def]
            label, grad, g_loss, worker = queue.get()
            marker = worker < 0
            ok = tf.logical_and(tf.logical_not(marker), label >= threshold)
            okf = tf.cast(ok, tf.float32)
            slot = tf.minimum(fresh, cap - 1)
            workers = tf.tensor_scatter_nd_update(workers, [[slot]], [tf.where(ok, worker, workers[slot])])
            return (
                fresh + tf.cast(ok, tf.int32),
                dropped + tf.cast(tf.logical_and(tf.logical_not(marker), tf.logical_not(ok)), tf.int32),
                loss + g_loss * okf,
                workers,
                tf.logical_or(timed_out, tf.logical_and(marker, tf.equal(label, step))),
                *acc.add(list(total), grad, ok),
            )

        scalars = [fresh, dropped, loss, workers, timed_out]
        shapes = [tf.TensorShape([])] * 3 + [tf.TensorShape([cap]), tf.TensorShape([])] + acc.invariants()
        state = tf.while_loop(
            more, body, [*scalars, *acc.initial()], shape_invariants=shapes, parallel_iterations=1
        )
        if greedy:  # only the aggregator takes from the queue: what is queued can be taken
            queued = tf.raw_ops.QueueSizeV2(handle=queue.handle)
            state = tf.while_loop(
                lambda left, *_: left > 0,
                lambda left, *s: (left - 1, *body(*s)),
                [queued, *state],
                shape_invariants=[tf.TensorShape([]), *shapes],
                parallel_iterations=1,
            )[1:]
        fresh, dropped, loss, workers, _ = state[:5]
    return fresh, dropped, acc.result(list(state[5:])), loss, workers


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
        grad = Packed(
            tf.TensorSpec([None], tf.float32), tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None], tf.float32), tf.TensorSpec([len(queue.indices)], tf.int32),
        )
        scalar, worker = tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.int64)
        handle = tf.TensorSpec([], tf.resource)

        def push(label: Any, grad: Packed, loss: Any, worker: Any) -> Any:
            with tf.device(self.device):
                return tf.cond(
                    label >= 0,
                    lambda: tf.identity(self._put(label, grad, loss, worker, attempts)),
                    lambda: tf.constant(0, tf.int64),
                )

        def read() -> Any:
            with tf.device(self.device):
                return [tf.identity(v.read_value()) for v in self.variables]

        def swap(handle: Any, label: Any, grad: Packed, loss: Any, worker: Any) -> Any:
            assert permits is not None
            with tf.device(self.device):
                pushed = push(label, grad, loss, worker)
                with tf.control_dependencies([pushed]):
                    permit = permits.get(handle, latest=latest)
                # a permit of a step that closed meanwhile is skipped (a slow worker back
                # from a long step); the stop permit (< 0) ends the loop
                permit = tf.while_loop(
                    lambda p: tf.logical_and(p >= 0, p < open_step.read_value() - staleness),
                    lambda p: [permits.get(handle, latest=latest)],
                    [permit],
                    parallel_iterations=1,
                )[0]
                with tf.control_dependencies([permit]):  # the parameters after the permit
                    values = read()
                return [permit, *values]

        # autograph=False: control flow is written as tf.cond / tf.while_loop here, and
        # converting the code instead was most of tracing's time (measured in docs/recsys.md)
        def trace(fn: Any, signature: list[Any]) -> Any:
            return tf.function(fn, input_signature=signature, autograph=False).get_concrete_function()

        self._push = trace(push, [label, grad, scalar, worker])
        self._read = trace(read, [])
        self._swap = None
        if permits is not None:
            self._swap = trace(swap, [handle, label, grad, scalar, worker])

    def _put(self, label: Any, grad: Packed, loss: Any, worker: Any, attempts: Any) -> Any:
        done = self.queue.put(label, grad, loss, worker)
        if attempts is None:
            return tf.constant(1, tf.int64)
        with tf.control_dependencies([done]):
            return attempts.assign_add(1)

    def _call(self, fn: Any, args: list[Any], tout: list[Any]) -> list[Any]:
        return remote_call(self.device, fn, args, tout)

    def swap(self, handle: Any, label: Any, grad: Packed, loss: Any, worker: Any) -> tuple[Any, list[Any]]:
        """(next permit, this ps's variables read after it), having pushed the gradient."""
        out = self._call(
            self._swap, [handle, label, *grad, tf.cast(loss, tf.float32), worker], [tf.int64, *self.dtypes]
        )
        return out[0], list(out[1:])

    def push(self, label: Any, grad: Packed, loss: Any, worker: Any) -> Any:
        return self._call(self._push, [label, *grad, tf.cast(loss, tf.float32), worker], [tf.int64])[0]

    def read(self) -> list[Any]:
        return list(self._call(self._read, [], self.dtypes))


class RunOnPs:
    """A coordinator function whose whole graph runs on one ps: the coordinator calls it
    through one ``RemoteCall`` op, so the ps's runtime partitions and runs it. Traced
    without autograph: write its control flow with ``tf.while_loop`` / ``tf.cond``.

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

    def get_concrete_function(self, *signature: Any) -> Any:
        """Trace it now (``signature``: the constructor's), not on the first call."""
        self._build()
        return self._call.get_concrete_function(*signature)

    def __call__(self, *args: Any) -> Any:
        self._build()
        return self._call(*args)

    def _build(self) -> None:
        if self._call is None:
            inner = tf.function(self._fn, input_signature=self._signature, autograph=False)
            inner = inner.get_concrete_function()
            here = tf_context.context().host_address_space() + "/device:CPU:0"

            @tf.function(input_signature=self._signature, autograph=False)
            def call(*args: Any) -> Any:
                with tf.device(here):  # the placer moves it beside the resources it holds
                    out = remote_call(self.device, inner, list(args), self._tout)
                return out[0] if len(out) == 1 else out

            self._call = call
