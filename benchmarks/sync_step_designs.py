"""Two ways to coordinate a synchronous PS step, everything else equal: which is cheaper?

A lead for issue 27 (``sync`` costs 1.86 x MWMS per update): ``SyncTrainer``'s ps spends
most of its share of a step handing work between threads, not running ops. This measures
a different design against the trainer's own, on one loopback cluster (1 ps, 2 workers,
the chief only starting the loops), K = N = 2, the digits-sized MLP (64-32-10) on a fixed
batch, plain SGD:

* ``loop``: the trainer's design. Each worker loop's one round trip per step (a
  ``RemoteCall`` to the ps) puts its gradient into a queue, takes the loop's next permit and
  reads the parameters; an aggregator loop on the ps (one ``RemoteCall`` from the chief for
  all the updates) takes K gradients, applies their average, bumps the version and issues
  the next step's permits.
* ``apply_in_call``: no aggregator. The same round trip adds a fresh gradient to an
  accumulator inside a ``tf.CriticalSection``; the call that brings the K-th applies the
  average, bumps the version and issues the permits itself, so no other thread is woken
  to do it. Stale gradients (a label below the version) are dropped and counted, as in the
  trainer.

Both run the same worker loop (one ``ClusterCoordinator`` closure per loop, each step one
``RemoteCall``); the figures are per applied update: wall time, and each process's CPU
time. ``--trainer`` adds ``SyncTrainer`` itself (``benchmarks/sync_chief.py``'s chief,
Keras model and optimizer, 100 steps per call) to the rotation. Designs alternate, round
by round.

    python benchmarks/sync_step_designs.py [--updates N] [--rounds R] [--trainer] [--json]

This is a measurement of the step's coordination only, not a trainer: it has no backup
workers, no timeout, no failure handling and no statistics.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # tests.runtime.sync.cluster

from sync_chief import run_chief  # noqa: E402 - beside this file; imports no TensorFlow

DESIGNS = ("loop", "apply_in_call")
SHAPES = [(64, 32), (32,), (32, 10), (10,)]
LR = 0.1


class Step:
    """The ps's state for one design and the functions that run a step (imports TF)."""

    def __init__(self, design: str, n: int) -> None:
        import tensorflow as tf

        self.tf, self.design, self.n, self.k = tf, design, n, n
        self.ps = "/job:ps/replica:0/task:0/device:CPU:0"
        self.sizes = [int(tf.TensorShape(s).num_elements()) for s in SHAPES]
        self.total = sum(self.sizes)
        with tf.device(self.ps):
            self.params = [tf.Variable(tf.random.stateless_normal(s, [i, 0]) * 0.1) for i, s in enumerate(SHAPES)]
            self.acc = tf.Variable(tf.zeros([self.total]))
            self.count = tf.Variable(0, dtype=tf.int64)
            self.version = tf.Variable(0, dtype=tf.int64)
            self.dropped = tf.Variable(0, dtype=tf.int64)
            self.section = tf.CriticalSection(shared_name="bench_step")
            self.permits = [tf.raw_ops.FIFOQueueV2(component_types=[tf.int64], shapes=[[]], capacity=-1,
                                                   shared_name=f"bench_permit_{j}") for j in range(n)]
            self.grads = tf.raw_ops.FIFOQueueV2(component_types=[tf.int64, tf.float32],
                                                shapes=[[], [self.total]], capacity=-1, shared_name="bench_grads")

    def apply(self, flat_sum: Any) -> Any:
        """Apply the average, bump the version, issue each loop's permit of the new one."""
        tf = self.tf
        pieces = tf.split(flat_sum / self.k, self.sizes)
        updated = [p.assign_sub(LR * tf.reshape(g, s)) for p, g, s in zip(self.params, pieces, SHAPES, strict=True)]
        with tf.control_dependencies(updated):
            new = self.version.assign_add(1)
        with tf.control_dependencies([tf.raw_ops.QueueEnqueueV2(handle=h, components=[new]) for h in self.permits]):
            return tf.identity(new)

    def add_fresh(self, label: Any, flat: Any) -> Any:
        """``apply_in_call``, in the critical section: count a fresh gradient in; the K-th
        applies the step."""
        tf = self.tf

        def close() -> Any:
            applied = self.apply(self.acc.read_value())
            with tf.control_dependencies([applied]), tf.control_dependencies(
                    [self.acc.assign(tf.zeros([self.total])), self.count.assign(0)]):
                return tf.constant(1, tf.int64)

        def take() -> Any:
            with tf.control_dependencies([self.acc.assign_add(flat)]):
                taken = self.count.assign_add(1)
            return tf.cond(tf.equal(taken, self.k), close, lambda: tf.constant(0, tf.int64))

        return tf.cond(tf.equal(label, self.version.read_value()), take, lambda: self.dropped.assign_add(1) * 0)

    def enqueue(self, label: Any, flat: Any) -> Any:
        """``loop``: hand the gradient to the aggregator."""
        tf = self.tf
        with tf.control_dependencies([tf.raw_ops.QueueEnqueueV2(handle=self.grads, components=[label, flat])]):
            return tf.constant(1, tf.int64)

    def swap(self, j: int) -> Any:
        """Loop ``j``'s round trip: its gradient in, its next permit and the parameters out."""
        tf = self.tf

        def swap(label: Any, flat: Any) -> Any:
            with tf.device(self.ps):
                if self.design == "apply_in_call":
                    def put() -> Any:
                        return self.section.execute(lambda: self.add_fresh(label, flat))
                else:
                    def put() -> Any:
                        return self.enqueue(label, flat)
                done = tf.cond(label >= 0, put, lambda: tf.constant(0, tf.int64))
                with tf.control_dependencies([done]):
                    permit = tf.raw_ops.QueueDequeueV2(handle=self.permits[j], component_types=[tf.int64])[0]
                with tf.control_dependencies([permit]):
                    values = [tf.identity(p.read_value()) for p in self.params]
                return [tf.ensure_shape(permit, []), *values]

        spec = [tf.TensorSpec([], tf.int64), tf.TensorSpec([self.total], tf.float32)]
        return tf.function(swap, input_signature=spec).get_concrete_function()

    def loop(self, j: int) -> Any:
        """Worker loop ``j`` (a coordinator closure): ``steps`` gradients, one round trip each."""
        from tfdist.runtime.sync.ps import remote_call

        tf, swap = self.tf, self.swap(j)
        tout = [tf.int64] + [tf.float32] * len(SHAPES)

        def loop(steps: Any) -> Any:
            x = tf.random.stateless_uniform((32, 64), [1, 2])
            y = tf.random.stateless_uniform((32,), [3, 4], 0, 10, tf.int32)
            out = remote_call(self.ps, swap, [tf.constant(-1, tf.int64), tf.zeros([self.total])], tout)
            permit, weights = out[0], out[1:]
            i = tf.constant(0, tf.int64)
            while i < steps:
                w = [tf.ensure_shape(t, s) for t, s in zip(weights, SHAPES, strict=True)]
                with tf.GradientTape() as tape:
                    tape.watch(w)
                    logits = tf.nn.relu(x @ w[0] + w[1]) @ w[2] + w[3]
                    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
                flat = tf.concat([tf.reshape(g, [-1]) for g in tape.gradient(loss, w)], 0)
                out = remote_call(self.ps, swap, [permit, flat], tout)
                permit, weights = out[0], out[1:]
                i += 1
            return i

        return tf.function(loop, input_signature=[tf.TensorSpec([], tf.int64)])

    def aggregate(self, steps: Any) -> Any:
        """``loop``'s aggregator: ``steps`` updates of exactly K fresh gradients each."""
        tf = self.tf
        with tf.device(self.ps):
            done = tf.constant(0, tf.int64)
            while done < steps:
                taken, flat_sum = tf.constant(0), tf.zeros([self.total])
                while taken < self.k:
                    label, flat = tf.raw_ops.QueueDequeueV2(handle=self.grads, component_types=[tf.int64, tf.float32])
                    fresh = tf.cast(tf.equal(tf.ensure_shape(label, []), self.version.read_value()), tf.float32)
                    flat_sum += tf.ensure_shape(flat, [self.total]) * fresh
                    taken += tf.cast(fresh, tf.int32)
                with tf.control_dependencies([self.apply(flat_sum)]):
                    done += 1
            return done


def chief(design: str, updates: int) -> None:
    """The chief of one run: builds the ps state and the loops, warms up, measures."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf

    from tfdist.runtime.sync.ps import RunOnPs

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)  # connects to the cluster
    step = Step(design, len(resolver.cluster_spec().as_dict()["worker"]))
    aggregator = RunOnPs(step.aggregate, step.ps, [tf.TensorSpec([], tf.int64)], [tf.int64])
    loops = [step.loop(j) for j in range(step.n)]
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)

    def run(steps: int) -> None:
        for h in step.permits:  # each loop's first call (no gradient) takes the current version's permit
            with tf.device(step.ps):
                tf.raw_ops.QueueEnqueueV2(handle=h, components=[step.version.read_value()])
        for loop in loops:
            coordinator.schedule(loop, args=(tf.constant(steps, tf.int64),))
        if design == "loop":
            aggregator(tf.constant(steps, tf.int64))
        coordinator.join()

    run(20)  # traced, warm
    print("READY", flush=True)
    v0, t0 = int(step.version.numpy()), time.monotonic()
    run(updates)
    wall, applied = time.monotonic() - t0, int(step.version.numpy()) - v0
    print("RESULT " + json.dumps({"ms_per_update": 1000 * wall / applied, "applied": applied,
                                  "dropped": int(step.dropped.numpy())}), flush=True)
    os._exit(0)  # the coordinator's threads would hold the exit


def one_run(design: str, updates: int) -> dict[str, Any]:
    if design == "trainer":
        argv = [sys.executable, str(ROOT / "benchmarks" / "sync_chief.py"), "--role-chief", "100"]
    else:
        argv = [sys.executable, __file__, "--role-chief", design]
    result, tasks = run_chief([*argv, "--updates", str(updates)], updates)
    return {"design": design, "ms_per_update": result["ms_per_update"], "task_cpu_ms": tasks,
            "dropped": result.get("dropped", 0), "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trainer", action="store_true", help="add SyncTrainer itself to the rotation")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--role-chief", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role_chief is not None:
        chief(args.role_chief, args.updates)
        return
    designs = [*DESIGNS, "trainer"] if args.trainer else list(DESIGNS)
    runs = []
    for rnd in range(args.rounds):
        for design in designs if rnd % 2 == 0 else designs[::-1]:
            r = one_run(design, args.updates)
            runs.append(r)
            print(f"round {rnd} {design}: {r['ms_per_update']:.2f} ms/update, tasks {r['task_cpu_ms']}, "
                  f"load {r['load']:.1f}", file=sys.stderr, flush=True)
    summary = {d: {"ms_per_update": round(statistics.median(r["ms_per_update"] for r in runs if r["design"] == d), 2),
                   "ps_cpu_ms": round(statistics.median(r["task_cpu_ms"]["ps-0"] for r in runs if r["design"] == d), 2)}
               for d in designs}
    print(json.dumps({"median": summary, "runs": runs, "updates": args.updates}, indent=None if args.json else 1))


if __name__ == "__main__":
    main()
